"""Sliced simulated jobs: which jobs get Kueue's slice annotations, and that Kueue's TAS and Atoll
(through the controller's own decision path) both keep each slice inside one island."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest

from admission.simulator._deployed import DeployedAtoll
from admission.simulator._jobs import Job, make_job
from admission.simulator._policies import Attempt, KueueBestFitPolicy, make_policies
from admission.simulator._sim import STATUS_DONE, SimSettings, build_snapshots, prepare_workload, simulate
from admission.simulator._slicing import Slicing, slice_workload, sliced_jobs
from tests.admission.simulator.test_sim import CLIQUE, DOC, SU
from topology import ClusterModel, SliceLayer, Snapshot

SLICE = Slicing(CLIQUE, 4)
_ids = itertools.count()


def cluster() -> ClusterModel:
    """2 SUs × 3 islands of 6 nodes × 4 GPUs: an island holds 6 pods, so one slice of 4, never two."""
    return ClusterModel.model_validate({"name": "test", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "generate": [{"level": SU, "count": 2, "prefix": "u"}, {"level": CLIQUE, "count": 3, "prefix": "r"},
                     {"level": "kubernetes.io/hostname", "count": 6, "prefix": "n"}],
    }]})


def job(arrival: float, duration: float, gpus: int, kind: str = "training") -> Job:
    return make_job(f"j{next(_ids)}", arrival, duration, gpus, 4, kind)  # type: ignore[arg-type]


def workload(n: int = 160, seed: int = 3) -> list[Job]:
    """Small jobs that break islands up, and jobs of 8 and 12 pods (2 and 3 slices) that no island holds."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(1 / 60)
        out.append(job(t, rng.uniform(300, 3000), rng.choice([4, 4, 8, 8, 16, 32, 32, 48])))
    return out


def clique_of(snap: Snapshot, node: int) -> str:
    return str(snap.paths[node][snap.level_index(CLIQUE)])


def slices_in_path_order(snap: Snapshot, nodes: list[int], pods: list[int], size: int) -> list[set[str]]:
    """The cliques each consecutive run of ``size`` pods (in topology path order) sits on."""
    cliques = [clique_of(snap, n) for n, k in sorted(zip(nodes, pods)) for _ in range(k)]
    assert len(cliques) % size == 0
    return [set(cliques[i:i + size]) for i in range(0, len(cliques), size)]


def test_only_training_jobs_larger_than_an_island_whose_count_the_size_divides_are_sliced() -> None:
    model = cluster()
    snaps = build_snapshots(model)
    jobs = [job(0, 100, 32), job(1, 100, 48), job(2, 100, 16), job(3, 100, 40), job(4, 100, 32, "inference")]
    work = slice_workload(prepare_workload(model, jobs), SLICE, snaps)
    by_pods = {(sh.pods, sh.kind): sh.slices for _, sh in work.shapes}
    assert by_pods[(8, "training")] == (SliceLayer(CLIQUE, 4),)
    assert by_pods[(12, "training")] == (SliceLayer(CLIQUE, 4),)
    assert by_pods[(4, "training")] == ()       # fits one island
    assert by_pods[(10, "training")] == ()      # 10 pods are not whole slices of 4
    assert by_pods[(8, "inference")] == ()      # replicas are spread, not ganged
    assert sliced_jobs(work) == 2


def test_a_slice_level_no_flavor_has_is_named() -> None:
    model = cluster()
    with pytest.raises(ValueError, match="--slice-level: no flavor has level 'example.com/rack'"):
        slice_workload(prepare_workload(model, [job(0, 1, 32)]), Slicing("example.com/rack", 4), build_snapshots(model))


@pytest.mark.parametrize("policy", ["kueue-bestfit", "kueue-required"])
def test_kueues_tas_keeps_every_slice_of_a_sliced_job_in_one_island(policy: str) -> None:
    model = cluster()
    snap = build_snapshots(model)[0]
    work = slice_workload(prepare_workload(model, workload()), SLICE, [snap])
    (pol,) = make_policies([policy], DOC, seed=1)
    assert isinstance(pol, KueueBestFitPolicy)
    seen: list[list[set[str]]] = []
    attempt = pol.attempt

    def recording(snapshot: Snapshot, shape: Any, **kw: Any) -> Attempt:
        out = attempt(snapshot, shape, **kw)
        if out.outcome == "admit" and shape.slices:
            assert out.nodes is not None and out.pods is not None
            seen.append(slices_in_path_order(snapshot, out.nodes.tolist(), out.pods.tolist(), shape.slices[0].size))
        return out

    pol.attempt = recording  # type: ignore[method-assign]
    res = simulate(model, work, pol)
    assert (res.status == STATUS_DONE).all()
    assert len(seen) == sliced_jobs(work) > 20
    assert all(len(cliques) == 1 for slices in seen for cliques in slices)
    assert all(len(set().union(*slices)) >= 2 for slices in seen)  # each job spans islands, slice by slice


@pytest.mark.parametrize("policy", ["atoll-strict", "atoll-elastic"])
def test_atoll_reads_the_slice_annotations_on_the_workload_and_keeps_every_slice_in_one_island(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = cluster()
    snap = build_snapshots(model)[0]
    work = slice_workload(prepare_workload(model, workload()), SLICE, [snap])
    seen: list[list[set[str]]] = []
    templates: list[dict[str, str]] = []
    decide = DeployedAtoll.decide

    def recording(self: DeployedAtoll, j: int, obj: dict[str, Any], now: float) -> Any:
        verdict = decide(self, j, obj, now)
        ann = obj["spec"]["podSets"][0]["template"]["metadata"]["annotations"]
        if verdict.outcome == "admit" and "kueue.x-k8s.io/podset-slice-size" in ann:
            templates.append(ann)
            (placed,) = verdict.placements
            names = list(placed.nodes)
            seen.append(slices_in_path_order(snap, [snap.node_index[n] for n in names], [placed.nodes[n] for n in names], 4))
        return verdict

    monkeypatch.setattr(DeployedAtoll, "decide", recording)
    (pol,) = make_policies([policy], DOC, seed=1)
    res = simulate(model, work, pol, settings=SimSettings(enforcement="exact"))
    assert (res.status == STATUS_DONE).all()  # strict too: without slices no island could ever hold 8 pods
    assert len(seen) == sliced_jobs(work) > 20
    assert all(a["kueue.x-k8s.io/podset-slice-required-topology"] == CLIQUE and a["kueue.x-k8s.io/podset-slice-size"] == "4"
               for a in templates)
    assert all(len(cliques) == 1 for slices in seen for cliques in slices)
    assert all(len(set().union(*slices)) >= 2 for slices in seen)


def test_without_slices_a_strict_profile_places_the_jobs_no_island_holds_in_one_scalable_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    model = cluster()
    work = prepare_workload(model, workload())
    placed: list[str] = []
    decide = DeployedAtoll.decide

    def recording(self: DeployedAtoll, j: int, obj: dict[str, Any], now: float) -> Any:
        verdict = decide(self, j, obj, now)
        if verdict.outcome == "admit" and obj["spec"]["podSets"][0]["count"] > 6:
            (ps,) = verdict.placements
            placed.append(ps.domain_level)
        return verdict

    monkeypatch.setattr(DeployedAtoll, "decide", recording)
    (pol,) = make_policies(["atoll-strict"], DOC, seed=1)
    res = simulate(model, work, pol)
    big = np.asarray([work.shapes[s][1].pods > 6 for s in work.shape.tolist()])
    assert big.sum() > 20
    assert (res.status[big] == STATUS_DONE).all()  # never rejected for being larger than an island
    assert len(placed) == big.sum() and set(placed) == {SU}

"""The sweep: runs are functions of their key (order and process count do not matter), ties re-drawn
per seed without changing the fabric."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from admission.simulator._cost import CostParams
from admission.simulator._sim import build_snapshots
from admission.simulator._sweep import SweepSpec, WorkloadSpec, run_sweep, shuffle_ties, with_gpu_perf
from policies import ProfilesDocument
from topology import ClusterModel

CLUSTER = {
    "name": "tiny",
    "flavors": [{
        "name": "gb200", "topology": "nvl72-fabric",
        "levels": [{"label": "network.example.com/su", "bandwidthGBps": 50}, {"label": "nvidia.com/gpu.clique", "bandwidthGBps": 1800},
                   {"label": "kubernetes.io/hostname", "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "144", "memory": "1800Gi", "pods": 110},
        "generate": [{"level": "network.example.com/su", "count": 2}, {"level": "nvidia.com/gpu.clique", "count": 3},
                     {"level": "kubernetes.io/hostname", "count": 4}],
    }],
}
PROFILES = {"defaultProfile": "elastic", "profiles": {
    "strict": {"requiredLevel": "nvidia.com/gpu.clique", "retry": {"initialSeconds": 30, "maxSeconds": 600}},
    "elastic": {"preferredLevel": "nvidia.com/gpu.clique", "maxSpanLevel": "network.example.com/su", "relaxAfterSeconds": 300},
}}


@pytest.fixture
def spec() -> SweepSpec:
    cluster = ClusterModel.model_validate(CLUSTER)
    return SweepSpec(cluster, WorkloadSpec(jobs=40), ("count-only", "kueue-bestfit", "atoll-elastic"),
                     ProfilesDocument.model_validate(PROFILES), loads=(0.8, 1.3), seeds=(0, 1), cost=CostParams(overlap={"training": 0.5}),
                     gpu_perf="normal:0.05")


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        for field in ("status", "start", "end", "arrival"):
            np.testing.assert_array_equal(getattr(a[key], field), getattr(b[key], field), err_msg=f"{key} {field}")
        assert {k: v for k, v in a[key].summary.items() if k not in ("wall_s", "decisions_per_s")} == \
            {k: v for k, v in b[key].summary.items() if k not in ("wall_s", "decisions_per_s")}


def test_runs_do_not_depend_on_their_order_nor_on_the_process_count(spec: SweepSpec) -> None:
    keys = spec.keys()
    forward, _ = run_sweep(spec, workers=1, order=keys)
    backward, _ = run_sweep(spec, workers=1, order=list(reversed(keys)))
    shuffled, _ = run_sweep(spec, workers=2, order=[keys[i] for i in np.random.default_rng(7).permutation(len(keys))])
    _same(forward, backward)
    _same(forward, shuffled)
    assert len(forward) == 2 * 2 * 3
    # seeds differ (a new synthetic workload each), loads differ
    assert not np.array_equal(forward[(0.8, 0, "count-only")].arrival, forward[(0.8, 1, "count-only")].arrival)
    assert not np.array_equal(forward[(0.8, 0, "count-only")].arrival, forward[(1.3, 0, "count-only")].arrival)


def test_shuffled_ties_keep_the_fabric_and_change_the_order() -> None:
    model = with_gpu_perf(ClusterModel.model_validate(CLUSTER), "normal:0.05", seed=3)
    assert shuffle_ties(model, 0) is model
    a, b = build_snapshots(model)[0], build_snapshots(shuffle_ties(model, 5))[0]
    assert a.total_gpus() == b.total_gpus() and a.num_nodes == b.num_nodes
    assert sorted(a.node_names) == sorted(b.node_names)
    # the same racks (as multisets of node speeds) under the same scalable units, in another order
    def racks(s):  # noqa: ANN001, ANN202
        lv = s.level_index("nvidia.com/gpu.clique")
        su = s.level_index("network.example.com/su")
        out = Counter()
        for d in np.unique(s.node_dom[lv]):
            nodes = np.flatnonzero(s.node_dom[lv] == d)
            out[(int(s.node_dom[su, nodes[0]]) >= 0, tuple(sorted(s.perf[nodes].round(4))))] += 1
        return out
    assert racks(a) == racks(b)
    assert a.perf.tolist() != b.perf.tolist()


def test_a_run_stopped_by_the_invariant_is_reported_across_processes(spec: SweepSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from admission.simulator import _sweep
    from admission.simulator._sim import InvariantViolation
    from admission.simulator._sweep import RunFailed

    def stop(*_a: object, **_k: object) -> None:
        raise InvariantViolation("atoll-elastic", 42.0, ())

    monkeypatch.setattr(_sweep, "simulate", stop)
    with pytest.raises(RunFailed, match=r"atoll-elastic, seed 1, load 0.8: atoll-elastic: invariant violated at t=42 s"):
        run_sweep(spec, workers=1, order=[(0.8, 1, "atoll-elastic")])
    with pytest.raises(RunFailed, match="invariant violated"):  # the same from a worker process
        run_sweep(spec, workers=2, order=[(0.8, 1, "atoll-elastic"), (1.3, 1, "atoll-elastic")])
    assert pickle.loads(pickle.dumps(RunFailed("x"))).args == ("x",)


def test_shuffled_ties_keep_a_missing_level_label_missing() -> None:
    levels = [{"label": "rack"}, {"label": "kubernetes.io/hostname"}]
    nodes = [{"name": f"n{i}", "labels": {"rack": f"r{i % 2}"} if i else {}, "allocatable": {"nvidia.com/gpu": 8}} for i in range(6)]
    model = ClusterModel.model_validate({"name": "c", "flavors": [{"name": "f", "topology": "t", "levels": levels, "nodes": nodes}]})
    for seed in (1, 2, 3):
        shuffled = shuffle_ties(model, seed).flavors[0].build_nodes()
        assert sum("rack" not in n.labels for n in shuffled) == 1
        sizes = Counter(n.labels["rack"] for n in shuffled if "rack" in n.labels)
        assert set(sizes) == {"r0", "r1"} and sorted(sizes.values()) == [2, 3]  # the same racks, maybe under each other's name


def test_the_tail_model_draws_a_narrow_body_and_slow_outliers_per_gpu() -> None:
    import statistics

    from topology import ClusterModelError

    model = ClusterModel.model_validate({"name": "t", "flavors": [{
        "name": "f", "topology": "t", "levels": [{"label": "r"}],
        "nodeAllocatable": {"nvidia.com/gpu": 1, "cpu": "8", "memory": "8Gi", "pods": 10},
        "generate": [{"level": "r", "count": 20}, {"level": "kubernetes.io/hostname", "count": 500}]}]})
    one_gpu = [n.perf for n in with_gpu_perf(model, "tail:0.015:0.01:1.5", seed=1).flavors[0].build_nodes()]
    outliers = [p for p in one_gpu if p < 1 / 1.1 + 1e-9]
    assert 40 <= len(outliers) <= 170  # 1 % of 10,000 GPUs, with room for the draw (and the body's far tail)
    assert min(one_gpu) >= 1 / 1.5 - 1e-4
    body = [p for p in one_gpu if p > 0.93]
    assert statistics.pstdev(body) == pytest.approx(0.015, rel=0.1)
    with pytest.raises(ClusterModelError, match="tail:BODY_STDDEV:SHARE:WORST"):
        with_gpu_perf(model, "tail:0.01")


def test_a_node_runs_at_its_slowest_gpu_so_big_nodes_meet_the_tail_more_often() -> None:
    def nodes(gpus: int) -> list[float]:
        model = ClusterModel.model_validate({"name": "t", "flavors": [{
            "name": "f", "topology": "t", "levels": [{"label": "r"}],
            "nodeAllocatable": {"nvidia.com/gpu": gpus, "cpu": "8", "memory": "8Gi", "pods": 10},
            "generate": [{"level": "r", "count": 10}, {"level": "kubernetes.io/hostname", "count": 300}]}]})
        return [n.perf for n in with_gpu_perf(model, "tail:0.015:0.02:1.5", seed=2).flavors[0].build_nodes()]

    slow = lambda perfs: sum(p < 1 / 1.1 + 1e-9 for p in perfs) / len(perfs)  # noqa: E731
    assert slow(nodes(8)) > 3 * slow(nodes(1))  # 1 − 0.98⁸ ≈ 15 % of 8-GPU nodes vs 2 % of 1-GPU nodes


def test_each_seed_draws_its_own_gpus() -> None:
    from admission.simulator._sweep import _prepared

    spec = SweepSpec(ClusterModel.model_validate(CLUSTER), WorkloadSpec(None, "synthetic", jobs=20), ("count-only",),
                     ProfilesDocument.model_validate(PROFILES),
                     gpu_perf="tail:0.015:0.05:1.5")
    speeds = [sorted(n.perf for f in _prepared(spec, None, seed)[0].flavors for n in f.build_nodes()) for seed in (0, 1, 0)]
    assert speeds[0] != speeds[1] and speeds[0] == speeds[2]

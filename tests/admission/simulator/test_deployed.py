"""The simulator runs Atoll as deployed: the controller's decision and ledger, pods bound by a
scheduler model, and the invariant checked after every event, so a faulty ledger is caught."""

from __future__ import annotations

import numpy as np
import pytest

from admission.controller import ClusterCache, Ledger, pod_usage
from admission.controller._invariant import ClaimSet, Demand, place_owed
from admission.controller._ledger import Witness
from admission.simulator._deployed import DeployedAtoll
from admission.simulator._jobs import make_job
from admission.simulator._policies import make_policies
from admission.simulator._sim import STATUS_DONE, InvariantViolation, SimSettings, prepare_workload, simulate
from policies import load_profiles
from topology import ClusterModel, ResourceVector, Snapshot

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 600}}}}
""")


def one_island(nodes: int = 4) -> ClusterModel:
    return ClusterModel.model_validate({"name": "one-island", "flavors": [{
        "name": "f", "topology": "t", "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "generate": [{"level": SU, "count": 1, "prefix": "u"}, {"level": CLIQUE, "count": 1, "prefix": "r"},
                     {"level": "kubernetes.io/hostname", "count": nodes, "prefix": "n"}]}]})


class ForgetfulLedger(Ledger):
    """The ledger before the owed-pods fix: a PodSet's pods are counted on their planned nodes
    only, so once another Workload's pods bind there they are forgotten (not re-homed)."""

    def witness(self, snapshot: Snapshot, *, exclude_uid: str | None = None) -> Witness:
        w = super().witness(snapshot, exclude_uid=exclude_uid)
        demands = [Demand(d.pods, d.shape, d.planned, np.empty(0, dtype=np.int64)) for d in w.demands]
        placed, missing, used = place_owed(snapshot.free, demands)
        return Witness(w.rows, demands, placed, missing, used)

    def claims(self, snapshot: Snapshot, **_: object) -> ClaimSet:
        return ClaimSet.empty(snapshot.num_nodes)


def forgetful(cache: ClusterCache) -> Ledger:
    return ForgetfulLedger(cache.gpu_resource, bound=cache.bound_pods, node_labels=cache.node_labels)


def two_gangs(**settings: object):
    model = one_island()
    jobs = [make_job("a", 0.0, 100.0, 8, 4), make_job("b", 0.0, 100.0, 8, 4)]  # two 2-node gangs, one 4-node island
    work = prepare_workload(model, jobs)
    (policy,) = make_policies(["atoll-strict"], DOC, seed=0)
    return model, work, policy, SimSettings(**settings)  # type: ignore[arg-type]


def test_the_invariant_catches_a_ledger_that_forgets_pods_bound_elsewhere_under_an_adversarial_scheduler() -> None:
    model, work, policy, settings = two_gangs(scheduler="adversarial")
    with pytest.raises(InvariantViolation) as err:
        simulate(model, work, policy, settings=settings, ledger=forgetful)
    # the first gang's pods took the second's planned nodes; the second still owes 2 pods
    assert err.value.workloads == ("sim/job-1",)
    assert {v.kind for v in err.value.violations} == {"uncounted"}
    assert "sim/job-1 podSets[main]: 2 pods owed, the witness counts 0" in str(err.value)
    assert err.value.checks >= 1 and f"(check {err.value.checks}), 1 violations" in str(err.value)


def test_the_real_ledger_runs_the_same_jobs_clean_under_the_adversarial_scheduler() -> None:
    model, work, policy, settings = two_gangs(scheduler="adversarial")
    res = simulate(model, work, policy, settings=settings)
    assert res.status.tolist() == [STATUS_DONE, STATUS_DONE]
    assert res.start.tolist() == [0.0, 0.0]
    # checked after every bind and release, and owed pods made the ledger's witness do the work
    assert res.invariant_checks >= 4 and res.invariant_violations == 0
    assert 0 <= res.invariant_full_checks <= res.invariant_checks


def test_under_exact_enforcement_pods_go_to_their_planned_nodes_so_even_the_forgetful_ledger_holds() -> None:
    model, work, policy, settings = two_gangs(scheduler="adversarial", enforcement="exact")
    res = simulate(model, work, policy, settings=settings, ledger=forgetful)
    assert res.status.tolist() == [STATUS_DONE, STATUS_DONE]


def test_a_deployed_policy_decides_through_the_controller_and_writes_back_what_it_wrote() -> None:
    model = one_island()
    atoll = DeployedAtoll("atoll-strict", "strict", DOC, model)
    snap = Snapshot("f", model.flavors[0].level_specs(), model.flavors[0].build_nodes())
    obj = atoll.workload(0, 0, 2, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024, pods=1), "training")
    verdict = atoll.decide(0, obj, 0.0)
    assert verdict.outcome == "admit"
    entry = obj["status"]["admissionChecks"][0]
    assert entry["state"] == "Ready" and entry["podSetUpdates"] == verdict.podset_updates
    assert entry["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: "f-u0-r0"}
    assert [o.pods for o in atoll.owed(0, snap)] == [2]  # Ready, not bound yet: owed
    assert atoll.ledger.owed(atoll.cache.snapshot("f"))[0].pods == 2
    bound = atoll.bind(0, snap)
    assert sum(k for _, k in bound) == 2 and atoll.owed(0, snap) == []
    assert atoll.ledger.owed(atoll.cache.snapshot("f")) == []  # the cache saw the pods, the ledger let go
    pods = [p for ps in atoll.admitted[0].podsets for p in ps.pods]
    assert len(pods) == 2  # each pod in the cache as the cache reads a pod object
    assert [atoll.cache.pods[p["metadata"]["uid"]] for p in pods] == [pod_usage(p, "nvidia.com/gpu") for p in pods]


def test_each_workload_is_read_as_parse_workload_reads_it() -> None:
    """The simulator reads a shape's Workload once and renames it per job: the view each job's
    decision gets equals ``parse_workload`` on that job's own Workload."""
    from admission.controller import parse_workload

    model = one_island()
    deployed = DeployedAtoll("atoll-strict", "strict", DOC, model)
    per_pod = ResourceVector(gpu=4, cpu_milli=8000, memory_mib=65536)
    for job, (pods, kind) in enumerate([(2, "training"), (2, "training"), (1, "inference"), (2, "training")]):
        obj = deployed.workload(job, 0, pods, per_pod, kind)
        assert deployed.views[job] == parse_workload(obj, gpu_resource=deployed.settings.kueue.gpu_resource)
    assert deployed.views[0] != deployed.views[1]  # same shape, own name and uid
    assert len(deployed._views) == 2  # two shapes, each read once


def test_the_simulator_decides_without_explanations_and_gets_the_controllers_verdicts() -> None:
    """``Decider(explain=False)``, as the simulator runs it, gives the controller's verdict but the
    losing domains: same outcome, message, podSetUpdates and retry."""
    from admission.controller import Decider

    model = one_island()
    atoll = DeployedAtoll("atoll-strict", "strict", DOC, model)
    full = Decider(atoll.cache, atoll.ledger, atoll.settings)
    per_pod = ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024, pods=1)
    seen = set()
    for job, pods in enumerate([2, 3, 2, 1]):  # admit, wait (3 of the 2 nodes left), admit, wait (island full)
        obj = atoll.workload(job, 0, pods, per_pod, "training")
        want = full.evaluate(obj, f"d{job}", 0.0)
        got = atoll.decider.evaluate(obj, f"d{job}", 0.0)
        assert (got.outcome, got.message, got.podset_updates, got.retry_after, got.reason) == \
               (want.outcome, want.message, want.podset_updates, want.retry_after, want.reason)
        assert not got.why_not
        seen.add(want.outcome)
        if want.outcome == "wait":
            assert want.why_not  # the controller's record names the losing domains
        atoll.decide(job, obj, 0.0)  # written back: the next Workload sees this one owed
    assert seen == {"admit", "wait"}


def test_a_selector_picks_the_nodes_whose_labels_match_it() -> None:
    from admission.simulator._deployed import _selector_nodes
    from topology import HOSTNAME_LABEL

    model = ClusterModel.model_validate({"name": "two-sus", "flavors": [{
        "name": "f", "topology": "t", "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "generate": [{"level": SU, "count": 2, "prefix": "u"}, {"level": CLIQUE, "count": 3, "prefix": "r"},
                     {"level": "kubernetes.io/hostname", "count": 2, "prefix": "n"}]}]})
    snap = Snapshot("f", model.flavors[0].level_specs(), model.flavors[0].build_nodes())

    def reference(selector: list[tuple[str, str]]) -> list[int]:
        return [i for i, name in enumerate(snap.node_names)
                if all((snap.labels[i].get(k, name) if k == HOSTNAME_LABEL else snap.labels[i].get(k)) == v for k, v in selector)]

    clique = snap.paths[7][1]
    su = snap.paths[7][0]
    for selector in ([], [(SU, su)], [(CLIQUE, clique)], [(SU, su), (CLIQUE, clique)], [(HOSTNAME_LABEL, snap.node_names[3])],
                     [(CLIQUE, clique), (HOSTNAME_LABEL, snap.node_names[7])], [(CLIQUE, clique), (HOSTNAME_LABEL, snap.node_names[0])],
                     [(CLIQUE, "nowhere")], [(HOSTNAME_LABEL, "nowhere")], [(SU, su), ("zone", "z")]):
        assert _selector_nodes(snap, selector).tolist() == reference(selector), selector
    assert len(reference([(SU, su), (CLIQUE, clique)])) == 2 and len(reference([(SU, su)])) == 6


def test_the_fabric_gauges_count_an_admitted_placement_as_used_and_a_wait_as_nothing() -> None:
    model = one_island()
    atoll = DeployedAtoll("atoll-strict", "strict", DOC, model)
    per_pod = ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024, pods=1)
    admitted = atoll.decide(0, atoll.workload(0, 0, 2, per_pod, "training"), 0.0)
    assert admitted.outcome == "admit"
    assert [(f, free) for f, free, _ in admitted.fabric] == [("f", 8)]  # 16 GPUs less the new 2 × 4
    assert [(f, free) for f, free, _ in admitted.fabric] == [("f", 8)]  # asked again: counted once
    assert atoll.cache.snapshot("f").free_gpus() == 16  # on a fork: the cache's own snapshot holds what is bound (nothing yet)
    waiting = atoll.decider.evaluate(atoll.workload(1, 0, 3, per_pod, "training"), "d1", 0.0)
    assert waiting.outcome == "wait"
    assert [(f, free) for f, free, _ in waiting.fabric] == [("f", 8)]  # the first one's owed pods, nothing new


def test_each_flavor_s_jobs_request_its_own_accelerator_through_the_deployed_controller() -> None:
    """On the bundled mixed-accelerator cluster, an MI300X job's Workload and pods request
    amd.com/gpu and a Gaudi job's habana.ai/gaudi, Kueue's assignment names that resource, and the
    controller's cache and ledger count them on the flavor's nodes."""
    from pathlib import Path

    from admission.controller import parse_workload
    from policies import load_profiles_file
    from topology import load_cluster_model

    config = Path(__file__).resolve().parents[3] / "config"
    model = load_cluster_model(config / "clusters" / "mixed-accelerators.yaml")
    doc = load_profiles_file(config / "kueue" / "mixed-accelerators" / "profiles.yaml")
    deployed = DeployedAtoll("atoll-strict", "strict", doc, model)
    assert deployed.cache.gpu_resource == ("nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi")
    per_pod = ResourceVector(gpu=2, cpu_milli=8000, memory_mib=65536, pods=1)
    for job, (name, resource) in enumerate([("h100", "nvidia.com/gpu"), ("mi300x", "amd.com/gpu"), ("gaudi3", "habana.ai/gaudi")]):
        flavor = deployed.flavor_names.index(name)
        obj = deployed.workload(job, flavor, 4, per_pod, "training")
        requests = obj["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
        assert requests[resource] == "2" and set(requests) & {"nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi"} == {resource}
        assert obj["status"]["admission"]["podSetAssignments"][0]["flavors"] == {resource: name}
        assert deployed.views[job] == parse_workload(obj, gpu_resource=deployed.cache.gpu_resource)
        assert deployed.views[job].podsets[0].per_pod.gpu == 2
        assert deployed.decide(job, obj, 0.0).outcome == "admit"
        snap = Snapshot(name, model.flavors[flavor].level_specs(), model.flavors[flavor].build_nodes())
        assert sum(k for _, k in deployed.bind(job, snap)) == 4
        pods = [p for ps in deployed.admitted[job].podsets for p in ps.pods]
        assert all(p["spec"]["containers"][0]["resources"]["requests"][resource] == "2" for p in pods)
        held = sum(deployed.cache.pods[p["metadata"]["uid"]].usage.gpu for p in pods)
        assert held == 8  # the cache reads the flavor's resource on its pods: a controller counting only nvidia.com/gpu read 0
        assert deployed.ledger.owed(deployed.cache.snapshot(name)) == []


def half_draining(busy: bool) -> ClusterModel:
    """1 SU × 2 islands × 2 nodes × 4 GPUs; island r0's nodes are marked ``draining`` in the model;
    with ``busy``, island r1's are full."""
    return ClusterModel.model_validate({"name": "half-draining", "flavors": [{
        "name": "f", "topology": "t", "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "nodes": [{"name": f"r{r}n{n}", "labels": {SU: "u0", CLIQUE: f"r{r}"}, "draining": r == 0,
                   "used": {"nvidia.com/gpu": 4 if r == 1 and busy else 0}} for r in range(2) for n in range(2)]}]})


def test_a_node_the_cluster_model_drains_takes_no_new_placement_through_the_deployed_controller() -> None:
    """The model's ``draining`` reaches the controller as the node label an admin sets, so the
    deployed Atoll leaves the node out as the engine and Kueue's policies in the simulator do."""
    per_pod = ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024, pods=1)
    busy = DeployedAtoll("atoll-strict", "strict", DOC, half_draining(busy=True))
    v = busy.decide(0, busy.workload(0, 0, 1, per_pod, "training"), 0.0)
    assert v.outcome == "wait"  # the only free GPUs are draining
    open_ = DeployedAtoll("atoll-strict", "strict", DOC, half_draining(busy=False))
    v = open_.decide(0, open_.workload(0, 0, 2, per_pod, "training"), 0.0)
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} == {"r1n0", "r1n1"}
    jobs = [make_job(f"j{i}", 0.0, 100.0, 8, 4) for i in range(3)]  # three gangs of one island each
    for name in ("atoll-strict", "kueue-bestfit"):
        (policy,) = make_policies([name], DOC, seed=0)
        res = simulate(half_draining(busy=False), prepare_workload(half_draining(busy=False), jobs), policy, settings=SimSettings())
        assert (res.status == STATUS_DONE).all() and sorted(res.start.tolist()) == [0.0, 100.0, 200.0], name  # one island: one at a time

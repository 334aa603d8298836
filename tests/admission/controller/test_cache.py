"""The cache turns API objects into per-flavor snapshots: membership by the flavor's nodeLabels,
levels from the mapped Topology with each level's link, usage from bound pods, and row updates
instead of rebuilds when only usage or health changes."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import ClusterCache, FlavorProblem, pod_usage
from admission.kube import NODES, PODS, RESOURCE_FLAVORS, TOPOLOGIES, newer
from policies import load_profiles

BLOCK, CLIQUE = "network.example.com/block", "nvidia.com/gpu.clique"


def node(name: str, clique: str, *, pool: str = "a", rv: str = "1", ready: bool = True, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": {"pool": pool, BLOCK: "b0", CLIQUE: clique}},
            "spec": spec, "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "64", "memory": "512Gi", "pods": "110"},
                                     "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pod(uid: str, node_name: str, gpus: int, *, phase: str = "Running", decision: str = "") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns", "annotations": {"atoll.dev/decision-id": decision} if decision else {}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "2"}}}]},
            "status": {"phase": phase}}


def cache(doc: str | None = None, *, levels: list[str] | None = None, topology_name: str | None = None) -> ClusterCache:
    c = ClusterCache()
    rf: dict[str, Any] = {"metadata": {"name": "gpu"}, "spec": {"nodeLabels": {"pool": "a"}}}
    if topology_name:
        rf["spec"]["topologyName"] = topology_name
    c.upsert(RESOURCE_FLAVORS, rf)
    c.upsert(TOPOLOGIES, {"metadata": {"name": "fabric"}, "spec": {"levels": [{"nodeLabel": lv} for lv in (levels or [BLOCK, CLIQUE])]}})
    c.set_profiles(load_profiles(doc or "flavors: {gpu: {topology: fabric}}\n"))
    for i, clique in enumerate(["c0", "c0", "c1", "c1"]):
        c.upsert(NODES, node(f"n{i}", clique))
    c.upsert(NODES, node("other-pool", "c9", pool="b"))
    return c


def test_members_levels_and_default_links() -> None:
    snap = cache().snapshot("gpu")
    assert snap.node_names == ("n0", "n1", "n2", "n3")  # the other pool's node is not this flavor's
    assert snap.level_labels == (BLOCK, CLIQUE, "kubernetes.io/hostname")
    assert list(snap.bandwidth_gbps) == [50.0, 1800.0, 1800.0]  # NDR between islands, NVLink 5 inside, the node as fast as its island


def test_links_are_overridable_per_level() -> None:
    doc = "flavors: {gpu: {topology: fabric, links: {network.example.com/block: {bandwidthGBps: 25}, kubernetes.io/hostname: {bandwidthGBps: 900}}}}\n"
    snap = cache(doc).snapshot("gpu")
    assert list(snap.bandwidth_gbps) == [25.0, 1800.0, 900.0]


def test_hostname_listed_in_the_topology_is_no_slower_than_the_island() -> None:
    snap = cache(levels=[BLOCK, CLIQUE, "kubernetes.io/hostname"]).snapshot("gpu")
    assert list(snap.bandwidth_gbps) == [50.0, 1800.0, 1800.0]


def test_bound_pods_are_usage_and_finished_ones_are_not() -> None:
    c = cache()
    c.upsert(PODS, pod("p1", "n0", 3))
    c.upsert(PODS, pod("p2", "n0", 1, phase="Succeeded"))
    snap = c.snapshot("gpu")
    assert snap.free[snap.node_index["n0"], 0] == 1 and snap.free_gpus() == 13
    c.upsert(PODS, pod("p1", "n0", 3, phase="Succeeded"))
    assert c.snapshot("gpu").free_gpus() == 16


def test_succeeded_pods_of_a_decision_are_kept_while_they_exist_and_hold_nothing() -> None:
    c = cache()
    told: list[str] = []
    c.pod_listener = told.append
    c.upsert(PODS, pod("p1", "n0", 3, decision="d1"))
    c.upsert(PODS, pod("p1", "n0", 3, phase="Succeeded", decision="d1"))
    assert told == ["d1", "d1"]  # bound, then succeeded in one step: never seen in neither state
    assert c.bound_pods("d1") == {} and c.succeeded_pods("d1") == {"": {"p1": "n0"}}
    assert c.snapshot("gpu").free_gpus() == 16
    c.upsert(PODS, pod("p2", "n1", 1, phase="Succeeded"))  # no decision: nothing to keep
    c.upsert(PODS, pod("p3", "n1", 1, phase="Failed", decision="d1"))  # failed: neither bound nor done
    assert sorted(c.succeeded) == ["p1"] and c.bound_pods("d1") == {} and told == ["d1", "d1"]
    c.replace_all(PODS, [])  # a relist without them: gone
    assert c.succeeded_pods("d1") == {} and c.succeeded == {} and told == ["d1", "d1", "d1"]


def test_usage_and_health_update_rows_labels_rebuild() -> None:
    c = cache()
    first = c.snapshot("gpu")
    c.upsert(PODS, pod("p1", "n2", 4))
    c.upsert(NODES, node("n1", "c0", rv="2", unschedulable=True))
    same = c.snapshot("gpu")
    assert same is first and same.free_gpus() == 8  # n2 full, n1 cordoned
    c.upsert(NODES, node("n3", "c2", rv="2"))  # relabelled: the structure changes
    rebuilt = c.snapshot("gpu")
    assert rebuilt is not first and rebuilt.generation > first.generation and len(rebuilt.domain_values[1]) == 3


def test_a_heartbeat_is_no_node_change_but_a_cordon_or_a_label_is() -> None:
    """What wakes parked Workloads (``Controller``): a Node version that placement reads differently."""
    c = cache()
    beat = node("n1", "c0", rv="2")
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:00:10Z"
    c.upsert(NODES, beat)
    assert not c.node_changed
    c.upsert(NODES, node("n1", "c0", rv="3", unschedulable=True))
    assert c.node_changed
    c.upsert(NODES, node("n1", "c5", rv="4", unschedulable=True))
    assert c.node_changed
    c.upsert(NODES, node("n1", "c5", rv="5", unschedulable=True))
    assert not c.node_changed


def test_a_kept_snapshot_reads_as_a_rebuilt_one_after_pod_and_node_changes() -> None:
    c = cache()
    kept = c.snapshot("gpu")
    c.upsert(PODS, pod("p1", "n2", 3))
    c.upsert(PODS, pod("p2", "n2", 1))
    c.upsert(PODS, pod("p3", "n0", 2))
    c.upsert(NODES, node("n0", "c0", rv="2", unschedulable=True))  # a node changed and its pods too
    c.delete(PODS, pod("p1", "n2", 3))
    c.upsert(PODS, pod("p4", "n1", 4))
    c.upsert(PODS, pod("p4", "n1", 4, phase="Succeeded"))
    now = c.snapshot("gpu")
    assert now is kept
    c.invalidate()
    rebuilt = c.snapshot("gpu")
    assert rebuilt is not kept
    assert (now.free == rebuilt.free).all() and (now.eligible == rebuilt.eligible).all() and (now.alloc == rebuilt.alloc).all()
    assert now.free[now.node_index["n2"]].tolist()[:2] == [3, 62_000]  # p2 alone: p1 went
    assert now.free[now.node_index["n0"], 0] == 2 and now.eligible[now.node_index["n0"]] == 0


def test_late_events_do_not_roll_back_a_newer_object() -> None:
    c = cache()
    c.upsert(NODES, node("n0", "c0", rv="10", unschedulable=True))
    assert not c.upsert(NODES, node("n0", "c0", rv="9"))
    assert c.nodes["n0"].unschedulable
    assert newer({"metadata": {"resourceVersion": "x"}}, {"metadata": {"resourceVersion": "y"}})


@pytest.mark.parametrize(("doc", "kwargs", "kind", "needle"), [
    ("profiles: {strict: {requiredLevel: x}}\ndefaultProfile: strict\n", {}, "unmapped", "add flavors.gpu.topology"),
    ("flavors: {gpu: {topology: missing}}\n", {}, "missing-topology", "Topology missing (profiles.yaml flavors.gpu.topology) not found"),
    ("profiles: {strict: {requiredLevel: x}}\ndefaultProfile: strict\n", {"topology_name": "fabric"}, "kueue-tas", "uses Kueue's own TAS"),
])
def test_flavor_problems_name_the_fix(doc: str, kwargs: dict[str, Any], kind: str, needle: str) -> None:
    with pytest.raises(FlavorProblem) as problem:
        cache(doc, **kwargs).snapshot("gpu")
    assert problem.value.kind == kind and needle in str(problem.value)


def test_pod_requests_follow_the_scheduler() -> None:
    p = pod("p", "n0", 2)
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "8"}}}]
    p["spec"]["overhead"] = {"cpu": "250m"}
    usage = pod_usage(p, "nvidia.com/gpu")
    assert usage is not None and usage.usage.gpu == 2 and usage.usage.cpu_milli == 8250 and usage.usage.pods == 1
    assert pod_usage({**p, "spec": {**p["spec"], "nodeName": None}}, "nvidia.com/gpu") is None


def test_a_non_ascii_resource_version_orders_by_arrival_instead_of_raising() -> None:
    old = {"metadata": {"resourceVersion": "²"}}
    assert newer(old, {"metadata": {"resourceVersion": "5"}})
    assert newer({"metadata": {"resourceVersion": "7"}}, {"metadata": {"resourceVersion": "٣"}})


def test_pod_changes_made_at_once_are_told_once_per_decision_after_the_last() -> None:
    c = cache()
    told: list[str] = []
    c.pod_listener = told.append
    c.upsert(PODS, pod("p0", "n0", 1, decision="d1"))
    assert told == ["d1"]  # one by one, as watch events arrive
    told.clear()
    with c.pods_at_once():
        c.upsert(PODS, pod("p1", "n0", 1, decision="d2"))
        c.upsert(PODS, pod("p2", "n1", 1, decision="d2"))
        with c.pods_at_once():  # nested: still told at the outer end
            c.upsert(PODS, pod("p3", "n2", 1, decision="d3"))
            c.delete(PODS, pod("p0", "n0", 1, decision="d1"))
        assert told == []
        assert c.bound_pods("d2") == {"": {"n0": 1, "n1": 1}}  # the cache itself is current inside
    assert told == ["d2", "d3", "d1"]


def _amd(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a node or a pod) with its nvidia.com/gpu amounts offered or requested as amd.com/gpu."""
    import json

    return json.loads(json.dumps(doc).replace('"nvidia.com/gpu"', '"amd.com/gpu"'))


def test_each_flavor_counts_its_own_accelerator_resource() -> None:
    c = cache("flavors: {gpu: {topology: fabric}, amd: {topology: fabric, gpuResource: amd.com/gpu}}\n")
    assert c.gpu_resource == ("nvidia.com/gpu", "amd.com/gpu")  # the controller's default first
    c.upsert(RESOURCE_FLAVORS, {"metadata": {"name": "amd"}, "spec": {"nodeLabels": {"pool": "m"}}})
    for i in range(2):
        c.upsert(NODES, _amd(node(f"m{i}", "m0", pool="m")))
    c.upsert(PODS, _amd(pod("p1", "m0", 3)))
    c.upsert(PODS, pod("p2", "n0", 1))
    amd, nvidia = c.snapshot("amd"), c.snapshot("gpu")
    assert amd.node_names == ("m0", "m1") and amd.total_gpus() == 8 and amd.free_gpus() == 5
    assert nvidia.total_gpus() == 16 and nvidia.free_gpus() == 15


def test_a_document_that_adds_an_accelerator_reads_the_nodes_again() -> None:
    c = cache()
    c.upsert(RESOURCE_FLAVORS, {"metadata": {"name": "amd"}, "spec": {"nodeLabels": {"pool": "m"}}})
    c.upsert(NODES, _amd(node("m0", "m0", pool="m")))
    assert c.nodes["m0"].allocatable.gpu == 0  # amd.com/gpu is nobody's accelerator yet
    assert c.set_profiles(load_profiles("flavors: {gpu: {topology: fabric}, amd: {topology: fabric, gpuResource: amd.com/gpu}}\n"))
    assert c.nodes["m0"].allocatable.gpu == 4 and c.snapshot("amd").total_gpus() == 4
    assert not c.set_profiles(load_profiles("flavors: {gpu: {topology: fabric}, amd: {topology: fabric, gpuResource: amd.com/gpu}}\n"))


def test_putting_a_document_in_force_says_whether_it_changed_and_only_a_change_drops_the_snapshots() -> None:
    """The controller's reload builds the snapshots again only on what ``set_profiles`` answers:
    a changed document that keeps the accelerators is a change too."""
    c = cache()
    kept = c.snapshot("gpu")
    assert not c.set_profiles(load_profiles("flavors: {gpu: {topology: fabric}}\n"))  # equal: nothing dropped
    assert c.snapshot("gpu") is kept
    doc = "flavors: {gpu: {topology: fabric, links: {network.example.com/block: {bandwidthGBps: 25}}}}\n"
    assert c.set_profiles(load_profiles(doc)) and c.gpu_resource == ("nvidia.com/gpu",)  # same accelerators, another document
    rebuilt = c.snapshot("gpu")
    assert rebuilt is not kept and list(rebuilt.bandwidth_gbps) == [25.0, 1800.0, 1800.0]
    assert not c.set_profiles(load_profiles(doc))

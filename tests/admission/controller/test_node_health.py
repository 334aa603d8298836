"""Cordoned, NotReady and tainted nodes are not candidates; a malformed perf annotation leaves out
only its own node; the flavor's tolerations, or a pod template's own, let tainted nodes back in."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import node_info
from admission.vocabulary import DRAINING
from tests.admission.fabric import Fabric, planned, profiles_doc, run
from tests.kube_objects import GPU, node

pytestmark = pytest.mark.apiserver

TAINT = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
BAD_NODES: dict[str, dict[str, Any]] = {
    "cordoned": {"unschedulable": True},
    "not-ready": {"ready": False},
    "tainted": {"taints": [TAINT]},
    "bad-perf": {"annotations": {"atoll.dev/gpu-perf": "fast"}},
}


def one_island(fabric: Fabric, bad: dict[str, Any] | None = None) -> list[str]:
    """One block, one island of three 4-GPU nodes; the first is unhealthy as ``bad`` says."""
    return [fabric.add_node(0, 0, 0, **(bad or {})), fabric.add_node(0, 0, 1), fabric.add_node(0, 0, 2)]


@pytest.mark.parametrize("kind", sorted(BAD_NODES))
def test_unhealthy_node_is_left_out(fabric: Fabric, kind: str) -> None:
    names = one_island(fabric, BAD_NODES[kind])
    fabric.install(nodes=False)
    ctrl = fabric.controller()
    fabric.submit("all-three", [("main", 3, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"  # the island could hold 3 pods when healthy: wait, not reject
    fabric.submit("two", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and names[0] not in planned(fabric.entry("two"))
    report = ctrl.flavor_report(fabric.flavor)
    assert report["healthy_nodes"] == 2 and report["nodes"] == 3
    assert any(names[0] in nodes for nodes in report["excluded"].values())


def test_flavor_toleration_admits_tainted_nodes(fabric: Fabric) -> None:
    one_island(fabric, BAD_NODES["tainted"])
    fabric.install(nodes=False)
    rf = fabric.custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "resourceflavors", fabric.flavor)
    rf["spec"]["tolerations"] = [{"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}]
    fabric.custom.replace_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "resourceflavors", fabric.flavor, rf)
    fabric.submit("all-three", [("main", 3, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit" and len(planned(fabric.entry("all-three"))) == 3


def test_pod_template_toleration_admits_tainted_nodes_for_that_workload_only(fabric: Fabric) -> None:
    names = one_island(fabric, BAD_NODES["tainted"])
    fabric.install(nodes=False)
    ctrl = fabric.controller()
    fabric.submit("intolerant", [("main", 3, 4)], tolerations=[{"key": TAINT["key"], "operator": "Equal", "value": "false"}])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"  # a toleration for another value does not lift the taint
    fabric.submit("tolerant", [("main", 3, 4)], tolerations=[{"key": TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and names[0] in planned(fabric.entry("tolerant"))


def test_malformed_pod_toleration_rejects_naming_the_field(fabric: Fabric) -> None:
    one_island(fabric)
    fabric.install(nodes=False)
    fabric.submit("odd", [("main", 1, 4)], tolerations=[{"key": "k", "operator": "Exists", "value": "v"}])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "reject"
    assert "spec.podSets[0].template.spec.tolerations[0].value: must be empty when operator is Exists" in fabric.entry("odd")["message"]


def test_node_turning_unhealthy_is_seen_without_a_rebuild(fabric: Fabric) -> None:
    names = one_island(fabric)
    fabric.install(nodes=False, profiles=profiles_doc(fabric.flavor, fabric.topology))
    ctrl = fabric.controller()
    run(ctrl)
    generation = ctrl.cache.snapshot(fabric.flavor).generation
    fabric.core.patch_node(names[1], {"spec": {"unschedulable": True}})
    fabric.submit("all-three", [("main", 3, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"
    snap = ctrl.cache.snapshot(fabric.flavor)
    assert snap.generation // 1_000_000 == generation // 1_000_000 and snap.generation > generation  # one row updated


def test_malformed_perf_is_named_and_only_that_node_is_left_out() -> None:
    body = node("n1", {}, 4, annotations={"atoll.dev/gpu-perf": "0,9"})
    info, problem = node_info(body, GPU)
    assert info is not None and not info.ready and problem is not None  # kept in the fabric, not a candidate
    assert "node n1: annotation atoll.dev/gpu-perf='0,9' is not a relative throughput in (0, 10]" in problem
    good, none = node_info(node("n2", {}, 4, annotations={"atoll.dev/gpu-perf": "0.93"}), GPU)
    assert none is None and good is not None and good.perf == pytest.approx(0.93)


def test_draining_domain_gets_no_new_placement_and_its_workloads_stay(fabric: Fabric) -> None:
    fabric.install()  # two blocks of two cliques of two 4-GPU nodes
    ctrl = fabric.controller()
    fabric.submit("running", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit"
    held = set(planned(fabric.entry("running")))
    cliques = [(b, c) for b in range(2) for c in range(2)]
    keep = next((b, c) for b, c in cliques if fabric.node_name(b, c, 0) not in held)
    drained = [fabric.node_name(b, c, i) for b, c in cliques if (b, c) != keep for i in range(2)]
    assert held <= set(drained)  # the running Workload's clique drains too
    for name in drained:
        fabric.core.patch_node(name, {"metadata": {"labels": {DRAINING: "true"}}})
    fabric.submit("next", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and set(planned(fabric.entry("next"))) == {fabric.node_name(*keep, i) for i in range(2)}
    fabric.submit("third", [("main", 1, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"  # 16 GPUs free, every one of them draining
    assert fabric.entry("running")["state"] == "Ready"  # the running Workload is left alone
    report = ctrl.flavor_report(fabric.flavor)
    assert report["reserved_gpus"] == 16 and report["healthy_nodes"] == 2  # what it holds in the drained clique still counts
    (reason,) = [r for r in report["excluded"] if r.startswith("draining")]
    assert sorted(report["excluded"][reason]) == sorted(drained)
    fabric.core.patch_node(drained[-1], {"metadata": {"labels": {DRAINING: "false"}}})  # one node back from maintenance
    fabric.requeue("third")
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and set(planned(fabric.entry("third"))) == {drained[-1]}


def test_malformed_drain_label_is_named_and_the_node_left_out() -> None:
    info, problem = node_info(node("n1", {DRAINING: "yes"}, 4), GPU)
    assert info is not None and not info.ready and problem is not None
    assert "node n1: label atoll.dev/draining='yes' is neither true nor false" in problem
    for value, draining in (("true", True), ("false", False)):
        ok, none = node_info(node("n2", {DRAINING: value}, 4), GPU)
        assert none is None and ok is not None and ok.ready and ok.draining is draining

"""Cordoned, NotReady and tainted nodes are not candidates; a malformed perf annotation leaves out
only its own node; the flavor's tolerations, or a pod template's own, let tainted nodes back in."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import node_info
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

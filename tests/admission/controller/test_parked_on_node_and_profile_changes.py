"""A parked Workload (``decisions.park_waiting``) waiting for room is decided again when a node
changes in a way placement reads (uncordoned, or given its missing level label) or the profiles
document changes, whether the controller learns it from a relist or from a watch event; a node
write placement does not read (a kubelet's heartbeat, an annotation of someone else's) decides
nothing."""

from __future__ import annotations

import pytest

from admission.controller import Controller, DecisionSettings
from admission.kube import NODES
from tests.admission.controller.test_parking import parking
from tests.admission.controller.test_watch_loop import wait_until
from tests.admission.fabric import BLOCK, CLIQUE, POOL, Fabric, planned, profiles_doc, run
from tests.kube_objects import create_node, node, now_rfc3339

pytestmark = pytest.mark.apiserver


def three_islands_busy(fabric: Fabric) -> None:
    """Islands b0c0, b0c1 and b1c0 keep one of their two 4-GPU nodes busy; b1c1 is free."""
    for b, c in ((0, 0), (0, 1), (1, 0)):
        fabric.bind_pod(f"busy-b{b}c{c}", fabric.node_name(b, c, 0), 4)


def parked_gang(fabric: Fabric, ctrl: Controller) -> None:
    """A 2 × 4-GPU gang (one whole island) waits: no island has two usable nodes."""
    fabric.submit("gang", [("main", 2, 4)])
    (first,) = run(ctrl)
    assert first.outcome == "wait" and first.parked and fabric.entry("gang")["state"] == "Pending"
    assert "largest fits 1" in fabric.entry("gang")["message"]
    fabric.clock.advance(3600)  # time alone decides nothing
    assert run(ctrl) == []


def heartbeat(fabric: Fabric, name: str) -> str:
    """A kubelet's heartbeat on the node and an annotation of another tool's; the node's new resourceVersion."""
    before = fabric.port.get(NODES, name)["metadata"]["resourceVersion"]
    fabric.core.patch_node_status(name, {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "", "lastHeartbeatTime": now_rfc3339()}]}})
    fabric.core.patch_node(name, {"metadata": {"annotations": {"example.com/last-checked": now_rfc3339()}}})
    after = str(fabric.port.get(NODES, name)["metadata"]["resourceVersion"])
    assert after != before
    return after


def node_version(ctrl: Controller, name: str) -> str | None:
    obj = ctrl.cache.objects[NODES].get(name)
    return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")


def test_a_parked_gang_is_decided_again_and_placed_when_the_node_it_needs_is_uncordoned(fabric: Fabric) -> None:
    fabric.install(nodes=False)
    for b in range(2):
        for c in range(2):
            for i in range(2):
                fabric.add_node(b, c, i, unschedulable=(b, c, i) == (1, 1, 0))
    three_islands_busy(fabric)
    ctrl = parking(fabric)
    parked_gang(fabric, ctrl)
    fabric.core.patch_node(fabric.node_name(1, 1, 0), {"spec": {"unschedulable": False}})
    (woken,) = run(ctrl)
    entry = fabric.entry("gang")
    assert woken.outcome == "admit" and entry["state"] == "Ready"
    assert entry["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: fabric.clique(1, 1)}
    assert len(fabric.decision_records()) == 2


def test_a_parked_gang_is_decided_again_and_placed_when_the_profiles_let_it_fit(fabric: Fabric) -> None:
    """Every island has one free node: the strict profile (one island) parks the gang; the
    document changed to ``requiredLevel: block`` lets it span two islands of one block."""
    fabric.install()
    three_islands_busy(fabric)
    fabric.bind_pod("busy-b1c1", fabric.node_name(1, 1, 0), 4)
    ctrl = parking(fabric)
    parked_gang(fabric, ctrl)
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["requiredLevel"] = BLOCK
    fabric.set_profiles(doc)
    (woken,) = run(ctrl)
    entry = fabric.entry("gang")
    assert woken.outcome == "admit" and entry["state"] == "Ready"
    (label, _), = entry["podSetUpdates"][0]["nodeSelector"].items()
    assert label == BLOCK and len(planned(entry)) == 2


def test_a_node_heartbeat_or_a_foreign_annotation_decides_no_parked_gang_again(fabric: Fabric) -> None:
    fabric.install()
    three_islands_busy(fabric)
    fabric.bind_pod("busy-b1c1", fabric.node_name(1, 1, 0), 4)
    ctrl = parking(fabric)
    parked_gang(fabric, ctrl)
    for b in range(2):
        for c in range(2):
            heartbeat(fabric, fabric.node_name(b, c, 1))
    assert run(ctrl) == [] and len(fabric.decision_records()) == 1
    assert f"{fabric.ns}/gang" in ctrl.parking


def test_through_the_watch_a_node_gaining_its_level_label_places_the_parked_gang(fabric: Fabric) -> None:
    """The running controller learns of the node from its watch event, not from a relist."""
    fabric.install(nodes=False)
    for b in range(2):
        for c in range(2):
            for i in range(2):
                if (b, c, i) != (1, 1, 0):
                    fabric.add_node(b, c, i)
    late = fabric.node_name(1, 1, 0)  # no island label yet: not usable
    create_node(fabric.core, node(late, {POOL: fabric.ns, BLOCK: f"{fabric.ns}-b1"}, 4))
    three_islands_busy(fabric)
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(park_waiting=True)})
    with fabric.running(settings=settings) as ctrl:
        fabric.submit("gang", [("main", 2, 4)])
        assert wait_until(lambda: f"{fabric.ns}/gang" in ctrl.parking)
        assert fabric.entry("gang")["state"] == "Pending"
        seen = heartbeat(fabric, fabric.node_name(0, 0, 1))  # first a write placement does not read: the gang stays parked
        assert wait_until(lambda: node_version(ctrl, fabric.node_name(0, 0, 1)) == seen)
        assert not wait_until(lambda: len(fabric.decision_records()) > 1, timeout=2) and f"{fabric.ns}/gang" in ctrl.parking
        fabric.core.patch_node(late, {"metadata": {"labels": {CLIQUE: fabric.clique(1, 1)}}})
        assert wait_until(lambda: fabric.entry("gang")["state"] == "Ready")
    assert fabric.entry("gang")["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: fabric.clique(1, 1)}

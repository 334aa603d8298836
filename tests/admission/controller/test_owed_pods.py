"""On the real apiserver: when the scheduler binds one Workload's pods on the nodes planned for
another (domain enforcement lets it pick any node of the island), the second Workload's pods
are still owed, and a further Workload that would need those GPUs waits."""

from __future__ import annotations

import pytest

from admission.controller._invariant import check_invariant
from tests.admission.fabric import Fabric, planned, run
from topology import ResourceVector

pytestmark = pytest.mark.apiserver


def island(fabric: Fabric, nodes: int = 4) -> list[str]:
    """One island (b0c0) of ``nodes`` 4-GPU nodes, and a second, busy one (b0c1)."""
    fabric.install(nodes=False)
    names = [fabric.add_node(0, 0, i) for i in range(nodes)]
    for i in range(2):
        fabric.bind_pod(f"busy-{i}", fabric.add_node(0, 1, i), 4)
    return names


def admit(fabric: Fabric, name: str) -> tuple[str, dict[str, int]]:
    fabric.submit(name, [("main", 2, 4)])
    (verdict,) = run(ctrl := fabric.controller())
    del ctrl
    assert verdict.outcome == "admit", verdict.message
    entry = fabric.entry(name)
    return entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"], planned(entry)


def test_pods_bound_on_another_workloads_planned_nodes_leave_it_owed(fabric: Fabric) -> None:
    nodes = island(fabric)
    decision_a, planned_a = admit(fabric, "a")
    decision_b, planned_b = admit(fabric, "b")
    assert set(planned_a).isdisjoint(planned_b) and set(planned_a) | set(planned_b) == set(nodes)
    for i, node in enumerate(sorted(planned_b)):  # the scheduler picked B's planned nodes for A's pods
        fabric.bind_pod(f"a-{i}", node, 4, decision_id=decision_a)

    ctrl = fabric.controller()
    fabric.submit("c", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait", verdict.message  # A's planned nodes are where B's pods must go now
    assert verdict.reserved_gpus == 8
    assert fabric.entry("c")["state"] == "Retry"
    assert ctrl.ledger.shortfalls == ()
    assert ctrl.metrics.registry.get_sample_value("atoll_owed_pods_without_room", {"flavor": fabric.flavor}) == 0
    assert ctrl.metrics.registry.get_sample_value("atoll_shortfall_decisions_total") == 0

    snap = ctrl.cache.snapshot(fabric.flavor)
    owed = ctrl.ledger.owed(snap)
    assert [(o.workload, o.pods, dict(o.witness)) for o in owed] == [(f"{fabric.ns}/b", 2, {n: 1 for n in planned_a})]
    alloc = {n: ctrl.cache.nodes[n].allocatable for n in snap.node_names}
    used = {n: ctrl.cache.usage.get(n, ResourceVector()) for n in snap.node_names}
    assert check_invariant(alloc, used, owed) == []

    # B's pods bind where A was planned: nothing is owed any more, the island is full, C still waits
    for i, node in enumerate(sorted(planned_a)):
        fabric.bind_pod(f"b-{i}", node, 4, decision_id=decision_b)
    fabric.requeue("c")
    (verdict,) = run(fabric.controller())  # a fresh controller rebuilds the same ledger from API state
    assert (verdict.outcome, verdict.reserved_gpus) == ("wait", 0)


def test_a_domain_short_of_room_admits_nothing_new(fabric: Fabric) -> None:
    nodes = island(fabric, nodes=5)
    decision_a, planned_a = admit(fabric, "a")
    _, planned_b = admit(fabric, "b")
    for i, node in enumerate(sorted(planned_b)):
        fabric.bind_pod(f"a-{i}", node, 4, decision_id=decision_a)
    spare = next(n for n in nodes if n not in planned_a and n not in planned_b)
    first_a = sorted(planned_a)[0]
    for i, node in enumerate((spare, first_a)):  # pods Atoll never placed take two of the three nodes left
        fabric.bind_pod(f"other-{i}", node, 4)

    ctrl = fabric.controller()
    fabric.submit("c", [("main", 1, 4)])  # one 4-GPU pod: the last free node would hold it, but B owes two
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait", verdict.message
    assert [(s.workload, s.missing, s.owed) for s in ctrl.ledger.shortfalls] == [(f"{fabric.ns}/b", 1, 2)]
    assert ctrl.ledger.shortfall_applies >= 1
    assert ctrl.metrics.registry.get_sample_value("atoll_owed_pods_without_room", {"flavor": fabric.flavor}) == 1
    assert ctrl.metrics.registry.get_sample_value("atoll_shortfall_decisions_total") == 1


def test_the_controllers_ledger_reads_node_labels_for_template_selectors() -> None:
    """A template nodeSelector key that is no topology level (``pool``) narrows what a Workload owes
    only if the ledger can read node labels: the controller wires its cache in."""
    from admission.controller import Controller
    from admission.kube import NODES

    ctrl = Controller(port=None)  # type: ignore[arg-type]  # nothing here talks to a cluster
    ctrl.cache.upsert(NODES, {"metadata": {"name": "n1", "labels": {"pool": "a"}}, "spec": {},
                              "status": {"allocatable": {"nvidia.com/gpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}})
    assert ctrl.ledger.node_labels is not None
    assert ctrl.ledger.node_labels("n1") == {"pool": "a"}
    assert ctrl.ledger.node_labels("missing") is None

"""On the real apiserver: under domain enforcement a new Workload never gets a nodeSelector domain
that another admitted Workload's owed pods could fill (or fill it the other way round). A one-node
Workload inside a clique that still owes pods gets the clique as its domain; a clique-wide gang
goes to another clique, or waits until the narrower Workload's pods are bound. A pod that is bound
now may end before the owed pods bind: the room it frees counts as room a wider claim could take."""

from __future__ import annotations

import pytest

from tests.admission.fabric import CLIQUE, Fabric, planned, profiles_doc, run

pytestmark = pytest.mark.apiserver


def test_a_one_node_workload_inside_a_clique_that_owes_pods_gets_the_clique(fabric: Fabric) -> None:
    fabric.install(nodes=False)
    nodes = [fabric.add_node(0, 0, i) for i in range(3)]
    fabric.submit("wide", [("main", 2, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit" and fabric.entry("wide")["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: fabric.clique(0, 0)}
    fabric.submit("narrow", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("narrow")
    assert verdict.outcome == "admit", verdict.message
    assert entry["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: fabric.clique(0, 0)}  # not kubernetes.io/hostname
    assert set(planned(entry)) <= set(nodes) and "still owe" in entry["message"]


def test_a_one_node_workload_keeps_its_hostname_when_nothing_is_owed_around_it(fabric: Fabric) -> None:
    fabric.install(nodes=False)
    [fabric.add_node(0, 0, i) for i in range(3)]
    fabric.submit("narrow", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit"
    assert list(fabric.entry("narrow")["podSetUpdates"][0]["nodeSelector"]) == ["kubernetes.io/hostname"]


def test_a_gang_goes_to_another_clique_than_one_where_a_one_node_workload_owes_its_pod(fabric: Fabric) -> None:
    fabric.install(nodes=False)
    first = [fabric.add_node(0, 0, i) for i in range(3)]
    fabric.submit("narrow", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit" and set(planned(fabric.entry("narrow"))) <= set(first)
    second = [fabric.add_node(0, 1, i) for i in range(3)]
    fabric.submit("wide", [("main", 2, 4)])
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("wide")
    assert verdict.outcome == "admit", verdict.message
    # c0 has two free nodes and is the tighter fit, but its clique selector would let wide's pods take narrow's node
    assert entry["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: fabric.clique(0, 1)} and set(planned(entry)) <= set(second)


def test_a_gang_waits_until_the_one_node_workload_inside_its_only_clique_is_bound(fabric: Fabric) -> None:
    fabric.install(nodes=False)
    [fabric.add_node(0, 0, i) for i in range(3)]
    fabric.submit("narrow", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    (narrow_node,) = planned(entry := fabric.entry("narrow"))
    fabric.submit("wide", [("main", 2, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "wait" and verdict.reason == "owed-pods", verdict.message
    assert fabric.entry("wide")["state"] == "Retry"

    fabric.bind_pod("narrow-0", narrow_node, 4, decision_id=entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])
    fabric.requeue("wide")
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit", verdict.message
    assert narrow_node not in planned(fabric.entry("wide"))


def test_a_gang_is_not_given_a_clique_where_a_bound_pod_ending_would_let_it_take_a_one_node_workloads_node(fabric: Fabric) -> None:
    """Another pod holds 2 of n0's 4 GPUs; the one-node Workload owes a 2-GPU pod there: no 4-GPU
    pod fits n0 now, but if the other pod ends first, a clique-wide gang's pod could take all of
    n0 and leave the one-node Workload's pod nowhere to go."""
    fabric.install(nodes=False)
    nodes = [fabric.add_node(0, 0, i) for i in range(3)]
    fabric.bind_pod("other-0", nodes[0], 2)
    fabric.submit("narrow", [("main", 1, 2)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit", verdict.message
    assert planned(entry := fabric.entry("narrow")) == {nodes[0]: 1}  # the tightest fit: the 2 GPUs left on n0
    assert list(entry["podSetUpdates"][0]["nodeSelector"]) == ["kubernetes.io/hostname"]
    fabric.submit("wide", [("main", 2, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "wait" and verdict.reason == "owed-pods", verdict.message  # n1 and n2 would fit it: not yet

    fabric.finish_pod("other-0")  # what the wide gang's pod could then have done, had it been admitted
    fabric.bind_pod("narrow-0", nodes[0], 2, decision_id=entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])
    fabric.requeue("wide")
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit", verdict.message
    assert nodes[0] not in planned(fabric.entry("wide"))


def test_under_exact_enforcement_pinned_pods_claim_their_planned_nodes_only(fabric: Fabric) -> None:
    doc = profiles_doc(fabric.flavor, fabric.topology, flavors={fabric.flavor: {"topology": fabric.topology, "enforcement": "exact"}})
    fabric.install(doc, nodes=False)
    [fabric.add_node(0, 0, i) for i in range(3)]
    fabric.submit("wide", [("main", 2, 4)])
    (verdict,) = run(fabric.controller())
    wide = fabric.entry("wide")["podSetUpdates"][0]
    assert verdict.outcome == "admit" and wide["annotations"]["atoll.dev/enforcement"] == "exact"
    fabric.submit("narrow", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    narrow = fabric.entry("narrow")["podSetUpdates"][0]
    assert verdict.outcome == "admit", verdict.message
    assert list(narrow["nodeSelector"]) == ["kubernetes.io/hostname"]  # wide's pods are pinned: they cannot take this node
    assert narrow["nodeSelector"]["kubernetes.io/hostname"] not in planned(fabric.entry("wide"))

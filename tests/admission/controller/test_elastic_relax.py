"""Elastic profile: one island while the Workload has waited less than relaxAfterSeconds, a span after.

Time is a ManualClock: the test moves it; nothing sleeps."""

from __future__ import annotations

import pytest

from tests.admission.fabric import BLOCK, CLIQUE, Fabric, planned, profiles_doc, run

pytestmark = pytest.mark.apiserver

ELASTIC = {"main": {"atoll.dev/profile": "elastic"}}


def waiting(wl: dict) -> dict:
    (cond,) = [c for c in wl["status"]["conditions"] if c["type"] == "atoll.dev/TopologyWaiting"]
    return cond


def half_full(fabric: Fabric) -> None:
    """Every island keeps 4 of its 8 GPUs busy: no island fits an 8-GPU gang, every block does."""
    for b in range(2):
        for c in range(2):
            fabric.bind_pod(f"busy-b{b}c{c}", fabric.node_name(b, c, 0), 4)


def test_elastic_waits_for_an_island_then_spans_after_its_relax_time(fabric: Fabric) -> None:
    fabric.install()
    half_full(fabric)
    ctrl = fabric.controller()
    fabric.submit("gang", [("main", 2, 4)], podset_annotations=ELASTIC)

    (first,) = run(ctrl)
    entry = fabric.entry("gang")
    assert first.outcome == "wait" and first.reason == "relax-pending" and not first.relaxed
    assert entry["state"] == "Retry" and entry["requeueAfterSeconds"] == 20  # elastic's backoff starts at 20s
    assert "spans allowed after 300s" in entry["message"]
    first_waited = waiting(fabric.workload("gang"))
    assert first_waited["status"] == "True"

    fabric.clock.advance(200)
    fabric.requeue("gang")
    (second,) = run(ctrl)
    assert second.outcome == "wait" and fabric.entry("gang")["requeueAfterSeconds"] == 40
    assert waiting(fabric.workload("gang"))["lastTransitionTime"] == first_waited["lastTransitionTime"]

    fabric.clock.advance(90)  # 290 s waited: the delay is capped at the relax time left
    fabric.requeue("gang")
    (third,) = run(ctrl)
    assert third.outcome == "wait" and fabric.entry("gang")["requeueAfterSeconds"] == 10

    fabric.clock.advance(10)
    fabric.requeue("gang")
    (fourth,) = run(ctrl)
    entry = fabric.entry("gang")
    assert fourth.outcome == "admit" and fourth.relaxed and entry["state"] == "Ready"
    (label, block), = entry["podSetUpdates"][0]["nodeSelector"].items()
    assert label == BLOCK
    nodes = planned(entry)
    assert sum(nodes.values()) == 2 and all(n.startswith(block + "c") for n in nodes)
    assert len({n[: n.rindex("n")] for n in nodes}) == 2  # two islands of one block: the span is the block
    # done waiting: the wait state is reset for any later eviction
    assert waiting(fabric.workload("gang"))["status"] == "False"


def test_elastic_takes_one_island_when_one_is_free(fabric: Fabric) -> None:
    fabric.install()
    fabric.bind_pod("busy", fabric.node_name(0, 0, 0), 4)
    fabric.submit("gang", [("main", 2, 4)], podset_annotations=ELASTIC)
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("gang")
    assert verdict.outcome == "admit" and not verdict.relaxed
    assert list(entry["podSetUpdates"][0]["nodeSelector"]) == [CLIQUE]


def test_bound_pods_count_as_used(fabric: Fabric) -> None:
    fabric.install()
    for b in range(2):
        for c in range(2):
            fabric.bind_pod(f"full-b{b}c{c}-0", fabric.node_name(b, c, 0), 4)
            fabric.bind_pod(f"full-b{b}c{c}-1", fabric.node_name(b, c, 1), 2)
    fabric.submit("gang", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "wait" and verdict.reason == "no-domain"
    fabric.finish_pod("full-b1c1-1")  # a finished pod frees its GPUs
    fabric.requeue("gang")
    ctrl = fabric.controller()
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and planned(fabric.entry("gang")) == {fabric.node_name(1, 1, 1): 1}


def test_a_span_over_the_whole_flavor_gets_no_level_selector(fabric: Fabric) -> None:
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["anywhere"] = {"preferredLevel": CLIQUE, "relaxAfterSeconds": 0}
    fabric.install(profiles=doc)
    fabric.submit("everything", [("main", 6, 4)], podset_annotations={"main": {"atoll.dev/profile": "anywhere"}})
    (verdict,) = run(fabric.controller())  # 24 GPUs: more than a block (16), less than the flavor (32)
    entry = fabric.entry("everything")
    (update,) = entry["podSetUpdates"]
    assert verdict.outcome == "admit" and "nodeSelector" not in update and sum(planned(entry).values()) == 6
    assert {n[: n.index("c", len(fabric.ns))] for n in planned(entry)} == {f"{fabric.ns}-b0", f"{fabric.ns}-b1"}

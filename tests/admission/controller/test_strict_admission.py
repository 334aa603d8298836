"""Strict profile on the real apiserver: one island or wait, and never-fits is rejected with numbers."""

from __future__ import annotations

import pytest

from admission.controller import DECISION_EVENT
from tests.admission.fabric import BLOCK, CLIQUE, Fabric, planned, run

pytestmark = pytest.mark.apiserver


def test_strict_fit_is_ready_with_the_island_selector(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("train", [("main", 2, 4)])
    verdicts = run(ctrl)
    assert [v.outcome for v in verdicts] == ["admit"], verdicts

    entry = fabric.entry("train")  # re-read from the apiserver: the write validated and persisted
    assert entry["state"] == "Ready"
    (update,) = entry["podSetUpdates"]
    assert update["name"] == "main"
    (label, island), = update["nodeSelector"].items()
    assert label == CLIQUE and island in {fabric.clique(b, c) for b in range(2) for c in range(2)}
    nodes = planned(entry)
    assert sum(nodes.values()) == 2 and all(n.startswith(f"{island}n") for n in nodes)
    assert update["annotations"]["atoll.dev/decision-id"] == verdicts[0].decision_id
    assert "Placed by Atoll (profile strict" in entry["message"] and island in entry["message"]
    # only Atoll's entry changed hands; Kueue's admission stays as Kueue wrote it
    wl = fabric.workload("train")
    assert wl["status"]["admission"]["clusterQueue"] == fabric.cq
    managers = {m["manager"] for m in wl["metadata"]["managedFields"]}
    assert {"atoll", "kueue"} <= managers

    (record,) = fabric.decision_records()
    assert record["event"] == DECISION_EVENT and record["outcome"] == "admit" and record["workload"] == "train"
    assert record["cluster_queue"] == fabric.cq and record["local_queue"] == f"{fabric.ns}/lq" and record["flavor"] == fabric.flavor
    assert record["placement"][0]["domain_path"][-1] == island and record["decision_id"] == verdicts[0].decision_id
    assert [e.reason for e in fabric.events_for("train")] == ["TopologyPlaced"]


def test_a_single_node_gang_is_pinned_to_its_host(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("small", [("main", 1, 4)])
    run(fabric.controller())
    entry = fabric.entry("small")
    (node,) = planned(entry)
    assert entry["podSetUpdates"][0]["nodeSelector"] == {"kubernetes.io/hostname": node}


def test_no_free_island_retries_with_growing_delay(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    for i in range(4):  # four 8-GPU gangs fill the four islands
        fabric.submit(f"fill-{i}", [("main", 2, 4)])
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 4
    islands = {fabric.entry(f"fill-{i}")["podSetUpdates"][0]["nodeSelector"][CLIQUE] for i in range(4)}
    assert len(islands) == 4  # nobody shares an island: the ledger counted each admission

    fabric.submit("late", [("main", 1, 4)])
    delays = []
    for _ in range(3):
        (verdict,) = run(ctrl)
        entry = fabric.entry("late")
        assert entry["state"] == "Retry" and verdict.outcome == "wait"
        delays.append(entry["requeueAfterSeconds"])
        fabric.requeue("late")
    assert delays == [30, 60, 120]
    wl = fabric.workload("late")
    assert fabric.entry("late")["retryCount"] == 3  # Kueue counted each Retry once, at its eviction
    assert [c["status"] for c in wl["status"]["conditions"] if c["type"] == "atoll.dev/TopologyWaiting"] == ["True"]
    assert "only 0 pods fit" in entry["message"] or "largest fits 0" in entry["message"]


def test_larger_than_any_island_is_placed_in_the_smallest_block_that_holds_it(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("big", [("main", 3, 4)])  # 12 GPUs: more than an 8-GPU island, less than a 16-GPU block
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("big")
    assert entry["state"] == "Ready" and verdict.outcome == "admit"
    (label, block), = entry["podSetUpdates"][0]["nodeSelector"].items()
    nodes = planned(entry)
    assert label == BLOCK and sum(nodes.values()) == 3
    assert {n[:n.rindex("c")] for n in nodes} == {block}  # {ns}-b{block}c{clique}n{i}: every pod in that block
    assert len({n[:n.rindex("n")] for n in nodes}) == 2  # over both of its islands
    assert f"larger than every {CLIQUE} domain" in entry["message"]


def test_larger_than_the_flavor_is_rejected_with_numbers(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("huge", [("main", 9, 4)])  # 36 GPUs on a 32-GPU flavor
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("huge")
    assert entry["state"] == "Rejected" and verdict.outcome == "reject"
    assert "9 pods × 4 GPU" in entry["message"] and "only 8 pods fit" in entry["message"]
    assert [e.reason for e in fabric.events_for("huge")] == ["TopologyRejected"]
    assert "podSetUpdates" not in entry


def test_nothing_is_written_without_quota_or_for_other_checks(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.kueue.create(__import__("tests.kube_objects", fromlist=["workload"]).workload(fabric.ns, "queued", [("main", 1, 4)]))
    assert run(ctrl) == []
    before = fabric.workload("queued")["metadata"]["resourceVersion"]
    assert run(ctrl) == []
    assert fabric.workload("queued")["metadata"]["resourceVersion"] == before


def test_a_decided_workload_is_not_decided_again(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("once", [("main", 2, 4)])
    run(ctrl)
    rv = fabric.workload("once")["metadata"]["resourceVersion"]
    assert run(ctrl) == []
    assert fabric.workload("once")["metadata"]["resourceVersion"] == rv
    assert len(fabric.decision_records()) == 1


def test_elastic_spans_blocks_never_above_the_span_level(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("wide", [("main", 4, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}})
    (verdict,) = run(ctrl)  # 16 GPUs can never fit one 8-GPU island: elastic relaxes at once, inside one block
    entry = fabric.entry("wide")
    assert entry["state"] == "Ready" and verdict.relaxed
    (label, block), = entry["podSetUpdates"][0]["nodeSelector"].items()
    assert label == BLOCK and block in (f"{fabric.ns}-b0", f"{fabric.ns}-b1")


def test_long_messages_are_cut_to_the_configured_length(fabric: Fabric) -> None:
    from admission.controller import DecisionSettings

    fabric.install()
    fabric.submit("huge", [("main", 9, 4)])
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(message_max_chars=80)})
    (verdict,) = run(fabric.controller(settings=settings))
    message = fabric.entry("huge")["message"]
    assert len(verdict.message) > 80 and len(message) == 80 and message.endswith("…")
    assert message[:-1] == verdict.message[:79]

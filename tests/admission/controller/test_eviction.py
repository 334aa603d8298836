"""Atoll during Kueue's eviction: it never acts while ``Evicted=True`` (QuotaReserved and the
admission still there, its entry reset to Pending), a decision made from a Workload that has
changed since is refused by the apiserver (409) and made again from what is there now, and the
backoff grows once per reservation however many of Kueue's writes the controller sees.

Kueue is played write by write (tests/kube_objects.py); time is a ManualClock."""

from __future__ import annotations

import pytest

from admission.kube import WORKLOADS
from tests.admission.fabric import Fabric, planned, run
from tests.kube_objects import is_true

pytestmark = pytest.mark.apiserver


def fill_islands(fabric: Fabric) -> None:
    """Every island keeps 4 of its 8 GPUs busy: an 8-GPU strict gang waits."""
    for b in range(2):
        for c in range(2):
            fabric.bind_pod(f"busy-b{b}c{c}", fabric.node_name(b, c, 0), 4)


def decisions(fabric: Fabric) -> float:
    return sum(fabric.metrics.registry.get_sample_value("atoll_decisions_total", {"outcome": o}) or 0.0
               for o in ("admit", "wait", "reject"))


def test_nothing_is_decided_while_kueue_evicts(fabric: Fabric) -> None:
    fabric.install()
    fill_islands(fabric)
    ctrl = fabric.controller()
    fabric.submit("gang", [("main", 2, 4)])
    (first,) = run(ctrl)
    assert first.outcome == "wait" and fabric.entry("gang")["state"] == "Retry"

    evicting = fabric.evict_only("gang")  # Kueue's eviction write; the job has not stopped yet
    entry = fabric.entry("gang")
    assert is_true(evicting, "Evicted") and is_true(evicting, "QuotaReserved") and evicting["status"]["admission"]
    assert entry["state"] == "Pending" and entry["retryCount"] == 1 and "podSetUpdates" not in entry
    fabric.finish_pod("busy-b0c0")  # an island frees up: a decision now would be a Ready
    version = evicting["metadata"]["resourceVersion"]

    assert run(ctrl) == [] and ctrl.pending() == []
    after = fabric.workload("gang")
    assert after["metadata"]["resourceVersion"] == version  # no write at all
    assert fabric.entry("gang")["state"] == "Pending" and decisions(fabric) == 1
    assert len(fabric.decision_records()) == 1

    fabric.kueue.release(fabric.ns, "gang")
    assert run(ctrl) == []  # released: no quota, nothing to decide
    fabric.kueue.end_backoff(fabric.ns, "gang")
    reserved = fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    assert not is_true(reserved, "Evicted")  # Evicted turns False in the reservation's own write
    (second,) = run(ctrl)
    assert second.outcome == "admit" and fabric.entry("gang")["state"] == "Ready"
    assert [r["attempts"] for r in fabric.decision_records()] == [1, 1]  # the Retry counted once


def test_a_ready_decided_from_a_stale_version_is_refused(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("gang", [("main", 2, 4)])
    ctrl.sync()  # the controller read the reservation: Pending, actionable
    fabric.kueue.preempt(fabric.ns, "gang")  # then Kueue evicted and released it

    (verdict,) = ctrl.process()
    assert verdict.outcome == "admit" and not verdict.written  # the apiserver refused it
    entry = fabric.entry("gang")
    assert entry["state"] == "Pending" and "podSetUpdates" not in entry
    cached = ctrl.cache.objects[WORKLOADS][f"{fabric.ns}/gang"]
    assert cached["metadata"]["resourceVersion"] == fabric.workload("gang")["metadata"]["resourceVersion"]
    assert ctrl.pending() == [] and ctrl._delayed == []  # read again: nothing to decide, no error backoff
    assert fabric.metrics.registry.get_sample_value("atoll_api_write_failures_total", {"error": "Conflict"}) == 1
    assert fabric.events_for("gang") == []


def test_a_changed_workload_is_decided_again_from_its_current_state(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("gang", [("main", 2, 4)])
    ctrl.sync()
    # Kueue changes the reservation before Atoll writes: now one pod (partial admission)
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor, podset_counts={"main": 1})

    stale, fresh = ctrl.process()
    assert not stale.written and sum(p.pods for p in stale.placements) == 2
    assert fresh.written and fresh.outcome == "admit" and sum(p.pods for p in fresh.placements) == 1
    entry = fabric.entry("gang")
    assert entry["state"] == "Ready" and sum(planned(entry).values()) == 1
    assert ctrl._delayed == [] and len(fabric.decision_records()) == 1
    assert [e.reason for e in fabric.events_for("gang")] == ["TopologyPlaced"]


def test_backoff_grows_once_per_reservation_across_kueue_writes(fabric: Fabric) -> None:
    """The controller looks after every one of Kueue's writes; each reservation is one attempt."""
    fabric.install()
    fill_islands(fabric)
    ctrl = fabric.controller()
    fabric.submit("gang", [("main", 2, 4)])
    delays, counts = [], []
    for _ in range(3):
        (verdict,) = run(ctrl)
        entry = fabric.entry("gang")
        assert verdict.outcome == "wait" and entry["state"] == "Retry"
        delays.append(entry["requeueAfterSeconds"])
        counts.append(entry.get("retryCount", 0))
        for step in (fabric.kueue.set_requeue_at, lambda ns, n: fabric.kueue.evict(ns, n, "AdmissionCheck", "Evicted due to Retry"),
                     fabric.kueue.release, fabric.kueue.end_backoff):
            step(fabric.ns, "gang")
            assert run(ctrl) == [], "Atoll decided between two of Kueue's eviction writes"
        fabric.clock.advance(delays[-1])
        fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    assert delays == [30, 60, 120] and counts == [0, 1, 2]
    assert fabric.entry("gang")["retryCount"] == 3 and decisions(fabric) == 3
    assert [r["attempts"] for r in fabric.decision_records()] == [1, 2, 3]
    assert fabric.kueue.writes.count("evict") == 3 and fabric.kueue.writes.count("release") == 3


def test_a_rejected_workload_is_deactivated_and_never_decided_again(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("huge", [("main", 9, 4)])  # 36 GPUs: larger than the 32-GPU flavor
    (verdict,) = run(ctrl)
    assert verdict.outcome == "reject"
    assert fabric.kueue.react(fabric.ns, "huge") == "rejected"
    wl = fabric.workload("huge")
    assert wl["spec"]["active"] is False and not is_true(wl, "QuotaReserved") and "admission" not in wl["status"]
    assert fabric.entry("huge")["state"] == "Pending" and "retryCount" not in fabric.entry("huge")
    assert run(ctrl) == []
    # even if quota were reserved again, an inactive Workload is not Atoll's to decide
    fabric.kueue.reserve_quota(fabric.ns, "huge", fabric.cq, fabric.flavor)
    assert run(ctrl) == [] and len(fabric.decision_records()) == 1

"""Deciding before quota (``DecisionSettings.decide_before_quota``, ``_before_quota``) on the real
apiserver: the placement is written Ready before Kueue reserves, booked in the ledger, released
when no quota comes within the hold, given way to a Workload that holds quota, and answered with
a Retry when Kueue reserves other pod counts or another flavor than it assumed.

Kueue is played write by write (tests/kube_objects.py): its Workload controller lists Atoll's
check as Pending on a Workload with no reservation, as it does when the check covers every
flavor of the ClusterQueue; time is a ManualClock."""

from __future__ import annotations

from typing import Any

import pytest

from admission import vocabulary
from admission.controller import ConfigSettings, Controller, DecisionSettings, KueueSettings, Settings
from admission.kube import CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS, WatchEvent
from tests.admission.fabric import Fabric, run
from tests.kube_objects import GROUP, VERSION, apply_workload_status, cluster_queue, is_true, local_queue, now_rfc3339, workload

pytestmark = pytest.mark.apiserver

HOLD = 30.0


def settings(fabric: Fabric, *, on: bool = True, depth: int = 2, settle: float = 0.0, write_workers: int = 0,
             list_own: bool = False) -> Settings:
    return Settings(kueue=KueueSettings(admission_check=fabric.check), config=ConfigSettings(namespace=fabric.ns),
                    decisions=DecisionSettings(decide_before_quota=on, before_quota_hold_seconds=HOLD, before_quota_depth=depth,
                                               before_quota_settle_seconds=settle, write_workers=write_workers,
                                               before_quota_list_own=list_own))


def queue(fabric: Fabric, name: str, podsets: list[tuple[str, int, int]], local: str = "lq") -> dict[str, Any]:
    """Create the Workload in LocalQueue ``local``; Kueue's Workload controller lists Atoll's check,
    Pending, with no reservation."""
    fabric.kueue.create(workload(fabric.ns, name, podsets, queue=local))
    return apply_workload_status(fabric.custom, fabric.ns, name, {"admissionChecks": [
        {"name": fabric.check, "state": "Pending", "message": "", "lastTransitionTime": now_rfc3339()}]})


def counted(ctrl: Any, kind: str) -> float:
    """The controller's ``atoll_before_quota`` counter for ``kind``."""
    return float(ctrl.metrics.registry.get_sample_value("atoll_before_quota_total", {"kind": kind}) or 0.0)


def fill_cliques_but(fabric: Fabric, free: tuple[int, int]) -> None:
    """Every clique but ``free`` is full (two 4-GPU nodes each, a 4-GPU pod on each node)."""
    for b in range(2):
        for c in range(2):
            if (b, c) != free:
                for i in range(2):
                    fabric.bind_pod(f"busy-b{b}c{c}n{i}", fabric.node_name(b, c, i), 4)


def test_a_workload_without_quota_is_decided_and_admitted_by_the_reservation_alone(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller(settings=settings(fabric))
    queue(fabric, "early", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    entry = fabric.entry("early")
    assert verdict.outcome == "admit" and entry["state"] == "Ready" and entry["podSetUpdates"]
    assert "decided before quota" in entry["message"] and not is_true(fabric.workload("early"), "QuotaReserved")
    assert entry["podSetUpdates"][0]["annotations"][vocabulary.DECIDED_BEFORE_QUOTA] == fabric.flavor  # what it assumed
    assert len(ctrl.ledger) == 1 and counted(ctrl, "decided") == 1  # booked as if reserved

    reserved = fabric.kueue.reserve_quota(fabric.ns, "early", fabric.cq, fabric.flavor)  # Kueue's reservation, the entry kept
    assert run(ctrl) == []
    assert fabric.workload("early")["metadata"]["resourceVersion"] == reserved["metadata"]["resourceVersion"]  # Atoll wrote nothing more
    assert len(ctrl.ledger) == 1 and ctrl.before.held == {}
    assert len(fabric.decision_records()) == 1


def test_off_by_default_nothing_is_decided_before_quota(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    queue(fabric, "early", [("main", 2, 4)])
    assert run(ctrl) == [] and fabric.entry("early")["state"] == "Pending"


def queued_in_vain(fabric: Fabric, local: str) -> Controller:
    """Workload ``early`` queued in LocalQueue ``local``, and a controller deciding before quota
    that does not decide it (its ClusterQueue, and so its flavor, is not known yet)."""
    queue(fabric, "early", [("main", 2, 4)], local)
    ctrl = fabric.controller(settings=settings(fabric))
    assert run(ctrl) == [] and fabric.entry("early")["state"] == "Pending"
    return ctrl


@pytest.mark.parametrize("watched", [False, True], ids=["relisted", "watched"])
def test_a_workload_whose_local_queue_comes_later_is_decided_before_quota_once_it_exists(fabric: Fabric, watched: bool) -> None:
    """Which ClusterQueue a Workload queues in comes from the LocalQueues the controller watches: a
    Workload naming one not created yet is not decided early (no ClusterQueue, no flavor to
    assume), and once the LocalQueue appears, on a relist or a watch event, it is, though the
    Workload itself did not change."""
    fabric.install()
    ctrl = queued_in_vain(fabric, "later")
    created = fabric.custom.create_namespaced_custom_object(GROUP, VERSION, fabric.ns, "localqueues",
                                                            local_queue(fabric.ns, "later", fabric.cq))
    if watched:
        ctrl._apply_event(LOCAL_QUEUES, WatchEvent("ADDED", created))
        verdicts = ctrl.process()
    else:
        verdicts = run(ctrl)
    assert [v.outcome for v in verdicts] == ["admit"]
    assert fabric.entry("early")["state"] == "Ready" and counted(ctrl, "decided") == 1


@pytest.mark.parametrize("watched", [False, True], ids=["relisted", "watched"])
def test_a_workload_whose_cluster_queue_comes_later_is_decided_before_quota_once_it_exists(fabric: Fabric, watched: bool) -> None:
    """The flavor a Workload will be assigned comes from the ClusterQueues the controller watches:
    one whose LocalQueue points at a ClusterQueue not created yet is not decided early, and once the
    ClusterQueue appears, on a relist or a watch event, it is (the clock not moved: nothing read
    before is taken as still true)."""
    fabric.install()
    later = f"{fabric.cq}-later"
    fabric.custom.create_namespaced_custom_object(GROUP, VERSION, fabric.ns, "localqueues", local_queue(fabric.ns, "to-later", later))
    ctrl = queued_in_vain(fabric, "to-later")
    created = fabric.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue(later, fabric.flavor, 1000, fabric.check))
    try:
        if watched:
            ctrl._apply_event(CLUSTER_QUEUES, WatchEvent("ADDED", created))
            verdicts = ctrl.process()
        else:
            verdicts = run(ctrl)
        assert [v.outcome for v in verdicts] == ["admit"]
        assert fabric.entry("early")["state"] == "Ready" and counted(ctrl, "decided") == 1
    finally:
        fabric.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", later)


def test_a_hold_without_quota_is_released_and_not_taken_again_at_once(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller(settings=settings(fabric))
    queue(fabric, "stuck", [("main", 2, 4)])
    run(ctrl)
    assert fabric.entry("stuck")["state"] == "Ready" and len(ctrl.ledger) == 1

    fabric.clock.advance(HOLD - 1)
    assert run(ctrl) == [] and fabric.entry("stuck")["state"] == "Ready"  # still within its hold
    fabric.clock.advance(2)
    assert run(ctrl) == []
    entry = fabric.entry("stuck")
    assert entry["state"] == "Pending" and "podSetUpdates" not in entry and "released" in entry["message"]
    assert len(ctrl.ledger) == 0 and ctrl.before.held == {}  # its domain is free again
    assert counted(ctrl, "released-expired") == 1 and counted(ctrl, "released-room") == 0

    fabric.clock.advance(HOLD - 1)
    assert run(ctrl) == [] and fabric.entry("stuck")["state"] == "Pending"  # not decided early again for a hold's length
    fabric.clock.advance(2)
    (again,) = run(ctrl)
    assert again.outcome == "admit" and fabric.entry("stuck")["state"] == "Ready"


def test_a_workload_holding_quota_takes_the_room_of_a_hold(fabric: Fabric) -> None:
    fabric.install()
    fill_cliques_but(fabric, (1, 1))  # one clique of 8 GPUs free
    ctrl = fabric.controller(settings=settings(fabric))
    queue(fabric, "early", [("main", 2, 4)])
    run(ctrl)
    assert fabric.entry("early")["state"] == "Ready"

    fabric.submit("reserved", [("main", 2, 4)])  # holds quota and needs that clique
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and fabric.entry("reserved")["state"] == "Ready"
    early = fabric.entry("early")
    assert early["state"] == "Pending" and "needed the room" in early["message"]
    assert [r.workload for r in ctrl.ledger.reservations()] == [f"{fabric.ns}/reserved"]
    assert counted(ctrl, "released-room") == 1 and counted(ctrl, "released-expired") == 0


def test_a_reservation_other_than_assumed_is_answered_with_a_retry(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller(settings=settings(fabric))
    queue(fabric, "partial", [("main", 2, 4)])
    run(ctrl)
    assert fabric.entry("partial")["state"] == "Ready"

    fabric.kueue.reserve_quota(fabric.ns, "partial", fabric.cq, fabric.flavor, podset_counts={"main": 1})
    (verdict,) = run(ctrl)
    entry = fabric.entry("partial")
    assert verdict.written and entry["state"] == "Retry"
    assert "quota reserved for pods {'main': 1}, decided before quota for {'main': 2}" in entry["message"]


def test_a_reservation_on_another_flavor_is_answered_with_a_retry(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller(settings=settings(fabric))
    queue(fabric, "moved", [("main", 2, 4)])
    run(ctrl)
    fabric.kueue.reserve_quota(fabric.ns, "moved", fabric.cq, "elsewhere")
    run(ctrl)
    entry = fabric.entry("moved")
    assert entry["state"] == "Retry" and f"flavor elsewhere, decided before quota for {fabric.flavor}" in entry["message"]


def test_only_the_first_of_a_queue_up_to_the_depth_are_decided_early(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller(settings=settings(fabric, depth=2))
    for name in ("a-first", "b-second", "c-third"):
        queue(fabric, name, [("main", 1, 4)])
    run(ctrl)
    assert [fabric.entry(n)["state"] for n in ("a-first", "b-second", "c-third")] == ["Ready", "Ready", "Pending"]


def test_a_restarted_controller_books_the_decisions_made_before_quota(fabric: Fabric) -> None:
    fabric.install()
    first = fabric.controller(settings=settings(fabric))
    queue(fabric, "early", [("main", 2, 4)])
    run(first)
    assert fabric.entry("early")["state"] == "Ready"

    second = fabric.controller(settings=settings(fabric))
    run(second)
    assert [r.workload for r in second.ledger.reservations()] == [f"{fabric.ns}/early"]
    fabric.clock.advance(HOLD + 1)  # its adopted hold runs out like any other
    run(second)
    assert fabric.entry("early")["state"] == "Pending" and len(second.ledger) == 0


def test_a_workload_is_decided_early_only_once_it_has_waited_for_quota_a_while(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller(settings=settings(fabric, settle=1.0))
    queue(fabric, "new", [("main", 2, 4)])
    assert run(ctrl) == [] and fabric.entry("new")["state"] == "Pending"  # just seen: Kueue may be reserving it now
    fabric.clock.advance(1.0)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and fabric.entry("new")["state"] == "Ready"


def test_with_pipelined_writes_the_early_decision_is_booked_while_in_flight_and_after(fabric: Fabric) -> None:
    fabric.install()
    fill_cliques_but(fabric, (1, 1))
    ctrl = fabric.controller(settings=settings(fabric, write_workers=2))
    queue(fabric, "early", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.written and fabric.entry("early")["state"] == "Ready"
    assert [r.workload for r in ctrl.ledger.reservations()] == [f"{fabric.ns}/early"]
    queue(fabric, "next", [("main", 2, 4)])  # the only free clique is held: nothing for it before quota
    assert run(ctrl) == [] and fabric.entry("next")["state"] == "Pending"


def test_a_reservation_from_a_copy_older_than_the_release_is_answered_with_a_retry_not_booked_twice(fabric: Fabric) -> None:
    """Kueue's scheduler reserves from its own copy with forced ownership: a copy taken while
    the entry was Ready writes it back, with Admitted, after Atoll released that placement and
    gave the room to another Workload. Atoll answers with a Retry; the room stays the other's."""
    fabric.install()
    fill_cliques_but(fabric, (1, 1))  # one clique of 8 GPUs free
    ctrl = fabric.controller(settings=settings(fabric))
    queue(fabric, "early", [("main", 2, 4)])
    run(ctrl)
    stale = fabric.workload("early")  # the scheduler's copy: Atoll's entry Ready
    fabric.clock.advance(HOLD + 1)
    run(ctrl)
    assert fabric.entry("early")["state"] == "Pending" and counted(ctrl, "released-expired") == 1

    queue(fabric, "taker", [("main", 2, 4)])  # the released clique is the only room: it is decided there
    run(ctrl)
    taker = fabric.entry("taker")
    assert taker["state"] == "Ready" and taker["podSetUpdates"][0]["nodeSelector"] == stale["status"]["admissionChecks"][0]["podSetUpdates"][0]["nodeSelector"]

    reserved = fabric.kueue.reserve_quota(fabric.ns, "early", fabric.cq, fabric.flavor, copy=stale)
    assert is_true(reserved, "Admitted") and (reserved["status"]["admissionChecks"][0])["state"] == "Ready"  # the race, as Kueue writes it
    (verdict,) = run(ctrl)
    entry = fabric.entry("early")
    assert verdict.written and entry["state"] == "Retry" and "older than the release" in entry["message"]
    assert [r.workload for r in ctrl.ledger.reservations()] == [f"{fabric.ns}/taker"]  # the clique counted once
    assert counted(ctrl, "retry-released") == 1 and counted(ctrl, "retry-mismatch") == 0


def test_a_controller_restarted_after_the_reservation_still_answers_a_mismatch(fabric: Fabric) -> None:
    fabric.install()
    first = fabric.controller(settings=settings(fabric))
    queue(fabric, "moved", [("main", 2, 4)])
    run(first)
    assert fabric.entry("moved")["state"] == "Ready"
    fabric.kueue.reserve_quota(fabric.ns, "moved", fabric.cq, "elsewhere")  # while no controller runs

    second = fabric.controller(settings=settings(fabric))  # knows nothing of the first one's holds
    run(second)
    entry = fabric.entry("moved")
    assert entry["state"] == "Retry" and f"flavor elsewhere, decided before quota for {fabric.flavor}" in entry["message"]
    assert counted(second, "retry-mismatch") == 1 and len(second.ledger) == 0


def test_a_matching_reservation_seen_only_after_a_restart_is_kept(fabric: Fabric) -> None:
    fabric.install()
    first = fabric.controller(settings=settings(fabric))
    queue(fabric, "kept", [("main", 2, 4)])
    run(first)
    reserved = fabric.kueue.reserve_quota(fabric.ns, "kept", fabric.cq, fabric.flavor)

    second = fabric.controller(settings=settings(fabric))
    assert run(second) == []
    assert fabric.workload("kept")["metadata"]["resourceVersion"] == reserved["metadata"]["resourceVersion"]  # nothing written
    assert [r.workload for r in second.ledger.reservations()] == [f"{fabric.ns}/kept"] and counted(second, "retry-mismatch") == 0


@pytest.mark.parametrize("list_own", [False, True])
def test_a_reservation_made_before_kueue_listed_the_check_is_decided_at_once_only_when_atoll_lists_its_own(
        fabric: Fabric, list_own: bool) -> None:
    """Kueue's scheduler can reserve before its Workload controller has listed the checks (it
    does not wait for them). With ``before_quota_list_own`` Atoll decides at once and its write
    adds its entry, Ready; Kueue's listing then finds it there and keeps it."""
    fabric.install()
    ctrl = fabric.controller(settings=settings(fabric, list_own=list_own))
    fabric.kueue.create(workload(fabric.ns, "quick", [("main", 2, 4)]))
    reserved = fabric.kueue.reserve_quota(fabric.ns, "quick", fabric.cq, fabric.flavor, list_missing=False)
    assert not reserved["status"].get("admissionChecks")
    verdicts = run(ctrl)
    if not list_own:
        assert verdicts == [] and not fabric.workload("quick")["status"].get("admissionChecks")  # it waits for Kueue's listing
        return
    (verdict,) = verdicts
    entry = fabric.entry("quick")
    assert verdict.outcome == "admit" and verdict.written and entry["state"] == "Ready" and entry["podSetUpdates"]
    assert vocabulary.DECIDED_BEFORE_QUOTA not in entry["podSetUpdates"][0]["annotations"]  # decided on the reservation itself
    fabric.kueue.list_checks(fabric.ns, "quick")  # Kueue's listing: the entry is there, nothing to add
    assert fabric.entry("quick")["state"] == "Ready" and run(ctrl) == [] and len(ctrl.ledger) == 1


def test_a_workload_decided_on_the_entry_atoll_lists_itself_leaves_the_cache_holding_what_the_server_returned(fabric: Fabric) -> None:
    """With ``before_quota_list_own`` the decision reads the Workload with Atoll's entry as Kueue
    will list it; the cache keeps the server's version. A standby decides nothing and writes
    nothing (read-only: it decides, as a dry run, on the same view): its cache must not show an
    entry the server never had."""
    fabric.install()
    fabric.kueue.create(workload(fabric.ns, "quick", [("main", 2, 4)]))
    reserved = fabric.kueue.reserve_quota(fabric.ns, "quick", fabric.cq, fabric.flavor, list_missing=False)
    standby = fabric.controller(settings=settings(fabric, list_own=True), read_only=True)
    (dry,) = run(standby)
    assert dry.outcome == "admit" and not dry.written
    cached = standby.cache.objects[WORKLOADS][f"{fabric.ns}/quick"]
    assert not (cached.get("status") or {}).get("admissionChecks")  # the server's version: no entry listed yet
    assert cached["metadata"]["resourceVersion"] == reserved["metadata"]["resourceVersion"]
    leader = fabric.controller(settings=settings(fabric, list_own=True))
    (verdict,) = run(leader)  # decided on the view with the entry: its write adds it, and the cache takes the answer
    assert verdict.outcome == "admit" and verdict.written
    assert leader.cache.objects[WORKLOADS][f"{fabric.ns}/quick"]["status"]["admissionChecks"] == fabric.workload("quick")["status"]["admissionChecks"]

"""Gangs owed their turn (``queueing.holdBehindGangs``). On the real apiserver: the controller
reads a gang waiting for quota from its cache, parks a Workload Kueue admits behind it (reason
``behind-gang``), decides the gang itself when it holds quota, and then decides again what waited
behind it; in the quota yield a parked gang owed its turn keeps its quota from a Workload
waiting for quota, where one that is not owed gives it."""

from __future__ import annotations

import time

import pytest

from admission.kube import WORKLOADS
from policies import load_profiles
from tests.admission.controller.test_parking import busy, parking
from tests.admission.controller.test_yielding import active, kueue_deactivates, quota_reads, waiter, yielded_to
from tests.admission.fabric import Fabric, profiles_doc, run
from tests.kube_objects import now_rfc3339, workload

CLIQUE = "nvidia.com/gpu.clique"

HELD = load_profiles(f"""
defaultProfile: held
profiles:
  held: {{requiredLevel: {CLIQUE}, queueing: {{reserveAfterSeconds: 600, holdBehindGangs: quota, holdBehindGangsMinGPUs: 8}}}}
""")
NOW = 1_800_000_000.0


def held_doc(fabric: Fabric, mode: str, min_gpus: int = 0) -> dict[str, object]:
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["queueing"] = {"reserveAfterSeconds": 600, "holdBehindGangs": mode,  # type: ignore[index]
                                             "holdBehindGangsMinGPUs": min_gpus}
    return doc


def gang_waits_for_quota(fabric: Fabric, name: str = "gang") -> None:
    """A 2-pod gang Kueue tried and did not reserve quota for (``QuotaReserved=False``). The
    controller's clock is past its creation by more than ``reserveAfterSeconds``: it is owed."""
    fabric.kueue.create(workload(fabric.ns, name, [("main", 2, 4)]))
    fabric.kueue._write(fabric.ns, name, "pending", lambda wl: {"conditions": [{
        "type": "QuotaReserved", "status": "False", "reason": "Pending", "lastTransitionTime": now_rfc3339(),
        "message": "couldn't assign flavors to pod set main: insufficient unused quota"}]})


@pytest.mark.apiserver
def test_a_workload_admitted_behind_a_gang_owed_quota_parks_until_the_gang_holds_it(fabric: Fabric) -> None:
    fabric.install(held_doc(fabric, "quota"))
    ctrl = parking(fabric)
    gang_waits_for_quota(fabric)
    assert run(ctrl) == []  # nothing holds quota yet: nothing to decide
    fabric.submit("small", [("main", 1, 4)])  # created after the gang: behind it in Kueue's order
    (held,) = run(ctrl)
    entry = fabric.entry("small")
    assert held.outcome == "wait" and held.reason == "behind-gang" and held.parked and entry["state"] == "Pending"
    assert f"gang {fabric.ns}/gang (8 GPUs) is owed its turn" in entry["message"]
    # parked, its quota goes back to the gang (the gang's GPUs are free on the flavor): Kueue evicts it and admits the gang
    assert not active(fabric, "small") and yielded_to(fabric, "small") == f"{fabric.ns}/gang"
    kueue_deactivates(fabric, "small")
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    (gang,) = run(ctrl)
    assert gang.outcome == "admit" and fabric.entry("gang")["state"] == "Ready"  # an owed gang is never held
    assert active(fabric, "small")  # reactivated: no Workload waits for quota ahead of it
    fabric.kueue.reserve_quota(fabric.ns, "small", fabric.cq, fabric.flavor)
    (again,) = run(ctrl)
    assert again.outcome == "admit" and fabric.entry("small")["state"] == "Ready"  # owed no longer: decided on its own


@pytest.mark.apiserver
def test_without_hold_behind_gangs_a_gang_waiting_for_quota_holds_nothing(fabric: Fabric) -> None:
    fabric.install()
    ctrl = parking(fabric)
    gang_waits_for_quota(fabric)
    fabric.submit("small", [("main", 1, 4)])
    (v,) = run(ctrl)
    assert v.outcome == "admit" and fabric.entry("small")["state"] == "Ready"



@pytest.mark.apiserver
@pytest.mark.parametrize(("min_gpus", "owed"), [(0, True), (16, False)])
def test_in_the_quota_yield_a_parked_gang_owed_its_turn_keeps_its_quota_where_one_not_owed_gives_it(
        fabric: Fabric, min_gpus: int, owed: bool) -> None:
    """The controller's quota yield asks ``owes``. Two parked 8-GPU gangs (every island has one
    busy node): the first holds the flavor's one reservation (``maxReservationsPerFlavor`` 1), so
    it keeps its quota either way; the second holds none. Having waited ``reserveAfterSeconds``
    since its creation, the second is owed under ``holdBehindGangsMinGPUs`` 0 and keeps its quota
    from a Workload waiting for it (given away, it would wait for quota again, owed, and hold back
    the Workload it gave it to); under 16 it is not owed and gives it, as any parked Workload does."""
    fabric.install(held_doc(fabric, "quota", min_gpus))
    busy(fabric)
    ctrl = parking(fabric)
    fabric.submit("first", [("main", 2, 4)])
    fabric.submit("second", [("main", 2, 4)])
    verdicts = run(ctrl)
    assert [v.outcome for v in verdicts] == ["wait", "wait"] and all(v.parked and v.reason != "behind-gang" for v in verdicts)
    holder = ctrl.queue_state.outlook.reservations.held_by
    assert holder(f"{fabric.ns}/first") is not None and holder(f"{fabric.ns}/second") is None
    waiter(fabric, "late")  # 4 GPUs, Kueue found too little quota for it
    assert run(ctrl) == []  # giving quota back is no decision
    assert active(fabric, "first") and yielded_to(fabric, "first") is None  # a reservation's holder keeps its quota
    if owed:
        assert active(fabric, "second") and yielded_to(fabric, "second") is None and ctrl.quota_yields == 0
    else:
        assert not active(fabric, "second") and yielded_to(fabric, "second") == f"{fabric.ns}/late" and ctrl.quota_yields == 1


@pytest.mark.apiserver
def test_a_parked_gang_holding_a_reservation_woken_by_freed_room_is_decided_again_with_its_quota(fabric: Fabric) -> None:
    """The simulator's stall on a held stream: a woken reservation holder lost its quota to Workloads
    that then waited for its reservation. In the controller a parked gang keeps its quota through
    the wake: the flavor's one reservation holder (8 GPUs; every island has one busy node) parks,
    a 16-GPU Workload waits for quota, and an island freed wakes the gang. It is decided again with
    the quota Kueue reserved for it (never given to the waiter), placed there, and its reservation
    ends; the waiter was never decided."""
    fabric.install(held_doc(fabric, "quota", 16))
    busy(fabric)
    ctrl = parking(fabric)
    fabric.submit("first", [("main", 2, 4)])
    (parked,) = run(ctrl)
    assert parked.outcome == "wait" and parked.parked
    holder = ctrl.queue_state.outlook.reservations.held_by
    assert holder(f"{fabric.ns}/first") is not None
    waiter(fabric, "big", gpus=16)  # Kueue found too little quota for it
    assert run(ctrl) == []
    assert active(fabric, "first") and yielded_to(fabric, "first") is None  # a reservation's holder keeps its quota
    fabric.core.delete_namespaced_pod("busy-b1c1", fabric.ns, grace_period_seconds=0)  # island b1c1: two free nodes
    (woken,) = run(ctrl)
    assert woken.outcome == "admit" and fabric.entry("first")["state"] == "Ready"
    assert fabric.entry("first")["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: fabric.clique(1, 1)}
    assert holder(f"{fabric.ns}/first") is None and ctrl.quota_yields == 0
    assert [c["status"] for c in fabric.workload("first")["status"]["conditions"] if c["type"] == "QuotaReserved"] == ["True"]


@pytest.mark.apiserver
def test_the_owed_gangs_warmed_at_the_first_list_are_those_a_cold_look_finds_and_the_first_look_reads_nothing_more(fabric: Fabric) -> None:
    """``sync`` reads every waiting Workload into the owed gangs before the first decision: the
    lists are those a controller whose first look is cold finds, that look then changes nothing,
    and the first decision is held behind the gang as it would be."""
    fabric.install(held_doc(fabric, "quota"))
    gang_waits_for_quota(fabric)
    gang_waits_for_quota(fabric, "gang-2")
    warm = parking(fabric)
    warm.sync()
    cold = parking(fabric)
    for w in cold.watches:  # the lists alone, as sync applies them, without the warm-up
        cold._apply_list(w.resource, fabric.port.list(w.resource, namespace=w.namespace, field_selector=w.field_selector).items)
    assert cold.queue_state.outlook.owed.on(fabric.cq) == []  # cold: nothing read yet
    cold._feed_owed()
    owed = warm.queue_state.outlook.owed.on(fabric.cq)
    assert [g.key for g in owed] == [f"{fabric.ns}/gang", f"{fabric.ns}/gang-2"] and owed == cold.queue_state.outlook.owed.on(fabric.cq)
    changed = warm._owed_feed.look(warm.cache.objects[WORKLOADS], warm.quota_yield.waiters, [],
                                   warm.cache.profiles, warm.decider.read, warm.quota_yield.cluster_queue_of, warm.quota_yield.flavor_of,
                                   warm.clock.now())
    assert changed == {}  # the look before the first decision has nothing left to read
    fabric.submit("small", [("main", 1, 4)])
    (held,) = run(warm)
    assert held.outcome == "wait" and held.reason == "behind-gang"


@pytest.mark.apiserver
def test_the_running_controller_warms_once_when_its_watch_loop_has_listed_everything(fabric: Fabric, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch loop, not ``sync``: the worker warms up once, when the last watched resource is
    listed, and nothing is decided before (only gangs wait, for quota): the owed gangs are read
    and every listed Workload's reserved quota added up by then, so the first look and the first
    quota-yield pass have nothing left to read; the first decision is held behind the gangs."""
    fabric.install(held_doc(fabric, "quota"))
    gang_waits_for_quota(fabric)
    gang_waits_for_quota(fabric, "gang-2")
    ctrl = parking(fabric)
    warm = ctrl._warm
    reads = quota_reads(monkeypatch)
    seen: list[tuple[bool, list[str], dict[str, object], bool, int]] = []

    def watched_warm() -> None:
        listed = ctrl.synced
        warm()
        warmed = len(reads)
        reserved = ctrl.quota_yield.reserved
        assert reserved is not None
        gpu = ctrl.quota_yield.gpu_resource()
        reserved.totals(ctrl.quota_yield.objects, (gpu,) if isinstance(gpu, str) else gpu)  # as the first pass adds it up
        changed = ctrl._owed_feed.look(ctrl.cache.objects[WORKLOADS], ctrl.quota_yield.waiters, [], ctrl.cache.profiles,
                                       ctrl.decider.read, ctrl.quota_yield.cluster_queue_of, ctrl.quota_yield.flavor_of, ctrl.clock.now())
        seen.append((listed, [g.key for g in ctrl.queue_state.outlook.owed.on(fabric.cq)], changed, warmed > 0, len(reads) - warmed))
    ctrl._warm = watched_warm  # type: ignore[method-assign]
    ctrl.start()
    try:
        assert ctrl.wait_synced(30)
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen == [(True, [f"{fabric.ns}/gang", f"{fabric.ns}/gang-2"], {}, True, 0)]  # once, every resource listed, nothing left to read
        assert fabric.decision_records() == []
        fabric.submit("small", [("main", 1, 4)])
        deadline = time.monotonic() + 30
        while fabric.entry("small").get("state") != "Pending" or not fabric.decision_records():
            assert time.monotonic() < deadline, "the running controller never decided the Workload behind the gangs"
            time.sleep(0.1)
        (record,) = fabric.decision_records()
        assert (record["workload"], record["outcome"], record["reason"]) == ("small", "wait", "behind-gang")
        assert len(seen) == 1  # no second warm-up: events after the lists are applied as they come
    finally:
        ctrl.stop()

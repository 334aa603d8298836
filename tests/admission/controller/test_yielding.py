"""Parked Workloads give their quota back (``_yielding``), on the real apiserver: a Workload
waiting for quota in the parked one's ClusterQueue gets it (Atoll deactivates the parked one, so
Kueue evicts it, and reactivates it once no Workload queued before the give waits for quota), the parked one keeps its need on
file and parks again on its next quota without a decision, gives its quota back at most once per
decision, a waiter of another ClusterQueue outside its cohort takes nothing, nor one the flavor's
free GPUs or the quota could not let in, and a new controller reactivates what a yield left
inactive."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from admission.controller import Controller, DecisionSettings, _yield_index
from admission.controller._status import YIELD_EVENT_REASON
from admission.controller._yielding import YIELD_ANNOTATION, YIELD_UNTIL_ANNOTATION
from admission.kube import CLUSTER_QUEUES, WatchEvent
from tests.admission.controller.test_parking import busy, parking
from tests.admission.fabric import Fabric, profiles_doc, run
from tests.kube_objects import GPU, GROUP, VERSION, cluster_queue, local_queue, now_rfc3339, workload

pytestmark = pytest.mark.apiserver


def waiter(fabric: Fabric, name: str, queue: str = "lq", gpus: int = 4, *, tried: bool = True) -> None:
    """A Workload Kueue has not reserved quota for: it waits for quota. ``tried``: Kueue's scheduler
    tried it and found too little quota (``QuotaReserved=False``, as Kueue writes it)."""
    fabric.kueue.create(workload(fabric.ns, name, [("main", 1, gpus)], queue=queue))
    if tried:
        fabric.kueue._write(fabric.ns, name, "pending", lambda wl: {"conditions": [{
            "type": "QuotaReserved", "status": "False", "reason": "Pending", "lastTransitionTime": now_rfc3339(),
            "message": "couldn't assign flavors to pod set main: insufficient unused quota"}]})


def records_of(fabric: Fabric, name: str) -> int:
    return sum(1 for r in fabric.decision_records() if r["workload"] == name)


def active(fabric: Fabric, name: str) -> bool:
    return (fabric.workload(name).get("spec") or {}).get("active", True) is not False


def yielded_to(fabric: Fabric, name: str) -> str | None:
    return (fabric.workload(name)["metadata"].get("annotations") or {}).get(YIELD_ANNOTATION)


def kueue_deactivates(fabric: Fabric, name: str) -> None:
    """Kueue on ``spec.active=false``: eviction (reason Deactivated; a Pending check stays as it is), then the release."""
    fabric.kueue.evict(fabric.ns, name, "Deactivated", "The workload is deactivated")
    fabric.kueue.release(fabric.ns, name)


def parked_gang(fabric: Fabric, *, in_turn: bool = False) -> Controller:
    fabric.install()
    busy(fabric)
    if not in_turn:
        ctrl = parking(fabric)
    else:  # ``decisions.quota_yield_in_turn``
        ctrl = fabric.controller(settings=fabric.settings().model_copy(
            update={"decisions": DecisionSettings(park_waiting=True, quota_yield_in_turn=True)}))
    fabric.submit("gang", [("main", 2, 4)])  # 8 GPUs in one island: none has room, it parks
    (first,) = run(ctrl)
    assert first.parked and fabric.entry("gang")["state"] == "Pending"
    return ctrl


def gang_gave_to_late(fabric: Fabric, ctrl: Controller) -> None:
    """A 2 × 4-GPU gang parks; waiters ``late`` then ``second`` queue for quota; the gang gives its
    quota to ``late`` (Kueue deactivates the gang), and Kueue reserves quota for ``late``."""
    fabric.submit("gang", [("main", 2, 4)])
    (first,) = run(ctrl)
    assert first.parked
    waiter(fabric, "late")
    waiter(fabric, "second")
    run(ctrl)
    assert not active(fabric, "gang") and yielded_to(fabric, "gang") == f"{fabric.ns}/late"
    kueue_deactivates(fabric, "gang")
    fabric.kueue.reserve_quota(fabric.ns, "late", fabric.cq, fabric.flavor)


def set_quota(fabric: Fabric, cq: str, gpus: int, cohort: str | None = None, *, borrowing: int | None = None,
              lending: int | None = None, reported: int | None = None) -> Any:
    """``cq``'s GPU quota on the fabric's flavor: ``gpus`` nominal (in ``cohort`` where given), with
    Kueue's limits where given, and ``reported`` GPUs reserved in its status, as Kueue reports them
    (where given). The ClusterQueue as patched."""
    gpu: dict[str, object] = {"name": GPU, "nominalQuota": gpus}
    if borrowing is not None:
        gpu["borrowingLimit"] = borrowing
    if lending is not None:
        gpu["lendingLimit"] = lending
    spec: dict[str, object] = {"resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": fabric.flavor, "resources": [gpu]}]}]}
    if cohort is not None:
        spec["cohortName"] = cohort
    patched = fabric.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq, {"spec": spec},
                                                        _content_type="application/merge-patch+json")
    if reported is not None:
        fabric.custom.patch_cluster_custom_object_status(GROUP, VERSION, "clusterqueues", cq, {"status": {"flavorsReservation": [
            {"name": fabric.flavor, "resources": [{"name": GPU, "total": str(reported), "borrowed": "0"}]}]}},
            _content_type="application/merge-patch+json")
    return patched


def reparked_after_a_give(fabric: Fabric, ctrl: Controller) -> str:
    """The parked gang gives its quota to "late", is reactivated once Kueue admits "late", and parks
    again on its next quota without a decision. Its key."""
    key = f"{fabric.ns}/gang"
    assert run(ctrl) == [] and active(fabric, "gang")  # nobody waits for quota: it keeps it
    waiter(fabric, "new", tried=False)  # Kueue has not tried it yet: it may fit without the gang's quota
    assert run(ctrl) == [] and active(fabric, "gang") and ctrl.quota_yields == 0
    fabric.kueue.reserve_quota(fabric.ns, "new", fabric.cq, fabric.flavor)  # and so it did
    run(ctrl)
    waiter(fabric, "late")
    assert run(ctrl) == []  # giving quota back is no decision
    assert not active(fabric, "gang") and yielded_to(fabric, "gang") == f"{fabric.ns}/late"
    assert YIELD_UNTIL_ANNOTATION not in fabric.workload("gang")["metadata"]["annotations"]  # no time limit: see the next tests
    assert fabric.entry("gang")["state"] == "Pending"  # the wait stands: Kueue's eviction resets only other states
    assert ctrl.quota_yields == 1 and ctrl.parking.is_aside(key)
    assert any(e.reason == YIELD_EVENT_REASON and f"{fabric.ns}/late" in e.message for e in fabric.events_for("gang"))
    kueue_deactivates(fabric, "gang")
    assert run(ctrl) == [] and not active(fabric, "gang")  # the waiter has no quota yet: the gang stays out of its way
    assert ctrl.parking.is_aside(key)  # its need stays on file while it is inactive
    fabric.kueue.reserve_quota(fabric.ns, "late", fabric.cq, fabric.flavor)  # Kueue admits the waiter
    run(ctrl)
    assert active(fabric, "gang") and yielded_to(fabric, "gang") is None  # reactivated, the annotations gone
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)  # quota again, later
    assert run(ctrl) == []  # nothing it waits for changed: parked again on its need, not decided
    assert ctrl.reparked == 1 and key in ctrl.parking and records_of(fabric, "gang") == 1
    assert fabric.entry("gang")["state"] == "Pending"
    sample = ctrl.metrics.registry.get_sample_value
    assert sample("atoll_quota_yields_total", {"flavor": fabric.flavor}) == 1
    assert sample("atoll_quota_reparks_total", {"flavor": fabric.flavor}) == 1
    return key


def test_a_parked_gang_gives_its_quota_to_a_waiter_and_parks_again_without_a_decision(fabric: Fabric) -> None:
    ctrl = parked_gang(fabric)
    reparked_after_a_give(fabric, ctrl)
    waiter(fabric, "late-again")  # another waiter: the gang gave its quota back once since its decision, and keeps it now
    assert run(ctrl) == []
    assert ctrl.quota_yields == 1 and active(fabric, "gang")
    fabric.core.patch_node(fabric.node_name(0, 0, 1), {"metadata": {"labels": {"touched": "yes"}}})  # a node change wakes it
    (decided,) = run(ctrl)
    assert decided.outcome == "wait" and decided.parked and records_of(fabric, "gang") == 2
    assert ctrl.quota_yields == 2 and yielded_to(fabric, "gang") == f"{fabric.ns}/late-again"  # decided afresh: once more


def test_in_turn_a_gang_parked_again_undecided_gives_its_quota_back_again_without_a_decision(fabric: Fabric) -> None:
    """``decisions.quota_yield_in_turn``: one parked again undecided may give its quota back again;
    the give is no decision."""
    ctrl = parked_gang(fabric, in_turn=True)
    reparked_after_a_give(fabric, ctrl)
    waiter(fabric, "late-again")
    assert run(ctrl) == []
    assert ctrl.quota_yields == 2 and yielded_to(fabric, "gang") == f"{fabric.ns}/late-again"
    assert not active(fabric, "gang") and records_of(fabric, "gang") == 1


class CountingPort:
    """The real port, counting each ``get`` by resource plural (what the decision loop reads per call)."""

    def __init__(self, port: Any) -> None:
        self.port = port
        self.gets: Counter[str] = Counter()

    def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        self.gets[resource.plural] += 1
        return self.port.get(resource, name, namespace=namespace)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port, name)


def test_waiters_naming_a_local_queue_that_does_not_exist_cost_no_read_per_pass(fabric: Fabric) -> None:
    """Which ClusterQueue a waiter queues in comes from the watched LocalQueues: thirty Workloads
    waiting in a LocalQueue that does not exist cost no API read on any pass (each cost one per
    pass when LocalQueues were read one by one), and the one waiter in a real LocalQueue still
    gets the parked gang's quota."""
    counting = CountingPort(fabric.port)
    fabric.port = counting  # type: ignore[assignment]
    ctrl = parked_gang(fabric)
    for i in range(30):
        waiter(fabric, f"lost-{i}", queue="no-such-queue")
    for _ in range(3):
        assert run(ctrl) == []
    assert counting.gets["localqueues"] == 0 and active(fabric, "gang")
    waiter(fabric, "real")
    assert run(ctrl) == []
    assert yielded_to(fabric, "gang") == f"{fabric.ns}/real" and counting.gets["localqueues"] == 0


def test_cluster_queues_cost_no_read_per_pass_and_a_quota_change_is_weighed_on_the_next_pass(fabric: Fabric) -> None:
    """A waiter's ClusterQueue (cohort, quota, reported usage) comes from the watched ClusterQueues:
    passes that weigh the waiter read none (each read it once per pass when ClusterQueues were
    fetched), and a quota raised on the ClusterQueue, delivered as its watch event alone (no
    relist, no restart), lets the quota yield give to the waiter on the next pass."""
    counting = CountingPort(fabric.port)
    fabric.port = counting  # type: ignore[assignment]
    ctrl = parked_gang(fabric)
    set_quota(fabric, fabric.cq, 10, reported=8)
    waiter(fabric, "twelve", gpus=12)  # 12 > 8 given back + 2 left of the quota of 10
    for _ in range(3):
        assert run(ctrl) == []
    assert ctrl.quota_yields == 0 and active(fabric, "gang") and counting.gets["clusterqueues"] == 0
    raised = set_quota(fabric, fabric.cq, 14)  # 8 given back + 6 left: 12 fit
    ctrl._apply_event(CLUSTER_QUEUES, WatchEvent("MODIFIED", raised))
    assert ctrl.process() == []
    assert ctrl.quota_yields == 1 and yielded_to(fabric, "gang") == f"{fabric.ns}/twelve" and counting.gets["clusterqueues"] == 0


def test_a_waiter_of_another_cluster_queue_outside_the_cohort_takes_nothing(fabric: Fabric) -> None:
    ctrl = parked_gang(fabric)
    other = f"{fabric.cq}-other"
    fabric.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue(other, fabric.flavor, 1000, fabric.check))
    try:
        fabric.custom.create_namespaced_custom_object(GROUP, VERSION, fabric.ns, "localqueues", local_queue(fabric.ns, "lq-other", other))
        waiter(fabric, "elsewhere", queue="lq-other")
        assert run(ctrl) == []
        assert ctrl.quota_yields == 0 and active(fabric, "gang")
        for cq in (fabric.cq, other):  # the two ClusterQueues join one cohort: now it is owed
            fabric.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq, {"spec": {"cohortName": "shared"}},
                                                      _content_type="application/merge-patch+json")
        waiter(fabric, "elsewhere-2", queue="lq-other")
        assert run(ctrl) == []
        assert ctrl.quota_yields == 1 and yielded_to(fabric, "gang") == f"{fabric.ns}/elsewhere"  # the oldest waiter first
    finally:
        fabric.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", other)


def test_nothing_is_given_to_a_waiter_the_free_gpus_or_the_quota_could_not_let_in(fabric: Fabric) -> None:
    """The simulator's rule: the flavor has 16 GPUs free, and the ClusterQueue's quota, as Kueue
    reports it reserved, leaves 2 beside the gang's 8. A waiter that could not start after the
    yield would only wait in the gang's place."""
    ctrl = parked_gang(fabric)
    set_quota(fabric, fabric.cq, 10, reported=8)
    waiter(fabric, "too-big-for-the-flavor", gpus=20)  # 20 > 16 free
    waiter(fabric, "too-big-for-the-quota", gpus=12)  # 12 > 8 given back + 2 free
    assert run(ctrl) == []
    assert ctrl.quota_yields == 0 and active(fabric, "gang")
    waiter(fabric, "fits", gpus=10)  # 10 <= 8 + 2
    assert run(ctrl) == []
    assert ctrl.quota_yields == 1 and yielded_to(fabric, "gang") == f"{fabric.ns}/fits"


def test_a_new_controller_reactivates_what_a_yield_left_inactive_and_nothing_else(fabric: Fabric) -> None:
    """The yield lives on the Workload (its annotations), not in memory: a controller started
    after it ends it by the same rules. A Workload someone else deactivated is not Atoll's."""
    ctrl = parked_gang(fabric)
    waiter(fabric, "late")
    run(ctrl)
    assert not active(fabric, "gang")
    kueue_deactivates(fabric, "gang")
    fabric.submit("theirs", [("main", 1, 4)])
    fabric.kueue._write(fabric.ns, "theirs", "deactivate", lambda wl: {"active": False}, spec=True)  # a user's
    ctrl.stop()
    fabric.kueue.reserve_quota(fabric.ns, "late", fabric.cq, fabric.flavor)  # the waiter has its quota while no controller runs
    again = parking(fabric)
    run(again)
    assert again.quota_yield.rebuilt
    assert active(fabric, "gang") and yielded_to(fabric, "gang") is None
    assert not active(fabric, "theirs")


def test_a_yield_ends_only_once_no_workload_queued_before_the_give_waits_for_quota(fabric: Fabric) -> None:
    """Kueue queues a reactivated Workload at its creation time: reactivated while a Workload
    queued before the give still waits for quota, the gang would go back ahead of it and take the
    next quota freed. A waiter no quota could ever let in keeps nobody out."""
    ctrl = parked_gang(fabric)
    waiter(fabric, "late")
    waiter(fabric, "second")
    waiter(fabric, "huge", gpus=2000)  # the ClusterQueue has 1000
    run(ctrl)
    assert not active(fabric, "gang") and yielded_to(fabric, "gang") == f"{fabric.ns}/late"
    kueue_deactivates(fabric, "gang")
    fabric.kueue.reserve_quota(fabric.ns, "late", fabric.cq, fabric.flavor)  # Kueue admits the waiter it gave to
    run(ctrl)
    assert not active(fabric, "gang")  # "second", queued before the give, still waits: the gang stays behind it
    fabric.kueue.reserve_quota(fabric.ns, "second", fabric.cq, fabric.flavor)
    run(ctrl)
    assert active(fabric, "gang") and yielded_to(fabric, "gang") is None  # only "huge" waits, and no quota could let it in


def test_a_yield_ends_at_its_time_bound_while_a_workload_queued_before_the_give_still_waits(fabric: Fabric) -> None:
    """A waiter the quota could admit but that Kueue never admits would keep the gang out for ever:
    ``decisions.quota_yield_max_seconds`` after the give it is reactivated all the same, and counted."""
    fabric.install()
    busy(fabric)
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(park_waiting=True, quota_yield_max_seconds=600.0)})
    ctrl = fabric.controller(settings=settings)
    gang_gave_to_late(fabric, ctrl)
    fabric.clock.advance(599)
    run(ctrl)
    assert not active(fabric, "gang")  # "second", queued before the give, waits, and the bound is not reached
    assert ctrl.quota_yields_timed_out == 0
    fabric.clock.advance(1)
    run(ctrl)
    assert active(fabric, "gang") and yielded_to(fabric, "gang") is None  # 600 s after the give, whoever still waits
    assert ctrl.quota_yields_timed_out == 1
    assert ctrl.metrics.registry.get_sample_value("atoll_quota_yields_timed_out_total", {"flavor": fabric.flavor}) == 1


def test_the_running_controller_gives_parked_quota_back(fabric: Fabric) -> None:
    """The watch-driven worker loop, not only ``process``: the waiter's watch event leads to the yield."""
    fabric.install()
    busy(fabric)
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(park_waiting=True)})

    with fabric.running(settings=settings) as ctrl:
        fabric.submit("gang", [("main", 2, 4)])
        deadline = time.monotonic() + 30
        while f"{fabric.ns}/gang" not in ctrl.parking and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"{fabric.ns}/gang" in ctrl.parking
        waiter(fabric, "late")
        deadline = time.monotonic() + 30
        while active(fabric, "gang") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not active(fabric, "gang") and yielded_to(fabric, "gang") == f"{fabric.ns}/late"


def test_a_waiter_takes_no_more_than_it_asks_for_newest_parked_first(fabric: Fabric) -> None:
    ctrl = parked_gang(fabric)
    fabric.submit("gang-2", [("main", 2, 4)])  # parked after the first
    (second,) = run(ctrl)
    assert second.parked
    waiter(fabric, "late")  # 4 GPUs: one gang's 8 cover it
    assert run(ctrl) == []
    assert (active(fabric, "gang"), active(fabric, "gang-2")) == (True, False)  # the newest gives way
    fabric.submit("gang-3", [("main", 2, 4)])  # a new park is a new pass: the waiter, still waiting, was served already
    (third,) = run(ctrl)
    assert third.parked and ctrl.quota_yields == 1
    assert (active(fabric, "gang"), active(fabric, "gang-3")) == (True, True)


def test_a_standby_that_takes_the_lead_ends_the_old_leaders_yield(fabric: Fabric) -> None:
    """The leader that deactivated the gang is gone; a warm standby (watching, not writing) takes
    the lead and, by the annotation and Kueue's eviction time alone, reactivates the gang once its
    waiter, queued before the give, holds quota."""
    ctrl = parked_gang(fabric)
    waiter(fabric, "late")
    run(ctrl)
    kueue_deactivates(fabric, "gang")
    ctrl.stop()
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(park_waiting=True)})
    standby = fabric.controller(settings=settings)
    standby.start(leading=False)
    try:
        assert standby.wait_synced(30)
        fabric.kueue.reserve_quota(fabric.ns, "late", fabric.cq, fabric.flavor)
        time.sleep(0.5)
        assert not active(fabric, "gang")  # a standby writes nothing
        standby.lead()
        deadline = time.monotonic() + 30
        while not active(fabric, "gang") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert active(fabric, "gang") and yielded_to(fabric, "gang") is None
    finally:
        standby.stop()


def test_a_node_heartbeat_wakes_no_parked_workload_and_so_keeps_a_yields_need_unchanged(fabric: Fabric) -> None:
    """Only a Node change placement reads wakes parked Workloads; a heartbeat (the Ready
    condition's times, a new resourceVersion) does not, so a gang that gave its quota back parks
    again undecided across heartbeats."""
    ctrl = parked_gang(fabric)
    node = fabric.node_name(0, 0, 1)
    ready = next(c for c in fabric.core.read_node_status(node).status.conditions if c.type == "Ready")
    beat = {"type": "Ready", "status": ready.status, "reason": ready.reason or "KubeletReady", "message": ready.message or "ready",
            "lastTransitionTime": ready.last_transition_time.isoformat(), "lastHeartbeatTime": "2030-01-01T00:00:00Z"}
    fabric.core.patch_node_status(node, {"status": {"conditions": [beat]}})
    assert run(ctrl) == [] and records_of(fabric, "gang") == 1
    waiter(fabric, "late")
    run(ctrl)
    kueue_deactivates(fabric, "gang")
    fabric.kueue.reserve_quota(fabric.ns, "late", fabric.cq, fabric.flavor)
    run(ctrl)
    beat["lastHeartbeatTime"] = "2030-01-01T00:00:30Z"
    fabric.core.patch_node_status(node, {"status": {"conditions": [beat]}})
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    run(ctrl)
    assert ctrl.reparked == 1 and records_of(fabric, "gang") == 1


def other_queue(fabric: Fabric, name: str) -> str:
    """A second ClusterQueue on the fabric's flavor, with a LocalQueue ``lq-<name>`` of the same name."""
    cq = f"{fabric.cq}-{name}"
    fabric.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue(cq, fabric.flavor, 0, fabric.check))
    fabric.custom.create_namespaced_custom_object(GROUP, VERSION, fabric.ns, "localqueues", local_queue(fabric.ns, f"lq-{name}", cq))
    return cq


def test_a_waiter_that_starts_only_by_borrowing_from_its_cohort_gets_the_gangs_quota(fabric: Fabric) -> None:
    """Kueue lets a Workload use what its cohort could lend (the others' unused quota up to their
    lendingLimit, up to its own borrowingLimit): the gang's 8 GPUs of quota and 4 lent let in a
    12-GPU waiter of its ClusterQueue, which holds 8 GPUs of quota alone."""
    ctrl = parked_gang(fabric)
    cohort = f"{fabric.ns}-pool"
    set_quota(fabric, fabric.cq, 8, cohort)  # the gang holds all of it
    lender = other_queue(fabric, "lender")
    try:
        set_quota(fabric, lender, 8, cohort, lending=2)  # lends 2: 8 + 2 < 12
        waiter(fabric, "big", gpus=12)
        assert run(ctrl) == [] and ctrl.quota_yields == 0 and active(fabric, "gang")
        set_quota(fabric, lender, 8, cohort, lending=4)  # lends 4, but the waiter's ClusterQueue may borrow only 2
        set_quota(fabric, fabric.cq, 8, cohort, borrowing=2)
        waiter(fabric, "big-2", gpus=12)
        assert run(ctrl) == [] and ctrl.quota_yields == 0 and active(fabric, "gang")
        set_quota(fabric, fabric.cq, 8, cohort, borrowing=4)  # 8 given back + 4 borrowed = 12
        waiter(fabric, "big-3", gpus=12)
        assert run(ctrl) == []
        assert ctrl.quota_yields == 1 and yielded_to(fabric, "gang") == f"{fabric.ns}/big"  # the oldest waiter first
    finally:
        fabric.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", lender)


def test_a_parked_workload_whose_quota_its_cluster_queue_keeps_from_the_cohort_gives_nothing_to_another(fabric: Fabric) -> None:
    """A waiter of another ClusterQueue of the cohort gets the gang's quota only if the gang's
    ClusterQueue lends it: with a lendingLimit of 0 the gang's release would let nothing in."""
    ctrl = parked_gang(fabric)
    cohort = f"{fabric.ns}-pool"
    set_quota(fabric, fabric.cq, 8, cohort, lending=0)
    other = other_queue(fabric, "other")
    try:
        set_quota(fabric, other, 4, cohort)  # the waiter's own 4 GPUs: short of its 8 without the gang's
        waiter(fabric, "elsewhere", queue="lq-other", gpus=8)
        assert run(ctrl) == [] and ctrl.quota_yields == 0 and active(fabric, "gang")
        set_quota(fabric, fabric.cq, 8, cohort, lending=8)  # now it lends all of it
        waiter(fabric, "elsewhere-2", queue="lq-other", gpus=8)
        assert run(ctrl) == []
        assert ctrl.quota_yields == 1 and yielded_to(fabric, "gang") == f"{fabric.ns}/elsewhere"
    finally:
        fabric.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", other)


def test_a_waiter_served_takes_its_quota_from_what_the_next_waiter_of_the_pass_could_use(fabric: Fabric) -> None:
    """Two gangs of 8 GPUs hold all 16 of the ClusterQueue's quota. The older waiter (4 GPUs) is
    given the newest gang's 8; Kueue admits it first, so 12 are left for the 16-GPU waiter, whom
    the other gang's 8 would not let in: it keeps its quota."""
    ctrl = parked_gang(fabric)
    fabric.submit("gang-2", [("main", 2, 4)])
    (second,) = run(ctrl)
    assert second.parked
    set_quota(fabric, fabric.cq, 16)
    waiter(fabric, "small", gpus=4)
    time.sleep(1.1)  # created a second later (creationTimestamp counts seconds): Kueue's order, whatever order they are seen in
    waiter(fabric, "large", gpus=16)
    assert run(ctrl) == []
    assert ctrl.quota_yields == 1 and yielded_to(fabric, "gang-2") == f"{fabric.ns}/small"
    assert active(fabric, "gang")  # 16 - 4 taken + 8 = 12 < 16


def gave_and_waits_beside_another(fabric: Fabric, ctrl: Controller) -> str:
    """The parked "gang" gives its quota to "late", is reactivated and refused quota by Kueue, its
    need on file; "other" then parks beside it, and the gang takes none of its quota. Its key."""
    key = f"{fabric.ns}/gang"
    waiter(fabric, "late")
    run(ctrl)
    kueue_deactivates(fabric, "gang")
    fabric.kueue.reserve_quota(fabric.ns, "late", fabric.cq, fabric.flavor)
    run(ctrl)
    assert active(fabric, "gang") and ctrl.parking.is_aside(key)  # reactivated, refused quota by Kueue (QuotaReserved=False)
    fabric.submit("other", [("main", 2, 4)])
    (other,) = run(ctrl)
    assert other.parked and active(fabric, "other")  # the gang waits for quota beside it, and takes none: its need is on file
    assert ctrl.quota_yields == 1
    return key


def test_a_giver_takes_parked_quota_only_once_an_event_reached_it(fabric: Fabric) -> None:
    """The simulator's rule too (``WaitingRoom.is_aside``, one function for both; its twin is
    ``test_sim.py::test_a_job_that_gave_its_quota_back_takes_parked_quota_once_an_event_reached_it``):
    a Workload that gave its quota back and waits for it again takes none from another parked one
    while its need is on file (holding quota, it would park again undecided in what it took); once
    an event reached it, its need is dropped, it may fit now, and it waits as any Workload does."""
    ctrl = parked_gang(fabric)
    key = gave_and_waits_beside_another(fabric, ctrl)
    fabric.core.patch_node(fabric.node_name(0, 0, 1), {"metadata": {"labels": {"touched": "yes"}}})  # wakes every parked Workload
    (again,) = run(ctrl)  # "other" decided afresh (parks again); the gang's need is dropped: it holds no quota to be decided on
    assert again.parked and not ctrl.parking.is_aside(key) and key not in ctrl.parking
    assert not active(fabric, "other") and yielded_to(fabric, "other") == key and ctrl.quota_yields == 2


def test_a_giver_an_event_reached_takes_quota_only_when_its_placement_fits_now(fabric: Fabric) -> None:
    """The simulator's rule too (``settle_givers``, one function for both; its twin is
    ``test_sim.py::test_a_giver_an_event_reached_comes_back_only_when_its_placement_fits_now``):
    under ``decisions.quota_yield_back_when_fits`` an event that reaches a Workload that gave its
    quota back drops its need only if the placement it was parked on fits now: otherwise it would
    take the quota, be decided, park and give it back again, a deactivation, an eviction and a
    decision for nothing."""
    fabric.install()
    busy(fabric)
    decisions = DecisionSettings(park_waiting=True, quota_yield_back_when_fits=True)
    ctrl = fabric.controller(settings=fabric.settings().model_copy(update={"decisions": decisions}))
    fabric.submit("gang", [("main", 2, 4)])
    (first,) = run(ctrl)
    assert first.parked
    key = gave_and_waits_beside_another(fabric, ctrl)
    fabric.core.patch_node(fabric.node_name(0, 0, 1), {"metadata": {"labels": {"touched": "yes"}}})  # wakes every parked Workload
    (again,) = run(ctrl)  # "other" decided afresh (parks again); the gang's island is still busy: its need stays on file
    assert again.parked and ctrl.parking.is_aside(key)
    assert active(fabric, "other") and ctrl.quota_yields == 1  # so it takes none of the quota "other" holds
    fabric.finish("other")
    run(ctrl)
    fabric.finish_pod("busy-b0c1")  # island b0c1 is whole again: the event reaches the gang, and its placement fits
    run(ctrl)
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    (decided,) = run(ctrl)  # its need dropped: decided afresh on its quota, not parked again undecided
    assert decided.outcome == "admit" and ctrl.reparked == 0 and records_of(fabric, "gang") == 2
    assert not ctrl.parking.is_aside(key) and key not in ctrl.parking


@pytest.mark.parametrize("mode", ["fits", "starts"])
def test_a_giver_whose_placement_fits_now_is_reactivated_while_a_workload_queued_before_the_give_waits(fabric: Fabric, mode: str) -> None:
    """``queueing.lendParked`` (the simulator's twin: ``test_sim.py::
    test_a_giver_whose_placement_fits_now_comes_back_while_a_larger_job_queued_before_it_waits``):
    the gang gave its quota to "late" while "second", queued before the give, waits for quota; it
    stays out until the request its decision searched fits an island, then comes back at once
    (under ``starts`` the ClusterQueue's free quota covers it too) and is decided afresh."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["queueing"] = {"lendParked": mode}
    fabric.install(doc)
    busy(fabric)
    ctrl = parking(fabric)
    key = f"{fabric.ns}/gang"
    gang_gave_to_late(fabric, ctrl)
    run(ctrl)
    assert not active(fabric, "gang") and ctrl.quota_lends == 0  # "second" waits, and no island has room for the gang
    fabric.finish_pod("busy-b0c1")  # island b0c1 is whole again: the gang's placement fits now
    run(ctrl)
    assert active(fabric, "gang") and yielded_to(fabric, "gang") is None and ctrl.quota_lends == 1
    assert not ctrl.parking.is_aside(key) and key not in ctrl.parking  # decided afresh on its next quota, never parked again undecided
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    (decided,) = run(ctrl)
    assert decided.outcome == "admit" and records_of(fabric, "gang") == 2
    (record,) = [r for r in fabric.decision_records() if r["workload"] == "gang" and r["outcome"] == "admit"]
    assert any(f"queueing.lendParked: {mode}" in n for n in record["notes"])  # the record says why it came back


def quota_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many Workloads each ``ReservedIndex.totals`` call reads the quota of, one entry per read."""
    reads: list[int] = []
    real = _yield_index.reserved_by_workloads

    def counting(objs: Any, names: Any) -> Any:
        reads.append(1)
        return real(objs, names)
    monkeypatch.setattr(_yield_index, "reserved_by_workloads", counting)
    return reads


def test_the_quota_reserved_warmed_at_the_first_list_is_what_a_cold_pass_adds_up_and_the_first_pass_reads_nothing_more(
        fabric: Fabric, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sync`` adds up the quota every listed Workload reserves before the first pass: the totals
    are those a controller whose first pass is cold adds up, that pass then reads no Workload's
    quota again, and the first pass gives as it would. The ClusterQueue's status reports nothing
    reserved, so only the Workloads count: all 12 GPUs of its quota are held, 4 by a Workload
    admitted before the start (nothing touches it after) and 8 by the gang, so a 12-GPU waiter
    would not start with the gang's given back and gets nothing, and the 8-GPU waiter behind it
    gets them (a total short by the admitted one's 4 would give them to the first)."""
    fabric.install()
    busy(fabric)
    set_quota(fabric, fabric.cq, 12)
    fabric.submit("runner", [("main", 1, 4)])
    (admitted,) = run(parking(fabric))  # a controller before the start admits it
    assert admitted.outcome == "admit"
    fabric.submit("gang", [("main", 2, 4)])  # Kueue reserves its 8 GPUs
    waiter(fabric, "big", gpus=12)  # ahead of "late" in Kueue's order: created first (in the same second, its name is first)
    waiter(fabric, "late", gpus=8)
    warm = parking(fabric)
    warm.sync()
    cold = parking(fabric)
    for w in cold.watches:  # the lists alone, as sync applies them, without the warm-up
        cold._apply_list(w.resource, fabric.port.list(w.resource, namespace=w.namespace, field_selector=w.field_selector).items)
    gpu = warm.quota_yield.gpu_resource()
    names = (gpu,) if isinstance(gpu, str) else gpu
    reads = quota_reads(monkeypatch)
    assert warm.quota_yield.reserved is not None and cold.quota_yield.reserved is not None
    totals = warm.quota_yield.reserved.totals(warm.quota_yield.objects, names)
    assert reads == []  # the first pass has no Workload's quota left to read
    assert totals == cold.quota_yield.reserved.totals(cold.quota_yield.objects, names)  # the cluster holds other tests' Workloads too
    assert totals[(fabric.cq, fabric.flavor)] == 12
    assert len(reads) == len(cold.quota_yield.objects) >= 4  # cold: every Workload read
    (gang,) = warm.process()  # no list again: decided once more after the start, it parks, then gives its quota
    assert gang.parked and not active(fabric, "gang") and yielded_to(fabric, "gang") == f"{fabric.ns}/late"


def test_with_the_quota_over_used_a_waiter_is_given_nothing_when_its_want_given_back_would_not_let_it_in(fabric: Fabric) -> None:
    """Over-used quota (the ClusterQueue's nominal quota cut to 14 under the two parked gangs' 16):
    Kueue's ``ClusterQueueSnapshot.Available`` (pkg/cache/scheduler/clusterqueue_snapshot.go) is
    0 while a ClusterQueue is in debt, so an 8-GPU waiter needs the 2 over and its 8 given back.
    A waiter takes at most its want: one gang's 8 leave 6, which would not let it in, and a second
    gang would give it more than it asks for, so nobody gives; a 6-GPU waiter behind it is let in
    by one gang's 8, the newest parked."""
    ctrl = parked_gang(fabric)
    fabric.submit("gang-2", [("main", 2, 4)])
    (second,) = run(ctrl)
    assert second.parked
    set_quota(fabric, fabric.cq, 14)
    waiter(fabric, "eight", gpus=8)
    assert run(ctrl) == []
    assert ctrl.quota_yields == 0 and active(fabric, "gang") and active(fabric, "gang-2")
    waiter(fabric, "six", gpus=6)
    assert run(ctrl) == []
    assert ctrl.quota_yields == 1 and active(fabric, "gang") and yielded_to(fabric, "gang-2") == f"{fabric.ns}/six"


def test_a_waiter_given_its_quota_and_gone_unseen_leaves_the_next_pass_its_givers(fabric: Fabric) -> None:
    """A waiter served in full is counted as taking its GPUs until it holds quota or is gone. One
    deleted while no event said so (the next list no longer has it) is dropped from that count on
    the next pass that reads the quota, and that pass still gives: here to a waiter Kueue refused
    quota only after the first pass (a new version of a known waiter, so the waiters are not read again)."""
    ctrl = parked_gang(fabric)
    fabric.submit("gang-2", [("main", 2, 4)])
    (second,) = run(ctrl)
    assert second.parked
    waiter(fabric, "late")
    waiter(fabric, "other", tried=False)  # Kueue has not tried it yet: nothing for it on this pass
    assert run(ctrl) == []
    assert yielded_to(fabric, "gang-2") == f"{fabric.ns}/late" and active(fabric, "gang") and ctrl.quota_yields == 1
    fabric.custom.delete_namespaced_custom_object(GROUP, VERSION, fabric.ns, "workloads", "late")  # gone; run lists again, no event
    fabric.kueue._write(fabric.ns, "other", "pending", lambda wl: {"conditions": [{
        "type": "QuotaReserved", "status": "False", "reason": "Pending", "lastTransitionTime": now_rfc3339(),
        "message": "couldn't assign flavors to pod set main: insufficient unused quota"}]})
    assert run(ctrl) == []
    assert ctrl.quota_yields == 2 and yielded_to(fabric, "gang") == f"{fabric.ns}/other"

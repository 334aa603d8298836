"""The queue manager fed by the controller on the real apiserver: a gang's reservation is written
on its Workload and a new controller rebuilds the same one, with either target rule (no placement lands on the reserved
nodes except by backfill); a preemption hold survives a restart; runtimes are learned from
Finished Workloads, again after a restart from those the API still shows; the wait-or-span
numbers reach the check, the decision record and ``explain``; ``atoll queue`` names the
reservation and the expected start; a warm standby keeps no reservation that ended as it followed."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from admission.controller import Controller
from admission.controller._queue_state import HELD_CONDITION, RESERVED_CONDITION
from admission.controller._records import rfc3339
from admission.queue import Reservation
from tests.admission.fabric import GROUP, VERSION, Fabric, planned, profiles_doc, run
from tests.kube_objects import _kueue_conditions, apply_workload_status, cluster_queue, local_queue, set_condition, workload

pytestmark = pytest.mark.apiserver

LIMIT = 3600


def submit(fabric: Fabric, name: str, pods: int, *, limit: int | None = None, priority: int | None = None) -> None:
    manifest = workload(fabric.ns, name, [("main", pods, 4)])
    if limit is not None:
        manifest["spec"]["maximumExecutionTimeSeconds"] = limit
    if priority is not None:
        manifest["spec"]["priority"] = priority
    fabric.kueue.create(manifest)
    fabric.kueue.reserve_quota(fabric.ns, name, fabric.cq, fabric.flavor)


def condition(fabric: Fabric, name: str, kind: str) -> dict[str, Any] | None:
    return next((c for c in fabric.workload(name)["status"].get("conditions") or [] if c["type"] == kind), None)


def mine(fabric: Fabric, ctrl: Any) -> list[Reservation]:
    """The reservations ``ctrl`` holds for this test's Workloads (the apiserver is shared)."""
    return [r for r in ctrl.queue_state.outlook.reservations.all() if r.holder.startswith(f"{fabric.ns}/")]


def reserving(fabric: Fabric, reserve: bool = True) -> Any:
    """Four cliques of 8 GPUs: three full, one half full with a Workload that ends within the hour;
    a 2 × 4-GPU gang then waits, and reserves (reserveAfterSeconds 0) the half-full clique
    (``reserve=False``: the profile reserves nothing)."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    if reserve:
        doc["profiles"]["strict"]["queueing"] = {"reserveAfterSeconds": 0}
    fabric.install(doc)
    ctrl = fabric.controller()
    for i in range(3):
        submit(fabric, f"full-{i}", 2)
    submit(fabric, "half", 1, limit=LIMIT)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 4
    submit(fabric, "gang", 2)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"
    return ctrl


def test_a_reservation_is_written_and_a_new_controller_holds_the_same(fabric: Fabric) -> None:
    ctrl = reserving(fabric)
    key = f"{fabric.ns}/gang"
    held = ctrl.queue_state.outlook.reservations.held_by(key)
    half = set(planned(fabric.entry("half")))
    assert held is not None and held.gpus == 8 and half < {n for n, _ in held.nodes}  # the clique with the fewest GPUs to drain
    started = ctrl.queue_state.outlook.running(f"{fabric.ns}/half")
    assert started is not None and held.expected_free == started.started + LIMIT
    cond = condition(fabric, "gang", RESERVED_CONDITION)
    assert cond is not None and cond["status"] == "True" and Reservation.decode(key, cond["message"]) == held
    assert "reserves 8 GPUs on 2 nodes" in fabric.entry("gang")["message"]

    ctrl.stop()
    again = fabric.controller()
    again.sync()
    assert mine(fabric, again) == mine(fabric, ctrl) == [held]
    reserved = {n for n, _ in held.nodes}
    free = reserved - half
    submit(fabric, "small", 1)  # no limit: the only free node is reserved, so it waits
    (small,) = run(again)
    assert small.outcome == "wait"
    submit(fabric, "short", 1, limit=600)  # ends long before the half-full clique is expected free: backfills
    (short,) = run(again)
    assert short.outcome == "admit" and set(planned(fabric.entry("short"))) == free
    assert again.queue_state.outlook.reservations.held_by(key) == held  # backfill takes nothing from the gang


def test_a_standby_that_takes_the_lease_holds_the_leaders_reservation_and_keeps_others_off_it(fabric: Fabric) -> None:
    """A leader change, not a restart: a warm standby follows the Workloads while the leader
    reserves, then leads. It holds the same reservation, so a Workload without a limit waits
    off the reserved free node and one that ends before the expected free time backfills it."""
    leader = reserving(fabric)
    key = f"{fabric.ns}/gang"
    held = leader.queue_state.outlook.reservations.held_by(key)
    assert held is not None
    standby = fabric.controller()
    standby.start(leading=False)
    try:
        assert standby.wait_synced(30)
        assert _until(lambda: mine(fabric, standby) == [held])  # read from the condition on the gang's Workload
        leader.stop()
        standby.lead()
        free = {n for n, _ in held.nodes} - set(planned(fabric.entry("half")))
        submit(fabric, "small", 1)  # no limit: the only free node is the gang's
        assert _until(lambda: fabric.entry("small")["state"] != "Pending")
        assert fabric.entry("small")["state"] == "Retry"
        submit(fabric, "short", 1, limit=600)  # ends long before the held clique is expected free
        assert _until(lambda: fabric.entry("short")["state"] != "Pending")
        assert fabric.entry("short")["state"] == "Ready" and set(planned(fabric.entry("short"))) == free
        assert standby.queue_state.outlook.reservations.held_by(key) == held
    finally:
        standby.stop()


def test_idle_held_gpus_count_neither_bound_nor_owed_pods(fabric: Fabric) -> None:
    """No pod is bound in this test: the held clique's GPUs are taken only by what admitted
    Workloads owe, so a count from bound pods alone would read all 8 as idle."""
    ctrl = reserving(fabric)
    assert ctrl.queue_state.idle_held_gpus(fabric.flavor) == 4  # "half" owes its 4-GPU pod on the held clique
    submit(fabric, "short", 1, limit=600)  # backfills the held clique's free node
    (short,) = run(ctrl)
    assert short.outcome == "admit"
    assert ctrl.queue_state.idle_held_gpus(fabric.flavor) == 0


def test_the_queue_gauges_count_a_reservation_the_controller_holds_and_drop_it_when_the_gang_is_placed(fabric: Fabric) -> None:
    """The gauges read the controller's own reservations (not hints set by hand): the gang holds
    one clique, 4 of its 8 GPUs free and idle for it; a second gang waits beside it."""
    def gauge(name: str, **labels: str) -> float | None:
        return fabric.metrics.registry.get_sample_value(name, labels or {"flavor": fabric.flavor})

    ctrl = reserving(fabric)
    fabric.clock.advance(ctrl.GAUGE_SECONDS)  # the held gauges are measured at most this often per flavor
    submit(fabric, "second", 2)
    (second,) = run(ctrl)
    assert second.outcome == "wait"
    assert (gauge("atoll_held_domains"), gauge("atoll_idle_held_gpus")) == (1, 4)
    assert gauge("atoll_waiting_workloads_by_band", reason="no-domain", band="8-15") == 2
    fabric.finish("half")
    fabric.requeue("gang")
    fabric.clock.advance(ctrl.GAUGE_SECONDS)
    assert "admit" in [v.outcome for v in run(ctrl)]
    assert ctrl.queue_state.outlook.reservations.held_by(f"{fabric.ns}/gang") is None
    assert (gauge("atoll_held_domains"), gauge("atoll_idle_held_gpus")) == (0, 0)


def test_the_reservations_gauge_counts_reservations_alone_with_a_suspended_one_apart(fabric: Fabric) -> None:
    """``atoll_held_domains`` adds preemption holds and suspended reservations; ``atoll_reservations``
    counts the gangs' reservations alone, by state: active while the holder holds quota, suspended
    (blocking nobody) while it holds none, active again once it has quota back."""
    def gauge(state: str) -> float | None:
        return fabric.metrics.registry.get_sample_value("atoll_reservations", {"flavor": fabric.flavor, "state": state})

    ctrl = reserving(fabric)
    key = f"{fabric.ns}/gang"
    fabric.clock.advance(ctrl.GAUGE_SECONDS)  # the queue gauges are measured at most this often per flavor, after a decision
    submit(fabric, "second", 2)
    assert [v.outcome for v in run(ctrl)] == ["wait"]
    assert (gauge("active"), gauge("suspended")) == (1, 0)
    loses_quota(fabric, "gang", "preempted")
    fabric.clock.advance(ctrl.GAUGE_SECONDS)
    submit(fabric, "small", 1)
    assert "admit" in [v.outcome for v in run(ctrl)]
    assert ctrl.queue_state.outlook.reservations.suspended(key)
    assert (gauge("active"), gauge("suspended")) == (0, 1)
    gets_quota(fabric, "gang")
    fabric.clock.advance(ctrl.GAUGE_SECONDS)
    assert "wait" in [v.outcome for v in run(ctrl)]
    assert not ctrl.queue_state.outlook.reservations.suspended(key)
    assert (gauge("active"), gauge("suspended")) == (1, 0)


def test_the_reservation_ends_when_the_gang_is_placed(fabric: Fabric) -> None:
    ctrl = reserving(fabric)
    fabric.finish("half")
    fabric.requeue("gang")
    (placed,) = run(ctrl)
    assert placed.outcome == "admit"
    assert ctrl.queue_state.outlook.reservations.held_by(f"{fabric.ns}/gang") is None
    cond = condition(fabric, "gang", RESERVED_CONDITION)
    assert cond is not None and cond["status"] == "False"
    fresh = fabric.controller()
    fresh.sync()
    assert not mine(fabric, fresh)


@pytest.mark.parametrize("reserve", [True, False], ids=["reserving", "not-reserving"])
def test_a_gang_behind_a_stream_of_small_workloads_is_placed_once_its_clique_drains(fabric: Fabric, reserve: bool) -> None:
    """Three cliques full, one half full until ``half`` ends. A gang waits; 1-pod Workloads
    without a limit keep coming. Reserving, the gang is placed as soon as ``half`` ends, and the
    small ones wait behind it; without a reservation they take each node of the clique as it
    frees, and the gang still waits."""
    ctrl = reserving(fabric, reserve)
    held = ctrl.queue_state.outlook.reservations.held_by(f"{fabric.ns}/gang")
    assert (held is not None) == reserve
    submit(fabric, "small-0", 1)
    (small,) = run(ctrl)
    assert small.outcome == ("wait" if reserve else "admit")  # the clique's free node: the gang's, or the first to ask
    fabric.finish("half")
    submit(fabric, "small-1", 1)
    fabric.requeue("gang")
    run(ctrl)
    states = {n: fabric.entry(n)["state"] for n in ("gang", "small-0", "small-1")}
    if reserve:
        assert states == {"gang": "Ready", "small-0": "Retry", "small-1": "Retry"}
        assert held is not None and set(planned(fabric.entry("gang"))) == {n for n, _ in held.nodes}  # half's clique
    else:
        assert states == {"gang": "Retry", "small-0": "Ready", "small-1": "Ready"}


def test_a_workload_without_a_limit_never_backfills_even_after_a_restart(fabric: Fabric) -> None:
    ctrl = reserving(fabric)
    ctrl.stop()
    again = fabric.controller()
    again.sync()
    submit(fabric, "long", 1, limit=2 * LIMIT)  # ends after the expected free time: no backfill
    (long,) = run(again)
    assert long.outcome == "wait"


def test_reservations_are_bounded_per_flavor_before_and_after_a_restart(fabric: Fabric) -> None:
    ctrl = reserving(fabric)  # maxReservationsPerFlavor defaults to 1: the first gang holds it
    submit(fabric, "second", 2)
    (second,) = run(ctrl)
    assert second.outcome == "wait" and f"no reservation: flavor {fabric.flavor} holds its 1 already" in second.message
    assert condition(fabric, "second", RESERVED_CONDITION) is None
    ctrl.stop()
    again = fabric.controller()
    again.sync()
    assert [r.holder for r in mine(fabric, again)] == [f"{fabric.ns}/gang"]


def test_a_reservation_unreadable_on_its_workload_is_not_held_after_a_restart_and_its_gang_reserves_afresh(fabric: Fabric) -> None:
    ctrl = reserving(fabric)
    key = f"{fabric.ns}/gang"
    held = ctrl.queue_state.outlook.reservations.held_by(key)
    assert held is not None
    ctrl.stop()
    cond = condition(fabric, "gang", RESERVED_CONDITION)
    assert cond is not None
    apply_workload_status(fabric.custom, fabric.ns, "gang", {"conditions": [{**cond, "message": "{not json"}]}, manager="someone")
    again = fabric.controller()
    again.sync()
    assert mine(fabric, again) == []  # nothing guessed from what it cannot read
    fabric.requeue("gang")
    (gang,) = run(again)
    assert gang.outcome == "wait"
    renewed = again.queue_state.outlook.reservations.held_by(key)
    assert renewed is not None and (renewed.path, renewed.nodes) == (held.path, held.nodes)  # the same clique, reserved anew
    cond = condition(fabric, "gang", RESERVED_CONDITION)
    assert cond is not None and Reservation.decode(key, cond["message"]) == renewed  # and written readable again


def test_a_soonest_free_target_is_written_and_a_new_controller_holds_the_same(fabric: Fabric) -> None:
    """Four cliques of 8 GPUs: one full until 600 s from now, two full with no limit, one half full
    until 10 hours from now. Fewest-to-drain would take the half-full clique (4 GPUs to drain);
    ``soonestFree`` takes the one expected free in 600 s."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["queueing"] = {"reserveAfterSeconds": 0, "reserveTarget": "soonestFree", "retargetMarginSeconds": 1800}
    fabric.install(doc)
    ctrl = fabric.controller()
    submit(fabric, "soon", 2, limit=600)
    for i in range(2):
        submit(fabric, f"full-{i}", 2)
    submit(fabric, "half", 1, limit=10 * LIMIT)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 4
    submit(fabric, "gang", 2)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"
    key = f"{fabric.ns}/gang"
    held = ctrl.queue_state.outlook.reservations.held_by(key)
    started = ctrl.queue_state.outlook.running(f"{fabric.ns}/soon")
    assert held is not None and started is not None
    assert {n for n, _ in held.nodes} == set(planned(fabric.entry("soon"))) and held.expected_free == started.started + 600
    ctrl.stop()
    again = fabric.controller()
    again.sync()
    assert mine(fabric, again) == [held]


def test_a_span_level_reservation_is_written_holds_what_frees_in_its_block_and_a_new_controller_holds_the_same(fabric: Fabric) -> None:
    """Eight one-node Workloads fill both blocks; in block b0 one ends in 600 s and one in 900 s,
    on different cliques, the rest run 10 hours. An elastic gang of 2 × 4 GPUs that reserves at
    the span level (``reserveAt: span``) takes those two nodes of b0, expected free in 900 s,
    where its clique (an island reservation) would wait 10 hours for its second node."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["elastic"]["relaxAfterSeconds"] = 3600
    doc["profiles"]["elastic"]["queueing"] = {"reserveAfterSeconds": 0, "reserveAt": "span"}
    doc["defaultProfile"] = "elastic"
    fabric.install(doc)
    ctrl = fabric.controller()
    limits = [600, 10 * LIMIT, 900] + [10 * LIMIT] * 5
    for i, limit in enumerate(limits):
        submit(fabric, f"w{i}", 1, limit=limit)
        assert [v.outcome for v in run(ctrl)] == ["admit"]
    on = {i: next(iter(planned(fabric.entry(f"w{i}")))) for i in range(len(limits))}
    assert on[0] == fabric.node_name(0, 0, 0) and on[2] == fabric.node_name(0, 1, 0)  # best fit fills b0's cliques in order
    submit(fabric, "gang", 2)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"
    key = f"{fabric.ns}/gang"
    held = ctrl.queue_state.outlook.reservations.held_by(key)
    started = ctrl.queue_state.outlook.running(f"{fabric.ns}/w2")
    assert held is not None and started is not None and held.capture
    assert held.path == (f"{fabric.ns}-b0",) and dict(held.nodes) == {on[0]: 4, on[2]: 4}  # one node of each clique of b0
    assert held.expected_free == started.started + 900
    cond = condition(fabric, "gang", RESERVED_CONDITION)
    assert cond is not None and Reservation.decode(key, cond["message"]) == held

    ctrl.stop()
    again = fabric.controller()
    again.sync()
    assert mine(fabric, again) == [held]
    fabric.finish("w1")  # a node of b0 the reservation did not name frees: the gang holds it too
    submit(fabric, "small", 1)
    (small,) = run(again)
    assert small.outcome == "wait"
    fabric.finish("w0")  # now the gang's clique b0c0 is whole: it is placed there
    fabric.requeue("gang")
    (placed,) = run(again)
    assert placed.outcome == "admit" and set(planned(fabric.entry("gang"))) == {on[0], on[1]}
    assert again.queue_state.outlook.reservations.held_by(key) is None


def test_a_gang_no_clique_can_hold_says_on_its_check_why_it_reserves_nothing(fabric: Fabric) -> None:
    """The profile reserves at the island level (the default). A gang of 3 × 4 GPUs fits no
    clique of 8, so it spans and no clique can be reserved for it (as a DGX H100 gang larger
    than its 8-GPU node): the check's message says so, and no reservation is written."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["elastic"]["relaxAfterSeconds"] = 3600
    doc["profiles"]["elastic"]["queueing"] = {"reserveAfterSeconds": 0}
    doc["defaultProfile"] = "elastic"
    fabric.install(doc)
    ctrl = fabric.controller()
    for i in range(6):
        submit(fabric, f"w{i}", 1, limit=LIMIT)
        assert [v.outcome for v in run(ctrl)] == ["admit"]
    submit(fabric, "gang", 3)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait" and verdict.relaxed
    assert mine(fabric, ctrl) == [] and condition(fabric, "gang", RESERVED_CONDITION) is None
    assert ("no reservation: no nvidia.com/gpu.clique domain holds 12 GPUs, and it spans; queueing.reserveAt: span reserves "
            "where a span lands") in fabric.entry("gang")["message"]


def test_a_preemption_hold_survives_a_restart(fabric: Fabric) -> None:
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["preemptDomain"] = "on"
    fabric.install(doc)
    fabric.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", fabric.cq,
                                              {"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}})
    ctrl = fabric.controller()
    for i in range(4):
        submit(fabric, f"low-{i}", 2, priority=0)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 4
    where = {f"low-{i}": set(planned(fabric.entry(f"low-{i}"))) for i in range(4)}
    submit(fabric, "gang", 2, priority=100)
    assert [v.outcome for v in run(ctrl)] == ["wait"]
    (victim,) = [f"low-{i}" for i in range(4) if fabric.entry(f"low-{i}")["state"] == "Retry"]
    cond = condition(fabric, "gang", HELD_CONDITION)
    assert cond is not None and cond["status"] == "True" and set(where[victim]) <= set(cond["message"].split('"'))
    ctrl.stop()

    again = fabric.controller()
    again.sync()
    assert again.decider.holds[fabric.flavor] == ctrl.decider.holds[fabric.flavor] and len(ctrl.decider.holds[fabric.flavor]) == 1
    held = again.queue_hints.held(str(fabric.workload("gang")["metadata"]["uid"]))
    assert held is not None and held.kind == "preemption"
    fabric.requeue(victim)  # Kueue evicts it and reserves again: its old clique is held for the gang
    assert [v.outcome for v in run(again)] == ["wait"]
    fabric.requeue("gang")
    assert [v.outcome for v in run(again)] == ["admit"]
    assert set(planned(fabric.entry("gang"))) == where[victim]
    assert not again.decider.holds.get(fabric.flavor)  # its own flavor: the cluster holds other tests' Workloads too
    cond = condition(fabric, "gang", HELD_CONDITION)
    assert cond is not None and cond["status"] == "False"


def finished_at(fabric: Fabric, name: str, admitted: float, finished: float, reason: str = "Succeeded") -> None:
    """Kueue's Admitted and Finished conditions at the given times."""
    wl = fabric.workload(name)
    conditions = _kueue_conditions(wl)
    set_condition(conditions, "Admitted", "True", "Admitted", "The workload is admitted", rfc3339(admitted), 1)
    set_condition(conditions, "Finished", "True", reason, f"Job finished: {reason}", rfc3339(finished), 1)
    apply_workload_status(fabric.custom, fabric.ns, name, {"conditions": conditions})


def three_succeeded(fabric: Fabric) -> tuple[Controller, float]:
    """A controller that admitted three 8-GPU Workloads which then ran 1,000, 2,000 and 3,000 s and
    succeeded, and the time they were admitted."""
    fabric.install()
    ctrl = fabric.controller()
    for i in range(3):
        submit(fabric, f"done-{i}", 2)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 3
    t0 = fabric.clock.now()
    for i, seconds in enumerate((1000, 2000, 3000)):
        finished_at(fabric, f"done-{i}", t0, t0 + seconds)
    run(ctrl)
    return ctrl, t0


def test_runtimes_are_learned_from_finished_workloads_and_again_after_a_restart(fabric: Fabric) -> None:
    ctrl, t0 = three_succeeded(fabric)
    est = ctrl.queue_state.outlook.estimator.estimate(f"{fabric.ns}/lq", 8)
    assert est is not None and est.samples == 3 and est.seconds == pytest.approx(2000.0) and est.error == pytest.approx(1000.0)
    assert len(ctrl.queue_state.outlook) == 0  # nothing runs any more
    run(ctrl)  # a relist learns nothing twice
    assert ctrl.queue_state.outlook.estimator.estimate(f"{fabric.ns}/lq", 8).samples == 3  # type: ignore[union-attr]
    again = fabric.controller()
    again.sync()
    est2 = again.queue_state.outlook.estimator.estimate(f"{fabric.ns}/lq", 8)
    assert est2 is not None and (est2.samples, est2.seconds) == (3, est.seconds)


def test_a_failed_workload_teaches_no_runtime_live_or_after_a_restart(fabric: Fabric) -> None:
    ctrl, t0 = three_succeeded(fabric)
    for name in ("crashed", "orphaned"):
        submit(fabric, name, 2)  # the same queue and size band
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 2
    finished_at(fabric, "crashed", t0, t0 + 60, reason="Failed")  # crashed after a minute
    finished_at(fabric, "orphaned", t0, t0 + 30, reason="OwnerNotFound")
    run(ctrl)
    est = ctrl.queue_state.outlook.estimator.estimate(f"{fabric.ns}/lq", 8)
    assert est is not None and (est.samples, est.seconds) == (3, pytest.approx(2000.0))
    assert len(ctrl.queue_state.outlook) == 0  # all ended: none is expected to free room later
    again = fabric.controller()
    again.sync()
    est2 = again.queue_state.outlook.estimator.estimate(f"{fabric.ns}/lq", 8)
    assert est2 is not None and (est2.samples, est2.seconds) == (3, pytest.approx(2000.0))


def test_explain_the_record_and_atoll_queue_show_the_wait_or_span_numbers(fabric: Fabric) -> None:
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["elastic"]["queueing"] = {"waitOrSpan": True, "reserveAfterSeconds": 0}
    fabric.install(doc)
    ctrl = fabric.controller()
    for i in range(3):  # three cliques full for two hours, one half full for one
        submit(fabric, f"full-{i}", 2, limit=2 * LIMIT)
    submit(fabric, "half", 1, limit=LIMIT)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 4
    manifest = workload(fabric.ns, "gang", [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}})
    manifest["spec"]["maximumExecutionTimeSeconds"] = 7200
    fabric.kueue.create(manifest)
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"
    said = f"wait or span: expected wait for one domain {LIMIT}s ± 0s"
    assert said in verdict.message and "expected runtime 7200s ± 0s" in verdict.message  # its own maximumExecutionTimeSeconds
    assert "no span priced now" in verdict.message  # 4 GPUs free in all: no span to price, so relaxAfterSeconds decides
    (record,) = [r for r in fabric.decision_records() if r["workload"] == "gang"]
    assert said in record["message"]
    explained = ctrl.explain(f"{fabric.ns}/gang")
    assert said in explained["check"]["message"] and "reserves 8 GPUs" in explained["check"]["message"]
    (row,) = [r for r in ctrl.waiting_line() if r["workload"] == f"{fabric.ns}/gang"]
    held = ctrl.queue_state.outlook.reservations.held_by(f"{fabric.ns}/gang")
    assert held is not None and row["held"]["kind"] == "reservation" and row["held"]["domain"] == "/".join(held.path)
    assert row["expected_start"] is not None


def test_a_hold_reads_back_as_written_and_anything_else_reads_as_none() -> None:
    from admission.controller._queue_state import decode_hold, encode_hold

    assert decode_hold(encode_hold("f", "lvl", "b0c1", ["n2", "n1"])) == ("f", "lvl", "b0c1", ("n1", "n2"))
    for bad in ("", "{", "[]", '{"flavor": "f"}', '{"flavor": "f", "nodes": "n1"}'):
        assert decode_hold(bad) is None


def test_under_domain_enforcement_no_selector_reaches_free_gpus_reserved_for_another_gang(fabric: Fabric) -> None:
    """2 blocks × 3 cliques × 2 nodes, a one-pod Workload bound on every node; those of one clique
    end first, so a waiting gang reserves that clique, and one of its nodes frees. A span over the
    other two cliques of its block would get the block's selector, and kube-scheduler could bind
    its pods on the reserved free node; the span is taken in the other block instead."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["queueing"] = {"reserveAfterSeconds": 0}
    doc["profiles"]["elastic"]["relaxAfterSeconds"] = 0  # it may span at once
    fabric.install(doc, nodes=False)
    fabric.add_nodes(blocks=2, cliques=3, per_clique=2)
    ctrl = fabric.controller()
    for i in range(12):
        submit(fabric, f"w{i}", 1, limit=600 if i < 2 else 10 * LIMIT)
        (v,) = run(ctrl)
        assert v.outcome == "admit"
    on = {f"w{i}": next(iter(planned(fabric.entry(f"w{i}")))) for i in range(12)}
    for name, node in on.items():  # their pods bound where planned: nothing owed
        fabric.bind_pod(f"{name}-0", node, 4, decision_id=fabric.entry(name)["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])
    submit(fabric, "gang", 2)
    (v,) = run(ctrl)
    held = ctrl.queue_state.outlook.reservations.held_by(f"{fabric.ns}/gang")
    assert v.outcome == "wait" and held is not None and {n for n, _ in held.nodes} == {on["w0"], on["w1"]}  # expected free first
    block = int(on["w0"].split("-b")[-1][0])
    reserved = on["w0"][: -len("n0")]

    def finish(name: str) -> None:
        fabric.finish(name)
        fabric.finish_pod(f"{name}-0")

    finish("w0")  # a reserved node is free: the gang's, not room for others
    for c in range(3):  # one node free in each other clique of that block: only a span there fits
        if fabric.clique(block, c) != reserved:
            finish(next(w for w, n in sorted(on.items()) if n.startswith(f"{fabric.clique(block, c)}n")))
    fabric.kueue.create(workload(fabric.ns, "wide", [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}}))
    fabric.kueue.reserve_quota(fabric.ns, "wide", fabric.cq, fabric.flavor)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait", verdict.message
    assert "that holds free GPUs reserved for another gang" in verdict.message
    far = 1 - block
    for c in range(2):  # and one in two cliques of the other block: the span is taken there
        finish(next(w for w, n in sorted(on.items()) if n.startswith(f"{fabric.clique(far, c)}n")))
    fabric.requeue("wide")
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit", verdict.message
    (update,) = fabric.entry("wide")["podSetUpdates"]
    assert all(n.startswith(f"{fabric.ns}-b{far}c") for n in planned(fabric.entry("wide")))
    assert set(update["nodeSelector"].values()) == {f"{fabric.ns}-b{far}"}


def test_explain_the_record_and_atoll_queue_count_the_gangs_queued_ahead(fabric: Fabric, tmp_path: Path) -> None:
    from admission.cli._explain import main
    from admission.controller._records import iso_time

    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["elastic"].update(relaxAfterSeconds=86400, queueing={"waitOrSpan": True, "waitCountsQueue": True})
    fabric.install(doc)
    ctrl = fabric.controller()
    for i in range(3):  # three cliques full for two hours, one half full for one
        submit(fabric, f"full-{i}", 2, limit=2 * LIMIT)
    submit(fabric, "half", 1, limit=LIMIT)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 4
    for name in ("ahead-0", "ahead-1", "gang"):  # three 2 × 4-GPU gangs of two hours queue in this order
        manifest = workload(fabric.ns, name, [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}})
        manifest["spec"]["maximumExecutionTimeSeconds"] = 2 * LIMIT
        fabric.kueue.create(manifest)
        fabric.kueue.reserve_quota(fabric.ns, name, fabric.cq, fabric.flavor)
        (verdict,) = run(ctrl)
        assert verdict.outcome == "wait"
    # ahead-0 takes the half-full clique when it frees in an hour, ahead-1 and the gang two of the three that free in two
    said = f"expected wait for one domain {2 * LIMIT}s ± 0s"
    assert said in verdict.message and f"after 2 queued ahead (alone {LIMIT}s)" in verdict.message
    (record,) = [r for r in fabric.decision_records() if r["workload"] == "gang"]
    assert said in record["message"]
    (weighed,) = record["wait_or_span"]  # the clique's limits and the two gangs ahead set the wait, not the limits alone
    assert (weighed["expected_wait_seconds"], weighed["wait_basis"], weighed["queued_ahead"]) == (2 * LIMIT, "limits+queue", 2)
    assert said in ctrl.explain(f"{fabric.ns}/gang")["check"]["message"]
    records = tmp_path / "atoll.log"
    records.write_text(fabric.records.getvalue())
    out = io.StringIO()
    assert main([f"{fabric.ns}/gang", "--namespace", fabric.ns, "--admission-check", fabric.check, "--records", str(records)],
                stdout=out, api_client=fabric.api) == 0
    then = out.getvalue().split("-- What Atoll would decide now")[0]
    assert f"wait {2 * LIMIT}s ± 0s for {weighed['domain']} after 2 queued ahead (from limits+queue); " in then
    (row,) = [r for r in ctrl.waiting_line() if r["workload"] == f"{fabric.ns}/gang"]
    assert row["expected_start"] == iso_time(fabric.clock.now() + 2 * LIMIT)  # not the clique free in an hour: ahead-0 takes it
    (first,) = [r for r in ctrl.waiting_line() if r["workload"] == f"{fabric.ns}/ahead-0"]
    assert first["expected_start"] == iso_time(fabric.clock.now() + LIMIT)


def one_node_free_per_clique_of_block_0(fabric: Fabric) -> Controller:
    """A one-pod Workload of an hour bound on every node of the fabric; then one node frees in each
    clique of block 0. Profiles: ``elastic`` spans by cost, priced with the quota line."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["elastic"].update(relaxAfterSeconds=86400, queueing={"waitOrSpan": True, "spanCountsQueue": "quota"})
    fabric.install(doc)
    ctrl = fabric.controller()
    names = [f"w{i}" for i in range(8)]
    for name in names:
        submit(fabric, name, 1, limit=LIMIT)
        (v,) = run(ctrl)
        assert v.outcome == "admit"
    on = {name: next(iter(planned(fabric.entry(name)))) for name in names}
    for name, node in on.items():
        fabric.bind_pod(f"{name}-0", node, 4, decision_id=fabric.entry(name)["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])
    run(ctrl)
    for c in range(2):
        name = next(w for w, n in sorted(on.items()) if n.startswith(f"{fabric.clique(0, c)}n"))
        fabric.finish(name)
        fabric.finish_pod(f"{name}-0")
    run(ctrl)
    return ctrl


def test_a_span_priced_by_the_line_waits_for_a_workload_waiting_for_quota_and_says_so(fabric: Fabric) -> None:
    """2 blocks × 2 cliques × 2 nodes, a one-pod Workload of an hour on every node; one node frees
    in each clique of block 0. A 2 × 4-GPU gang of two hours would span those two nodes now
    (+2,368 s of its own, against an hour's wait for a clique). A one-pod Workload waits for quota
    in the same ClusterQueue: given quota, it would take one of those nodes now; behind the span it
    starts in an hour. Charged that hour, the span costs more than waiting: the gang waits, and the
    check, the record and ``atoll explain`` say why."""
    ctrl = one_node_free_per_clique_of_block_0(fabric)
    small = workload(fabric.ns, "small", [("main", 1, 4)])
    small["spec"]["maximumExecutionTimeSeconds"] = 600
    fabric.kueue.create(small)  # it waits for quota: Kueue reserves none
    gang = workload(fabric.ns, "gang", [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}})
    gang["spec"]["maximumExecutionTimeSeconds"] = 2 * LIMIT
    fabric.kueue.create(gang)
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    (verdict,) = [v for v in run(ctrl) if v is not None]
    said = f"and delays the 1 others in line +{LIMIT}s in all (1 start later)"
    assert verdict.outcome == "wait" and said in verdict.message and "waits (cheaper)" in verdict.message, verdict.message
    assert f"expected wait for one domain {LIMIT}s" in verdict.message
    (record,) = [r for r in fabric.decision_records() if r["workload"] == "gang"]
    assert said in record["message"]
    assert said in ctrl.explain(f"{fabric.ns}/gang")["check"]["message"]


@pytest.mark.parametrize("cohort", [False, True])
def test_a_span_priced_by_the_line_counts_a_waiter_of_another_cluster_queue_only_in_its_cohort(fabric: Fabric, cohort: bool) -> None:
    """As above, but the one-pod Workload waits for quota in another ClusterQueue. Outside the
    gang's cohort it takes none of the quota the span takes: the gang spans. In one cohort with
    it, Kueue could let it in with the quota the gang's ClusterQueue lends: the span is charged its
    hour, and the gang waits."""
    ctrl = one_node_free_per_clique_of_block_0(fabric)
    other = f"{fabric.cq}-team-b"
    fabric.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue(other, fabric.flavor, 0, fabric.check))
    try:
        fabric.custom.create_namespaced_custom_object(GROUP, VERSION, fabric.ns, "localqueues", local_queue(fabric.ns, "lq-team-b", other))
        if cohort:
            for cq in (fabric.cq, other):
                fabric.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq, {"spec": {"cohortName": f"{fabric.ns}-pool"}},
                                                          _content_type="application/merge-patch+json")
        small = workload(fabric.ns, "small", [("main", 1, 4)], queue="lq-team-b")
        small["spec"]["maximumExecutionTimeSeconds"] = 600
        fabric.kueue.create(small)  # it waits for quota in the other ClusterQueue: Kueue reserves none
        gang = workload(fabric.ns, "gang", [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}})
        gang["spec"]["maximumExecutionTimeSeconds"] = 2 * LIMIT
        fabric.kueue.create(gang)
        fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
        (verdict,) = [v for v in run(ctrl) if v is not None]
        if cohort:
            assert verdict.outcome == "wait" and f"delays the 1 others in line +{LIMIT}s" in verdict.message, verdict.message
        else:
            assert verdict.outcome == "admit", verdict.message
    finally:
        fabric.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", other)


def loses_quota(fabric: Fabric, name: str, how: str) -> None:
    """Kueue takes ``name``'s quota: its own preemption (evicted, Preempted, released), or a user's
    ``spec.active=false`` (Kueue evicts it, reason Deactivated, and releases it)."""
    if how == "preempted":
        fabric.kueue.preempt(fabric.ns, name)
        return
    fabric.kueue._write(fabric.ns, name, "deactivate", lambda wl: {"active": False}, spec=True)
    fabric.kueue.evict(fabric.ns, name, "Deactivated", "The workload is deactivated")
    fabric.kueue.release(fabric.ns, name)


def gets_quota(fabric: Fabric, name: str) -> None:
    """Kueue reserves quota for ``name`` again (a deactivated one is made active first)."""
    if fabric.workload(name).get("spec", {}).get("active", True) is False:
        fabric.kueue._write(fabric.ns, name, "activate", lambda wl: {"active": True}, spec=True)
    fabric.kueue.reserve_quota(fabric.ns, name, fabric.cq, fabric.flavor)


@pytest.mark.parametrize("how", ["preempted", "deactivated"])
def test_a_reservation_whose_holder_loses_its_quota_blocks_nobody_until_it_holds_quota_again(fabric: Fabric, how: str) -> None:
    """A holder without quota waits in Kueue's queue behind Workloads holding quota: were its
    reservation to keep them out, they could wait on it holding the quota it needs. Suspended, it
    stays on record (on the Workload too, so a restarted controller has it suspended) and blocks
    again once its holder holds quota again. Only a placement on its nodes names the suspension."""
    ctrl = reserving(fabric)
    key = f"{fabric.ns}/gang"
    held = ctrl.queue_state.outlook.reservations.held_by(key)
    assert held is not None
    free = {n for n, _ in held.nodes} - set(planned(fabric.entry("half")))
    loses_quota(fabric, "gang", how)
    assert run(ctrl) == []
    assert ctrl.queue_state.outlook.reservations.held_by(key) == held and ctrl.queue_state.outlook.reservations.suspended(key)
    cond = condition(fabric, "gang", RESERVED_CONDITION)
    assert cond is not None and cond["status"] == "True" and Reservation.decode(key, cond["message"]) == held  # kept on record

    ctrl.stop()
    again = fabric.controller()  # rebuilt from the API: the reservation, suspended
    again.sync()
    assert mine(fabric, again) == [held] and again.queue_state.outlook.reservations.suspended(key)

    gets_quota(fabric, "gang")
    (gang,) = run(again)  # decided again with its quota: it still waits, and its reservation blocks again
    assert gang.outcome == "wait" and again.queue_state.outlook.reservations.held_by(key) == held
    assert not again.queue_state.outlook.reservations.suspended(key)
    submit(fabric, "small", 1)
    (small,) = run(again)
    assert small.outcome == "wait"  # the one free node is reserved for the gang again

    loses_quota(fabric, "gang", how)
    fabric.requeue("small")  # its Retry: Kueue requeues it and reserves its quota again
    (small,) = run(again)
    assert small.outcome == "admit" and set(planned(fabric.entry("small"))) == free  # on the reserved node, the holder has no quota
    assert f"reservations suspended, their holders hold no quota, so they block nobody: {key}" in fabric.entry("small")["message"]
    assert again.queue_state.outlook.reservations.held_by(key) == held  # still on record
    # the note is said only where the suspension let a placement in: not on a wait, not on a placement elsewhere
    submit(fabric, "pair", 2)
    (pair,) = run(again)
    assert pair.outcome == "wait" and "reservations suspended" not in fabric.entry("pair")["message"]
    fabric.finish("full-0")  # its clique is free: a Workload placed there owes nothing to the suspension
    submit(fabric, "elsewhere", 1)
    (elsewhere,) = run(again)
    assert elsewhere.outcome == "admit" and set(planned(fabric.entry("elsewhere"))) <= set(planned(fabric.entry("full-0")))
    assert "reservations suspended" not in fabric.entry("elsewhere")["message"]
    assert again.queue_state.outlook.reservations.suspended(key)  # while the gang's reservation is suspended still


def test_a_holder_between_its_own_retries_keeps_its_reservation_in_force(fabric: Fabric) -> None:
    """Atoll's Retry makes Kueue evict the gang (reason ``AdmissionCheck``) and release its quota
    for a backoff: the gang is between its tries, not without quota for good, so its reservation
    still keeps a Workload holding quota off the node it drains (suspended, it would not)."""
    ctrl = reserving(fabric)
    key = f"{fabric.ns}/gang"
    held = ctrl.queue_state.outlook.reservations.held_by(key)
    assert held is not None and fabric.entry("gang")["state"] == "Retry"
    assert fabric.kueue.react(fabric.ns, "gang") == "retry"  # evicted by the check, released, backing off
    run(ctrl)
    assert ctrl.queue_state.outlook.reservations.held_by(key) == held and not ctrl.queue_state.outlook.reservations.suspended(key)
    submit(fabric, "small", 1)
    (small,) = run(ctrl)
    assert small.outcome == "wait" and "reservations suspended" not in fabric.entry("small")["message"]


def _until(done: Callable[[], bool], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _holder_comes_and_goes(fabric: Fabric, leader: Controller, standby: Controller, name: str) -> None:
    """``name`` holds the flavor's reservation (a new gang reserves it), loses its quota, then is
    deleted; the standby, following the API, sees each of the three."""
    key, theirs = f"{fabric.ns}/{name}", standby.queue_state.outlook.reservations
    if name != "gang":
        submit(fabric, name, 2)
        (verdict,) = run(leader)
        assert verdict.outcome == "wait"
    held = leader.queue_state.outlook.reservations.held_by(key)
    assert held is not None
    assert _until(lambda: theirs.held_by(key) == held)
    loses_quota(fabric, name, "preempted")
    run(leader)
    assert _until(lambda: theirs.suspended(key))
    fabric.custom.delete_namespaced_custom_object(GROUP, VERSION, fabric.ns, "workloads", name)
    run(leader)
    assert _until(lambda: theirs.held_by(key) is None)


def test_a_standby_keeps_no_reservation_that_ended_or_was_suspended_as_it_followed(fabric: Fabric) -> None:
    """The leader acts on a reservation's suspension and end (freed room for its parked
    Workloads) and forgets it; a warm standby follows the same Workloads but parks nothing and
    writes nothing. After N holders each lost their quota and then went, the standby's books hold
    what the leader's do (nothing pending, no reservation), not one entry per holder until it
    leads."""
    leader = reserving(fabric)  # "gang" holds the flavor's one reservation
    standby = fabric.controller()
    standby.start(leading=False)
    try:
        assert standby.wait_synced(30)
        for name in ["gang", *(f"gang-{i}" for i in range(4))]:
            _holder_comes_and_goes(fabric, leader, standby, name)
    finally:
        standby.stop()  # the worker's last turn, after the last event it applied, has run
    ours, theirs = leader.queue_state.outlook.reservations, standby.queue_state.outlook.reservations
    assert mine(fabric, standby) == mine(fabric, leader) == []
    assert (theirs.take_ended(), theirs.take_moved(), theirs.take_suspended()) == \
        (ours.take_ended(), ours.take_moved(), ours.take_suspended()) == ([], [], [])

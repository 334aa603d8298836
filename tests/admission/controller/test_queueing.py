"""The queue manager's turn in the controller's own decision (``Decider`` on its cache and
ledger, as the simulator and the controller run it): other Workloads keep out of a gang's
reserved nodes except by backfill, a waiting gang reserves after ``reserveAfterSeconds``, and
wait-or-span says both numbers in the message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from admission.controller._owing import owes
from admission.controller._parking import Parking
from admission.controller._queueing import is_owed
from admission.controller._span_cost import with_quota_waiters
from admission.queue import Need, Reservation, Running, Waiter, WaitingRoom
from admission.simulator._deployed import DeployedAtoll
from policies import ProfilesError, load_profiles
from topology import ClusterModel, ResourceVector, Snapshot

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, queueing: {{reserveAfterSeconds: 600}}}}
  soonest: {{requiredLevel: {CLIQUE}, queueing: {{reserveAfterSeconds: 600, reserveTarget: soonestFree, retargetMarginSeconds: 1800}}}}
  elastic: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 3600, queueing: {{waitOrSpan: true}}}}
  queued: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 86400, queueing: {{waitOrSpan: true, waitCountsQueue: true}}}}
  lined: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 86400,
           queueing: {{waitOrSpan: true, waitCountsQueue: true, spanCountsQueue: quota}}}}
  island: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 3600, queueing: {{reserveAfterSeconds: 600}}}}
  spanning: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 3600, queueing: {{reserveAfterSeconds: 600, reserveAt: span}}}}
""")
NOW = 1000.0


def cluster(used: dict[str, int]) -> ClusterModel:
    """1 SU × 2 islands (r0, r1) × 2 nodes × 4 GPUs; ``used`` pre-occupies nodes."""
    return ClusterModel.model_validate({"name": "test", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "nodes": [{"name": f"r{r}n{n}", "labels": {SU: "u0", CLIQUE: f"r{r}"}, "used": {"nvidia.com/gpu": used.get(f"r{r}n{n}", 0)}}
                  for r in range(2) for n in range(2)]}]})


def atoll(profile: str = "strict", used: dict[str, int] | None = None) -> DeployedAtoll:
    return DeployedAtoll(f"atoll-{profile}", profile, DOC, cluster(used if used is not None else {"r1n0": 4, "r1n1": 4}))


def decide(a: DeployedAtoll, job: int, pods: int, limit: int | None = None, now: float = NOW) -> Any:
    obj = a.workload(job, 0, pods, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024), "training")
    if limit is not None:
        obj["spec"]["maximumExecutionTimeSeconds"] = limit
    return a.decide(job, obj, now)


def reserve(a: DeployedAtoll, nodes: tuple[tuple[str, int], ...], expected_free: float | None = NOW + 1000) -> None:
    assert a.outlook.reservations.add(Reservation("sim/job-99", "f", CLIQUE, ("u0", "r0"), nodes, 0.0, expected_free), limit=1)


def test_a_workload_without_a_limit_keeps_out_of_reserved_nodes() -> None:
    a = atoll()
    reserve(a, (("r0n0", 4), ("r0n1", 4)))
    v = decide(a, 1, 2)
    assert v.outcome == "wait"  # r1 is busy and r0 is reserved: the only island with room is not for it


def test_a_limit_ending_before_the_expected_free_time_backfills() -> None:
    a = atoll()
    reserve(a, (("r0n0", 4), ("r0n1", 4)))
    assert decide(a, 1, 2, limit=2000).outcome == "wait"  # ends at 3000, after the domain is expected free (2000)
    v = decide(a, 2, 2, limit=900)  # ends at 1900: gone before the gang can start
    assert v.outcome == "admit" and v.podset_updates[0]["nodeSelector"] == {CLIQUE: "r0"}


def test_gpus_the_gang_will_not_need_stay_open() -> None:
    a = atoll()
    reserve(a, (("r0n0", 4),))  # the gang needs one node of r0
    v = decide(a, 1, 1)
    assert v.outcome == "admit" and set(v.placements[0].nodes) == {"r0n1"}
    assert decide(a, 2, 1).outcome == "wait"  # r0n1 now holds it; r0n0 stays the gang's


def parked_on(a: DeployedAtoll, side: str, *needs: tuple[str, Need]) -> Callable[[], list[str]]:
    """Park ``needs`` in the room of ``side`` (the simulator's own, or the controller's parking on
    ``a``'s cache); what asking that side at ``now`` for the parked Workloads a reservation's end
    or move wakes (``take_released``, ``Parking.released``) returns."""
    parking = Parking(a.cache, override=True)
    room = parking.room if side == "controller" else WaitingRoom()
    for key, need in needs:
        room.park(key, need)

    def ask(now: float = NOW) -> list[str]:
        if side == "simulator":
            return [str(k) for k in a.take_released(room, now)]
        return parking.released(a.outlook.reservations, a.decider.room_now, now)
    return ask


def test_at_a_reservations_end_the_simulator_and_the_controller_wake_the_same_parked_workloads() -> None:
    """One state, asked by both sides: island r0 has r0n0 busy and r0n1 free, both held by a
    gang's reservation; island r1 is full. Parked, oldest first: a 2 × 4-GPU Workload and a
    1 × 4-GPU one. The reservation ends. The simulator's deployed Atoll (``take_released``) and
    the controller's parking (``Parking.released``), each on that cluster with those parked
    Workloads, wake the same one: the 1-pod Workload the freed node holds, not the 2-pod one."""
    woken: dict[str, list[str]] = {}
    for side in ("simulator", "controller"):
        a = atoll(used={"r0n0": 4, "r1n0": 4, "r1n1": 4})
        reserve(a, (("r0n0", 4), ("r0n1", 4)))
        ask = parked_on(a, side, ("sim/pair", Need("f", CLIQUE, 2, 4)), ("sim/one", Need("f", CLIQUE, 1, 4)))
        assert ask() == []  # nothing ended yet
        assert a.outlook.reservations.release("sim/job-99") is not None
        woken[side] = ask()
    assert woken == {"simulator": ["sim/one"], "controller": ["sim/one"]}


def test_a_gang_reserves_after_reserve_after_seconds_and_releases_when_placed() -> None:
    a = atoll(used={"r0n0": 4, "r1n0": 2, "r1n1": 4})  # r0 lacks 4 GPUs, r1 lacks 6: r0 has the fewest to drain
    a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, limit=5000.0))
    first = decide(a, 7, 2, now=NOW)
    assert first.outcome == "wait" and a.outlook.reservations.held_by("sim/job-7") is None
    a.workloads[7]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
    later = decide(a, 7, 2, now=NOW + 600)
    held = a.outlook.reservations.held_by("sim/job-7")
    assert later.outcome == "wait" and held is not None and held.path == ("u0", "r0") and held.expected_free == 5000.0
    assert "reserves 8 GPUs on 2 nodes of nvidia.com/gpu.clique u0/r0" in later.message
    assert decide(a, 8, 1, now=NOW + 601).outcome == "wait"  # r0n1 is free but reserved; r1 has 2 GPUs, not a 4-GPU pod


def waited_gang(profile: str) -> DeployedAtoll:
    """r0 lacks 4 GPUs until 5,000 s, r1 lacks 6 until 2,500 s; gang job-7 (8 GPUs) has waited 600 s."""
    a = atoll(profile, used={"r0n0": 4, "r1n0": 2, "r1n1": 4})
    a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, limit=5000.0))
    a.outlook.started("sim/y", Running("f", (("r1n0", 2), ("r1n1", 4)), 0.0, limit=2500.0))
    assert decide(a, 7, 2, now=NOW).outcome == "wait"
    a.workloads[7]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
    return a


def test_a_soonest_free_target_reserves_the_domain_expected_free_first() -> None:
    drain, soon = waited_gang("strict"), waited_gang("soonest")
    assert decide(drain, 7, 2, now=NOW + 600).outcome == "wait" and decide(soon, 7, 2, now=NOW + 600).outcome == "wait"
    by_drain, by_soon = drain.outlook.reservations.held_by("sim/job-7"), soon.outlook.reservations.held_by("sim/job-7")
    assert by_drain is not None and by_drain.path == ("u0", "r0") and by_drain.expected_free == 5000.0  # fewest GPUs to drain
    assert by_soon is not None and by_soon.path == ("u0", "r1") and by_soon.expected_free == 2500.0  # expected free 2,500 s sooner


def test_a_held_reservation_moves_past_the_margin_and_keeps_its_age() -> None:
    a = waited_gang("soonest")
    old = Reservation("sim/job-7", "f", CLIQUE, ("u0", "r0"), (("r0n0", 4), ("r0n1", 4)), 50.0, 5000.0)
    assert a.outlook.reservations.add(old, limit=1)
    v = decide(a, 7, 2, now=NOW + 600)
    moved = a.outlook.reservations.held_by("sim/job-7")
    assert moved is not None and moved.path == ("u0", "r1") and moved.since == 50.0  # 5,000 > 2,500 + 1,800: it moves
    assert "moved from u0/r0" in v.message
    b = waited_gang("soonest")
    b.outlook.started("sim/y", Running("f", (("r1n0", 2), ("r1n1", 4)), 0.0, limit=3500.0))  # r1 now frees at 3,500
    assert b.outlook.reservations.add(old, limit=1)
    decide(b, 7, 2, now=NOW + 600)
    kept = b.outlook.reservations.held_by("sim/job-7")
    assert kept is not None and kept.path == ("u0", "r0")  # 5,000 is within 1,800 s of 3,500: it stays


def test_when_a_reservation_moves_the_simulator_and_the_controller_wake_the_same_parked_workloads() -> None:
    """The gang's reservation on r0 (r0n0 busy, r0n1 free) moves to r1, expected free sooner: r0n1
    blocks nobody now. Parked, oldest first: a 2 × 4-GPU Workload, a gang refused a reservation
    (the flavor holds its one), and a 1 × 4-GPU one. Both sides, asked after the decision that
    moved it, wake the 1-pod Workload the node it left holds; the move keeps the flavor's one
    slot, so the gang stays parked. Before, a move woke nobody on either side."""
    woken: dict[str, list[str]] = {}
    for side in ("simulator", "controller"):
        a = waited_gang("soonest")
        assert a.outlook.reservations.add(Reservation("sim/job-7", "f", CLIQUE, ("u0", "r0"), (("r0n0", 4), ("r0n1", 4)), 50.0, 5000.0),
                                          limit=1)
        ask = parked_on(a, side, ("sim/pair", Need("f", CLIQUE, 2, 4)), ("sim/gang", Need("f", CLIQUE, 2, 4, reserves=True)),
                        ("sim/one", Need("f", CLIQUE, 1, 4)))
        assert ask() == []  # nothing moved yet
        assert "moved from u0/r0" in decide(a, 7, 2, now=NOW + 600).message
        woken[side] = ask()
        assert ask() == []  # taken once
    assert woken == {"simulator": ["sim/one"], "controller": ["sim/one"]}


def test_when_a_reservations_window_moves_later_the_simulator_and_the_controller_wake_the_same_parked_workloads() -> None:
    """Gang job-7 reserves island r0 (r0n0 runs a Workload expected to end at 3,000 s, learned;
    r0n1 is free); r1 is full. At 1,600 s two 1 × 4-GPU Workloads wait, each parked with the need
    its decision gave: job-8, limited to 3,000 s (it would end at 4,600 s, after r0 is free: no
    backfill), and job-9 without a limit. Runs turn out longer (the learned runtime doubles): the
    gang, decided again at 1,700 s, keeps its nodes, expected free at 6,000 s. Both sides, asked
    then, wake job-8 alone (it ends at 4,700 s, before 6,000 s, and r0n1 holds it), and it is
    placed on r0n1 by backfill; job-9 stays parked. Before, a window moved on the same nodes
    woke nobody on either side."""
    woken: dict[str, list[str]] = {}
    for side in ("simulator", "controller"):
        a = atoll(used={"r0n0": 4, "r1n0": 4, "r1n1": 4})
        for _ in range(3):
            a.outlook.estimator.learn("sim/default", 4, 3000.0)
        a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, queue="sim/default"))
        assert decide(a, 7, 2, now=NOW).outcome == "wait"
        a.workloads[7]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
        assert decide(a, 7, 2, now=NOW + 600).outcome == "wait"
        held = a.outlook.reservations.held_by("sim/job-7")
        assert held is not None and held.path == ("u0", "r0") and held.expected_free == 3000.0
        limited, unlimited = decide(a, 8, 1, limit=3000, now=NOW + 600), decide(a, 9, 1, now=NOW + 600)
        assert limited.outcome == unlimited.outcome == "wait" and limited.needs[0].limit == 3000.0 and unlimited.needs[0].limit is None
        ask = parked_on(a, side, ("sim/job-8", limited.needs[0]), ("sim/job-9", unlimited.needs[0]))
        assert ask(NOW + 600) == []  # the reservation was made, not moved
        for _ in range(3):
            a.outlook.estimator.learn("sim/default", 4, 9000.0)
        assert decide(a, 7, 2, now=NOW + 700).outcome == "wait"
        later = a.outlook.reservations.held_by("sim/job-7")
        assert later is not None and later.nodes == held.nodes and later.expected_free == 6000.0
        woken[side] = ask(NOW + 700)
        assert ask(NOW + 700) == []  # taken once
        v = decide(a, 8, 1, limit=3000, now=NOW + 700)
        assert v.outcome == "admit" and set(v.placements[0].nodes) == {"r0n1"}
    assert woken == {"simulator": ["sim/job-8"], "controller": ["sim/job-8"]}


def decide_pods(a: DeployedAtoll, job: int, pods: int, gpu: int, limit: int | None = None, now: float = NOW) -> Any:
    obj = a.workload(job, 0, pods, ResourceVector(gpu=gpu, cpu_milli=1000, memory_mib=1024), "training")
    if limit is not None:
        obj["spec"]["maximumExecutionTimeSeconds"] = limit
    return a.decide(job, obj, now)


def test_a_kept_reservation_is_expected_free_when_the_nodes_it_holds_are_and_backfill_is_judged_by_that() -> None:
    """Gang job-7 (2 pods × 2 GPUs, one node's worth) holds r0n0 of island r0; r0n0 runs 2 GPUs
    until 5,000 s, r0n1 runs 4 until 3,000 s, r1 is full until 8,000 s. Decided again, it keeps
    r0n0, so its reservation is expected free at 5,000 s, when r0n0 is: not at 3,000 s, when r0n1,
    the node it would choose afresh, frees. A 2-GPU Workload whose limit ends at 4,601 s is gone
    before then and backfills r0n0's two free GPUs; one ending at 5,601 s is kept out. Before,
    the kept reservation took the fresh node's 3,000 s and kept both out."""
    a = atoll(used={"r0n0": 2, "r0n1": 4, "r1n0": 4, "r1n1": 4})
    a.outlook.started("sim/x", Running("f", (("r0n0", 2),), 0.0, limit=5000.0))
    a.outlook.started("sim/y", Running("f", (("r0n1", 4),), 0.0, limit=3000.0))
    a.outlook.started("sim/z", Running("f", (("r1n0", 4), ("r1n1", 4)), 0.0, limit=8000.0))
    assert decide_pods(a, 7, 2, 2, now=NOW).outcome == "wait"
    a.workloads[7]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
    assert a.outlook.reservations.add(Reservation("sim/job-7", "f", CLIQUE, ("u0", "r0"), (("r0n0", 4),), 50.0, 5000.0), limit=1)
    assert decide_pods(a, 7, 2, 2, now=NOW + 600).outcome == "wait"
    held = a.outlook.reservations.held_by("sim/job-7")
    assert held is not None and held.nodes == (("r0n0", 4),) and held.since == 50.0
    assert held.expected_free == 5000.0
    assert decide_pods(a, 8, 1, 2, limit=4000, now=NOW + 601).outcome == "wait"  # ends at 5,601 s, after r0n0 frees
    v = decide_pods(a, 9, 1, 2, limit=3000, now=NOW + 601)  # ends at 4,601 s: gone before the gang can start
    assert v.outcome == "admit" and set(v.placements[0].nodes) == {"r0n0"}


def test_a_reservation_kept_where_another_island_is_now_the_target_is_timed_on_its_nodes_as_they_are_now() -> None:
    """Gang job-7 (4 pods × 2 GPUs) holds island r0, reserved when r0n0's Workload was expected to
    end at 3,000 s (its queue's learned runtime); r0n1 is free. Runs turn out longer (the learned
    runtime becomes 6,000 s). r1 now has as few GPUs to drain and frees sooner (its two 2-GPU
    Workloads end at 3,500 s), so it is the target, but the held reservation is kept; it is
    expected free at 6,000 s, when its own nodes are. A 4-GPU Workload whose limit ends at
    4,700 s backfills r0n1. Before, the kept reservation stayed at 3,000 s and kept it out."""
    a = atoll(used={"r0n0": 4, "r1n0": 2, "r1n1": 2})
    for _ in range(3):
        a.outlook.estimator.learn("sim/default", 4, 3000.0)
    a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, queue="sim/default"))
    a.outlook.started("sim/y", Running("f", (("r1n0", 2), ("r1n1", 2)), 0.0, limit=3500.0))
    assert decide_pods(a, 7, 4, 2, now=NOW).outcome == "wait"
    a.workloads[7]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
    assert a.outlook.reservations.add(Reservation("sim/job-7", "f", CLIQUE, ("u0", "r0"), (("r0n0", 4), ("r0n1", 4)), 50.0, 3000.0),
                                      limit=1)
    for _ in range(3):
        a.outlook.estimator.learn("sim/default", 4, 9000.0)
    v = decide_pods(a, 7, 4, 2, now=NOW + 700)
    held = a.outlook.reservations.held_by("sim/job-7")
    assert v.outcome == "wait" and held is not None and held.path == ("u0", "r0") and held.since == 50.0, v.message
    assert held.expected_free == 6000.0
    w = decide(a, 8, 1, limit=3000, now=NOW + 700)  # ends at 4,700 s: gone before r0 frees
    assert w.outcome == "admit" and set(w.placements[0].nodes) == {"r0n1"}


def pod_ended(a: DeployedAtoll, side: str, parking: Parking, room: WaitingRoom, node: str) -> list[str]:
    """What ``side`` wakes when a pod leaves ``node``: the simulator's own call when a job ends
    (``DeployedAtoll.nodes_freed`` on the node's row of flavor 0), or the controller's
    ``Parking.node_freed``, both counted on ``room_now``."""
    if side == "simulator":
        return [str(k) for k in a.nodes_freed(room, 0, [a.cache.snapshot("f").node_index[node]])]
    return parking.node_freed(node, a.decider.room_now)


def test_when_a_pod_ends_the_simulator_and_the_controller_wake_the_same_parked_workloads() -> None:
    """Island r1 is full and r0n0 busy; job-1 (one 4-GPU pod) is admitted onto r0n1 and not bound
    yet. A 1 × 4-GPU Workload is parked. A pod leaves r0n1: free on the nodes, but owed to job-1,
    so neither side wakes anyone (before, both woke it on the shared snapshot, and its decision
    found no room). Then r0n0's pod ends: both wake it. The simulator offers a job's end through
    ``DeployedAtoll.nodes_freed`` (``wake_freed``), the controller through ``Parking.node_freed``:
    the same rule on ``room_now``."""
    woken: dict[str, list[list[str]]] = {}
    for side in ("simulator", "controller"):
        a = atoll(used={"r0n0": 4, "r1n0": 4, "r1n1": 4})
        v = decide(a, 1, 1)
        assert v.outcome == "admit" and set(v.placements[0].nodes) == {"r0n1"}
        parking = Parking(a.cache, override=True)
        room = parking.room if side == "controller" else WaitingRoom()
        room.park("sim/one", Need("f", CLIQUE, 1, 4))
        woken[side] = [pod_ended(a, side, parking, room, "r0n1")]
        a.cache.snapshot("f").release("r0n0", ResourceVector(gpu=4))
        woken[side].append(pod_ended(a, side, parking, room, "r0n0"))
    assert woken == {"simulator": [[], ["sim/one"]], "controller": [[], ["sim/one"]]}


def test_wait_or_span_says_both_numbers() -> None:
    a = atoll("elastic", used={"r0n0": 4, "r1n0": 4})  # one free node per island: one island never has 8 now; a span has
    for _ in range(3):
        a.outlook.estimator.learn("sim/default", 8, 3000.0)
    a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, queue="sim/default"))
    a.decider.span_cost = lambda snap, decision: 1.05
    v = decide(a, 1, 2)
    assert "wait or span: expected wait for one domain 2000s" in v.message and "1.050×" in v.message
    assert v.outcome == "admit" and v.relaxed  # 2000 s of waiting against 150 s of slowdown on a 3000 s run: spans
    b = atoll("elastic", used={"r0n0": 4, "r1n0": 4})
    for _ in range(3):
        b.outlook.estimator.learn("sim/default", 8, 3000.0)
    b.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, queue="sim/default"))
    b.decider.span_cost = lambda snap, decision: 2.0  # a span doubles its run: waiting 2000 s is cheaper
    w = decide(b, 1, 2)
    assert w.outcome == "wait" and "waits (cheaper)" in w.message


def test_wait_or_span_says_the_learned_runtimes_error_on_both_sides() -> None:
    """Runtimes of 2,000, 3,000 and 4,000 s learned for the queue: 3,000 s ± 1,000 s (their
    standard deviation). The running Workload's end, and so the wait, carries that error, and
    so does the gang's own expected runtime the span is priced on."""
    a = atoll("elastic", used={"r0n0": 4, "r1n0": 4})
    for seconds in (2000.0, 3000.0, 4000.0):
        a.outlook.estimator.learn("sim/default", 8, seconds)
    a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, queue="sim/default"))
    a.decider.span_cost = lambda snap, decision: 2.0
    v = decide(a, 1, 2)
    assert v.outcome == "wait"
    assert "expected wait for one domain 2000s ± 1000s (u0/r0); best span slows it 2.000× = +3000s on an expected 3000s ± 1000s" \
        in v.message


def two_gangs_ahead(profile: str) -> DeployedAtoll:
    """One free node per island; r0's Workload is expected to end at 3,000 s, r1's at 6,000 s; an
    8-GPU gang runs 3,000 s. Gangs job-1 and job-2 wait for one island (a span would treble their
    run), in that order."""
    a = atoll(profile, used={"r0n0": 4, "r1n0": 4})
    for _ in range(3):
        a.outlook.estimator.learn("sim/default", 8, 3000.0)
    a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, queue="sim/default"))
    a.outlook.started("sim/y", Running("f", (("r1n0", 4),), 0.0, queue="sim/default", limit=6000.0))
    a.decider.span_cost = lambda snap, decision: 3.0
    assert decide(a, 1, 2, now=NOW).outcome == "wait" and decide(a, 2, 2, now=NOW + 1).outcome == "wait"
    a.decider.span_cost = lambda snap, decision: 2.0  # +3,000 s for the gang behind them
    return a


def test_a_gang_behind_two_queued_gangs_expects_to_start_after_them_and_spans_for_it() -> None:
    alone = two_gangs_ahead("elastic")
    v = decide(alone, 3, 2, now=NOW + 2)
    assert v.outcome == "wait" and "expected wait for one domain 1998s ± 0s (u0/r0); " in v.message  # r0 at 3,000 s: cheaper to wait
    queued = two_gangs_ahead("queued")
    # job-1 takes r0 at 3,000 s, job-2 then r1 at 6,000 s with job-1's r0 back at 6,000 s: the gang starts at 6,000 s
    w = decide(queued, 3, 2, now=NOW + 2)
    assert "expected wait for one domain 4998s ± 0s (u0/r1) after 2 queued ahead (alone 1998s)" in w.message
    assert w.outcome == "admit" and w.relaxed  # 4,998 s of waiting against 3,000 s of slowdown: spans
    assert queued.outlook.queued.get("sim/job-3") is None and len(queued.outlook.queued) == 2  # placed: out of the line


def test_a_span_that_takes_the_nodes_both_gangs_ahead_need_is_charged_their_delay_and_waits() -> None:
    a = two_gangs_ahead("lined")
    v = decide(a, 3, 2, now=NOW + 2)
    # spanning, job-3 holds r0n1 and r1n1 for 6,000 s (until 7,002 s): job-1 starts then instead of at
    # 3,000 s, job-2 instead of at 6,000 s; 3,000 s of its own slowdown + 5,004 s > 4,998 s of waiting
    assert "after 2 queued ahead (alone 1998s)" in v.message
    assert "delays the 2 others in line +5004s in all (2 start later) = 8004s; waits (cheaper)" in v.message
    assert v.outcome == "wait" and a.outlook.queued.get("sim/job-3") is not None


def test_workloads_waiting_for_quota_join_the_line_the_span_is_priced_by() -> None:
    a = two_gangs_ahead("lined")
    a.outlook.queued.left("sim/job-1")
    a.outlook.queued.left("sim/job-2")
    # nobody else waits for a domain; a 4-GPU Workload waits for quota on flavor f
    a.outlook.quota_waiters = lambda flavor, cq: [Waiter(flavor, 4, 4, 0, NOW + 5, "sim/default")] if flavor == "f" else []
    assert decide(a, 3, 2, now=NOW + 2).outcome == "wait"  # alone, r0 in 1,998 s against +3,000 s: it waits, in line
    line, me = with_quota_waiters(a.outlook, "sim/job-3", "f", "cluster-queue")
    assert [w.gpus for w in line] == [8, 4] and me == 0  # it waited first: ahead in Kueue's order
    alone = ([a.outlook.queued.get("sim/job-3")], 0)
    assert with_quota_waiters(a.outlook, "sim/job-3", "g", "cluster-queue") == alone  # none on flavor g
    assert with_quota_waiters(a.outlook, "sim/job-3", "f") == alone  # spanCountsQueue: domain leaves them out
    a.outlook.quota_waiters = lambda flavor, cq: [Waiter(flavor, 4, 4, 5, NOW + 5, "sim/default")]  # a higher priority: first
    line, me = with_quota_waiters(a.outlook, "sim/job-3", "f", "cluster-queue")
    assert [w.priority for w in line] == [5, 0] and me == 1


def test_a_gang_ahead_holding_a_reservation_takes_its_reserved_island_not_another() -> None:
    a = two_gangs_ahead("queued")
    assert a.outlook.reservations.add(Reservation("sim/job-1", "f", CLIQUE, ("u0", "r0"), (("r0n0", 4), ("r0n1", 4)), NOW, 3000.0),
                                      limit=1)
    v = decide(a, 3, 2, now=NOW + 2)
    # r0 is job-1's and out of job-3's reach: job-2 takes r1 at 6,000 s and hands it back at 9,000 s.
    # Counted as a competitor, job-1 would take r1 first and put job-3 at 12,000 s
    assert "expected wait for one domain 7998s ± 0s (u0/r1) after 1 queued ahead" in v.message


def test_a_higher_priority_gang_has_nobody_ahead_of_it() -> None:
    a = two_gangs_ahead("queued")
    obj = a.workload(3, 0, 2, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024), "training", priority=5)
    v = a.decide(3, obj, NOW + 2)
    assert v.outcome == "wait" and "expected wait for one domain 1998s ± 0s (u0/r0) after 0 queued ahead" in v.message
    assert a.outlook.expected["sim/job-3"] == 3000.0  # its expected start, for atoll queue
    line = a.outlook.queued.ahead("sim/job-1")
    assert [w.priority for w in line] == [5]  # in Kueue's order it is now ahead of the gangs that queued first


def test_the_wait_for_one_domain_counts_free_gpus_only_in_whole_pods() -> None:
    # a gang of 2 × 2-GPU pods: r0 has 4 GPUs free but 1 and 3 per node, room for one pod, not two,
    # until r0n0's Workload ends at 3000 s. Counted as GPUs, r0 was room now (a 0 s wait), so the
    # gang always waited for it; in whole pods the wait is 2000 s, dearer than the span's +900 s
    a = atoll("elastic", used={"r0n0": 3, "r0n1": 1, "r1n0": 2, "r1n1": 4})
    ends = {"r0n0": (3, 3000), "r0n1": (1, 6000), "r1n0": (2, 5000), "r1n1": (4, 5000)}
    for node, (gpus, limit) in ends.items():
        a.outlook.started(f"sim/run-{node}", Running("f", ((node, gpus),), 0.0, queue="sim/default", limit=float(limit)))
    a.decider.span_cost = lambda snap, decision: 1.25
    obj = a.workload(1, 0, 2, ResourceVector(gpu=2, cpu_milli=1000, memory_mib=1024), "training")
    obj["spec"]["maximumExecutionTimeSeconds"] = 3600
    v = a.decide(1, obj, NOW)
    assert "wait or span: expected wait for one domain 2000s ± 0s (u0/r0)" in v.message and "spans now (cheaper)" in v.message
    assert v.outcome == "admit" and v.relaxed and {n for p in v.placements for n in p.nodes} == {"r0n1", "r1n0"}


def test_the_best_span_is_priced_once_while_what_it_could_use_is_unchanged() -> None:
    a = atoll("elastic", used={"r0n0": 4, "r1n0": 4})
    for _ in range(3):
        a.outlook.estimator.learn("sim/default", 8, 3000.0)
    a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, queue="sim/default"))
    priced: list[int] = []
    a.decider.span_cost = lambda snap, decision: priced.append(1) or 2.0  # spanning doubles the run: it waits
    assert decide(a, 1, 2).outcome == "wait" and decide(a, 1, 2, now=NOW + 15).outcome == "wait"
    assert len(priced) == 1 and a.outlook.spans.hits == 1  # decided again on the same cluster: the price is reused
    assert "best span slows it 2.000×" in decide(a, 1, 2, now=NOW + 30).message  # and said as a fresh search says it
    assert decide(a, 2, 1).outcome == "admit"  # a one-pod job takes a node: what a span could use changed
    snap = Snapshot("f", a.cluster.flavors[0].level_specs(), a.cluster.flavors[0].build_nodes())
    snap.free[[0, 2], 0] = 0  # r0n0 and r1n0 are used on the simulated cluster too
    a.bind(2, snap)
    misses = a.outlook.spans.misses
    w = decide(a, 1, 2, now=NOW + 45)  # searched anew: one free node is left, no span of two pods
    assert w.outcome == "wait" and a.outlook.spans.misses == misses + 1 and "no span priced now" in w.message


def test_a_reused_price_that_now_says_span_admits_the_span_a_fresh_search_finds() -> None:
    a = atoll("elastic", used={"r0n0": 4, "r1n0": 4})
    a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, queue="sim/default"))
    a.decider.span_cost = lambda snap, decision: 1.05
    assert decide(a, 1, 2).outcome == "wait"  # no runtime learned yet: relaxAfterSeconds decides, and it has not passed
    for _ in range(3):  # runtimes are learned; the cluster is unchanged, so the price is reused
        a.outlook.estimator.learn("sim/default", 8, 3000.0)
    v = decide(a, 1, 2, now=NOW + 15)
    assert a.outlook.spans.hits == 1 and v.outcome == "admit" and v.relaxed
    assert {n for p in v.placements for n in p.nodes} == {"r0n1", "r1n1"}


FLOOR_DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}}}
  floor: {{requiredLevel: {CLIQUE}, queueing: {{perfFloorByCost: 0.5}}}}
  floor-elastic: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 3600, queueing: {{perfFloorByCost: 0.5}}}}
  floor-hold: {{requiredLevel: {CLIQUE}, queueing: {{perfFloorByCost: 0.5, perfFloorHoldSeconds: 900}}}}
  floor-idle: {{requiredLevel: {CLIQUE}, queueing: {{perfFloorByCost: 0.5, perfFloorIdle: take}}}}
  floor-weighted: {{requiredLevel: {CLIQUE}, queueing: {{perfFloorByCost: 0.5, waitWeight: 1.5}}}}
  floor-elastic-idle: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 3600,
                        queueing: {{perfFloorByCost: 0.5, perfFloorIdle: take}}}}
  costed: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 3600, queueing: {{waitOrSpan: true}}}}
classes:
  training: {{perfFloor: 0.9, uniformPerf: true}}
""")


def slow_island(profile: str) -> DeployedAtoll:
    """r0's GPUs run at 0.7 (under the training floor of 0.9) and are free; r1 is at full speed
    with one of its two nodes busy until 3000 s (expected from what was learned)."""
    model = cluster({"r1n0": 4}).model_dump(by_alias=True)
    for node in model["flavors"][0]["nodes"]:
        if node["name"].startswith("r0"):
            node["perf"] = 0.7
    a = DeployedAtoll(f"atoll-{profile}", profile, FLOOR_DOC, ClusterModel.model_validate(model))
    for _ in range(3):
        a.outlook.estimator.learn("sim/default", 8, 3000.0)
    a.outlook.started("sim/x", Running("f", (("r1n0", 4),), 0.0, queue="sim/default"))
    return a


def test_a_speed_floor_gives_way_when_waiting_costs_more_than_the_slower_gpus() -> None:
    a = slow_island("floor")
    a.decider.span_cost = lambda snap, decision: 1 / 0.7  # +1286 s on a 3000 s run against 2000 s of waiting
    v = decide(a, 1, 2)
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} == {"r0n0", "r0n1"}
    assert "wait or slower GPUs: expected wait for one domain 2000s" in v.message and "takes the slower GPUs now (cheaper)" in v.message


def test_a_speed_floor_holds_when_the_slower_gpus_cost_more_than_waiting() -> None:
    a = slow_island("floor")
    a.decider.span_cost = lambda snap, decision: 1.8  # +2400 s on a 3000 s run: waiting 2000 s is cheaper
    w = decide(a, 1, 2)
    assert w.outcome == "wait"
    assert "wait or slower GPUs: expected wait for one domain 2000s" in w.message and "slows it 1.800×" in w.message
    assert "waits (cheaper)" in w.message


def test_a_wait_charged_for_the_gpus_it_leaves_idle_takes_the_slower_gpus_sooner() -> None:
    a = slow_island("floor-weighted")
    a.decider.span_cost = lambda snap, decision: 1.8  # +2400 s on a 3000 s run against 2000 s of waiting charged 1.5 times: 3000 s
    v = decide(a, 1, 2)
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} == {"r0n0", "r0n1"}
    assert "charged ×1.5 for the GPUs it leaves idle = 3000s" in v.message and "takes the slower GPUs now (cheaper)" in v.message


def test_without_perf_floor_by_cost_the_class_floor_decides_alone() -> None:
    a = slow_island("strict")
    a.decider.span_cost = lambda snap, decision: 1.0  # free slower GPUs would cost nothing, but the profile does not ask
    w = decide(a, 1, 2)
    assert w.outcome == "wait" and "slower GPUs" not in w.message


def test_without_a_learned_runtime_the_class_floor_decides() -> None:
    model = cluster({"r1n0": 4}).model_dump(by_alias=True)
    for node in model["flavors"][0]["nodes"]:
        if node["name"].startswith("r0"):
            node["perf"] = 0.7
    a = DeployedAtoll("atoll-floor", "floor", FLOOR_DOC, ClusterModel.model_validate(model))
    a.outlook.started("sim/x", Running("f", (("r1n0", 4),), 0.0, queue="sim/default"))
    a.decider.span_cost = lambda snap, decision: 1.0
    w = decide(a, 1, 2)
    assert w.outcome == "wait" and "perfFloor decides" in w.message


def test_a_gang_that_reserves_at_the_span_level_takes_a_span_as_soon_as_one_is_free() -> None:
    """r0n0 and r1n0 are busy, r0n1 and r1n1 free: no island holds the 2-node gang, a span over
    both islands does. Before ``relaxAfterSeconds`` (3,600 s) an island reservation keeps it
    waiting; one at the span level reserves the SU and spans at once."""
    out = {}
    for profile in ("island", "spanning"):
        a = atoll(profile, used={"r0n0": 4, "r1n0": 4})
        a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, limit=5000.0))
        a.outlook.started("sim/y", Running("f", (("r1n0", 4),), 0.0, limit=6000.0))
        assert decide(a, 7, 2, now=NOW).outcome == "wait"
        a.workloads[7]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
        out[profile] = (decide(a, 7, 2, now=NOW + 600), a)
    island, a = out["island"]
    held = a.outlook.reservations.held_by("sim/job-7")
    assert island.outcome == "wait" and held is not None and held.level == CLIQUE and not held.capture
    spanned, b = out["spanning"]
    assert spanned.outcome == "admit" and set(spanned.placements[0].nodes) == {"r0n1", "r1n1"}
    assert "spans now: it reserved at the span level" in spanned.message and "of network.example.com/su u0" in spanned.message
    assert b.outlook.reservations.held_by("sim/job-7") is None  # placed: the reservation ends


def test_a_gang_no_island_can_hold_says_why_it_reserves_nothing() -> None:
    """12 GPUs never fit one island of 8, so the gang spans, and under ``reserveAt: island`` no
    island can be reserved for it (an H100 gang larger than its 8-GPU node): the wait says so
    instead of saying nothing. A gang of 8, which one island holds, reserves an island."""
    out = {}
    for pods in (3, 2):
        a = atoll("island", used={"r0n0": 4, "r1n0": 4})
        a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, limit=5000.0))
        a.outlook.started("sim/y", Running("f", (("r1n0", 4),), 0.0, limit=6000.0))
        assert decide(a, 7, pods, now=NOW).outcome == "wait"
        a.workloads[7]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
        out[pods] = (decide(a, 7, pods, now=NOW + 600), a.outlook.reservations.held_by("sim/job-7"))
    (big, none), (gang, held) = out[3], out[2]
    assert big.outcome == "wait" and none is None
    assert ("no reservation: no nvidia.com/gpu.clique domain holds 12 GPUs, and it spans; queueing.reserveAt: span reserves "
            "where a span lands") in big.message
    assert gang.outcome == "wait" and held is not None and held.level == CLIQUE and "no reservation" not in gang.message


def floor_cluster(profile: str, used: dict[str, int], slow: set[str], running: dict[str, float]) -> DeployedAtoll:
    """``cluster(used)`` with ``slow`` nodes at 0.7 (under the training floor of 0.9), a runtime
    of 3000 s learned for every size, and ``running``: node → start of the Workload holding it."""
    model = cluster(used).model_dump(by_alias=True)
    for node in model["flavors"][0]["nodes"]:
        if node["name"] in slow:
            node["perf"] = 0.7
    a = DeployedAtoll(f"atoll-{profile}", profile, FLOOR_DOC, ClusterModel.model_validate(model))
    for gpus in (4, 12):
        for _ in range(3):
            a.outlook.estimator.learn("sim/default", gpus, 3000.0)
    for i, (node, started) in enumerate(running.items()):
        a.outlook.started(f"sim/run-{i}", Running("f", ((node, 4),), started, queue="sim/default"))
    return a


def test_the_floor_wait_does_not_count_gpus_freed_on_nodes_under_the_floor() -> None:
    # r1n0 (slow) frees at 1500 s, r1n1 (fast) only at 3000 s: the fast room is 2000 s away, not
    # 500 s, so +1286 s on the slow free node r0n0 is the cheaper side
    busy = {"r0n1": 0.0, "r1n0": -1500.0, "r1n1": 0.0}
    a = floor_cluster("floor", {n: 4 for n in busy}, {"r0n0", "r1n0"}, busy)
    a.decider.span_cost = lambda snap, decision: 1 / 0.7
    v = decide(a, 1, 1)
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} == {"r0n0"}
    assert "expected wait for one domain 2000s" in v.message and "takes the slower GPUs now (cheaper)" in v.message


def test_the_floor_wait_counts_free_fast_gpus_only_in_whole_pods() -> None:
    # r1's fast nodes have 2 GPUs free each: 4 in all, but no room for one 4-GPU pod until their
    # Workloads end at 3000 s. Counted as GPUs, the wait was 0 s and the floor always held
    a = floor_cluster("floor", {"r1n0": 2, "r1n1": 2}, {"r0n0", "r0n1"}, {})
    for i, node in enumerate(("r1n0", "r1n1")):
        a.outlook.started(f"sim/run-{i}", Running("f", ((node, 2),), 0.0, queue="sim/default"))
    a.decider.span_cost = lambda snap, decision: 1 / 0.7  # +1286 s on the slow nodes against 2000 s of waiting
    v = decide(a, 1, 1)
    assert "expected wait for one domain 2000s" in v.message and "takes the slower GPUs now (cheaper)" in v.message
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} <= {"r0n0", "r0n1"}


def test_the_wait_for_one_domain_leaves_out_gpus_under_the_class_floor() -> None:
    # r0 has 8 GPUs free, but r0n0's run at 0.7, under the training floor: no room for the gang
    # there, ever. r1 has room when r1n1's Workload ends at 3000 s: 2000 s, dearer than the span's
    # +750 s. Counted with the slow GPUs, r0 was room now (0 s) and the gang always waited
    a = floor_cluster("costed", {"r1n1": 4}, {"r0n0"}, {"r1n1": 0.0})
    a.decider.span_cost = lambda snap, decision: 1.25
    v = decide(a, 1, 2)
    assert "wait or span: expected wait for one domain 2000s ± 0s (u0/r1)" in v.message and "spans now (cheaper)" in v.message
    assert v.outcome == "admit" and v.relaxed and {n for p in v.placements for n in p.nodes} == {"r0n1", "r1n0"}


def test_a_gang_larger_than_an_island_weighs_the_floor_against_the_wait_for_a_span() -> None:
    # 12 GPUs never fit one island of 8: the wait is for 12 fast GPUs in the scalable unit (r1n0
    # frees at 3000 s), and the floor gives way to the slow free r0n0 when that wait costs more
    a = floor_cluster("floor-elastic", {"r1n0": 4}, {"r0n0"}, {"r1n0": 0.0})
    a.decider.span_cost = lambda snap, decision: 1 / 0.7
    v = decide(a, 1, 3)
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} == {"r0n0", "r0n1", "r1n1"}
    assert "expected wait for one domain 2000s ± 0s (u0)" in v.message and "takes the slower GPUs now (cheaper)" in v.message
    a = floor_cluster("floor-elastic", {"r1n0": 4}, {"r0n0"}, {"r1n0": 0.0})
    a.decider.span_cost = lambda snap, decision: 1.8  # +2400 s: waiting 2000 s for the fast unit is cheaper
    w = decide(a, 1, 3)
    assert w.outcome == "wait" and "waits (cheaper)" in w.message


def test_past_perf_floor_hold_seconds_the_slower_gpus_are_taken_whatever_the_costs_say() -> None:
    a = slow_island("floor-hold")
    a.decider.span_cost = lambda snap, decision: 1.8  # +2400 s against 2000 s of waiting: the costs say wait
    w = decide(a, 1, 2)
    assert w.outcome == "wait" and "waits (cheaper)" in w.message
    assert [n.deadline for n in w.needs] == [NOW + 900]  # parked, it is woken when the bound passes
    v = decide(a, 1, 2, now=NOW + 900)  # held 900 s: the bound
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} == {"r0n0", "r0n1"}
    assert "the speed floor has held it 900s, perfFloorHoldSeconds 900: takes the slower GPUs" in v.message


def test_under_perf_floor_idle_take_gpus_all_under_the_floor_are_taken_whatever_the_costs_say() -> None:
    # r0's two free nodes are both at 0.7: the placement slows no GPU at the floor, and no Workload
    # the floor holds may use them, so they are taken though +2400 s costs more than 2000 s of waiting
    a = slow_island("floor-idle")
    a.decider.span_cost = lambda snap, decision: 1.8
    v = decide(a, 1, 2)
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} == {"r0n0", "r0n1"}
    assert "slows it 1.800×" in v.message and "waits (cheaper)" in v.message  # the weighing is still said
    assert "every GPU it takes is under the speed floor 0.9" in v.message and "perfFloorIdle take: takes the slower GPUs" in v.message
    held = slow_island("floor")  # the same costs under perfFloorIdle weigh (the default): it waits
    held.decider.span_cost = lambda snap, decision: 1.8
    assert decide(held, 1, 2).outcome == "wait"


def test_under_perf_floor_idle_take_a_gang_mixing_fast_and_slow_gpus_is_still_weighed() -> None:
    # the 12-GPU gang's placement under the floor takes slow r0n0 with fast r0n1 and r1n1: the slow
    # node would pace the two fast ones, so the costs decide, and +2400 s against 2000 s waits
    a = floor_cluster("floor-elastic-idle", {"r1n0": 4}, {"r0n0"}, {"r1n0": 0.0})
    a.decider.span_cost = lambda snap, decision: 1.8
    w = decide(a, 1, 3)
    assert w.outcome == "wait" and "waits (cheaper)" in w.message and "perfFloorIdle" not in w.message
    b = floor_cluster("floor-elastic-idle", {"r1n0": 4}, {"r0n0"}, {"r1n0": 0.0})
    b.decider.span_cost = lambda snap, decision: 1 / 0.7  # +1286 s: cheaper than the wait, taken by cost as before
    v = b.decide(1, b.workload(1, 0, 3, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024), "training"), NOW)
    assert v.outcome == "admit" and "takes the slower GPUs now (cheaper)" in v.message and "perfFloorIdle" not in v.message


def test_the_shipped_costed_floor_leaves_a_dear_span_to_wait_or_span_past_an_hour() -> None:
    """``costed-floor`` as shipped: no island holds the 2-node gang, a span does but doubles its
    learned 3,000 s run (+3,000 s) while one island is expected in 2,000 s. Past an hour it still
    waits (a fixed hour forced such spans, and on GB200 they cost more than they saved); the
    bound is a day."""
    from pathlib import Path

    from policies import load_profiles_file

    doc = load_profiles_file(Path(__file__).resolve().parents[3] / "config" / "profiles.yaml")
    a = DeployedAtoll("atoll-costed-floor", "costed-floor", doc, cluster({"r0n0": 4, "r1n0": 4}))
    for _ in range(3):
        a.outlook.estimator.learn("sim/default", 8, 3000.0)
    a.outlook.started("sim/x", Running("f", (("r0n0", 4),), 0.0, queue="sim/default"))
    a.decider.span_cost = lambda snap, decision: 2.0
    assert decide(a, 1, 2, now=NOW).outcome == "wait"
    a.workloads[1]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
    w = decide(a, 1, 2, now=NOW + 3601)
    assert w.outcome == "wait" and "waits (cheaper)" in w.message and "spans allowed after 86400s" in w.message
    v = decide(a, 1, 2, now=NOW + 86400)
    assert v.outcome == "admit" and v.relaxed and {n for p in v.placements for n in p.nodes} == {"r0n1", "r1n1"}


def test_the_reservation_target_counts_free_gpus_only_in_whole_pods() -> None:
    """The gang (2 pods × 4 GPUs) reserves the island with the fewest GPUs to drain. r0 has 5 GPUs
    free, in scraps of 2 and 3 that hold no 4-GPU pod: 8 still to drain in whole pods. r1 has one
    whole node free: 4 to drain. Counted as GPUs, r0 (3 to drain) was the target."""
    a = atoll("strict", used={"r0n0": 2, "r0n1": 1, "r1n1": 4})
    for i, (node, gpus) in enumerate((("r0n0", 2), ("r0n1", 1), ("r1n1", 4))):
        a.outlook.started(f"sim/run-{i}", Running("f", ((node, gpus),), 0.0, limit=5000.0))
    assert decide(a, 7, 2, now=NOW).outcome == "wait"
    a.workloads[7]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
    w = decide(a, 7, 2, now=NOW + 600)
    held = a.outlook.reservations.held_by("sim/job-7")
    assert w.outcome == "wait" and held is not None and held.path == ("u0", "r1")
    assert dict(held.nodes) == {"r1n0": 4, "r1n1": 4}


RESERVE_FLOOR_DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, queueing: {{reserveAfterSeconds: 600}}}}
classes:
  training: {{perfFloor: 0.9, uniformPerf: true}}
""")


def test_the_reservation_target_leaves_out_gpus_under_the_class_floor() -> None:
    """r0 is all free, but its GPUs run at 0.7, under the training floor: the gang can never be
    placed there. Counting them, r0 had nothing to drain and was reserved (for nothing, while the
    nodes it can use went to others); now r1, busy until 5000 s, is its target."""
    model = cluster({"r1n0": 4, "r1n1": 4}).model_dump(by_alias=True)
    for node in model["flavors"][0]["nodes"]:
        if node["name"].startswith("r0"):
            node["perf"] = 0.7
    a = DeployedAtoll("atoll-strict", "strict", RESERVE_FLOOR_DOC, ClusterModel.model_validate(model))
    a.outlook.started("sim/x", Running("f", (("r1n0", 4), ("r1n1", 4)), 0.0, limit=5000.0))
    assert decide(a, 7, 2, now=NOW).outcome == "wait"
    a.workloads[7]["status"]["conditions"][-1]["lastTransitionTime"] = "1970-01-01T00:16:40Z"  # waited since NOW
    w = decide(a, 7, 2, now=NOW + 600)
    held = a.outlook.reservations.held_by("sim/job-7")
    assert w.outcome == "wait" and held is not None and held.path == ("u0", "r1") and held.expected_free == 5000.0
    assert dict(held.nodes) == {"r1n0": 4, "r1n1": 4}


HOLD_DOC = load_profiles(f"""
defaultProfile: held
profiles:
  held: {{requiredLevel: {CLIQUE}, queueing: {{reserveAfterSeconds: 600, holdBehindGangs: quota, parkWaiting: true}}}}
  free: {{requiredLevel: {CLIQUE}, queueing: {{reserveAfterSeconds: 600}}}}
""")


def test_a_workload_behind_an_owed_gang_waits_parked_and_one_ahead_of_it_or_the_gang_itself_is_decided() -> None:
    a = DeployedAtoll("atoll-held", "held", HOLD_DOC, cluster({}))
    a.set_owed(0, [(50, 0, NOW - 700, 16, None)])  # job 50, created 700 s ago, waits for quota
    small = a.workload(1, 0, 1, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024), "training", created=NOW - 10)
    v = a.decide(1, small, NOW)
    assert v.outcome == "wait" and v.reason == "behind-gang" and v.waits_parked(None)  # parked: its quota can go back to the gang
    assert "sim/job-50 (16 GPUs) is owed its turn" in v.message and "holdBehindGangs quota" in v.message
    assert [n.behind for n in v.needs] == ["sim/job-50"]
    older = a.workload(2, 0, 1, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024), "training", created=NOW - 800)
    assert a.decide(2, older, NOW).outcome == "admit"  # created before the gang: ahead of it in Kueue's order
    urgent = a.workload(3, 0, 1, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024), "training", created=NOW - 5, priority=10)
    assert a.decide(3, urgent, NOW).outcome == "admit"  # a higher priority is ahead whatever its age
    owed_too = a.workload(4, 0, 2, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024), "training", created=NOW - 650)
    assert a.decide(4, owed_too, NOW).outcome == "admit"  # a gang owed itself (waited 650 s) is never held
    a.set_owed(0, [])
    assert a.take_unheld() == {0: ["sim/job-50"]}  # the gang holds quota now: what waited behind it is woken
    again = a.decide(1, small, NOW)
    assert again.reason == "no-domain" and "owed" not in again.message  # decided on its own: the three admitted filled the flavor


def test_a_profile_without_hold_behind_gangs_ignores_owed_gangs() -> None:
    a = DeployedAtoll("atoll-free", "free", HOLD_DOC, cluster({}))
    a.outlook.owed.set("cluster-queue", "f", [])
    a.set_owed(0, [(50, 0, NOW - 700, 16, None)])
    small = a.workload(1, 0, 1, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024), "training", created=NOW - 10)
    assert a.decide(1, small, NOW).outcome == "admit"


def test_hold_behind_gangs_without_reserve_after_seconds_is_refused_naming_the_field() -> None:
    with pytest.raises(ProfilesError, match=r"profiles\.p\.queueing: holdBehindGangs: start .* set reserveAfterSeconds"):
        load_profiles(f"defaultProfile: p\nprofiles: {{p: {{requiredLevel: {CLIQUE}, queueing: {{holdBehindGangs: start}}}}}}")


def test_only_a_gang_of_at_least_the_min_gpus_that_waited_reserve_after_seconds_since_creation_is_owed() -> None:
    doc = load_profiles(f"""
defaultProfile: big
profiles:
  big: {{requiredLevel: {CLIQUE}, queueing: {{reserveAfterSeconds: 600, holdBehindGangs: quota, holdBehindGangsMinGPUs: 16}}}}
  plain: {{requiredLevel: {CLIQUE}, queueing: {{reserveAfterSeconds: 600}}}}
""")
    big, plain = doc.profiles["big"], doc.profiles["plain"]
    assert is_owed(big, 4, 16, NOW - 600, NOW)
    assert not is_owed(big, 2, 8, NOW - 600, NOW)  # a gang under 16 GPUs
    assert not is_owed(big, 1, 16, NOW - 600, NOW)  # one pod: no gang
    assert not is_owed(big, 4, 16, NOW - 599, NOW)  # not waited long enough since its creation
    assert not is_owed(big, 4, 16, None, NOW)  # no creation time
    assert not is_owed(plain, 4, 16, NOW - 6000, NOW)  # the profile holds nothing behind gangs


def test_a_gang_owed_its_turn_is_one_that_keeps_its_quota_when_parked() -> None:
    """``owes`` (the controller's quota yield asks it, as the simulator's does): a parked gang owed
    its turn keeps its quota, as a reservation's holder does; given away, it would wait for quota
    again, owed, and hold back the Workload it gave it to."""
    a = DeployedAtoll("atoll-held", "held", HOLD_DOC, cluster({}))
    per_pod = ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024)
    gang = a.workload(5, 0, 2, per_pod, "training", created=NOW - 700)
    assert owes(gang, a.doc, a.decider.read, NOW)
    assert not owes(gang, a.doc, a.decider.read, NOW - 200)  # 500 s since its creation: not owed yet
    assert not owes(a.workload(6, 0, 1, per_pod, "training", created=NOW - 700), a.doc, a.decider.read, NOW)  # one pod
    assert not owes(None, a.doc, a.decider.read, NOW) and not owes(gang, None, a.decider.read, NOW)


OWED_DOC = load_profiles(f"""
defaultProfile: fill
profiles:
  fill: {{requiredLevel: {CLIQUE}, queueing: {{reserveAfterSeconds: 600, holdBehindGangs: quota, holdBehindGangsBackfill: true, parkWaiting: true}}}}
""")
SMALL = ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024)


def test_under_hold_backfill_a_workload_expected_to_end_before_the_gang_has_its_gpus_goes_first() -> None:
    a = DeployedAtoll("atoll-fill", "fill", OWED_DOC, cluster({"r0n0": 4, "r0n1": 4}))  # 8 GPUs free
    a.outlook.started("sim/x", Running("f", (("r0n0", 4), ("r0n1", 4)), 0.0, limit=NOW + 5000))  # the gang's 16 are there at NOW + 5000
    a.set_owed(0, [(50, 0, NOW - 700, 16, None)])
    short = a.workload(1, 0, 1, SMALL, "training", max_execution_seconds=4000, created=NOW - 10)
    assert a.decide(1, short, NOW).outcome == "admit"  # ends at NOW + 4000, before the gang's GPUs are free
    long = a.workload(2, 0, 1, SMALL, "training", max_execution_seconds=6000, created=NOW - 10)
    assert a.decide(2, long, NOW).reason == "behind-gang"  # would end after the gang's start: held
    unknown = a.workload(3, 0, 1, SMALL, "training", created=NOW - 10)
    assert a.decide(3, unknown, NOW).reason == "behind-gang"  # nothing known about its runtime: held
    for _ in range(3):
        a.outlook.estimator.learn(None, 4, 1000.0)
    assert a.decide(3, unknown, NOW).outcome == "admit"  # its size's learned runtime ends it first
    a.outlook.started("sim/x", Running("f", (("r0n0", 4), ("r0n1", 4)), 0.0, limit=NOW + 500))
    assert a.decide(2, long, NOW).reason == "behind-gang"  # the gang's GPUs free sooner: the short one would not go now either
    assert a.decide(1, short, NOW).reason == "behind-gang"


def test_a_parked_gang_past_its_reserve_time_that_holds_no_reservation_waits_for_one() -> None:
    """Before ``reserveAfterSeconds`` a parked gang is woken at that time; past it with no
    reservation (the flavor's bound reached) it is marked ``Need.reserves``, so a reservation of
    its flavor that ends wakes it; a gang that holds one, and a one-pod Workload, are not."""
    from admission.controller._queueing import reserve_deadline
    from admission.queue import Outlook
    from policies import PodSetSpec, WaitState

    strict, gang, one = DOC.profiles["strict"], [PodSetSpec("workers", 2, ResourceVector(gpu=4))], [PodSetSpec("w", 1, ResourceVector(gpu=4))]
    need, outlook = Need("f", CLIQUE, 2, 4), Outlook()
    early = reserve_deadline(need, outlook, "ns/g", strict, WaitState(NOW - 100), NOW, gang)
    assert early is not None and early.deadline == NOW + 500 and not early.reserves
    late = reserve_deadline(need, outlook, "ns/g", strict, WaitState(NOW - 700), NOW, gang)
    assert late is not None and late.reserves and late.deadline is None
    single = reserve_deadline(Need("f", CLIQUE, 1, 4), outlook, "ns/s", strict, WaitState(NOW - 700), NOW, one)
    assert single is not None and not single.reserves
    assert outlook.reservations.add(Reservation("ns/g", "f", CLIQUE, ("u0", "r0"), (("r0n0", 4),), NOW, NOW + 900), limit=1)
    held = reserve_deadline(need, outlook, "ns/g", strict, WaitState(NOW - 700), NOW, gang)
    assert held is not None and not held.reserves

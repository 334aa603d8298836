"""The queue ahead: the Workloads waiting before one, in Kueue's order, take the room as it frees,
so its expected start is later than the room alone says, and never earlier."""

from __future__ import annotations

import pytest

from admission.queue import MAX_AHEAD, Queued, Running, RuntimeEstimator, Waiter, domain_outlook, queued_start, soonest
from topology import Level, NodeInfo, ResourceVector, Snapshot

SU, CLIQUE = "network.example.com/su", "nvidia.com/gpu.clique"


def cluster(cliques: int = 2) -> Snapshot:
    """1 SU × ``cliques`` islands × 4 nodes × 4 GPUs (16 GPUs an island), all free."""
    nodes = [NodeInfo(f"c{c}n{n}", {SU: "u0", CLIQUE: f"c{c}"}, ResourceVector(4, 1000, 1000, 10))
             for c in range(cliques) for n in range(4)]
    return Snapshot("f", [Level(SU, 50), Level(CLIQUE, 1800)], nodes)


def busy() -> tuple[Snapshot, list[Running], RuntimeEstimator]:
    """Both islands full: c0 frees at t=100, c1 at t=300; a 16-GPU gang runs 1000 s."""
    snap = cluster()
    for c in range(2):
        for n in range(4):
            snap.reserve(f"c{c}n{n}", ResourceVector(gpu=4))
    est = RuntimeEstimator(min_samples=1)
    est.learn("q", 16, 1000.0)
    running = [Running("f", tuple((f"c0n{n}", 4) for n in range(4)), 0.0, limit=100.0),
               Running("f", tuple((f"c1n{n}", 4) for n in range(4)), 0.0, limit=300.0)]
    return snap, running, est


def gang(since: float, priority: int = 0, gpus: int = 16) -> Waiter:
    return Waiter("f", gpus, 4, priority, since, "q")


def test_with_nobody_ahead_the_start_is_the_room_alone() -> None:
    snap, running, est = busy()
    alone = soonest(domain_outlook(snap, CLIQUE, 16, running, est, 0.0, per_pod=4))
    got = queued_start(snap, CLIQUE, 16, 4, running, est, 0.0, [])
    assert alone is not None and got is not None
    assert (got.free_at, got.path, got.ahead, got.before) == (alone.free_at, alone.path, 0, 0) == (100.0, ("u0", "c0"), 0, 0)


def test_a_gang_behind_two_queued_gangs_starts_when_they_have_taken_and_handed_back_an_island() -> None:
    snap, running, est = busy()
    got = queued_start(snap, CLIQUE, 16, 4, running, est, 0.0, [gang(1.0), gang(2.0)])
    assert got is not None
    # the first gang takes c0 at 100, the second c1 at 300; the first hands c0 back at 1100
    assert got.free_at == 1100.0 and got.path == ("u0", "c0") and (got.ahead, got.before) == (2, 2)
    one = queued_start(snap, CLIQUE, 16, 4, running, est, 0.0, [gang(1.0)])
    assert one is not None and one.free_at == 300.0 and one.path == ("u0", "c1")


def test_a_waiter_ahead_no_island_holds_does_not_compete_for_one() -> None:
    snap, running, est = busy()
    got = queued_start(snap, CLIQUE, 16, 4, running, est, 0.0, [gang(1.0, gpus=32)])
    assert got is not None and got.free_at == 100.0 and got.ahead == 0


def test_small_jobs_ahead_take_the_gpus_a_gang_waits_for() -> None:
    snap, running, est = busy()
    est.learn("q", 4, 500.0)
    small = [Waiter("f", 4, 4, 0, float(i), "q") for i in range(2)]  # 8 GPUs of c0 at 100, back at 600
    got = queued_start(snap, CLIQUE, 16, 4, running, est, 0.0, small)
    assert got is not None and got.free_at == 300.0 and got.path == ("u0", "c1")  # c0 is short of 8 GPUs until 600
    assert got.before == 2


def test_a_waiter_ahead_of_unknown_runtime_never_hands_its_room_back() -> None:
    snap, running, est = busy()
    stranger = Waiter("f", 16, 4, 0, 1.0, "other")
    unknown = RuntimeEstimator(min_samples=5)  # nothing learned for anyone: only the running Workloads' limits are known
    got = queued_start(snap, CLIQUE, 16, 4, running, unknown, 0.0, [stranger, stranger])
    assert got is not None and got.free_at is None and got.before == 2


def test_the_line_is_kueues_order_priority_then_creation() -> None:
    line = Queued()
    line.waits("ns/late", gang(20.0))
    line.waits("ns/early", gang(10.0))
    line.waits("ns/urgent", gang(30.0, priority=5))
    line.waits("ns/me", gang(15.0))
    line.waits("ns/elsewhere", Waiter("g", 16, 4, 9, 0.0))
    assert [w.since for w in line.ahead("ns/me")] == [30.0, 10.0]  # the higher priority first, then the earlier creation
    assert line.ahead("ns/urgent") == [] and len(line) == 5
    line.waits("ns/me", gang(15.0))  # waiting again unchanged keeps its place
    line.left("ns/early")
    assert [w.since for w in line.ahead("ns/me")] == [30.0]
    line.left("ns/unknown")  # not in line: nothing happens
    assert line.ahead("ns/unknown") == []


def test_priority_decides_who_takes_the_island_first() -> None:
    snap, running, est = busy()
    line = Queued()
    line.waits("ns/a", gang(1.0))
    line.waits("ns/b", gang(2.0))
    line.waits("ns/me", gang(3.0, priority=1))
    first = queued_start(snap, CLIQUE, 16, 4, running, est, 0.0, line.ahead("ns/me"))
    assert first is not None and first.free_at == 100.0 and first.before == 0  # nobody is ahead of a higher priority
    line.left("ns/me")
    line.waits("ns/me", gang(3.0))
    last = queued_start(snap, CLIQUE, 16, 4, running, est, 0.0, line.ahead("ns/me"))
    assert last is not None and last.free_at == 1100.0


def test_a_reserved_island_is_no_room_for_the_line() -> None:
    snap, running, est = busy()
    blocked = {f"c0n{n}": 4 for n in range(4)}
    got = queued_start(snap, CLIQUE, 16, 4, running, est, 0.0, [], blocked)
    assert got is not None and got.free_at == 300.0 and got.path == ("u0", "c1")


def test_past_the_bound_the_waiters_further_back_are_left_out_and_said() -> None:
    snap, running, est = busy()
    many = [Waiter("f", 16, 4, 0, float(i), "q") for i in range(MAX_AHEAD + 1)]
    got = queued_start(snap, CLIQUE, 16, 4, running, est, 0.0, many)
    assert got is not None and got.capped and got.ahead == MAX_AHEAD
    assert got.free_at == pytest.approx(100.0 + 1000.0 * (MAX_AHEAD // 2))  # two islands, one gang each per 1000 s: c0 again


def test_whole_pods_count_scraps_too_small_for_a_pod_are_no_room() -> None:
    snap = cluster(1)
    for n in range(4):
        snap.reserve(f"c0n{n}", ResourceVector(gpu=2))  # 2 GPUs free on each node: 8 GPUs, no 4-GPU pod
    est = RuntimeEstimator(min_samples=1)
    running = [Running("f", (("c0n0", 2), ("c0n1", 2)), 0.0, limit=50.0), Running("f", (("c0n2", 2), ("c0n3", 2)), 0.0, limit=80.0)]
    got = queued_start(snap, CLIQUE, 8, 4, running, est, 0.0, [])
    assert got is not None and got.free_at == 50.0
    # a 2-GPU pod ahead takes c0n0's scrap now, so c0n0 is short of a 4-GPU pod when its Workload ends at 50
    ahead = queued_start(snap, CLIQUE, 8, 4, running, est, 0.0, [Waiter("f", 2, 2, 0, 0.0)])
    assert ahead is not None and ahead.free_at == 80.0 and ahead.before == 1


def test_the_line_is_the_front_with_the_workload_kept_last_when_further_back() -> None:
    line = Queued()
    for i in range(5):
        line.waits(f"ns/w{i}", gang(float(i)))
    got, at = line.line("ns/w4", limit=3)
    assert [w.since for w in got] == [0.0, 1.0, 4.0] and at == 2
    got, at = line.line("ns/w1", limit=3)
    assert [w.since for w in got] == [0.0, 1.0, 2.0] and at == 1
    assert line.line("ns/nobody") == ([], -1)


def test_the_line_can_leave_out_waiters_by_key() -> None:
    line = Queued()
    for i in range(4):
        line.waits(f"ns/w{i}", gang(float(i)))
    skip = {"ns/w1"}.__contains__
    assert [w.since for w in line.ahead("ns/w3", skip=skip)] == [0.0, 2.0]
    got, at = line.line("ns/w3", skip=skip)
    assert [w.since for w in got] == [0.0, 2.0, 3.0] and at == 2
    got, at = line.line("ns/w1", skip=skip)  # the Workload itself is never left out of its own line
    assert [w.since for w in got] == [0.0, 1.0, 2.0, 3.0] and at == 1

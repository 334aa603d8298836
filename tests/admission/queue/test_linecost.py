"""What a span costs the line (``span_queue_cost``): the other waiters' expected starts with the
Workload spanning now against the Workload waiting its turn, summed; delays charged, never a
credit; a waiter that starts in one run only counted at the runs' last moment in the other; the
span's GPUs held for its slowed runtime, the Workload's domain for its runtime; the bound said."""

from __future__ import annotations

import numpy as np
import pytest

from admission.queue import QueueCost, Running, RuntimeEstimator, Waiter, _linecost, span_queue_cost
from tests.admission.queue.test_ahead import CLIQUE, cluster, gang
from topology import ResourceVector, Snapshot


def three_islands() -> tuple[Snapshot, list[Running], RuntimeEstimator]:
    """3 islands × 4 nodes × 4 GPUs, one node free in each (c0n3, c1n0, c2n3): c0's other nodes
    are busy until 1000, c1's until 100, c2's until 5000. A 16-GPU gang runs 1000 s."""
    snap = cluster(3)
    ends = {**{f"c0n{n}": 1000.0 for n in range(3)}, **{f"c1n{n}": 100.0 for n in (1, 2, 3)}, **{f"c2n{n}": 5000.0 for n in range(3)}}
    for node in ends:
        snap.reserve(node, ResourceVector(gpu=4))
    est = RuntimeEstimator(min_samples=1)
    est.learn("q", 16, 1000.0)
    running = [Running("f", ((node, 4),), 0.0, limit=end) for node, end in ends.items()]
    return snap, running, est


def eight(since: float) -> Waiter:
    return Waiter("f", 8, 4, 0, since, "q")


def test_a_span_that_breaks_the_island_the_next_gang_needs_costs_the_line_more_than_one_on_leftover_gpus() -> None:
    snap, running, est = three_islands()
    line = [gang(1.0), eight(2.0)]  # the 16-GPU gang takes c1 at 100; the 8-GPU Workload is second
    breaks = span_queue_cost(snap, CLIQUE, line, 1, {"c0n3": 4, "c1n0": 4}, 1200.0, 1000.0, running, est, 0.0)
    leftover = span_queue_cost(snap, CLIQUE, line, 1, {"c0n3": 4, "c2n3": 4}, 1200.0, 1000.0, running, est, 0.0)
    assert breaks is not None and leftover is not None
    # c1n0 held until 1200: the gang starts then (c0 and c1 both whole again) instead of at 100
    assert (breaks.seconds, breaks.later, breaks.sooner, breaks.counted) == (1100.0, 1, 0, 1)
    assert (leftover.seconds, leftover.later) == (0.0, 0) and breaks.price_s > leftover.price_s


def test_the_spans_gpus_are_held_for_its_slowed_runtime_from_now() -> None:
    snap, running, est = three_islands()
    line = [gang(1.0), eight(2.0)]
    cost = {s: span_queue_cost(snap, CLIQUE, line, 1, {"c0n3": 4, "c1n0": 4}, s, 1000.0, running, est, 0.0) for s in (50.0, 500.0, 1200.0)}
    # c1n0 back at 50: c1 is whole when its others end at 100, as without the span; at 500 the gang waits until then
    assert {s: None if c is None else c.seconds for s, c in cost.items()} == {50.0: 0.0, 500.0: 400.0, 1200.0: 1100.0}


def test_a_span_is_never_credited_for_the_island_it_leaves_to_the_line() -> None:
    # the 8-GPU Workload first in line: waiting, it takes c1 at 100 and the gang behind waits for c0
    # at 1000; spanning on c0n3 and c2n3, it leaves c1 whole to the gang at 100
    snap, running, est = three_islands()
    line = [eight(1.0), gang(2.0)]
    got = span_queue_cost(snap, CLIQUE, line, 0, {"c0n3": 4, "c2n3": 4}, 1200.0, 1000.0, running, est, 0.0)
    assert got is not None and (got.seconds, got.sooner, got.later) == (-900.0, 1, 0) and got.price_s == 0.0


def test_waiting_its_turn_the_workload_holds_its_domain_for_its_own_runtime() -> None:
    # waiting, the 8-GPU Workload takes c1 at 100 and hands it back one runtime later: the gang
    # behind gets c1 then, if that comes before c0 is whole at 1000
    snap, running, est = three_islands()
    line = [eight(1.0), gang(2.0)]
    short = span_queue_cost(snap, CLIQUE, line, 0, {"c0n3": 4, "c2n3": 4}, 1200.0, 500.0, running, est, 0.0)
    assert short is not None and (short.seconds, short.sooner) == (-500.0, 1)  # 100 spanning against 600 waiting


def test_a_reserved_node_is_room_for_nobody_in_either_run() -> None:
    # c1n1 held by another gang's reservation: c1 is never whole, so the gang needs c0, whole at
    # 1000 while the Workload waits its turn, at 1200 once its span hands c0n3 back
    snap, running, est = three_islands()
    line = [gang(1.0), eight(2.0)]
    free = span_queue_cost(snap, CLIQUE, line, 1, {"c0n3": 4, "c2n3": 4}, 1200.0, 1000.0, running, est, 0.0)
    held = span_queue_cost(snap, CLIQUE, line, 1, {"c0n3": 4, "c2n3": 4}, 1200.0, 1000.0, running, est, 0.0, blocked={"c1n1": 4})
    assert free is not None and held is not None
    assert (free.seconds, held.seconds, held.later) == (0.0, 200.0, 1)


def test_a_waiter_that_starts_in_one_run_only_starts_at_the_runs_last_moment_in_the_other() -> None:
    """Two islands: c0 free, c1 with 12 GPUs free and one node busy for good. Waiting, the 8-GPU
    Workload takes c1 (the least room that holds it), so a waiter of unknown runtime takes c0 for
    good and the 16-GPU gang behind never starts; spanning, that waiter takes c1 and the gang c0
    at once. The gang is counted as starting at 1000 (the waiting run's last moment) there."""
    snap = cluster(2)
    snap.reserve("c1n3", ResourceVector(gpu=4))
    running = [Running("f", (("c1n3", 4),), 0.0)]  # no limit, nothing learned: it never ends
    est = RuntimeEstimator()
    stranger = Waiter("f", 8, 4, 0, 2.0)  # no limit: never hands its room back
    line = [Waiter("f", 8, 4, 0, 1.0), stranger, Waiter("f", 16, 4, 0, 3.0, limit=600.0)]
    got = span_queue_cost(snap, CLIQUE, line, 0, {"c1n2": 4}, 5000.0, 1000.0, running, est, 0.0)
    assert got == QueueCost(-1000.0, 0, 1, 2)


def test_a_waiter_no_domain_holds_is_not_counted_nor_a_workload_no_domain_holds() -> None:
    snap, running, est = three_islands()
    line = [gang(1.0), Waiter("f", 32, 4, 0, 1.5, "q"), eight(2.0)]  # 32 GPUs: no island holds it even empty
    got = span_queue_cost(snap, CLIQUE, line, 2, {"c0n3": 4, "c1n0": 4}, 1200.0, 1000.0, running, est, 0.0)
    assert got is not None and (got.seconds, got.counted) == (1100.0, 1)
    assert span_queue_cost(snap, CLIQUE, line, 1, {"c0n3": 4}, 1.0, 1.0, running, est, 0.0) is None
    assert span_queue_cost(snap, None, line, 1, {"c0n3": 4}, 1.0, 1.0, running, est, 0.0) is not None  # the whole flavor holds it


def test_the_cost_of_a_span_needs_the_workload_in_line() -> None:
    snap, running, est = three_islands()
    assert span_queue_cost(snap, CLIQUE, [gang(1.0)], 3, {"c0n3": 4}, 1.0, 1.0, running, est, 0.0) is None
    assert span_queue_cost(snap, CLIQUE, [gang(1.0)], -1, {"c0n3": 4}, 1.0, 1.0, running, est, 0.0) is None


def test_past_the_bound_the_front_is_counted_with_the_workload_kept_last_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_linecost, "MAX_AHEAD", 2)
    snap, running, est = three_islands()
    line = [gang(1.0), gang(2.0), gang(3.0), eight(4.0)]  # the third gang is past the bound of two
    got = span_queue_cost(snap, CLIQUE, line, 3, {"c0n3": 4, "c1n0": 4}, 1200.0, 1000.0, running, est, 0.0)
    # waiting last, the Workload lets the gangs take c1 at 100 and c0 at 1000; spanning, c0n3 and
    # c1n0 come back at 1200 and both start then; the third gang is left out of both runs
    assert got == QueueCost(1100.0 + 200.0, 2, 0, 2, capped=True)
    uncapped = span_queue_cost(snap, CLIQUE, line[:2] + line[3:], 2, {"c0n3": 4, "c1n0": 4}, 1200.0, 1000.0, running, est, 0.0)
    assert uncapped == QueueCost(1300.0, 2, 0, 2)


def test_the_snapshot_is_left_as_it_was_and_the_same_question_gets_the_same_answer() -> None:
    snap, running, est = three_islands()
    before = snap.free.copy()
    line = [gang(1.0), eight(2.0)]
    first = span_queue_cost(snap, CLIQUE, line, 1, {"c0n3": 4, "c1n0": 4}, 1200.0, 1000.0, running, est, 0.0)
    assert np.array_equal(snap.free, before)
    assert span_queue_cost(snap, CLIQUE, line, 1, {"c0n3": 4, "c1n0": 4}, 1200.0, 1000.0, running, est, 0.0) == first

"""The simulator's jobs waiting for quota, as the line a span is priced by
(``queueing.spanCountsQueue: quota``): Kueue's queues of every shape merged in Kueue's order."""

from __future__ import annotations

import heapq

import numpy as np

from admission.simulator._policies import JobShape
from admission.simulator._sim import quota_waiters
from topology import ResourceVector

SHAPES = [JobShape(1, ResourceVector(gpu=1)), JobShape(2, ResourceVector(gpu=4))]


def test_the_queues_of_every_shape_merge_in_kueues_order() -> None:
    shape_of = np.array([0, 1, 0, 1, 0], dtype=np.int64)
    queues: dict[int, list[tuple[tuple[int, float], int]]] = {0: [], 1: []}
    for j, (prio, at) in enumerate([(0, 30.0), (0, 10.0), (5, 50.0), (0, 20.0), (0, 5.0)]):
        heapq.heappush(queues[int(shape_of[j])], ((-prio, at), j))
    got = quota_waiters(queues, "gb200", SHAPES.__getitem__, shape_of, lambda j: 100 * j if j else None)
    assert [(w.priority, w.since, w.gpus, w.per_pod) for w in got] == [
        (5, 50.0, 1, 1), (0, 5.0, 1, 1), (0, 10.0, 8, 4), (0, 20.0, 8, 4), (0, 30.0, 1, 1)]
    assert got[0].limit == 200 and got[-1].limit is None and {w.flavor for w in got} == {"gb200"}
    assert got[0].queue == "sim/default"  # the queue the runtime estimator learns the simulated jobs under
    assert [w.since for w in quota_waiters(queues, "gb200", SHAPES.__getitem__, shape_of, lambda j: None, limit=2)] == [50.0, 5.0]


def test_in_a_cohort_each_waiter_names_its_own_cluster_queues_local_queue() -> None:
    shape_of = np.array([0, 1], dtype=np.int64)
    queues: dict[int, list[tuple[tuple[int, float], int]]] = {0: [((0, 2.0), 0)], 1: [((0, 1.0), 1)]}
    got = quota_waiters(queues, "gb200", SHAPES.__getitem__, shape_of, lambda j: None, queue=lambda j: f"cq-{j}")
    assert [(w.since, w.queue) for w in got] == [(1.0, "sim/cq-1"), (2.0, "sim/cq-0")]

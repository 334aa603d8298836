"""Gangs owed their turn: Workloads behind them in Kueue's order wait (``queueing.holdBehindGangs``).

A reservation holds nodes for a gang that already holds quota, but a large gang also waits for
quota: Kueue's ``BestEffortFIFO`` lets every smaller Workload that fits the quota pass it, so on a
full ClusterQueue the gang gets quota only when its GPUs' worth frees in one instant, and the GPUs
that free go to those smaller Workloads first. A gang that has waited ``reserveAfterSeconds``
since it was created is *owed*: each Workload behind it in Kueue's order (priority, then creation
time, then key) in the same ClusterQueue waits when Kueue gives it quota, parked with its quota,
instead of starting. Parked, its quota goes back to the gang as soon as the gang's GPUs are free
on the flavor (``QuotaYield``), and the GPUs it would have taken stay free for the gang.

A Workload is held by the first owed gang alone.

``quota`` owes a gang while it waits for quota; ``start`` until it starts (with quota, while it
waits for room), so nothing behind it takes the nodes that free meanwhile. The feeder (the
controller's cache, or the simulator's queues) says which gangs are owed (``set``); a held
Workload is woken when a gang it waited behind is owed no longer (``set`` returns that).

``holdBehindGangsBackfill`` lets a held Workload go when it is expected to end before the gang is
expected to have its GPUs (``ends_before_gang``): its end is its ``maximumExecutionTimeSeconds``
where set, else the runtime learned for its queue and size; the gang's start is when the GPUs
free on the flavor now plus those the running Workloads free, in the order they are expected to
end, first reach the gang's (``gang_start``). Kueue's quota is not read: the flavor's GPUs stand
for it. Unknown runtimes hold it (it is not known to end first).

Pure state, fed the same way by the controller and the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from admission.queue._estimate import Running, RuntimeEstimator

__all__ = ["OwedGang", "OwedGangs", "ends_before_gang", "gang_start"]


@dataclass(frozen=True, slots=True, order=True)
class OwedGang:
    """A gang owed its turn in ClusterQueue ``queue``: Kueue's order is (−``priority``, ``created``, ``key``)."""

    neg_priority: int
    created: float
    key: str
    queue: str
    gpus: int
    flavor: str | None = None
    """The flavor its quota is (or would be) on; None: not known yet (Kueue picks it when it reserves quota)."""

    @property
    def priority(self) -> int:
        return -self.neg_priority

    def describe(self) -> str:
        return f"gang {self.key} ({self.gpus} GPUs) is owed its turn in ClusterQueue {self.queue}"


def _order(g: OwedGang) -> tuple[int, float, str]:
    return g.neg_priority, g.created, g.key


class OwedGangs:
    """The owed gangs by ClusterQueue and flavor (None: not known yet), each list in Kueue's order."""

    def __init__(self) -> None:
        self._by_queue: dict[tuple[str, str | None], list[OwedGang]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_queue.values())

    def on(self, queue: str, flavor: str | None = None) -> list[OwedGang]:
        return list(self._by_queue.get((queue, flavor), ()))

    def set(self, queue: str, flavor: str | None, gangs: Iterable[OwedGang]) -> list[str]:
        """The gangs owed in ``queue`` on ``flavor`` now (those of another queue or flavor are left
        out); the keys of those owed before and owed no longer (what waited behind them may go
        now: wake it, ``WaitingRoom.wake_behind``)."""
        new = sorted((g for g in gangs if g.queue == queue and g.flavor == flavor), key=_order)  # by tuple: thousands per decision
        old = self._by_queue.get((queue, flavor), [])
        if new:
            self._by_queue[(queue, flavor)] = new
        else:
            self._by_queue.pop((queue, flavor), None)
        keys = {g.key for g in new}
        return [g.key for g in old if g.key not in keys]

    def ahead(self, queue: str | None, flavor: str, key: str, priority: int, created: float | None) -> OwedGang | None:
        """The first owed gang of ``queue`` (on ``flavor``, or on a flavor not known yet) ahead of
        Workload ``key`` (its ``priority`` and creation time) in Kueue's order; None: nothing holds
        it (it is owed itself, or first, or its creation time is unknown)."""
        if queue is None or created is None:
            return None
        lists = [x for x in (self._by_queue.get((queue, flavor)), self._by_queue.get((queue, None))) if x]
        if not lists:
            return None
        first = min((x[0] for x in lists), key=_order)  # each list is in Kueue's order: its first is its least
        if first.key == key or (first.neg_priority, first.created, first.key) >= (-priority, created, key):
            return None  # it is owed itself, or the first is behind it: so is every other
        return first


def gang_start(gpus: int, free: int, running: Iterable[Running], estimator: RuntimeEstimator, now: float) -> float | None:
    """When a gang of ``gpus`` GPUs is expected to have them on a flavor with ``free`` GPUs free
    now: ``now`` if they are, else the expected end of the running Workload whose GPUs, added in
    the order they are expected to end, first make up the rest. None: not expected at all (the
    running Workloads whose runtime is known do not free enough)."""
    if free >= gpus:
        return now
    ends = sorted((e[0], r.gpus) for r in running if (e := r.expected_end(estimator, now)) is not None)
    have = free
    for end, g in ends:
        have += g
        if have >= gpus:
            return end
    return None


def ends_before_gang(runtime: float | None, gang_starts: float | None, now: float) -> bool:
    """Whether a Workload starting ``now`` and running ``runtime`` seconds (None: not known) ends by
    the time the gang it waits behind is expected to start (None: not known): it may go first."""
    return runtime is not None and gang_starts is not None and now + runtime <= gang_starts

"""Gangs owed their turn: Workloads behind them in Kueue's order wait (``queueing.holdBehindGangs``).

A reservation holds nodes for a gang that already holds quota, but a large gang also waits for
quota: Kueue's ``BestEffortFIFO`` lets every smaller Workload that fits the quota pass it, so on a
full ClusterQueue the gang gets quota only when its GPUs' worth frees in one instant, and the GPUs
that free go to those smaller Workloads first. A gang that has waited ``reserveAfterSeconds``
since it was created is *owed*: each Workload behind it in Kueue's order (priority, then creation
time, then key) in the same ClusterQueue waits when Kueue gives it quota, parked with its quota,
instead of starting. Parked, its quota goes back to the gang as soon as the gang's GPUs are free
on the flavor (``QuotaYield``), and the GPUs it would have taken stay free for the gang.

``quota`` owes a gang while it waits for quota; ``start`` until it starts (with quota, while it
waits for room), so nothing behind it takes the nodes that free meanwhile. The feeder (the
controller's cache, or the simulator's queues) says which gangs are owed (``set``); a held
Workload is woken when a gang it waited behind is owed no longer (``set`` returns that).

Pure state, fed the same way by the controller and the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["OwedGang", "OwedGangs"]


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
        new = sorted(g for g in gangs if g.queue == queue and g.flavor == flavor)
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
        gangs = self._by_queue.get((queue, flavor), []) + self._by_queue.get((queue, None), [])
        if not gangs:
            return None
        first = min(gangs)
        if first.key == key or (first.neg_priority, first.created, first.key) >= (-priority, created, key):
            return None  # it is owed itself, or the first is behind it: so is every other
        return first

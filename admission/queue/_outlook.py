"""What the queue manager knows beyond the waiting room: what runs where and since when, the
runtimes learned from what finished, the reservations held, the best spans priced for
waiting Workloads (``SpanPrices``), and the Workloads waiting for a domain in Kueue's order
(``Queued``) with the expected start last weighed for each.

Pure state, fed by the controller's cache or the simulator's cluster alike (``started`` when a
Workload's pods are all bound, ``finished`` when it ends, ``forget`` when it goes otherwise), so
both weigh waits and hold reservations on the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from admission.queue._ahead import Queued, Waiter
from admission.queue._estimate import Running, RunningOn, RuntimeEstimator
from admission.queue._owed import OwedGangs
from admission.queue._reserve import Reservations
from admission.queue._waitspan import SpanPrices

__all__ = ["Outlook"]


class Outlook:
    """Running Workloads by key, the runtime estimator, the reservations and the owed gangs."""

    def __init__(self, min_samples: int = 3) -> None:
        self.estimator = RuntimeEstimator(min_samples)
        self.reservations = Reservations()
        self.spans = SpanPrices()
        self.owed = OwedGangs()
        """Gangs owed their turn by ClusterQueue (``queueing.holdBehindGangs``), as the feeder last said."""
        self.queued = Queued()
        """The Workloads waiting for a domain (the ``Decider`` adds each wait; a start or ``left`` ends it)."""
        self.expected: dict[str, float] = {}
        """Key → the expected start last weighed for a waiting Workload (``atoll queue``)."""
        self.quota_waiters: Callable[[str, str | None], Sequence[Waiter]] | None = None
        """(flavor, the deciding Workload's ClusterQueue) → the Workloads waiting for quota that
        would take it there, in Kueue's order, front first (at most ``MAX_AHEAD``); read only when
        a span is priced by the line (``spanCountsQueue``); set by the feeder (the simulator's
        queues, the controller's cache). None: not known."""
        self._running: dict[str, Running] = {}
        self._by_flavor: dict[str, RunningOn] = {}

    def __len__(self) -> int:
        return len(self._running)

    def started(self, key: str, running: Running) -> None:
        self.forget(key)
        self._running[key] = running
        self.running_on(running.flavor).add(key, running)
        self.reservations.release(key)
        self.spans.forget(key)
        self.left(key)

    def left(self, key: str) -> None:
        """``key`` waits no more (placed, rejected, finished or gone): out of the line."""
        self.queued.left(key)
        self.expected.pop(key, None)

    def running(self, key: str) -> Running | None:
        return self._running.get(key)

    def on(self, flavor: str) -> list[Running]:
        return list(self._by_flavor.get(flavor, ()))

    def running_on(self, flavor: str) -> RunningOn:
        """The running Workloads on ``flavor`` by node, their expected ends kept between questions
        (``domain_outlook``); live: it changes as Workloads start and end."""
        got = self._by_flavor.get(flavor)
        if got is None:
            got = self._by_flavor[flavor] = RunningOn(flavor)
        return got

    def finished(self, key: str, now: float) -> float | None:
        """``key`` ended at ``now`` and ran to completion: its runtime is learned. The runtime, or None if it was not known to run."""
        r = self.forget(key)
        if r is None:
            return None
        self.estimator.learn(r.queue, r.gpus, now - r.started)
        return now - r.started

    def forget(self, key: str) -> Running | None:
        """``key`` is gone without finishing (deleted, evicted): nothing is learned."""
        r = self._running.pop(key, None)
        if r is not None:
            self._by_flavor[r.flavor].remove(key)
        return r

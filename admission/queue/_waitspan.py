"""Wait for one domain or span now: the choice an elastic profile makes by expected cost.

Waiting costs the expected wait for one domain (``domain_outlook``: the soonest domain's expected
free time, its GPUs counted in whole pods of the Workload's largest pod; with
``queueing.waitCountsQueue``, ``queued_start``: after the Workloads queued ahead took that room
first). Spanning now costs the extra run time of the best span found: the Workload's
expected runtime times (slowdown − 1), the slowdown priced by the cost model on that span; with
``queueing.spanCountsQueue``, plus what the span costs the other Workloads in line
(``span_queue_cost``: the delay to their expected starts, never a credit). With
``queueing.waitWeight`` above 1 the wait is charged that many times over: a Workload that waits
leaves the GPUs it could take now idle, a cost its own delay does not show. The
cheaper side wins; a tie waits (one domain is what the profile prefers). Either number unknown
(no runtime learned yet, no span found or none it can price): no answer, and the profile's
``relaxAfterSeconds`` decides alone. ``relaxAfterSeconds`` stays the upper bound in every case:
once it has passed, ``decide`` spans whatever this says.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from admission.queue._estimate import Running, RunningOn, RuntimeEstimator
from topology import Snapshot

__all__ = ["SpanPrices", "WaitOrSpan", "span_stamp", "wait_basis", "weigh"]


@dataclass(frozen=True, slots=True)
class WaitOrSpan:
    """Both sides of the choice, in seconds, and the choice (``None``: not enough known)."""

    wait_s: float | None
    wait_error_s: float
    domain: str
    span_slowdown: float | None
    runtime_s: float | None
    runtime_error_s: float
    choice: Literal["span", "wait"] | None
    kind: Literal["span", "floor"] = "span"
    """``span``: the other side is a span of domains; ``floor``: a placement on GPUs below the
    class's ``perfFloor`` (``queueing.perfFloorByCost``)."""
    ahead: int | None = None
    """Waiters queued ahead counted in ``wait_s`` (``queueing.waitCountsQueue``); None: the room alone."""
    wait_alone_s: float | None = None
    """With the queue counted: the expected wait for the room alone, as if nobody waited ahead."""
    queue_cost_s: float | None = None
    """With ``spanCountsQueue``: the delay the span imposes on the other waiters' expected starts,
    summed (negative: they start sooner on balance); None: not priced (the span lost already)."""
    queue_later: int = 0
    """Of those waiters, how many start later with the span."""
    queue_counted: int = 0
    """The waiters in line counted."""
    wait_weight: float = 1.0
    """How many times the wait is charged (``queueing.waitWeight``): 1 counts the Workload's own delay alone."""

    @property
    def wait_price_s(self) -> float | None:
        """What waiting is charged: the expected wait times ``wait_weight``."""
        return None if self.wait_s is None else self.wait_s * self.wait_weight

    @property
    def queue_delays(self) -> bool:
        """Whether the Workloads queued ahead set the wait: counted (``ahead``), they make it later
        than the room alone (an unknown wait alone counts as later)."""
        if not self.ahead or self.wait_s is None:
            return False
        return self.wait_alone_s is None or self.wait_s > self.wait_alone_s + 1e-6

    @property
    def span_cost_s(self) -> float | None:
        """The span's own extra run time."""
        if self.span_slowdown is None or self.runtime_s is None:
            return None
        return self.runtime_s * max(self.span_slowdown - 1.0, 0.0)

    @property
    def span_price_s(self) -> float | None:
        """What the span is charged: its own extra run time plus the line's delays (never a credit)."""
        own = self.span_cost_s
        if own is None or self.queue_cost_s is None:
            return own
        return own + max(self.queue_cost_s, 0.0)

    def describe(self) -> str:
        floor = self.kind == "floor"
        other, best = ("placement under the speed floor", "placement under the speed floor") if floor else ("span", "best span")
        wait = (f"expected wait for one domain {self.wait_s:.0f}s ± {self.wait_error_s:.0f}s ({self.domain})"
                if self.wait_s is not None else "expected wait for one domain unknown (no runtime learned for what runs there)")
        if self.ahead is not None:
            alone = f"{self.wait_alone_s:.0f}s" if self.wait_alone_s is not None else "unknown"
            wait += f" after {self.ahead} queued ahead (alone {alone})"
        if self.wait_s is not None and self.wait_weight != 1.0:
            wait += f", charged ×{self.wait_weight:g} for the GPUs it leaves idle = {self.wait_price_s:.0f}s"
        if self.span_slowdown is None:  # none found, or none the cost model can price
            span = (f"no {other} priced now" if self.runtime_s is None else
                    f"no {other} priced now; expected runtime {self.runtime_s:.0f}s ± {self.runtime_error_s:.0f}s")
        elif self.runtime_s is None:
            span = f"{best} slows it {self.span_slowdown:.3f}×, its runtime unknown"
        else:
            span = (f"{best} slows it {self.span_slowdown:.3f}× = +{self.span_cost_s:.0f}s on an expected "
                    f"{self.runtime_s:.0f}s ± {self.runtime_error_s:.0f}s")
            if self.queue_cost_s is not None:
                span += (f", and delays the {self.queue_counted} others in line {self.queue_cost_s:+.0f}s in all "
                         f"({self.queue_later} start later) = {self.span_price_s:.0f}s")
        if floor:
            verdict = {"span": "takes the slower GPUs now (cheaper)", "wait": "waits (cheaper)", None: "perfFloor decides"}[self.choice]
            return f"wait or slower GPUs: {wait}; {span}; {verdict}"
        verdict = {"span": "spans now (cheaper)", "wait": "waits (cheaper)", None: "relaxAfterSeconds decides"}[self.choice]
        return f"wait or span: {wait}; {span}; {verdict}"

    def as_record(self, flavor: str, wait_basis: str | None, runtime_basis: str | None) -> dict[str, object]:
        """The weighing as the decision record's ``wait_or_span`` entry: both sides, where each came
        from (``wait_basis``: ``wait_basis``'s answer; ``runtime_basis``: ``limit`` or ``learned``),
        and the choice (None: not enough known, the profile's bound decides)."""
        return {"flavor": flavor, "kind": self.kind, "domain": self.domain, "expected_wait_seconds": _r(self.wait_s),
                "wait_error_seconds": _r(self.wait_error_s), "wait_basis": wait_basis, "queued_ahead": self.ahead,
                "wait_weight": self.wait_weight, "span_slowdown": None if self.span_slowdown is None else round(self.span_slowdown, 4),
                "expected_runtime_seconds": _r(self.runtime_s), "runtime_error_seconds": _r(self.runtime_error_s),
                "runtime_basis": runtime_basis, "span_cost_seconds": _r(self.span_cost_s), "queue_cost_seconds": _r(self.queue_cost_s),
                "queue_delayed": self.queue_later if self.queue_cost_s is not None else None,
                "span_price_seconds": _r(self.span_price_s), "chose": self.choice}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def weigh(wait_s: float | None, wait_error_s: float, domain: str, span_slowdown: float | None, runtime_s: float | None,
          runtime_error_s: float = 0.0, kind: Literal["span", "floor"] = "span", ahead: int | None = None,
          wait_alone_s: float | None = None, queue_cost_s: float | None = None, queue_later: int = 0,
          queue_counted: int = 0, wait_weight: float = 1.0) -> WaitOrSpan:
    """Span when the expected wait, charged ``wait_weight`` times, exceeds the span's price (its expected extra run time, plus
    ``queue_cost_s``, the delay it imposes on the others in line, when that is positive); wait on
    a tie. ``ahead`` and ``wait_alone_s``: the waiters queued ahead ``wait_s`` counts, and the wait
    for the room alone (said beside it); ``queue_later``, ``queue_counted``: of the others in line,
    how many start later with the span, and how many were counted."""
    out = WaitOrSpan(wait_s, wait_error_s, domain, span_slowdown, runtime_s, runtime_error_s, None, kind, ahead, wait_alone_s,
                     queue_cost_s, queue_later, queue_counted, wait_weight)
    price, charged = out.span_price_s, out.wait_price_s
    if price is not None and charged is not None:
        out = replace(out, choice="span" if charged > price else "wait")
    return out


def wait_basis(snapshot: Snapshot, domain: str, wait_s: float | None, running: Iterable[Running], estimator: RuntimeEstimator,
               now: float, queue: bool = False) -> str | None:
    """Where an expected wait for ``domain`` (a path joined by ``/``; empty: the whole flavor) came
    from: ``now`` when the room is free now; else from the running Workloads on its nodes expected
    to end by then: ``limits`` when each has Kueue's ``maximumExecutionTimeSeconds``, ``learned``
    when each runtime was learned from finished Workloads, ``limits+learned`` for both; and
    ``+queue`` (``queue`` alone when nothing running there ends by then) when the Workloads queued
    ahead set it (``queue``: ``WaitOrSpan.queue_delays``). None when the wait is unknown, or none of
    these set it. Reads the flavor's ``RunningOn`` index by node, so it walks the domain's nodes, not every running Workload."""
    if wait_s is None:
        return None
    if wait_s <= 0:
        return "now"
    lo, hi = _node_range(snapshot, domain)
    index = RunningOn.of(snapshot.flavor, running)
    until, sources = now + wait_s + 1e-6, set()
    for key, r in index.on_nodes(snapshot.node_names[lo:hi]).items():
        end = index.end(key, estimator, now)
        if end is not None and end[0] <= until:
            est = estimator.estimate(r.queue, r.gpus, r.limit)
            sources.add("limits" if est is not None and est.source == "limit" else "learned")
    if queue:
        sources.add("queue")
    return "+".join(s for s in ("limits", "learned", "queue") if s in sources) or None


def _node_range(snapshot: Snapshot, domain: str) -> tuple[int, int]:
    """The nodes of ``domain`` (its path joined by ``/``; empty: the whole flavor) as an index range; empty when unknown."""
    if not domain:
        return 0, snapshot.num_nodes
    depth = len(domain.split("/")) - 1
    for lv in sorted(range(len(snapshot.domain_values)), key=lambda lv: lv != depth):  # its own depth first: a value may hold a /
        for d, path in enumerate(snapshot.domain_values[lv]):
            if "/".join(path) == domain:
                return snapshot.domain_range(lv, d)
    return 0, 0


def span_stamp(*parts: object) -> tuple[object, ...]:
    """What a span search reads, as a stamp: each array by a digest of its bytes, anything else as
    it is (compared with ``==``). Equal stamps, equal searches."""
    out: list[object] = []
    for part in parts:
        if isinstance(part, np.ndarray):
            out.append(hashlib.blake2b(np.ascontiguousarray(part).tobytes(), digest_size=16).digest())
        else:
            out.append(part)
    return tuple(out)


_MISS = object()


class SpanPrices:
    """The best span's slowdown per Workload (None: no span, or not priced), with the stamp of what
    its search read; reused while the stamp is unchanged. At most ``limit`` Workloads are kept
    (the oldest priced go first)."""

    def __init__(self, limit: int = 100_000) -> None:
        self._prices: dict[Hashable, tuple[tuple[object, ...], float | None]] = {}
        self._limit = limit
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._prices)

    def get(self, key: Hashable, stamp: tuple[object, ...]) -> object:
        """The slowdown priced for ``key`` on ``stamp`` (a float or None), or ``SpanPrices.MISS``."""
        entry = self._prices.get(key)
        if entry is None or entry[0] != stamp:
            self.misses += 1
            return _MISS
        self.hits += 1
        return entry[1]

    def put(self, key: Hashable, stamp: tuple[object, ...], slowdown: float | None) -> None:
        self._prices.pop(key, None)
        if len(self._prices) >= self._limit:
            del self._prices[next(iter(self._prices))]
        self._prices[key] = (stamp, slowdown)

    def forget(self, key: Hashable) -> None:
        """``key`` is admitted or gone: its price is dropped."""
        self._prices.pop(key, None)

    MISS = _MISS

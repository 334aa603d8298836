"""The Workloads queued ahead of a waiting one, and when it is expected to start once they have
taken the room that frees before it (``queueing.waitCountsQueue``).

``domain_outlook`` answers when a domain has room for one Workload alone: the GPUs running
Workloads hand back, as if nobody else waited. Under load that under-reads the wait, since the
Workloads queued ahead take that room first. ``queued_start`` runs the frees out instead:

- the waiters ahead are the Workloads waiting for a domain on the same flavor, in Kueue's order
  (higher ``spec.priority`` first, then the earlier creation, else the first wait; ``Queued``),
  at most ``MAX_AHEAD`` of them from the front of the line;
- the running Workloads' GPUs come back at their expected ends (``Running.expected_end``), in
  time order; at each moment the waiters, in that order, each take room in one domain of the
  level as soon as one has it (in whole pods of their largest pod, the domain with the least
  room that holds them), and hand it back one expected runtime later (the estimator's figure
  for their queue and size; unknown: never);
- a waiter ahead that no domain of the level holds even empty is not counted: it does not
  compete for one domain of that size;
- the Workload itself starts at the first moment a domain has its room after those ahead of it
  took theirs: its expected start, and the domain.

A smaller Workload behind one that does not fit yet may take room first (Atoll decides each
waiting Workload on its own, and Kueue has admitted all of them for quota); a reservation keeps
its gang's room out of the others' (``blocked``). The waiters ahead are counted on the nodes the
Workload may use (its class's speed floor, eligibility). The cost is bounded: at most
``MAX_AHEAD`` waiters and ``MAX_EVENTS`` moments; past either the answer is the start reached so
far when the Workload has started, else unknown. Pure: plain lists and arrays, no clock, no API.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from admission.queue._estimate import Running, RuntimeEstimator
from topology import Snapshot

__all__ = ["MAX_AHEAD", "MAX_EVENTS", "Queued", "QueuedStart", "Waiter", "queued_start"]

MAX_AHEAD = 256
"""Waiters ahead counted, from the front of the line (the ones that take the room first)."""
MAX_EVENTS = 4096
"""Moments (frees) run out at most per answer."""


@dataclass(frozen=True, slots=True)
class Waiter:
    """A Workload waiting for a domain on ``flavor``: its GPUs in all, its largest pod's GPUs, its
    priority, when it queued (creation, else its first wait), its queue and Kueue limit."""

    flavor: str
    gpus: int
    per_pod: int
    priority: int
    since: float
    queue: str | None = None
    limit: float | None = None


class Queued:
    """The Workloads waiting for a domain, per flavor in Kueue's order (priority, then ``since``, then key)."""

    def __init__(self) -> None:
        self._by_key: dict[str, Waiter] = {}
        self._line: dict[str, list[tuple[int, float, str]]] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: str) -> Waiter | None:
        return self._by_key.get(key)

    def waits(self, key: str, waiter: Waiter) -> None:
        """``key`` waits as ``waiter`` (its place kept when it waits again unchanged)."""
        have = self._by_key.get(key)
        if have == waiter:
            return
        if have is not None:
            self.left(key)
        self._by_key[key] = waiter
        bisect.insort(self._line.setdefault(waiter.flavor, []), (-waiter.priority, waiter.since, key))

    def left(self, key: str) -> None:
        """``key`` no longer waits (placed, rejected, gone)."""
        have = self._by_key.pop(key, None)
        if have is None:
            return
        line = self._line[have.flavor]
        at = bisect.bisect_left(line, (-have.priority, have.since, key))
        if at < len(line) and line[at][2] == key:
            del line[at]

    def ahead(self, key: str, limit: int = MAX_AHEAD + 1) -> list[Waiter]:
        """The waiters ahead of ``key`` on its flavor, front of the line first (at most ``limit``)."""
        me = self._by_key.get(key)
        if me is None:
            return []
        line = self._line[me.flavor]
        at = bisect.bisect_left(line, (-me.priority, me.since, key))
        return [self._by_key[k] for _, _, k in line[:min(at, limit)]]


@dataclass(frozen=True, slots=True)
class QueuedStart:
    """When the Workload is expected to start after the waiters ahead (None: not within what is
    known), the error of that time, the domain (index and path), the waiters ahead that compete
    for a domain of the level, how many of them start first, and whether a bound was reached."""

    free_at: float | None
    error: float
    domain: int
    path: tuple[str, ...]
    ahead: int
    before: int
    capped: bool = False


def queued_start(snapshot: Snapshot, level: str | None, gpus: int, per_pod: int, running: Iterable[Running], estimator: RuntimeEstimator,
                 now: float, ahead: Sequence[Waiter], blocked: Mapping[str, int] | None = None) -> QueuedStart | None:
    """The Workload's expected start on ``snapshot`` (what is free now, its eligible nodes) for one
    domain of ``level`` (None: the whole flavor) with ``gpus`` GPUs in whole pods of ``per_pod``,
    after the waiters ``ahead`` (front first; past ``MAX_AHEAD``, the rest are left out and the
    answer says so) took the room as it frees. None when no domain of the level holds it even
    empty.

    Why this function is long: the run-out is one loop over moments whose two steps (frees come
    back, the line takes room) write the same per-node and per-domain counts; the steps are kept
    as closures over those plain lists, so each moment costs a few list operations, not objects."""
    capped = len(ahead) > MAX_AHEAD
    ahead = ahead[:MAX_AHEAD]
    if gpus <= 0:
        return None
    lv = snapshot.level_index(level) if level is not None and level in snapshot.level_labels else 0
    flat = level is None or level not in snapshot.level_labels
    alloc = np.where(snapshot.eligible.astype(bool), snapshot.alloc[:, 0], 0).astype(np.int64)
    if blocked:  # GPUs another gang's reservation holds: room for nobody in this line
        for name, g in blocked.items():
            i = snapshot.node_index.get(name)
            if i is not None:
                alloc[i] = max(0, int(alloc[i]) - int(g))
    cap = alloc.tolist()
    free = np.minimum(snapshot.free[:, 0], alloc).tolist()
    dom = [0] * snapshot.num_nodes if flat else snapshot.node_dom[lv].tolist()
    ndom = 1 if flat else snapshot.num_domains(lv)
    span = [(0, snapshot.num_nodes)] if flat else [snapshot.domain_range(lv, d) for d in range(ndom)]
    pod = max(int(per_pod), 1)
    sizes = sorted({pod} | {max(int(w.per_pod), 1) for w in ahead})
    room = {p: [0] * ndom for p in sizes}  # per pod size: GPUs free per domain in whole pods
    most = {p: [0] * ndom for p in sizes}  # the same with the domain empty
    for i, d in enumerate(dom):
        for p in sizes:
            room[p][d] += free[i] // p * p
            most[p][d] += cap[i] // p * p
    if max(most[pod]) < gpus:
        return None
    # the line: waiters ahead that one domain of the level holds, then the Workload itself
    line: list[tuple[int, int, tuple[float, float] | None]] = []
    for w in ahead:
        p = max(int(w.per_pod), 1)
        if w.gpus <= 0 or max(most[p]) < w.gpus:
            continue
        est = estimator.estimate(w.queue, w.gpus, w.limit)
        line.append((w.gpus, p, None if est is None else (est.seconds, est.error)))
    me = len(line)
    line.append((gpus, pod, None))
    buckets: dict[tuple[int, int], deque[int]] = {}
    for idx, (g, p, _) in enumerate(line):
        buckets.setdefault((g, p), deque()).append(idx)
    events: list[tuple[float, float, int, int]] = []
    for r in running:
        if r.flavor != snapshot.flavor:
            continue
        got = r.expected_end(estimator, now)
        if got is None:
            continue
        for name, g in r.nodes:
            i = snapshot.node_index.get(name)
            if i is not None and cap[i] > 0:
                events.append((got[0], got[1], i, int(g)))
    heapq.heapify(events)

    def change(i: int, delta: int) -> None:
        was = free[i]
        now_ = min(max(was + delta, 0), cap[i])
        free[i] = now_
        d = dom[i]
        for p in sizes:
            room[p][d] += now_ // p * p - was // p * p

    def take(t: float, domains: Iterable[int]) -> int | None:
        """Waiters in line order take room in ``domains`` at ``t``; the domain the Workload took, if it did."""
        ds = list(domains)
        while True:
            best: tuple[int, int, int, int] | None = None
            for (g, p), queue in buckets.items():
                if not queue or (best is not None and queue[0] > best[0]):
                    continue
                fits = [d for d in ds if room[p][d] >= g]
                if fits:
                    best = (queue[0], g, p, min(fits, key=lambda d: (room[p][d], d)))
            if best is None:
                return None
            idx, g, p, d = best
            buckets[(g, p)].popleft()
            if idx == me:
                return d
            ends = line[idx][2]
            lo, hi = span[d]
            need = g // p + (1 if g % p else 0)
            for i in range(lo, hi):
                if need <= 0:
                    break
                k = min(free[i] // p, need)
                if k > 0:
                    change(i, -k * p)
                    need -= k
                    if ends is not None:
                        heapq.heappush(events, (t + ends[0], ends[1], i, k * p))

    started = take(now, range(ndom))
    t, err, moments = now, 0.0, 0
    while started is None and events:
        if moments >= MAX_EVENTS:
            capped = True
            break
        moments += 1
        t, err = events[0][0], 0.0
        changed: set[int] = set()
        while events and events[0][0] == t:
            _, e, i, g = heapq.heappop(events)
            change(i, g)
            changed.add(dom[i])
            err = max(err, e)
        started = take(t, sorted(changed))
    competing = me
    before = me - sum(1 for q in buckets.values() for idx in q if idx != me)
    if started is None:
        return QueuedStart(None, 0.0, -1, (), competing, before, capped)
    path = () if flat else snapshot.domain_path(lv, started)
    return QueuedStart(t if math.isfinite(t) else None, err, started, path, competing, before, capped)

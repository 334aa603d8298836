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
its gang's room out of the others' (``blocked``), and its gang out of the line (``skip``): it
takes the room it holds, not another domain. The waiters ahead are counted on the nodes the
Workload may use (its class's speed floor, eligibility). The cost is bounded: at most
``MAX_AHEAD`` waiters and ``MAX_EVENTS`` moments; past either the answer is the start reached so
far when the Workload has started, else unknown. Pure: plain lists and arrays, no clock, no API.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from admission.queue._estimate import Running, RuntimeEstimator
from topology import Snapshot

__all__ = ["MAX_AHEAD", "MAX_EVENTS", "Entry", "Queued", "QueuedStart", "Room", "Waiter", "entry", "frees", "queued_start", "run_out"]

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

    def ahead(self, key: str, limit: int = MAX_AHEAD + 1, skip: Callable[[str], bool] | None = None) -> list[Waiter]:
        """The waiters ahead of ``key`` on its flavor, front of the line first (at most ``limit``;
        those ``skip`` names left out)."""
        me = self._by_key.get(key)
        if me is None:
            return []
        line = self._line[me.flavor]
        at = bisect.bisect_left(line, (-me.priority, me.since, key))
        keys = (k for _, _, k in line[:at] if skip is None or not skip(k))
        return [self._by_key[k] for k in itertools.islice(keys, limit)]

    def line(self, key: str, limit: int = MAX_AHEAD + 1, skip: Callable[[str], bool] | None = None) -> tuple[list[Waiter], int]:
        """The waiters on ``key``'s flavor, front of the line first (at most ``limit``, ``key`` kept
        last when further back; the others ``skip`` names left out), and ``key``'s index there;
        ``([], -1)`` when ``key`` does not wait."""
        me = self._by_key.get(key)
        if me is None:
            return [], -1
        keys = [k for _, _, k in self._line[me.flavor] if k == key or skip is None or not skip(k)]
        at = keys.index(key)
        keys = keys[:limit]
        if at >= limit:
            keys = keys[:limit - 1] + [key]
            at = limit - 1
        return [self._by_key[k] for k in keys], at


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
    empty."""
    capped = len(ahead) > MAX_AHEAD
    ahead = ahead[:MAX_AHEAD]
    if gpus <= 0:
        return None
    room = Room(snapshot, level, {max(int(per_pod), 1)} | {max(int(w.per_pod), 1) for w in ahead}, blocked)
    if not room.holds(gpus, per_pod):
        return None
    line = [e for e in (entry(room, w, estimator) for w in ahead) if e is not None]
    me = len(line)
    line.append((gpus, max(int(per_pod), 1), None))
    run = run_out(room, line, frees(room, snapshot.flavor, running, estimator, now), now, me)
    competing = me
    before = sum(1 for idx in range(me) if run.starts[idx] is not None)
    got = run.starts[me]
    if got is None:
        return QueuedStart(None, 0.0, -1, (), competing, before, capped or run.capped)
    t, err, d = got
    path = () if room.flat else snapshot.domain_path(room.lv, d)
    return QueuedStart(t if math.isfinite(t) else None, err, d, path, competing, before, capped or run.capped)


Entry = tuple[int, int, "tuple[float, float] | None"]
"""A waiter as a run reads it: its GPUs, its pod's GPUs, and its expected runtime and error (None: unknown, never handed back)."""


class Room:
    """The GPUs free per node and, per pod size, per domain of one level, in whole pods; plain
    lists, so each moment of a run costs a few list operations, not objects."""

    __slots__ = ("cap", "dom", "flat", "free", "index", "lv", "most", "ndom", "room", "sizes", "span")

    def __init__(self, snapshot: Snapshot, level: str | None, sizes: Iterable[int], blocked: Mapping[str, int] | None) -> None:
        self.index = snapshot.node_index
        self.lv = snapshot.level_index(level) if level is not None and level in snapshot.level_labels else 0
        self.flat = level is None or level not in snapshot.level_labels
        alloc = np.where(snapshot.eligible.astype(bool), snapshot.alloc[:, 0], 0).astype(np.int64)
        if blocked:  # GPUs another gang's reservation holds: room for nobody in this line
            for name, g in blocked.items():
                i = snapshot.node_index.get(name)
                if i is not None:
                    alloc[i] = max(0, int(alloc[i]) - int(g))
        self.cap: list[int] = alloc.tolist()
        self.free: list[int] = np.minimum(snapshot.free[:, 0], alloc).tolist()
        self.dom: list[int] = [0] * snapshot.num_nodes if self.flat else snapshot.node_dom[self.lv].tolist()
        self.ndom = 1 if self.flat else snapshot.num_domains(self.lv)
        self.span = [(0, snapshot.num_nodes)] if self.flat else [snapshot.domain_range(self.lv, d) for d in range(self.ndom)]
        self.sizes = sorted(set(sizes))
        self.room = {p: [0] * self.ndom for p in self.sizes}  # per pod size: GPUs free per domain in whole pods
        self.most = {p: [0] * self.ndom for p in self.sizes}  # the same with the domain empty
        for i, d in enumerate(self.dom):
            for p in self.sizes:
                self.room[p][d] += self.free[i] // p * p
                self.most[p][d] += self.cap[i] // p * p

    def copy(self) -> Room:
        out = object.__new__(Room)
        out.index, out.lv, out.flat, out.cap, out.dom = self.index, self.lv, self.flat, self.cap, self.dom
        out.ndom, out.span, out.sizes = self.ndom, self.span, self.sizes
        out.free = list(self.free)
        out.room = {p: list(v) for p, v in self.room.items()}
        out.most = self.most
        return out

    def holds(self, gpus: int, per_pod: int) -> bool:
        """Whether some domain holds ``gpus`` in whole pods of ``per_pod`` when empty."""
        return max(self.most[max(int(per_pod), 1)]) >= gpus

    def change(self, i: int, delta: int) -> None:
        was = self.free[i]
        now_ = min(max(was + delta, 0), self.cap[i])
        self.free[i] = now_
        d = self.dom[i]
        for p in self.sizes:
            self.room[p][d] += now_ // p * p - was // p * p


def entry(room: Room, w: Waiter, estimator: RuntimeEstimator) -> Entry | None:
    """``w`` as a run reads it; None when no domain holds it even empty (it does not compete for one)."""
    p = max(int(w.per_pod), 1)
    if w.gpus <= 0 or not room.holds(w.gpus, p):
        return None
    est = estimator.estimate(w.queue, w.gpus, w.limit)
    return (w.gpus, p, None if est is None else (est.seconds, est.error))


def frees(room: Room, flavor: str, running: Iterable[Running], estimator: RuntimeEstimator, now: float) -> list[tuple[float, float, int, int]]:
    """The running Workloads' GPUs as (expected end, error, node, GPUs), a heap."""
    events: list[tuple[float, float, int, int]] = []
    for r in running:
        if r.flavor != flavor:
            continue
        got = r.expected_end(estimator, now)
        if got is None:
            continue
        for name, g in r.nodes:
            i = room.index.get(name)
            if i is not None and room.cap[i] > 0:
                events.append((got[0], got[1], i, int(g)))
    heapq.heapify(events)
    return events


@dataclass(frozen=True, slots=True)
class RunOut:
    """Each line entry's start (moment, its error, domain; None: not within the run), the last
    moment run, and whether ``MAX_EVENTS`` was reached."""

    starts: list[tuple[float, float, int] | None]
    last: float
    capped: bool


def run_out(room: Room, line: Sequence[Entry], events: list[tuple[float, float, int, int]], now: float, stop: int | None) -> RunOut:
    """Run ``line`` (front first) out on ``room`` as ``events`` (a heap of frees) come: at each
    moment the entries, in line order, each take room in one domain as soon as one has it (in
    whole pods, the domain with the least room that holds them) and hand it back one expected
    runtime later. Until ``stop`` started (None: every entry), the frees run out, or
    ``MAX_EVENTS`` moments. ``room`` and ``events`` are used up.

    Why this function is long: the run-out is one loop over moments whose two steps (frees come
    back, the line takes room) write the same per-node and per-domain counts; the taking step is
    a closure over those plain lists, so each moment costs a few list operations, not objects."""
    starts: list[tuple[float, float, int] | None] = [None] * len(line)
    buckets: dict[tuple[int, int], deque[int]] = {}
    for idx, (g, p, _) in enumerate(line):
        buckets.setdefault((g, p), deque()).append(idx)
    left = len(line)
    free, span, rm = room.free, room.span, room.room

    def take(t: float, err: float, domains: Iterable[int]) -> bool:
        """Entries in line order take room in ``domains`` at ``t``; whether ``stop`` (or the last) started."""
        nonlocal left
        ds = list(domains)
        while True:
            best: tuple[int, int, int, int] | None = None
            for (g, p), queue in buckets.items():
                if not queue or (best is not None and queue[0] > best[0]):
                    continue
                fits = [d for d in ds if rm[p][d] >= g]
                if fits:
                    best = (queue[0], g, p, min(fits, key=lambda d: (rm[p][d], d)))
            if best is None:
                return False
            idx, g, p, d = best
            buckets[(g, p)].popleft()
            starts[idx] = (t, err, d)
            left -= 1
            if idx == stop or left == 0:
                return True
            ends = line[idx][2]
            lo, hi = span[d]
            need = g // p + (1 if g % p else 0)
            for i in range(lo, hi):
                if need <= 0:
                    break
                k = min(free[i] // p, need)
                if k > 0:
                    room.change(i, -k * p)
                    need -= k
                    if ends is not None:
                        heapq.heappush(events, (t + ends[0], ends[1], i, k * p))

    done = not line or take(now, 0.0, range(room.ndom))
    t, moments, capped = now, 0, False
    while not done and events:
        if moments >= MAX_EVENTS:
            capped = True
            break
        moments += 1
        t, err = events[0][0], 0.0
        changed: set[int] = set()
        while events and events[0][0] == t:
            _, e, i, g = heapq.heappop(events)
            room.change(i, g)
            changed.add(room.dom[i])
            err = max(err, e)
        done = take(t, err, sorted(changed))
    return RunOut(starts, t, capped)

"""Pure-Python twin of ``_kernels.place_podset``: same signature, same results.

It is written for clarity, not speed: tests compare it with the jitted kernel on random
snapshots, and ``atoll bench finder`` uses it as the yardstick for the speed ratio.
"""

from __future__ import annotations

from typing import Any

__all__ = ["place_podset"]

MODE_REQUIRED, MODE_PREFERRED, MODE_SPREAD = 0, 1, 2


class _View:
    """Plain-list copies of the snapshot arrays and the derived prefix sums."""

    def __init__(self, free: Any, alloc: Any, req: Any, eligible: Any, perf: Any, perf_floor: float,
                 bounds: Any, bptr: Any, node_dom: Any, lo: int, hi: int, protect: int) -> None:
        free_l = free.tolist()
        alloc_l = alloc.tolist()
        req_l = [int(v) for v in req]
        self.perf: list[float] = perf.tolist()
        self.bounds: list[int] = bounds.tolist()
        self.bptr: list[int] = bptr.tolist()
        self.node_dom: list[list[int]] = node_dom.tolist()
        self.protect = bool(protect & 1)
        self.first_fit = bool(protect & 2)
        self.perf_first = bool(protect & 4)
        n = len(free_l)
        self.cap = [0] * n
        for i in range(n):
            if lo <= i < hi and eligible[i] and self.perf[i] >= perf_floor:
                fits = [free_l[i][r] // req_l[r] for r in range(len(req_l)) if req_l[r] > 0]
                self.cap[i] = max(0, min(fits))
        self.pc = [0] * (n + 1)
        self.pu = [0] * (n + 1)
        for i in range(n):
            self.pc[i + 1] = self.pc[i] + self.cap[i]
            untouched = free_l[i][0] == alloc_l[i][0] and free_l[i][3] == alloc_l[i][3]
            self.pu[i + 1] = self.pu[i] + (1 if untouched else 0)
        self.take = [0] * n

    def rng(self, level: int, d: int) -> tuple[int, int]:
        base = self.bptr[level]
        return self.bounds[base + d], self.bounds[base + d + 1]

    def count(self, level: int) -> int:
        return self.bptr[level + 1] - self.bptr[level] - 1

    def capacity(self, level: int, d: int) -> int:
        s, e = self.rng(level, d)
        return self.pc[e] - self.pc[s]

    def children(self, level: int, d: int) -> range:
        s, e = self.rng(level, d)
        return range(self.node_dom[level + 1][s], self.node_dom[level + 1][e - 1] + 1)

    def stats(self, s: int, e: int) -> tuple[float, float]:
        vals = [self.perf[i] for i in range(s, e) if self.cap[i] > 0]
        if not vals:
            return 0.0, 0.0
        return min(vals), max(vals) - min(vals)

    def empty_flag(self, s: int, e: int) -> int:
        return 1 if self.protect and self.pu[e] - self.pu[s] == e - s else 0

    def best_fit(self, level: int, domains: range, need: int, skip: set[int]) -> int:
        """Smallest sort key wins: (empty, capacity, -min perf, spread, index) for best fit;
        (empty, -min perf, spread, capacity, index) for perf first; (empty, index) for first fit."""
        best_key: tuple[float, ...] | None = None
        best = -1
        for d in domains:
            if d in skip:
                continue
            s, e = self.rng(level, d)
            c = self.pc[e] - self.pc[s]
            if c < need:
                continue
            m, sp = self.stats(s, e)
            empty = self.empty_flag(s, e)
            if self.perf_first:
                key: tuple[float, ...] = (empty, -m, sp, c, d)
            elif self.first_fit:
                key = (empty, d)
            else:
                key = (empty, c, -m, sp, d)
            if best_key is None or key < best_key:
                best_key, best = key, d
        return best

    def take_all(self, level: int, d: int) -> None:
        s, e = self.rng(level, d)
        for i in range(s, e):
            self.take[i] += self.cap[i]

    def descend(self, level: int, d: int, need: int) -> None:
        last = len(self.node_dom) - 1
        while level < last:
            kids = self.children(level, d)
            used: set[int] = set()
            rem = need
            while True:
                j = self.best_fit(level + 1, kids, rem, used)
                if j >= 0:
                    d, need, level = j, rem, level + 1
                    break
                if self.perf_first:
                    ranked = [(self.stats(*self.rng(level + 1, k))[0], self.capacity(level + 1, k), -k)
                              for k in kids if k not in used and self.capacity(level + 1, k) > 0]
                    _, c, neg_k = max(ranked)
                else:
                    c, neg_k = max((self.capacity(level + 1, k), -k) for k in kids if k not in used)
                if c <= 0:
                    raise AssertionError("descend ran out of capacity")
                used.add(-neg_k)
                self.take_all(level + 1, -neg_k)
                rem -= c
        self.take[d] += need


def _span_plan(caps: list[int], pods: int) -> tuple[int, int, list[int], int]:
    """(count, leftover, whole islands in order, last island) or count -1."""
    order = sorted(range(len(caps)), key=lambda i: (-caps[i], i))
    rem = pods
    for j, i in enumerate(order):
        if caps[i] <= 0:
            break
        if caps[i] >= rem:
            rest = order[j:]
            v = min(caps[k] for k in rest if caps[k] >= rem)
            last = min(k for k in rest if caps[k] == v)
            return j + 1, v - rem, order[:j], last
        rem -= caps[i]
    return -1, 0, [], -1


def place_podset(free: Any, alloc: Any, req: Any, eligible: Any, perf: Any, perf_floor: float, bounds: Any,
                 bptr: Any, node_dom: Any, lo: int, hi: int, pods: int, mode: int, target: int, span: int,
                 spread_level: int, spread_max: int, protect: int, take: Any, cap: Any) -> tuple[int, int, int]:
    v = _View(free, alloc, req, eligible, perf, perf_floor, bounds, bptr, node_dom, lo, hi, protect)
    result = _place(v, pods, mode, target, span, spread_level, spread_max)
    take[:] = v.take
    cap[:] = v.cap
    return result


def _place(v: _View, pods: int, mode: int, target: int, span: int, spread_level: int, spread_max: int) -> tuple[int, int, int]:
    if v.pc[-1] < pods:
        return 0, target, -1
    if mode == MODE_SPREAD:
        return _spread(v, pods, target, spread_level, spread_max)
    d = v.best_fit(target, range(v.count(target)), pods, set())
    if d >= 0:
        v.descend(target, d, pods)
        return 1, target, d
    if mode == MODE_REQUIRED:
        return 0, target, -1
    n = len(v.cap)
    for k in range(target - 1, span - 1, -1):
        best_key: tuple[int, int, int, float, float, int] | None = None
        for dd in range(v.count(k) if k >= 0 else 1):
            s, e = v.rng(k, dd) if k >= 0 else (0, n)
            if v.pc[e] - v.pc[s] < pods:
                continue
            islands = range(v.node_dom[target][s], v.node_dom[target][e - 1] + 1)
            cnt, left, _, _ = _span_plan([v.capacity(target, i) for i in islands], pods)
            if cnt < 0:
                continue
            m, sp = v.stats(s, e)
            key = (cnt, v.empty_flag(s, e), left, -m, sp, dd)
            if best_key is None or key < best_key:
                best_key = key
        if best_key is not None:
            dd = best_key[5]
            s, e = v.rng(k, dd) if k >= 0 else (0, n)
            i0 = v.node_dom[target][s]
            islands = range(i0, v.node_dom[target][e - 1] + 1)
            caps = [v.capacity(target, i) for i in islands]
            _, _, whole, last = _span_plan(caps, pods)
            rem = pods
            for i in whole:
                v.take_all(target, i + i0)
                rem -= caps[i]
            v.descend(target, last + i0, rem)
            return 1, k, dd
    return 0, target, -1


def _spread(v: _View, pods: int, scope: int, level: int, max_per: int) -> tuple[int, int, int]:
    qcap = [min(v.capacity(level, j), max_per) for j in range(v.count(level))]
    n = len(v.cap)

    def spread_domains(s: int, e: int) -> range:
        return range(v.node_dom[level][s], v.node_dom[level][e - 1] + 1)

    if scope < 0:
        best, s0, e0 = 0, 0, n
    else:
        best_key: tuple[int, int, float, float, int] | None = None
        for d in range(v.count(scope)):
            s, e = v.rng(scope, d)
            q = sum(qcap[j] for j in spread_domains(s, e))
            if q < pods:
                continue
            m, sp = v.stats(s, e)
            key = (v.empty_flag(s, e), q, -m, sp, d)
            if best_key is None or key < best_key:
                best_key = key
        if best_key is None:
            return 0, scope, -1
        best = best_key[4]
        s0, e0 = v.rng(scope, best)
    doms = list(spread_domains(s0, e0))
    if sum(qcap[j] for j in doms) < pods:
        return 0, scope, -1
    rem = pods
    for j in sorted(doms, key=lambda j: (v.capacity(level, j), j)):
        q = min(qcap[j], rem)
        if q <= 0:
            continue
        v.descend(level, j, q)
        rem -= q
        if rem == 0:
            break
    return 1, scope, best

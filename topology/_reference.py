"""Pure-Python twin of ``_kernels.place_podset``: same signature, same results.

It is written for clarity, not speed: tests compare it with the jitted kernel on random
snapshots, and ``atoll bench finder`` uses it as the yardstick for the speed ratio.
"""

from __future__ import annotations

from typing import Any

__all__ = ["place_podset"]

MODE_REQUIRED, MODE_PREFERRED, MODE_SPREAD, MODE_UNCONSTRAINED = 0, 1, 2, 3


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
        self.balanced = bool(protect & 8)
        self.least_free = bool(protect & 16)
        self.reach_first = bool(protect & 4) and bool(protect & 32)
        self.band = (protect >> 16) / 1000.0
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

    def rng_or_all(self, level: int, d: int) -> tuple[int, int]:
        return (0, len(self.cap)) if level < 0 else self.rng(level, d)

    def reach(self, s: int, e: int, need: int) -> float:
        """The best minimum perf ``need`` pods can get on [s, e): fastest nodes first, ties by index."""
        usable = sorted((i for i in range(s, e) if self.cap[i] > 0), key=lambda i: -self.perf[i])
        acc = 0
        for i in usable:
            acc += self.cap[i]
            if acc >= need:
                return self.perf[i]
        return self.perf[usable[-1]] if usable else 0.0

    def best_fit(self, level: int, domains: range, need: int, skip: set[int], u: list[int] | None = None, unit: int = 1) -> int:
        """Smallest sort key wins: (empty, capacity, -min perf, spread, index) for best fit;
        (empty, -min perf, spread, capacity, index) for perf first; (empty, out of the perf
        band, capacity, -reach, index) for perf first by reach; (empty, index)
        for first fit. Capacity is in pods, or in the units (of ``unit`` pods) of the prefix sums ``u``."""
        pc = self.pc if u is None else u
        fitting = [d for d in domains if d not in skip and pc[self.rng(level, d)[1]] - pc[self.rng(level, d)[0]] >= need]
        if self.reach_first:
            reach = {d: self.reach(*self.rng(level, d), need * unit) for d in fitting}
            top: dict[int, float] = {}
            for d in fitting:
                em = self.empty_flag(*self.rng(level, d))
                top[em] = max(top.get(em, -1.0), reach[d])
        best_key: tuple[float, ...] | None = None
        best = -1
        for d in fitting:
            s, e = self.rng(level, d)
            c = pc[e] - pc[s]
            empty = self.empty_flag(s, e)
            if self.reach_first:
                key: tuple[float, ...] = (empty, 1 if reach[d] < top[empty] * (1.0 - self.band) else 0, c, -reach[d], d)
            elif self.perf_first:
                m, sp = self.stats(s, e)
                key = (empty, -m, sp, c, d)
            elif self.first_fit:
                key = (empty, d)
            else:
                m, sp = self.stats(s, e)
                key = (empty, c, -m, sp, d)
            if best_key is None or key < best_key:
                best_key, best = key, d
        return best

    def take_all(self, level: int, d: int) -> None:
        s, e = self.rng(level, d)
        for i in range(s, e):
            self.take[i] += self.cap[i]

    def pick_child(self, level: int, kids: range, rem: int, used: set[int], u: list[int], unit: int = 1) -> tuple[int, bool]:
        """(child, False) when it takes the rest (best fit); (child, True) to take it whole: the
        largest, the fastest for perf first; (-1, True) if none. Least free first: the smallest
        child, whole unless it covers the rest."""
        def units(k: int) -> int:
            s, e = self.rng(level, k)
            return u[e] - u[s]

        if self.least_free:
            small = [(units(k), k) for k in kids if k not in used and units(k) > 0]
            if not small:
                return -1, True
            c, k = min(small)
            return k, c < rem
        j = self.best_fit(level, kids, rem, used, u, unit)
        if j >= 0:
            return j, False

        if self.perf_first:
            ranked = [(self.stats(*self.rng(level, k))[0], units(k), -k) for k in kids if k not in used and units(k) > 0]
            return (-max(ranked)[2], True) if ranked else (-1, True)
        big = max(((units(k), -k) for k in kids if k not in used), default=(0, 0))
        return (-big[1], True) if big[0] > 0 else (-1, True)

    def descend(self, level: int, d: int, need: int) -> bool:
        """``need`` pods into domain ``d`` (level -1: the whole flavor), level by level to one node."""
        last = len(self.node_dom) - 1
        while level < last:
            s, e = self.rng_or_all(level, d)
            kids = range(self.node_dom[level + 1][s], self.node_dom[level + 1][e - 1] + 1)
            used: set[int] = set()
            rem = need
            while True:
                j, whole = self.pick_child(level + 1, kids, rem, used, self.pc)
                if j < 0:
                    return False
                if not whole:
                    d, need, level = j, rem, level + 1
                    break
                used.add(j)
                self.take_all(level + 1, j)
                rem -= self.capacity(level + 1, j)
        self.take[d] += need
        return True

    def layer_prefix(self, slice_levels: list[int], slice_sizes: list[int]) -> list[list[int]]:
        """Per layer, prefix sums of the units each domain of its level holds (see ``_kernels``)."""
        n = len(self.cap)
        upc: list[list[int]] = [[] for _ in slice_levels]
        for layer in range(len(slice_levels) - 1, -1, -1):
            lv, k = slice_levels[layer], slice_sizes[layer]
            unit = [0] * n
            for j in range(self.count(lv)):
                s, e = self.rng(lv, j)
                if layer == len(slice_levels) - 1:
                    pods = self.pc[e] - self.pc[s]
                else:
                    pods = (upc[layer + 1][e] - upc[layer + 1][s]) * slice_sizes[layer + 1]
                unit[s] = pods // k
            acc = [0] * (n + 1)
            for i in range(n):
                acc[i + 1] = acc[i] + unit[i]
            upc[layer] = acc
        return upc

    def descend_layers(self, level: int, d: int, need: int, layers: tuple[list[int], list[int], list[list[int]]]) -> bool:
        """``need`` outermost-layer slices into domain ``d``; each slice layer hands its units to
        the next at its own level, the innermost to ``descend`` in pods."""
        slice_levels, slice_sizes, upc = layers
        work = [(level, d, need, 0)]
        while work:
            level, d, need, layer = work.pop()
            if need <= 0:
                continue
            if layer == len(slice_levels):
                if not self.descend(level, d, need):
                    return False
                continue
            if level == slice_levels[layer]:
                inner = slice_sizes[layer + 1] if layer + 1 < len(slice_levels) else 1
                work.append((level, d, need * slice_sizes[layer] // inner, layer + 1))
                continue
            u = upc[layer]
            s, e = self.rng_or_all(level, d)
            kids = range(self.node_dom[level + 1][s], self.node_dom[level + 1][e - 1] + 1)
            used: set[int] = set()
            rem = need
            while rem > 0:
                j, whole = self.pick_child(level + 1, kids, rem, used, u, slice_sizes[layer])
                if j < 0:
                    return False
                got = rem
                if whole:
                    used.add(j)
                    cs, ce = self.rng(level + 1, j)
                    got = u[ce] - u[cs]
                work.append((level + 1, j, got, layer))
                rem -= got
        return True


_Layers = tuple[list[int], list[int], list[list[int]]]


def _fill(v: _View, level: int, d: int, need: int, layers: _Layers) -> bool:
    if not layers[0]:
        return v.descend(level, d, need)
    return v.descend_layers(level, d, need, layers)


def _fill_whole(v: _View, level: int, d: int, layers: _Layers) -> None:
    if not layers[0]:
        v.take_all(level, d)
        return
    s, e = v.rng(level, d)
    v.descend_layers(level, d, layers[2][0][e] - layers[2][0][s], layers)


def _balanced_plan(caps: list[int], units: int, t0: int) -> tuple[int, int, list[tuple[int, int]]]:
    """(t, leftover, [(island, amount)]) for the fewest islands t ≥ t0 sharing ``units`` evenly
    (``units % t`` of them one more), smallest islands first; t = -1 if none."""
    order = sorted(range(len(caps)), key=lambda i: (caps[i], i))
    for t in range(max(t0, 1), min(len(caps), units) + 1):
        low, extra = divmod(units, t)
        ups = [i for i in order if caps[i] >= low + 1][:extra]
        if len(ups) < extra:
            continue
        downs = [i for i in order if i not in ups and caps[i] >= low][: t - extra]
        if len(downs) < t - extra:
            continue
        picks = [(i, low + 1) for i in ups] + [(i, low) for i in downs]
        return t, sum(caps[i] - a for i, a in picks), picks
    return -1, 0, []


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
                 spread_level: int, spread_max: int, protect: int, take: Any, cap: Any, slice_levels: Any = (),
                 slice_sizes: Any = ()) -> tuple[int, int, int]:
    v = _View(free, alloc, req, eligible, perf, perf_floor, bounds, bptr, node_dom, lo, hi, protect)
    result = _place(v, pods, mode, target, span, spread_level, spread_max, [int(x) for x in slice_levels],
                    [int(x) for x in slice_sizes])
    take[:] = v.take
    cap[:] = v.cap
    return result


def _place(v: _View, pods: int, mode: int, target: int, span: int, spread_level: int, spread_max: int,
           slice_levels: list[int], slice_sizes: list[int]) -> tuple[int, int, int]:
    if v.pc[-1] < pods:
        return 0, target, -1
    if mode == MODE_SPREAD:
        return _spread(v, pods, target, spread_level, spread_max)
    layers: _Layers = (slice_levels, slice_sizes, v.layer_prefix(slice_levels, slice_sizes) if slice_levels else [])
    u, units = v.pc, pods
    if slice_levels:
        u, units = layers[2][0], pods // slice_sizes[0]
        if u[-1] < units:
            return 0, target, -1
    if mode == MODE_UNCONSTRAINED:
        return (1, -1, 0) if _fill(v, -1, 0, units, layers) else (0, target, -1)
    d = v.best_fit(target, range(v.count(target)), units, set(), u, pods // units)
    if d >= 0:
        _fill(v, target, d, units, layers)
        return 1, target, d
    if mode == MODE_REQUIRED:
        return 0, target, -1
    n = len(v.cap)

    def island_caps(s: int, e: int) -> tuple[int, list[int]]:
        i0 = v.node_dom[target][s]
        caps = []
        for i in range(i0, v.node_dom[target][e - 1] + 1):
            cs, ce = v.rng(target, i)
            caps.append(u[ce] - u[cs])
        return i0, caps

    for k in range(target - 1, span - 1, -1):
        best_key: tuple[int, int, int, int, float, float, int] | None = None
        for dd in range(v.count(k) if k >= 0 else 1):
            s, e = v.rng(k, dd) if k >= 0 else (0, n)
            if u[e] - u[s] < units:
                continue
            _, caps = island_caps(s, e)
            cnt, left, _, _ = _span_plan(caps, units)
            if cnt < 0:
                continue
            bal = 0
            if v.balanced:
                t, tleft, _ = _balanced_plan(caps, units, cnt)
                if t > 0:
                    bal, cnt, left = 1, t, tleft
            m, sp = v.stats(s, e)
            key = (-bal, cnt, v.empty_flag(s, e), left, -m, sp, dd)
            if best_key is None or key < best_key:
                best_key = key
        if best_key is not None:
            dd = best_key[6]
            s, e = v.rng(k, dd) if k >= 0 else (0, n)
            i0, caps = island_caps(s, e)
            cnt, _, whole, last = _span_plan(caps, units)
            if best_key[0] == -1:
                for i, amount in _balanced_plan(caps, units, cnt)[2]:
                    _fill(v, target, i + i0, amount, layers)
                return 1, k, dd
            rem = units
            for i in whole:
                _fill_whole(v, target, i + i0, layers)
                rem -= caps[i]
            _fill(v, target, last + i0, rem, layers)
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

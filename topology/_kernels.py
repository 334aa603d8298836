"""Jitted placement kernels: fixed-dtype arrays and scalars in, arrays out.

Only ``topology._finder`` calls these; ``topology._reference`` is their pure-Python twin with
the same signatures and the same results, compared on random snapshots in the tests.

Array contract (see ``Snapshot``): nodes sorted by topology path; ``bounds[bptr[l] + d]`` is the
first node of domain ``d`` at level ``l`` (the level's slice ends with the node count);
``node_dom[l, n]`` is node ``n``'s domain at level ``l``; the last level is the node level.

Candidate order for one domain ("best fit"): domains that are not empty before empty ones when
``protect_empty`` is set, then smaller pod-fit capacity, then higher minimum perf, then smaller
perf spread, then lower index (topology path order). For a span: fewer islands, then not
empty, then less left over, then perf, then index. Same inputs → same outputs.

``protect`` is a bit set: 1 = protect empty domains, 2 = first fit (one-domain choices take
the first fitting domain in path order instead of the best fit), 4 = perf first (uniform-perf
gangs: one-domain choices rank higher min perf and smaller spread before capacity, and a
split takes the fastest children whole, so the slowest nodes are the ones left out).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["MODE_PREFERRED", "MODE_REQUIRED", "MODE_SPREAD", "node_capacity", "place_podset"]

MODE_REQUIRED = 0
MODE_PREFERRED = 1
MODE_SPREAD = 2

_BIG = np.int64(1) << np.int64(50)


@njit(cache=True)
def node_capacity(free, req, eligible, perf, perf_floor, lo, hi, cap):  # type: ignore[no-untyped-def]
    """Pods of size ``req`` that fit on each node (0 outside ``[lo, hi)``, unhealthy or slow)."""
    n_nodes = free.shape[0]
    n_res = free.shape[1]
    for n in range(n_nodes):
        c = np.int64(0)
        if n >= lo and n < hi and eligible[n] != 0 and perf[n] >= perf_floor:
            c = _BIG
            for r in range(n_res):
                q = req[r]
                if q > 0:
                    v = free[n, r] // q
                    if v < c:
                        c = v
                        if c <= 0:
                            break  # full for this pod (the GPU column comes first): skip the other divisions
            if c < 0:
                c = np.int64(0)
        cap[n] = c


@njit(cache=True)
def _prefix(cap, free, alloc, pc, pu):  # type: ignore[no-untyped-def]
    """Prefix sums of pod capacity and of untouched nodes (no GPU and no pod slot in use)."""
    pc[0] = 0
    pu[0] = 0
    for n in range(cap.shape[0]):
        pc[n + 1] = pc[n] + cap[n]
        untouched = 1 if (free[n, 0] == alloc[n, 0] and free[n, 3] == alloc[n, 3]) else 0
        pu[n + 1] = pu[n] + untouched


@njit(cache=True)
def _perf_stats(perf, cap, s, e):  # type: ignore[no-untyped-def]
    """Minimum perf and perf spread over the nodes of [s, e) that can host a pod."""
    mn = 1e300
    mx = -1e300
    for n in range(s, e):
        if cap[n] > 0:
            p = perf[n]
            if p < mn:
                mn = p
            if p > mx:
                mx = p
    if mn > mx:
        return 0.0, 0.0
    return mn, mx - mn


@njit(cache=True)
def _best_fit(level, d0, d1, need, bounds, bptr, pc, pu, perf, cap, protect, skip):  # type: ignore[no-untyped-def]
    """The best-fit domain among [d0, d1) at ``level`` whose capacity covers ``need``; -1 if none."""
    base = bptr[level]
    best = -1
    be = 0
    bc = np.int64(0)
    bm = 0.0
    bs = 0.0
    for d in range(d0, d1):
        if skip[d - d0] != 0:
            continue
        s = bounds[base + d]
        e = bounds[base + d + 1]
        c = pc[e] - pc[s]
        if c < need:
            continue
        em = 1 if ((protect & 1) != 0 and pu[e] - pu[s] == e - s) else 0
        if (protect & 4) != 0:  # perf first: highest min perf, smallest spread, then best fit
            m, sp = _perf_stats(perf, cap, s, e)
            if best >= 0:
                if em > be:
                    continue
                if em == be:
                    if m < bm or (m == bm and (sp > bs or (sp == bs and c >= bc))):
                        continue
            best = d
            be = em
            bc = c
            bm = m
            bs = sp
            continue
        if (protect & 2) != 0:  # first fit: path order, empty domains still last if protected
            if best < 0 or em < be:
                best = d
                be = em
            continue
        if best >= 0:
            if em > be or (em == be and c > bc):
                continue
        m, sp = _perf_stats(perf, cap, s, e)
        if best >= 0 and em == be and c == bc:
            if m < bm or (m == bm and sp >= bs):
                continue
        best = d
        be = em
        bc = c
        bm = m
        bs = sp
    return best


@njit(cache=True)
def _take_all(bounds, base, d, cap, take):  # type: ignore[no-untyped-def]
    for n in range(bounds[base + d], bounds[base + d + 1]):
        take[n] += cap[n]


@njit(cache=True)
def _descend(level, d, need, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take):  # type: ignore[no-untyped-def]
    """Place ``need`` pods inside domain ``d``: best-fit child if one covers the rest, else the
    largest child whole, repeated; only the last child is split, level by level, to one node."""
    last = node_dom.shape[0] - 1
    while level < last:
        base = bptr[level]
        s = bounds[base + d]
        e = bounds[base + d + 1]
        c0 = node_dom[level + 1, s]
        c1 = node_dom[level + 1, e - 1] + 1
        cbase = bptr[level + 1]
        used = np.zeros(c1 - c0, dtype=np.uint8)
        rem = need
        while True:
            j = _best_fit(level + 1, c0, c1, rem, bounds, bptr, pc, pu, perf, cap, protect, used)
            if j >= 0:
                d = j
                need = rem
                level += 1
                break
            big = -1
            bigc = np.int64(0)
            bigm = 0.0
            for k in range(c0, c1):
                if used[k - c0] != 0:
                    continue
                ck = pc[bounds[cbase + k + 1]] - pc[bounds[cbase + k]]
                if (protect & 4) != 0:
                    if ck <= 0:
                        continue
                    mk, _sk = _perf_stats(perf, cap, bounds[cbase + k], bounds[cbase + k + 1])
                    if big < 0 or mk > bigm or (mk == bigm and ck > bigc):
                        big = k
                        bigc = ck
                        bigm = mk
                elif ck > bigc:
                    big = k
                    bigc = ck
            if big < 0:
                return False
            used[big - c0] = 1
            _take_all(bounds, cbase, big, cap, take)
            rem -= bigc
    take[d] += need
    return True


@njit(cache=True)
def _span_plan(caps, pods):  # type: ignore[no-untyped-def]
    """Fewest islands covering ``pods``: largest first until one unused island covers the rest,
    which is then the smallest such (best fit). Returns (count, leftover, order, n_whole, last)."""
    order = np.argsort(-caps, kind="mergesort")
    rem = pods
    j = 0
    n = caps.shape[0]
    while j < n:
        top = caps[order[j]]
        if top <= 0:
            break
        if top >= rem:
            # smallest value >= rem among order[j:], first index among equals
            lo = j
            hi = n - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if caps[order[mid]] >= rem:
                    lo = mid
                else:
                    hi = mid - 1
            v = caps[order[lo]]
            p = lo
            while p > j and caps[order[p - 1]] == v:
                p -= 1
            return j + 1, v - rem, order, j, order[p]
        rem -= top
        j += 1
    return -1, np.int64(0), order, 0, -1


@njit(cache=True)
def place_podset(  # type: ignore[no-untyped-def]
    free, alloc, req, eligible, perf, perf_floor, bounds, bptr, node_dom, lo, hi, pods,
    mode, target, span, spread_level, spread_max, protect, take, cap,
):
    """Place one PodSet. Fills ``take`` (pods per node) and ``cap`` (pod-fit per node).

    Returns ``(placed, level, domain)``: the domain that holds the placement (for a span, the
    lowest common parent). Level -1 is the whole flavor: a span with ``span == -1`` may cross
    the top level, and a spread with ``target == -1`` covers every domain.
    """
    n_nodes = free.shape[0]
    n_levels = node_dom.shape[0]
    for n in range(n_nodes):
        take[n] = 0
    node_capacity(free, req, eligible, perf, perf_floor, lo, hi, cap)
    pc = np.empty(n_nodes + 1, dtype=np.int64)
    pu = np.empty(n_nodes + 1, dtype=np.int64)
    _prefix(cap, free, alloc, pc, pu)
    if pc[n_nodes] < pods:
        return 0, target, -1

    if mode == MODE_SPREAD:
        return _place_spread(pods, target, spread_level, spread_max, bounds, bptr, node_dom, pc, pu,
                             perf, cap, protect, take, n_nodes)

    nd = bptr[target + 1] - bptr[target] - 1
    skip = np.zeros(nd, dtype=np.uint8)
    d = _best_fit(target, 0, nd, pods, bounds, bptr, pc, pu, perf, cap, protect, skip)
    if d >= 0:
        _descend(target, d, pods, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take)
        return 1, target, d
    if mode == MODE_REQUIRED:
        return 0, target, -1

    tbase = bptr[target]
    for k in range(target - 1, span - 1, -1):
        kbase = bptr[k] if k >= 0 else 0
        nk = bptr[k + 1] - kbase - 1 if k >= 0 else 1
        best = -1
        bcnt = 0
        bem = 0
        bleft = np.int64(0)
        bm = 0.0
        bs = 0.0
        for dd in range(nk):
            s = bounds[kbase + dd] if k >= 0 else 0
            e = bounds[kbase + dd + 1] if k >= 0 else n_nodes
            if pc[e] - pc[s] < pods:
                continue
            i0 = node_dom[target, s]
            i1 = node_dom[target, e - 1] + 1
            caps = np.empty(i1 - i0, dtype=np.int64)
            for i in range(i0, i1):
                caps[i - i0] = pc[bounds[tbase + i + 1]] - pc[bounds[tbase + i]]
            cnt, left, _order, _nw, _last = _span_plan(caps, pods)
            if cnt < 0:
                continue
            em = 1 if ((protect & 1) != 0 and pu[e] - pu[s] == e - s) else 0
            if best >= 0 and (cnt > bcnt or (cnt == bcnt and (em > bem or (em == bem and left > bleft)))):
                continue
            m, sp = _perf_stats(perf, cap, s, e)
            if best >= 0 and cnt == bcnt and em == bem and left == bleft:
                if m < bm or (m == bm and sp >= bs):
                    continue
            best = dd
            bem = em
            bcnt = cnt
            bleft = left
            bm = m
            bs = sp
        if best >= 0:
            s = bounds[kbase + best] if k >= 0 else 0
            e = bounds[kbase + best + 1] if k >= 0 else n_nodes
            i0 = node_dom[target, s]
            i1 = node_dom[target, e - 1] + 1
            caps = np.empty(i1 - i0, dtype=np.int64)
            for i in range(i0, i1):
                caps[i - i0] = pc[bounds[tbase + i + 1]] - pc[bounds[tbase + i]]
            cnt, left, order, n_whole, last = _span_plan(caps, pods)
            rem = pods
            for j in range(n_whole):
                isl = order[j] + i0
                _take_all(bounds, tbase, isl, cap, take)
                rem -= caps[order[j]]
            _descend(target, last + i0, rem, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take)
            return 1, k, best
    return 0, target, -1


@njit(cache=True)
def _place_spread(pods, scope, level, max_per, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take, n_nodes):  # type: ignore[no-untyped-def]
    """At most ``max_per`` pods per domain of ``level``, inside the best-fit domain of ``scope``
    (-1: the whole flavor). Fullest spread domains first, so empty ones stay whole."""
    lbase = bptr[level]
    nl = bptr[level + 1] - lbase - 1
    qcap = np.empty(nl, dtype=np.int64)
    for j in range(nl):
        c = pc[bounds[lbase + j + 1]] - pc[bounds[lbase + j]]
        qcap[j] = c if c < max_per else max_per
    # best-fit scope domain by spread capacity
    if scope < 0:
        best = 0
        s0 = 0
        e0 = n_nodes
    else:
        sbase = bptr[scope]
        ns = bptr[scope + 1] - sbase - 1
        best = -1
        be = 0
        bc = np.int64(0)
        bm = 0.0
        bsp = 0.0
        for d in range(ns):
            s = bounds[sbase + d]
            e = bounds[sbase + d + 1]
            q = np.int64(0)
            for j in range(node_dom[level, s], node_dom[level, e - 1] + 1):
                q += qcap[j]
            if q < pods:
                continue
            em = 1 if ((protect & 1) != 0 and pu[e] - pu[s] == e - s) else 0
            m, sp = _perf_stats(perf, cap, s, e)
            if best >= 0:
                if em > be or (em == be and (q > bc or (q == bc and (m < bm or (m == bm and sp >= bsp))))):
                    continue
            best = d
            be = em
            bc = q
            bm = m
            bsp = sp
        if best < 0:
            return 0, scope, -1
        s0 = bounds[sbase + best]
        e0 = bounds[sbase + best + 1]
    j0 = node_dom[level, s0]
    j1 = node_dom[level, e0 - 1] + 1
    full = np.empty(j1 - j0, dtype=np.int64)
    for j in range(j0, j1):
        full[j - j0] = pc[bounds[lbase + j + 1]] - pc[bounds[lbase + j]]
    order = np.argsort(full, kind="mergesort")
    total = np.int64(0)
    for j in range(j0, j1):
        total += qcap[j]
    if total < pods:
        return 0, scope, -1
    rem = pods
    for t in range(order.shape[0]):
        j = order[t] + j0
        q = qcap[j]
        if q <= 0:
            continue
        if q > rem:
            q = rem
        _descend(level, j, q, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take)
        rem -= q
        if rem == 0:
            break
    return 1, scope, best

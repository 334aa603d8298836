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

Perf first (uniform-perf gangs) ranks a domain by the minimum perf of all its usable nodes, then
smaller perf spread, then best fit. With ``PERF_REACH`` (32, a class's ``perfRank: reach``) it
ranks a domain by its reach instead: the best minimum perf the gang can get inside it (its
fastest nodes that hold the gang, ``_reach_perf``). Reaches within the perf band of the best
count as equal, and the best fit among them wins (smaller capacity, then higher reach, then
index): continuous perf values never tie, so without the band fit would never be looked at.

``protect`` is a bit set: 1 = protect empty domains, 2 = first fit (one-domain choices take
the first fitting domain in path order instead of the best fit), 4 = perf first (uniform-perf
gangs: one-domain choices rank higher min perf and smaller spread before capacity, and a
split takes the fastest children whole, so the slowest nodes are the ones left out), 8 =
balanced (a span gives every island the same share, ±1 unit), 16 = least free first (every
level is filled from its least free child up, the last one partly: unconstrained placement),
32 = rank perf first by reach (``PERF_REACH``). Bits 16 and up (``protect >> PERF_BAND_SHIFT``) hold the perf band in thousandths: a reach at
least ``best × (1 − band)`` is as good as the best.

Slices: ``slice_levels``/``slice_sizes`` (outermost layer first, up to 3 layers) cut the PodSet
into units of ``slice_sizes[0]`` pods, each unit inside one domain of ``slice_levels[0]``; an
inner layer splits each unit into sub-units of its size inside one domain of its (lower) level.
Above a slice level, domains are counted and chosen in slice units: a domain of the slice level
holds ``floor(pods it fits, after the inner layers' rounding / size)`` slices, summed above it.

Why this module is longer than the others: numba compiles a module's kernels into one cache
entry each and inlines the small helpers they share; the kernels, their helpers and the array
contract above are kept in one file so that the contract, the twin in ``_reference`` and the
cache stay in step.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["MODE_PREFERRED", "MODE_REQUIRED", "MODE_SPREAD", "MODE_UNCONSTRAINED", "PERF_BAND_SHIFT", "PERF_REACH", "capacity_summary", "node_capacity",
           "place_podset"]

MODE_REQUIRED = 0
MODE_PREFERRED = 1
MODE_SPREAD = 2
MODE_UNCONSTRAINED = 3
PERF_REACH = 32
"""With perf first (4): rank by reach inside the perf band, not by the domain's minimum."""
PERF_BAND_SHIFT = 16
"""``protect >> PERF_BAND_SHIFT`` is the perf band in thousandths (see the module's docstring)."""

_BIG = np.int64(1) << np.int64(50)
_PICK_MAX = 16  # a spread of at most this many pods picks its domains one by one instead of sorting them


@njit(cache=True)
def node_capacity(free, req, eligible, perf, perf_floor, lo, hi, cap):  # type: ignore[no-untyped-def]
    """Pods of size ``req`` that fit on each node (0 outside ``[lo, hi)``, unhealthy or slow).

    The plain statement of the rule; ``place_podset`` computes the same numbers in its fused
    node pass (``_capacity_prefix``), which the tests hold to this."""
    n_nodes = free.shape[0]
    n_res = free.shape[1]
    for n in range(n_nodes):
        c = np.int64(0)
        if n >= lo and n < hi and eligible[n] != 0 and perf[n] >= perf_floor:
            c = _BIG
            for r in range(n_res):
                q = req[r]
                if q > 0:
                    f = free[n, r]
                    if f < q:  # no room for one pod (most nodes of a busy fabric): skip the divisions
                        c = np.int64(0)
                        break
                    v = f // q
                    if v < c:
                        c = v
            if c < 0:
                c = np.int64(0)
        cap[n] = c


_SMALL = np.int64(1) << np.int64(31)


@njit(cache=True)
def _shift(q):  # type: ignore[no-untyped-def]
    """log2(q) when ``q`` is a power of two, so a shift divides by it exactly; else -1."""
    if q <= 0 or (q & (q - 1)) != 0:
        return np.int64(-1)
    s = np.int64(0)
    while (np.int64(1) << s) < q:
        s += 1
    return s


@njit(cache=True)
def _fit(c, f, q, s):  # type: ignore[no-untyped-def]
    """min(c, f // q) for a resource the pod needs (q > 0), 0 once one has no room; ``s`` is
    ``_shift(q)``. A division costs more than the rest of a node's check, so it is skipped when
    a shift does it, or when the bound so far already fits (f >= c * q; both factors below
    2**31, so the product cannot overflow)."""
    if q <= 0 or c == 0:
        return c
    if f < q:
        return np.int64(0)
    if s >= 0:
        v = f >> s
    elif c < _SMALL and q < _SMALL and f >= c * q:
        return c
    else:
        v = f // q
    return v if v < c else c


@njit(cache=True)
def _capacity_prefix(free, alloc, req, eligible, perf, perf_floor, lo, hi, protect, take, cap, pc, pu):  # type: ignore[no-untyped-def]
    """One pass over the nodes for what the search reads: ``take`` zeroed, ``cap`` equal to
    ``node_capacity``'s, its prefix sums ``pc`` and, only when empty domains are protected
    (``protect & 1``, the one case that reads it), ``pu``: prefix sums of untouched nodes (no
    GPU and no pod slot in use). Columns: gpu, cpu, memory, pods."""
    n_nodes = free.shape[0]
    q0, q1, q2, q3 = req[0], req[1], req[2], req[3]
    s0, s1, s2, s3 = _shift(q0), _shift(q1), _shift(q2), _shift(q3)
    take[:] = 0
    pc[0] = 0
    acc = np.int64(0)
    for n in range(n_nodes):
        # the GPU column first: on a busy fabric most nodes have no room for one pod's GPUs
        c = _fit(_BIG, free[n, 0], q0, s0)
        if c != 0 and n >= lo and n < hi and eligible[n] != 0 and perf[n] >= perf_floor:
            c = _fit(_fit(_fit(c, free[n, 1], q1, s1), free[n, 2], q2, s2), free[n, 3], q3, s3)
        else:
            c = 0
        cap[n] = c
        acc += c
        pc[n + 1] = acc
    pu[0] = 0
    if (protect & 1) != 0:
        untouched = np.int64(0)
        for n in range(n_nodes):
            if free[n, 0] == alloc[n, 0] and free[n, 3] == alloc[n, 3]:
                untouched += 1
            pu[n + 1] = untouched


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
def _reach_perf(perf, cap, s, e, need):  # type: ignore[no-untyped-def]
    """The best minimum perf ``need`` pods can get on the nodes of [s, e): the slowest of the
    fastest nodes that hold them (fastest first, ties by index); the minimum of all usable
    nodes when they are all needed."""
    n = 0
    total = np.int64(0)
    mn = 1e300
    for i in range(s, e):
        if cap[i] > 0:
            n += 1
            total += cap[i]
            if perf[i] < mn:
                mn = perf[i]
    if n == 0:
        return 0.0
    if total <= need:
        return mn
    vals = np.empty(n, dtype=np.float64)
    caps = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(s, e):
        if cap[i] > 0:
            vals[k] = perf[i]
            caps[k] = cap[i]
            k += 1
    order = np.argsort(-vals, kind="mergesort")
    acc = np.int64(0)
    for t in range(n):
        j = order[t]
        acc += caps[j]
        if acc >= need:
            return vals[j]
    return mn


@njit(cache=True)
def _best_fit_perf(level, d0, d1, need, bounds, bptr, pc, pu, perf, cap, protect, skip, unit):  # type: ignore[no-untyped-def]
    """Perf first: among the domains of [d0, d1) whose capacity covers ``need`` (units of
    ``unit`` pods), not empty before empty (when protected), then reach inside the band of the
    best reach of that kind, then smaller capacity, then higher reach, then index; -1 if none."""
    base = bptr[level]
    band = (protect >> PERF_BAND_SHIFT) / 1000.0
    reach = np.full(d1 - d0, -1.0)
    top = np.full(2, -1.0)
    for d in range(d0, d1):
        if skip[d - d0] != 0:
            continue
        s = bounds[base + d]
        e = bounds[base + d + 1]
        if pc[e] - pc[s] < need:
            continue
        g = _reach_perf(perf, cap, s, e, need * unit)
        reach[d - d0] = g
        em = 1 if ((protect & 1) != 0 and pu[e] - pu[s] == e - s) else 0
        if g > top[em]:
            top[em] = g
    best = -1
    be = 0
    bo = 0
    bc = np.int64(0)
    bg = 0.0
    for d in range(d0, d1):
        g = reach[d - d0]
        if g < 0.0:
            continue
        s = bounds[base + d]
        e = bounds[base + d + 1]
        c = pc[e] - pc[s]
        em = 1 if ((protect & 1) != 0 and pu[e] - pu[s] == e - s) else 0
        out = 1 if g < top[em] * (1.0 - band) else 0
        if best >= 0 and (em > be or (em == be and (out > bo or (out == bo and (c > bc or (c == bc and g <= bg)))))):
            continue
        best = d
        be = em
        bo = out
        bc = c
        bg = g
    return best


@njit(cache=True)
def _best_fit(level, d0, d1, need, bounds, bptr, pc, pu, perf, cap, protect, skip, unit):  # type: ignore[no-untyped-def]
    """The best-fit domain among [d0, d1) at ``level`` whose capacity covers ``need`` (units of
    ``unit`` pods); -1 if none."""
    if (protect & 36) == 36:
        return _best_fit_perf(level, d0, d1, need, bounds, bptr, pc, pu, perf, cap, protect, skip, unit)
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
        if (protect & 4) != 0:  # perf first by the domain's minimum: highest min perf, smallest spread, then best fit
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
def _domain_span(level, d, bounds, bptr, n_nodes):  # type: ignore[no-untyped-def]
    """Node range [s, e) of domain ``d`` at ``level``; level -1 is the whole flavor."""
    if level < 0:
        return 0, n_nodes
    base = bptr[level]
    return bounds[base + d], bounds[base + d + 1]


@njit(cache=True)
def _children(level, d, bounds, bptr, node_dom, n_nodes):  # type: ignore[no-untyped-def]
    """Index range [c0, c1) of domain ``d``'s children one level down."""
    s, e = _domain_span(level, d, bounds, bptr, n_nodes)
    return node_dom[level + 1, s], node_dom[level + 1, e - 1] + 1


@njit(cache=True)
def _pick_child(level, c0, c1, rem, bounds, bptr, upc, pu, perf, cap, protect, used, unit):  # type: ignore[no-untyped-def]
    """Next child of [c0, c1) at ``level`` for ``rem`` units: ``(j, False)`` when child ``j``
    takes the rest (best fit), ``(j, True)`` when ``j`` is to be taken whole (the largest; the
    fastest for perf first), ``(-1, True)`` when none is left. Least free first takes the
    smallest child, whole unless it covers the rest."""
    cbase = bptr[level]
    if (protect & 16) != 0:  # least free first: the smallest child, whole unless it covers the rest
        small = -1
        smallc = np.int64(0)
        for k in range(c0, c1):
            ck = upc[bounds[cbase + k + 1]] - upc[bounds[cbase + k]]
            if used[k - c0] == 0 and ck > 0 and (small < 0 or ck < smallc):
                small = k
                smallc = ck
        return small, small < 0 or smallc < rem
    j = _best_fit(level, c0, c1, rem, bounds, bptr, upc, pu, perf, cap, protect, used, unit)
    if j >= 0:
        return j, False
    big = -1
    bigc = np.int64(0)
    bigm = 0.0
    for k in range(c0, c1):
        if used[k - c0] != 0:
            continue
        ck = upc[bounds[cbase + k + 1]] - upc[bounds[cbase + k]]
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
    return big, True


@njit(cache=True)
def _descend(level, d, need, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take):  # type: ignore[no-untyped-def]
    """Place ``need`` pods inside domain ``d`` (level -1: the whole flavor): best-fit child if one
    covers the rest, else a child whole (see ``_pick_child``), repeated; only the last child is
    split, level by level, to one node."""
    last = node_dom.shape[0] - 1
    n_nodes = cap.shape[0]
    while level < last:
        c0, c1 = _children(level, d, bounds, bptr, node_dom, n_nodes)
        cbase = bptr[level + 1]
        used = np.zeros(c1 - c0, dtype=np.uint8)
        rem = need
        while True:
            j, whole = _pick_child(level + 1, c0, c1, rem, bounds, bptr, pc, pu, perf, cap, protect, used, 1)
            if j < 0:
                return False
            if not whole:
                d = j
                need = rem
                level += 1
                break
            used[j - c0] = 1
            _take_all(bounds, cbase, j, cap, take)
            rem -= pc[bounds[cbase + j + 1]] - pc[bounds[cbase + j]]
    take[d] += need
    return True


@njit(cache=True)
def _layer_prefix(pc, bounds, bptr, slice_levels, slice_sizes):  # type: ignore[no-untyped-def]
    """Per slice layer, prefix sums over nodes of the units each domain of the layer's level
    holds (counted on the domain's first node), innermost layer first: a domain's units are
    floor(its pods / size), its pods rounded down to the next inner layer's units first."""
    n_layers = slice_levels.shape[0]
    n_nodes = pc.shape[0] - 1
    upc = np.zeros((n_layers, n_nodes + 1), dtype=np.int64)
    unit = np.zeros(n_nodes, dtype=np.int64)
    for layer in range(n_layers - 1, -1, -1):
        lv = slice_levels[layer]
        k = slice_sizes[layer]
        base = bptr[lv]
        for n in range(n_nodes):
            unit[n] = 0
        for j in range(bptr[lv + 1] - base - 1):
            s = bounds[base + j]
            e = bounds[base + j + 1]
            if layer == n_layers - 1:
                pods = pc[e] - pc[s]
            else:
                pods = (upc[layer + 1, e] - upc[layer + 1, s]) * slice_sizes[layer + 1]
            unit[s] = pods // k
        for n in range(n_nodes):
            upc[layer, n + 1] = upc[layer, n] + unit[n]
    return upc


@njit(cache=True)
def _descend_layers(level, d, need, layer, slice_levels, slice_sizes, upc, bounds, bptr, node_dom, pc, pu, perf, cap,  # type: ignore[no-untyped-def]
                    protect, take):
    """Place ``need`` units of slice layer ``layer`` inside domain ``d`` at ``level`` (at or
    above the layer's level): children are chosen in units as ``_descend`` does in pods; at the
    layer's level the units become the next layer's (or pods, past the innermost layer)."""
    n_layers = slice_levels.shape[0]
    n_nodes = cap.shape[0]
    size = 4 * (bounds.shape[0] + n_layers + 2)
    st_level = np.empty(size, dtype=np.int64)
    st_dom = np.empty(size, dtype=np.int64)
    st_need = np.empty(size, dtype=np.int64)
    st_layer = np.empty(size, dtype=np.int64)
    st_level[0] = level
    st_dom[0] = d
    st_need[0] = need
    st_layer[0] = layer
    sp = 1
    while sp > 0:
        sp -= 1
        level = st_level[sp]
        d = st_dom[sp]
        need = st_need[sp]
        layer = st_layer[sp]
        if need <= 0:
            continue
        if layer == n_layers:
            if not _descend(level, d, need, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take):
                return False
            continue
        if level == slice_levels[layer]:
            inner = slice_sizes[layer + 1] if layer + 1 < n_layers else 1
            st_level[sp] = level
            st_dom[sp] = d
            st_need[sp] = need * slice_sizes[layer] // inner
            st_layer[sp] = layer + 1
            sp += 1
            continue
        u = upc[layer]
        c0, c1 = _children(level, d, bounds, bptr, node_dom, n_nodes)
        cbase = bptr[level + 1]
        used = np.zeros(c1 - c0, dtype=np.uint8)
        rem = need
        while rem > 0:
            j, whole = _pick_child(level + 1, c0, c1, rem, bounds, bptr, u, pu, perf, cap, protect, used, slice_sizes[layer])
            if j < 0:
                return False
            got = rem
            if whole:
                used[j - c0] = 1
                got = u[bounds[cbase + j + 1]] - u[bounds[cbase + j]]
            st_level[sp] = level + 1
            st_dom[sp] = j
            st_need[sp] = got
            st_layer[sp] = layer
            sp += 1
            rem -= got
    return True


@njit(cache=True)
def _fill(level, d, need, slice_levels, slice_sizes, upc, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take):  # type: ignore[no-untyped-def]
    """``need`` units into domain ``d``: pods without slices, else outermost-layer slices."""
    if slice_levels.shape[0] == 0:
        return _descend(level, d, need, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take)
    return _descend_layers(level, d, need, 0, slice_levels, slice_sizes, upc, bounds, bptr, node_dom, pc, pu, perf, cap,
                           protect, take)


@njit(cache=True)
def _fill_whole(level, d, slice_levels, slice_sizes, upc, u, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take):  # type: ignore[no-untyped-def]
    """Every unit domain ``d`` holds: its whole pod capacity without slices."""
    if slice_levels.shape[0] == 0:
        _take_all(bounds, bptr[level], d, cap, take)
        return True
    s = bounds[bptr[level] + d]
    e = bounds[bptr[level] + d + 1]
    return _descend_layers(level, d, u[e] - u[s], 0, slice_levels, slice_sizes, upc, bounds, bptr, node_dom, pc, pu, perf,
                           cap, protect, take)


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
def _balanced_plan(caps, units, t0):  # type: ignore[no-untyped-def]
    """Fewest islands ``t ≥ t0`` that share ``units`` evenly: ``units % t`` of them take one
    unit more than the others; islands are picked smallest capacity first (best fit), ties by
    index. Returns ``(t, leftover, picks, amounts)``, or ``t = -1`` when no even share fits."""
    n = caps.shape[0]
    order = np.argsort(caps, kind="mergesort")
    picks = np.empty(n, dtype=np.int64)
    amounts = np.empty(n, dtype=np.int64)
    taken = np.zeros(n, dtype=np.uint8)
    t = t0 if t0 > 1 else 1
    while t <= n and t <= units:
        low = units // t
        extra = units - low * t
        for i in range(n):
            taken[i] = 0
        m = 0
        left = np.int64(0)
        for q in range(n):  # the islands that take one unit more: the smallest that can
            if m == extra:
                break
            i = order[q]
            if caps[i] >= low + 1:
                taken[i] = 1
                picks[m] = i
                amounts[m] = low + 1
                left += caps[i] - low - 1
                m += 1
        if m == extra:
            for q in range(n):
                if m == t:
                    break
                i = order[q]
                if taken[i] == 0 and caps[i] >= low:
                    taken[i] = 1
                    picks[m] = i
                    amounts[m] = low
                    left += caps[i] - low
                    m += 1
            if m == t:
                return t, left, picks[:t].copy(), amounts[:t].copy()
        t += 1
    return -1, np.int64(0), picks[:0].copy(), amounts[:0].copy()


@njit(cache=True)
def _island_caps(u, bounds, tbase, i0, i1):  # type: ignore[no-untyped-def]
    caps = np.empty(i1 - i0, dtype=np.int64)
    for i in range(i0, i1):
        caps[i - i0] = u[bounds[tbase + i + 1]] - u[bounds[tbase + i]]
    return caps


@njit(cache=True)
def place_podset(  # type: ignore[no-untyped-def]
    free, alloc, req, eligible, perf, perf_floor, bounds, bptr, node_dom, lo, hi, pods,
    mode, target, span, spread_level, spread_max, protect, take, cap, slice_levels, slice_sizes,
):
    """Place one PodSet. Fills ``take`` (pods per node) and ``cap`` (pod-fit per node).

    Returns ``(placed, level, domain)``: the domain that holds the placement (for a span, the
    lowest common parent). Level -1 is the whole flavor: a span with ``span == -1`` may cross
    the top level, a spread with ``target == -1`` covers every domain, and unconstrained
    placement starts there. With slices (``slice_levels`` not empty) ``pods`` is a multiple of
    ``slice_sizes[0]`` and ``target`` is at or above ``slice_levels[0]``.
    """
    n_nodes = free.shape[0]
    pc = np.empty(n_nodes + 1, dtype=np.int64)
    pu = np.empty(n_nodes + 1, dtype=np.int64)  # filled only when protect & 1: its readers check that bit first
    _capacity_prefix(free, alloc, req, eligible, perf, perf_floor, lo, hi, protect, take, cap, pc, pu)
    if pc[n_nodes] < pods:
        return 0, target, -1

    if mode == MODE_SPREAD:
        return _place_spread(pods, target, spread_level, spread_max, bounds, bptr, node_dom, pc, pu,
                             perf, cap, protect, take, n_nodes)

    units = pods
    u = pc
    upc = np.zeros((0, 1), dtype=np.int64)
    if slice_levels.shape[0] > 0:
        upc = _layer_prefix(pc, bounds, bptr, slice_levels, slice_sizes)
        u = upc[0]
        units = pods // slice_sizes[0]
        if u[n_nodes] < units:
            return 0, target, -1

    if mode == MODE_UNCONSTRAINED:
        if _fill(-1, 0, units, slice_levels, slice_sizes, upc, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take):
            return 1, -1, 0
        return 0, target, -1

    nd = bptr[target + 1] - bptr[target] - 1
    skip = np.zeros(nd, dtype=np.uint8)
    d = _best_fit(target, 0, nd, units, bounds, bptr, u, pu, perf, cap, protect, skip, pods // units)
    if d >= 0:
        _fill(target, d, units, slice_levels, slice_sizes, upc, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take)
        return 1, target, d
    if mode == MODE_REQUIRED:
        return 0, target, -1

    tbase = bptr[target]
    balanced = (protect & 8) != 0
    for k in range(target - 1, span - 1, -1):
        kbase = bptr[k] if k >= 0 else 0
        nk = bptr[k + 1] - kbase - 1 if k >= 0 else 1
        best = -1
        bbal = 0
        bcnt = 0
        bem = 0
        bleft = np.int64(0)
        bm = 0.0
        bs = 0.0
        for dd in range(nk):
            s = bounds[kbase + dd] if k >= 0 else 0
            e = bounds[kbase + dd + 1] if k >= 0 else n_nodes
            if u[e] - u[s] < units:
                continue
            i0 = node_dom[target, s]
            i1 = node_dom[target, e - 1] + 1
            caps = _island_caps(u, bounds, tbase, i0, i1)
            cnt, left, _order, _nw, _last = _span_plan(caps, units)
            if cnt < 0:
                continue
            bal = 0
            if balanced:
                t, tleft, _p, _a = _balanced_plan(caps, units, cnt)
                if t > 0:
                    bal = 1
                    cnt = t
                    left = tleft
            em = 1 if ((protect & 1) != 0 and pu[e] - pu[s] == e - s) else 0
            if best >= 0 and (bal < bbal or (bal == bbal and (cnt > bcnt or (cnt == bcnt and (em > bem or (em == bem and left > bleft)))))):
                continue
            m, sp = _perf_stats(perf, cap, s, e)
            if best >= 0 and bal == bbal and cnt == bcnt and em == bem and left == bleft:
                if m < bm or (m == bm and sp >= bs):
                    continue
            best = dd
            bbal = bal
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
            caps = _island_caps(u, bounds, tbase, i0, i1)
            cnt, left, order, n_whole, last = _span_plan(caps, units)
            if bbal == 1:
                t, tleft, picks, amounts = _balanced_plan(caps, units, cnt)
                for j in range(t):
                    _fill(target, picks[j] + i0, amounts[j], slice_levels, slice_sizes, upc, bounds, bptr, node_dom, pc, pu,
                          perf, cap, protect, take)
                return 1, k, best
            rem = units
            for j in range(n_whole):
                isl = order[j] + i0
                _fill_whole(target, isl, slice_levels, slice_sizes, upc, u, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take)
                rem -= caps[order[j]]
            _fill(target, last + i0, rem, slice_levels, slice_sizes, upc, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take)
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
    total = np.int64(0)
    for j in range(j0, j1):
        total += qcap[j]
    if total < pods:
        return 0, scope, -1
    rem = pods
    if pods <= _PICK_MAX:
        # Every domain visited takes at least one pod, so a few pods visit a few domains: picking
        # the fullest left each time (ties by index, as the stable sort below) beats sorting them all.
        used = np.zeros(j1 - j0, dtype=np.uint8)
        while rem > 0:
            pick = -1
            for i in range(j1 - j0):
                if used[i] == 0 and qcap[j0 + i] > 0 and (pick < 0 or full[i] < full[pick]):
                    pick = i
            if pick < 0:
                break
            used[pick] = 1
            q = qcap[j0 + pick]
            if q > rem:
                q = rem
            _descend(level, j0 + pick, q, bounds, bptr, node_dom, pc, pu, perf, cap, protect, take)
            rem -= q
        return 1, scope, best
    order = np.argsort(full, kind="mergesort")
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


@njit(cache=True)
def capacity_summary(cap, bounds, bptr, level):  # type: ignore[no-untyped-def]
    """(pods every node takes, pods the fullest domain of ``level`` takes, domains at ``level``)
    from per-node capacity, in one pass: what a no-fit message reports."""
    base = bptr[level]
    nd = bptr[level + 1] - base - 1
    total = np.int64(0)
    best = np.int64(0)
    for d in range(nd):
        c = np.int64(0)
        for n in range(bounds[base + d], bounds[base + d + 1]):
            c += cap[n]
        total += c
        if c > best:
            best = c
    return total, best, nd

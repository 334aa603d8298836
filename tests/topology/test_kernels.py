"""The kernel's fused node pass gives what the plain per-node rule and prefix sums give."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topology import _kernels

# Powers of two (a shift), other divisors, and values around the multiply-instead-of-divide
# bound (2**31), next to what a node really offers.
_AMOUNTS = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([1 << 31, (1 << 31) - 1, (1 << 31) + 1, 1 << 40, (1 << 50) + 3, 1 << 62, 144000, 1843200, 110]),
    st.integers(-(1 << 62), 1 << 62),
)
_REQS = st.one_of(
    st.integers(-1, 9),
    st.sampled_from([8000, 65536, 1000, (1 << 31) - 1, 1 << 31, (1 << 31) + 1, 3 << 40, 1 << 62]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fused_pass_matches_node_capacity_and_prefix_sums(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 40))
    free = np.array(data.draw(st.lists(st.lists(_AMOUNTS, min_size=4, max_size=4), min_size=n, max_size=n)), dtype=np.int64)
    alloc = np.where(np.array(data.draw(st.lists(st.booleans(), min_size=n * 4, max_size=n * 4))).reshape(n, 4),
                     free, free + 1).astype(np.int64)
    req = np.array(data.draw(st.lists(_REQS, min_size=4, max_size=4)), dtype=np.int64)
    eligible = np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=np.uint8)
    perf = np.array(data.draw(st.lists(st.sampled_from([0.5, 0.9, 1.0, 1.2]), min_size=n, max_size=n)), dtype=np.float64)
    floor = data.draw(st.sampled_from([0.0, 0.9, 1.0]))
    lo = data.draw(st.integers(0, n))
    hi = data.draw(st.integers(0, n))
    protect = data.draw(st.integers(0, 31))

    want = np.zeros(n, dtype=np.int64)
    _kernels.node_capacity(free, req, eligible, perf, floor, lo, hi, want)
    take = np.full(n, 7, dtype=np.int64)
    cap = np.full(n, -7, dtype=np.int64)
    pc = np.full(n + 1, -7, dtype=np.int64)
    pu = np.full(n + 1, -7, dtype=np.int64)
    _kernels._capacity_prefix(free, alloc, req, eligible, perf, floor, lo, hi, protect, take, cap, pc, pu)

    assert (take == 0).all()
    assert cap.tolist() == want.tolist()
    assert pc.tolist() == [0, *np.cumsum(want).tolist()]
    if protect & 1:
        untouched = (free[:, 0] == alloc[:, 0]) & (free[:, 3] == alloc[:, 3])
        assert pu.tolist() == [0, *np.cumsum(untouched).tolist()]


def test_node_capacity_is_the_fewest_pods_any_needed_resource_allows() -> None:
    free = np.array([[4, 144000, 1843200, 110], [3, 144000, 1843200, 110], [8, 7999, 1843200, 110], [8, 24000, 1843200, 2]],
                    dtype=np.int64)
    req = np.array([4, 8000, 0, 1], dtype=np.int64)
    cap = np.zeros(4, dtype=np.int64)
    _kernels.node_capacity(free, req, np.ones(4, dtype=np.uint8), np.ones(4), 0.0, 0, 4, cap)
    assert cap.tolist() == [1, 0, 0, 2]


_EDGE = [-3, -1, 0, 1, 2, 3, 4, 5, 7, 8, 9, 110, 7999, 8000, 8001, 144000, 1843200, (1 << 31) - 1, 1 << 31, (1 << 31) + 1,
         1 << 40, (1 << 50) - 1, 1 << 50, (1 << 50) + 3, 1 << 62, (1 << 63) - 1]
_EDGE_REQS = [0, 1, 2, 3, 4, 8000, 65536, (1 << 31) - 1, 1 << 31, (1 << 31) + 1, 3 << 40, 1 << 62]


def test_fused_pass_is_exact_at_the_shift_and_multiply_bounds() -> None:
    """Every pair of free amounts against every pair of requests, on two columns at a time: the
    fused pass's shortcuts (shift, multiply instead of divide) agree with exact division."""
    pairs = np.array([(a, b) for a in _EDGE for b in _EDGE], dtype=np.int64)
    n = len(pairs)
    big = int(_kernels._BIG)
    ones, perf = np.ones(n, dtype=np.uint8), np.ones(n)
    for cols in ((0, 1), (1, 0), (0, 3), (2, 1)):
        free = np.full((n, 4), 1 << 62, dtype=np.int64)
        free[:, cols[0]] = pairs[:, 0]
        free[:, cols[1]] = pairs[:, 1]
        for qa in _EDGE_REQS:
            for qb in _EDGE_REQS:
                req = np.zeros(4, dtype=np.int64)
                req[cols[0]], req[cols[1]] = qa, qb
                cap = np.empty(n, dtype=np.int64)
                pc = np.empty(n + 1, dtype=np.int64)
                _kernels._capacity_prefix(free, free, req, ones, perf, 0.0, 0, n, 0, np.empty(n, dtype=np.int64), cap, pc, pc.copy())
                want = []
                for f in free.tolist():
                    fits = [f[r] // int(req[r]) for r in range(4) if req[r] > 0]
                    want.append(max(0, min([big, *fits])))
                assert cap.tolist() == want, (cols, qa, qb)


def test_spread_visits_the_fullest_domains_first_ties_by_path_for_few_and_many_pods() -> None:
    """Below and above the pod count at which the spread stops picking domains one by one and
    sorts them: the same order, fullest first, equal ones in path order."""
    from tests.topology.test_finder import CLIQUE, fabric
    from topology import PlacementRequest, PodSetRequest, ResourceVector, Spread, find_placement

    # 2 spines × 12 cliques × 2 nodes of 4 GPUs; s0c3, s0c7 and s1c4 are fuller (less free)
    used = {"s0c3n0": 3, "s0c7n1": 2, "s1c4n0": 2, "s1c4n1": 2}
    snap = fabric(used=used, cliques=12, nodes_per=2)
    for pods, per in ((3, 1), (5, 2), (16, 1), (17, 1), (24, 1), (40, 2)):
        request = PlacementRequest((PodSetRequest("r", pods, ResourceVector(gpu=1), spread=Spread(CLIQUE, per)),))
        fast = find_placement(snap, request)
        assert fast == find_placement(snap, request, backend="reference")
        assert fast.fits
        visited = {n[:n.rindex("n")] for n in fast.podsets[0].nodes}
        # path order compares labels as strings (s0c10 before s0c2)
        order = sorted((f"s{s}c{c}" for s in range(2) for c in range(12)), key=lambda c: (sum(4 - used.get(f"{c}n{i}", 0) for i in range(2)), c))
        assert visited == set(order[:len(visited)]), pods


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=12), data=st.data())
def test_capacity_summary_is_the_total_the_fullest_domain_and_the_domain_count(sizes: list[int], data: st.DataObject) -> None:
    n = sum(sizes)
    cap = np.array(data.draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)))  # one level of domains over the nodes, then every node alone
    bounds = np.concatenate((starts, np.arange(n + 1))).astype(np.int64)
    bptr = np.array([0, starts.size, starts.size + n + 1], dtype=np.int64)
    for level, per_domain in ((0, np.add.reduceat(cap, starts[:-1])), (1, cap)):
        total, best, domains = _kernels.capacity_summary(cap, bounds, bptr, level)
        assert (total, best, domains) == (cap.sum(), per_domain.max(), per_domain.size)

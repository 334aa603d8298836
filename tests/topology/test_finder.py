"""The finder: numba kernel ≡ reference twin, and the placement rules on hand-built fabrics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.topology.strategies import placement_requests, snapshots
from topology import (
    GraphLink,
    Level,
    NodeInfo,
    PlacementError,
    PlacementRequest,
    PodSetRequest,
    ResourceVector,
    Snapshot,
    Spread,
    Taint,
    Toleration,
    find_placement,
    never_fits,
)

CLIQUE = "nvidia.com/gpu.clique"
SPINE = "network.example.com/spine"


def fabric(used: dict[str, int] | None = None, perf: dict[str, float] | None = None, cliques: int = 4, nodes_per: int = 4, spines: int = 2) -> Snapshot:
    """spines × cliques × nodes of 4 GPUs, node names s{spine}c{clique}n{node}."""
    used = used or {}
    perf = perf or {}
    nodes = []
    for s in range(spines):
        for c in range(cliques):
            for n in range(nodes_per):
                name = f"s{s}c{c}n{n}"
                nodes.append(NodeInfo(name, {SPINE: f"s{s}", CLIQUE: f"s{s}c{c}"}, ResourceVector(4, 100000, 100000, 32),
                                      ResourceVector(gpu=used.get(name, 0)), perf=perf.get(name, 1.0)))
    return Snapshot("gb200", [Level(SPINE, 50, 5), Level(CLIQUE, 1800, 1)], nodes)


def gang(pods: int, gpus: int = 4, **kw: object) -> PlacementRequest:
    return PlacementRequest((PodSetRequest("workers", pods, ResourceVector(gpu=gpus), **kw),))  # type: ignore[arg-type]


# ------------------------------------------------------------------ equivalence and invariants


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_numba_and_reference_agree_and_respect_capacity(data: st.DataObject) -> None:
    snap = data.draw(snapshots())
    request = data.draw(placement_requests(snap))
    fast = find_placement(snap, request)
    slow = find_placement(snap, request, backend="reference")
    assert fast == slow
    assert find_placement(snap, request) == fast  # same input, same output
    if not fast.fits:
        assert fast.reason
        return
    free = snap.free.copy()
    for ps_req, ps in zip(request.podsets, fast.podsets):
        assert ps.pods == ps_req.pods
        for node, pods in zip(ps.nodes, ps.pods_per_node):
            i = snap.node_index[node]
            assert snap.eligible_for(ps_req.tolerations)[i] == 1
            assert snap.perf[i] >= ps_req.perf_floor
            need = np.array([ps_req.per_pod.gpu, ps_req.per_pod.cpu_milli, ps_req.per_pod.memory_mib, 1]) * pods
            assert (free[i] >= need).all(), f"{node} over-committed"
            free[i] -= need
        if ps_req.required_level:
            lvl = snap.level_index(ps_req.required_level)
            assert len({snap.domain_of(lvl, snap.node_index[n]) for n in ps.nodes}) == 1
        if ps_req.spread:
            lvl = snap.level_index(ps_req.spread.level)
            counts: dict[int, int] = {}
            for node, pods in zip(ps.nodes, ps.pods_per_node):
                d = snap.domain_of(lvl, snap.node_index[node])
                counts[d] = counts.get(d, 0) + pods
            assert max(counts.values()) <= ps_req.spread.max_per_domain
        if ps_req.max_span_level and not ps_req.spread:
            lvl = snap.level_index(ps_req.max_span_level)
            assert len({snap.domain_of(lvl, snap.node_index[n]) for n in ps.nodes}) == 1
    for link in request.links:
        lvl = snap.level_index(link.max_level or "")
        a, b = fast.podset(link.a), fast.podset(link.b)
        assert len({snap.domain_of(lvl, snap.node_index[n]) for n in a.nodes + b.nodes}) == 1


# ------------------------------------------------------------------ the rules, by hand


def test_required_picks_the_smallest_fitting_island() -> None:
    # s0c0 has 16 GPUs free, s0c1 has 8 free (two nodes full), s0c2 has 6 free
    used = {"s0c1n0": 4, "s0c1n1": 4, "s0c2n0": 4, "s0c2n1": 4, "s0c2n2": 2}
    snap = fabric(used)
    p = find_placement(snap, gang(2, required_level=CLIQUE))
    assert p.fits
    ps = p.podsets[0]
    assert ps.domain_path[:2] == ("s0", "s0c1") or ps.domain_path == ("s0", "s0c1")
    assert ps.nodes == ("s0c1n2", "s0c1n3")


def test_required_never_spans_islands_and_explains_with_numbers() -> None:
    snap = fabric({f"s{s}c{c}n0": 4 for s in range(2) for c in range(4)})  # every island has 3 free nodes
    p = find_placement(snap, gang(4, required_level=CLIQUE))
    assert not p.fits
    assert "largest fits 3" in p.reason
    assert p.why_not and all(v.capacity_pods == 3 and v.need_pods == 4 for v in p.why_not)


def test_exact_fill_inside_an_island() -> None:
    snap = fabric({"s0c0n0": 3, "s0c0n1": 2})  # n0 has 1 free GPU, n1 has 2
    p = find_placement(snap, gang(1, gpus=2, required_level=CLIQUE))
    assert p.podsets[0].nodes == ("s0c0n1",)  # exact fill, not a whole free node


def test_ties_break_by_higher_min_perf_then_path() -> None:
    perf = {f"s0c0n{i}": 0.9 for i in range(4)}
    snap = fabric(perf=perf)
    p = find_placement(snap, gang(4, required_level=CLIQUE))
    assert p.podsets[0].domain_path == ("s0", "s0c1")
    p2 = find_placement(fabric(), gang(4, required_level=CLIQUE))
    assert p2.podsets[0].domain_path == ("s0", "s0c0")


def test_equal_capacity_and_minimum_perf_break_by_the_smaller_perf_spread() -> None:
    # every island holds 4 pods; s0c0 and s0c1 share the best minimum perf (0.9), s0c0 comes first
    # in path order but spreads 0.2 wide, s0c1 only 0.05; the others are slower (0.8)
    perf = {f"s{s}c{c}n{n}": 0.8 for s in range(2) for c in range(4) for n in range(4)}
    perf |= {"s0c0n0": 0.9, "s0c0n1": 1.1, "s0c0n2": 1.0, "s0c0n3": 1.0}
    perf |= {"s0c1n0": 0.9, "s0c1n1": 0.95, "s0c1n2": 0.95, "s0c1n3": 0.95}
    for backend in ("numba", "reference"):
        ps = find_placement(fabric(perf=perf), gang(4, required_level=CLIQUE), backend=backend).podsets[0]
        assert ps.domain_path == ("s0", "s0c1") and (ps.min_perf, ps.max_perf) == (0.9, 0.95)


def test_a_higher_minimum_perf_wins_before_a_smaller_spread() -> None:
    # s0c0: all 0.9 (no spread); s0c1: 0.95 to 1.45 (wide spread, higher minimum); the others 0.8
    perf = {f"s{s}c{c}n{n}": 0.8 for s in range(2) for c in range(4) for n in range(4)}
    perf |= {f"s0c0n{n}": 0.9 for n in range(4)}
    perf |= {"s0c1n0": 0.95, "s0c1n1": 1.45, "s0c1n2": 1.2, "s0c1n3": 1.0}
    for backend in ("numba", "reference"):
        ps = find_placement(fabric(perf=perf), gang(4, required_level=CLIQUE), backend=backend).podsets[0]
        assert ps.domain_path == ("s0", "s0c1") and ps.min_perf == 0.95


def test_a_spanning_gang_takes_the_largest_children_whole_and_splits_one_per_level() -> None:
    # one spine, three islands of two 4-GPU nodes, one GPU per pod. Free pods per node:
    #   s0c0: n0 4, n1 4 (8)    s0c1: n0 3, n1 3 (6)    s0c2: n0 4, n1 1 (5)
    # 11 pods: no island covers them, so the largest (s0c0, 8) goes whole; the other 3 go to the
    # best fit that covers them, s0c2 (5) rather than s0c1 (6, first in path order); inside s0c2,
    # to the node that covers them, n0 (4 free, 3 taken). One island and one node are split;
    # s0c1 and s0c2n1 stay untouched.
    snap = fabric({"s0c1n0": 1, "s0c1n1": 1, "s0c2n1": 3}, cliques=3, nodes_per=2, spines=1)
    for backend in ("numba", "reference"):
        ps = find_placement(snap, gang(11, gpus=1, required_level=SPINE), backend=backend).podsets[0]
        assert dict(zip(ps.nodes, ps.pods_per_node, strict=True)) == {"s0c0n0": 4, "s0c0n1": 4, "s0c2n0": 3}
        assert ps.islands == 1 and ps.domain_path == ("s0",)


def test_a_gang_spanning_spines_takes_the_larger_whole_and_splits_the_other() -> None:
    # two spines of two islands; the gang needs both spines (no level asked). Free nodes:
    #   s0: c0 4, c1 1 (5)      s1: c0 3, c1 1 (4)
    # 7 pods of 4 GPUs: no spine covers 7, so the larger s0 goes whole and the other 2 go to s1,
    # inside it to the best-fit island c0 (3 free, 2 taken); s1c1 stays untouched.
    used = {"s0c1n1": 4, "s0c1n2": 4, "s0c1n3": 4, "s1c0n3": 4, "s1c1n1": 4, "s1c1n2": 4, "s1c1n3": 4}
    snap = fabric(used, cliques=2)
    for backend in ("numba", "reference"):
        ps = find_placement(snap, gang(7), backend=backend).podsets[0]
        assert ps.nodes == ("s0c0n0", "s0c0n1", "s0c0n2", "s0c0n3", "s0c1n0", "s1c0n0", "s1c0n1")
        assert ps.domain_path == ()


def test_perf_floor_keeps_slow_nodes_out() -> None:
    snap = fabric(perf={"s0c0n0": 0.7}, cliques=1, spines=1)
    assert not find_placement(snap, gang(4, required_level=CLIQUE, perf_floor=0.9)).fits
    p = find_placement(snap, gang(3, required_level=CLIQUE, perf_floor=0.9))
    assert "s0c0n0" not in p.podsets[0].nodes


def test_preferred_spans_the_fewest_islands_under_the_lowest_parent() -> None:
    # spine s0: islands with 2,2,2,2 free nodes; spine s1: islands with 4,4,0,0 free nodes
    used = {f"s0c{c}n{n}": 4 for c in range(4) for n in range(2)}
    used |= {f"s1c{c}n{n}": 4 for c in (2, 3) for n in range(4)}
    snap = fabric(used)
    p = find_placement(snap, gang(7, preferred_level=CLIQUE, max_span_level=SPINE))
    ps = p.podsets[0]
    assert p.fits and ps.islands == 2 and ps.domain_path == ("s1",)
    assert ps.domain_level == SPINE


def test_preferred_is_one_island_when_one_fits() -> None:
    used = {"s0c0n0": 4}
    p = find_placement(fabric(used), gang(3, preferred_level=CLIQUE, max_span_level=SPINE))
    assert p.podsets[0].islands == 1 and p.podsets[0].domain_path == ("s0", "s0c0")


def test_max_span_level_bounds_the_span() -> None:
    snap = fabric(spines=2, cliques=1)
    assert not find_placement(snap, gang(5, preferred_level=CLIQUE, max_span_level=CLIQUE)).fits
    assert not find_placement(snap, gang(5, preferred_level=CLIQUE, max_span_level=SPINE)).fits
    both = find_placement(snap, gang(5, preferred_level=CLIQUE))
    assert both.fits and both.podsets[0].domain_path == ()


def test_protect_empty_domains_prefers_a_used_island() -> None:
    # s0c0 empty (16 free), s0c1 has 12 free: best fit already picks s0c1. Make the empty one smaller:
    nodes = [NodeInfo(f"a{i}", {CLIQUE: "a"}, ResourceVector(4, 1, 1, 8)) for i in range(2)]
    nodes += [NodeInfo(f"b{i}", {CLIQUE: "b"}, ResourceVector(4, 1, 1, 8), ResourceVector(gpu=1 if i == 0 else 0)) for i in range(3)]
    snap = Snapshot("f", [Level(CLIQUE)], nodes)
    request = gang(2, required_level=CLIQUE)
    loose = find_placement(snap, PlacementRequest(request.podsets, protect_empty_domains=False))
    kept = find_placement(snap, PlacementRequest(request.podsets, protect_empty_domains=True))
    assert loose.podsets[0].domain_path[0] == "a"
    assert kept.podsets[0].domain_path[0] == "b"


def test_unhealthy_nodes_hold_nothing() -> None:
    nodes = [
        NodeInfo("ok", {CLIQUE: "x"}, ResourceVector(4, 1, 1, 8)),
        NodeInfo("notready", {CLIQUE: "x"}, ResourceVector(4, 1, 1, 8), ready=False),
        NodeInfo("cordoned", {CLIQUE: "x"}, ResourceVector(4, 1, 1, 8), unschedulable=True),
        NodeInfo("nolabel", {}, ResourceVector(4, 1, 1, 8)),
    ]
    snap = Snapshot("f", [Level(CLIQUE)], nodes)
    assert snap.excluded == {"missing level label": 1}
    assert find_placement(snap, gang(1)).podsets[0].nodes == ("ok",)
    assert not find_placement(snap, gang(2)).fits
    assert never_fits(snap, gang(2)) is None  # fits once nodes heal
    assert never_fits(snap, gang(4)) is not None


def test_pod_tolerations_open_tainted_nodes_to_that_podset_only() -> None:
    maintenance = Taint("example.com/maintenance", "true", "NoSchedule")
    nodes = [NodeInfo(f"n{i}", {CLIQUE: "x"}, ResourceVector(4, 1, 1, 8), taints=(maintenance,) if i == 0 else ()) for i in range(3)]
    nodes.append(NodeInfo("down", {CLIQUE: "x"}, ResourceVector(4, 1, 1, 8), ready=False, taints=(maintenance,)))
    snap = Snapshot("f", [Level(CLIQUE)], nodes)
    assert not find_placement(snap, gang(3)).fits
    tolerant = (Toleration("example.com/maintenance", "Equal", "true"),)
    for backend in ("numba", "reference"):
        placed = find_placement(snap, gang(3, tolerations=tolerant), backend=backend)
        assert placed.fits and placed.podsets[0].nodes == ("n0", "n1", "n2")
        assert not find_placement(snap, gang(4, tolerations=tolerant), backend=backend).fits  # a NotReady node stays out
    wrong_value = (Toleration("example.com/maintenance", "Equal", "false"),)
    assert not find_placement(snap, gang(3, tolerations=wrong_value)).fits
    two = PlacementRequest((PodSetRequest("a", 1, ResourceVector(gpu=4), tolerations=tolerant), PodSetRequest("b", 2, ResourceVector(gpu=4))))
    placed = find_placement(snap, two)
    assert placed.fits and placed.podset("b").nodes == ("n1", "n2")  # only "a" may take the tainted node
    assert placed.podset("a").nodes == ("n0",)


def test_every_requested_resource_limits_pod_fit() -> None:
    nodes = [NodeInfo(f"n{i}", {CLIQUE: "x"}, ResourceVector(8, 4000, 1000, 8)) for i in range(2)]
    cpu_bound = PlacementRequest((PodSetRequest("p", 5, ResourceVector(gpu=1, cpu_milli=1000)),))
    assert find_placement(Snapshot("f", [Level(CLIQUE)], nodes), cpu_bound).podsets[0].pods_per_node == (4, 1)
    nodes = [NodeInfo(f"n{i}", {CLIQUE: "x"}, ResourceVector(8, 4000, 1000, 3)) for i in range(2)]
    snap = Snapshot("f", [Level(CLIQUE)], nodes)
    pod_bound = PlacementRequest((PodSetRequest("p", 7, ResourceVector(gpu=1)),))
    assert not find_placement(snap, pod_bound).fits  # 3 pod slots per node


def test_spread_caps_pods_per_domain() -> None:
    p = find_placement(fabric(), PlacementRequest((PodSetRequest("r", 8, ResourceVector(gpu=1), spread=Spread(CLIQUE, 1)),)))
    assert p.fits and p.podsets[0].islands == 8
    assert not find_placement(fabric(), PlacementRequest((PodSetRequest("r", 9, ResourceVector(gpu=1), spread=Spread(CLIQUE, 1)),))).fits


def test_linked_podsets_stay_inside_the_bandwidth_domain() -> None:
    used = {f"s0c0n{i}": 4 for i in range(3)}  # prefill's best fit is s0c0, which has no room left for decode
    prefill = PodSetRequest("prefill", 1, ResourceVector(gpu=4), required_level=CLIQUE)
    decode = PodSetRequest("decode", 2, ResourceVector(gpu=4), required_level=CLIQUE)
    loose = find_placement(fabric(used), PlacementRequest((prefill, decode)))
    tight = find_placement(fabric(used), PlacementRequest((prefill, decode), (GraphLink("prefill", "decode", min_bandwidth_gbps=1000),)))
    assert loose.podset("prefill").domain_path[:2] == ("s0", "s0c0") and loose.podset("decode").domain_path[:2] != ("s0", "s0c0")
    # one joint choice: both move to one clique that holds them, not prefill alone in the best fit
    assert tight.fits and tight.podset("prefill").domain_path[:2] == tight.podset("decode").domain_path[:2] != ("s0", "s0c0")
    (edge,) = tight.links
    assert (edge.a, edge.b, edge.level, edge.bandwidth_gbps, edge.latency_us) == ("prefill", "decode", CLIQUE, 1800, 1)
    assert edge.asked == "≥ 1000 GB/s"
    ok = find_placement(fabric(used), PlacementRequest((prefill, decode), (GraphLink("prefill", "decode", max_level=SPINE),)))
    assert ok.fits and ok.podset("decode").domain_path[0] == "s0"
    assert ok.links[0].level == SPINE and ok.links[0].bandwidth_gbps == 50 and ok.links[0].asked == f"within {SPINE}"
    decode_rivals = [v.path for v in ok.why_not if v.podset == "decode"]
    assert decode_rivals and all(path[0] == "s0" for path in decode_rivals)  # s1 was never a candidate for decode


def test_linked_request_no_domain_holds_keeps_the_first_reason() -> None:
    used = {f"s{s}c{c}n{n}": 4 for s in range(2) for c in range(4) for n in range(2)}  # every clique has 2 free nodes
    prefill = PodSetRequest("prefill", 1, ResourceVector(gpu=4), required_level=CLIQUE)
    decode = PodSetRequest("decode", 2, ResourceVector(gpu=4), required_level=CLIQUE)
    request = PlacementRequest((prefill, decode), (GraphLink("prefill", "decode", min_bandwidth_gbps=1000),))
    for backend in ("numba", "reference"):
        p = find_placement(fabric(used), request, backend=backend)  # type: ignore[arg-type]
        assert not p.fits and "decode" in p.reason and not p.links
    assert find_placement(fabric(used), PlacementRequest((prefill, decode))).fits  # unlinked, they fit apart


def test_unknown_level_is_named() -> None:
    with pytest.raises(PlacementError, match=r"podSets\[workers\]\.requiredLevel"):
        find_placement(fabric(), gang(1, required_level="rack"))


def test_first_fit_takes_path_order_when_best_fit_is_off() -> None:
    used = {"s0c1n0": 4, "s0c1n1": 4}  # s0c1 is the best fit for 2 pods; s0c0 comes first
    best = find_placement(fabric(used), gang(2, required_level=CLIQUE))
    first = find_placement(fabric(used), PlacementRequest(gang(2, required_level=CLIQUE).podsets, best_fit=False))
    assert best.podsets[0].domain_path == ("s0", "s0c1")
    assert first.podsets[0].domain_path == ("s0", "s0c0")


def test_uniform_perf_ranks_a_domain_by_the_minimum_of_its_usable_nodes_by_default() -> None:
    # s0c0 is the best fit (one node busy) and holds a 0.8 node; s0c1 is all 1.0
    snap = fabric(used={"s0c0n0": 4}, perf={"s0c0n1": 0.8})
    plain = find_placement(snap, gang(2, required_level=CLIQUE)).podsets[0]
    uniform = find_placement(snap, gang(2, required_level=CLIQUE, uniform_perf=True)).podsets[0]
    assert plain.domain_path == ("s0", "s0c0") and plain.min_perf == 0.8  # path order reaches the slow node
    # the default ranks s0c0 by its slow node, though two pods would get 1.0 in it: the all-fast island wins
    assert uniform.domain_path == ("s0", "s0c1") and uniform.min_perf == 1.0
    assert find_placement(snap, gang(2, required_level=CLIQUE, uniform_perf=True), backend="reference").podsets[0] == uniform
    # the band only counts with perf_rank="reach": the same 0.5 % slower best fit loses by default
    slow = fabric(used={"s0c0n0": 4}, perf={f"s0c0n{i}": 0.995 for i in range(4)})
    assert find_placement(slow, gang(2, required_level=CLIQUE, uniform_perf=True, perf_band=0.05)).podsets[0].domain_path == ("s0", "s0c1")
    with pytest.raises(ValueError, match=r"podSets\[workers\]\.perfRank must be one of min, reach"):
        gang(2, required_level=CLIQUE, uniform_perf=True, perf_rank="fastest")


def test_perf_rank_reach_ranks_a_domain_by_the_best_minimum_the_gang_can_get_in_it() -> None:
    # s0c0 is the best fit (one node busy) and holds a 0.8 node; s0c1 is all 1.0
    snap = fabric(used={"s0c0n0": 4}, perf={"s0c0n1": 0.8})
    plain = find_placement(snap, gang(2, required_level=CLIQUE))
    uniform = find_placement(snap, gang(2, required_level=CLIQUE, uniform_perf=True, perf_rank="reach"))
    assert plain.podsets[0].domain_path == ("s0", "s0c0") and plain.podsets[0].min_perf == 0.8  # path order reaches the slow node
    # two pods get 1.0 in s0c0 too (its two fast free nodes): the slow node does not count against it, fit wins
    assert uniform.podsets[0].domain_path == ("s0", "s0c0") and uniform.podsets[0].min_perf == 1.0
    assert set(uniform.podsets[0].nodes) == {"s0c0n2", "s0c0n3"}
    # three pods in s0c0 must use the slow node; uniform perf moves them to a fast island instead
    assert find_placement(snap, gang(3, required_level=CLIQUE)).podsets[0].min_perf == 0.8
    three = find_placement(snap, gang(3, required_level=CLIQUE, uniform_perf=True, perf_rank="reach")).podsets[0]
    assert three.min_perf == 1.0 and three.domain_path == ("s0", "s0c1")


def test_perf_rank_reach_with_a_band_counts_nearly_equal_domains_as_equal_and_then_fits() -> None:
    slow = {f"s0c0n{i}": 0.995 for i in range(4)}
    snap = fabric(used={"s0c0n0": 4}, perf=slow)  # s0c0: best fit, 0.5 % slower than the rest
    banded = find_placement(snap, gang(2, required_level=CLIQUE, uniform_perf=True, perf_rank="reach")).podsets[0]
    exact = find_placement(snap, gang(2, required_level=CLIQUE, uniform_perf=True, perf_rank="reach", perf_band=0.0)).podsets[0]
    assert banded.domain_path == ("s0", "s0c0") and banded.min_perf == 0.995  # inside the default 1 % band: fit decides
    assert exact.domain_path == ("s0", "s0c1") and exact.min_perf == 1.0  # no band: the fastest, then fit, then path
    slower = fabric(used={"s0c0n0": 4}, perf={f"s0c0n{i}": 0.97 for i in range(4)})  # 3 % slower: outside the band
    assert find_placement(slower, gang(2, required_level=CLIQUE, uniform_perf=True, perf_rank="reach")).podsets[0].domain_path == ("s0", "s0c1")
    wide = gang(2, required_level=CLIQUE, uniform_perf=True, perf_rank="reach", perf_band=0.05)  # a class may widen it
    assert find_placement(slower, wide).podsets[0].domain_path == ("s0", "s0c0")
    assert find_placement(snap, gang(2, required_level=CLIQUE, uniform_perf=True, perf_rank="reach"), backend="reference") == \
        find_placement(snap, gang(2, required_level=CLIQUE, uniform_perf=True, perf_rank="reach"))


def test_uniform_perf_leaves_the_slowest_nodes_out_inside_an_island() -> None:
    snap = fabric(perf={"s0c0n0": 0.9, "s0c0n1": 0.95}, cliques=1, spines=1)
    p = find_placement(snap, gang(2, required_level=CLIQUE, uniform_perf=True))
    assert set(p.podsets[0].nodes) == {"s0c0n2", "s0c0n3"}


def test_never_fits_is_memoized_until_allocatable_changes() -> None:
    snap = fabric(cliques=1, spines=1)
    request = gang(5, required_level=CLIQUE)
    assert never_fits(snap, request) is not None
    assert never_fits(snap.fork(), request) is never_fits(snap, request)  # shared by forks
    bigger = NodeInfo("s0c0n0", {SPINE: "s0", CLIQUE: "s0c0"}, ResourceVector(8, 100000, 100000, 32))
    assert snap.update_node(bigger)
    assert never_fits(snap, request) is None  # 5 pods of 4 GPUs now fit: 8 + 3×4 GPUs


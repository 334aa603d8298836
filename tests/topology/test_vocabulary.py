"""Kueue's topology vocabulary in the engine: slices (multi-layer), unconstrained, balanced
spans and PodSet groups. The numba kernel ≡ its pure-Python twin on random requests, every
placement keeps the constraints it was asked for, and hand-built fabrics pin the rules."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.topology.strategies import snapshots, vocabulary_requests
from tests.topology.test_finder import CLIQUE, SPINE, fabric
from topology import (
    NodeConstraint,
    NodeRequirement,
    Placement,
    PlacementError,
    PlacementRequest,
    PodSetRequest,
    ResourceVector,
    SliceLayer,
    Snapshot,
    find_placement,
)


def _pods_per_domain(snap: Snapshot, level: str, nodes: tuple[str, ...], pods: tuple[int, ...]) -> Counter[int]:
    lvl = snap.level_index(level)
    out: Counter[int] = Counter()
    for node, k in zip(nodes, pods):
        out[snap.domain_of(lvl, snap.node_index[node])] += k
    return out


def assert_keeps_its_constraints(snap: Snapshot, request: PlacementRequest, placement: Placement) -> None:
    """What any placement of ``request`` must satisfy, whoever computed it."""
    free = snap.free.copy()
    for ps_req, ps in zip(request.podsets, placement.podsets):
        assert ps.name == ps_req.name and ps.pods == ps_req.pods
        for node, pods in zip(ps.nodes, ps.pods_per_node):
            i = snap.node_index[node]
            assert snap.eligible_for(ps_req.tolerations)[i] == 1 and snap.perf[i] >= ps_req.perf_floor
            need = np.array([ps_req.per_pod.gpu, ps_req.per_pod.cpu_milli, ps_req.per_pod.memory_mib, 1]) * pods
            assert (free[i] >= need).all(), f"{node} over-committed"
            free[i] -= need
        if ps_req.required_level:
            assert len(_pods_per_domain(snap, ps_req.required_level, ps.nodes, ps.pods_per_node)) == 1
        if ps_req.max_span_level:
            assert len(_pods_per_domain(snap, ps_req.max_span_level, ps.nodes, ps.pods_per_node)) == 1
        for layer in ps_req.slices:
            per_domain = _pods_per_domain(snap, layer.level, ps.nodes, ps.pods_per_node)
            assert all(v % layer.size == 0 for v in per_domain.values()), f"{layer}: {per_domain}"
        if ps_req.slices:
            size = ps_req.slices[0].size
            assert len(ps.slices) == ps_req.pods // size
            lvl = snap.level_index(ps_req.slices[0].level)
            for sl in ps.slices:
                assert sl.pods == size
                assert {snap.domain_path(lvl, snap.domain_of(lvl, snap.node_index[n])) for n in sl.nodes} == {sl.path}
        else:
            assert ps.slices == ()
    for members in request.groups().values():
        if members[0].required_level:
            nodes = [n for m in members for n in placement.podset(m.name).nodes]
            assert len(_pods_per_domain(snap, members[0].required_level, tuple(nodes), (1,) * len(nodes))) == 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_numba_and_reference_agree_on_sliced_unconstrained_balanced_and_grouped_requests(data: st.DataObject) -> None:
    snap = data.draw(snapshots())
    request = data.draw(vocabulary_requests(snap))
    fast = find_placement(snap, request)
    slow = find_placement(snap, request, backend="reference")
    assert fast == slow
    assert find_placement(snap, request) == fast
    if fast.fits:
        assert_keeps_its_constraints(snap, request, fast)
    else:
        assert fast.reason


# ------------------------------------------------------------------ slices, by hand


def sliced(pods: int, size: int, level: str = CLIQUE, **kw: object) -> PlacementRequest:
    return PlacementRequest((PodSetRequest("workers", pods, ResourceVector(gpu=4), slices=(SliceLayer(level, size),), **kw),))  # type: ignore[arg-type]


def test_each_slice_sits_in_one_island_and_islands_hold_whole_slices() -> None:
    snap = fabric(cliques=4, nodes_per=4)  # islands of 4 nodes × 4 GPUs
    p = find_placement(snap, sliced(6, 2, preferred_level=CLIQUE))
    assert p.fits
    ps = p.podsets[0]
    assert [sl.pods for sl in ps.slices] == [2, 2, 2]
    assert sorted(_pods_per_domain(snap, CLIQUE, ps.nodes, ps.pods_per_node).values()) == [2, 4]


def test_slices_pick_the_island_that_fits_them_best() -> None:
    # s0c0: 3 free nodes, s0c1: 2 free, s0c2: 4 free. 2 slices of 2 → s0c1 alone cannot (2 nodes = 1 slice),
    # s0c0 holds 1 slice (3 nodes), s0c2 holds 2 → s0c2 alone is the best fit for both.
    used = {"s0c0n0": 4, "s0c1n0": 4, "s0c1n1": 4, **{f"s0c3n{i}": 4 for i in range(4)}}
    snap = fabric(used, cliques=4, spines=1)
    p = find_placement(snap, sliced(4, 2, required_level=SPINE))
    assert {sl.path for sl in p.podsets[0].slices} == {("s0", "s0c2")}
    p2 = find_placement(snap, sliced(6, 2, required_level=SPINE))
    assert [sl.path[-1] for sl in p2.podsets[0].slices] == ["s0c0", "s0c2", "s0c2"]


def test_slices_do_not_count_leftover_pods_that_make_no_whole_slice() -> None:
    used = {"s0c0n0": 4, "s0c1n0": 4}  # two islands of 3 free nodes: 6 pods free, but 1 slice of 3+... no: 1 slice of 2 each
    snap = fabric(used, cliques=2, spines=1)
    p = find_placement(snap, sliced(6, 2, required_level=SPINE))
    assert not p.fits
    assert "2 of 3 slices" in p.reason


def test_required_level_below_the_slice_level_is_named() -> None:
    with pytest.raises(PlacementError, match="slice level network.example.com/spine is above the PodSet's level"):
        find_placement(fabric(), sliced(4, 2, level=SPINE, required_level=CLIQUE))


def test_a_count_that_is_not_a_multiple_of_the_slice_size_names_both_numbers() -> None:
    with pytest.raises(ValueError, match="count 32 is not a multiple of the slice size 5"):
        sliced(32, 5)


def test_multi_layer_slices_keep_every_layer_whole() -> None:
    # per spine 4 islands of 4 nodes; outer slices of 8 pods per spine, inner of 4 pods per island
    snap = fabric({"s0c0n0": 4}, cliques=4, nodes_per=4, spines=2)
    layers = (SliceLayer(SPINE, 8), SliceLayer(CLIQUE, 4))
    req = PlacementRequest((PodSetRequest("w", 16, ResourceVector(gpu=4), slices=layers),))
    for backend in ("numba", "reference"):
        p = find_placement(snap, req, backend=backend)  # type: ignore[arg-type]
        assert p.fits
        ps = p.podsets[0]
        per_clique = _pods_per_domain(snap, CLIQUE, ps.nodes, ps.pods_per_node)
        assert all(v == 4 for v in per_clique.values())
        assert snap.domain_of(1, snap.node_index["s0c0n1"]) not in per_clique  # the island with 3 free nodes holds no 4-pod sub-slice
        assert [sl.pods for sl in ps.slices] == [8, 8]


def test_inner_layer_must_divide_the_outer_and_sit_lower() -> None:
    with pytest.raises(ValueError, match="size 3 .* must evenly divide the parent layer size 8"):
        PodSetRequest("w", 16, ResourceVector(gpu=4), slices=(SliceLayer(SPINE, 8), SliceLayer(CLIQUE, 3)))
    req = PlacementRequest((PodSetRequest("w", 16, ResourceVector(gpu=4), slices=(SliceLayer(CLIQUE, 8), SliceLayer(SPINE, 4))),))
    with pytest.raises(PlacementError, match=r"slices\[1\].level: network.example.com/spine must be below"):
        find_placement(fabric(), req)


# ------------------------------------------------------------------ unconstrained, balanced, groups


def test_unconstrained_fills_the_least_free_nodes_first_and_keeps_empty_islands_whole() -> None:
    used = {"s0c1n0": 3, "s0c1n1": 2, "s1c2n3": 1}
    snap = fabric(used)

    def place(pods: int) -> dict[str, int]:
        req = PlacementRequest((PodSetRequest("batch", pods, ResourceVector(gpu=1), unconstrained=True),))
        p = find_placement(snap, req)
        assert p == find_placement(snap, req, backend="reference")
        return dict(zip(p.podsets[0].nodes, p.podsets[0].pods_per_node))

    # the least free spine, island and nodes first: s0c1's nodes of 1 and 2 free GPUs fill exactly
    assert place(3) == {"s0c1n0": 1, "s0c1n1": 2}
    assert place(7) == {"s0c1n0": 1, "s0c1n1": 2, "s0c1n2": 4}
    # more than that island holds: the rest goes to the next least free island of the same spine
    assert place(14) == {"s0c1n0": 1, "s0c1n1": 2, "s0c1n2": 4, "s0c1n3": 4, "s0c0n0": 3}


def test_balanced_spans_share_the_gang_evenly() -> None:
    snap = fabric(cliques=5, nodes_per=18, spines=1)  # five islands of 18 nodes
    plain = find_placement(snap, PlacementRequest((PodSetRequest("w", 64, ResourceVector(gpu=4), preferred_level=CLIQUE),)))
    even = find_placement(snap, PlacementRequest((PodSetRequest("w", 64, ResourceVector(gpu=4), preferred_level=CLIQUE, balanced=True),)))
    ps_plain, ps_even = plain.podsets[0], even.podsets[0]
    assert sorted(_pods_per_domain(snap, CLIQUE, ps_plain.nodes, ps_plain.pods_per_node).values()) == [10, 18, 18, 18]
    assert sorted(_pods_per_domain(snap, CLIQUE, ps_even.nodes, ps_even.pods_per_node).values()) == [16, 16, 16, 16]


def test_a_group_shares_one_island_chosen_for_both_members() -> None:
    # s0c0 fits the 3 workers but has no CPU left for the leader; s0c1 fits both
    snap = fabric({"s0c1n0": 4, "s0c2n0": 4, "s0c2n1": 4, "s0c3n0": 4, **{f"s1c{c}n{i}": 4 for c in range(4) for i in range(4)}})
    for i in range(4):
        snap.reserve(f"s0c0n{i}", ResourceVector(cpu_milli=100000 if i else 99000))
    leader = PodSetRequest("leader", 1, ResourceVector(cpu_milli=2000), required_level=CLIQUE, group="lws")
    workers = PodSetRequest("workers", 3, ResourceVector(gpu=4, cpu_milli=1000), required_level=CLIQUE, group="lws")
    p = find_placement(snap, PlacementRequest((leader, workers)))
    assert p.fits, p.reason
    cliques = {snap.domain_path(1, snap.domain_of(1, snap.node_index[n])) for ps in p.podsets for n in ps.nodes}
    assert cliques == {("s0", "s0c1")}
    lonely = find_placement(snap, PlacementRequest((leader, PodSetRequest("workers", 5, ResourceVector(gpu=4), required_level=CLIQUE, group="lws"))))
    assert not lonely.fits and "group lws: no nvidia.com/gpu.clique domain holds" in lonely.reason


def test_group_members_must_agree_on_their_level() -> None:
    with pytest.raises(ValueError, match="group 'g': its PodSets must ask for the same"):
        PlacementRequest((PodSetRequest("a", 1, ResourceVector(gpu=1), required_level=CLIQUE, group="g"),
                          PodSetRequest("b", 2, ResourceVector(gpu=1), required_level=SPINE, group="g")))


def test_node_affinity_limits_slices_and_group_members_like_a_node_selector() -> None:
    snap = fabric(cliques=2, nodes_per=4, spines=1)
    not_c0 = NodeConstraint(terms=((NodeRequirement(CLIQUE, "NotIn", ("s0c0",)),),))
    sliced_req = PlacementRequest((PodSetRequest("w", 4, ResourceVector(gpu=4), slices=(SliceLayer(CLIQUE, 2),), node_constraint=not_c0),))
    p = find_placement(snap, sliced_req)
    assert {sl.path for sl in p.podsets[0].slices} == {("s0", "s0c1")}
    assert not find_placement(snap, sliced(6, 2, node_constraint=not_c0)).fits
    only_c0 = NodeConstraint(selector=((CLIQUE, "s0c0"),))
    leader = PodSetRequest("leader", 1, ResourceVector(gpu=1), required_level=CLIQUE, group="g", node_constraint=only_c0)
    workers = PodSetRequest("workers", 2, ResourceVector(gpu=4), required_level=CLIQUE, group="g")
    g = find_placement(snap, PlacementRequest((leader, workers)))
    assert g.fits and {n[:4] for ps in g.podsets for n in ps.nodes} == {"s0c0"}


def test_slices_render_as_json_ready_records() -> None:
    p = find_placement(fabric(cliques=2, nodes_per=4, spines=1), sliced(4, 2, required_level=CLIQUE))
    first = p.podsets[0].slices[0].as_dict()
    assert first == {"index": 0, "level": CLIQUE, "domain": ["s0", "s0c0"], "pods": 2, "nodes": {"s0c0n0": 1, "s0c0n1": 1}}

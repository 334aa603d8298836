"""Kueue's TAS placement (the ``kueue-bestfit`` baseline) on hand-built clusters.

Every expected assignment below is worked out from Kueue's rules in the comment above it, not
taken from a run: capacities per domain, the sort order, then the greedy/best-fit walk down.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.cli import main as atoll_main
from admission.cli._baseline import ScenarioError, main, run_kueue_bestfit_scenario
from topology import (
    HOSTNAME_LABEL,
    Level,
    NodeInfo,
    ResourceVector,
    Snapshot,
    Taint,
    Toleration,
)
from topology._kueue_tas import (
    KueueLeaves,
    KueueNode,
    KueuePodSet,
    KueueResult,
    build_kueue_leaves,
    kueue_leaves_from_snapshot,
    kueue_place,
    kueue_place_workload,
    per_pod_of,
    taint_string,
)

BLOCK = "cloud.example.com/block"
RACK = "cloud.example.com/rack"
HOST = HOSTNAME_LABEL
GPU = "nvidia.com/gpu"
LEVELS = (BLOCK, RACK, HOST)


def node(name: str, block: str = "b1", rack: str = "r1", *, free: int = 8, gpu: int = 8, pods: int = 110,
         used_pods: int = 0, labels: dict[str, str] | None = None, **kw: object) -> KueueNode:
    """A node with ``gpu`` GPUs of which ``free`` are free."""
    lb = {BLOCK: block, RACK: rack, HOST: name} if labels is None else labels
    return KueueNode(name, lb, {GPU: gpu, "pods": pods}, {GPU: gpu - free, "pods": used_pods}, **kw)  # type: ignore[arg-type]


def cluster(*nodes: KueueNode, levels: tuple[str, ...] = LEVELS, **kw: object) -> KueueLeaves:
    return build_kueue_leaves(levels, nodes, **kw)  # type: ignore[arg-type]


def place(lv: KueueLeaves, count: int, gpus: int, mode: str, level: str | None = None, **kw: object) -> KueueResult:
    return kueue_place(lv, count, {GPU: gpus}, mode=mode, level=level, topology_name="default", **kw)  # type: ignore[arg-type]


def got(result: KueueResult) -> list[tuple[str, int]]:
    assert result.fits, result.reason
    return [("/".join(values), count) for values, count in result.domains]


# ----------------------------------------------------------------------------- required


def required_racks() -> KueueLeaves:
    # pods of 2 GPUs: r1 = 4+4 = 8, r2 = 2, r3 = 4+1 = 5, r4 = 3
    return cluster(
        node("n1", "b1", "r1"), node("n2", "b1", "r1"),
        node("n3", "b1", "r2", free=4),
        node("n4", "b2", "r3"), node("n5", "b2", "r3", free=2),
        node("n6", "b2", "r4", free=6),
    )


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        # fitting racks r1 (8), r3 (5), r4 (3): best fit is r4
        (3, [("n6", 3)]),
        # fitting r1 (8), r3 (5): r3; inside it n4 (4) whole, then n5 takes the last 1
        (5, [("n4", 4), ("n5", 1)]),
        # only r1 holds 6: n1 4 (largest first), then best fit for 2 among {n2: 4} → n2
        (6, [("n1", 4), ("n2", 2)]),
        # 2 fits everywhere: the smallest is r2
        (2, [("n3", 2)]),
    ],
)
def test_required_picks_the_smallest_fitting_domain(count: int, expected: list[tuple[str, int]]) -> None:
    result = place(required_racks(), count, 2, "required", RACK)
    assert got(result) == expected
    assert result.assignment_levels == (HOST,) and result.fit_level == RACK


def test_equal_capacity_ties_go_to_the_lexicographically_first_full_path() -> None:
    # racks ("a", "z") and ("b", "a") both hold 2: values compare as whole paths, so block a wins
    lv = cluster(node("x1", "b", "a", free=4), node("x2", "a", "z", free=4), node("x3", "c", "c", free=8))
    assert got(place(lv, 2, 2, "required", RACK)) == [("x2", 2)]
    # and inside a domain, equal nodes go in path (hostname) order
    lv = cluster(node("m", "b1", "r1"), node("k", "b1", "r1"), node("z", "b1", "r1"))
    assert got(place(lv, 6, 2, "required", RACK)) == [("k", 4), ("m", 2)]


def test_equal_slices_tie_break_on_fewer_free_pods() -> None:
    # slices of 4 pods at rack level; block A: r1 5 pods (1 slice) + r2 4 (1) = 2 slices, 9 pods;
    # block B: r3 4 + r4 4 = 2 slices, 8 pods. Both hold 2 slices: B has fewer pods, so B, though A < B
    lv = cluster(node("a1", "A", "r1", gpu=5, free=5), node("a2", "A", "r2", gpu=4, free=4),
                 node("b1", "B", "r3", gpu=4, free=4), node("b2", "B", "r4", gpu=4, free=4))
    result = place(lv, 8, 1, "required", BLOCK, slice_level=RACK, slice_size=4)
    assert got(result) == [("b1", 4), ("b2", 4)]


def test_required_failure_names_the_best_domain_and_every_exclusion() -> None:
    # pods of 8 GPUs; rack r1: n1 holds 1, n2 is full (resource), n7 is tainted; rack r2: n3 holds 1.
    # Before the snapshot: n4 NotReady, n5 cordoned, n6 without a rack label.
    lv = cluster(
        node("n1", "b1", "r1"), node("n2", "b1", "r1", free=0), node("n3", "b1", "r2"),
        node("n4", "b1", "r2", ready=False), node("n5", "b1", "r2", unschedulable=True),
        node("n6", labels={BLOCK: "b1", HOST: "n6"}),
        node("n7", "b1", "r1", taints=(Taint("gpu-broken", "true", "NoSchedule"),)),
    )
    result = place(lv, 3, 8, "required", RACK)
    assert not result.fits and result.domains == ()
    assert result.reason == (
        'topology "default" allows to fit only 1 out of 3 pod(s). Total nodes: 7; excluded: '
        'missingTopologyLabel: 1, notReady: 1, resource "nvidia.com/gpu": 1, '
        'taint "gpu-broken=true:NoSchedule": 1, unschedulable: 1'
    )
    # Kueue's own text counts only what entered its snapshot
    kueue_only = place(lv, 3, 8, "required", RACK, excluded={})
    assert kueue_only.reason == ('topology "default" allows to fit only 1 out of 3 pod(s). Total nodes: 4; excluded: '
                                 'resource "nvidia.com/gpu": 1, taint "gpu-broken=true:NoSchedule": 1')


def test_failure_without_exclusions_has_no_suffix_and_none_fit_says_so() -> None:
    lv = cluster(node("n1", "b1", "r1"), node("n2", "b1", "r2"))
    assert place(lv, 2, 8, "required", RACK).reason == 'topology "default" allows to fit only 1 out of 2 pod(s)'
    full = cluster(node("n1", free=0), node("n2", free=0))
    assert place(full, 2, 1, "required", RACK).reason == (
        'topology "default" doesn\'t allow to fit any of 2 pod(s). Total nodes: 2; excluded: resource "nvidia.com/gpu": 2')
    # a resource no node offers limits every leaf
    missing = kueue_place(lv, 1, {"example.com/fpga": 1}, mode="required", level=RACK, topology_name="t")
    assert missing.reason == 'topology "t" doesn\'t allow to fit any of 1 pod(s). Total nodes: 2; excluded: resource "example.com/fpga": 2'


def test_tolerated_taints_and_preferred_effects_do_not_exclude() -> None:
    nodes = (node("n1", taints=(Taint("dedicated", "ml", "NoSchedule"),)),
             node("n2", taints=(Taint("soft", "", "PreferNoSchedule"),)))
    # n1's NoSchedule taint is not tolerated: one pod fits (on n2, whose taint only prefers)
    assert place(cluster(*nodes), 2, 8, "required", RACK).reason == (
        'topology "default" allows to fit only 1 out of 2 pod(s). Total nodes: 2; excluded: taint "dedicated=ml:NoSchedule": 1')
    tolerant = cluster(*nodes, tolerations=[Toleration("dedicated", "Equal", "ml", "NoSchedule")])
    assert got(place(tolerant, 2, 8, "required", RACK)) == [("n1", 1), ("n2", 1)]
    assert taint_string(Taint("soft", "", "PreferNoSchedule")) == "soft:PreferNoSchedule"


def test_taints_are_not_checked_when_a_leaf_is_a_group_of_nodes() -> None:
    # Kueue matches taints only against a node leaf; with rack lowest the tainted node still counts
    lv = cluster(node("n1", taints=(Taint("gpu-broken", "", "NoExecute"),)), node("n2"), levels=(BLOCK, RACK))
    assert got(place(lv, 2, 8, "required", RACK)) == [("b1/r1", 2)]


def test_flavor_node_labels_filter_nodes() -> None:
    nodes = (node("n1", labels={BLOCK: "b1", RACK: "r1", HOST: "n1", "pool": "h100"}),
             node("n2", labels={BLOCK: "b1", RACK: "r1", HOST: "n2", "pool": "a100"}))
    lv = cluster(*nodes, node_labels={"pool": "h100"})
    assert lv.excluded == {"nodeLabels": 1} and lv.num_leaves == 1
    assert place(lv, 2, 8, "required", RACK).reason.endswith("Total nodes: 2; excluded: nodeLabels: 1")


# ----------------------------------------------------------------------------- preferred


def preferred_cluster() -> KueueLeaves:
    # pods of 1 GPU, one node per rack: b1 = r1 2 + r2 2 = 4; b2 = r3 3 + r4 3 = 6; b3 = r5 3
    return cluster(node("n1", "b1", "r1", free=2), node("n2", "b1", "r2", free=2),
                   node("n3", "b2", "r3", free=3), node("n4", "b2", "r4", free=3),
                   node("n5", "b3", "r5", free=3))


def test_preferred_fits_its_level_when_it_can() -> None:
    result = place(preferred_cluster(), 3, 1, "preferred", RACK)
    assert got(result) == [("n3", 3)] and result.fit_level == RACK  # smallest rack holding 3 (r3 before r4, r5)


def test_preferred_climbs_one_level_when_no_domain_fits() -> None:
    # no rack holds 4 → blocks: b1 (4) and b2 (6) fit, b1 is smaller; its racks 2 + 2
    result = place(preferred_cluster(), 4, 1, "preferred", RACK)
    assert got(result) == [("n1", 2), ("n2", 2)] and result.fit_level == BLOCK


def test_preferred_fills_top_level_greedily_with_a_best_fit_last() -> None:
    # 8 pods: no block fits. Blocks by size: b2 6, b1 4, b3 3 → b2 whole, then 2 more: the best fit
    # among {b1: 4, b3: 3} is b3. Down: racks r3 3, r4 3, r5 3 → 3 + 3, then 2 on r5.
    result = place(preferred_cluster(), 8, 1, "preferred", RACK)
    assert got(result) == [("n3", 3), ("n4", 3), ("n5", 2)] and result.fit_level == BLOCK
    # 15 > 14 free: no placement, the message counts everything the top level holds
    assert place(preferred_cluster(), 15, 1, "preferred", RACK).reason == 'topology "default" allows to fit only 13 out of 15 pod(s)'


# ----------------------------------------------------------------------------- unconstrained


def unconstrained_cluster() -> KueueLeaves:
    # node capacities (1 GPU pods): a 5, b 2, c 3, d 3, e 0
    return cluster(node("a", free=5), node("b", free=2), node("c", "b1", "r2", free=3),
                   node("d", "b2", "r3", free=3), node("e", "b2", "r3", free=0))


def test_unconstrained_takes_the_least_free_node_that_holds_everything() -> None:
    result = place(unconstrained_cluster(), 3, 1, "unconstrained")
    assert got(result) == [("c", 3)] and result.fit_level == HOST  # c and d hold 3; c comes first
    assert got(place(unconstrained_cluster(), 2, 1, "unconstrained")) == [("b", 2)]


def test_unconstrained_fills_from_the_least_free_upward_without_best_fit() -> None:
    # 7 pods, no node holds them: ascending e 0, b 2, c 3, d 3, a 5 → b 2 + c 3 + d takes the last 2
    assert got(place(unconstrained_cluster(), 7, 1, "unconstrained")) == [("b", 2), ("c", 3), ("d", 2)]
    assert place(unconstrained_cluster(), 14, 1, "unconstrained").reason == (
        'topology "default" allows to fit only 13 out of 14 pod(s). Total nodes: 5; excluded: resource "nvidia.com/gpu": 1')


def test_unconstrained_on_grouped_leaves_uses_the_lowest_level() -> None:
    lv = cluster(node("a", free=1), node("b", free=1), node("c", "b1", "r2", free=4), levels=(BLOCK, RACK))
    result = place(lv, 2, 1, "unconstrained")
    assert result.assignment_levels == (BLOCK, RACK) and got(result) == [("b1/r1", 2)]


# ----------------------------------------------------------------------------- resources


def test_every_pod_takes_a_pod_slot() -> None:
    # n1: 8 GPUs free but 3 pod slots, one in use → 2 pods; n2: its slots are all taken
    lv = cluster(node("n1", pods=3, used_pods=1), node("n2", pods=4, used_pods=4))
    assert list(lv.capacity_for({GPU: 1})) == [2, 0]
    assert place(lv, 3, 1, "required", RACK).reason == (
        'topology "default" allows to fit only 2 out of 3 pod(s). Total nodes: 2; excluded: resource "pods": 1')


def test_capacity_is_the_minimum_over_resources() -> None:
    gib = 2**30
    n = KueueNode("n1", {BLOCK: "b1", RACK: "r1", HOST: "n1"},
                  {GPU: 8, "cpu": 16_000, "memory": 64 * gib, "pods": 110}, {"cpu": 2_000})
    lv = build_kueue_leaves(LEVELS, [n])
    per_pod = {GPU: 1, "cpu": 3_500, "memory": 8 * gib}
    assert list(lv.capacity_for(per_pod)) == [4]  # GPU 8, cpu 14000 // 3500 = 4, memory 8
    result = kueue_place(lv, 5, per_pod, mode="required", level=HOST, topology_name="default")
    assert result.reason == 'topology "default" allows to fit only 4 out of 5 pod(s)'


def test_usage_updates_in_place_without_rebuilding() -> None:
    lv = required_racks()
    leaf = lv.leaf_of("n6")
    lv.add_usage(leaf, {GPU: 6})  # r4 is now full
    assert got(place(lv, 3, 2, "required", RACK)) == [("n4", 3)]  # next smallest fitting: r3 (5)
    lv.remove_usage(leaf, {GPU: 6})
    assert got(place(lv, 3, 2, "required", RACK)) == [("n6", 3)]


# ----------------------------------------------------------------------------- several PodSets


def test_later_podsets_see_the_earlier_ones_usage() -> None:
    # 2-GPU pods: r1 (n1, 8 free) holds 4, r2 (n2, 12 free) holds 6.
    # PodSet a (4 pods) → r1, the smallest fitting. PodSet b (3 pods) alone would also pick r1;
    # after a, r1 holds 0, so b goes to r2.
    lv = cluster(node("n1", "b1", "r1"), node("n2", "b1", "r2", gpu=12, free=12))
    podsets = [KueuePodSet("a", 4, {GPU: 2}, "required", RACK), KueuePodSet("b", 3, {GPU: 2}, "required", RACK)]
    before = lv.free.copy()
    result = kueue_place_workload(lv, podsets, topology_name="default")
    assert result.fits
    assert [(name, got(r)) for name, r in result.podsets] == [("a", [("n1", 4)]), ("b", [("n2", 3)])]
    assert np.array_equal(lv.free, before)  # not committed
    assert got(place(lv, 3, 2, "required", RACK)) == [("n1", 3)]


def test_workload_commit_keeps_usage_and_a_failure_leaves_nothing_behind() -> None:
    lv = cluster(node("n1", "b1", "r1", pods=10), node("n2", "b1", "r2", gpu=12, free=12))
    podsets = [KueuePodSet("a", 4, {GPU: 2}, "required", RACK), KueuePodSet("b", 7, {GPU: 2}, "required", RACK)]
    before = lv.free.copy()
    failed = kueue_place_workload(lv, podsets, topology_name="default", commit=True)
    assert not failed.fits and failed.failed_podset == "b"
    assert failed.reason == ('topology "default" allows to fit only 6 out of 7 pod(s). Total nodes: 2; '
                             'excluded: resource "nvidia.com/gpu": 1')
    assert np.array_equal(lv.free, before)
    ok = kueue_place_workload(lv, podsets[:1], topology_name="default", commit=True)
    assert ok.fits
    n1 = lv.leaf_of("n1")
    assert lv.free[n1, lv.column[GPU]] == 0 and lv.free[n1, lv.column["pods"]] == 6  # 4 pods took 4 slots


# ----------------------------------------------------------------------------- walking down


def walk_cluster() -> KueueLeaves:
    # 1-GPU pods. b1: r1 = n11 4 + n12 3 = 7, r2 = n21 2 + n22 2 = 4, r3 = n31 1 + n32 1 = 2 → 13
    # b2: r4 = n41 3 → 3
    return cluster(node("n11", "b1", "r1", free=4), node("n12", "b1", "r1", free=3),
                   node("n21", "b1", "r2", free=2), node("n22", "b1", "r2", free=2),
                   node("n31", "b1", "r3", free=1), node("n32", "b1", "r3", free=1),
                   node("n41", "b2", "r4", free=3))


def test_walk_down_is_largest_first_with_a_best_fit_last_at_each_level() -> None:
    # 9 pods required in a block: only b1 (13). Racks: r1 7 whole, 2 left: best fit among
    # {r2: 4, r3: 2} is r3. Nodes of r1 and r3 together: n11 4, n12 3, n31 1, then n32 the last 1.
    result = place(walk_cluster(), 9, 1, "required", BLOCK)
    assert got(result) == [("n11", 4), ("n12", 3), ("n31", 1), ("n32", 1)]


def test_the_last_child_is_the_smallest_that_holds_the_rest() -> None:
    # one rack with nodes 5, 4, 2: 7 pods → 5 whole, then 2 left: best fit 2 (not 4)
    lv = cluster(node("p", free=5), node("q", free=4), node("r", free=2))
    assert got(place(lv, 7, 1, "required", RACK)) == [("p", 5), ("r", 2)]


def test_output_is_in_path_order_not_pick_order() -> None:
    # picked z (3) first, then m (2) as the best fit for the last 2; reported m, z
    lv = cluster(node("z", free=3), node("m", free=2), node("a", free=1))
    result = place(lv, 5, 1, "required", RACK)
    assert got(result) == [("m", 2), ("z", 3)]
    assert list(result.leaf_indices) == sorted(result.leaf_indices)


def test_a_leaf_is_every_node_with_the_same_path_when_hostname_is_not_a_level() -> None:
    # rack r1 = n1 + n2 with 8 free GPUs each; 3-GPU pods: per node 2 + 2 = 4, but Kueue sums the
    # leaf's capacity first: floor(16 / 3) = 5
    lv = cluster(node("n1"), node("n2"), node("n3", "b1", "r2", free=6), levels=(BLOCK, RACK))
    assert lv.num_leaves == 2 and lv.leaf_of("n1") == lv.leaf_of("n2")
    result = place(lv, 5, 3, "required", RACK)
    assert result.assignment_levels == (BLOCK, RACK) and got(result) == [("b1/r1", 5)]


def test_slices_fill_children_below_the_slice_level_smallest_first() -> None:
    # rack with nodes 3, 2, 5 (1-GPU pods). Without slices 4 pods go to the node of 5 (best fit from
    # the largest). With slices of 4 at rack level, a parent's pods fill its children in ascending
    # order (their slice count is 0, so pods ascending decides): 2 whole, then best fit 3 for 2.
    lv = cluster(node("n1", free=3), node("n2", free=2), node("n3", free=5))
    assert got(place(lv, 4, 1, "required", RACK)) == [("n3", 4)]
    assert got(place(lv, 4, 1, "required", RACK, slice_level=RACK, slice_size=4)) == [("n1", 2), ("n2", 2)]
    # 3 slices of 4 = 12 > 10: the message counts slices
    assert place(lv, 12, 1, "required", RACK, slice_level=RACK, slice_size=4).reason == (
        'topology "default" allows to fit only 2 out of 3 slice(s)')


# ----------------------------------------------------------------------------- inputs


def test_requests_kueue_rejects_come_back_as_reasons_and_misuse_raises() -> None:
    lv = required_racks()
    assert place(lv, 1, 1, "required", "zone").reason == "no requested topology level: zone"
    assert place(lv, 4, 1, "required", HOST, slice_level=RACK, slice_size=2).reason == (
        f"podset slice topology {RACK} is above the podset topology {HOST}")
    assert place(cluster(node("n1", ready=False)), 1, 1, "required", RACK).reason == f"no topology domains at level: {RACK}"
    with pytest.raises(ValueError, match="takes no level"):
        place(lv, 1, 1, "unconstrained", RACK)
    with pytest.raises(ValueError, match="needs a level"):
        place(lv, 1, 1, "preferred")
    with pytest.raises(ValueError, match="multiple of slice_size"):
        place(lv, 5, 1, "required", BLOCK, slice_level=RACK, slice_size=2)
    with pytest.raises(ValueError, match="may only be the lowest"):
        cluster(node("n1"), levels=(HOST, RACK))
    with pytest.raises(ValueError, match="listed twice"):
        cluster(node("n1"), node("n1"))


def test_count_zero_fits_with_no_domains() -> None:
    result = place(required_racks(), 0, 2, "required", RACK)
    assert result.fits and result.domains == ()


# ----------------------------------------------------------------------------- properties


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[KueueLeaves, int, int, str, str | None]:
    blocks = draw(st.integers(1, 3))
    racks = draw(st.integers(1, 3))
    per_rack = draw(st.integers(1, 3))
    hostname = draw(st.booleans())
    nodes = []
    for b in range(blocks):
        for r in range(racks):
            for n in range(per_rack):
                name = f"n{b}{r}{n}"
                gpu = draw(st.sampled_from([4, 8]))
                nodes.append(node(name, f"b{b}", f"b{b}r{r}", gpu=gpu, free=draw(st.integers(0, gpu)),
                                  pods=draw(st.integers(1, 12)), ready=draw(st.integers(0, 9)) > 0))
    levels = LEVELS if hostname else (BLOCK, RACK)
    lv = cluster(*nodes, levels=levels)
    mode = draw(st.sampled_from(["required", "preferred", "unconstrained"]))
    level = None if mode == "unconstrained" else draw(st.sampled_from(levels))
    return lv, draw(st.integers(1, 24)), draw(st.integers(1, 3)), mode, level


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_any_placement_respects_capacity_count_and_domain(case: tuple[KueueLeaves, int, int, str, str | None]) -> None:
    lv, count, gpus, mode, level = case
    if lv.num_leaves == 0:
        return
    before = lv.free.copy()
    cap = lv.capacity_for({GPU: gpus})
    result = place(lv, count, gpus, mode, level)
    assert np.array_equal(lv.free, before)
    level_idx = len(lv.levels) - 1 if level is None else lv.levels.index(level)
    prefix = level_idx + 1
    domain_caps: dict[tuple[str, ...], int] = {}
    for i, path in enumerate(lv.paths):
        domain_caps[path[:prefix]] = domain_caps.get(path[:prefix], 0) + int(cap[i])
    if not result.fits:
        if mode == "required":
            assert max(domain_caps.values()) < count
        else:
            assert int(cap.sum()) < count
        return
    assert int(result.leaf_counts.sum()) == count
    assert np.all(result.leaf_counts > 0) and np.all(result.leaf_counts <= cap[result.leaf_indices])
    assert [c for _, c in result.domains] == list(result.leaf_counts)
    used = {lv.paths[i][:prefix] for i in result.leaf_indices}
    if mode == "required":
        # one domain of the level, and the smallest one that holds the count
        assert len(used) == 1
        assert domain_caps[used.pop()] == min(c for c in domain_caps.values() if c >= count)
    elif mode == "preferred" and max(domain_caps.values()) >= count:
        assert len(used) == 1 and result.fit_level == level
    elif mode == "unconstrained" and int(cap.max()) >= count:
        assert len(result.leaf_indices) == 1 and cap[result.leaf_indices[0]] == cap[cap >= count].min()


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.integers(1, 12))
def test_second_podset_never_overcommits_what_the_first_took(case: tuple[KueueLeaves, int, int, str, str | None], second: int) -> None:
    lv, count, gpus, mode, level = case
    if lv.num_leaves == 0:
        return
    podsets = [KueuePodSet("a", count, {GPU: gpus}, mode, level), KueuePodSet("b", second, {GPU: gpus}, mode, level)]  # type: ignore[arg-type]
    result = kueue_place_workload(lv, podsets, topology_name="t")
    if not result.fits:
        return
    taken = np.zeros(lv.num_leaves, dtype=np.int64)
    for _, r in result.podsets:
        np.add.at(taken, r.leaf_indices, r.leaf_counts)
    assert np.all(taken <= lv.capacity_for({GPU: gpus}))


# ----------------------------------------------------------------------------- a slow twin


class _Dom:
    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values
        self.children: list[_Dom] = []
        self.pods = 0
        self.slices = 0
        self.leaf = -1


def twin_place(lv: KueueLeaves, count: int, per_pod: dict[str, int], mode: str, level: str | None,
               slice_level: str | None = None, slice_size: int = 1) -> list[tuple[tuple[str, ...], int]] | None:
    """The rules written out domain by domain, with Python objects and sorts: slow, plain."""
    cap = lv.capacity_for(per_pod)
    last = len(lv.levels) - 1
    by_level: list[dict[tuple[str, ...], _Dom]] = [{} for _ in lv.levels]
    for i, path in enumerate(lv.paths):
        for depth in range(last + 1):
            key = path[: depth + 1]
            if key not in by_level[depth]:
                by_level[depth][key] = _Dom(key)
                if depth:
                    by_level[depth - 1][path[:depth]].children.append(by_level[depth][key])
        by_level[last][path].leaf, by_level[last][path].pods = i, int(cap[i])
    slice_idx = last if slice_level is None else lv.levels.index(slice_level)
    for depth in range(last, -1, -1):
        for d in by_level[depth].values():
            if d.children:
                d.pods = sum(c.pods for c in d.children)
            d.slices = d.pods // slice_size if depth == slice_idx else sum(c.slices for c in d.children) if depth < slice_idx else 0
    lfc = mode == "unconstrained"

    def ordered(ds: list[_Dom]) -> list[_Dom]:
        return sorted(ds, key=lambda d: (d.slices if lfc else -d.slices, d.pods, d.values))

    def best_fit(ds: list[_Dom], need: int, amount: str) -> _Dom:
        best = ds[0]
        for d in ds:
            if getattr(d, amount) >= need and getattr(d, amount) < getattr(best, amount):
                best = d
        return best

    def update(ds: list[_Dom], need: int, amount: str) -> list[tuple[_Dom, int]]:
        out = []
        for i, d in enumerate(ds):
            if not lfc and getattr(d, amount) >= need:
                d = best_fit(ds[i:], need, amount)
            if getattr(d, amount) >= need:
                return [*out, (d, need)]
            out.append((d, getattr(d, amount)))
            need -= getattr(d, amount)
        raise AssertionError("the chosen domains cannot hold the count")

    need = count // slice_size
    search = last if lfc else lv.levels.index(level)  # type: ignore[arg-type]
    while True:
        ds = ordered(list(by_level[search].values()))
        if lfc and any(d.slices >= need for d in ds):
            chosen = [next(d for d in ds if d.slices >= need)]
            break
        if not lfc and ds[0].slices >= need:
            chosen = [best_fit(ds, need, "slices")]
            break
        if mode == "required":
            return None
        if search > 0 and not lfc:
            search -= 1
            continue
        chosen, left = [], need
        for i, d in enumerate(ds):
            if left <= 0:
                break
            if not lfc and d.slices >= left:
                d = best_fit(ds[i:], left, "slices")
            chosen.append(d)
            left -= d.slices
        if left > 0:
            return None
        break
    picked = update(chosen, need, "slices")
    depth = search
    while depth < min(last, slice_idx):
        picked = update(ordered([c for d, _ in picked for c in d.children]), need, "slices")
        depth += 1
    picked = [(d, n * slice_size) for d, n in picked]
    while depth < last:
        picked = [pair for d, n in picked for pair in update(ordered(d.children), n, "pods")]
        depth += 1
    out = sorted((d.values, n) for d, n in picked if n > 0)
    start = last if lv.hostname_lowest else 0
    return [(values[start:], n) for values, n in out]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([None, 1, 2, 3]))
def test_the_array_implementation_matches_its_slow_twin(case: tuple[KueueLeaves, int, int, str, str | None], size: int | None) -> None:
    lv, count, gpus, mode, level = case
    if lv.num_leaves == 0:
        return
    kw: dict[str, object] = {}
    if size is not None:
        # slices at the level below the requested one (or the same one, at the bottom)
        top = len(lv.levels) - 1 if level is None else lv.levels.index(level)
        kw = {"slice_level": lv.levels[min(top + 1, len(lv.levels) - 1)], "slice_size": size}
        count = max(size, count - count % size)
    result = place(lv, count, gpus, mode, level, **kw)
    expected = twin_place(lv, count, {GPU: gpus}, mode, level, **kw)  # type: ignore[arg-type]
    assert (list(result.domains) if result.fits else None) == expected


# ----------------------------------------------------------------------------- from a snapshot


def walk_snapshot() -> Snapshot:
    """``walk_cluster`` as an Atoll snapshot (free GPUs as there, 1 GPU per pod)."""
    frees = {"n11": 4, "n12": 3, "n21": 2, "n22": 2, "n31": 1, "n32": 1, "n41": 3}
    racks = {"n11": ("b1", "r1"), "n12": ("b1", "r1"), "n21": ("b1", "r2"), "n22": ("b1", "r2"),
             "n31": ("b1", "r3"), "n32": ("b1", "r3"), "n41": ("b2", "r4")}
    nodes = [NodeInfo(n, {BLOCK: b, RACK: r, HOST: n}, ResourceVector(8, 64_000, 512_000, 110), ResourceVector(gpu=8 - frees[n]))
             for n, (b, r) in racks.items()]
    return Snapshot("h100", [Level(BLOCK), Level(RACK)], nodes)


def test_leaves_over_a_snapshot_place_as_the_same_nodes_would() -> None:
    snap = walk_snapshot()
    lv = kueue_leaves_from_snapshot(snap, (BLOCK, RACK, HOST))
    per_pod = per_pod_of(ResourceVector(gpu=1, cpu_milli=1_000, pods=1))
    assert per_pod == {"gpu": 1, "cpu_milli": 1_000, "memory_mib": 0}  # the pod slot is Kueue's to add
    result = kueue_place(lv, 9, per_pod, mode="required", level=BLOCK, topology_name="t")
    assert got(result) == got(place(walk_cluster(), 9, 1, "required", BLOCK))
    # the snapshot changes (n11 fully used); after a sync Kueue sees it
    snap.reserve("n11", ResourceVector(gpu=4, pods=1))
    lv.sync_from_snapshot(snap)
    assert list(lv.capacity_for(per_pod)) == [0, 3, 2, 2, 1, 1, 3]
    # grouped leaves when the Kueue Topology stops at rack: r1 = 3, r2 = 4, r3 = 2, r4 = 3
    racks = kueue_leaves_from_snapshot(snap, (BLOCK, RACK))
    assert racks.num_leaves == 4 and racks.leaf_of("n22") == 1
    assert got(kueue_place(racks, 3, per_pod, mode="required", level=RACK, topology_name="t")) == [("b1/r1", 3)]
    with pytest.raises(ValueError, match="not the snapshot's"):
        kueue_leaves_from_snapshot(snap, (RACK, HOST))


# ----------------------------------------------------------------------------- the command

SCENARIOS = Path(__file__).resolve().parents[2] / "config" / "scenarios"

SMALL = """\
topology_name: small
levels: [cloud.example.com/rack, kubernetes.io/hostname]
nodes:
  - name: n1
    labels: {cloud.example.com/rack: r1, kubernetes.io/hostname: n1}
    allocatable: {cpu: "2", memory: 16Gi}
  - name: n2
    labels: {cloud.example.com/rack: r1, kubernetes.io/hostname: n2}
    allocatable: {cpu: "2", memory: 16Gi, pods: 2}
request:
  count: 5
  per_pod: {cpu: 500m, memory: 3Gi}
  required_level: cloud.example.com/rack
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return str(path)


def test_command_prints_kueues_assignment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # n1: cpu 2000m / 500m = 4, memory 16Gi / 3Gi = 5, pods 110 (default) → 4; n2: its 2 pod slots → 2.
    # Rack r1 holds 6 ≥ 5: n1 4 whole, then n2 the last 1.
    assert main(["kueue-bestfit", write(tmp_path, SMALL)]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "fits": True,
        "assignment": {"levels": [HOST], "domains": [{"values": ["n1"], "count": 4}, {"values": ["n2"], "count": 1}]},
    }


def test_command_reports_kueues_message_and_exit_code_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, SMALL.replace("count: 5", "count: 7"))
    assert main(["kueue-bestfit", path]) == 1
    assert json.loads(capsys.readouterr().out) == {"fits": False, "reason": 'topology "small" allows to fit only 6 out of 7 pod(s)'}
    assert run_kueue_bestfit_scenario(path)["fits"] is False


def test_command_through_the_atoll_dispatcher(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grouped = SMALL.replace(", kubernetes.io/hostname]", "]").replace("count: 5", "count: 6\n  unconstrained: true").replace(
        "  required_level: cloud.example.com/rack\n", "")
    assert atoll_main(["baseline", "kueue-bestfit", write(tmp_path, grouped)]) == 0
    # one leaf r1 = n1 + n2 summed: cpu 4000m / 500m = 8, memory 32Gi / 3Gi = 10, pods 112 → 8
    assert json.loads(capsys.readouterr().out)["assignment"] == {"levels": [RACK], "domains": [{"values": ["r1"], "count": 6}]}


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("  required_level: cloud.example.com/rack\n", "", "request: set exactly one of required_level, preferred_level, unconstrained"),
        ("  required_level:", "  preferred_level: cloud.example.com/rack\n  required_level:",
         "request: set exactly one of required_level, preferred_level, unconstrained"),
        ('cpu: "2", memory: 16Gi, pods: 2', 'cpu: lots, memory: 16Gi, pods: 2',
         "nodes[n2].allocatable.cpu: 'lots' is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)"),
        ("per_pod: {cpu: 500m", "per_pod: {cpu: -1", "request.per_pod.cpu: -1 must not be negative"),
        ("    allocatable: {cpu: \"2\", memory: 16Gi}\n", "    alocatable: {cpu: \"2\"}\n",
         "nodes[n1].alocatable: unknown key"),
        ("required_level: cloud.example.com/rack", "required_level: zone",
         "request.required_level: 'zone' is not one of levels ['cloud.example.com/rack', 'kubernetes.io/hostname']"),
        ("name: n2", "name: n1", "nodes: node name 'n1' is listed twice"),
        ("count: 5", "count: 0", "request.count: expected a number ≥ 1"),
        ("levels: [cloud.example.com/rack, kubernetes.io/hostname]", "levels: [kubernetes.io/hostname, cloud.example.com/rack]",
         "levels: kubernetes.io/hostname may only be the lowest level"),
        ("count: 5", "count: 5\n  slice_size: 2", "request: slice_level and slice_size go together"),
        ("topology_name: small\n", "", "topology_name: missing: a required key"),
    ],
)
def test_bad_scenarios_name_the_file_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, message: str) -> None:
    assert old in SMALL
    path = write(tmp_path, SMALL.replace(old, new))
    assert main(["kueue-bestfit", path]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {message}" in err, err


@pytest.mark.parametrize(
    ("gpus", "message"),
    [('"1e30"', "nvidia.com/gpu: '1e30' exceeds the limit of 4096"),
     ("5000", "nvidia.com/gpu: 5000 exceeds the limit of 4096"),
     ('"²"', "nvidia.com/gpu: '²' is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)")],
)
def test_quantities_are_bounded_as_the_controller_bounds_them(tmp_path: Path, capsys: pytest.CaptureFixture[str], gpus: str,
                                                               message: str) -> None:
    path = write(tmp_path, SMALL.replace('memory: 16Gi, pods: 2}', f'memory: 16Gi, pods: 2, nvidia.com/gpu: {gpus}}}').replace(
        "per_pod: {cpu: 500m", f"per_pod: {{nvidia.com/gpu: {gpus}, cpu: 500m"))
    assert atoll_main(["baseline", "kueue-bestfit", path]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nodes[n2].allocatable" in err and "request.per_pod" in err
    assert err.count(message) == 2, err


@pytest.mark.parametrize(("old", "new", "message"), [
    ("memory: 16Gi, pods: 2}", "memory: 2Pi, pods: 2}", "nodes[n2].allocatable: memory: '2Pi' exceeds the limit of 1125899906842624 bytes"),
    ('cpu: "2", memory: 16Gi, pods: 2', 'cpu: "2e6", memory: 16Gi, pods: 2',
     "nodes[n2].allocatable: cpu: '2e6' exceeds the limit of 1000000000 milli-cores"),
    ("pods: 2}", "pods: 2000000}", "nodes[n2].allocatable: pods: 2000000 exceeds the limit of 1000000 pods"),
    ("count: 5", "count: 1000000000000000000000000000000", "request.count: expected a number ≤ 1000000"),
])
def test_every_resource_and_the_count_have_the_controllers_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str,
                                                                  new: str, message: str) -> None:
    assert old in SMALL
    assert main(["kueue-bestfit", write(tmp_path, SMALL.replace(old, new))]) == 2
    assert message in capsys.readouterr().err


def test_a_fractional_amount_is_rounded_up_as_kubernetes_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 0.0034Ti is 3738339534.4 bytes, rounded up (not refused as a fraction); n1 holds 4, n2 its 2 pod slots
    assert main(["kueue-bestfit", write(tmp_path, SMALL.replace("memory: 3Gi", "memory: 0.0034Ti"))]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True


@pytest.mark.parametrize(
    ("text", "message"),
    [("request: [unclosed\n", "not valid YAML"), ("- a list\n", "expected a mapping with topology_name")],
)
def test_unreadable_scenarios(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    assert main(["kueue-bestfit", write(tmp_path, text)]) == 2
    assert message in capsys.readouterr().err
    assert main(["kueue-bestfit", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: cannot read" in capsys.readouterr().err
    with pytest.raises(ScenarioError, match="not valid YAML|expected a mapping"):
        run_kueue_bestfit_scenario(tmp_path / "scenario.yaml")


def test_unknown_baseline_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kueue-worstfit", write(tmp_path, SMALL)]) == 2
    assert "BASELINE: expected one of 'kueue-bestfit', got 'kueue-worstfit'" in capsys.readouterr().err
    assert main([]) == 2


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # racks (4-GPU pods) r1 4, r2 1 + 2 = 3, r3 2 (one node NotReady): best fit r2
        ("required-rack", {"fits": True, "assignment": {"levels": [HOST], "domains": [
            {"values": ["h100-r2-a"], "count": 1}, {"values": ["h100-r2-b"], "count": 2}]}}),
        # worked out in the file's header
        ("preferred-fallback", {"fits": True, "assignment": {"levels": [HOST], "domains": [
            {"values": [n], "count": 2} for n in ("n1", "n2", "n3", "n4", "n10")]}}),
        ("no-fit", {"fits": False, "reason": (
            'topology "default" allows to fit only 2 out of 4 pod(s). Total nodes: 7; excluded: missingTopologyLabel: 1, '
            'resource "nvidia.com/gpu": 1, taint "gpu.example.com/xid=79:NoSchedule": 1, unschedulable: 1')}),
    ],
)
def test_bundled_scenarios(name: str, expected: dict[str, object]) -> None:
    assert run_kueue_bestfit_scenario(SCENARIOS / f"kueue-bestfit-{name}.yaml") == expected

"""Atoll against the ``kueue-bestfit`` baseline on the same sliced and unconstrained requests:
whenever Kueue's TAS finds a placement, Atoll finds one too, and both keep the constraints the
annotations ask for (not necessarily the same nodes). Groups, which the baseline does not model,
are checked on Kueue's own test shapes."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.topology.strategies import snapshots
from tests.topology.test_finder import CLIQUE, fabric
from tests.topology.test_vocabulary import assert_keeps_its_constraints
from topology import PlacementRequest, PodSetRequest, ResourceVector, SliceLayer, Snapshot, find_placement
from topology._kueue_tas import KueueResult, kueue_leaves_from_snapshot, kueue_place, per_pod_of


def kueue_keeps(snap: Snapshot, result: KueueResult, ps: PodSetRequest, level: str | None) -> None:
    """Kueue's own answer keeps the constraints too (the comparison is only fair if it does)."""
    per_leaf = dict(zip(result.leaf_indices.tolist(), result.leaf_counts.tolist()))
    assert sum(per_leaf.values()) == ps.pods
    for lv_label in [layer.level for layer in ps.slices] + ([level] if level else []):
        lvl = snap.level_index(lv_label)
        counts: Counter[int] = Counter()
        for leaf, k in per_leaf.items():
            counts[snap.domain_of(lvl, leaf)] += k
        if lv_label == level:
            assert len(counts) == 1
        else:
            assert all(v % ps.slices[0].size == 0 for v in counts.values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_atoll_places_whatever_kueue_places_under_the_same_slice_and_mode_constraints(data: st.DataObject) -> None:
    snap = data.draw(snapshots())
    labels = list(snap.level_labels)
    mode = data.draw(st.sampled_from(["required", "preferred", "unconstrained"]))
    top = 0 if mode == "unconstrained" else data.draw(st.integers(0, len(labels) - 1))
    slice_level = labels[data.draw(st.integers(top, len(labels) - 1))]
    size = data.draw(st.integers(1, 4))
    count = size * data.draw(st.integers(1, 6))
    vector = ResourceVector(data.draw(st.integers(0, 4)), data.draw(st.sampled_from([0, 8000])), 0, 0)
    level = None if mode == "unconstrained" else labels[top]
    kueue = kueue_place(kueue_leaves_from_snapshot(snap, labels), count, per_pod_of(vector), mode=mode, level=level,  # type: ignore[arg-type]
                        topology_name="t", slice_level=slice_level, slice_size=size)
    kw = {"required": {"required_level": level}, "preferred": {"preferred_level": level}, "unconstrained": {"unconstrained": True}}[mode]
    ps = PodSetRequest("main", count, vector, slices=(SliceLayer(slice_level, size),), **kw)  # type: ignore[arg-type]
    request = PlacementRequest((ps,))
    atoll = find_placement(snap, request)
    event(f"kueue fits: {kueue.fits}, atoll fits: {atoll.fits}")
    if kueue.fits:
        kueue_keeps(snap, kueue, ps, level if mode == "required" else None)
        assert atoll.fits, f"Kueue placed it, Atoll did not: {atoll.reason}"
    if atoll.fits:
        assert_keeps_its_constraints(snap, request, atoll)


def test_kueues_slice_case_from_the_baseline_tests() -> None:
    # the baseline's own case: 4 pods in slices of 4 inside one island; Atoll keeps the slice whole too
    snap = fabric({"s0c0n0": 1, "s0c0n1": 2})
    req = PlacementRequest((PodSetRequest("w", 4, ResourceVector(gpu=1), required_level=CLIQUE, slices=(SliceLayer(CLIQUE, 4),)),))
    p = find_placement(snap, req)
    assert p.fits and len(p.podsets[0].slices) == 1 and p.podsets[0].slices[0].pods == 4


def test_a_leader_worker_group_lands_in_one_domain_as_kueue_requires() -> None:
    # Kueue's "podset group" shape: leader of 1 pod + workers, both required at the island level,
    # placed in one pass; the only island with room for both is s1c3.
    used = {f"s{s}c{c}n{i}": 4 for s in range(2) for c in range(4) for i in range(4) if (s, c) != (1, 3)}
    used.update({"s0c0n0": 0, "s0c0n1": 0})  # s0c0 has 2 free nodes: the workers fit, not with the leader's GPU
    snap = fabric(used)
    leader = PodSetRequest("leader", 1, ResourceVector(gpu=4), required_level=CLIQUE, group="g")
    workers = PodSetRequest("workers", 2, ResourceVector(gpu=4), required_level=CLIQUE, group="g")
    p = find_placement(snap, PlacementRequest((leader, workers)))
    assert p.fits
    assert {n[:4] for ps in p.podsets for n in ps.nodes} == {"s1c3"}

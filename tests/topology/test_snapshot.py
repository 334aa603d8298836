"""Snapshot: path order, contiguous domains, O(1) updates, forks, health."""

from __future__ import annotations

import numpy as np
import pytest

from topology import HOSTNAME_LABEL, Level, NodeInfo, ResourceVector, Snapshot, Taint, Toleration, fragmentation_index

RACK = "rack"
ALLOC = ResourceVector(8, 64000, 512000, 110)


def node(name: str, rack: str, used: int = 0, **kw: object) -> NodeInfo:
    return NodeInfo(name, {RACK: rack}, ALLOC, ResourceVector(gpu=used), **kw)  # type: ignore[arg-type]


def test_nodes_are_sorted_by_path_and_domains_are_contiguous() -> None:
    snap = Snapshot("f", [Level(RACK)], [node("z", "r1"), node("a", "r2"), node("m", "r1")])
    assert snap.node_names == ("m", "z", "a")
    assert snap.level_labels == (RACK, HOSTNAME_LABEL)
    assert snap.num_domains(0) == 2
    assert snap.domain_range(0, 0) == (0, 2) and snap.domain_range(0, 1) == (2, 3)
    assert snap.domain_path(0, 1) == ("r2",)
    assert snap.domain_path(1, 0) == ("r1", "m")


def test_hostname_as_lowest_level_is_not_duplicated() -> None:
    snap = Snapshot("f", [Level(RACK), Level(HOSTNAME_LABEL, 900, 1)], [node("a", "r1")])
    assert snap.level_labels == (RACK, HOSTNAME_LABEL)
    assert snap.bandwidth_gbps[-1] == 900


def test_update_node_is_in_place_and_detects_structure_changes() -> None:
    snap = Snapshot("f", [Level(RACK)], [node("a", "r1"), node("b", "r1")])
    gen = snap.generation
    assert snap.update_node(node("a", "r1", used=6))
    assert snap.free[0, 0] == 2 and snap.generation == gen + 1
    assert not snap.update_node(node("a", "r9"))  # moved rack: rebuild
    assert not snap.update_node(node("new", "r1"))  # new node: rebuild


def test_fork_isolates_reservations() -> None:
    snap = Snapshot("f", [Level(RACK)], [node("a", "r1")])
    twin = snap.fork()
    twin.reserve("a", ResourceVector(gpu=8, pods=1))
    assert twin.free[0, 0] == 0 and snap.free[0, 0] == 8
    twin.release("a", ResourceVector(gpu=16))
    assert twin.free[0, 0] == 8  # never above allocatable


def test_fork_shares_perf_and_eligibility_until_either_side_writes() -> None:
    snap = Snapshot("f", [Level(RACK)], [node("a", "r1"), node("b", "r1"), node("c", "r2")])
    twin = snap.fork()
    assert twin.eligible is snap.eligible and twin.eligible_token is snap.eligible_token  # a fork copies free only
    token = snap.eligible_token
    twin.exclude(1)
    assert twin.eligible.tolist() == [1, 0, 1] and snap.eligible.tolist() == [1, 1, 1]
    assert snap.eligible_token is token and twin.eligible_token is not token
    other = snap.fork()
    assert snap.update_node(node("c", "r2", ready=False))  # the parent changes after forking: the fork keeps its view
    assert snap.eligible.tolist() == [1, 1, 0] and other.eligible.tolist() == [1, 1, 1]
    assert snap.update_node(node("a", "r1", perf=0.9))
    assert snap.perf[0] == 0.9 and other.perf[0] == 1.0 and twin.perf[0] == 1.0
    before = snap.eligible_token
    assert snap.update_node(node("a", "r1", used=2))  # usage alone: eligibility and its token unchanged
    assert snap.eligible_token is before


def test_a_fork_whose_eligibility_is_replaced_carries_a_token_of_its_own() -> None:
    """Answers kept against ``eligible_token`` are shared by a fork and its parent (the static
    cache is): a fork that narrows its eligibility (a class's speed floor) must not read the
    parent's, and an unchanged one may."""
    error = Taint("nvidia.com/gpu-error", "xid79", "NoExecute")
    tol = [Toleration("nvidia.com/gpu-error", "Exists", effect="NoExecute")]
    snap = Snapshot("f", [Level(RACK)], [node("fast", "r1"), node("slow", "r1", perf=0.5), node("slow-tainted", "r2", perf=0.5, taints=(error,))])
    idx, token = snap.node_index, snap.eligible_token
    same = snap.fork()
    same.restrict(snap.perf >= 0.1)  # every node meets it: nothing ruled out, the answers kept stay good
    assert same.eligible_token is token
    fast = snap.fork()
    fast.restrict(snap.perf >= 1.0)
    assert fast.eligible.tolist() == [1, 0, 0] and fast.eligible_token is not token
    assert snap.eligible.tolist() == [1, 1, 0] and snap.eligible_token is token  # the parent keeps its view and its token
    assert fast.eligible_for(tol)[idx["slow-tainted"]] == 0 and snap.eligible_for(tol)[idx["slow-tainted"]] == 1  # ruled out, tolerated or not
    opened = snap.fork()
    opened.set_eligible(np.ones(3, dtype=np.uint8))
    assert opened.eligible_token is not token and snap.eligible.tolist() == [1, 1, 0]


def test_domains_among_nodes_are_counted_in_path_order() -> None:
    snap = Snapshot("f", [Level(RACK)], [node(f"n{i}", f"r{i // 3}") for i in range(9)])
    for nodes in ([], [0], [0, 1, 2], [0, 3], [2, 3, 8], list(range(9))):
        idx = np.array(nodes, dtype=np.int64)
        assert snap.count_domains(0, idx) == np.unique(snap.node_dom[0, idx]).size


def test_health_ready_cordon_and_taints() -> None:
    nodes = [
        node("ok", "r"),
        node("tainted", "r", taints=(Taint("nvidia.com/gpu-error", "xid79", "NoExecute"),)),
        node("soft", "r", taints=(Taint("note", "", "PreferNoSchedule"),)),
        node("down", "r", ready=False),
    ]
    snap = Snapshot("f", [Level(RACK)], nodes)
    healthy = {n: bool(snap.eligible[snap.node_index[n]]) for n in snap.node_names}
    assert healthy == {"ok": True, "tainted": False, "soft": True, "down": False}
    tolerant = Snapshot("f", [Level(RACK)], nodes, tolerations=[Toleration("nvidia.com/gpu-error", "Exists")])
    assert tolerant.eligible[tolerant.node_index["tainted"]] == 1


def test_draining_node_takes_no_new_placement_and_keeps_its_pods() -> None:
    from policies import PodSetSpec, Profile, decide

    error = Taint("nvidia.com/gpu-error", "xid79", "NoExecute")
    nodes = [node("a1", "ra", draining=True), node("a2", "ra", draining=True), node("a3", "ra", used=2, draining=True, taints=(error,)),
             node("b1", "rb", used=4), node("b2", "rb")]
    snap = Snapshot("f", [Level(RACK)], nodes)
    idx = snap.node_index
    assert snap.eligible[idx["a1"]] == 0 and snap.free[idx["a3"], 0] == 6  # its running pods still count; it takes no new one
    assert snap.eligible_for([Toleration("nvidia.com/gpu-error", "Exists")])[idx["a3"]] == 0  # no toleration lifts a drain
    gang = [PodSetSpec("main", 2, ResourceVector(gpu=8))]
    rack = Profile(requiredLevel=RACK)
    assert decide(snap, gang, profile_name="rack", profile=rack, now=0.0).outcome == "wait"  # ra is free but draining; rb is half used
    one = decide(snap, [PodSetSpec("main", 1, ResourceVector(gpu=6))], profile_name="rack", profile=rack, now=0.0)
    assert one.outcome == "admit" and one.placement is not None and one.placement.podsets[0].nodes == ("b2",)
    assert snap.update_node(node("a1", "ra")) and snap.update_node(node("a2", "ra"))  # their maintenance is over: label removed
    back = decide(snap, gang, profile_name="rack", profile=rack, now=0.0)
    assert back.outcome == "admit" and back.placement is not None and set(back.placement.podsets[0].nodes) == {"a1", "a2"}


def test_pod_tolerations_lift_only_taints_and_excluded_nodes_stay_out() -> None:
    error = Taint("nvidia.com/gpu-error", "xid79", "NoExecute")
    nodes = [node("tainted", "r", taints=(error,)), node("down", "r", ready=False, taints=(error,)), node("ok", "r")]
    snap = Snapshot("f", [Level(RACK)], nodes)
    idx = snap.node_index
    tol = [Toleration("nvidia.com/gpu-error", "Exists", effect="NoExecute")]
    assert snap.eligible_for(tol)[idx["tainted"]] == 1 and snap.eligible_for(tol)[idx["down"]] == 0
    assert snap.eligible[idx["tainted"]] == 0  # the snapshot's own view is untouched
    assert snap.eligible_for([Toleration("nvidia.com/gpu-error", "Exists", effect="NoSchedule")])[idx["tainted"]] == 0
    twin = snap.fork()
    twin.exclude(idx["tainted"])  # e.g. the pods' nodeSelector rules it out
    assert twin.eligible_for(tol)[idx["tainted"]] == 0 and snap.eligible_for(tol)[idx["tainted"]] == 1
    assert snap.update_node(node("tainted", "r"))  # the taint is removed
    assert snap.eligible[idx["tainted"]] == 1 and not snap.taint_blocked


def test_usage_never_goes_negative() -> None:
    snap = Snapshot("f", [Level(RACK)], [node("a", "r", used=12)])
    assert (snap.free >= 0).all()


def test_fragmentation_index() -> None:
    # r1: 8 free (one 8-GPU gang), r2: 6 free (none) → 1 − 8/14
    snap = Snapshot("f", [Level(RACK)], [node("a", "r1"), node("b", "r2", used=2)])
    assert fragmentation_index(snap, RACK, 8) == pytest.approx(1 - 8 / 14)
    assert fragmentation_index(snap, RACK, 2) == 0.0
    full = Snapshot("f", [Level(RACK)], [node("a", "r1", used=8)])
    assert fragmentation_index(full, RACK) == 0.0
    with pytest.raises(ValueError):
        fragmentation_index(snap, RACK, 0)


def test_duplicate_node_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        Snapshot("f", [Level(RACK)], [node("a", "r1"), node("a", "r2")])


def test_arrays_have_fixed_dtypes() -> None:
    snap = Snapshot("f", [Level(RACK)], [node("a", "r1")])
    assert snap.free.dtype == np.int64 and snap.bounds.dtype == np.int32 and snap.perf.dtype == np.float64


def test_remembered_answers_are_computed_once_shared_by_forks_and_dropped_when_allocatable_changes() -> None:
    snap = Snapshot("f", [Level(RACK)], [node("a", "r1"), node("b", "r1")])
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    held = object()
    assert snap.remember("m", id(held), held, compute) == 1
    assert snap.fork().remember("m", id(held), held, compute) == 1  # a fork reads the same memo
    assert snap.update_node(node("a", "r1", used=2))  # usage only: still kept
    assert snap.remember("m", id(held), held, compute) == 1
    assert snap.update_node(NodeInfo("a", {RACK: "r1"}, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1000, pods=10)))
    assert snap.remember("m", id(held), held, compute) == 2  # allocatable changed: asked again

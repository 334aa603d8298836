"""The compared policies: count-only first fit scatters, random is seeded, Atoll goes through
``policies.decide`` (one island, wait with backoff, relax on time), names are checked."""

from __future__ import annotations

import numpy as np
import pytest

from admission.simulator._deployed import DeployedAtoll
from admission.simulator._policies import (
    AtollPolicy,
    CountOnlyPolicy,
    JobShape,
    KueueBestFitPolicy,
    PolicyError,
    RandomPolicy,
    fits_one_island,
    island_level_of,
    make_policies,
)
from policies import WaitState, load_profiles
from topology import ClusterModel, Level, NodeInfo, ResourceVector, Snapshot

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
DOC = load_profiles(f"""
defaultProfile: elastic
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}}}}
  elastic: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 300, retry: {{initialSeconds: 10, maxSeconds: 60}}}}
""")


def snapshot(used_first_node: int = 0) -> Snapshot:
    """2 SUs × 2 islands × 4 nodes × 4 GPUs; ``used_first_node`` GPUs taken on each island's first node."""
    nodes = []
    for u in range(2):
        for c in range(2):
            for n in range(4):
                used = ResourceVector(gpu=used_first_node, pods=1 if used_first_node else 0) if n == 0 else ResourceVector()
                nodes.append(NodeInfo(f"u{u}c{c}n{n}", {SU: f"u{u}", CLIQUE: f"u{u}c{c}"}, ResourceVector(4, 1000, 1000, 10), used))
    return Snapshot("f", [Level(SU, 50), Level(CLIQUE, 1800)], nodes)


def shape(pods: int, gpus: int = 4) -> JobShape:
    return JobShape(pods, ResourceVector(gpu=gpus, pods=1))


def islands_of(snap: Snapshot, nodes: np.ndarray) -> int:
    return int(np.unique(snap.node_dom[snap.level_index(CLIQUE), nodes]).size)


def test_count_only_takes_the_first_nodes_with_room_and_crosses_islands() -> None:
    snap = snapshot()
    for i in (0, 2, 5):  # holes early in node order
        snap.reserve(i, ResourceVector(gpu=4, pods=1))
    att = CountOnlyPolicy().attempt(snap, shape(4), now=0.0, wait=WaitState())
    assert att.outcome == "admit"
    assert att.nodes.tolist() == [1, 3, 4, 6] and att.pods.tolist() == [1, 1, 1, 1]
    assert islands_of(snap, att.nodes) == 2


def test_count_only_packs_small_pods_onto_one_node() -> None:
    att = CountOnlyPolicy().attempt(snapshot(), shape(3, gpus=1), now=0.0, wait=WaitState())
    assert att.nodes.tolist() == [0] and att.pods.tolist() == [3]


def test_count_only_reports_nofit_when_the_count_does_not_fit() -> None:
    snap = snapshot(used_first_node=4)
    att = CountOnlyPolicy().attempt(snap, shape(13), now=0.0, wait=WaitState())
    assert att.outcome == "nofit" and "12 of 13" in att.message


def test_random_is_seeded_and_respects_free_capacity() -> None:
    snap = snapshot(used_first_node=4)
    a = [RandomPolicy(7).attempt(snap, shape(5), now=0.0, wait=WaitState()).nodes.tolist() for _ in range(2)]
    assert a[0] == a[1]
    draws = {tuple(RandomPolicy(s).attempt(snap, shape(5), now=0.0, wait=WaitState()).nodes.tolist()) for s in range(6)}
    assert len(draws) > 1
    for nodes in draws:
        assert not {0, 4, 8, 12} & set(nodes)  # the full nodes are never chosen


def model(used: dict[str, int] | None = None) -> ClusterModel:
    """The ``snapshot()`` fabric as a cluster model: ``used`` GPUs per node name."""
    used = used or {}
    return ClusterModel.model_validate({"name": "m", "flavors": [{
        "name": "f", "topology": "t", "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "1", "memory": "1000Mi", "pods": 10},
        "nodes": [{"name": f"u{u}c{c}n{n}", "labels": {SU: f"u{u}", CLIQUE: f"u{u}c{c}"}, "used": {"nvidia.com/gpu": used.get(f"u{u}c{c}n{n}", 0)}}
                  for u in range(2) for c in range(2) for n in range(4)]}]})


def deployed(name: str, used: dict[str, int] | None = None) -> DeployedAtoll:
    (policy,) = make_policies([name], DOC, seed=0)
    assert isinstance(policy, AtollPolicy)
    return DeployedAtoll(policy.name, policy.profile_name, policy.document(), model(used))


FIRST_NODES = {f"u{u}c{c}n0": 4 for u in range(2) for c in range(2)}


def test_atoll_strict_admits_inside_one_island() -> None:
    atoll = deployed("atoll-strict", {"u0c0n0": 4, "u0c1n1": 4})
    v = atoll.decide(0, atoll.workload(0, 0, 4, ResourceVector(gpu=4, pods=1), "training"), 0.0)
    assert v.outcome == "admit" and v.placements[0].islands == 1


def test_atoll_strict_waits_with_the_profile_backoff() -> None:
    atoll = deployed("atoll-strict", FIRST_NODES)
    obj = atoll.workload(0, 0, 4, ResourceVector(gpu=4, pods=1), "training")
    delays = [atoll.decide(0, obj, 100.0 + k).retry_after for k in range(4)]  # Kueue counts each Retry on the Workload
    assert delays == [30, 60, 120, 120]


def test_atoll_elastic_spans_only_after_the_relax_time() -> None:
    atoll = deployed("atoll-elastic", FIRST_NODES)  # every island has 3 free nodes: a 4-node gang must span
    obj = atoll.workload(0, 0, 4, ResourceVector(gpu=4, pods=1), "training")
    first = atoll.decide(0, obj, 0.0)
    before = atoll.decide(0, obj, 299.0)
    after = atoll.decide(0, obj, 300.0)
    assert first.outcome == "wait" and before.outcome == "wait" and before.retry_after == 1  # capped at the remaining relax time
    assert after.outcome == "admit" and after.relaxed and after.placements[0].islands == 2


def test_atoll_places_a_gang_no_island_holds_in_one_su_and_rejects_only_what_never_fits_the_flavor() -> None:
    atoll = deployed("atoll-strict")
    v = atoll.decide(0, atoll.workload(0, 0, 5, ResourceVector(gpu=4, pods=1), "training"), 0.0)
    assert v.outcome == "admit" and v.placements[0].domain_level == SU and "larger than every" in v.message
    v = atoll.decide(1, atoll.workload(1, 0, 17, ResourceVector(gpu=4, pods=1), "training"), 0.0)
    assert v.outcome == "reject" and "never fits" in v.message


def test_fits_one_island_uses_the_empty_flavor() -> None:
    snap = snapshot(used_first_node=4)
    assert fits_one_island(snap, shape(4), CLIQUE)
    assert not fits_one_island(snap, shape(5), CLIQUE)


def test_island_level_falls_back_to_the_level_above_the_node() -> None:
    snap = snapshot()
    assert island_level_of(snap, CLIQUE) == CLIQUE
    assert island_level_of(snap, "example.com/absent") == CLIQUE
    assert island_level_of(snap, None) == CLIQUE


def test_make_policies_names_every_choice_on_a_typo() -> None:
    with pytest.raises(PolicyError) as err:
        make_policies(["count-only", "atoll-strcit"], DOC, seed=0)
    assert "atoll-strcit" in str(err.value) and "atoll-elastic" in str(err.value) and "kueue-bestfit" in str(err.value)


def test_make_policies_builds_each_kind_once_in_order() -> None:
    got = make_policies(["random", "atoll-elastic", "kueue-bestfit", "random", "count-only"], DOC, seed=3)
    assert [p.name for p in got] == ["random", "atoll-elastic", "kueue-bestfit", "count-only"]
    assert isinstance(got[1], AtollPolicy) and got[1].admission_check
    assert isinstance(got[2], KueueBestFitPolicy) and not got[2].admission_check


def test_kueue_bestfit_takes_the_fullest_island_that_still_fits() -> None:
    snap = snapshot()
    for i in (0, 1, 8):  # island u0c0 keeps 2 free nodes, u1c0 keeps 3, the others 4
        snap.reserve(i, ResourceVector(gpu=4, pods=1))
    att = KueueBestFitPolicy(CLIQUE).attempt(snap, shape(2), now=0.0, wait=WaitState())
    assert att.outcome == "admit"
    assert att.nodes.tolist() == [2, 3] and att.pods.tolist() == [1, 1]


def test_kueue_bestfit_climbs_a_level_instead_of_waiting_when_no_island_fits() -> None:
    snap = snapshot(used_first_node=4)  # 3 free nodes per island
    att = KueueBestFitPolicy(CLIQUE).attempt(snap, shape(4), now=0.0, wait=WaitState())
    assert att.outcome == "admit" and islands_of(snap, att.nodes) == 2
    assert len({snap.paths[n][0] for n in att.nodes.tolist()}) == 1  # both islands in one SU
    full = KueueBestFitPolicy(CLIQUE).attempt(snap, shape(13), now=0.0, wait=WaitState())
    assert full.outcome == "nofit" and "allows to fit only 12 out of 13 pod(s)" in full.message


def test_kueue_bestfit_sees_the_simulators_reservations() -> None:
    snap = snapshot()
    policy = KueueBestFitPolicy(CLIQUE)
    first = policy.attempt(snap, shape(4), now=0.0, wait=WaitState())
    for n, k in zip(first.nodes.tolist(), first.pods.tolist()):
        snap.reserve(n, ResourceVector(gpu=4 * k, pods=k))
    second = policy.attempt(snap, shape(4), now=0.0, wait=WaitState())
    assert not set(first.nodes.tolist()) & set(second.nodes.tolist())


def test_kueue_required_keeps_the_job_queued_instead_of_crossing_islands() -> None:
    snap = snapshot(used_first_node=4)  # 3 free nodes per island
    (policy,) = make_policies(["kueue-required"], DOC, seed=0)
    att = policy.attempt(snap, shape(4), now=0.0, wait=WaitState())
    assert policy.name == "kueue-required" and not policy.admission_check
    assert att.outcome == "nofit"
    fits = policy.attempt(snap, shape(3), now=0.0, wait=WaitState())
    assert fits.outcome == "admit" and islands_of(snap, fits.nodes) == 1


def test_kueue_required_asks_a_job_bigger_than_any_island_for_the_lowest_level_that_holds_it() -> None:
    snap = snapshot()
    att = KueueBestFitPolicy(CLIQUE, required=True).attempt(snap, shape(6), now=0.0, wait=WaitState())
    assert att.outcome == "admit" and islands_of(snap, att.nodes) == 2
    assert len({snap.paths[n][0] for n in att.nodes.tolist()}) == 1  # required at the SU level

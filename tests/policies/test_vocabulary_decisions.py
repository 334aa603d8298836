"""Decisions on Kueue's TAS vocabulary: slices on the GB200 model under the bundled strict and
elastic profiles, unconstrained and grouped PodSets, the annotations' errors and notes, and the
profile resolved per flavor before anything is placed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from policies import PodSetSpec, Profile, ProfileLevelError, WaitState, decide, load_profiles_file, podset_spec
from topology import ResourceVector, Snapshot, load_cluster_model

ROOT = Path(__file__).resolve().parents[2]
CLIQUE = "nvidia.com/gpu.clique"
SU = "network.example.com/su"
SLICED = {"kueue.x-k8s.io/podset-slice-required-topology": CLIQUE, "kueue.x-k8s.io/podset-slice-size": "16"}


def gb200(occupied: dict[str, int] | None = None) -> Snapshot:
    flavor = load_cluster_model(ROOT / "config/clusters/gb200-nvl72-superpod.yaml").flavors[0]
    snap = Snapshot(flavor.name, flavor.level_specs(), flavor.build_nodes(), node_level=flavor.node_level())
    for node, gpus in (occupied or {}).items():
        snap.reserve(node, ResourceVector(gpu=gpus))
    return snap


PROFILES = load_profiles_file(ROOT / "config/profiles.yaml")


def pods_per_clique(snap: Snapshot, nodes: tuple[str, ...], pods: tuple[int, ...]) -> Counter[tuple[str, ...]]:
    lvl = snap.level_index(CLIQUE)
    out: Counter[tuple[str, ...]] = Counter()
    for node, k in zip(nodes, pods):
        out[snap.domain_path(lvl, snap.domain_of(lvl, snap.node_index[node]))] += k
    return out


@pytest.mark.parametrize("profile_name", ["strict", "elastic"])
@pytest.mark.parametrize("busy", [False, True])
def test_a_128_gpu_job_in_slices_of_16_puts_a_multiple_of_16_in_every_clique(profile_name: str, busy: bool) -> None:
    snap = gb200()
    # a busy cluster: 2 nodes of every clique taken, so each clique holds exactly one slice
    occupied = {snap.node_names[i]: 4 for i in range(snap.num_nodes) if i % 18 < 2} if busy else {}
    snap = gb200(occupied)
    spec = podset_spec("workers", 32, ResourceVector(gpu=4), SLICED)
    d = decide(snap, [spec], profile_name=profile_name, profile=PROFILES.profiles[profile_name], now=0.0)
    assert d.outcome == "admit", d.message
    ps = d.placement.podsets[0]  # type: ignore[union-attr]
    per_clique = pods_per_clique(snap, ps.nodes, ps.pods_per_node)
    assert sum(per_clique.values()) == 32 and all(v % 16 == 0 for v in per_clique.values()), per_clique
    assert [sl.pods for sl in ps.slices] == [16, 16]
    assert {sl.path for sl in ps.slices} == set(per_clique)
    assert "2 slices of 16 pods, each in one nvidia.com/gpu.clique domain" in d.message
    if profile_name == "elastic":  # never beyond the profile's maxSpanLevel
        assert len({path[:2] for path in per_clique}) == 1


def test_slice_size_5_on_32_pods_is_rejected_with_both_numbers() -> None:
    spec = podset_spec("workers", 32, ResourceVector(gpu=4), {**SLICED, "kueue.x-k8s.io/podset-slice-size": "5"})
    for name in ("strict", "elastic"):
        d = decide(gb200(), [spec], profile_name=name, profile=PROFILES.profiles[name], now=0.0)
        assert d.outcome == "reject"
        assert "count 32 is not a multiple of the slice size 5" in d.message
        assert "kueue.x-k8s.io/podset-slice-size" in d.message


def test_strict_without_slices_places_a_gang_larger_than_an_island_in_one_scalable_unit() -> None:
    snap = gb200()
    d = decide(snap, [PodSetSpec("workers", 32, ResourceVector(gpu=4))], profile_name="strict", profile=PROFILES.profiles["strict"], now=0.0)
    assert d.outcome == "admit" and d.widened_to == SU and d.placement is not None
    ps = d.placement.podsets[0]
    assert sorted(pods_per_clique(snap, ps.nodes, ps.pods_per_node).values()) == [14, 18]  # one island whole, the rest in one more
    assert ps.domain_level == SU and not ps.slices


def test_elastic_waits_for_one_island_when_the_slices_could_share_one() -> None:
    # two slices of 8 fit one island: before relaxAfterSeconds the elastic profile waits for one
    snap = gb200()
    busy = {snap.node_names[i]: 4 for i in range(snap.num_nodes) if i % 18 < 10}  # every clique has 8 free nodes
    snap = gb200(busy)
    spec = podset_spec("workers", 16, ResourceVector(gpu=4), {**SLICED, "kueue.x-k8s.io/podset-slice-size": "8"})
    early = decide(snap, [spec], profile_name="elastic", profile=PROFILES.profiles["elastic"], now=0.0)
    assert early.outcome == "wait" and not early.relaxed
    late = decide(snap, [spec], profile_name="elastic", profile=PROFILES.profiles["elastic"], now=1000.0,
                  wait=WaitState(first_waited_at=0.0))
    assert late.outcome == "admit" and late.relaxed
    assert sorted(pods_per_clique(snap, late.placement.podsets[0].nodes, late.placement.podsets[0].pods_per_node).values()) == [8, 8]  # type: ignore[union-attr]


def test_multi_layer_constraints_from_the_annotation() -> None:
    ann = {"kueue.x-k8s.io/podset-slice-required-topology-constraints":
           '[{"topology": "network.example.com/su", "size": 32}, {"topology": "nvidia.com/gpu.clique", "size": 16}]'}
    spec = podset_spec("workers", 64, ResourceVector(gpu=4), ann)
    d = decide(gb200(), [spec], profile_name="elastic", profile=PROFILES.profiles["elastic"], now=0.0)
    assert d.outcome == "admit", d.message
    ps = d.placement.podsets[0]  # type: ignore[union-attr]
    assert all(v % 16 == 0 for v in pods_per_clique(gb200(), ps.nodes, ps.pods_per_node).values())
    assert [sl.level for sl in ps.slices] == [SU, SU] and [sl.pods for sl in ps.slices] == [32, 32]


def test_unconstrained_ignores_the_profiles_island_and_packs_least_free_first() -> None:
    snap = gb200({"gb200-s0-u0-r0-n00": 3})  # hostnames from the model's generator
    spec = podset_spec("batch", 2, ResourceVector(gpu=1), {"kueue.x-k8s.io/podset-unconstrained-topology": "true"})
    d = decide(snap, [spec], profile_name="strict", profile=PROFILES.profiles["strict"], now=0.0)
    assert d.outcome == "admit"
    assert d.placement.podsets[0].nodes[0] == "gb200-s0-u0-r0-n00"  # type: ignore[union-attr]


def test_leader_and_workers_of_a_group_share_one_island() -> None:
    ann = {"kueue.x-k8s.io/podset-required-topology": CLIQUE, "kueue.x-k8s.io/podset-group-name": "lws"}
    leader = podset_spec("leader", 1, ResourceVector(gpu=0, cpu_milli=4000), ann)
    workers = podset_spec("workers", 17, ResourceVector(gpu=4), ann)
    snap = gb200()
    d = decide(snap, [leader, workers], profile_name="elastic", profile=PROFILES.profiles["elastic"], now=0.0)
    assert d.outcome == "admit", d.message
    cliques = set(pods_per_clique(snap, d.placement.podsets[0].nodes, (1,)))  # type: ignore[union-attr]
    cliques |= set(pods_per_clique(snap, d.placement.podsets[1].nodes, d.placement.podsets[1].pods_per_node))  # type: ignore[union-attr]
    assert len(cliques) == 1


def test_forbidden_combinations_reject_and_unknown_annotations_are_noted() -> None:
    both = podset_spec("w", 4, ResourceVector(gpu=4), {"kueue.x-k8s.io/podset-required-topology": CLIQUE,
                                                       "kueue.x-k8s.io/podset-preferred-topology": CLIQUE})
    d = decide(gb200(), [both], profile_name="elastic", profile=PROFILES.profiles["elastic"], now=0.0)
    assert d.outcome == "reject" and "must not contain more than one topology annotation" in d.message
    odd = podset_spec("w", 4, ResourceVector(gpu=4), {"kueue.x-k8s.io/podset-topology-spreading": "replicas",
                                                      "kueue.x-k8s.io/podset-something-new": "x"})
    d2 = decide(gb200(), [odd], profile_name="elastic", profile=PROFILES.profiles["elastic"], now=0.0)
    assert d2.outcome == "admit"
    assert any("podset-topology-spreading" in n and "not honoured" in n for n in d2.notes)
    assert any("podset-something-new" in n and "ignored" in n for n in d2.notes)


def test_a_lone_group_member_is_rejected_as_kueue_would() -> None:
    ann = {"kueue.x-k8s.io/podset-required-topology": CLIQUE, "kueue.x-k8s.io/podset-group-name": "lws"}
    d = decide(gb200(), [podset_spec("workers", 4, ResourceVector(gpu=4), ann)], profile_name="elastic",
               profile=PROFILES.profiles["elastic"], now=0.0)
    assert d.outcome == "reject" and "exactly 2 PodSets, got 1" in d.message


def test_the_profile_is_resolved_for_the_flavor_first() -> None:
    profile = Profile.model_validate({"preferredLevel": "rack", "flavors": {"gb200": {"preferredLevel": CLIQUE}}})
    d = decide(gb200(), [PodSetSpec("w", 4, ResourceVector(gpu=4))], profile_name="p", profile=profile, now=0.0)
    assert d.outcome == "admit" and d.placement.podsets[0].island_level == CLIQUE  # type: ignore[union-attr]
    with pytest.raises(ProfileLevelError, match="profiles.p.preferredLevel: flavor gb200 has no level 'rack'"):
        decide(gb200(), [PodSetSpec("w", 4, ResourceVector(gpu=4))], profile_name="p",
               profile=Profile.model_validate({"preferredLevel": "rack"}), now=0.0)


@pytest.mark.parametrize("how", ["annotation", "keyword", "profile"])
def test_balanced_placement_shares_a_spanning_gang_evenly(how: str) -> None:
    ann = {"atoll.dev/balanced-placement": "true"} if how == "annotation" else {}
    spec = podset_spec("workers", 64, ResourceVector(gpu=4), ann)
    snap = gb200()
    profile = PROFILES.profiles["elastic"]
    if how == "profile":  # the profiles document's field, as an admin writes it
        profile = Profile.model_validate({**profile.model_dump(by_alias=True, exclude_unset=True), "balancedPlacement": True})
    d = decide(snap, [spec], profile_name="elastic", profile=profile, now=0.0, balanced=how == "keyword")
    assert d.outcome == "admit" and d.relaxed
    ps = d.placement.podsets[0]  # type: ignore[union-attr]
    assert sorted(pods_per_clique(snap, ps.nodes, ps.pods_per_node).values()) == [16, 16, 16, 16]
    plain = decide(snap, [PodSetSpec("workers", 64, ResourceVector(gpu=4))], profile_name="elastic", profile=PROFILES.profiles["elastic"], now=0.0)
    ps = plain.placement.podsets[0]  # type: ignore[union-attr]
    assert sorted(pods_per_clique(snap, ps.nodes, ps.pods_per_node).values()) == [10, 18, 18, 18]

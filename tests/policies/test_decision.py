"""The decision policy: strict waits or admits in one island, elastic relaxes on time, reject
only for the never-fitting, backoff from the profile."""

from __future__ import annotations

import re

import pytest

from policies import PodSetSpec, ProfileLevelError, WaitState, decide, load_profiles
from topology import GraphLink, Level, NodeInfo, ResourceVector, Snapshot

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
DOC = load_profiles(f"""
defaultProfile: elastic
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}}}}
  elastic: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 300, retry: {{initialSeconds: 10, maxSeconds: 60}}}}
  anywhere: {{}}
classes:
  training: {{perfFloor: 0.9}}
  inference: {{spread: {{level: {CLIQUE}, maxPerDomain: 1}}}}
""")


def cluster(used: int = 0, perf: float = 1.0) -> Snapshot:
    """2 SUs × 2 islands × 4 nodes × 4 GPUs; ``used`` GPUs taken on the first node of every island."""
    nodes = []
    for u in range(2):
        for c in range(2):
            for n in range(4):
                nodes.append(NodeInfo(f"u{u}c{c}n{n}", {SU: f"u{u}", CLIQUE: f"u{u}c{c}"}, ResourceVector(4, 1000, 1000, 10),
                                      ResourceVector(gpu=used if n == 0 else 0), perf=perf if n == 3 else 1.0))
    return Snapshot("f", [Level(SU, 50), Level(CLIQUE, 1800)], nodes)


def gang(pods: int, gpus: int = 4, **kw: str) -> list[PodSetSpec]:
    return [PodSetSpec("workers", pods, ResourceVector(gpu=gpus), **kw)]


def run(snap: Snapshot, podsets: list[PodSetSpec], profile: str, now: float = 1000.0, wait: WaitState = WaitState(), cls: str | None = None):
    return decide(snap, podsets, profile_name=profile, profile=DOC.profiles[profile], now=now, wait=wait,
                  workload_class=DOC.classes[cls] if cls else None)


def test_strict_admits_in_one_island() -> None:
    d = run(cluster(), gang(4), "strict")
    assert d.outcome == "admit" and d.placement is not None
    assert d.placement.podsets[0].islands == 1 and d.placement.podsets[0].domain_level == CLIQUE


def test_strict_waits_with_growing_backoff_when_no_island_is_free() -> None:
    snap = cluster(used=4)  # every island has 3 free nodes
    delays = [run(snap, gang(4), "strict", wait=WaitState(0.0, a)).retry_after_seconds for a in range(4)]
    d = run(snap, gang(4), "strict")
    assert d.outcome == "wait" and "largest fits 3" in d.message
    assert delays == [30, 60, 120, 120]


def test_strict_places_a_gang_larger_than_every_island_in_the_smallest_domain_that_holds_it() -> None:
    d = run(cluster(), gang(5), "strict")  # 20 GPUs; islands hold 16, SUs 32
    assert d.outcome == "admit" and d.widened_to == SU and d.placement is not None
    ps = d.placement.podsets[0]
    assert ps.domain_level == SU and "larger than every nvidia.com/gpu.clique domain" in d.message
    assert sorted({n[:4] for n in ps.nodes}) == ["u0c0", "u0c1"] and ps.bottleneck_gbps == 50  # one island whole, one split
    whole = run(cluster(), gang(9), "strict")  # 36 GPUs: more than an SU, fits the 64-GPU flavor
    assert whole.outcome == "admit" and whole.widened_to == "" and whole.placement is not None
    assert len({n[:4] for n in whole.placement.podsets[0].nodes}) == 3


def test_strict_waits_for_the_smallest_domain_rather_than_rejecting() -> None:
    snap = cluster(used=4)  # 3 free nodes per island, 6 per SU
    assert run(snap, gang(5), "strict").outcome == "admit"
    busy = cluster(used=4)
    for node in ("u0c0n1", "u0c1n1", "u1c0n1", "u1c1n1"):
        busy.reserve(node, ResourceVector(gpu=4))  # 2 free nodes per island, 4 per SU
    d = run(busy, gang(5), "strict", wait=WaitState(0.0, 2))
    assert d.outcome == "wait" and d.widened_to == SU and d.retry_after_seconds == 120
    assert "larger than every nvidia.com/gpu.clique domain" in d.message and "network.example.com/su" in d.message


def test_strict_rejects_only_what_the_whole_flavor_can_never_hold() -> None:
    d = run(cluster(), gang(17), "strict")  # 68 GPUs on a 64-GPU flavor
    assert d.outcome == "reject" and d.widened_to is None
    assert "never fits" in d.message and "only 16 pods fit in flavor f" in d.message
    own = run(cluster(), gang(9, required_topology=SU), "strict")  # a PodSet's own required level is not widened
    assert own.outcome == "reject" and "never fits" in own.message


def test_elastic_waits_for_one_island_then_spans_after_relax_time() -> None:
    snap = cluster(used=4)
    early = run(snap, gang(4), "elastic", now=1100.0, wait=WaitState(first_waited_at=1000.0))
    assert early.outcome == "wait" and not early.relaxed
    assert early.retry_after_seconds == 10 and "spans allowed after 300s" in early.message
    near = run(snap, gang(4), "elastic", now=1295.0, wait=WaitState(first_waited_at=1000.0, attempts=5))
    assert near.retry_after_seconds == 5  # never sleeps past the relax moment
    late = run(snap, gang(4), "elastic", now=1300.0, wait=WaitState(first_waited_at=1000.0))
    assert late.outcome == "admit" and late.relaxed
    assert late.placement is not None and late.placement.podsets[0].islands == 2
    assert late.placement.podsets[0].domain_level == SU


def test_elastic_relaxes_at_once_when_one_island_can_never_fit() -> None:
    d = run(cluster(), gang(6), "elastic")
    assert d.outcome == "admit" and d.relaxed and d.placement is not None and d.placement.podsets[0].islands == 2


def test_elastic_rejects_beyond_its_max_span() -> None:
    d = run(cluster(), gang(9), "elastic")
    assert d.outcome == "reject" and "one network.example.com/su domain" in d.message
    assert run(cluster(), gang(9), "anywhere").outcome == "admit"


def test_kueue_hint_overrides_the_profile() -> None:
    d = run(cluster(), gang(6, required_topology=SU), "strict")
    assert d.outcome == "admit" and d.placement is not None and d.placement.podsets[0].domain_level == SU


def test_bad_hint_rejects_naming_the_annotation_and_bad_profile_raises() -> None:
    d = run(cluster(), gang(1, required_topology="rack"), "strict")
    assert d.outcome == "reject" and "kueue.x-k8s.io/podset-required-topology" in d.message
    bad = load_profiles("profiles: {p: {requiredLevel: rack}}\ndefaultProfile: p\n")
    with pytest.raises(ProfileLevelError, match=r"profiles\.p\.requiredLevel"):
        decide(cluster(), gang(1), profile_name="p", profile=bad.profiles["p"], now=0.0)


def test_training_class_keeps_slow_nodes_out() -> None:
    snap = cluster(perf=0.5)  # the fourth node of every island is slow
    assert run(snap, gang(4), "strict").outcome == "admit"
    d = run(snap, gang(4), "strict", cls="training")
    assert d.outcome == "wait"  # fits only once the slow nodes are re-benchmarked


def test_inference_class_spreads_replicas_over_islands() -> None:
    d = run(cluster(), gang(3, gpus=1), "anywhere", cls="inference")
    assert d.outcome == "admit" and d.placement is not None and d.placement.podsets[0].islands == 3


def test_serving_graph_is_one_atomic_decision() -> None:
    podsets = [PodSetSpec("prefill", 2, ResourceVector(gpu=4)), PodSetSpec("decode", 2, ResourceVector(gpu=4))]
    d = decide(cluster(), podsets, profile_name="strict", profile=DOC.profiles["strict"], now=0.0,
               links=[GraphLink("prefill", "decode", min_bandwidth_gbps=1000)])
    assert d.outcome == "admit" and d.placement is not None
    assert d.placement.podset("prefill").domain_path == d.placement.podset("decode").domain_path


def test_same_input_same_decision() -> None:
    snap = cluster(used=2)
    assert run(snap, gang(3), "elastic") == run(snap, gang(3), "elastic")


def test_inference_spread_works_under_strict_and_elastic_profiles() -> None:
    # the profiles' island level is for gangs; spread replicas must not be confined to one island
    for profile in ("strict", "elastic"):
        d = run(cluster(), gang(3, gpus=1), profile, cls="inference")
        assert d.outcome == "admit" and d.placement is not None and d.placement.podsets[0].islands == 3


@pytest.mark.parametrize(
    ("used", "pods", "profile", "cls", "outcome"),
    [(0, 4, "strict", None, "admit"), (4, 4, "strict", None, "wait"), (0, 17, "strict", None, "reject"),
     (4, 4, "elastic", None, "wait"), (4, 6, "elastic", None, "admit"), (0, 3, "elastic", "inference", "admit"), (0, 4, "anywhere", "training", "admit")],
)
def test_without_explanations_the_decision_is_the_same_minus_the_losing_domains(
        used: int, pods: int, profile: str, cls: str | None, outcome: str) -> None:
    kw = dict(profile_name=profile, profile=DOC.profiles[profile], now=1000.0, wait=WaitState(900.0, 1),
              workload_class=DOC.classes[cls] if cls else None)
    full = decide(cluster(used, perf=0.8), gang(pods), **kw)  # type: ignore[arg-type]
    lean = decide(cluster(used, perf=0.8), gang(pods), explain=False, **kw)  # type: ignore[arg-type]
    assert full.outcome == lean.outcome == outcome
    assert (full.message, full.retry_after_seconds, full.relaxed) == (lean.message, lean.retry_after_seconds, lean.relaxed)
    if outcome != "admit":  # a wait or reject still says why, with the numbers
        assert re.search(r"\d+ pods .* (the largest fits|only) \d+", lean.message), lean.message
    if full.placement is not None and full.outcome != "reject":
        assert lean.placement is not None and full.placement.podsets == lean.placement.podsets
        assert full.placement.reason == lean.placement.reason and not lean.placement.why_not
        assert full.placement.why_not or outcome == "admit"


PERF_FIRST = load_profiles(f"""
defaultProfile: speed
profiles:
  speed: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}}}
  fit: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, fragmentation: {{perfFirst: gangs}}}}
classes:
  training: {{perfFloor: 0.9, uniformPerf: true}}
""")


def half_used_slow_island() -> Snapshot:
    """``cluster()``'s fabric with island u0c0 half taken (nodes 0-1 full) and its free nodes at perf
    0.95; every other island is empty at perf 1.0."""
    nodes = []
    for u in range(2):
        for c in range(2):
            for n in range(4):
                first = (u, c) == (0, 0)
                nodes.append(NodeInfo(f"u{u}c{c}n{n}", {SU: f"u{u}", CLIQUE: f"u{u}c{c}"}, ResourceVector(4, 1000, 1000, 10),
                                      ResourceVector(gpu=4 if first and n < 2 else 0), perf=0.95 if first else 1.0))
    return Snapshot("f", [Level(SU, 50), Level(CLIQUE, 1800)], nodes)


@pytest.mark.parametrize(("profile", "pods", "island"), [("speed", 1, "u0c1"), ("fit", 1, "u0c0"), ("speed", 2, "u0c1"), ("fit", 2, "u0c1")])
def test_perf_first_gangs_places_a_one_pod_workload_by_fit_and_a_gang_by_speed(profile: str, pods: int, island: str) -> None:
    # uniformPerf ranks islands by speed before fit: by default a one-pod Workload takes an empty
    # island at perf 1.0 over the half-used one at 0.95; with perfFirst: gangs it fills the
    # half-used one, and a gang of two pods still takes the fastest island
    d = decide(half_used_slow_island(), gang(pods), profile_name=profile, profile=PERF_FIRST.profiles[profile], now=0.0,
               workload_class=PERF_FIRST.classes["training"])
    assert d.outcome == "admit" and d.placement is not None
    ps = d.placement.podsets[0]
    assert {n[:4] for n in ps.nodes} == {island}


def test_perf_first_gangs_keeps_the_class_speed_floor() -> None:
    snap = half_used_slow_island()
    floor = load_profiles("defaultProfile: fit\nprofiles: {fit: {fragmentation: {perfFirst: gangs}}}\n"
                          "classes: {training: {perfFloor: 0.97, uniformPerf: true}}\n")
    d = decide(snap, gang(1), profile_name="fit", profile=floor.profiles["fit"], now=0.0, workload_class=floor.classes["training"])
    assert d.outcome == "admit" and d.placement is not None
    assert d.placement.podsets[0].min_perf >= 0.97  # the half-used island's 0.95 nodes are under the floor: not taken by fit


def whole_small_island_and_partly_used_large_one() -> Snapshot:
    """Island a: 2 nodes, whole (8 GPUs free); island b: 4 nodes, one GPU of one node used (15 free).
    The whole island is the tighter fit, so best fit alone would take it."""
    nodes = [NodeInfo(f"a{i}", {CLIQUE: "a"}, ResourceVector(4, 1000, 1000, 10)) for i in range(2)]
    nodes += [NodeInfo(f"b{i}", {CLIQUE: "b"}, ResourceVector(4, 1000, 1000, 10), ResourceVector(gpu=1 if i == 0 else 0))
              for i in range(4)]
    return Snapshot("f", [Level(CLIQUE, 1800)], nodes)


@pytest.mark.parametrize("per_pod", [ResourceVector(gpu=1), ResourceVector(gpu=0, cpu_milli=100)], ids=["one-gpu", "no-gpu"])
def test_a_one_gpu_pod_and_a_pod_with_no_gpu_go_to_a_partly_used_island_under_the_shipped_strict(per_pod: ResourceVector) -> None:
    from pathlib import Path

    from policies import load_profiles_file

    shipped = load_profiles_file(Path(__file__).resolve().parents[2] / "config" / "profiles.yaml").profiles["strict"]
    fit_only = shipped.model_copy(update={"fragmentation": shipped.fragmentation.model_copy(update={"protect_empty_domains": False})})
    podsets = [PodSetSpec("main", 1, per_pod)]
    kept = decide(whole_small_island_and_partly_used_large_one(), podsets, profile_name="strict", profile=shipped, now=0.0)
    assert kept.outcome == "admit" and kept.placement is not None
    assert kept.placement.podsets[0].domain_path[0] == "b"  # the whole island stays whole for a gang
    loose = decide(whole_small_island_and_partly_used_large_one(), podsets, profile_name="strict", profile=fit_only, now=0.0)
    assert loose.outcome == "admit" and loose.placement is not None
    assert loose.placement.podsets[0].domain_path[0] == "a"  # best fit alone takes the whole, smaller island

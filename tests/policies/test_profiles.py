"""A profile is usable across flavors with different Topologies: ``profiles.<p>.flavors.<f>``
overrides its levels per flavor, and ``Profile.for_flavor`` names the field of a level a flavor
still lacks."""

from __future__ import annotations

import re

import pytest
import yaml

from policies import ProfileLevelError, ProfilesError, load_profiles

A100 = ["network.example.com/leaf", "nvidia.com/gpu.clique", "kubernetes.io/hostname"]
H100 = ["network.example.com/spine", "network.example.com/su", "nvidia.com/gpu.clique", "kubernetes.io/hostname"]

DOC = """
defaultProfile: elastic
profiles:
  strict:
    requiredLevel: nvidia.com/gpu.clique
    flavors:
      a100: {requiredLevel: kubernetes.io/hostname}
  elastic:
    preferredLevel: nvidia.com/gpu.clique
    maxSpanLevel: network.example.com/su
    relaxAfterSeconds: 300
    retry: {initialSeconds: 15, maxSeconds: 300}
    flavors:
      a100: {maxSpanLevel: network.example.com/leaf}
      l40s: {maxSpanLevel: null}
"""


def test_a_flavor_without_overrides_sees_the_profile_as_written() -> None:
    elastic = load_profiles(DOC).profiles["elastic"]
    resolved = elastic.for_flavor("h100", H100)
    assert (resolved.preferred_level, resolved.max_span_level, resolved.relax_after_seconds) == \
        ("nvidia.com/gpu.clique", "network.example.com/su", 300)
    assert resolved.retry == elastic.retry and resolved.flavors == {}


def test_an_override_replaces_only_the_fields_it_sets() -> None:
    doc = load_profiles(DOC)
    elastic = doc.profiles["elastic"].for_flavor("a100", A100)
    assert (elastic.preferred_level, elastic.max_span_level, elastic.relax_after_seconds) == \
        ("nvidia.com/gpu.clique", "network.example.com/leaf", 300)
    assert elastic.retry.initial_seconds == 15
    strict = doc.profiles["strict"].for_flavor("a100", A100)
    assert strict.required_level == "kubernetes.io/hostname" and strict.strict


def test_null_removes_the_span_cap_for_one_flavor() -> None:
    resolved = load_profiles(DOC).profiles["elastic"].for_flavor("l40s", ["nvidia.com/gpu.clique", "kubernetes.io/hostname"])
    assert resolved.max_span_level is None and resolved.preferred_level == "nvidia.com/gpu.clique"


def test_a_missing_level_names_the_profile_field_and_the_fix() -> None:
    elastic = load_profiles(DOC).profiles["elastic"]
    with pytest.raises(ProfileLevelError) as err:
        elastic.for_flavor("b200", A100)
    assert str(err.value) == (
        "profiles.elastic.maxSpanLevel: flavor b200 has no level 'network.example.com/su' "
        f"(levels: {A100}); set profiles.elastic.flavors.b200.maxSpanLevel to one of them (or null: no cap)")


def test_a_missing_level_in_an_override_names_the_override() -> None:
    doc = load_profiles(DOC)
    with pytest.raises(ProfileLevelError, match=r"^profiles\.elastic\.flavors\.a100\.maxSpanLevel: flavor a100 has no level 'network.example.com/leaf'"):
        doc.profiles["elastic"].for_flavor("a100", H100)
    with pytest.raises(ProfileLevelError, match=r"^profiles\.strict\.flavors\.a100\.requiredLevel: flavor a100 has no level"):
        doc.profiles["strict"].for_flavor("a100", ["nvidia.com/gpu.clique"])


def test_the_caller_may_name_the_profile() -> None:
    elastic = load_profiles(DOC).profiles["elastic"]
    with pytest.raises(ProfileLevelError, match=r"^profiles\.p\.maxSpanLevel: flavor b200"):
        elastic.for_flavor("b200", A100, name="p")


def test_the_default_profiles_resolve_on_any_flavor_with_cliques() -> None:
    doc = load_profiles("")
    for name, profile in doc.profiles.items():
        assert profile.for_flavor("any", ["nvidia.com/gpu.clique", "kubernetes.io/hostname"]).flavors == {}, name
    with pytest.raises(ProfileLevelError, match=r"^profiles\.strict\.requiredLevel: flavor any has no level 'nvidia.com/gpu.clique'"):
        doc.profiles["strict"].for_flavor("any", ["kubernetes.io/hostname"])


def test_resolving_is_deterministic_and_leaves_the_document_alone() -> None:
    doc = load_profiles(DOC)
    first = doc.profiles["elastic"].for_flavor("a100", A100)
    assert first == doc.profiles["elastic"].for_flavor("a100", A100)
    assert doc.profiles["elastic"].max_span_level == "network.example.com/su" and "a100" in doc.profiles["elastic"].flavors


@pytest.mark.parametrize(("profile", "field"), [
    ("requiredLevel: nvidia.com/gpu.clique\n    flavors: {a100: {maxSpanLevel: network.example.com/leaf}}", "flavors.a100.maxSpanLevel"),
    ("requiredLevel: nvidia.com/gpu.clique\n    flavors: {a100: {preferredLevel: kubernetes.io/hostname}}", "flavors.a100.preferredLevel"),
    ("preferredLevel: nvidia.com/gpu.clique\n    flavors: {a100: {requiredLevel: kubernetes.io/hostname}}", "flavors.a100.requiredLevel"),
    ("requiredLevel: nvidia.com/gpu.clique\n    flavors: {a100: {requiredLevel: null}}", "flavors.a100.requiredLevel"),
    ("preferredLevel: nvidia.com/gpu.clique\n    flavors: {a100: {preferredLevel: null}}", "flavors.a100.preferredLevel"),
    ("preferredLevel: nvidia.com/gpu.clique\n    flavors: {a100: {relaxAfterSeconds: 10}}", "flavors.a100.relaxAfterSeconds"),
])
def test_an_override_cannot_switch_the_profiles_mode(profile: str, field: str) -> None:
    with pytest.raises(ProfilesError, match=rf"profiles\.p.*{field}"):
        load_profiles(f"defaultProfile: p\nprofiles:\n  p:\n    {profile}\n")


SPAN_CANDIDATES = """
defaultProfile: elastic
profiles:
  elastic:
    preferredLevel: nvidia.com/gpu.clique
    maxSpanLevel: [network.example.com/su, network.example.com/leaf]
"""


def test_a_list_of_levels_resolves_to_the_first_the_flavor_has() -> None:
    elastic = load_profiles(SPAN_CANDIDATES).profiles["elastic"]
    assert elastic.max_span_level == "network.example.com/su"  # unresolved: the first candidate
    assert elastic.for_flavor("h100", H100).max_span_level == "network.example.com/su"
    assert elastic.for_flavor("a100", A100).max_span_level == "network.example.com/leaf"
    with pytest.raises(ProfileLevelError) as err:
        elastic.for_flavor("l40s", ["kubernetes.io/hostname", "nvidia.com/gpu.clique"])
    assert str(err.value).startswith("profiles.elastic.maxSpanLevel: flavor l40s has no level of "
                                     "['network.example.com/su', 'network.example.com/leaf']")


def test_an_override_wins_over_the_candidates() -> None:
    doc = load_profiles(SPAN_CANDIDATES.replace("leaf]", "leaf]\n    flavors: {a100: {maxSpanLevel: nvidia.com/gpu.clique}}"))
    assert doc.profiles["elastic"].for_flavor("a100", A100).max_span_level == "nvidia.com/gpu.clique"


@pytest.mark.parametrize("value", ["[]", "['']", "[1]"])
def test_a_bad_list_of_levels_is_refused_naming_the_field(value: str) -> None:
    with pytest.raises(ProfilesError, match=r"profiles\.p.*maxSpanLevel: give a level, or a non-empty list"):
        load_profiles(f"defaultProfile: p\nprofiles:\n  p: {{preferredLevel: a, maxSpanLevel: {value}}}\n")


def test_a_dumped_document_loads_back_with_its_lists_of_levels() -> None:
    doc = load_profiles(SPAN_CANDIDATES)
    dumped = yaml.safe_dump(doc.model_dump(mode="json", by_alias=True, exclude_defaults=True))
    again = load_profiles(dumped)
    assert again.profiles["elastic"].for_flavor("a100", A100).max_span_level == "network.example.com/leaf"
    assert doc.model_dump()["profiles"]["elastic"]["max_span_level"] == ["network.example.com/su", "network.example.com/leaf"]


@pytest.mark.parametrize(("wanted", "levels", "typo", "side", "needle"), [
    ("nvidia.com/gpu.clique", ["network.example.com/su", "nvidia.com/gpu.cliqeu", "kubernetes.io/hostname"],
     ("nvidia.com/gpu.cliqeu", "nvidia.com/gpu.clique"), "flavor",
     "the flavor's level label 'nvidia.com/gpu.cliqeu' looks misspelt: did you mean 'nvidia.com/gpu.clique'? Fix the label in the flavor's"),
    ("nvidia.com/gpu.cliqe", ["network.example.com/su", "nvidia.com/gpu.clique", "kubernetes.io/hostname"],
     ("nvidia.com/gpu.clique", "nvidia.com/gpu.cliqe"), "profile", "did you mean the flavor's level 'nvidia.com/gpu.clique'? Fix the profiles"),
    ("example.com/rackk", ["example.com/rack", "kubernetes.io/hostname"], ("example.com/rack", "example.com/rackk"), "either",
     "did you mean one for the other?"),
    ("example.com/rack", ["network.example.com/su", "kubernetes.io/hostname"], None, "", ""),
    ("network.example.com/su", ["network.example.com/leaf", "kubernetes.io/hostname"], None, "", ""),  # two real labels, not a typo
])
def test_a_near_miss_level_suggests_the_match_and_which_side_looks_misspelt(wanted: str, levels: list[str], typo: tuple[str, str] | None,
                                                                            side: str, needle: str) -> None:
    strict = load_profiles(f"defaultProfile: s\nprofiles:\n  s: {{requiredLevel: {wanted}}}\n").profiles["s"]
    with pytest.raises(ProfileLevelError) as err:
        strict.for_flavor("f", levels)
    assert (err.value.typo, err.value.typo_in) == (typo, side)
    assert needle in str(err.value) and str(err.value).startswith(f"profiles.s.requiredLevel: flavor f has no level {wanted!r}")
    assert ("did you mean" in str(err.value)) == (typo is not None)


RULES = """
defaultProfile: elastic
profiles:
  strict: {requiredLevel: nvidia.com/gpu.clique}
  elastic: {preferredLevel: nvidia.com/gpu.clique}
classes:
  training: {perfFloor: 0.9}
  inference: {}
queues:
  team-a/research: {profile: strict, allowedProfiles: [strict], allowedClasses: [training]}
  team-b/dev: elastic
  gpu-cq: {allowedProfiles: [strict, elastic]}
"""


def test_queue_rules_name_what_a_team_may_not_pick() -> None:
    doc = load_profiles(RULES)
    assert doc.profile_for(annotation=None, local_queue="team-a/research", cluster_queue=None)[0] == "strict"
    assert doc.profile_for(annotation=None, local_queue="team-b/dev", cluster_queue="gpu-cq")[0] == "elastic"  # the short form
    assert doc.profile_for(annotation=None, local_queue="team-c/x", cluster_queue="gpu-cq")[0] == "elastic"  # a rule without a profile
    assert doc.disallowed(profile="elastic", workload_class=None, local_queue="team-a/research", cluster_queue=None) == (
        "atoll.dev/profile='elastic' is not allowed on queue team-a/research (queues.team-a/research.allowedProfiles: strict); "
        "remove the annotation or name an allowed profile")
    assert "atoll.dev/class='inference' is not allowed on queue team-a/research" in str(
        doc.disallowed(profile=None, workload_class="inference", local_queue="team-a/research", cluster_queue=None))
    assert doc.disallowed(profile="strict", workload_class="training", local_queue="team-a/research", cluster_queue="gpu-cq") is None
    assert doc.disallowed(profile="strict", workload_class="inference", local_queue="team-b/dev", cluster_queue="gpu-cq") is None


@pytest.mark.parametrize(("rule", "message"), [
    ("{profile: strict, allowedProfiles: [elastic]}", "queues.q.allowedProfiles: ['elastic'] leaves out the queue's own profile 'strict'"),
    ("{profile: gold, allowedClasses: [training]}", "queues.q.profile: 'gold' is not a profile"),
    ("gold", "queues.q: 'gold' is not a profile"),
    ("{allowedProfiles: [gold]}", "queues.q.allowedProfiles: 'gold' is not a profile"),
    ("{allowedClasses: [batch]}", "queues.q.allowedClasses: 'batch' is not a class (have ['inference', 'training'])"),
    ("{profile: strict, allowedProfile: [strict]}", "queues.q.allowedProfile: unknown key"),
])
def test_a_bad_queue_rule_is_named_by_key_path(rule: str, message: str) -> None:
    with pytest.raises(ProfilesError, match=re.escape(message)):
        load_profiles(RULES.split("queues:")[0] + f"queues:\n  q: {rule}\n")


def test_preempt_domain_is_off_by_default_and_reads_yamls_bare_on_and_off() -> None:
    from policies import ProfilesError, load_profiles

    def mode(value: str | None) -> str:
        extra = f", preemptDomain: {value}" if value is not None else ""
        return load_profiles(f"defaultProfile: s\nprofiles: {{s: {{requiredLevel: x{extra}}}}}").profiles["s"].preempt_domain

    assert [mode(v) for v in (None, "on", "off", "dry-run", '"on"')] == ["off", "on", "off", "dry-run", "on"]
    with pytest.raises(ProfilesError, match=r"profiles.yaml: profiles.s.preemptDomain: expected 'off', 'dry-run' or 'on'"):
        mode("always")
def test_a_class_perf_band_reaches_the_request_and_is_bounded() -> None:
    from policies import podset_spec
    from policies._decision import _podset_request
    from topology import DEFAULT_PERF_BAND, Level, NodeInfo, ResourceVector, Snapshot

    doc = load_profiles("classes: {training: {uniformPerf: true, perfBand: 0.05}, plain: {uniformPerf: true}}\n")
    snap = Snapshot("f", [Level("nvidia.com/gpu.clique", 1800, 1)],
                    [NodeInfo("n0", {"nvidia.com/gpu.clique": "c0"}, ResourceVector(4, 1000, 1000, 10))])
    spec = podset_spec("main", 2, ResourceVector(gpu=1), {})
    mode = ("nvidia.com/gpu.clique", None, None)
    assert _podset_request(spec, mode, doc.classes["training"], snap, tight=False, balanced=False).perf_band == 0.05
    assert _podset_request(spec, mode, doc.classes["plain"], snap, tight=False, balanced=False).perf_band == DEFAULT_PERF_BAND
    with pytest.raises(ProfilesError, match=r"classes\.training\.perfBand"):
        load_profiles("classes: {training: {uniformPerf: true, perfBand: 0.7}}\n")


def test_a_class_perf_rank_defaults_to_min_reaches_the_request_and_is_checked() -> None:
    from policies import podset_spec
    from policies._decision import _podset_request
    from topology import Level, NodeInfo, ResourceVector, Snapshot

    doc = load_profiles("classes: {fast: {uniformPerf: true, perfRank: reach}, plain: {uniformPerf: true}}\n")
    snap = Snapshot("f", [Level("nvidia.com/gpu.clique", 1800, 1)],
                    [NodeInfo("n0", {"nvidia.com/gpu.clique": "c0"}, ResourceVector(4, 1000, 1000, 10))])
    spec = podset_spec("main", 2, ResourceVector(gpu=1), {})
    mode = ("nvidia.com/gpu.clique", None, None)
    assert _podset_request(spec, mode, doc.classes["fast"], snap, tight=False, balanced=False).perf_rank == "reach"
    assert _podset_request(spec, mode, doc.classes["plain"], snap, tight=False, balanced=False).perf_rank == "min"
    with pytest.raises(ProfilesError, match=r"classes\.fast\.perfRank: expected 'min' or 'reach'"):
        load_profiles("classes: {fast: {uniformPerf: true, perfRank: fastest}}\n")


def test_fragmentation_perf_first_defaults_to_all_leaves_one_pod_podsets_to_fit_under_gangs_and_is_checked() -> None:
    from policies import podset_spec
    from policies._decision import _podset_request
    from topology import Level, NodeInfo, ResourceVector, Snapshot

    doc = load_profiles("profiles: {elastic: {}, fit: {fragmentation: {perfFirst: gangs}}}\nclasses: {training: {uniformPerf: true}}\n")
    assert doc.profiles["elastic"].fragmentation.perf_first == "all" and doc.profiles["fit"].fragmentation.perf_first == "gangs"
    snap = Snapshot("f", [Level("nvidia.com/gpu.clique", 1800, 1)],
                    [NodeInfo("n0", {"nvidia.com/gpu.clique": "c0"}, ResourceVector(4, 1000, 1000, 10))])
    mode = ("nvidia.com/gpu.clique", None, None)
    cls = doc.classes["training"]
    one, two = podset_spec("main", 1, ResourceVector(gpu=2), {}), podset_spec("main", 2, ResourceVector(gpu=1), {})
    assert _podset_request(one, mode, cls, snap, tight=False, balanced=False).uniform_perf
    assert not _podset_request(one, mode, cls, snap, tight=False, balanced=False, perf_first="gangs").uniform_perf
    assert _podset_request(two, mode, cls, snap, tight=False, balanced=False, perf_first="gangs").uniform_perf
    with pytest.raises(ProfilesError, match=r"profiles\.fit\.fragmentation\.perfFirst: expected 'all' or 'gangs'"):
        load_profiles("profiles: {elastic: {}, fit: {fragmentation: {perfFirst: pods}}}\n")


def test_a_flavor_names_its_accelerator_and_a_bad_name_is_refused_naming_the_field() -> None:
    doc = load_profiles("flavors: {a: {topology: t}, m: {topology: t, gpuResource: amd.com/gpu}, g: {topology: t, gpuResource: habana.ai/gaudi}}\n")
    assert doc.accelerators("nvidia.com/gpu") == ("nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi")
    assert doc.accelerators("amd.com/gpu") == ("amd.com/gpu", "habana.ai/gaudi")
    for bad in ("gpu", "cpu", "kubernetes.io/gpu", "amd.com/", "Amd.com/gpu", "amd com/gpu"):
        with pytest.raises(ProfilesError, match=r"flavors\.m\.gpuResource: .* is not an accelerator resource name"):
            load_profiles(f"flavors: {{m: {{topology: t, gpuResource: '{bad}'}}}}\n")

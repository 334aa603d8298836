"""Profiles documents: the sample loads; every kind of bad document names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import ProfilesError, load_profiles, load_profiles_file, profiles_from_configmap

SAMPLE = Path(__file__).resolve().parents[2] / "config" / "profiles.yaml"


def test_sample_document_loads() -> None:
    doc = load_profiles_file(SAMPLE)
    assert doc.default_profile == "elastic"
    assert doc.profiles["strict"].strict and not doc.profiles["elastic"].strict
    assert doc.profiles["strict"].fragmentation.protect_empty_domains
    assert doc.classes["training"].perf_floor == 0.9
    assert doc.classes["inference"].spread is not None and doc.classes["inference"].spread.max_per_domain == 1
    assert doc.flavors["gb200"].enforcement == "domain"
    # every sample profile parks its waits: measured on the ITP trace, waiting on Retries (which keep
    # their quota through the delay, as Kueue does) loses to Kueue's required topology (docs/numbers.md)
    assert {name for name, p in doc.profiles.items() if p.queueing.park_waiting} == set(doc.profiles)


def test_a_profile_parks_its_waits_only_when_it_says_so() -> None:
    doc = load_profiles("profiles:\n  a: {requiredLevel: x, queueing: {parkWaiting: true}}\n  b: {requiredLevel: x}\ndefaultProfile: a\n")
    assert doc.profiles["a"].queueing.park_waiting is True and doc.profiles["b"].queueing.park_waiting is False


def test_empty_document_gives_defaults() -> None:
    doc = load_profiles("")
    assert set(doc.profiles) == {"strict", "elastic"} and doc.default_profile == "elastic"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("profiles:\n  strict:\n    requiredLevel: a\n    retry: {initialSeconds: 30, maxSeconds: 10}\n",
         "profiles.yaml: profiles.strict.retry: maxSeconds (10) must be ≥ initialSeconds (30)"),
        ("profiles:\n  p: {requiredLevel: a, preferredLevel: b}\ndefaultProfile: p\n", "profiles.p: set requiredLevel (strict) or preferredLevel (elastic), not both"),
        ("profiles:\n  p: {requiredLevel: a, relaxAfterSeconds: 5}\ndefaultProfile: p\n", "profiles.p: maxSpanLevel and relaxAfterSeconds apply to elastic"),
        ("profiles:\n  p: {preferredLevel: a, relaxAfterSeconds: -1}\ndefaultProfile: p\n", "profiles.p.relaxAfterSeconds"),
        ("defaultProfile: nope\n", "defaultProfile: 'nope' is not a profile"),
        ("queues: {team-a/x: missing}\n", "queues.team-a/x: 'missing' is not a profile"),
        ("profiles:\n  p: {preferedLevel: a}\ndefaultProfile: p\n", "profiles.p.preferedLevel: unknown key; did you mean 'preferredLevel'? (known: "
                                                                   "balancedPlacement, flavors, fragmentation, maxSpanLevel, preemptDomain, preferredLevel,"),
        ("defaultProfle: p\n", "defaultProfle: unknown key; did you mean 'defaultProfile'? (known: classes, defaultProfile, flavors, profiles, queues)"),
        ("profiles:\n  p: {preferredLevel: a, balancedPlacement: 'yes'}\ndefaultProfile: p\n",
         "profiles.p.balancedPlacement: expected true or false, got 'yes'"),
        ("flavors: {gb200: {topology: t, enforcement: webhook}}\n", "flavors.gb200.enforcement"),
        ("classes: {training: {perfFloor: 20}}\n", "classes.training.perfFloor"),
        ("classes: {inference: {spread: {level: r, maxPerDomain: 0}}}\n", "classes.inference.spread.maxPerDomain"),
        ("profiles:\n  p: {requiredLevel: a, queueing: {reserveTarget: soonest}}\ndefaultProfile: p\n",
         "profiles.p.queueing.reserveTarget: expected 'fewestToDrain' or 'soonestFree', got 'soonest'"),
        ("profiles:\n  p: {requiredLevel: a, queueing: {reserveAt: su}}\ndefaultProfile: p\n",
         "profiles.p.queueing.reserveAt: expected 'island' or 'span', got 'su'"),
        ("profiles:\n  p: {requiredLevel: a, queueing: {retargetMarginSeconds: 0}}\ndefaultProfile: p\n",
         "profiles.p.queueing.retargetMarginSeconds: expected a number > 0"),
        ("profiles:\n  p: {requiredLevel: a, queueing: {perfFloorByCost: 0.0, perfFloorIdle: always}}\ndefaultProfile: p\n",
         "profiles.p.queueing.perfFloorIdle: expected 'weigh' or 'take', got 'always'"),
        ("profiles:\n  p: {preferredLevel: a, queueing: {waitOrSpan: true, spanCountsQueue: true}}\ndefaultProfile: p\n",
         "profiles.p.queueing.spanCountsQueue: expected 'off', 'domain' or 'quota', got True"),
        ("profiles:\n  p: {requiredLevel: a, queueing: {perfFloorIdle: take}}\ndefaultProfile: p\n",
         "profiles.p.queueing: perfFloorIdle: take lowers the class floor to perfFloorByCost; set perfFloorByCost"),
        ("profiles:\n  p: {requiredLevel: a, queueing: {waitWeight: 2}}\ndefaultProfile: p\n",
         "profiles.p.queueing: waitWeight: 2 weighs the wait against a span or slower GPUs; set waitOrSpan: true or perfFloorByCost"),
        ("profiles:\n  p: {preferredLevel: a, queueing: {waitOrSpan: true, waitWeight: 0.5}}\ndefaultProfile: p\n",
         "profiles.p.queueing.waitWeight: expected a number ≥ 1, got 0.5"),
        ("profiles:\n  p: {requiredLevel: a, queueing: {parkWaiting: 'yes'}}\ndefaultProfile: p\n",
         "profiles.yaml: profiles.p.queueing.parkWaiting: expected true or false, got 'yes'"),
        ("profiles:\n  p: {requiredLevel: a, queueing: {park: true}}\ndefaultProfile: p\n", "profiles.p.queueing.park: unknown key (known: holdBehindGangs,"),
        ("profiles:\n  p: {requiredLevel: a, queueing: {parkWaitng: true}}\ndefaultProfile: p\n",
         "profiles.p.queueing.parkWaitng: unknown key; did you mean 'parkWaiting'?"),
        ("[1, 2]\n", "expected a mapping at the top"),
        ("profiles: {a: [\n", "not valid YAML"),
    ],
)
def test_bad_documents_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ProfilesError) as err:
        load_profiles(text)
    assert message in str(err.value)


def test_every_problem_is_listed() -> None:
    with pytest.raises(ProfilesError) as err:
        load_profiles("profiles:\n  a: {bogus: 1}\n  b: {retry: {initialSeconds: 0}}\n")
    text = str(err.value)
    assert "profiles.a.bogus" in text and "profiles.b.retry.initialSeconds" in text


def test_configmap_needs_the_key() -> None:
    with pytest.raises(ProfilesError, match=r"ConfigMap atoll-policies: data.profiles.yaml: missing"):
        profiles_from_configmap({"other": "x"})
    doc = profiles_from_configmap({"profiles.yaml": "defaultProfile: strict\n"})
    assert doc.default_profile == "strict"


def test_profile_precedence() -> None:
    doc = load_profiles("queues: {team-a/research: strict, cq-batch: elastic}\ndefaultProfile: elastic\n")
    assert doc.profile_for(annotation="strict", local_queue=None, cluster_queue=None)[0] == "strict"
    assert doc.profile_for(annotation=None, local_queue="team-a/research", cluster_queue="cq-batch")[0] == "strict"
    assert doc.profile_for(annotation=None, local_queue="team-b/x", cluster_queue="cq-batch")[0] == "elastic"
    with pytest.raises(KeyError, match="does not exist"):
        doc.profile_for(annotation="gold", local_queue=None, cluster_queue=None)


def test_backoff_grows_and_caps() -> None:
    retry = load_profiles("profiles:\n  s: {requiredLevel: a, retry: {initialSeconds: 30, maxSeconds: 100}}\ndefaultProfile: s\n").profiles["s"].retry
    assert [retry.delay(a) for a in range(4)] == [30, 60, 100, 100]

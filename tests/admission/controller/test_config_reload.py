"""The profiles ConfigMap is hot-reloaded; a bad document keeps the last good one, is logged,
counted and raised as an Event; the AdmissionCheck's Active condition says whether Atoll can work."""

from __future__ import annotations

from typing import Any

import pytest

from tests.admission.fabric import GROUP, VERSION, Fabric, profiles_doc, run

pytestmark = pytest.mark.apiserver

BAD = "profiles:\n  strict:\n    requiredLevel: nvidia.com/gpu.clique\n    retry: {initialSeconds: 30, maxSeconds: 10}\n"


def active(fabric: Fabric) -> dict[str, Any]:
    ac = fabric.custom.get_cluster_custom_object(GROUP, VERSION, "admissionchecks", fabric.check)
    (cond,) = [c for c in ac["status"]["conditions"] if c["type"] == "Active"]
    return dict(cond)


def configmap_events(fabric: Fabric) -> list[Any]:
    return [e for e in fabric.core.list_namespaced_event(fabric.ns).items if e.involved_object.kind == "ConfigMap"]


def rejections(fabric: Fabric) -> float:
    return fabric.metrics.registry.get_sample_value("atoll_config_rejections_total", {"source": "configmap"}) or 0.0


def test_bad_document_keeps_the_last_good_one(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    run(ctrl)
    assert active(fabric)["status"] == "True"

    fabric.set_profiles(BAD)
    fabric.submit("train", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and verdict.profile == "strict"  # decided with the last good document
    assert "maxSeconds (10) must be ≥ initialSeconds (30)" in (ctrl.config_error or "")
    (event,) = configmap_events(fabric)
    assert event.type == "Warning" and event.reason == "InvalidProfiles" and "profiles.strict.retry" in event.message
    assert "last good document stays in force" in event.message
    assert rejections(fabric) == 1
    cond = active(fabric)
    assert cond["status"] == "True" and "latest update was rejected" in cond["message"]

    run(ctrl)  # the same bad version again: not counted twice
    assert rejections(fabric) == 1

    fabric.set_profiles(profiles_doc(fabric.flavor, fabric.topology))
    run(ctrl)
    assert ctrl.config_error is None and active(fabric)["message"].startswith("Atoll places Workloads")


def test_a_wrong_type_says_what_the_field_takes_and_keeps_the_last_good_document(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    run(ctrl)
    fabric.set_profiles(BAD.replace("initialSeconds: 30", "initialSeconds: soon"))
    fabric.submit("train", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and verdict.profile == "strict"
    assert (ctrl.config_error or "").endswith(": profiles.strict.retry.initialSeconds: expected a whole number, got 'soon'")
    assert "\n" not in (ctrl.config_error or "")
    (event,) = configmap_events(fabric)
    assert "initialSeconds: expected a whole number, got 'soon'" in event.message and "last good document stays" in event.message


def test_never_valid_document_makes_the_check_inactive_and_nothing_is_decided(fabric: Fabric) -> None:
    fabric.install(profiles={"defaultProfile": "nope"})
    ctrl = fabric.controller()
    fabric.submit("train", [("main", 2, 4)])
    assert run(ctrl) == []
    cond = active(fabric)
    assert (cond["status"], cond["reason"]) == ("False", "ProfilesInvalid") and "defaultProfile" in cond["message"]
    assert fabric.entry("train")["state"] == "Pending"

    fabric.set_profiles(profiles_doc(fabric.flavor, fabric.topology))
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and active(fabric)["status"] == "True"


def test_missing_configmap_is_named(fabric: Fabric) -> None:
    fabric.install()
    fabric.core.delete_namespaced_config_map("atoll-policies", fabric.ns)
    run(fabric.controller())
    cond = active(fabric)
    assert (cond["status"], cond["reason"]) == ("False", "ProfilesMissing") and "atoll-policies not found" in cond["message"]


def test_reload_changes_the_profile_of_a_queue(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("wide", [("main", 4, 4)])
    (verdict,) = run(ctrl)
    assert verdict.profile == "strict" and verdict.outcome != "reject"  # the default; 16 GPUs: larger than an island, not the flavor

    fabric.set_profiles(profiles_doc(fabric.flavor, fabric.topology, queues={f"{fabric.ns}/lq": "elastic"}))
    fabric.submit("wide-2", [("main", 4, 4)])
    (verdict,) = run(ctrl)
    assert (verdict.outcome, verdict.profile) == ("admit", "elastic")


@pytest.mark.parametrize(("annotation", "value", "needle"), [
    ("atoll.dev/profile", "turbo", "atoll.dev/profile='turbo' names no profile (profiles: elastic, strict)"),
    ("atoll.dev/class", "batch", "atoll.dev/class='batch' names no workload class (classes: training)"),
])
def test_unknown_annotation_is_rejected_by_name(fabric: Fabric, annotation: str, value: str, needle: str) -> None:
    fabric.install()
    fabric.submit("w", [("main", 1, 4)], podset_annotations={"main": {annotation: value}})
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("w")
    assert verdict.outcome == "reject" and entry["state"] == "Rejected" and needle in entry["message"]


def test_unmapped_flavor_waits_with_the_fix(fabric: Fabric) -> None:
    fabric.install(profiles={"defaultProfile": "strict", "profiles": {"strict": {"requiredLevel": "nvidia.com/gpu.clique"}}})
    fabric.submit("w", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("w")
    assert verdict.reason == "config" and entry["state"] == "Retry" and entry["requeueAfterSeconds"] == 60
    assert f"add flavors.{fabric.flavor}.topology" in entry["message"]


def test_profile_level_missing_from_the_topology_is_a_config_wait(fabric: Fabric) -> None:
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"] = {"requiredLevel": "example.com/rack"}
    fabric.install(profiles=doc)
    fabric.submit("w", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.reason == "config" and "profiles.strict.requiredLevel" in fabric.entry("w")["message"]


def test_a_misspelt_profile_level_names_the_near_match_on_the_topology(fabric: Fabric) -> None:
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"] = {"requiredLevel": "nvidia.com/gpu.cliqe"}
    fabric.install(profiles=doc)
    fabric.submit("w", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    message = fabric.entry("w")["message"]
    assert verdict.reason == "config" and "profiles.strict.requiredLevel: flavor" in message
    assert "did you mean the flavor's level 'nvidia.com/gpu.clique'? Fix the profiles document" in message
    assert message.count("profiles document") == 1  # the near match replaces the generic hint


def test_a_queue_rule_rejects_a_profile_the_team_may_not_pick(fabric: Fabric) -> None:
    lq = f"{fabric.ns}/lq"
    fabric.install(profiles=profiles_doc(fabric.flavor, fabric.topology, defaultProfile="elastic",
                                         queues={lq: {"profile": "strict", "allowedProfiles": ["strict"]}}))
    fabric.submit("override", [("main", 1, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}})
    fabric.submit("plain", [("main", 1, 4)])
    fabric.submit("same", [("main", 1, 4)], podset_annotations={"main": {"atoll.dev/profile": "strict"}})
    verdicts = run(fabric.controller())
    entry = fabric.entry("override")
    assert entry["state"] == "Rejected"
    assert (f"atoll.dev/profile='elastic' is not allowed on queue {lq} (queues.{lq}.allowedProfiles: strict); "
            "remove the annotation or name an allowed profile") in entry["message"]
    assert fabric.entry("plain")["state"] == "Ready" and fabric.entry("same")["state"] == "Ready"
    assert sorted((v.outcome, v.profile) for v in verdicts) == [("admit", "strict"), ("admit", "strict"), ("reject", "elastic")]


def test_a_cluster_queue_rule_binds_every_local_queue_and_classes_too(fabric: Fabric) -> None:
    fabric.install(profiles=profiles_doc(fabric.flavor, fabric.topology, queues={
        f"{fabric.ns}/lq": "elastic",  # the short form still works; the ClusterQueue's rule binds as well
        fabric.cq: {"allowedClasses": [], "allowedProfiles": ["strict", "elastic"]}}))
    fabric.submit("classy", [("main", 1, 4)], podset_annotations={"main": {"atoll.dev/class": "training"}})
    fabric.submit("strict", [("main", 1, 4)], podset_annotations={"main": {"atoll.dev/profile": "strict"}})
    verdicts = run(fabric.controller())
    assert fabric.entry("classy")["state"] == "Rejected"
    assert f"atoll.dev/class='training' is not allowed on queue {fabric.cq} (queues.{fabric.cq}.allowedClasses: none)" \
        in fabric.entry("classy")["message"]
    assert fabric.entry("strict")["state"] == "Ready" and sorted(v.profile for v in verdicts) == ["elastic", "strict"]

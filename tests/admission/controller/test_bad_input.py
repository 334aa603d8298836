"""Input that used to crash the controller or reject a valid Workload: count 0, absurd or
non-ASCII quantities, and PodSets Atoll does not place, each answered with a clear message."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admission.controller import decode_planned
from tests.admission.fabric import Fabric, planned, run
from tests.kube_objects import apply_workload_status, workload


@pytest.mark.parametrize("text", ["n0=²", "n0=٣", "n0=99999999999999999999", "n0=-1", "n0=+1"])
def test_planned_nodes_read_ascii_digits_only(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not node=pods"):
        decode_planned(text)


def _create(fabric: Fabric, body: dict[str, Any], flavors: dict[str, dict[str, str]] | None = None) -> None:
    """Create the Workload and reserve quota as Kueue does; ``flavors`` overrides a PodSet's flavor map."""
    name = body["metadata"]["name"]
    fabric.kueue.create(copy.deepcopy(body))
    obj = fabric.kueue.reserve_quota(fabric.ns, name, fabric.cq, fabric.flavor)
    if flavors:
        status = obj["status"]
        for psa in status["admission"]["podSetAssignments"]:
            if psa["name"] in flavors:
                psa["flavors"] = flavors[psa["name"]]
        apply_workload_status(fabric.custom, fabric.ns, name, {k: status[k] for k in ("admission", "conditions", "admissionChecks")})


@pytest.mark.apiserver
def test_absurd_gpu_count_is_rejected_naming_the_field_and_the_next_workload_is_decided(fabric: Fabric) -> None:
    fabric.install()
    body = workload(fabric.ns, "absurd", [("main", 1, 4)])
    body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "1e30"}, "limits": {"nvidia.com/gpu": "1e30"}}
    _create(fabric, body)
    fabric.submit("fine", [("main", 2, 4)])
    verdicts = run(fabric.controller())
    absurd = fabric.entry("absurd")
    assert absurd["state"] == "Rejected"
    assert ("spec.podSets[0].template.spec.containers[0].resources.requests.nvidia.com/gpu: '1e30' exceeds the limit of 4096"
            in absurd["message"])
    assert fabric.entry("fine")["state"] == "Ready" and planned(fabric.entry("fine"))
    assert sorted(v.outcome for v in verdicts) == ["admit", "reject"]


@pytest.mark.apiserver
def test_all_podsets_count_zero_is_ready_and_says_so(fabric: Fabric) -> None:
    fabric.install()
    _create(fabric, workload(fabric.ns, "idle", [("main", 0, 4), ("aux", 0, 4)]))
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("idle")
    assert verdict.outcome == "admit" and entry["state"] == "Ready"
    assert "every PodSet has count 0" in entry["message"]


@pytest.mark.apiserver
def test_a_count_zero_podset_beside_a_real_one_is_noted_and_the_other_placed(fabric: Fabric) -> None:
    fabric.install()
    _create(fabric, workload(fabric.ns, "half", [("idle", 0, 4), ("main", 2, 4)]))
    run(fabric.controller())
    entry = fabric.entry("half")
    assert entry["state"] == "Ready" and planned(entry) and [u["name"] for u in entry["podSetUpdates"]] == ["main"]
    assert "podSets[idle]: count 0, nothing to place" in entry["message"]


@pytest.mark.apiserver
def test_podsets_atoll_does_not_place_are_named_with_why(fabric: Fabric) -> None:
    fabric.install()
    body = workload(fabric.ns, "mixed", [("launcher", 1, 0), ("workers", 2, 4), ("stray", 1, 4)])
    del body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
    # Kueue gave stray no flavor for nvidia.com/gpu, and launcher a flavor Atoll does not serve (on Atoll's it would be placed)
    _create(fabric, body, flavors={"stray": {"cpu": fabric.flavor}, "launcher": {"cpu": "cpu-pool"}})
    run(fabric.controller())
    entry = fabric.entry("mixed")
    assert entry["state"] == "Ready" and [u["name"] for u in entry["podSetUpdates"]] == ["workers"]
    assert "podSets[launcher]: requests no nvidia.com/gpu; needs no placement" in entry["message"]
    assert ("podSets[stray]: requests 4 nvidia.com/gpu per pod but Kueue assigned no flavor for nvidia.com/gpu" in entry["message"])


@pytest.mark.apiserver
def test_only_unplaced_podsets_is_ready_with_each_reason(fabric: Fabric) -> None:
    fabric.install()
    _create(fabric, workload(fabric.ns, "orphan", [("main", 2, 4)]), flavors={"main": {"cpu": fabric.flavor}})
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("orphan")
    assert verdict.outcome == "admit" and entry["state"] == "Ready" and not entry.get("podSetUpdates")
    assert entry["message"].startswith("Ready: nothing for Atoll to place: podSets[main]: requests 4 nvidia.com/gpu per pod "
                                       "but Kueue assigned no flavor for nvidia.com/gpu")


def test_a_workload_without_readable_metadata_is_rejected_not_raised() -> None:
    from admission.controller import ClusterCache, Decider, Ledger, Settings
    from policies import load_profiles

    cache = ClusterCache("nvidia.com/gpu")
    cache.set_profiles(load_profiles("profiles: {strict: {}}\ndefaultProfile: strict\n"))
    verdict = Decider(cache, Ledger("nvidia.com/gpu"), Settings()).evaluate(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": True, "spec": None}, "d1", 0.0)
    assert verdict.outcome == "reject" and "workload.metadata: expected a mapping, got True" in verdict.message

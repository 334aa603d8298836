"""The Kueue sample setups in config/kueue/<setup>/ (Topology, ResourceFlavors, ClusterQueue with
admissionChecksStrategy, LocalQueues, example jobs) are created on a real apiserver with Kueue's
CRDs, hang together (every name a file refers to exists, the AdmissionCheck being the chart's),
and the chart with the setup's profiles document passes a server-side dry run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies import load_profiles_file
from tests.helm.chart import apply, for_server, render

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "kueue"
SETUPS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
CHECK_CONTROLLER = "atoll.dev/topology"


def _docs(setup: str, name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SAMPLES / setup / name).read_text()) if d]


def _kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_the_four_setups_are_there() -> None:
    assert SETUPS == ["dgx-h100", "gb200-nvl72", "mixed-a100-h100", "mixed-accelerators"]
    assert sorted(p.name for p in SAMPLES.iterdir()) == SETUPS  # one place per setup: no loose sample beside them
    for setup in SETUPS:
        assert {p.name for p in (SAMPLES / setup).iterdir()} == {"kueue.yaml", "jobs.yaml", "profiles.yaml"}


def test_gb200_levels_run_zone_block_clique_hostname() -> None:
    [topology] = _kind(_docs("gb200-nvl72", "kueue.yaml"), "Topology").values()
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        "topology.kubernetes.io/zone", "network.example.com/block", "nvidia.com/gpu.clique", "kubernetes.io/hostname"]


@pytest.mark.parametrize("setup", SETUPS)
def test_every_name_a_setup_refers_to_exists(setup: str) -> None:
    kueue, jobs = _docs(setup, "kueue.yaml"), _docs(setup, "jobs.yaml")
    profiles = load_profiles_file(SAMPLES / setup / "profiles.yaml")
    topologies, flavors = _kind(kueue, "Topology"), _kind(kueue, "ResourceFlavor")
    assert _kind(kueue, "AdmissionCheck") == {}  # one owner: the chart
    [check] = [o for o in render() if o["kind"] == "AdmissionCheck"]
    assert check["spec"]["controllerName"] == CHECK_CONTROLLER
    for cq in _kind(kueue, "ClusterQueue").values():
        queued = {f["name"] for group in cq["spec"]["resourceGroups"] for f in group["flavors"]}
        [strategy] = cq["spec"]["admissionChecksStrategy"]["admissionChecks"]
        assert strategy["name"] == check["metadata"]["name"] and set(strategy["onFlavors"]) == queued
        assert queued <= set(flavors) and queued <= set(profiles.flavors)
    for flavor, settings in profiles.flavors.items():
        assert flavor in flavors and "topologyName" not in flavors[flavor]["spec"]  # Atoll places, not Kueue's TAS
        levels = [lv["nodeLabel"] for lv in topologies[settings.topology]["spec"]["levels"]]
        for name, profile in profiles.profiles.items():
            profile.for_flavor(flavor, levels, name=name)  # raises ProfileLevelError naming the field
    local_queues = {(q["metadata"]["namespace"], q["metadata"]["name"]) for q in _kind(kueue, "LocalQueue").values()}
    assert {q["spec"]["clusterQueue"] for q in _kind(kueue, "LocalQueue").values()} <= set(_kind(kueue, "ClusterQueue"))
    for job in jobs:
        meta = job["metadata"]
        assert (meta["namespace"], meta["labels"]["kueue.x-k8s.io/queue-name"]) in local_queues, meta["name"]
        annotations = job["spec"]["template"]["metadata"].get("annotations", {})
        assert annotations.get("atoll.dev/profile", profiles.default_profile) in profiles.profiles
        assert annotations.get("atoll.dev/class", next(iter(profiles.classes), None)) in profiles.classes
        assert job["spec"]["suspend"] is True  # Kueue admits it; a job that starts unsuspended bypasses the queue


@pytest.fixture
def created(kube_client: Any) -> Iterator[list[dict[str, Any]]]:
    """Objects created by a test; cluster-scoped ones are deleted after it (the setups share names;
    namespaced ones live in the test's own namespace)."""
    objects: list[dict[str, Any]] = []
    yield objects
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(kube_client)
    for obj in reversed(objects):
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        if not resource.namespaced:
            resource.delete(name=obj["metadata"]["name"])


@pytest.mark.apiserver
@pytest.mark.parametrize("setup", SETUPS)
def test_a_setup_is_created_on_the_apiserver(setup: str, kube_client: Any, namespace: str, created: list[dict[str, Any]]) -> None:
    kinds = []
    docs = _docs(setup, "kueue.yaml") + _docs(setup, "jobs.yaml")
    sample_namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    for obj in docs:
        if obj["kind"] == "Namespace":
            continue
        if "namespace" in obj["metadata"]:
            # the file's namespaces (team-a, ...) become this test's, so other tests' objects never collide
            assert obj["metadata"]["namespace"] in sample_namespaces, "the file creates the namespaces it uses"
            obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        out = apply(kube_client, obj)
        assert out["metadata"]["uid"], obj["metadata"]["name"]
        created.append(obj)
        kinds.append(obj["kind"])
    assert {"Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue", "Job"} <= set(kinds) and "AdmissionCheck" not in kinds
    # Atoll's chart with this setup's profiles, the AdmissionCheck the ClusterQueue lists included
    values = {"profiles": {"document": (SAMPLES / setup / "profiles.yaml").read_text()}}
    rendered = render(for_server(kube_client, values), release="sample", namespace=namespace)
    assert [o["metadata"]["name"] for o in rendered if o["kind"] == "AdmissionCheck"] == ["atoll-topology"]
    for obj in rendered:
        apply(kube_client, obj, dry_run=True)

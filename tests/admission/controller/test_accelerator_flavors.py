"""One controller serves flavors of different accelerators side by side: each flavor's
``gpuResource`` (profiles document, cluster model) is the resource its nodes offer and its pods
request. The controller on the real apiserver and ``atoll place`` on the same state agree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli import main
from admission.kube import CONFIGMAPS, WatchEvent
from tests.admission.fabric import BLOCK, CLIQUE, GROUP, POOL, VERSION, Fabric, profiles_doc, run
from tests.kube_objects import create_node, node, resource_flavor, topology, workload_manifest

pytestmark = pytest.mark.apiserver

AMD = "amd.com/gpu"


@pytest.fixture
def fabric(kube_client: Any, namespace: str) -> Fabric:
    return Fabric(kube_client, namespace)


def _as_amd(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its nvidia.com/gpu amounts offered or requested as amd.com/gpu."""
    return json.loads(json.dumps(obj).replace('"nvidia.com/gpu"', f'"{AMD}"'))


def _amd_nodes(ns: str) -> list[dict[str, Any]]:
    """One block, two cliques of two nodes with 8 AMD GPUs; c0n0 is full (another tenant)."""
    return [{"name": f"{ns}-amd-c{c}n{i}", "labels": {POOL: f"{ns}-amd", BLOCK: f"{ns}-amd-b0", CLIQUE: f"{ns}-amd-c{c}"},
             "used": 8 if (c, i) == (0, 0) else 0} for c in range(2) for i in range(2)]


def _normal(updates: list[dict[str, Any]], decision_id: str) -> list[dict[str, Any]]:
    return json.loads(json.dumps(updates).replace(decision_id, "<decision>"))


def test_nvidia_and_amd_flavors_are_placed_side_by_side_and_atoll_place_agrees(fabric: Fabric, tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture[str]) -> None:
    ns = fabric.ns
    amd_flavor, amd_topology = f"{ns}-amd", f"{ns}-amd-topo"
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["flavors"][amd_flavor] = {"topology": amd_topology, "gpuResource": AMD}
    fabric.install(doc)  # the NVIDIA flavor: 2 blocks × 2 cliques × 2 nodes of 4 nvidia.com/gpu
    fabric.custom.create_cluster_custom_object(GROUP, VERSION, "topologies", topology(amd_topology, [BLOCK, CLIQUE]))
    fabric.custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", resource_flavor(amd_flavor, {POOL: amd_flavor}))
    amd_nodes = _amd_nodes(ns)
    for n in amd_nodes:
        create_node(fabric.core, _as_amd(node(n["name"], n["labels"], 8)))
    fabric.core.create_namespaced_pod(ns, {"metadata": {"name": "other-tenant", "namespace": ns}, "spec": {
        "nodeName": f"{ns}-amd-c0n0", "containers": [{"name": "c", "image": "registry.example.com/x:1",
                                                      "resources": {"requests": {AMD: "8"}, "limits": {AMD: "8"}}}]}})
    amd_manifest = _as_amd(workload_manifest(ns, "amd-train", [("workers", 2, 4)]))
    fabric.kueue.create(amd_manifest)
    fabric.kueue.reserve_quota(ns, "amd-train", fabric.cq, amd_flavor)
    fabric.submit("nv-train", [("workers", 2, 4)])

    verdicts = {v.flavor: v.outcome for v in run(fabric.controller(new_id=lambda: "d-apiserver"))}
    assert verdicts == {amd_flavor: "admit", fabric.flavor: "admit"}
    amd_entry, nv_entry = fabric.entry("amd-train"), fabric.entry("nv-train")
    assert amd_entry["state"] == nv_entry["state"] == "Ready"
    # 8 AMD GPUs: clique c0 has one free node of 8 (its other node is full), the best fit, and one
    # node holds both pods; a controller that counted only nvidia.com/gpu saw no GPUs here and placed nothing
    assert amd_entry["podSetUpdates"][0]["nodeSelector"] == {"kubernetes.io/hostname": f"{ns}-amd-c0n1"}
    assert nv_entry["podSetUpdates"][0]["nodeSelector"][CLIQUE].startswith(f"{ns}-b")
    expected = _normal(amd_entry["podSetUpdates"], "d-apiserver")

    # atoll place on a cluster model of the same state: the flavor is the one whose accelerator the Workload requests
    model = {"name": "same-state", "flavors": [
        {"name": fabric.flavor, "topology": fabric.topology, "nodeLabels": {POOL: ns},
         "levels": [{"label": BLOCK, "bandwidthGBps": 50, "latencyUs": 5}, {"label": CLIQUE, "bandwidthGBps": 1800, "latencyUs": 1}],
         "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
         "nodes": [{"name": fabric.node_name(b, c, i), "labels": {POOL: ns, BLOCK: f"{ns}-b{b}", CLIQUE: f"{ns}-b{b}c{c}"}}
                   for b in range(2) for c in range(2) for i in range(2)]},
        {"name": amd_flavor, "topology": amd_topology, "gpuResource": AMD, "nodeLabels": {POOL: amd_flavor},
         "levels": [{"label": BLOCK, "bandwidthGBps": 50, "latencyUs": 5}, {"label": CLIQUE, "bandwidthGBps": 448, "latencyUs": 1}],
         "nodeAllocatable": {AMD: 8, "cpu": "64", "memory": "512Gi", "pods": 110},
         "nodes": [{"name": n["name"], "labels": n["labels"], "used": {AMD: n["used"]}} for n in amd_nodes]}]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(model))
    place_doc = profiles_doc(fabric.flavor, fabric.topology)
    place_doc["flavors"][amd_flavor] = {"topology": amd_topology}  # the cluster model's gpuResource is honoured
    (tmp_path / "profiles.yaml").write_text(yaml.safe_dump(place_doc))
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump(amd_manifest))
    capsys.readouterr()
    assert main(["place", "--cluster", str(tmp_path / "cluster.yaml"), "--profiles", str(tmp_path / "profiles.yaml"),
                 "--workload", str(tmp_path / "workload.yaml"), "--format", "json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert placed["flavor"] == amd_flavor and placed["outcome"] == "admit"
    assert _normal(placed["podSetUpdates"], "what-if") == expected


def test_a_document_that_names_the_accelerator_later_relists_the_pods(fabric: Fabric) -> None:
    """The pods were read while amd.com/gpu was nobody's accelerator: once the document names it,
    their requests are read again, so the full node is seen full."""
    ns = fabric.ns
    amd_flavor, amd_topology = f"{ns}-amd", f"{ns}-amd-topo"
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["flavors"][amd_flavor] = {"topology": amd_topology}
    fabric.install(doc, nodes=False)
    fabric.custom.create_cluster_custom_object(GROUP, VERSION, "topologies", topology(amd_topology, [BLOCK, CLIQUE]))
    fabric.custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", resource_flavor(amd_flavor, {POOL: amd_flavor}))
    for n in _amd_nodes(ns):
        create_node(fabric.core, _as_amd(node(n["name"], n["labels"], 8)))
    fabric.core.create_namespaced_pod(ns, {"metadata": {"name": "other-tenant", "namespace": ns}, "spec": {
        "nodeName": f"{ns}-amd-c0n0", "containers": [{"name": "c", "image": "registry.example.com/x:1",
                                                      "resources": {"requests": {AMD: "8"}, "limits": {AMD: "8"}}}]}})
    ctrl = fabric.controller()
    run(ctrl)
    assert ctrl.cache.snapshot(amd_flavor).total_gpus() == 0  # amd.com/gpu is not an accelerator of this document
    doc["flavors"][amd_flavor]["gpuResource"] = AMD
    fabric.set_profiles(doc)
    cm = fabric.port.get(CONFIGMAPS, "atoll-policies", ns)
    ctrl._apply_event(CONFIGMAPS, WatchEvent("MODIFIED", cm))  # only the ConfigMap's event, as the watch delivers it
    snap = ctrl.cache.snapshot(amd_flavor)
    assert snap.total_gpus() == 32 and snap.free_gpus() == 24

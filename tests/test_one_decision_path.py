"""One decision path: the same cluster state and Workload (a pod template with a nodeSelector on a
non-topology label, required node affinity and a toleration) give the same verdict and the same
podSetUpdates through ``atoll place``, through the simulator's in-memory port, through the
simulator's Atoll policy, and through the controller on the real apiserver."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli import main
from admission.controller import ConfigSettings, Controller, KueueSettings, Recorder, Settings
from admission.kube import PODS, WORKLOADS, ManualClock
from admission.simulator._deployed import DeployedAtoll
from admission.simulator._port import (
    CHECK_NAME,
    PROFILES_NAMESPACE,
    MemoryCluster,
    cluster_objects,
    profiles_for_cluster,
    workload_object,
)
from policies import ProfilesDocument
from tests.admission.fabric import BLOCK, CLIQUE, POOL, Fabric, profiles_doc, run
from tests.kube_objects import create_node, node, workload_manifest
from topology import ClusterModel

pytestmark = pytest.mark.apiserver

ZONE = "topology.example.com/zone"
TAINT = {"key": "dedicated", "value": "train", "effect": "NoSchedule"}
DECISION = "<decision>"


@pytest.fixture
def fabric(kube_client: Any, namespace: str) -> Fabric:
    return Fabric(kube_client, namespace)


def _nodes(ns: str) -> list[dict[str, Any]]:
    """2 blocks × 2 cliques × 2 nodes; zone-a is block 1; b1c0n1 is tainted; b0c0n0 is full."""
    out = []
    for b in range(2):
        for c in range(2):
            for i in range(2):
                name = f"{ns}-b{b}c{c}n{i}"
                labels = {POOL: ns, BLOCK: f"{ns}-b{b}", CLIQUE: f"{ns}-b{b}c{c}", ZONE: "zone-a" if b else "zone-b"}
                out.append({"name": name, "labels": labels, "taints": [TAINT] if (b, c, i) == (1, 0, 1) else [],
                            "used": 4 if (b, c, i) == (0, 0, 0) else 0})
    return out


def _template(ns: str) -> dict[str, Any]:
    return {"nodeSelector": {ZONE: "zone-a"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [f"{ns}-b1c1n0"]}]}]}}}}


def _manifest(ns: str) -> dict[str, Any]:
    wl = workload_manifest(ns, "train", [("workers", 2, 4)])
    wl["spec"]["podSets"][0]["template"]["spec"].update(_template(ns))
    return wl


def _model(fab: Fabric, nodes: list[dict[str, Any]]) -> ClusterModel:
    return ClusterModel.model_validate({"name": "same-state", "flavors": [{
        "name": fab.flavor, "topology": fab.topology, "nodeLabels": {POOL: fab.ns},
        "levels": [{"label": BLOCK, "bandwidthGBps": 50, "latencyUs": 5}, {"label": CLIQUE, "bandwidthGBps": 1800, "latencyUs": 1}],
        "nodeLink": {"label": "kubernetes.io/hostname", "bandwidthGBps": 1800, "latencyUs": 1},
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "nodes": [{"name": n["name"], "labels": n["labels"], "taints": n["taints"], "used": {"nvidia.com/gpu": n["used"]}} for n in nodes]}]})


def _normal(updates: list[dict[str, Any]], decision_id: str) -> list[dict[str, Any]]:
    """podSetUpdates with the decision id (unique per decision) replaced by one placeholder."""
    return json.loads(json.dumps(updates).replace(decision_id, DECISION))


def _pending(fab: Fabric) -> dict[str, Any]:
    """The Workload as Kueue leaves it for Atoll: quota reserved on the flavor, the check Pending."""
    return workload_object("train", [dict(ps) for ps in _manifest(fab.ns)["spec"]["podSets"]], flavor=fab.flavor, namespace=fab.ns)


def test_place_the_simulator_and_the_controller_give_one_answer(fabric: Fabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw_doc = profiles_doc(fabric.flavor, fabric.topology)
    doc = ProfilesDocument.model_validate(raw_doc)
    nodes = _nodes(fabric.ns)
    model = _model(fabric, nodes)

    # the controller on the real apiserver
    fabric.install(raw_doc, nodes=False)
    for n in nodes:
        create_node(fabric.core, node(n["name"], n["labels"], 4, taints=n["taints"]))
    fabric.bind_pod("other-tenant", f"{fabric.ns}-b0c0n0", 4)
    fabric.kueue.create(_manifest(fabric.ns))
    fabric.kueue.reserve_quota(fabric.ns, "train", fabric.cq, fabric.flavor)
    run(fabric.controller(new_id=lambda: "d-apiserver"))
    entry = fabric.entry("train")
    assert entry["state"] == "Ready"
    expected = _normal(entry["podSetUpdates"], "d-apiserver")
    # every constraint of the template mattered: zone-a is block 1, the affinity rules out clique
    # b1c1, the toleration lets the tainted b1c0n1 in
    assert expected[0]["nodeSelector"] == {CLIQUE: f"{fabric.ns}-b1c0"}

    # atoll place, from files, through the command line
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(model.model_dump(mode="json", by_alias=True, exclude_defaults=True)))
    (tmp_path / "profiles.yaml").write_text(yaml.safe_dump(raw_doc))
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump(_manifest(fabric.ns)))
    capsys.readouterr()  # the controller's log lines so far
    assert main(["place", "--cluster", str(tmp_path / "cluster.yaml"), "--profiles", str(tmp_path / "profiles.yaml"),
                 "--workload", str(tmp_path / "workload.yaml"), "--format", "json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert placed["outcome"] == "admit"
    assert _normal(placed["podSetUpdates"], "what-if") == expected

    # the simulator's port: the controller writing to the in-memory cluster
    port = MemoryCluster(ManualClock()).load(cluster_objects(model, profiles_for_cluster(doc, model)))
    port.put(WORKLOADS, _pending(fabric))
    settings = Settings(kueue=KueueSettings(admission_check=CHECK_NAME), config=ConfigSettings(namespace=PROFILES_NAMESPACE))
    sim_ctrl = Controller(port, settings=settings, clock=port.clock, recorder=Recorder(_Sink()), new_id=lambda: "d-port")
    sim_ctrl.sync()
    assert [v.outcome for v in sim_ctrl.process()] == ["admit"]
    written = next(e for e in port.get(WORKLOADS, "train", fabric.ns)["status"]["admissionChecks"] if e["name"] == CHECK_NAME)
    assert written["state"] == "Ready" and _normal(written["podSetUpdates"], "d-port") == expected
    assert len(port.list(PODS).items) == 1  # the other tenant's pod, from the model's used GPUs

    # the simulator's Atoll policy (the Decider and Ledger on the cache the simulator feeds)
    atoll = DeployedAtoll("atoll-strict", "strict", doc, model)
    obj = _pending(fabric)
    verdict = atoll.decide(0, obj, 0.0)
    assert verdict.outcome == "admit" and _normal(verdict.podset_updates, verdict.decision_id) == expected


def test_the_answers_agree_when_the_workload_must_wait(fabric: Fabric, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without the toleration no clique of zone-a holds two pods: every path says Retry."""
    raw_doc = profiles_doc(fabric.flavor, fabric.topology)
    nodes = _nodes(fabric.ns)
    model = _model(fabric, nodes)
    manifest = _manifest(fabric.ns)
    del manifest["spec"]["podSets"][0]["template"]["spec"]["tolerations"]
    fabric.install(raw_doc, nodes=False)
    for n in nodes:
        create_node(fabric.core, node(n["name"], n["labels"], 4, taints=n["taints"]))
    fabric.bind_pod("other-tenant", f"{fabric.ns}-b0c0n0", 4)
    fabric.kueue.create(manifest)
    fabric.kueue.reserve_quota(fabric.ns, "train", fabric.cq, fabric.flavor)
    run(fabric.controller())
    entry = fabric.entry("train")
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(model.model_dump(mode="json", by_alias=True, exclude_defaults=True)))
    (tmp_path / "profiles.yaml").write_text(yaml.safe_dump(raw_doc))
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump(manifest))
    capsys.readouterr()  # the controller's log lines so far
    assert main(["place", "--cluster", str(tmp_path / "cluster.yaml"), "--profiles", str(tmp_path / "profiles.yaml"),
                 "--workload", str(tmp_path / "workload.yaml"), "--format", "json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert entry["state"] == "Retry" and placed["outcome"] == "wait"
    assert placed["retry_after_seconds"] == entry["requeueAfterSeconds"] == 30


class _Sink:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None

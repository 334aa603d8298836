"""A Workload alone on its flavor never waits for itself: its own PodSets sharing a nodeSelector
domain is no reason to wait on owed pods (no other Workload owes any). Decided by the controller
on the in-memory cluster (``atoll place``'s path), then on the real apiserver; a wait on owed
pods names the Workloads that owe them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from admission.cli._place import _kueue_workload, place_workload
from admission.simulator._port import quantities
from policies import load_profiles
from tests.admission.fabric import Fabric, profiles_doc, run
from topology import ResourceVector, load_cluster_model

CLIQUE = "nvidia.com/gpu.clique"
HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
N0, N1 = "gpu-c0-n0", "gpu-c0-n1"

CLUSTER = """\
name: two-nodes
flavors:
  - name: gpu
    topology: fabric
    levels:
      - {label: nvidia.com/gpu.clique, bandwidthGBps: 900, latencyUs: 1}
      - {label: kubernetes.io/hostname, bandwidthGBps: 900, latencyUs: 1}
    nodeAllocatable: {nvidia.com/gpu: 8, cpu: "224", memory: 2000Gi, pods: 110}
    generate:
      - {level: nvidia.com/gpu.clique, count: 1, prefix: c}
      - {level: kubernetes.io/hostname, count: 2, prefix: n}
"""


def profiles(enforcement: str) -> Any:
    return load_profiles(f"""\
defaultProfile: strict
flavors:
  gpu: {{topology: fabric, enforcement: {enforcement}}}
profiles:
  strict: {{requiredLevel: {CLIQUE}}}
""")


def podset(name: str, count: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "count": count, "template": {"metadata": {"annotations": annotations}, "spec": {"containers": [
        {"name": "c", "image": "registry.example.com/train:1", "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"}}}]}}}


def launcher_and_workers(launchers: int, workers: int) -> dict[str, Any]:
    """A launcher PodSet (hostname required) and workers (hostname preferred), one GPU a pod."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "lone", "namespace": "team"},
            "spec": {"queueName": "lq", "podSets": [podset("launcher", launchers, {REQUIRED: HOSTNAME}),
                                                    podset("workers", workers, {PREFERRED: HOSTNAME})]}}


def busy(node: str, gpus: int) -> dict[str, Any]:
    """A running pod Atoll never placed."""
    return {"metadata": {"name": f"busy-{node}", "namespace": "other", "uid": f"busy-{node}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": quantities(ResourceVector(gpu=gpus), "nvidia.com/gpu")}}]},
            "status": {"phase": "Running"}}


def decide_alone(tmp_path: Path, enforcement: str, manifest: dict[str, Any], occupied: list[dict[str, Any]] | None = None) -> Any:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    model = load_cluster_model(path)
    workload = _kueue_workload(manifest, "gpu", "nvidia.com/gpu", None, 0.0)
    return place_workload(model, profiles(enforcement), workload, occupied=occupied or [])


def by_podset(verdict: Any) -> dict[str, Any]:
    return {u["name"]: u for u in verdict.podset_updates}


@pytest.mark.parametrize("enforcement", ["exact", "domain"])
def test_a_launcher_and_fifteen_workers_alone_on_two_nodes_are_admitted(tmp_path: Path, enforcement: str) -> None:
    verdict = decide_alone(tmp_path, enforcement, launcher_and_workers(1, 15))
    assert verdict.outcome == "admit", verdict.message
    placed = {p.podset: p.nodes for p in verdict.placements}
    assert sum(placed["launcher"].values()) == 1 and sum(placed["workers"].values()) == 15
    (launcher_node,) = placed["launcher"]
    assert placed["workers"].get(launcher_node, 0) == 7  # every GPU of both nodes is used
    updates = by_podset(verdict)
    assert updates["workers"]["nodeSelector"] == {CLIQUE: "gpu-c0"}
    if enforcement == "exact":  # pinned pods cannot trade room: the launcher keeps its own node
        assert updates["launcher"]["nodeSelector"] == {HOSTNAME: launcher_node}
    else:  # one pod is on one node whatever its selector: widened, no worker can take its room
        assert updates["launcher"]["nodeSelector"] == {CLIQUE: "gpu-c0"}
        assert any("or this Workload's other PodSets" in n for n in verdict.notes)


def test_podsets_that_trade_room_even_on_an_empty_flavor_are_rejected_with_the_exact_remedy(tmp_path: Path) -> None:
    """Two launcher pods must share a node, so their hostname selector cannot widen, and 14
    workers need the rest of both nodes: under domain any worker may bind on the launchers'
    node. No event changes that, so the answer comes now, not after waiting."""
    manifest = launcher_and_workers(2, 14)
    verdict = decide_alone(tmp_path, "domain", manifest)
    assert verdict.outcome == "reject", verdict.message
    assert "podSets launcher, workers of this Workload share a nodeSelector domain" in verdict.message
    assert "even with the flavor empty" in verdict.message
    assert "flavors.gpu.enforcement: exact" in verdict.message
    assert "still owe" not in verdict.message

    exact = decide_alone(tmp_path, "exact", manifest)  # the remedy named works
    assert exact.outcome == "admit", exact.message


def test_podsets_that_trade_room_only_at_the_room_free_now_wait_naming_no_workload(tmp_path: Path) -> None:
    """One GPU busy on each node: 8 workers no longer fit on one node, so they span both and
    could take the launchers' room. With the nodes empty they would not (workers on one node,
    launchers on the other): more room is an event that can come, so this waits, for room."""
    manifest = launcher_and_workers(2, 8)
    verdict = decide_alone(tmp_path, "domain", manifest, [busy(N0, 1), busy(N1, 1)])
    assert (verdict.outcome, verdict.reason) == ("wait", "no-domain"), verdict.message
    assert "no other Workload is waited on; waiting for room" in verdict.message
    assert "flavors.gpu.enforcement: exact" in verdict.message
    assert "still owe" not in verdict.message

    empty = decide_alone(tmp_path, "domain", manifest)
    assert empty.outcome == "admit", empty.message
    assert {u["nodeSelector"][HOSTNAME] for u in empty.podset_updates} == {N0, N1}


# ----------------------------------------------------------------------------- the real apiserver


@pytest.mark.apiserver
@pytest.mark.parametrize("enforcement", ["exact", "domain"])
def test_the_lone_workload_is_admitted_by_the_controller_on_the_apiserver(fabric: Fabric, enforcement: str) -> None:
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["flavors"][fabric.flavor]["enforcement"] = enforcement
    fabric.install(doc, nodes=False)
    nodes = [fabric.add_node(0, 0, i, gpus=8) for i in range(2)]
    fabric.submit("lone", [("launcher", 1, 1), ("workers", 15, 1)],
                  podset_annotations={"launcher": {REQUIRED: HOSTNAME}, "workers": {PREFERRED: HOSTNAME}})
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit", verdict.message
    entry = fabric.entry("lone")
    assert entry["state"] == "Ready"
    updates = {u["name"]: u for u in entry["podSetUpdates"]}
    assert updates["workers"]["nodeSelector"] == {CLIQUE: fabric.clique(0, 0)}
    if enforcement == "exact":
        assert updates["launcher"]["nodeSelector"][HOSTNAME] in nodes
    else:
        assert updates["launcher"]["nodeSelector"] == {CLIQUE: fabric.clique(0, 0)}


@pytest.mark.apiserver
def test_a_wait_on_owed_pods_names_the_workloads_that_owe_them(fabric: Fabric) -> None:
    """A's one pod is owed on one node (hostname selector); B's clique-wide gang could take that
    node's room, and B's required clique cannot widen: B waits on A, and says so."""
    fabric.install(nodes=False)
    [fabric.add_node(0, 0, i, gpus=8) for i in range(2)]
    fabric.submit("a", [("main", 1, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit" and list(fabric.entry("a")["podSetUpdates"][0]["nodeSelector"]) == [HOSTNAME]
    fabric.submit("b", [("main", 3, 4)])
    (verdict,) = run(fabric.controller())
    assert (verdict.outcome, verdict.reason) == ("wait", "owed-pods"), verdict.message
    assert f"pods admitted Workloads {fabric.ns}/a still owe" in verdict.message
    assert f"{fabric.ns}/a" in fabric.entry("b")["message"]
    (record,) = [r for r in fabric.decision_records() if r["outcome"] == "wait"]
    assert (record["namespace"], record["workload"]) == (fabric.ns, "b")
    assert f"{fabric.ns}/a" in record["message"]

"""The cache keeps only what Atoll reads of Nodes and Workloads: no ``managedFields``, no node
image lists, no container images, commands or environment; and what it keeps reads the same
(``node_info``, ``parse_workload``, errors included)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.controller import ClusterCache, WorkloadError, node_info, parse_workload
from admission.controller._preempting import queue_rules
from admission.controller._quota import flavor_quota
from admission.controller._slim import slim_cluster_queue, slim_node, slim_workload
from admission.kube import CLUSTER_QUEUES, NODES, WORKLOADS

CONFIG = Path(__file__).resolve().parents[3] / "config" / "workloads"
MANAGED = [{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:images": {}}}}]


def kubelet_node(name: str = "n1", **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": "u1", "resourceVersion": "7", "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.clique": "c0"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0", **annotations}, "managedFields": MANAGED},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], "unschedulable": True,
                 "podCIDR": "10.0.0.0/24", "providerID": "cloud://n1"},
        "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "144", "memory": "1800Gi", "pods": "110"},
                   "capacity": {"nvidia.com/gpu": "4", "cpu": "144", "memory": "1800Gi", "pods": "110"},
                   "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                   "images": [{"names": [f"registry.example.com/img-{k}:v1"], "sizeBytes": 10**9} for k in range(30)],
                   "nodeInfo": {"kubeletVersion": "v1.33.2"}, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
    }


def full_workload() -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "w", "namespace": "team", "uid": "wu", "resourceVersion": "9", "generation": 2, "labels": {"a": "b"},
                     "annotations": {"atoll.dev/x": "1"}, "managedFields": MANAGED,
                     "ownerReferences": [{"kind": "Job", "name": "w", "uid": "j"}]},
        "spec": {"queueName": "q", "active": True, "podSets": [
            {"name": "launcher", "count": 1, "template": {
                "metadata": {"annotations": {"atoll.dev/profile": "strict"}, "labels": {"role": "launcher"}},
                "spec": {"containers": [{"name": "l", "image": "img", "command": ["run"], "env": [{"name": "A", "value": "1"}],
                                         "resources": {"requests": {"cpu": "2"}}}],
                         "nodeSelector": {"pool": "a"}}}},
            {"name": "workers", "count": 4, "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-preferred-topology": "nvidia.com/gpu.clique"}},
                "spec": {"containers": [{"name": "w", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "4"}},
                                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                         "initContainers": [{"name": "i", "image": "init", "resources": {"requests": {"cpu": "8"}}}],
                         "overhead": {"cpu": "1"},
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                             {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}},
                             "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
                         "volumes": [{"name": "data", "emptyDir": {}}], "restartPolicy": "Never"}}},
        ]},
        "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "workers", "count": 4, "flavors": {"nvidia.com/gpu": "gb200"}}]},
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admissionChecks": [{"name": "atoll-topology", "state": "Pending"}]},
    }


def test_node_slim_drops_what_atoll_never_reads_and_reads_the_same() -> None:
    raw = kubelet_node(**{"atoll.dev/gpu-perf": "0.97"})
    slim = slim_node(copy.deepcopy(raw))
    assert "managedFields" not in slim["metadata"] and "images" not in slim["status"] and "nodeInfo" not in slim["status"]
    assert slim["metadata"]["annotations"] == {"atoll.dev/gpu-perf": "0.97"}
    assert [c["type"] for c in slim["status"]["conditions"]] == ["Ready"]
    assert node_info(slim, "nvidia.com/gpu") == node_info(raw, "nvidia.com/gpu")
    bad = kubelet_node(**{"atoll.dev/gpu-perf": "fast"})  # a node's problem reads the same too
    assert node_info(slim_node(bad), "nvidia.com/gpu") == node_info(bad, "nvidia.com/gpu")


def test_cache_stores_slim_nodes_and_workloads() -> None:
    c = ClusterCache()
    c.upsert(NODES, kubelet_node())
    c.upsert(WORKLOADS, full_workload())
    stored_node = c.objects[NODES]["n1"]
    assert "managedFields" not in stored_node["metadata"] and "images" not in stored_node["status"]
    stored = c.objects[WORKLOADS]["team/w"]
    assert "managedFields" not in stored["metadata"] and "ownerReferences" not in stored["metadata"]
    assert stored["spec"]["podSets"][1]["template"]["spec"]["containers"] == [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    assert "volumes" not in stored["spec"]["podSets"][1]["template"]["spec"]
    assert stored["status"] == full_workload()["status"]
    assert c.nodes["n1"] == node_info(kubelet_node(), "nvidia.com/gpu")[0]


def full_cluster_queue() -> dict[str, Any]:
    """A ClusterQueue as Kueue serves it: managedFields, conditions and every usage figure beside what Atoll reads."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": "cq", "uid": "u", "resourceVersion": "7", "generation": 3, "managedFields": [{"manager": "kubectl"}],
                         "finalizers": ["kueue.x-k8s.io/resource-in-use"]},
            "spec": {"cohortName": "pool", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                     "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                     "admissionChecksStrategy": {"admissionChecks": [{"name": "atoll", "onFlavors": ["gpu"]}]},
                     "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [{"name": "gpu", "resources": [
                         {"name": "cpu", "nominalQuota": "1k"},
                         {"name": "nvidia.com/gpu", "nominalQuota": "64", "borrowingLimit": "8", "lendingLimit": "32"}]}]}]},
            "status": {"conditions": [{"type": "Active", "status": "True"}], "pendingWorkloads": 3, "admittedWorkloads": 2,
                       "flavorsReservation": [{"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "total": "24", "borrowed": "0"}]}],
                       "flavorsUsage": [{"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "total": "16", "borrowed": "0"}]}]}}


def test_cluster_queue_slim_keeps_what_atoll_reads_and_reads_the_same() -> None:
    full = full_cluster_queue()
    slim = slim_cluster_queue(full)
    assert flavor_quota(slim, "gpu", ("nvidia.com/gpu",)) == flavor_quota(full, "gpu", ("nvidia.com/gpu",)) == (64, 8, 32, 24)
    assert queue_rules(slim) == queue_rules(full)
    assert slim["spec"]["admissionChecksStrategy"] == full["spec"]["admissionChecksStrategy"]
    assert slim["spec"]["resourceGroups"][0]["coveredResources"] == ["cpu", "nvidia.com/gpu"]
    assert "managedFields" not in slim["metadata"] and slim["metadata"]["resourceVersion"] == "7"
    assert set(slim["status"]) == {"flavorsReservation"} and "namespaceSelector" not in slim["spec"]
    c = ClusterCache()
    c.upsert(CLUSTER_QUEUES, full)
    assert c.objects[CLUSTER_QUEUES]["cq"] == slim


def _examples() -> list[dict[str, Any]]:
    out = [full_workload()]
    for path in sorted(CONFIG.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):  # a service file holds several Workloads
            if obj and obj.get("kind") == "Workload":
                out.append(obj)
    return out


@pytest.mark.parametrize("obj", _examples(), ids=lambda o: o["metadata"]["name"])
def test_workload_slim_parses_to_the_same_view(obj: dict[str, Any]) -> None:
    assert parse_workload(slim_workload(copy.deepcopy(obj))) == parse_workload(obj)


@pytest.mark.parametrize("break_it", [
    lambda w: w["spec"]["podSets"][1]["template"]["spec"].update(containers=["not a mapping"]),
    lambda w: w["spec"]["podSets"][1]["template"]["spec"].update(containers=[]),
    lambda w: w["spec"]["podSets"][1]["template"]["spec"]["containers"][0].update(resources={"requests": {"cpu": "lots"}}),
    lambda w: w["spec"]["podSets"][1]["template"]["spec"].update(affinity="none"),
    lambda w: w["spec"]["podSets"][1]["template"].update(spec="none"),
    lambda w: w["spec"]["podSets"].append("not a podset"),
], ids=["container-not-mapping", "no-containers", "bad-quantity", "affinity-not-mapping", "spec-not-mapping", "podset-not-mapping"])
def test_a_malformed_workload_is_named_the_same_after_slimming(break_it: Any) -> None:
    obj = full_workload()
    break_it(obj)
    with pytest.raises(WorkloadError) as raw:
        parse_workload(obj)
    with pytest.raises(WorkloadError) as slim:
        parse_workload(slim_workload(copy.deepcopy(obj)))
    assert str(slim.value) == str(raw.value)

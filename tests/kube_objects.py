"""Builders for the Kubernetes and Kueue (v1beta2) objects the integration tests create, and
``KueueActor``, which plays Kueue's part of the admission-check protocol as DESIGN.md states it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubernetes import client

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
GPU = "nvidia.com/gpu"
CHECK = "atoll-topology"
# Kueue leaves the message empty; an empty string in an apply patch reaches a 1.20 apiserver as
# null and fails validation, so the tests' Kueue stand-in says something instead.
PENDING_MESSAGE = "Waiting for the admission check"


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, labels: dict[str, str], gpus: int = 4, *, ready: bool = True, unschedulable: bool = False,
         taints: list[dict[str, str]] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}, "annotations": annotations or {}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
            "capacity": {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady",
                            "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()}],
        },
    }


def create_node(core: client.CoreV1Api, body: dict[str, Any]) -> None:
    """Create, then write status through the status subresource (as a kubelet would)."""
    status = body["status"]
    core.create_node({"metadata": body["metadata"], "spec": body["spec"]})
    core.patch_node_status(body["metadata"]["name"], {"status": status})


def topology(name: str, levels: list[str]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}}


def resource_flavor(name: str, node_labels: dict[str, str], tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": node_labels}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def admission_check(name: str = CHECK) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": "atoll.dev/topology"}}


def cluster_queue(name: str, flavor: str, gpus: int, check: str = CHECK) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": flavor, "resources": [{"name": GPU, "nominalQuota": gpus}]}]}],
                     "admissionChecksStrategy": {"admissionChecks": [{"name": check, "onFlavors": [flavor]}]}}}


def local_queue(namespace: str, name: str, cq: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cq}}


def workload(namespace: str, name: str, podsets: list[tuple[str, int, int]], *, queue: str = "lq",
             annotations: dict[str, str] | None = None, podset_annotations: dict[str, dict[str, str]] | None = None,
             node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    """podsets: (name, count, GPUs per pod)."""
    sets = []
    for ps_name, count, gpus in podsets:
        spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.example.com/train:1",
                                "resources": {"requests": {GPU: str(gpus), "cpu": "1"}, "limits": {GPU: str(gpus)}}}]}
        if node_selector:
            spec["nodeSelector"] = node_selector
        sets.append({"name": ps_name, "count": count,
                     "template": {"metadata": {"annotations": (podset_annotations or {}).get(ps_name, {})}, "spec": spec}})
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"queueName": queue, "podSets": sets}}


class KueueActor:
    """Plays Kueue: reserves quota and adds the Pending check entry; reacts to Ready/Retry/Rejected
    (Retry: evict, release quota and reset the check to Pending after the delay; Rejected:
    deactivate). Writes under field manager ``kueue`` with server-side apply."""

    def __init__(self, api: client.ApiClient, check: str = CHECK) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.check = check

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", name)
        return obj

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.create_namespaced_custom_object(GROUP, VERSION, body["metadata"]["namespace"], "workloads", body)
        return obj

    def _apply_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": name, "namespace": namespace}, "status": status}
        obj: dict[str, Any] = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "workloads", name, body, field_manager="kueue", force=True,
            _content_type="application/apply-patch+yaml")
        return obj

    def reserve_quota(self, namespace: str, name: str, cluster_queue: str, flavor: str) -> dict[str, Any]:
        wl = self.get(namespace, name)
        assignments = []
        for ps in wl["spec"]["podSets"]:
            gpus = int(ps["template"]["spec"]["containers"][0]["resources"]["requests"][GPU])
            assignments.append({"name": ps["name"], "flavors": {GPU: flavor}, "count": ps["count"],
                                "resourceUsage": {GPU: str(gpus * ps["count"])}})
        t = now_rfc3339()
        return self._apply_status(namespace, name, {
            "admission": {"clusterQueue": cluster_queue, "podSetAssignments": assignments},
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": f"Quota reserved in ClusterQueue {cluster_queue}",
                            "lastTransitionTime": t, "observedGeneration": wl["metadata"].get("generation", 1)}],
            "admissionChecks": [{"name": self.check, "state": "Pending", "message": PENDING_MESSAGE, "lastTransitionTime": t}],
        })

    def check_state(self, namespace: str, name: str) -> dict[str, Any] | None:
        for entry in self.get(namespace, name).get("status", {}).get("admissionChecks", []):
            if entry["name"] == self.check:
                return dict(entry)
        return None

    def requeue_after_retry(self, namespace: str, name: str, cluster_queue: str, flavor: str) -> dict[str, Any]:
        """Kueue on Retry: evict (release quota), then after the delay reserve again with the check Pending."""
        t = now_rfc3339()
        self._apply_status(namespace, name, {
            "conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "evicted by admission check",
                            "lastTransitionTime": t}],
            "admissionChecks": [{"name": self.check, "state": "Pending", "message": PENDING_MESSAGE, "lastTransitionTime": t}],
        })
        return self.reserve_quota(namespace, name, cluster_queue, flavor)

    def finish(self, namespace: str, name: str) -> dict[str, Any]:
        t = now_rfc3339()
        return self._apply_status(namespace, name, {"conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved", "lastTransitionTime": t},
            {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "Job finished successfully", "lastTransitionTime": t}]})

"""Builders for the Kubernetes and Kueue (v1beta2) objects the integration tests create, and
Kueue's part of the admission-check protocol as DESIGN.md states it (``reserve_quota``,
``KueueActor``), written under Kueue's own field manager with server-side apply."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.utils import parse_quantity

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
GPU = "nvidia.com/gpu"
CHECK = "atoll-topology"
CONTROLLER_NAME = "atoll.dev/topology"
KUEUE_MANAGER = "kueue"
# Kueue adds its Pending entry with an empty message.
PENDING_MESSAGE = ""
APPLY = "application/apply-patch+yaml"


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------- core objects


def node(name: str, labels: dict[str, str], gpus: int = 4, *, ready: bool = True, unschedulable: bool = False,
         taints: list[dict[str, str]] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A GPU node; ``status`` (allocatable, Ready condition) is written by ``create_node``."""
    resources = {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    t = now_rfc3339()
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}, "annotations": annotations or {}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": dict(resources),
            "capacity": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady" if ready else "KubeletNotReady",
                            "message": "", "lastHeartbeatTime": t, "lastTransitionTime": t}],
        },
    }


def create_node(core: client.CoreV1Api, body: dict[str, Any]) -> client.V1Node:
    """Create the node, write its status through the status subresource (as a kubelet would:
    create ignores status), then set the taints back to the body's (the apiserver's admission
    taints new nodes not-ready; the absent node lifecycle controller would lift it)."""
    name = body["metadata"]["name"]
    core.create_node({"metadata": body["metadata"], "spec": body["spec"]})
    core.patch_node_status(name, {"status": body["status"]})
    patched: client.V1Node = core.patch_node(name, {"spec": {"taints": body["spec"].get("taints") or None}})
    return patched


# ---------------------------------------------------------------------- Kueue objects


def topology(name: str, levels: list[str]) -> dict[str, Any]:
    """A Kueue Topology; ``levels`` are node labels, top to bottom."""
    return {"apiVersion": API_VERSION, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]}}


def resource_flavor(name: str, node_labels: dict[str, str], tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": node_labels}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def admission_check(name: str = CHECK, controller_name: str = CONTROLLER_NAME) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": controller_name}}


def cluster_queue(name: str, flavor: str, gpus: int, check: str = CHECK) -> dict[str, Any]:
    """A ClusterQueue with ``gpus`` of quota on one flavor, opting that flavor into ``check``."""
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": flavor, "resources": [{"name": GPU, "nominalQuota": gpus}]}]}],
                     "admissionChecksStrategy": {"admissionChecks": [{"name": check, "onFlavors": [flavor]}]}}}


def local_queue(namespace: str, name: str, cq: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cq}}


def workload_manifest(namespace: str, name: str, podsets: list[tuple[str, int, int]], *, queue: str = "lq",
                      annotations: dict[str, str] | None = None, podset_annotations: dict[str, dict[str, str]] | None = None,
                      node_selector: dict[str, str] | None = None, tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A v1beta2 Workload; ``podsets`` are (name, pod count, GPUs per pod)."""
    sets = []
    for ps_name, count, gpus in podsets:
        spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": "registry.example.com/train:1",
            "resources": {"requests": {GPU: str(gpus), "cpu": "1"}, "limits": {GPU: str(gpus)}}}]}
        if node_selector:
            spec["nodeSelector"] = node_selector
        if tolerations:
            spec["tolerations"] = tolerations
        sets.append({"name": ps_name, "count": count,
                     "template": {"metadata": {"annotations": (podset_annotations or {}).get(ps_name, {})}, "spec": spec}})
    return {"apiVersion": API_VERSION, "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"queueName": queue, "podSets": sets}}


workload = workload_manifest  # the short name the controller tests use


# ---------------------------------------------------------------------- Kueue's part of the protocol


def _quantity(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else f"{int(value * 1000)}m"


def _pod_requests(podset: dict[str, Any]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for container in podset["template"]["spec"].get("containers", []):
        for resource, qty in container.get("resources", {}).get("requests", {}).items():
            total[resource] = total.get(resource, Decimal(0)) + parse_quantity(qty)
    return total


def apply_workload_status(custom: client.CustomObjectsApi, namespace: str, name: str, status: dict[str, Any],
                          manager: str = KUEUE_MANAGER) -> dict[str, Any]:
    """Server-side apply of ``status`` on ``workloads/status`` under ``manager`` (forced)."""
    body = {"apiVersion": API_VERSION, "kind": "Workload", "metadata": {"name": name, "namespace": namespace}, "status": status}
    obj: dict[str, Any] = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "workloads", name, body, field_manager=manager, force=True, _content_type=APPLY)
    return obj


def reserve_quota(custom: client.CustomObjectsApi, namespace: str, name: str, cluster_queue: str, flavor: str,
                  podset_counts: dict[str, int] | None = None, check_name: str = CHECK) -> dict[str, Any]:
    """What Kueue does at quota reservation: ``status.admission`` (every requested resource on
    ``flavor``, usage = per-pod requests x count), ``QuotaReserved=True``, and the check's
    ``Pending`` entry with an empty message. ``podset_counts`` overrides counts (partial admission)."""
    wl: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", name)
    assignments = []
    for ps in wl["spec"]["podSets"]:
        count = (podset_counts or {}).get(ps["name"], ps["count"])
        per_pod = _pod_requests(ps)
        assignments.append({"name": ps["name"], "flavors": {resource: flavor for resource in per_pod}, "count": count,
                            "resourceUsage": {resource: _quantity(qty * count) for resource, qty in per_pod.items()}})
    t = now_rfc3339()
    return apply_workload_status(custom, namespace, name, {
        "admission": {"clusterQueue": cluster_queue, "podSetAssignments": assignments},
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                        "message": f"Quota reserved in ClusterQueue {cluster_queue}", "lastTransitionTime": t,
                        "observedGeneration": wl["metadata"].get("generation", 1)}],
        "admissionChecks": [{"name": check_name, "state": "Pending", "message": PENDING_MESSAGE, "lastTransitionTime": t}],
    })


class KueueActor:
    """Plays Kueue for one admission check: reserves quota with the check Pending, and reacts to
    Retry (evict, release quota, Pending again) and completion, all under field manager ``kueue``."""

    def __init__(self, api: client.ApiClient, check: str = CHECK) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.check = check

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", name)
        return obj

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.create_namespaced_custom_object(GROUP, VERSION, body["metadata"]["namespace"], "workloads", body)
        return obj

    def reserve_quota(self, namespace: str, name: str, cluster_queue: str, flavor: str,
                      podset_counts: dict[str, int] | None = None) -> dict[str, Any]:
        return reserve_quota(self.custom, namespace, name, cluster_queue, flavor, podset_counts, self.check)

    def check_state(self, namespace: str, name: str) -> dict[str, Any] | None:
        for entry in self.get(namespace, name).get("status", {}).get("admissionChecks", []):
            if entry["name"] == self.check:
                return dict(entry)
        return None

    def finish(self, namespace: str, name: str) -> dict[str, Any]:
        """The job finished: ``Finished=True`` added, the admission kept (as Kueue keeps it)."""
        status = self.get(namespace, name).get("status", {})
        t = now_rfc3339()
        conditions = [c for c in status.get("conditions", []) if c["type"] != "Finished"]
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "Job finished successfully", "lastTransitionTime": t})
        applied: dict[str, Any] = {"conditions": conditions}
        if status.get("admission"):
            applied["admission"] = status["admission"]
        return apply_workload_status(self.custom, namespace, name, applied)

"""Builders for the Kubernetes and Kueue (v1beta2) objects the integration tests create, and
Kueue's part of the admission-check protocol (``reserve_quota``, ``KueueActor``), write by write
in Kueue's own order (Kueue v0.19's sources, file by file below):

- reservation: one forced server-side apply under field manager ``kueue`` (Kueue's scheduler):
  ``status.admission``, ``QuotaReserved=True`` and, in the same write, ``Evicted``/``Preempted``
  back to False (``SetQuotaReservation`` in Kueue's pkg/workload/workload.go), every check entry
  as it is plus a ``Pending`` one for a check that has none;
- reaction to a ``Retry``: ``status.requeueState.requeueAt = lastTransitionTime +
  requeueAfterSeconds`` (``NeedsRequeueAtUpdate``, pkg/workload/admissionchecks.go), then the
  eviction write (``prepareForEviction``, pkg/workload/evict/evict.go: ``Evicted=True``, every
  non-Pending entry reset to Pending without its podSetUpdates, ``retryCount``+1 for a Retry),
  then, once the job has stopped, the release write (``QuotaReserved=False``, admission cleared,
  ``Requeued``; pkg/controller/jobframework/reconciler.go), then the backoff's end
  (``Requeued=True``, ``BackoffFinished``) and a new reservation;
- reaction to ``Rejected``: ``DeactivationTarget``, ``spec.active=false``, eviction, release; no
  requeue (pkg/controller/core/workload_controller.go, ``reconcileCheckBasedEviction``);
- finish: ``Finished=True``, the admission kept.

Every write after the reservation is a JSON merge patch carrying the ``resourceVersion`` it was
computed from (Kueue's merge-patch mode, ``WorkloadRequestUseMergePatch``), re-read and redone on
a 409 as Kueue's reconcilers do. On the 1.20 test apiserver an apply that omits
``status.admission`` cannot release it; a merge patch setting ``admission: null`` together with
the condition changes does, in one write. Condition types Kueue does not manage (Atoll's
``atoll.dev/TopologyWaiting``) are carried through unchanged, as Kueue's writes leave them.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, cast

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


def manifest(obj: dict[str, Any]) -> Any:
    """A manifest as the client's typed calls take it (it sends a dict as it is)."""
    return obj


def create_node(core: client.CoreV1Api, body: dict[str, Any]) -> client.V1Node:
    """Create the node, write its status through the status subresource (as a kubelet would:
    create ignores status), then set the taints back to the body's (the apiserver's admission
    taints new nodes not-ready; the absent node lifecycle controller would lift it)."""
    name = body["metadata"]["name"]
    core.create_node(manifest({"metadata": body["metadata"], "spec": body["spec"]}))
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
            total[resource] = total.get(resource, Decimal(0)) + parse_quantity(qty)  # type: ignore[no-untyped-call]
    return total


def apply_workload_status(custom: client.CustomObjectsApi, namespace: str, name: str, status: dict[str, Any],
                          manager: str = KUEUE_MANAGER) -> dict[str, Any]:
    """Server-side apply of ``status`` on ``workloads/status`` under ``manager`` (forced)."""
    body = {"apiVersion": API_VERSION, "kind": "Workload", "metadata": {"name": name, "namespace": namespace}, "status": status}
    obj: dict[str, Any] = cast(dict[str, Any], custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "workloads", name, body, field_manager=manager, force=True, _content_type=APPLY))
    return obj


KUEUE_CONDITIONS = ("QuotaReserved", "BlockedOnPreemptionGates", "Evicted", "Admitted", "Preempted", "Requeued",
                    "DeactivationTarget", "Finished", "PodsReady")
"""The condition types Kueue writes (``admissionManagedConditions``, pkg/workload/patching/patching.go)."""
EVICTED_BY_CHECK = "AdmissionCheck"
DEACTIVATED = "Deactivated"
PREEMPTED = "Preempted"


def set_condition(conditions: list[dict[str, Any]], type_: str, status: str, reason: str, message: str,
                  now: str, generation: int | None = None) -> None:
    """``apimeta.SetStatusCondition``: lastTransitionTime moves only when the status changes."""
    new: dict[str, Any] = {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now}
    if generation is not None:
        new["observedGeneration"] = generation
    for i, c in enumerate(conditions):
        if c.get("type") == type_:
            if c.get("status") == status:
                new["lastTransitionTime"] = c.get("lastTransitionTime", now)
            conditions[i] = new
            return
    conditions.append(new)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def is_true(obj: dict[str, Any], type_: str) -> bool:
    c = condition(obj, type_)
    return bool(c and c.get("status") == "True")


def _get(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    obj = cast(dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", name))
    return obj


def _kueue_conditions(wl: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(c) for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") in KUEUE_CONDITIONS]


def reserve_quota(custom: client.CustomObjectsApi, namespace: str, name: str, cluster_queue: str, flavor: str,
                  podset_counts: dict[str, int] | None = None, check_name: str = CHECK,
                  copy: dict[str, Any] | None = None, list_missing: bool = True) -> dict[str, Any]:
    """What Kueue's scheduler writes at quota reservation, in one forced apply: ``status.admission``
    (every requested resource on ``flavor``, usage = per-pod requests x count), ``QuotaReserved=True``,
    ``Evicted`` and ``Preempted`` back to False if they were True, and the check entries as they
    are, with a ``Pending`` one (empty message) for a check that has none. ``podset_counts``
    overrides counts (partial admission). ``copy``: the scheduler's own copy of the Workload, as
    ``admit`` writes from it (``e.Obj``, pkg/scheduler/scheduler.go): its check entries are
    written, and ``Admitted=True`` with them when every one is ``Ready`` (``prepareWorkload``).
    ``list_missing=False``: a check with no entry gets none, as Kueue's scheduler writes when it
    reserves before its Workload controller has listed the checks."""
    wl = copy if copy is not None else _get(custom, namespace, name)
    assignments = []
    for ps in wl["spec"]["podSets"]:
        count = (podset_counts or {}).get(ps["name"], ps["count"])
        per_pod = _pod_requests(ps)
        assignments.append({"name": ps["name"], "flavors": {resource: flavor for resource in per_pod}, "count": count,
                            "resourceUsage": {resource: _quantity(qty * count) for resource, qty in per_pod.items()}})
    t = now_rfc3339()
    gen = wl["metadata"].get("generation", 1)
    conditions = _kueue_conditions(wl)
    set_condition(conditions, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}", t, gen)
    for type_ in ("Evicted", "Preempted"):  # resetActiveCondition: only a True one is turned False
        prev = condition(wl, type_)
        if prev and prev.get("status") == "True":
            set_condition(conditions, type_, "False", "QuotaReserved", "Previously: " + str(prev.get("message", "")), t, gen)
    checks = [dict(e) for e in (wl.get("status") or {}).get("admissionChecks") or []]
    if list_missing and not any(e.get("name") == check_name for e in checks):
        checks.append({"name": check_name, "state": "Pending", "message": PENDING_MESSAGE, "lastTransitionTime": t})
    if copy is not None and checks and all(e.get("state") == "Ready" for e in checks):
        set_condition(conditions, "Admitted", "True", "Admitted", "The workload is admitted", t, gen)
    return apply_workload_status(custom, namespace, name, {
        "admission": {"clusterQueue": cluster_queue, "podSetAssignments": assignments},
        "conditions": conditions,
        **({"admissionChecks": checks} if checks else {}),
    })


class KueueActor:
    """Plays Kueue for one admission check, write by write in Kueue's order (module docstring)."""

    def __init__(self, api: client.ApiClient, check: str = CHECK) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.check = check
        self.writes: list[str] = []
        """Which Kueue write happened, in order (for tests that check the protocol itself)."""

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return _get(self.custom, namespace, name)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        obj = cast(dict[str, Any], self.custom.create_namespaced_custom_object(GROUP, VERSION, body["metadata"]["namespace"], "workloads", body))
        return obj

    def reserve_quota(self, namespace: str, name: str, cluster_queue: str, flavor: str,
                      podset_counts: dict[str, int] | None = None, copy: dict[str, Any] | None = None,
                      list_missing: bool = True) -> dict[str, Any]:
        self.writes.append("reserve")
        return reserve_quota(self.custom, namespace, name, cluster_queue, flavor, podset_counts, self.check, copy, list_missing)

    def check_state(self, namespace: str, name: str) -> dict[str, Any] | None:
        for entry in self.get(namespace, name).get("status", {}).get("admissionChecks", []):
            if entry["name"] == self.check:
                return dict(entry)
        return None

    # ------------------------------------------------------------------ one Kueue write each

    def _write(self, namespace: str, name: str, what: str, change: Any, *, spec: bool = False) -> dict[str, Any]:
        """Read, let ``change(wl)`` return the status (or spec) fields to merge, write them with the
        resourceVersion read; on a 409 read again and redo, as Kueue's reconcilers do."""
        for _ in range(10):
            wl = self.get(namespace, name)
            fields = change(wl)
            if fields is None:
                return wl
            body = {"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]}, ("spec" if spec else "status"): fields}
            try:
                if spec:
                    out = cast(dict[str, Any], self.custom.patch_namespaced_custom_object(
                        GROUP, VERSION, namespace, "workloads", name, body, _content_type=MERGE))
                else:
                    out = cast(dict[str, Any], self.custom.patch_namespaced_custom_object_status(
                        GROUP, VERSION, namespace, "workloads", name, body, _content_type=MERGE))
            except client.ApiException as exc:
                if exc.status == 409:
                    continue
                raise
            self.writes.append(what)
            return out
        raise AssertionError(f"Kueue's {what} write of {namespace}/{name} kept conflicting")

    def list_checks(self, namespace: str, name: str) -> dict[str, Any]:
        """``reconcileSyncAdmissionChecks`` → ``syncAdmissionCheckConditions``: a ``Pending`` entry
        for the check when it has none; an entry already there is kept as it is."""
        def change(wl: dict[str, Any]) -> dict[str, Any] | None:
            checks = [dict(e) for e in (wl.get("status") or {}).get("admissionChecks") or []]
            if any(e.get("name") == self.check for e in checks):
                return None
            return {"admissionChecks": [*checks, {"name": self.check, "state": "Pending", "message": "", "lastTransitionTime": now_rfc3339()}]}
        return self._write(namespace, name, "list-checks", change)

    def set_requeue_at(self, namespace: str, name: str) -> dict[str, Any]:
        """``NeedsRequeueAtUpdate``: requeueAt = the latest Retry entry's lastTransitionTime +
        requeueAfterSeconds (the count is not Kueue's to raise for a check's Retry)."""
        def change(wl: dict[str, Any]) -> dict[str, Any] | None:
            times = [_epoch(e["lastTransitionTime"]) + int(e["requeueAfterSeconds"])
                     for e in wl.get("status", {}).get("admissionChecks", [])
                     if e.get("state") == "Retry" and e.get("requeueAfterSeconds") is not None and e.get("lastTransitionTime")]
            if not times:
                return None
            state = dict(wl.get("status", {}).get("requeueState") or {})
            state["requeueAt"] = _rfc3339(max(times))
            return {"requeueState": state}
        return self._write(namespace, name, "requeue-at", change)

    def evict(self, namespace: str, name: str, reason: str, message: str, *, preempted: bool = False,
              clear: tuple[str, ...] = ()) -> dict[str, Any]:
        """``prepareForEviction``: one write sets ``Evicted=True`` and resets every non-Pending check
        entry to Pending (podSetUpdates dropped, requeueAfterSeconds kept, retryCount+1 only for a
        Retry); QuotaReserved and the admission stay. ``preempted`` adds ``Preempted=True`` in the
        same write (the preemptor's custom prepare); ``clear`` removes conditions (deactivation
        removes DeactivationTarget and the requeueState)."""
        def change(wl: dict[str, Any]) -> dict[str, Any]:
            t = now_rfc3339()
            gen = wl["metadata"].get("generation", 1)
            status = wl.get("status") or {}
            conditions = [dict(c) for c in status.get("conditions") or [] if c.get("type") not in clear]
            set_condition(conditions, "Evicted", "True", reason, message, t, gen)
            if preempted:
                set_condition(conditions, "Preempted", "True", "InClusterQueue", message, t, gen)
            checks = []
            for e in status.get("admissionChecks") or []:
                if e.get("state") == "Pending":
                    checks.append(dict(e))
                    continue
                reset: dict[str, Any] = {"name": e["name"], "state": "Pending", "lastTransitionTime": t,
                                         "message": "Reset to Pending after eviction. Previously: " + str(e.get("state"))}
                if e.get("requeueAfterSeconds") is not None:
                    reset["requeueAfterSeconds"] = e["requeueAfterSeconds"]
                if e.get("state") == "Retry":
                    reset["retryCount"] = int(e.get("retryCount") or 0) + 1
                checks.append(reset)
            out: dict[str, Any] = {"conditions": conditions, "admissionChecks": checks}
            if "requeueState" in clear:
                out["requeueState"] = None
            return out
        return self._write(namespace, name, "evict", change)

    def release(self, namespace: str, name: str) -> dict[str, Any]:
        """The job has stopped: one write sets ``QuotaReserved=False``, clears the admission
        (``admission: null``; see the module docstring) and sets ``Requeued`` (True only after a
        preemption or node failures; False, with the eviction's reason, otherwise)."""
        def change(wl: dict[str, Any]) -> dict[str, Any] | None:
            evicted = condition(wl, "Evicted")
            if not (evicted and evicted.get("status") == "True") or not is_true(wl, "QuotaReserved"):
                return None
            t = now_rfc3339()
            gen = wl["metadata"].get("generation", 1)
            conditions = [dict(c) for c in wl["status"].get("conditions") or []]
            requeued = "True" if evicted.get("reason") in (PREEMPTED, "NodeFailures") else "False"
            set_condition(conditions, "Requeued", requeued, str(evicted.get("reason")), str(evicted.get("message", "")), t, gen)
            set_condition(conditions, "QuotaReserved", "False", "PendingEvaluation", str(evicted.get("message", "")), t, gen)
            if is_true(wl, "Admitted"):
                set_condition(conditions, "Admitted", "False", "NoReservation", "The workload has no reservation", t, gen)
            return {"admission": None, "conditions": conditions}
        return self._write(namespace, name, "release", change)

    def end_backoff(self, namespace: str, name: str) -> dict[str, Any]:
        """The backoff has run out: ``Requeued=True`` (``BackoffFinished``), requeueAt cleared."""
        def change(wl: dict[str, Any]) -> dict[str, Any] | None:
            requeued = condition(wl, "Requeued")
            if not requeued or requeued.get("status") != "False" or requeued.get("reason") != EVICTED_BY_CHECK:
                return None
            conditions = [dict(c) for c in wl["status"].get("conditions") or []]
            set_condition(conditions, "Requeued", "True", "BackoffFinished", "The workload backoff was finished", now_rfc3339(),
                          wl["metadata"].get("generation", 1))
            out: dict[str, Any] = {"conditions": conditions}
            if (wl["status"].get("requeueState") or {}).get("requeueAt"):
                out["requeueState"] = {"requeueAt": None}
            return out
        return self._write(namespace, name, "backoff-finished", change)

    def deactivate(self, namespace: str, name: str, message: str) -> dict[str, Any]:
        """A Rejected check: ``DeactivationTarget=True``, then ``spec.active=false``."""
        def target(wl: dict[str, Any]) -> dict[str, Any]:
            conditions = [dict(c) for c in wl["status"].get("conditions") or []]
            set_condition(conditions, "DeactivationTarget", "True", EVICTED_BY_CHECK, message, now_rfc3339(),
                          wl["metadata"].get("generation", 1))
            return {"conditions": conditions}
        self._write(namespace, name, "deactivation-target", target)
        return self._write(namespace, name, "deactivate", lambda wl: {"active": False}, spec=True)

    # ------------------------------------------------------------------ Kueue's reactions

    def react(self, namespace: str, name: str) -> str:
        """Kueue's reaction to the check states now on the Workload, through the release:
        ``"retry"`` (evicted, to be requeued), ``"rejected"`` (deactivated, never requeued) or
        ``"none"``. ``reconcileCheckBasedEviction`` skips a Workload already evicted."""
        wl = self.get(namespace, name)
        if is_true(wl, "Evicted"):
            return "none"
        states = [e.get("state") for e in wl.get("status", {}).get("admissionChecks", [])]
        if "Rejected" in states:
            message = f"Deactivated due to the admission check {self.check} in Rejected state"
            self.deactivate(namespace, name, message)
            self.evict(namespace, name, f"{DEACTIVATED}DueTo{EVICTED_BY_CHECK}", "The workload is deactivated due to " + message,
                       clear=("DeactivationTarget", "requeueState"))
            self.release(namespace, name)
            return "rejected"
        if "Retry" in states:
            self.set_requeue_at(namespace, name)
            self.evict(namespace, name, EVICTED_BY_CHECK, f"Evicted due to the admission check {self.check} in Retry state")
            self.release(namespace, name)
            return "retry"
        return "none"

    def preempt(self, namespace: str, name: str) -> dict[str, Any]:
        """Kueue's preemption of a Workload holding quota: eviction (with ``Preempted=True``), release."""
        self.evict(namespace, name, PREEMPTED, "Preempted to accommodate a workload in the ClusterQueue", preempted=True)
        return self.release(namespace, name)

    def finish(self, namespace: str, name: str) -> dict[str, Any]:
        """The job finished: ``Finished=True`` added, the admission kept (as Kueue keeps it)."""
        def change(wl: dict[str, Any]) -> dict[str, Any]:
            conditions = [dict(c) for c in (wl.get("status") or {}).get("conditions") or []]
            set_condition(conditions, "Finished", "True", "Succeeded", "Job finished successfully", now_rfc3339(),
                          wl["metadata"].get("generation", 1))
            return {"conditions": conditions}
        return self._write(namespace, name, "finish", change)


MERGE = "application/merge-patch+json"


def _epoch(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

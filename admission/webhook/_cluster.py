"""What the webhook reads from the cluster (through the port) to pin a pod, and the one thing it writes.

Every answer is derived from API state read at the moment (a quorum list: no resourceVersion),
so a restarted webhook answers as the old one would have:

- the pods of one decision and PodSet: which slots live pods hold (``atoll.dev/slot``), and the
  dead pods that held a slot before (the node a recreated pod came from);
- a node's health for a pod: Ready, not cordoned, no NoSchedule/NoExecute taint the pod does not
  tolerate (the controller's rule, ``topology.untolerated_taints``; Kueue's node controller uses
  the same three signals, pkg/controller/tas/node_controller.go);
- a node's room: allocatable minus the requests of non-finished pods bound there, of live pods
  pinned there and not bound yet, and of pods other exact decisions still owe there (planned
  on it, no live pod there yet). The last count is conservative: a planned pod that ran and
  finished, or that moved to a replacement, still counts as owed on its planned node.

The write: a Workload condition ``atoll.dev/RequeueRequested`` (server-side apply on
``workloads/status`` under the webhook's own field manager) when a pod's node failed and no
node of its domain can take it; the controller answers it by setting its check to Retry
(``admission.controller._requeue`` reads it).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from admission.controller import (
    ANN_DECISION_ID,
    ANN_ENFORCEMENT,
    ANN_PLANNED_NODES,
    REQUEUE_CONDITION,
    WorkloadError,
    condition_true,
    decode_planned,
    node_info,
    parse_workload,
    pod_usage,
)
from admission.kube import NODES, PODS, WORKLOADS, ClusterPort, Obj, errors
from admission.webhook._pin import ANN_NODE, LABEL_DECISION_ID, LABEL_PODSET, ExactPod, is_live
from topology import ResourceVector, untolerated_taints

__all__ = ["REQUEUE_CONDITION", "ClusterReader", "Room"]

_REQUEUE_REASON = "NoReplacementNode"
_ONE_POD = ResourceVector(pods=1)


def _fits(free: ResourceVector, need: ResourceVector) -> bool:
    return all(f >= n for f, n in zip(free.as_tuple(), need.as_tuple()))


def _minus(a: ResourceVector, b: ResourceVector) -> ResourceVector:
    return ResourceVector(*(x - y for x, y in zip(a.as_tuple(), b.as_tuple())))


@dataclass(frozen=True, slots=True)
class Room:
    """A candidate node and what is free on it for the pod."""

    node: str
    free: ResourceVector
    shared_labels: int
    """Labels (key and value) it shares with the node it replaces: more means nearer in the fabric."""


@dataclass(frozen=True, slots=True)
class _Owed:
    decision: str
    podset: str
    planned: dict[str, int]
    per_pod: ResourceVector


class ClusterReader:
    """Reads for one admission request at a time; holds no state between requests."""

    def __init__(self, port: ClusterPort, gpu_resource: str = "nvidia.com/gpu", field_manager: str = "atoll-webhook") -> None:
        self.port = port
        self.gpu_resource = gpu_resource
        self.field_manager = field_manager

    # ------------------------------------------------------------------ pods and nodes

    def podset_pods(self, pod: ExactPod) -> list[Obj]:
        """Every pod (live or not) of the pod's decision and PodSet in its namespace. The apiserver
        selects the decision's pods (its label), so the answer never reads the whole namespace."""
        out = []
        for p in self.port.list(PODS, namespace=pod.namespace, label_selector=f"{LABEL_DECISION_ID}={pod.decision_id}").items:
            labels = (p.get("metadata") or {}).get("labels") or {}
            if labels.get(LABEL_PODSET, "") == pod.podset:  # an absent PodSet label reads as "", which no selector says
                out.append(p)
        return out

    def node(self, name: str) -> Obj | None:
        try:
            return self.port.get(NODES, name)
        except errors.NotFound:
            return None

    def health_problem(self, name: str, pod: ExactPod) -> str:
        """Why node ``name`` cannot take the pod now ("" when it can, room aside)."""
        return self.problem_of(self.node(name), name, pod)

    def problem_of(self, node: Obj | None, name: str, pod: ExactPod) -> str:
        if node is None:
            return f"node {name} is gone"
        info, problem = node_info(node, self.gpu_resource)
        if info is None:
            return problem or f"node {name} is unreadable"
        if problem:
            return problem
        if not info.ready:
            return f"node {name} is not Ready"
        if info.unschedulable:
            return f"node {name} is cordoned"
        bad = untolerated_taints(info, pod.tolerations)
        if bad:
            return f"node {name} has taint {bad[0].key}={bad[0].value}:{bad[0].effect}, which the pod does not tolerate"
        return ""

    def pod_requests(self, pod: Obj) -> ResourceVector:
        """What the pod will hold once bound (the scheduler's count: containers, init maximum, overhead)."""
        spec = dict(pod.get("spec") or {})
        spec["nodeName"] = spec.get("nodeName") or "-"
        usage = pod_usage({"metadata": pod.get("metadata") or {}, "spec": spec, "status": {}}, self.gpu_resource)
        return usage.usage if usage is not None else _ONE_POD

    # ------------------------------------------------------------------ room

    def rooms(self, pod: ExactPod, candidates: Sequence[str], *, replaced: str, skip: Iterable[str] = (),
              own_slot_node: str | None = None) -> list[Room]:
        """Free capacity on each candidate for ``pod``. ``skip``: names of pods not to count (the
        recreated pod's dead predecessors, whose resources free as they go). ``own_slot_node``: the
        planned node of the slot the pod takes (not owed twice)."""
        skipped = set(skip)
        unbound = [p for p in self.port.list(PODS, field_selector="spec.nodeName=").items if is_live(p)]
        owed = self._owed_exact()
        replaced_labels = set(((self.node(replaced) or {}).get("metadata") or {}).get("labels", {}).items())
        out = []
        for name in candidates:
            node = self.node(name)
            if node is None:
                continue
            info, _ = node_info(node, self.gpu_resource)
            if info is None:
                continue
            bound = [p for p in self.port.list(PODS, field_selector=f"spec.nodeName={name}").items
                     if (p.get("metadata") or {}).get("name") not in skipped]
            used = ResourceVector()
            for p in bound:
                held = pod_usage(p, self.gpu_resource)
                if held is not None:
                    used = used + held.usage
            here = [p for p in unbound if ((p.get("metadata") or {}).get("annotations") or {}).get(ANN_NODE) == name]
            for p in here:
                used = used + self.pod_requests(p)
            live_here = Counter(_decision_podset(p) for p in [*bound, *here] if is_live(p))
            for o in owed:
                k = o.planned.get(name, 0) - live_here[(o.decision, o.podset)]
                if (o.decision, o.podset) == (pod.decision_id, pod.podset) and own_slot_node == name:
                    k -= 1
                if k > 0:
                    used = used + (o.per_pod + _ONE_POD).scaled(k)
            labels = set(((node.get("metadata") or {}).get("labels") or {}).items())
            out.append(Room(name, _minus(info.allocatable, used), len(labels & replaced_labels)))
        return out

    def fits(self, room: Room, need: ResourceVector) -> bool:
        return _fits(room.free, need)

    def domain_nodes(self, pod: ExactPod) -> list[str]:
        """Nodes whose labels match the pod's nodeSelector (its domain), sorted by name."""
        want = dict(pod.node_selector)
        names = []
        for node in self.port.list(NODES).items:
            meta = node.get("metadata") or {}
            labels = meta.get("labels") or {}
            if all(labels.get(k) == v for k, v in want.items()):
                names.append(str(meta.get("name")))
        return sorted(names)

    def _owed_exact(self) -> list[_Owed]:
        """PodSets of admitted Workloads under exact enforcement, with their planned nodes."""
        out = []
        for wl in self.port.list(WORKLOADS).items:
            if not condition_true(wl, "QuotaReserved") or condition_true(wl, "Finished") or condition_true(wl, "Evicted"):
                continue
            if (wl.get("spec") or {}).get("active", True) is False:
                continue
            updates = [u for c in (wl.get("status") or {}).get("admissionChecks") or [] if c.get("state") == "Ready"
                       for u in c.get("podSetUpdates") or []
                       if (u.get("annotations") or {}).get(ANN_ENFORCEMENT) == "exact"]
            if not updates:
                continue
            try:
                specs = {s.name: s.per_pod for s in parse_workload(wl, gpu_resource=self.gpu_resource).podsets}
            except WorkloadError:
                continue
            for u in updates:
                ann = u.get("annotations") or {}
                try:
                    planned = decode_planned(str(ann.get(ANN_PLANNED_NODES, "")))
                except ValueError:
                    continue
                name = str(u.get("name"))
                out.append(_Owed(str(ann.get(ANN_DECISION_ID, "")), name, planned, specs.get(name, ResourceVector())))
        return out

    # ------------------------------------------------------------------ the mark

    def workload_of(self, pod: ExactPod) -> Obj | None:
        """The Workload whose Atoll decision the pod carries: Kueue's ``kueue.x-k8s.io/workload``
        annotation when present, else the one in the namespace whose check entry has the id."""
        if pod.workload:
            try:
                wl = self.port.get(WORKLOADS, pod.workload, pod.namespace)
                if _has_decision(wl, pod.decision_id):
                    return wl
            except errors.NotFound:
                pass
        return next((wl for wl in self.port.list(WORKLOADS, namespace=pod.namespace).items if _has_decision(wl, pod.decision_id)), None)

    def request_requeue(self, pod: ExactPod, message: str, now: float) -> str | None:
        """Set ``atoll.dev/RequeueRequested`` on the pod's Workload; returns its name (None when not found)."""
        wl = self.workload_of(pod)
        if wl is None:
            return None
        meta = wl.get("metadata") or {}
        stamp = dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {"type": REQUEUE_CONDITION, "status": "True", "reason": _REQUEUE_REASON, "lastTransitionTime": stamp,
                     "message": f"decision {pod.decision_id}: {message}"[:32768]}
        body = {"apiVersion": WORKLOADS.api_version, "kind": WORKLOADS.kind,
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")}, "status": {"conditions": [condition]}}
        self.port.apply(WORKLOADS, body, field_manager=self.field_manager, subresource="status", force=True)
        return str(meta.get("name"))


def _decision_podset(pod: Obj) -> tuple[str, str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(LABEL_DECISION_ID, "")), str(labels.get(LABEL_PODSET, ""))


def _has_decision(wl: Obj, decision_id: str) -> bool:
    return any((u.get("annotations") or {}).get(ANN_DECISION_ID) == decision_id
               for c in (wl.get("status") or {}).get("admissionChecks") or [] for u in c.get("podSetUpdates") or [])

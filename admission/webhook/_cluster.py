"""What the webhook reads from its watch-fed cache (``_cache``) to pin a pod, and the one thing
it writes through the port. An admission call makes no LIST and no GET:

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

from admission.controller import ANN_DECISION_ID, REQUEUE_CONDITION, pod_usage
from admission.kube import WORKLOADS, ClusterPort, Obj, errors
from admission.webhook._cache import WebhookCache
from admission.webhook._pin import LABEL_DECISION_ID, LABEL_PODSET, ExactPod, is_live
from topology import NodeInfo, ResourceVector, untolerated_taints

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


class ClusterReader:
    """Reads for one admission request from the cache; holds no state between requests. Without a
    cache it can only write (``request_requeue``, finding the Workload by a namespaced read)."""

    def __init__(self, port: ClusterPort, gpu_resource: str | tuple[str, ...] = "nvidia.com/gpu", field_manager: str = "atoll-webhook",
                 cache: WebhookCache | None = None) -> None:
        self.port = port
        self.gpu_resource = gpu_resource
        self.field_manager = field_manager
        self._cache = cache

    @property
    def cache(self) -> WebhookCache:
        if self._cache is None:
            raise RuntimeError("ClusterReader: reads need the webhook's cache")
        return self._cache

    # ------------------------------------------------------------------ pods and nodes

    def podset_pods(self, pod: ExactPod) -> list[Obj]:
        """Every pod (live or not) of the pod's decision and PodSet in its namespace."""
        return self.cache.podset_pods(pod.namespace, pod.decision_id, pod.podset)

    def node(self, name: str) -> Obj | None:
        return self.cache.node(name)

    def health_problem(self, name: str, pod: ExactPod) -> str:
        """Why node ``name`` cannot take the pod now ("" when it can, room aside)."""
        read = self.cache.node_info(name)
        if read is None:
            return f"node {name} is gone"
        return self._problem(read, name, pod)

    def _problem(self, read: tuple[NodeInfo | None, str], name: str, pod: ExactPod) -> str:
        info, problem = read
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
              own_slot_node: str | None = None, own_slot: int | None = None, now: float = 0.0) -> list[Room]:
        """Free capacity on each candidate for ``pod``. ``skip``: names of pods not to count (the
        recreated pod's dead predecessors, whose resources free as they go). ``own_slot_node``: the
        planned node of the slot the pod takes (not owed twice). Pods this process pinned that the
        cache does not show yet count as pinned there (``own_slot``'s own earlier pin aside);
        ``now``: monotonic seconds, for their expiry."""
        skipped = set(skip)
        owed = self.cache.owed()
        replaced_labels = set(((self.node(replaced) or {}).get("metadata") or {}).get("labels", {}).items())
        out = []
        for name in candidates:
            read = self.cache.node_info(name)
            info = read[0] if read is not None else None
            if info is None:
                continue
            bound = [p for p in self.cache.pods_on(name) if (p.get("metadata") or {}).get("name") not in skipped]
            used = ResourceVector()
            for p in bound:
                held = pod_usage(p, self.gpu_resource)
                if held is not None:
                    used = used + held.usage
            here = [p for p in self.cache.pinned_unbound(name) if (p.get("metadata") or {}).get("name") not in skipped]
            for p in here:
                used = used + self.pod_requests(p)
            live_here = Counter(_decision_podset(p) for p in [*bound, *here] if is_live(p))
            for decision, podset, slot, need in self.cache.pending_on(name, now):
                if (decision, podset, slot) != (pod.decision_id, pod.podset, own_slot):
                    used = used + need
                    live_here[(decision, podset)] += 1
            for o in owed:
                k = o.planned.get(name, 0) - live_here[(o.decision, o.podset)]
                if (o.decision, o.podset) == (pod.decision_id, pod.podset) and own_slot_node == name:
                    k -= 1
                if k > 0:
                    used = used + (o.per_pod + _ONE_POD).scaled(k)
            labels = set(info.labels.items())
            out.append(Room(name, _minus(info.allocatable, used), len(labels & replaced_labels)))
        return out

    def fits(self, room: Room, need: ResourceVector) -> bool:
        return _fits(room.free, need)

    def domain_nodes(self, pod: ExactPod) -> list[str]:
        """Nodes whose labels match the pod's nodeSelector (its domain), sorted by name."""
        want = dict(pod.node_selector)
        names = []
        for node in self.cache.nodes():
            meta = node.get("metadata") or {}
            labels = meta.get("labels") or {}
            if all(labels.get(k) == v for k, v in want.items()):
                names.append(str(meta.get("name")))
        return sorted(names)

    # ------------------------------------------------------------------ the mark

    def workload_of(self, pod: ExactPod) -> Obj | None:
        """The Workload whose Atoll decision the pod carries: Kueue's ``kueue.x-k8s.io/workload``
        annotation when that Workload has the decision, else the one in the namespace whose check
        entry has the id (from the cache; without one, one namespaced read)."""
        if self._cache is not None:
            names = self._cache.workloads_with_decision(pod.namespace, pod.decision_id)
            name = pod.workload if pod.workload in names else next(iter(names), None)
            return None if name is None else {"metadata": {"name": name, "namespace": pod.namespace}}
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

"""What the webhook reads, kept current by watches: pods, nodes, and the PodSets exact
decisions still owe. An admission call reads memory only, never a cluster-wide LIST.

One thread per resource lists it once, then watches from the list's resourceVersion; a 410
Gone lists again, any other failure backs off and resumes (as the controller's informers do).
Objects are stripped on ingest to the fields the webhook reads (no ``managedFields``, no node
image lists, no pod specs beyond requests), and indexed:

- pods by (namespace, decision id, PodSet): a gang's pods;
- pods by ``spec.nodeName``: what a node holds;
- live unbound pods by ``atoll.dev/node``: pinned there, not bound yet;
- Workloads by key: the exact PodSets they owe (``Owed``) and their decision ids.

A cache lags the apiserver by the watch's delay. The webhook is safe with that: a pod with a
rank takes the slot of its rank (no other pod asks for it), a pod without one claims its slot in
the claims Lease, which holds the claim until the cache shows the pod, and the room a pin takes
on a node is noted here (``note_pin``) until the cache shows the pod, so the next pod answered
never gets the same room.

About 400 lines on purpose: the stores, their indexes and the pending pins change together under
one lock, so they live in one class.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import structlog

from admission.controller import (
    ANN_DECISION_ID,
    ANN_ENFORCEMENT,
    ANN_PLANNED_NODES,
    WorkloadError,
    condition_true,
    decode_planned,
    node_info,
    parse_workload,
)
from admission.kube import NODES, PODS, WORKLOADS, ClusterPort, ListResult, Obj, Resource, WatchEvent, newer, object_key, reflect
from admission.webhook._pin import ANN_NODE, ANN_PREVIOUS, ANN_SLOT, ANN_WORKLOAD, LABEL_DECISION_ID, LABEL_PODSET, is_live
from topology import NodeInfo, ResourceVector

__all__ = ["Owed", "WebhookCache", "owed_of"]

_log = structlog.get_logger("atoll.webhook")
_POD_LABELS = (LABEL_DECISION_ID, LABEL_PODSET)
_POD_ANNOTATIONS = (ANN_DECISION_ID, ANN_NODE, ANN_SLOT, ANN_PREVIOUS, ANN_WORKLOAD)


@dataclass(frozen=True, slots=True)
class Owed:
    """An exact PodSet of an admitted Workload and its planned nodes."""

    decision: str
    podset: str
    planned: dict[str, int]
    per_pod: ResourceVector


def owed_of(wl: Obj, gpu_resource: str | tuple[str, ...]) -> list[Owed]:
    """The exact PodSets an admitted Workload (quota reserved, not finished, evicted or
    deactivated, Atoll's check Ready) still has planned nodes for."""
    if not condition_true(wl, "QuotaReserved") or condition_true(wl, "Finished") or condition_true(wl, "Evicted"):
        return []
    if (wl.get("spec") or {}).get("active", True) is False:
        return []
    updates = [u for c in (wl.get("status") or {}).get("admissionChecks") or [] if c.get("state") == "Ready"
               for u in c.get("podSetUpdates") or [] if (u.get("annotations") or {}).get(ANN_ENFORCEMENT) == "exact"]
    if not updates:
        return []
    try:
        specs = {s.name: s.per_pod for s in parse_workload(wl, gpu_resource=gpu_resource).podsets}
    except WorkloadError:
        return []
    out = []
    for u in updates:
        ann = u.get("annotations") or {}
        try:
            planned = decode_planned(str(ann.get(ANN_PLANNED_NODES, "")))
        except ValueError:
            continue
        name = str(u.get("name"))
        out.append(Owed(str(ann.get(ANN_DECISION_ID, "")), name, planned, specs.get(name, ResourceVector())))
    return out


def _decisions(wl: Obj) -> frozenset[str]:
    return frozenset(str((u.get("annotations") or {}).get(ANN_DECISION_ID))
                     for c in (wl.get("status") or {}).get("admissionChecks") or [] for u in c.get("podSetUpdates") or []
                     if (u.get("annotations") or {}).get(ANN_DECISION_ID))


def _pick(values: object, keys: Sequence[str]) -> dict[str, str]:
    return {k: str(values[k]) for k in keys if k in values} if isinstance(values, dict) else {}


def _requests(containers: object) -> list[Obj]:
    return [{"resources": {"requests": dict(((c.get("resources") or {}).get("requests") or {}))}}
            for c in containers if isinstance(c, dict)] if isinstance(containers, list) else []


def strip_pod(pod: Obj) -> Obj:
    """The fields the webhook reads of a pod: identity, Atoll's labels and annotations, node,
    requests, phase, deletion."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    out_meta = {k: meta[k] for k in ("name", "namespace", "resourceVersion", "creationTimestamp", "deletionTimestamp") if meta.get(k)}
    out_meta["labels"] = _pick(meta.get("labels"), _POD_LABELS)
    out_meta["annotations"] = _pick(meta.get("annotations"), _POD_ANNOTATIONS)
    out_spec: Obj = {"containers": _requests(spec.get("containers")), "initContainers": _requests(spec.get("initContainers"))}
    for k in ("nodeName", "overhead"):
        if spec.get(k):
            out_spec[k] = spec[k]
    return {"metadata": out_meta, "spec": out_spec, "status": {"phase": (pod.get("status") or {}).get("phase")}}


def strip_node(node: Obj) -> Obj:
    """The fields ``node_info`` reads: labels, annotations (performance), cordon, taints, allocatable, conditions."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {"metadata": {k: meta[k] for k in ("name", "labels", "annotations", "resourceVersion") if k in meta},
            "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec},
            "status": {"allocatable": status.get("allocatable") or {},
                       "conditions": [{"type": c.get("type"), "status": c.get("status")} for c in status.get("conditions") or []]}}


class _Index:
    """key -> set of object keys; empty sets are dropped (bounded by the live objects)."""

    def __init__(self) -> None:
        self._sets: dict[object, set[str]] = defaultdict(set)

    def add(self, key: object, name: str) -> None:
        self._sets[key].add(name)

    def drop(self, key: object, name: str) -> None:
        s = self._sets.get(key)
        if s is not None:
            s.discard(name)
            if not s:
                del self._sets[key]

    def get(self, key: object) -> Iterable[str]:
        return tuple(self._sets.get(key, ()))


class WebhookCache:
    """Watch-fed pods, nodes and exact Workloads; ``start()`` once, ``wait_synced()`` before reading."""

    def __init__(self, port: ClusterPort, gpu_resource: str | tuple[str, ...] = "nvidia.com/gpu", *, watch_timeout: int = 300,
                 backoffs: Sequence[float] = (0.5, 1.0, 2.0, 5.0, 10.0)) -> None:
        self.port = port
        self.gpu_resource = gpu_resource
        self.watch_timeout = watch_timeout
        self.backoffs = tuple(backoffs)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.last_error = ""
        """The last list or watch failure ("" once a list succeeded after it)."""
        self._stop = threading.Event()
        self._synced = {r: threading.Event() for r in (PODS, NODES, WORKLOADS)}
        self._streams: dict[Resource, object] = {}
        self._threads: list[threading.Thread] = []
        self._pods: dict[str, Obj] = {}
        self._by_podset, self._by_node, self._by_pin = _Index(), _Index(), _Index()
        self._nodes: dict[str, Obj] = {}
        self._infos: dict[str, tuple[NodeInfo | None, str]] = {}
        self._owed: dict[str, list[Owed]] = {}
        self._decisions: dict[str, frozenset[str]] = {}
        self._versions: dict[str, str] = {}
        self._pending: dict[tuple[str, str, str, int], tuple[str, ResourceVector, float]] = {}
        self._pending_by_node = _Index()
        self.events = 0
        """Watch events applied so far (lists included, one per object)."""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> WebhookCache:
        for resource, apply in ((PODS, self._apply_pod), (NODES, self._apply_node), (WORKLOADS, self._apply_workload)):
            t = threading.Thread(target=self._run, args=(resource, apply), name=f"atoll-webhook-watch-{resource.plural}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.close()  # type: ignore[attr-defined]
        for t in self._threads:
            t.join(10)
        self._threads = []

    @property
    def synced(self) -> bool:
        return all(e.is_set() for e in self._synced.values())

    def wait_synced(self, timeout: float) -> bool:
        """True once every resource has been listed (at most ``timeout`` s of waiting)."""
        end = time.monotonic() + max(timeout, 0.0)
        return all(e.wait(max(end - time.monotonic(), 0.0)) for e in self._synced.values())

    def wait_seen(self, resource: Resource, obj: Obj, timeout: float) -> bool:
        """Wait until the cache holds ``obj`` (by key) at its resourceVersion or a later one, or
        no longer holds it when ``obj`` is gone (a dict with only its name and namespace)."""
        key = object_key(obj)
        store = {PODS: self._pods, NODES: self._nodes, WORKLOADS: self._owed}[resource]
        version = (obj.get("metadata") or {}).get("resourceVersion")

        def seen() -> bool:
            if not version:
                return key not in store
            if key not in store:
                return False
            have = self._versions.get(key, "") if resource is WORKLOADS else (store[key].get("metadata") or {}).get("resourceVersion", "")
            return newer(obj, {"metadata": {"resourceVersion": have}})

        with self._changed:
            return self._changed.wait_for(seen, timeout)

    def _run(self, resource: Resource, apply: Callable[[str, Obj | None], None]) -> None:
        def listed(result: ListResult) -> None:
            self._replace_all(resource, result.items, apply)
            self.last_error = ""
            self._synced[resource].set()

        def event(ev: WatchEvent) -> None:
            if ev.type == "BOOKMARK":
                return
            key = object_key(ev.object)
            with self._lock:
                self.events += 1
                apply(key, None if ev.type == "DELETED" else ev.object)
                self._changed.notify_all()

        def failed(exc: Exception, attempt: int, delay: float) -> None:
            self.last_error = f"{resource}: {exc}"
            _log.warning("webhook cache: list/watch failed; backing off", resource=str(resource), attempt=attempt, delay_s=delay,
                         error=str(exc))

        reflect(self.port, resource, on_list=listed, on_event=event, stop=self._stop, backoffs=self.backoffs,
                timeout_seconds=self.watch_timeout, streams=self._streams, lock=self._lock, on_error=failed)

    def _replace_all(self, resource: Resource, items: list[Obj], apply: Callable[[str, Obj | None], None]) -> None:
        with self._lock:
            keys = {object_key(o) for o in items}
            old = {PODS: self._pods, NODES: self._nodes, WORKLOADS: self._owed}[resource]
            for gone in [k for k in old if k not in keys]:
                apply(gone, None)
            for o in items:
                self.events += 1
                apply(object_key(o), o)
            self._changed.notify_all()

    # ------------------------------------------------------------------ applying (under the lock)

    def _apply_pod(self, key: str, obj: Obj | None) -> None:
        old = self._pods.pop(key, None)
        if old is not None:
            if obj is not None and not newer(old, obj):
                self._pods[key] = old
                return
            self._unindex(key, old)
        if obj is not None:
            pod = strip_pod(obj)
            self._pods[key] = pod
            self._index(key, pod)
            slot = pod["metadata"]["annotations"].get(ANN_SLOT, "")
            podset, _, _ = self._keys(pod)
            if podset is not None and slot.isdigit() and is_live(pod):
                self._drop_pending((*podset, int(slot)))

    @staticmethod
    def _keys(pod: Obj) -> tuple[tuple[str, str, str] | None, str, str]:
        meta = pod["metadata"]
        labels, ann = meta["labels"], meta["annotations"]
        decision = labels.get(LABEL_DECISION_ID) or ann.get(ANN_DECISION_ID) or ""
        podset = (str(meta.get("namespace") or ""), decision, labels.get(LABEL_PODSET, "")) if decision else None
        node = str(pod["spec"].get("nodeName") or "")
        pin = ann.get(ANN_NODE, "") if not node and is_live(pod) else ""
        return podset, node, pin

    def _index(self, key: str, pod: Obj) -> None:
        podset, node, pin = self._keys(pod)
        if podset is not None:
            self._by_podset.add(podset, key)
        if node:
            self._by_node.add(node, key)
        if pin:
            self._by_pin.add(pin, key)

    def _unindex(self, key: str, pod: Obj) -> None:
        podset, node, pin = self._keys(pod)
        if podset is not None:
            self._by_podset.drop(podset, key)
        if node:
            self._by_node.drop(node, key)
        if pin:
            self._by_pin.drop(pin, key)

    def _apply_node(self, key: str, obj: Obj | None) -> None:
        if obj is None:
            self._nodes.pop(key, None)
            self._infos.pop(key, None)
        elif newer(self._nodes.get(key), obj):
            self._nodes[key] = strip_node(obj)
            self._infos[key] = node_info(obj, self.gpu_resource)  # parsed once, not at every review

    def _apply_workload(self, key: str, obj: Obj | None) -> None:
        if obj is None:
            self._owed.pop(key, None)
            self._decisions.pop(key, None)
            self._versions.pop(key, None)
            return
        self._versions[key] = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        self._owed[key] = owed_of(obj, self.gpu_resource)
        self._decisions[key] = _decisions(obj)

    # ------------------------------------------------------------------ pins the watch has not shown yet

    def note_pin(self, slot: tuple[str, str, str, int], node: str, need: ResourceVector, expires: float) -> None:
        """The webhook pinned ``slot`` (namespace, decision, PodSet, slot) to ``node``: count ``need``
        there until the cache shows a live pod holding that slot, or until ``expires`` (monotonic
        seconds; the pod was refused later, or never came). Two pods answered one after the other
        then never get the same room, however late the watch is."""
        with self._lock:
            self._drop_pending(slot)
            self._pending[slot] = (node, need, expires)
            self._pending_by_node.add(node, "\0".join(map(str, slot)))

    def _drop_pending(self, slot: tuple[str, str, str, int]) -> None:
        held = self._pending.pop(slot, None)
        if held is not None:
            self._pending_by_node.drop(held[0], "\0".join(map(str, slot)))

    def pending_on(self, node: str, now: float) -> list[tuple[str, str, int, ResourceVector]]:
        """(decision, PodSet, slot, requests) of the pins on ``node`` not shown by the watch yet and
        not expired at ``now``."""
        with self._lock:
            out = []
            for joined in self._pending_by_node.get(node):
                ns, decision, podset, slot = joined.split("\0")
                key = (ns, decision, podset, int(slot))
                _, need, expires = self._pending[key]
                if expires <= now:
                    self._drop_pending(key)
                else:
                    out.append((decision, podset, int(slot), need))
            return out

    # ------------------------------------------------------------------ reads (copies of lists; objects are never mutated)

    def podset_pods(self, namespace: str, decision: str, podset: str) -> list[Obj]:
        with self._lock:
            return [self._pods[k] for k in self._by_podset.get((namespace, decision, podset))]

    def pods_on(self, node: str) -> list[Obj]:
        with self._lock:
            return [self._pods[k] for k in self._by_node.get(node)]

    def pinned_unbound(self, node: str) -> list[Obj]:
        with self._lock:
            return [self._pods[k] for k in self._by_pin.get(node)]

    def node(self, name: str) -> Obj | None:
        with self._lock:
            return self._nodes.get(name)

    def node_info(self, name: str) -> tuple[NodeInfo | None, str] | None:
        """The node as the controller reads it (``node_info``: info, problem); None when unknown."""
        with self._lock:
            return self._infos.get(name)

    def nodes(self) -> list[Obj]:
        with self._lock:
            return list(self._nodes.values())

    def owed(self) -> list[Owed]:
        with self._lock:
            return [o for owed in self._owed.values() for o in owed]

    def workloads_with_decision(self, namespace: str, decision: str) -> list[str]:
        """Names of the Workloads in ``namespace`` whose check entries carry ``decision``, sorted."""
        with self._lock:
            return sorted(k.split("/", 1)[1] for k, ids in self._decisions.items() if decision in ids and k.startswith(f"{namespace}/"))

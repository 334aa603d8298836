"""What the controller knows of the cluster, fed by watches, and the per-flavor snapshots built from it.

A flavor's snapshot is made of the Nodes that carry its ResourceFlavor's ``nodeLabels``, the
GPU/CPU/memory requests of the unfinished Pods bound to them, the ResourceFlavor's tolerations,
and the levels of the Kueue Topology the profiles document maps the flavor to (``flavors.X.topology``;
``spec.levels[].nodeLabel``, top to bottom), with each level's link from the document's
``flavors.X.links`` or Atoll's defaults. Snapshots are rebuilt only when structure changes (a
node added, removed or relabelled; a flavor, topology or document change); usage and health
changes update one row. Besides usage, the cache tells the ledger which pods of each Atoll
decision are bound and running, and which succeeded (``bound_pods``, ``succeeded_pods``).

Only the worker thread touches a cache, so it holds no locks.

Why this module is longer than the others: the node, pod and flavor indexes and the snapshots
built from them change together on every event; split, each part would reach into the others'
dictionaries. Reading a node or a pod into numbers (``node_info``, ``pod_usage``) stays pure and
is exported for the webhook.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog

from admission import vocabulary
from admission.controller._slim import SLIM
from admission.kube import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NODES,
    PODS,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Obj,
    Resource,
    newer,
    object_key,
)
from policies import DEFAULT_FABRIC_LINK, DEFAULT_LINKS, ProfilesDocument
from topology import HOSTNAME_LABEL, Level, NodeInfo, ResourceVector, Snapshot, Taint, Toleration

__all__ = [
    "PERF_ANNOTATION",
    "BoundPod",
    "ClusterCache",
    "FlavorProblem",
    "node_info",
    "pod_usage",
    "succeeded_pod",
]

PERF_ANNOTATION = vocabulary.GPU_PERF
_log = structlog.get_logger("atoll.cache")


class FlavorProblem(Exception):
    """A flavor cannot be placed on because of configuration; the message names what to fix.

    ``kind``: ``unmapped`` (not in the profiles document), ``missing-flavor``,
    ``missing-topology``, ``kueue-tas`` (Kueue's own TAS assigns this flavor)."""

    def __init__(self, kind: str, message: str, topology: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.topology = topology






# ----------------------------------------------------------------------------- nodes and pods


def node_info(obj: Obj, gpu_resource: str | tuple[str, ...]) -> tuple[NodeInfo | None, str | None]:
    """A Node as the engine sees it, and the problem that keeps it from being a candidate.

    A malformed ``atoll.dev/gpu-perf`` makes only this node ineligible (it stays in the fabric,
    so a gang it could complete waits instead of being rejected); unreadable allocatable leaves
    it out (None)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name"))
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    problem = None
    raw_perf = (meta.get("annotations") or {}).get(PERF_ANNOTATION)
    perf = 1.0
    if raw_perf is not None:
        try:
            perf = float(raw_perf)
        except ValueError:
            perf = -1.0
        if not 0.0 < perf <= 10.0:  # also false for NaN
            problem = (f"node {name}: annotation {PERF_ANNOTATION}={raw_perf!r} is not a relative throughput in (0, 10] "
                       f"(1.0 = fleet median); the node is not a candidate until it is fixed or removed")
            perf = 1.0
    try:
        alloc = ResourceVector.from_kube(status.get("allocatable") or {}, gpu_resource, f"node {name}: status.allocatable")
    except ValueError as exc:
        return None, f"{exc}; the node is left out of placement"
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    taints = tuple(Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
                   for t in spec.get("taints") or [])
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    drain = labels.get(vocabulary.DRAINING)
    if drain not in (None, "true", "false") and problem is None:
        problem = (f"node {name}: label {vocabulary.DRAINING}={drain!r} is neither true nor false; the node is not a candidate "
                   f"until the label is fixed or removed")
    return NodeInfo(name, labels, alloc, ResourceVector(), ready and problem is None, bool(spec.get("unschedulable")), taints, perf,
                    draining=drain == "true"), problem


@dataclass(frozen=True, slots=True)
class BoundPod:
    node: str
    usage: ResourceVector
    decision_id: str
    podset: str


_NOTHING = ResourceVector()
"""No usage (a node without bound pods)."""


def _container_sum(containers: Iterable[Mapping[str, Any]], gpu_resource: str | tuple[str, ...], what: str) -> ResourceVector:
    total = ResourceVector()
    for c in containers:
        res = c.get("resources") or {}
        req = dict(res.get("limits") or {})
        req.update(res.get("requests") or {})
        total = total + ResourceVector.from_kube(req, gpu_resource, what)
    return total


def pod_usage(obj: Obj, gpu_resource: str | tuple[str, ...]) -> BoundPod | None:
    """What a bound, unfinished pod holds on its node (requests, as the scheduler counts them)."""
    spec = obj.get("spec") or {}
    node = spec.get("nodeName")
    phase = (obj.get("status") or {}).get("phase")
    if not node or phase in ("Succeeded", "Failed"):
        return None
    name = object_key(obj)
    try:
        usage = _container_sum(spec.get("containers") or [], gpu_resource, f"pod {name}")
        for init in spec.get("initContainers") or []:
            one = _container_sum([init], gpu_resource, f"pod {name}")
            usage = ResourceVector(*(max(a, b) for a, b in zip(usage.as_tuple(), one.as_tuple())))
        usage = usage + ResourceVector.from_kube(spec.get("overhead") or {}, gpu_resource, f"pod {name}: overhead")
    except ValueError as exc:
        _log.warning("pod requests unreadable; counted as one pod slot", pod=name, error=str(exc))
        usage = ResourceVector()
    decision_id, podset = _decision_of(obj)
    return BoundPod(str(node), ResourceVector(usage.gpu, usage.cpu_milli, usage.memory_mib, 1), decision_id, podset)


def succeeded_pod(obj: Obj) -> BoundPod | None:
    """A pod of an Atoll decision that ran to completion (phase ``Succeeded``), with the node it
    ran on; it holds nothing now (usage zero). None for any other pod."""
    if (obj.get("status") or {}).get("phase") != "Succeeded":
        return None
    node = (obj.get("spec") or {}).get("nodeName")
    decision_id, podset = _decision_of(obj)
    if not node or not decision_id:
        return None
    return BoundPod(str(node), ResourceVector(), decision_id, podset)


def _decision_of(obj: Obj) -> tuple[str, str]:
    """(decision id, PodSet) a pod carries from Atoll's podSetUpdate and Kueue's PodSet label."""
    meta = obj.get("metadata") or {}
    ann = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    return str(ann.get(vocabulary.DECISION_ID, "")), str(labels.get(vocabulary.KUEUE_PODSET, ""))


# ----------------------------------------------------------------------------- the cache


@dataclass
class _FlavorState:
    snapshot: Snapshot
    members: frozenset[str]
    dirty: set[str] = field(default_factory=set)
    """Nodes whose object changed since the snapshot was last brought up to date."""
    usage: set[str] = field(default_factory=set)
    """Nodes whose pods changed (only their free row moves)."""


class ClusterCache:
    """Objects by kind and key, plus derived node usage and per-flavor snapshots."""

    def __init__(self, gpu_resource: str = "nvidia.com/gpu") -> None:
        self.default_gpu_resource = gpu_resource
        """The controller's ``--gpu-resource``: the accelerator of flavors the profiles document gives none."""
        self.gpu_resource: tuple[str, ...] = (gpu_resource,)
        """Every accelerator resource a flavor offers (``ProfilesDocument.accelerators``): a node's
        and a pod's GPU column is their sum, so each flavor counts its own kind."""
        self.objects: dict[Resource, dict[str, Obj]] = {r: {} for r in (NODES, RESOURCE_FLAVORS, TOPOLOGIES, ADMISSION_CHECKS, WORKLOADS,
                                                                                LOCAL_QUEUES, CLUSTER_QUEUES)}
        self.nodes: dict[str, NodeInfo] = {}
        self.node_problems: dict[str, str] = {}
        self.node_changed = False
        """Whether the last Node upsert changed what placement reads (``NodeInfo``): a heartbeat alone does not."""
        self.pods: dict[str, BoundPod] = {}
        """Bound, unfinished pods by uid: what holds node resources."""
        self.pods_on_node: dict[str, dict[str, BoundPod]] = {}
        """The same pods by node, then uid (a decision record names who holds a domain's nodes)."""
        self._pods_by_decision: dict[str, dict[str, BoundPod]] = {}
        self.succeeded: dict[str, BoundPod] = {}
        """Pods of Atoll decisions that succeeded, by uid, while they exist (the ledger remembers them
        for as long as their Workload holds its reservation): one small record per pod."""
        self._succeeded_by_decision: dict[str, dict[str, BoundPod]] = {}
        self.pod_listener: Callable[[str], None] | None = None
        """Told the decision id of every pod carrying one that binds, finishes or goes (the ledger)."""
        self._held: dict[str, None] | None = None
        self.workload_listeners: list[Callable[[str], None]] = []
        """Told the key of every Workload stored or deleted (what keeps state between passes reads again)."""
        self.usage: dict[str, ResourceVector] = {}
        self.profiles: ProfilesDocument | None = None
        self._flavors: dict[str, _FlavorState] = {}
        self._generation = 0

    # ------------------------------------------------------------------ feeding

    def replace_all(self, resource: Resource, items: Iterable[Obj]) -> None:
        """A fresh list: everything not in it is gone."""
        items = list(items)
        if resource == PODS:
            keep = {str((p.get("metadata") or {}).get("uid")) for p in items}
            for uid in [u for u in (*self.pods, *self.succeeded) if u not in keep]:
                self._drop_pod(uid)
        elif resource in self.objects:
            keep_keys = {object_key(o) for o in items}
            for key in [k for k in self.objects[resource] if k not in keep_keys]:
                self.delete(resource, self.objects[resource][key])
        for obj in items:
            self.upsert(resource, obj)

    def upsert(self, resource: Resource, obj: Obj) -> bool:
        """Store ``obj``; False if it is older than what is stored (a late event)."""
        if resource == PODS:
            self._upsert_pod(obj)
            return True
        store = self.objects[resource]
        key = object_key(obj)
        old = store.get(key)
        if not newer(old, obj):
            return False
        slim = SLIM.get(resource)
        if slim is not None:
            obj = slim(obj)
        store[key] = obj
        if resource == WORKLOADS:
            for listener in self.workload_listeners:
                listener(key)
        if resource == NODES:
            self._upsert_node(obj, old)
        elif resource in (RESOURCE_FLAVORS, TOPOLOGIES):
            if old is None or old.get("spec") != obj.get("spec"):
                self.invalidate()
        return True

    def delete(self, resource: Resource, obj: Obj) -> None:
        if resource == PODS:
            self._drop_pod(str((obj.get("metadata") or {}).get("uid")))
            return
        key = object_key(obj)
        old = self.objects[resource].pop(key, None)
        if resource == WORKLOADS and old is not None:
            for listener in self.workload_listeners:
                listener(key)
        if resource == NODES:
            self.nodes.pop(key, None)
            self.node_problems.pop(key, None)
            self.invalidate()
        elif resource in (RESOURCE_FLAVORS, TOPOLOGIES) and old is not None:
            self.invalidate()

    def set_profiles(self, doc: ProfilesDocument | None) -> bool:
        """Put ``doc`` in force; True when it differs from the one in force (the one place that
        tells). Such a document drops every snapshot (its flavors, topologies and links are what
        they are built from); an equal one keeps them. One that changes the accelerator resources
        (``gpu_resource``) has the nodes read again here; the caller relists the pods (their
        requests are not kept)."""
        if doc == self.profiles:
            return False
        self.profiles = doc
        self.invalidate()
        names = doc.accelerators(self.default_gpu_resource) if doc is not None else (self.default_gpu_resource,)
        if names != self.gpu_resource:
            self.gpu_resource = names
            for obj in list(self.objects[NODES].values()):
                self._upsert_node(obj, obj)
        return True

    def invalidate(self) -> None:
        """Drop every snapshot; the next ``snapshot()`` rebuilds it."""
        self._flavors.clear()

    def _upsert_node(self, obj: Obj, old: Obj | None) -> None:
        name = object_key(obj)
        info, problem = node_info(obj, self.gpu_resource)
        if problem:
            if self.node_problems.get(name) != problem:
                _log.error("node is not a placement candidate", node=name, error=problem)
            self.node_problems[name] = problem
        else:
            self.node_problems.pop(name, None)
        before = self.nodes.get(name)
        self.node_changed = True
        if info is None:
            if before is not None or old is None:
                self.nodes.pop(name, None)
                self.invalidate()
            else:
                self.node_changed = False
            return
        if before is not None and before.labels == info.labels:
            if before != info:
                self.nodes[name] = info
                self._dirty(name)
            else:
                self.node_changed = False
            return
        self.nodes[name] = info
        self.invalidate()

    def _upsert_pod(self, obj: Obj) -> None:
        self.put_pod(str((obj.get("metadata") or {}).get("uid")), pod_usage(obj, self.gpu_resource), succeeded_pod(obj))

    def put_pod(self, uid: str, bound: BoundPod | None, done: BoundPod | None = None) -> None:
        """A pod as ``pod_usage`` and ``succeeded_pod`` read it, for a caller that has already read
        it (the simulator reads each PodSet's pods once): bound and unfinished (usage on its
        node), succeeded (a done pod of its decision), or neither (pending or failed: nothing is
        kept). A pod turning ``Succeeded`` moves from the first to the second in this one step,
        and the ledger is told once, after it."""
        if self.pods.get(uid) == bound and self.succeeded.get(uid) == done:
            return
        changed = self._remove_pod(uid)
        if bound is not None:
            self.pods[uid] = bound
            self.pods_on_node.setdefault(bound.node, {})[uid] = bound
            self.usage[bound.node] = self.usage.get(bound.node, _NOTHING) + bound.usage
            self._dirty(bound.node, usage_only=True)
        if done is not None:
            self.succeeded[uid] = done
        for pod, by_decision in ((bound, self._pods_by_decision), (done, self._succeeded_by_decision)):
            if pod is not None and pod.decision_id:
                by_decision.setdefault(pod.decision_id, {})[uid] = pod
                if pod.decision_id not in changed:
                    changed.append(pod.decision_id)
        for decision_id in changed:
            self._tell(decision_id)

    def _drop_pod(self, uid: str) -> None:
        for decision_id in self._remove_pod(uid):
            self._tell(decision_id)

    def _remove_pod(self, uid: str) -> list[str]:
        """Forget a pod (its usage comes off its node); returns the decision ids it belonged to."""
        old = self.pods.pop(uid, None)
        done = self.succeeded.pop(uid, None)
        if old is None and done is None:
            return []
        if old is not None:
            on_node = self.pods_on_node.get(old.node, {})
            on_node.pop(uid, None)
            if not on_node:
                self.pods_on_node.pop(old.node, None)
            have, took = self.usage.get(old.node, _NOTHING), old.usage
            left = ResourceVector(max(0, have.gpu - took.gpu), max(0, have.cpu_milli - took.cpu_milli),
                                  max(0, have.memory_mib - took.memory_mib), max(0, have.pods - took.pods))
            self.usage[old.node] = left
            self._dirty(old.node, usage_only=True)
        changed: list[str] = []
        for pod, by_decision in ((old, self._pods_by_decision), (done, self._succeeded_by_decision)):
            if pod is not None and pod.decision_id:
                pods = by_decision.get(pod.decision_id, {})
                pods.pop(uid, None)
                if not pods:
                    by_decision.pop(pod.decision_id, None)
                if pod.decision_id not in changed:
                    changed.append(pod.decision_id)
        return changed

    @contextmanager
    def pods_at_once(self) -> Iterator[None]:
        """Pod changes made inside reach ``pod_listener`` once per decision id, at the end: a
        scheduler binding a gang's pods in one instant, told as one change."""
        if self._held is not None:
            yield
            return
        self._held = {}
        try:
            yield
        finally:
            held, self._held = self._held, None
            for decision_id in held:
                self._tell(decision_id)

    def _tell(self, decision_id: str) -> None:
        if self._held is not None:
            self._held[decision_id] = None
        elif self.pod_listener is not None:
            self.pod_listener(decision_id)

    def _dirty(self, node: str, *, usage_only: bool = False) -> None:
        for state in self._flavors.values():
            if node in state.members:
                (state.usage if usage_only else state.dirty).add(node)

    # ------------------------------------------------------------------ reading

    def node_labels(self, name: str) -> Mapping[str, str] | None:
        """A node's labels (None for a node the cache does not know), for selectors the ledger checks."""
        info = self.nodes.get(name)
        return info.labels if info is not None else None

    def bound_pods(self, decision_id: str) -> dict[str, Counter[str]]:
        """PodSet → node → pods bound and not finished, for one decision (pods carry its id)."""
        out: dict[str, Counter[str]] = {}
        for pod in self._pods_by_decision.get(decision_id, {}).values():
            out.setdefault(pod.podset, Counter())[pod.node] += 1
        return out

    def succeeded_pods(self, decision_id: str) -> dict[str, dict[str, str]]:
        """PodSet → pod uid → the node it ran on, for the pods of one decision that succeeded."""
        out: dict[str, dict[str, str]] = {}
        for uid, pod in self._succeeded_by_decision.get(decision_id, {}).items():
            out.setdefault(pod.podset, {})[uid] = pod.node
        return out

    def flavor_topology(self, flavor: str) -> tuple[str, list[str]]:
        """(topology name, level labels top → bottom) for a flavor Atoll places; else FlavorProblem."""
        rf = self.objects[RESOURCE_FLAVORS].get(flavor)
        if rf is None:
            raise FlavorProblem("missing-flavor", f"ResourceFlavor {flavor} not found")
        kueue_topology = (rf.get("spec") or {}).get("topologyName")
        settings = self.profiles.flavors.get(flavor) if self.profiles else None
        if settings is None:
            if kueue_topology:
                raise FlavorProblem("kueue-tas", f"flavor {flavor} uses Kueue's own TAS (spec.topologyName {kueue_topology})",
                                    topology=kueue_topology)
            raise FlavorProblem("unmapped", f"flavor {flavor} is not mapped to a Topology: add flavors.{flavor}.topology "
                                            "to the profiles document (ConfigMap key profiles.yaml)")
        if kueue_topology:
            raise FlavorProblem("kueue-tas", f"flavor {flavor} sets spec.topologyName {kueue_topology}, so Kueue's TAS assigns it "
                                             f"before any check; remove topologyName for Atoll to place it (profiles.yaml "
                                             f"flavors.{flavor})", topology=kueue_topology)
        topo = self.objects[TOPOLOGIES].get(settings.topology)
        if topo is None:
            raise FlavorProblem("missing-topology", f"Topology {settings.topology} (profiles.yaml flavors.{flavor}.topology) not found")
        levels = [str(lv.get("nodeLabel")) for lv in (topo.get("spec") or {}).get("levels") or []]
        if not levels:
            raise FlavorProblem("missing-topology", f"Topology {settings.topology} has no spec.levels")
        return settings.topology, levels

    def _levels(self, flavor: str, labels: list[str]) -> tuple[list[Level], Level | None]:
        links = self.profiles.flavors[flavor].links if self.profiles and flavor in self.profiles.flavors else {}

        def link(label: str) -> Level:
            if label in links:
                return Level(label, links[label].bandwidth_gbps, links[label].latency_us)
            bw, lat = DEFAULT_LINKS.get(label, DEFAULT_FABRIC_LINK)
            return Level(label, bw, lat)

        levels = [link(lb) for lb in labels]
        if levels and levels[-1].label == HOSTNAME_LABEL and HOSTNAME_LABEL not in links and len(levels) > 1:
            above = levels[-2]  # GPUs in one node are at least as close as GPUs in one island
            if above.bandwidth_gbps > levels[-1].bandwidth_gbps:
                levels[-1] = Level(HOSTNAME_LABEL, above.bandwidth_gbps, min(above.latency_us, levels[-1].latency_us))
        node_level = link(HOSTNAME_LABEL) if HOSTNAME_LABEL in links else None
        return levels, node_level

    def flavor_nodes(self, flavor: str) -> list[str]:
        """Names of the nodes whose labels carry the flavor's ``nodeLabels`` (problems included)."""
        rf = self.objects[RESOURCE_FLAVORS].get(flavor) or {}
        want = (rf.get("spec") or {}).get("nodeLabels") or {}
        out = []
        for name, obj in self.objects[NODES].items():
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if all(labels.get(k) == v for k, v in want.items()):
                out.append(name)
        return out

    def tolerations(self, flavor: str) -> list[Toleration]:
        rf = self.objects[RESOURCE_FLAVORS].get(flavor) or {}
        return [Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""), str(t.get("effect") or ""))
                for t in (rf.get("spec") or {}).get("tolerations") or []]

    def snapshot(self, flavor: str) -> Snapshot:
        """The flavor's current snapshot (shared: fork it before changing it)."""
        state = self._flavors.get(flavor)
        if state is not None:
            for name in sorted(state.dirty | state.usage) if state.usage else sorted(state.dirty):
                info = self.nodes.get(name)
                if info is not None and name not in state.dirty and state.snapshot.update_usage(name, self.usage.get(name, _NOTHING)):
                    continue  # only its pods changed
                if info is None or not state.snapshot.update_node(self._with_usage(info)):
                    if info is None or name in state.snapshot.node_index:
                        state = None
                        break
            if state is not None:
                state.dirty.clear()
                state.usage.clear()
                return state.snapshot
        _, labels = self.flavor_topology(flavor)
        levels, node_level = self._levels(flavor, labels)
        members = self.flavor_nodes(flavor)
        infos = [self._with_usage(self.nodes[n]) for n in members if n in self.nodes]
        self._generation += 1
        snap = Snapshot(flavor, levels, infos, tolerations=self.tolerations(flavor), node_level=node_level,
                        generation=self._generation * 1_000_000)
        bad = sum(1 for n in members if n not in self.nodes)
        if bad:
            snap.excluded["unreadable allocatable"] = bad
        self._flavors[flavor] = _FlavorState(snap, frozenset(members))
        return snap

    def draining_mask(self, snap: Snapshot) -> npt.NDArray[np.bool_]:
        """The nodes of ``snap`` labelled draining (``vocabulary.DRAINING``), in its node order."""
        return np.fromiter((bool(info is not None and info.draining) for info in map(self.nodes.get, snap.node_names)), dtype=bool,
                           count=snap.num_nodes)

    def _with_usage(self, info: NodeInfo) -> NodeInfo:
        used = self.usage.get(info.name)
        if used is None:
            return info
        return NodeInfo(info.name, info.labels, info.allocatable, used, info.ready, info.unschedulable, info.taints, info.perf,
                        info.draining)

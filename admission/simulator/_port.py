"""The cluster the simulator and ``atoll place`` run the controller against: in memory, with a clock.

``MemoryCluster`` implements the controller's narrow port (``admission.kube.ClusterPort``):
objects are JSON-shaped dicts with increasing resourceVersions; ``replace`` and an ``apply``
that carries a resourceVersion are refused with ``Conflict`` when the object changed since;
``apply`` on ``workloads/status`` merges ``admissionChecks`` by name and ``conditions`` by type
as server-side apply does for those list-map keys; ``patch`` is a JSON merge patch (RFC 7386).
Watches end at once (callers ``sync()`` instead). So a ``Controller`` built on it lists, decides
and writes exactly as it does against a real apiserver.

The builders turn a cluster model and a profiles document into the objects an admin installs
(Nodes, ResourceFlavors, Topologies, Atoll's AdmissionCheck, the profiles ConfigMap) and a job
into the Workload Kueue creates and reserves quota for.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from admission import vocabulary
from admission.controller import KueueSettings
from admission.kube import (
    ADMISSION_CHECKS,
    CONFIGMAPS,
    NODES,
    PODS,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Clock,
    ListResult,
    ManualClock,
    Obj,
    Resource,
    WatchEvent,
    errors,
    object_key,
    parse_label_selector,
)
from policies import FlavorSettings, LinkSettings, ProfilesDocument
from topology import HOSTNAME_LABEL, ClusterModel, FlavorModel, NodeInfo, ResourceVector

__all__ = [
    "CHECK_NAME",
    "CLUSTER_QUEUE",
    "CONTROLLER_NAME",
    "FLAVOR_LABEL",
    "PROFILES_NAMESPACE",
    "MemoryCluster",
    "cluster_objects",
    "node_object",
    "profiles_for_cluster",
    "quantities",
    "workload_object",
]

CHECK_NAME = "atoll-topology"
"""The AdmissionCheck the Helm chart creates (the controller's default)."""
CONTROLLER_NAME = vocabulary.CONTROLLER_NAME
PROFILES_NAMESPACE = "atoll-system"
FLAVOR_LABEL = vocabulary.FLAVOR
"""Node label a model flavor without ``nodeLabels`` gets, so its ResourceFlavor selects its nodes only."""
_MERGE_KEYS = {"admissionChecks": "name", "conditions": "type"}
"""List-map keys of Workload status (server-side apply merges these lists by key)."""


class _EndedWatch:
    """A watch that has nothing to say: the in-memory cluster is read with ``list``."""

    def __iter__(self) -> Iterator[WatchEvent]:
        return iter(())

    def close(self) -> None:
        return None


class MemoryCluster:
    """``ClusterPort`` in memory. Objects go in and out as copies, as they would over HTTP."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or ManualClock()
        self._store: dict[Resource, dict[str, Obj]] = {}
        self._version = 0

    def _stamp(self, resource: Resource, obj: Obj) -> Obj:
        self._version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._version)
        meta.setdefault("uid", f"uid-{resource.plural}-{self._version}")
        meta.setdefault("generation", 1)
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        self._store.setdefault(resource, {})[object_key(obj)] = obj
        copied: Obj = _clone(obj)
        return copied

    def _current(self, resource: Resource, key: str) -> Obj:
        obj = self._store.get(resource, {}).get(key)
        if obj is None:
            raise errors.NotFound(f"{resource} {key} not found", status=404)
        return obj

    @staticmethod
    def _check_version(current: Obj, body: Obj, resource: Resource) -> None:
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want and want != current["metadata"]["resourceVersion"]:
            raise errors.Conflict(f"{resource} {object_key(current)}: the object has been modified", status=409)

    # ------------------------------------------------------------------ the port

    def list(self, resource: Resource, *, namespace: str | None = None, field_selector: str | None = None,
             label_selector: str | None = None) -> ListResult:
        matches = parse_label_selector(label_selector or "")  # refused (400) before anything is read, as the apiserver does
        items = [_clone(o) for k, o in sorted(self._store.get(resource, {}).items())
                 if namespace is None or (o.get("metadata") or {}).get("namespace") == namespace]
        if field_selector:
            items = [o for o in items if _matches_fields(o, field_selector)]
        if label_selector:
            items = [o for o in items if matches((o.get("metadata") or {}).get("labels") or {})]
        return ListResult(items, str(self._version))

    def watch(self, resource: Resource, resource_version: str, *, namespace: str | None = None,
              field_selector: str | None = None, timeout_seconds: int = 300) -> _EndedWatch:
        return _EndedWatch()

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        copied: Obj = _clone(self._current(resource, f"{namespace}/{name}" if namespace else name))
        return copied

    def create(self, resource: Resource, obj: Obj) -> Obj:
        key = object_key(obj)
        if key in self._store.get(resource, {}):
            raise errors.Conflict(f"{resource} {key} already exists", status=409, reason="AlreadyExists")
        return self._stamp(resource, _clone(obj))

    def replace(self, resource: Resource, obj: Obj) -> Obj:
        current = self._current(resource, object_key(obj))
        self._check_version(current, obj, resource)
        new = _clone(obj)
        new["metadata"]["uid"] = current["metadata"]["uid"]
        return self._stamp(resource, new)

    def patch(self, resource: Resource, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        current = self._current(resource, f"{namespace}/{name}" if namespace else name)
        self._check_version(current, patch, resource)
        new = _merge_patch(_clone(current), _clone(patch))
        return self._stamp(resource, new)

    def apply(self, resource: Resource, obj: Obj, *, field_manager: str, subresource: str | None = None, force: bool = True) -> Obj:
        key = object_key(obj)
        current = self._store.get(resource, {}).get(key)
        if current is None:
            if subresource:
                raise errors.NotFound(f"{resource} {key} not found", status=404)
            return self._stamp(resource, _clone(obj))
        self._check_version(current, obj, resource)
        new = _clone(current)
        body = _clone(obj)
        if subresource == "status":
            body = {"status": body.get("status") or {}}
        else:
            body.pop("status", None)
            body["metadata"] = {k: v for k, v in (body.get("metadata") or {}).items() if k in ("labels", "annotations")}
        _apply_merge(new, body)
        return self._stamp(resource, new)

    # ------------------------------------------------------------------ for the simulator and tests

    def put(self, resource: Resource, obj: Obj) -> Obj:
        """Create or overwrite, as the object's owner would (no version check)."""
        return self._stamp(resource, _clone(obj))

    def load(self, objects: Sequence[tuple[Resource, Obj]]) -> MemoryCluster:
        for resource, obj in objects:
            self.put(resource, obj)
        return self


_IMMUTABLE = (str, int, float, bool, type(None))


def _clone(value: Any) -> Any:
    """A deep copy of a JSON-shaped object (what crosses HTTP), several times faster than
    ``copy.deepcopy``, which remembers every object it copied; anything else is deep-copied."""
    if type(value) is dict:
        return {k: v if type(v) in _IMMUTABLE else _clone(v) for k, v in value.items()}
    if type(value) is list:
        return [v if type(v) in _IMMUTABLE else _clone(v) for v in value]
    if type(value) in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = _merge_patch(target.get(k), v)
    return target


def _apply_merge(target: dict[str, Any], body: Mapping[str, Any]) -> None:
    """Server-side apply of ``body`` for the fields it names: maps merge, list-maps merge by key,
    other lists and scalars are replaced."""
    for k, v in body.items():
        have = target.get(k)
        if k in _MERGE_KEYS and isinstance(v, list) and isinstance(have, list):
            key = _MERGE_KEYS[k]
            merged = [dict(x) for x in have]
            for item in v:
                at = next((i for i, x in enumerate(merged) if x.get(key) == item.get(key)), None)
                if at is None:
                    merged.append(item)
                else:
                    merged[at] = {**merged[at], **item}
            target[k] = merged
        elif isinstance(v, dict) and isinstance(have, dict):
            _apply_merge(have, v)
        else:
            target[k] = v


def _matches_fields(obj: Obj, selector: str) -> bool:
    """The field selectors the controller uses: ``metadata.name=``, ``spec.nodeName!=``, ``status.phase!=``."""
    for term in filter(None, selector.split(",")):
        neg = "!=" in term
        path, _, want = term.partition("!=" if neg else "=")
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        have = "" if value is None else str(value)
        if (have == want) == neg:
            return False
    return True


# ----------------------------------------------------------------------------- builders


def quantities(v: ResourceVector, gpu_resource: str) -> dict[str, str]:
    """A ResourceVector as Kubernetes quantities (GPUs, milli-CPU, MiB)."""
    out = {}
    if v.gpu:
        out[gpu_resource] = str(v.gpu)
    if v.cpu_milli:
        out["cpu"] = f"{v.cpu_milli}m"
    if v.memory_mib:
        out["memory"] = f"{v.memory_mib}Mi"
    return out


def node_object(node: NodeInfo, gpu_resource: str, extra_labels: Mapping[str, str] | None = None) -> Obj:
    """A Node as the kubelet and the GPU operator leave it: labels, allocatable, Ready, taints; a
    node the model drains carries the drain label an admin sets."""
    alloc = quantities(node.allocatable, gpu_resource)
    alloc["pods"] = str(node.allocatable.pods)
    labels = {HOSTNAME_LABEL: node.name, **node.labels, **(extra_labels or {})}
    if node.draining:
        labels[vocabulary.DRAINING] = "true"
    meta: dict[str, Any] = {"name": node.name, "labels": labels}
    if node.perf != 1.0:
        meta["annotations"] = {vocabulary.GPU_PERF: repr(node.perf)}
    return {
        "apiVersion": "v1", "kind": "Node", "metadata": meta,
        "spec": {"unschedulable": node.unschedulable, "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints]},
        "status": {"allocatable": alloc, "capacity": dict(alloc),
                   "conditions": [{"type": "Ready", "status": "True" if node.ready else "False"}]},
    }


def _flavor_labels(cluster: ClusterModel, flavor: FlavorModel) -> dict[str, str]:
    if flavor.node_labels or len(cluster.flavors) == 1:
        return dict(flavor.node_labels)
    return {FLAVOR_LABEL: flavor.name}


def profiles_for_cluster(doc: ProfilesDocument, cluster: ClusterModel, *, enforcement: str | None = None) -> ProfilesDocument:
    """The document an admin would install for this cluster: every flavor mapped to its Topology
    with the model's links per level and its accelerator resource (``gpuResource``, when not the
    controller's default); ``enforcement`` (when given) for every flavor, else what
    the document says (``domain`` for a flavor it does not name)."""
    flavors = dict(doc.flavors)
    for f in cluster.flavors:
        have = flavors.get(f.name)
        links = {lv.label: LinkSettings(bandwidthGBps=lv.bandwidth_gbps, latencyUs=lv.latency_us) for lv in f.levels}
        node = f.node_level()
        links.setdefault(node.label, LinkSettings(bandwidthGBps=node.bandwidth_gbps, latencyUs=node.latency_us))
        links.update(have.links if have is not None else {})
        resource = have.gpu_resource if have is not None and have.gpu_resource else f.gpu_resource
        flavors[f.name] = FlavorSettings(topology=f.topology, enforcement=enforcement or (have.enforcement if have else "domain"),  # type: ignore[arg-type]
                                         links=links, **({"gpuResource": resource} if resource != KueueSettings().gpu_resource else {}))
    return doc.model_copy(update={"flavors": flavors})


def cluster_objects(cluster: ClusterModel, doc: ProfilesDocument, *, namespace: str = PROFILES_NAMESPACE,
                    configmap: str = "atoll-policies", check: str = CHECK_NAME) -> list[tuple[Resource, Obj]]:
    """What an admin installs for ``cluster``: Nodes, ResourceFlavors, Topologies, Atoll's
    AdmissionCheck and the profiles ConfigMap holding ``doc``; plus one running pod per node
    whose model says part of it is already used."""
    out: list[tuple[Resource, Obj]] = []
    topologies: dict[str, list[str]] = {}
    for f in cluster.flavors:
        labels = _flavor_labels(cluster, f)
        for node in f.build_nodes():
            out.append((NODES, node_object(node, f.gpu_resource, labels)))
            if any(node.used.as_tuple()[:3]):  # what the model says is in use: another tenant's pod
                out.append((PODS, {"metadata": {"name": f"resident-{node.name}", "namespace": "default", "uid": f"resident-{node.name}"},
                                   "spec": {"nodeName": node.name, "containers": [{"name": "main", "resources": {
                                       "requests": quantities(node.used, f.gpu_resource)}}]}, "status": {"phase": "Running"}}))
        out.append((RESOURCE_FLAVORS, {"metadata": {"name": f.name}, "spec": {"nodeLabels": labels}}))
        topologies.setdefault(f.topology, [lv.label for lv in f.levels])
    for name, levels in topologies.items():
        out.append((TOPOLOGIES, {"metadata": {"name": name}, "spec": {"levels": [{"nodeLabel": lb} for lb in levels]}}))
    out.append((ADMISSION_CHECKS, {"metadata": {"name": check}, "spec": {"controllerName": CONTROLLER_NAME}}))
    text = yaml.safe_dump(doc.model_dump(mode="json", by_alias=True, exclude_defaults=True), sort_keys=True)
    out.append((CONFIGMAPS, {"metadata": {"name": configmap, "namespace": namespace}, "data": {"profiles.yaml": text}}))
    return out


CLUSTER_QUEUE = "cluster-queue"
"""The ClusterQueue every simulated Workload names (the simulator models one per flavor)."""


def workload_object(name: str, podsets: Sequence[Mapping[str, Any]], *, flavor: str, namespace: str = "default",
                    queue: str = "default", cluster_queue: str = CLUSTER_QUEUE, gpu_resource: str = "nvidia.com/gpu",
                    check: str = CHECK_NAME, uid: str | None = None) -> Obj:
    """The Workload Kueue creates for a job, with quota reserved on ``flavor`` for every PodSet
    and Atoll's check entry Pending: the state in which Atoll decides. ``podsets`` are
    ``{name, count, template}`` as in ``spec.podSets``."""
    assignments = [{"name": ps["name"], "flavors": {gpu_resource: flavor}, "count": ps["count"]} for ps in podsets]
    return {
        "apiVersion": WORKLOADS.api_version, "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}", "generation": 1},
        "spec": {"queueName": queue, "podSets": [dict(ps) for ps in podsets]},
        "status": {
            "admission": {"clusterQueue": cluster_queue, "podSetAssignments": assignments},
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
            "admissionChecks": [{"name": check, "state": "Pending", "message": ""}],
        },
    }

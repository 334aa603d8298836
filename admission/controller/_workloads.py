"""Read a Kueue Workload (v1beta2), a batch/v1 Job or a JobSet into what the engine needs.

Annotations Atoll reads from each PodSet's pod template:

- ``atoll.dev/profile``: profile name (else the queue's or the default profile);
- ``atoll.dev/class``: workload class (training, inference, …);
- ``kueue.x-k8s.io/podset-required-topology`` / ``podset-preferred-topology``: Kueue's own
  hints, honoured per PodSet;
- ``atoll.dev/near``: another PodSet this one must sit close to (a serving graph edge), with
  ``atoll.dev/near-min-bandwidth-gbps`` or ``atoll.dev/near-level``.

Each PodSet's nodeSelector and required node affinity become its own ``NodeConstraint``: only
the nodes they allow are candidates for that PodSet. A PodSet of count 0 (valid in the Workload
CRD) has nothing to place. Every number is read strictly (ASCII digits, bounded).

Every error names the field (``spec.podSets[1].template.metadata.annotations[atoll.dev/near]``).

Why this module is long: Workload, Job and JobSet manifests, pod templates, resources,
tolerations and node affinity are read by one set of field-naming helpers, so every error names
its path the same way; splitting them would split those helpers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admission import vocabulary
from admission.kube import Obj
from policies import PodSetSpec, podset_spec
from topology import (
    LIMITS,
    MAX_COUNT,
    NODE_OPERATORS,
    RESOURCE_NAMES,
    GraphLink,
    NodeConstraint,
    NodeRequirement,
    ResourceVector,
    Toleration,
    parse_label_int,
    read_yaml_file,
)

__all__ = [
    "ANN_CLASS",
    "ANN_NEAR",
    "ANN_NEAR_LEVEL",
    "ANN_NEAR_MIN_BW",
    "ANN_PROFILE",
    "PodSetTemplate",
    "WorkloadError",
    "WorkloadView",
    "as_workload",
    "check_entry",
    "condition_true",
    "holds_quota",
    "load_workload_file",
    "parse_object",
    "parse_workload",
]

ANN_PROFILE = vocabulary.PROFILE
ANN_CLASS = vocabulary.CLASS
ANN_NEAR = vocabulary.NEAR
ANN_NEAR_MIN_BW = vocabulary.NEAR_MIN_BANDWIDTH_GBPS
ANN_NEAR_LEVEL = vocabulary.NEAR_LEVEL


def _status_list(obj: Obj, key: str) -> list[dict[str, Any]]:
    """``status.<key>`` entries that are mappings; anything malformed reads as absent (parse_workload names it)."""
    status = obj.get("status")
    items = status.get(key) if isinstance(status, dict) else None
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def condition_true(obj: Obj, kind: str) -> bool:
    for cond in _status_list(obj, "conditions"):
        if cond.get("type") == kind:
            return bool(cond.get("status") == "True")
    return False


def holds_quota(obj: Obj) -> bool:
    """Does the Workload hold quota Atoll may use, as Kueue v0.19.2 tells it: ``QuotaReserved``
    is True (``workload.HasQuotaReservation``), it is active (``workload.IsActive``: ``spec.active``
    unset or true) and not being evicted (``Evicted`` True: Kueue releases the quota as the job
    stops, and Atoll decides nothing on it meanwhile). The ledger honours a Ready placement only
    while this holds (``holds_reservation``)."""
    return (condition_true(obj, "QuotaReserved") and not condition_true(obj, "Evicted") and not condition_true(obj, "Finished")
            and (obj.get("spec") or {}).get("active", True) is not False)


def check_entry(obj: Obj, names: Iterable[str]) -> dict[str, Any] | None:
    """The Workload's admission-check entry for one of ``names`` (Atoll's checks)."""
    wanted = set(names)
    for entry in _status_list(obj, "admissionChecks"):
        if entry.get("name") in wanted:
            return dict(entry)
    return None


class WorkloadError(ValueError):
    """A Workload (or Job) is malformed for Atoll; the message names the field."""


@dataclass(frozen=True, slots=True)
class PodSetTemplate:
    """Keys already set on a PodSet's pod template: podSetUpdates must not conflict with them."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkloadView:
    namespace: str
    name: str
    uid: str
    queue_name: str
    cluster_queue: str | None
    podsets: tuple[PodSetSpec, ...]
    templates: Mapping[str, PodSetTemplate]
    profile: str | None
    workload_class: str | None
    links: tuple[GraphLink, ...]
    flavors: Mapping[str, str]
    """PodSet name → the ResourceFlavor Kueue assigned to its GPUs (empty before admission)."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    empty_podsets: tuple[str, ...] = ()
    """PodSets whose count is 0: nothing to place (they are not in ``podsets``)."""
    other_flavors: Mapping[str, str] = field(default_factory=dict)
    """PodSet name → the ResourceFlavor Kueue assigned to its other resources (cpu first), for
    PodSets with no GPU flavor: a PodSet requesting no GPU on an Atoll flavor is placed too."""
    accelerators: Mapping[str, str] = field(default_factory=dict)
    """PodSet name → the accelerator resource its pods request (``nvidia.com/gpu``, ``amd.com/gpu``, …)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def local_queue(self) -> str:
        return f"{self.namespace}/{self.queue_name}"


_TAKES = {int: "a whole number", float: "a number", str: "a string", bool: "true or false", dict: "a mapping", list: "a list"}
"""What a field of each type takes, said as what to write there (as the YAML documents' errors say it)."""


def _wrong(at: str, kind: type | tuple[type, ...], value: Any) -> WorkloadError:
    """``at: expected a whole number, got 'sixteen'``: what the field takes, then what was written."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    takes = " or ".join(_TAKES.get(k, k.__name__) for k in kinds)
    given = repr(value) if isinstance(value, (str, int, float, bool)) and len(repr(value)) <= 60 else _TAKES.get(type(value), type(value).__name__)
    return WorkloadError(f"{at}: expected {takes}, got {given}")


def _get(obj: Any, key: str, where: str, kind: type | tuple[type, ...] = dict, default: Any = ...) -> Any:
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: expected a mapping")
    if key not in obj or obj[key] is None:
        if default is ...:
            raise WorkloadError(f"{where}.{key}: required")
        return default
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _wrong(f"{where}.{key}", kind, value)
    return value


_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


def _tolerations(spec: dict[str, Any], where: str) -> tuple[Toleration, ...]:
    """The pod template's tolerations, checked by Kubernetes' own rules."""
    out = []
    for i, raw in enumerate(_get(spec, "tolerations", where, list, [])):
        at = f"{where}.tolerations[{i}]"
        key = _get(raw, "key", at, str, "")
        operator = _get(raw, "operator", at, str, "Equal") or "Equal"
        value = _get(raw, "value", at, str, "")
        effect = _get(raw, "effect", at, str, "")
        if operator not in ("Equal", "Exists"):
            raise WorkloadError(f"{at}.operator: {operator!r} is not Equal or Exists")
        if effect not in _TOLERATION_EFFECTS:
            raise WorkloadError(f"{at}.effect: {effect!r} is not NoSchedule, PreferNoSchedule or NoExecute")
        if operator == "Exists" and value:
            raise WorkloadError(f"{at}.value: must be empty when operator is Exists, got {value!r}")
        if not key and operator != "Exists":
            raise WorkloadError(f"{at}.operator: must be Exists when key is empty")
        out.append(Toleration(key, operator, value, effect))
    return tuple(out)


_AFFINITY = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _requirement(raw: Any, at: str, is_field: bool) -> NodeRequirement:
    """One nodeSelectorRequirement, validated as the Kubernetes API validates it."""
    key = _get(raw, "key", at, str)
    operator = _get(raw, "operator", at, str)
    values = _get(raw, "values", at, list, [])
    for j, v in enumerate(values):
        if not isinstance(v, str):
            raise _wrong(f"{at}.values[{j}]", str, v)
    if not key:
        raise WorkloadError(f"{at}.key: must not be empty")
    if is_field:
        if key != "metadata.name":
            raise WorkloadError(f"{at}.key: {key!r} is not a supported field (metadata.name)")
        if operator not in ("In", "NotIn"):
            raise WorkloadError(f"{at}.operator: {operator!r} is not In or NotIn (the operators of matchFields)")
        if len(values) != 1:
            raise WorkloadError(f"{at}.values: must have exactly one value for matchFields, got {len(values)}")
    elif operator not in NODE_OPERATORS:
        raise WorkloadError(f"{at}.operator: {operator!r} is not one of {', '.join(NODE_OPERATORS)}")
    if operator in ("In", "NotIn") and not values:
        raise WorkloadError(f"{at}.values: must be non-empty when operator is {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise WorkloadError(f"{at}.values: must be empty when operator is {operator}")
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise WorkloadError(f"{at}.values: must have exactly one value when operator is {operator}, got {len(values)}")
        if parse_label_int(values[0]) is None:
            raise WorkloadError(f"{at}.values[0]: {values[0]!r} is not an integer (operator {operator})")
    return NodeRequirement(key, operator, tuple(values), is_field)


def _node_constraint(spec: dict[str, Any], where: str) -> NodeConstraint | None:
    """The pod template's nodeSelector and required node affinity; None when it sets neither."""
    raw_selector = _get(spec, "nodeSelector", where, dict, {})
    selector = []
    for k, v in raw_selector.items():
        if not isinstance(v, str):
            raise _wrong(f"{where}.nodeSelector[{k}]", str, v)
        selector.append((str(k), v))
    affinity = _get(spec, "affinity", where, dict, {})
    node_affinity = _get(affinity, "nodeAffinity", f"{where}.affinity", dict, {})
    required = _get(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", f"{where}.affinity.nodeAffinity", dict, None)
    terms: tuple[tuple[NodeRequirement, ...], ...] | None = None
    if required is not None:
        at = f"{where}.{_AFFINITY}"
        raw_terms = _get(required, "nodeSelectorTerms", at, list)
        if not raw_terms:
            raise WorkloadError(f"{at}.nodeSelectorTerms: must have at least one term")
        out = []
        for i, raw in enumerate(raw_terms):
            tat = f"{at}.nodeSelectorTerms[{i}]"
            exprs = _get(raw, "matchExpressions", tat, list, [])
            fields = _get(raw, "matchFields", tat, list, [])
            out.append(tuple([_requirement(e, f"{tat}.matchExpressions[{j}]", False) for j, e in enumerate(exprs)]
                             + [_requirement(f, f"{tat}.matchFields[{j}]", True) for j, f in enumerate(fields)]))
        terms = tuple(out)
    if not selector and terms is None:
        return None
    return NodeConstraint(tuple(sorted(selector)), terms)


def _count(obj: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    """A pod count: an integer in [0, MAX_COUNT]."""
    value = _get(obj, key, where, int) if default is None else _get(obj, key, where, int, default)
    if value < 0:
        raise WorkloadError(f"{where}.{key}: must not be negative, got {value}")
    if value > MAX_COUNT:
        raise WorkloadError(f"{where}.{key}: {value} exceeds the limit of {MAX_COUNT} pods")
    return int(value)


_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?", re.ASCII)


def _decimal(text: str) -> float | None:
    """A plain ASCII decimal number (no sign, no ``inf``/``nan``, no ``_``); None otherwise."""
    return float(text) if _DECIMAL.fullmatch(text.strip()) else None


def _pod_resources(spec: dict[str, Any], where: str, gpu_resource: str | tuple[str, ...]) -> ResourceVector:
    """Sum of container requests (limits stand in for a missing request), at least each init container."""
    total = ResourceVector()
    containers = _get(spec, "containers", where, list)
    if not containers:
        raise WorkloadError(f"{where}.containers: at least one container is required")

    def one(c: Any, cwhere: str) -> ResourceVector:
        res = _get(c, "resources", cwhere, dict, {})
        requests = dict(_get(res, "limits", f"{cwhere}.resources", dict, {}))
        requests.update(_get(res, "requests", f"{cwhere}.resources", dict, {}))
        try:
            return ResourceVector.from_kube(requests, gpu_resource, f"{cwhere}.resources.requests")
        except ValueError as exc:
            raise WorkloadError(str(exc)) from None

    for i, c in enumerate(containers):
        total = total + one(c, f"{where}.containers[{i}]")
    for i, c in enumerate(_get(spec, "initContainers", where, list, [])):
        init = one(c, f"{where}.initContainers[{i}]")
        total = ResourceVector(*(max(a, b) for a, b in zip(total.as_tuple(), init.as_tuple())))
    for name, amount, limit in zip(RESOURCE_NAMES, total.as_tuple(), LIMITS):  # each container is bounded; so is their sum
        if amount > limit:
            raise WorkloadError(f"{where}.containers: the pod's {name} sum to {amount}, above the limit of {limit}")
    return total


def _links(templates: dict[str, dict[str, str]], names: list[str]) -> tuple[GraphLink, ...]:
    links = []
    for i, name in enumerate(names):
        ann = templates[name]
        near = ann.get(ANN_NEAR)
        where = f"spec.podSets[{i}].template.metadata.annotations"
        if near is None:
            if ANN_NEAR_MIN_BW in ann or ANN_NEAR_LEVEL in ann:
                raise WorkloadError(f"{where}[{ANN_NEAR}]: required with {ANN_NEAR_MIN_BW} / {ANN_NEAR_LEVEL}")
            continue
        if near not in names or near == name:
            raise WorkloadError(f"{where}[{ANN_NEAR}]: {near!r} is not another PodSet of this Workload (have {names})")
        bw_text, level = ann.get(ANN_NEAR_MIN_BW), ann.get(ANN_NEAR_LEVEL)
        if (bw_text is None) == (level is None):
            raise WorkloadError(f"{where}: set exactly one of {ANN_NEAR_MIN_BW} or {ANN_NEAR_LEVEL} with {ANN_NEAR}")
        bw = None
        if bw_text is not None:
            bw = _decimal(bw_text)
            if bw is None:
                raise WorkloadError(f"{where}[{ANN_NEAR_MIN_BW}]: {bw_text!r} is not a number (GB/s)")
            if not 0 < bw <= 1e6:
                raise WorkloadError(f"{where}[{ANN_NEAR_MIN_BW}]: must be > 0 and at most 1e6 GB/s, got {bw_text}")
        links.append(GraphLink(near, name, min_bandwidth_gbps=bw, max_level=level))
    return tuple(links)


def _one_of(values: dict[str, str | None], key: str, where: str) -> str | None:
    found = {v for v in values.values() if v}
    if len(found) > 1:
        raise WorkloadError(f"{where}: PodSets disagree on annotation {key}: {sorted(found)}")
    return found.pop() if found else None


def _accelerator(spec: dict[str, Any], where: str, gpu_resource: str | tuple[str, ...]) -> str:
    """The accelerator resource a pod template requests, among those flavors offer (the first
    it requests a non-zero amount of; the first of them when it requests none)."""
    if isinstance(gpu_resource, str):
        return gpu_resource
    for name in gpu_resource[1:]:
        if _pod_resources(spec, where, name).gpu > 0:
            return name
    return gpu_resource[0]


def parse_workload(obj: dict[str, Any], *, gpu_resource: str | tuple[str, ...] = "nvidia.com/gpu") -> WorkloadView:
    """A v1beta2 Workload. Counts come from the admission (partial admission) when present."""
    meta = _get(obj, "metadata", "workload")
    name = _get(meta, "name", "metadata", str)
    namespace = _get(meta, "namespace", "metadata", str, "default")
    spec = _get(obj, "spec", "workload")
    status = _get(obj, "status", "workload", dict, {})
    admission = _get(status, "admission", "status", dict, {})
    assigned = {}
    flavors: dict[str, str] = {}
    others: dict[str, str] = {}
    assigned_flavors: dict[str, dict[str, Any]] = {}
    accelerators: dict[str, str] = {}
    for i, psa in enumerate(_get(admission, "podSetAssignments", "status.admission", list, [])):
        where = f"status.admission.podSetAssignments[{i}]"
        ps_name = _get(psa, "name", where, str)
        if "count" in psa and psa["count"] is not None:
            assigned[ps_name] = _count(psa, "count", where)
        fl = _get(psa, "flavors", where, dict, {})
        assigned_flavors[ps_name] = fl
    raw = _get(spec, "podSets", "spec", list)
    if not raw:
        raise WorkloadError("spec.podSets: at least one PodSet is required")
    podsets: list[PodSetSpec] = []
    templates: dict[str, PodSetTemplate] = {}
    anns: dict[str, dict[str, str]] = {}
    names: list[str] = []
    empty: list[str] = []
    for i, ps in enumerate(raw):
        where = f"spec.podSets[{i}]"
        ps_name = _get(ps, "name", where, str)
        count = _count(ps, "count", where, 1)
        count = assigned.get(ps_name, count)
        template = _get(ps, "template", where)
        tmeta = _get(template, "metadata", f"{where}.template", dict, {})
        tspec = _get(template, "spec", f"{where}.template")
        annotations = {str(k): str(v) for k, v in _get(tmeta, "annotations", f"{where}.template.metadata", dict, {}).items()}
        labels = {str(k): str(v) for k, v in _get(tmeta, "labels", f"{where}.template.metadata", dict, {}).items()}
        selector = {str(k): str(v) for k, v in _get(tspec, "nodeSelector", f"{where}.template.spec", dict, {}).items()}
        accelerator = accelerators[ps_name] = _accelerator(tspec, f"{where}.template.spec", gpu_resource)
        per_pod = _pod_resources(tspec, f"{where}.template.spec", accelerator)
        if accelerator in assigned_flavors.get(ps_name, {}):  # the flavor Kueue chose for the PodSet's accelerator
            flavors[ps_name] = str(assigned_flavors[ps_name][accelerator])
        elif fl := assigned_flavors.get(ps_name, {}):  # no accelerator flavor: the one of its other resources (cpu first)
            others[ps_name] = str(fl.get("cpu") or fl[sorted(fl)[0]])
        tolerations = _tolerations(tspec, f"{where}.template.spec")
        constraint = _node_constraint(tspec, f"{where}.template.spec")
        if count == 0:
            empty.append(ps_name)
        else:
            podsets.append(podset_spec(ps_name, count, per_pod, annotations, tolerations=tuple(tolerations), node_constraint=constraint))
        templates[ps_name] = PodSetTemplate(labels, annotations, selector)
        anns[ps_name] = annotations
        names.append(ps_name)
    if len(set(names)) != len(names):
        raise WorkloadError(f"spec.podSets: names must be unique, got {names}")
    profile = _one_of({n: a.get(ANN_PROFILE) for n, a in anns.items()}, ANN_PROFILE, "spec.podSets[*].template.metadata.annotations")
    wclass = _one_of({n: a.get(ANN_CLASS) for n, a in anns.items()}, ANN_CLASS, "spec.podSets[*].template.metadata.annotations")
    return WorkloadView(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        queue_name=str(spec.get("queueName", "")),
        cluster_queue=admission.get("clusterQueue"),
        podsets=tuple(podsets),
        templates=templates,
        profile=profile,
        workload_class=wclass,
        links=_links(anns, names),
        flavors=flavors,
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        empty_podsets=tuple(empty),
        other_flavors=others,
        accelerators=accelerators,
    )


def as_workload(obj: dict[str, Any]) -> dict[str, Any]:
    """A Job or JobSet rewritten as the Workload Kueue would create for it."""
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    queue = labels.get(vocabulary.KUEUE_QUEUE_NAME, "")
    spec = _get(obj, "spec", kind or "object")
    if kind == "Job":
        count = _count(spec, "parallelism", "spec", 1)
        podsets = [{"name": "main", "count": count, "template": _get(spec, "template", "spec")}]
    elif kind == "JobSet":
        podsets = []
        for i, rj in enumerate(_get(spec, "replicatedJobs", "spec", list)):
            where = f"spec.replicatedJobs[{i}]"
            job = _get(_get(rj, "template", where), "spec", f"{where}.template")
            count = _count(rj, "replicas", where, 1) * _count(job, "parallelism", f"{where}.template.spec", 1)
            if count > MAX_COUNT:
                raise WorkloadError(f"{where}: replicas × parallelism = {count} exceeds the limit of {MAX_COUNT} pods")
            podsets.append({"name": _get(rj, "name", where, str), "count": count, "template": _get(job, "template", f"{where}.template.spec")})
    else:
        raise WorkloadError(f"kind: {kind!r} is not supported (Workload, Job, JobSet)")
    return {"metadata": meta, "spec": {"queueName": queue, "podSets": podsets}}


def parse_object(obj: Any, *, gpu_resource: str | tuple[str, ...] = "nvidia.com/gpu") -> WorkloadView:
    """A Workload, Job or JobSet manifest."""
    if not isinstance(obj, dict):
        raise WorkloadError("expected a Kubernetes object (a mapping with kind)")
    if obj.get("kind") in ("Job", "JobSet"):
        obj = as_workload(obj)
    elif obj.get("kind") not in ("Workload", None):
        raise WorkloadError(f"kind: {obj.get('kind')!r} is not supported (Workload, Job, JobSet)")
    return parse_workload(obj, gpu_resource=gpu_resource)


def load_workload_file(path: str | Path, *, gpu_resource: str | tuple[str, ...] = "nvidia.com/gpu") -> WorkloadView:
    path = Path(path)
    obj = read_yaml_file(path, WorkloadError)
    try:
        return parse_object(obj, gpu_resource=gpu_resource)
    except WorkloadError as exc:
        raise WorkloadError(f"{path}: {exc}") from None

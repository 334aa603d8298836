"""Which planned slot a pod takes, and the JSON patch that pins it there. Pure: no API calls.

A PodSet's planned nodes (``atoll.dev/planned-nodes``, ``node=pods,…`` in topology-path order)
expand into slots in that order: ``a=2,b=1`` is slots ``[a, a, b]``. A pod with a rank (its index
label) takes slot ``rank``; any other pod, or a ranked pod whose slot is held, takes the first free
slot. Ranks follow Kueue's TAS ungater (pkg/controller/tas/topology_ungater.go,
``readRanksForLabels``): the completion index of a Job, JobSet's ``job-index × (pods per Job) +
completion index``, LeaderWorkerSet's worker index, each minus Kueue's
``kueue.x-k8s.io/pod-index-offset`` (set on LWS workers when the leader is a PodSet of its own).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from admission import vocabulary
from admission.controller import ANN_DECISION_ID, ANN_ENFORCEMENT, ANN_PLANNED_NODES, decode_planned
from admission.kube import Obj
from topology import HOSTNAME_LABEL, Toleration

__all__ = [
    "ANN_NODE",
    "ANN_PREVIOUS",
    "ANN_REPLACED",
    "ANN_SLOT",
    "ANN_WORKLOAD",
    "LABEL_DECISION_ID",
    "LABEL_PODSET",
    "ExactPod",
    "PinError",
    "choose_slot",
    "is_live",
    "pin_patch",
    "pod_rank",
    "read_exact_pod",
    "slot_of",
    "taken_slots",
]

LABEL_DECISION_ID = ANN_DECISION_ID
"""Pod label (and annotation) with the decision id; the webhook's objectSelector."""
LABEL_PODSET = vocabulary.KUEUE_PODSET
ANN_SLOT = vocabulary.SLOT
ANN_NODE = vocabulary.NODE
ANN_PREVIOUS = vocabulary.PREVIOUS_POD
ANN_REPLACED = vocabulary.REPLACED_NODE
ANN_WORKLOAD = vocabulary.KUEUE_WORKLOAD

_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_JOBSET_INDEX = "jobset.sigs.k8s.io/job-index"
_JOBSET_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
_LWS_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


class PinError(ValueError):
    """A pod asks for exact placement but its annotations cannot be read; the message names the key."""


@dataclass(frozen=True, slots=True)
class ExactPod:
    """A pod under exact enforcement, as the webhook reads it at CREATE."""

    namespace: str
    name: str
    decision_id: str
    podset: str
    slots: tuple[str, ...]
    """Planned node of each slot, in planned order."""
    rank: int | None
    tolerations: tuple[Toleration, ...]
    node_selector: tuple[tuple[str, str], ...]
    """The pod's nodeSelector (Atoll's domain plus the template's), sorted."""
    workload: str = ""

    @property
    def display(self) -> str:
        return f"{self.namespace}/{self.name or '(generated name)'}"


def _meta(pod: Obj) -> tuple[dict[str, str], dict[str, str]]:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    ann = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    return {str(k): str(v) for k, v in labels.items()}, {str(k): str(v) for k, v in ann.items()}


def read_exact_pod(pod: Obj, namespace: str = "") -> ExactPod | None:
    """The pod's exact-placement request; None when it has none (no decision label or enforcement
    is not ``exact``). ``PinError`` when it asks for it with unreadable planned nodes."""
    labels, ann = _meta(pod)
    decision = labels.get(LABEL_DECISION_ID) or ann.get(ANN_DECISION_ID)
    if not decision or ann.get(ANN_ENFORCEMENT) != "exact":
        return None
    if not _LABEL_VALUE.fullmatch(decision):  # it selects the decision's pods: only a label value can
        raise PinError(f"metadata.labels[{LABEL_DECISION_ID}]: {decision[:80]!r} is not a label value (the decision's pods are selected by it)")
    raw = ann.get(ANN_PLANNED_NODES)
    if raw is None:
        raise PinError(f"metadata.annotations[{ANN_PLANNED_NODES}]: missing (the decision recorded no planned nodes)")
    try:
        planned = decode_planned(raw)
    except ValueError as exc:
        raise PinError(f"metadata.annotations: {exc}") from None
    slots = tuple(node for node, count in planned.items() for _ in range(count))
    if not slots:
        raise PinError(f"metadata.annotations[{ANN_PLANNED_NODES}]: names no node")
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else {}
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    return ExactPod(
        namespace=str(meta.get("namespace") or namespace), name=str(meta.get("name") or ""), decision_id=decision,
        podset=labels.get(LABEL_PODSET, ""), slots=slots, rank=pod_rank(labels, ann, len(slots)),
        tolerations=_tolerations(spec.get("tolerations")),
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())), workload=ann.get(ANN_WORKLOAD, ""))


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    """The pod's tolerations; entries the apiserver would refuse anyway are skipped, not fatal."""
    out = []
    for t in raw if isinstance(raw, list) else []:
        if isinstance(t, dict):
            out.append(Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""),
                                  str(t.get("effect") or "")))
    return tuple(out)


def _index(values: Mapping[str, str], *keys: str) -> int | None:
    for key in keys:
        text = values.get(key)
        if text is not None:
            return int(text) if text.isascii() and text.isdigit() and len(text) < 8 else None
    return None


def pod_rank(labels: Mapping[str, str], annotations: Mapping[str, str], slots: int) -> int | None:
    """The pod's rank among its PodSet's ``slots`` pods; None when it has none or it is out of range
    (then the pod takes the next free slot, as Kueue's ungater falls back to greedy)."""
    both = {**annotations, **labels}
    offset = _index(annotations, vocabulary.KUEUE_POD_INDEX_OFFSET) or 0
    completion = _index(both, _COMPLETION_INDEX)
    job = _index(both, _JOBSET_INDEX)
    rank: int | None
    if job is not None and completion is not None:
        replicas = _index(both, _JOBSET_REPLICAS)
        if not replicas or slots % replicas:
            return None
        per_job = slots // replicas
        rank = job * per_job + completion if completion < per_job else None
    elif completion is not None:
        rank = completion
    else:
        rank = _index(both, _LWS_INDEX)
    if rank is None:
        return None
    rank -= offset
    return rank if 0 <= rank < slots else None


def is_live(pod: Obj) -> bool:
    """Holds or will hold its node: not being deleted and not finished."""
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return not meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def slot_of(pod: Obj, slots: int) -> int | None:
    """The slot the webhook gave this pod (its ``atoll.dev/slot``), None when it has none."""
    _, ann = _meta(pod)
    k = _index(ann, ANN_SLOT)
    return k if k is not None and k < slots else None


def taken_slots(slots: tuple[str, ...], live: Iterable[Obj]) -> set[int]:
    """Slots held by live pods: their ``atoll.dev/slot``; a live pod without one (created while no
    webhook answered) holds the first free slot planned on its node, if it is bound."""
    taken: set[int] = set()
    unslotted: list[str] = []
    for pod in live:
        k = slot_of(pod, len(slots))
        if k is not None:
            taken.add(k)
        elif (node := (pod.get("spec") or {}).get("nodeName")):
            unslotted.append(str(node))
    for node in sorted(unslotted):
        free = next((k for k, n in enumerate(slots) if n == node and k not in taken), None)
        if free is not None:
            taken.add(free)
    return taken


def choose_slot(pod: ExactPod, taken: set[int]) -> tuple[int | None, str]:
    """The slot for ``pod`` and how it was chosen: its rank if that slot is free, else the first
    free slot in planned order; None when every slot is held."""
    if pod.rank is not None and pod.rank not in taken:
        return pod.rank, f"rank {pod.rank}"
    free = next((k for k in range(len(pod.slots)) if k not in taken), None)
    if free is None:
        return None, f"all {len(pod.slots)} planned slots are held by live pods"
    why = f"rank {pod.rank} is held, next free slot" if pod.rank is not None else "next free slot"
    return free, why


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def pin_patch(pod: Obj, node: str, annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSON patch (RFC 6902) that adds a required node affinity ``kubernetes.io/hostname In [node]``
    to every existing required term (terms are ORed, expressions ANDed, so each must carry it)
    and the given annotations."""
    expr = {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity")
    ops: list[dict[str, Any]] = []
    if not isinstance(affinity, dict):
        ops.append({"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}})
    elif not isinstance(affinity.get("nodeAffinity"), dict):
        ops.append({"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {"requiredDuringSchedulingIgnoredDuringExecution": required}})
    else:
        base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
        req = affinity["nodeAffinity"].get("requiredDuringSchedulingIgnoredDuringExecution")
        terms = req.get("nodeSelectorTerms") if isinstance(req, dict) else None
        if not isinstance(terms, list) or not terms:
            ops.append({"op": "add", "path": base, "value": required})
        else:
            for i, term in enumerate(terms):
                if isinstance(term, dict) and isinstance(term.get("matchExpressions"), list):
                    ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchExpressions/-", "value": expr})
                else:
                    ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchExpressions", "value": [expr]})
    meta = pod.get("metadata") or {}
    if not isinstance(meta.get("annotations"), dict):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": dict(annotations)})
    else:
        ops.extend({"op": "add", "path": f"/metadata/annotations/{_pointer(k)}", "value": v} for k, v in annotations.items())
    return ops

"""Kueue's TAS pod-template annotations, read into what Atoll's engine asks for.

A team moving from Kueue TAS keeps its manifests, so every ``kueue.x-k8s.io/podset-*``
annotation is either honoured or named in a message, never dropped in silence. The rules for
what is valid are Kueue's (``pkg/controller/jobframework/tas_validation.go``, v1beta2): at
most one of required / preferred / unconstrained; the slice topology and the slice size go
together; the multi-layer constraints (1-3 layers) exclude both; a group name needs a required
or preferred level and no slices; a group is exactly 2 PodSets, one of them with 1 pod, asking
for the same level.

Pure: annotations in, ``TopologyHints`` out; ``errors`` make the Workload invalid (Rejected,
as Kueue's own webhook would refuse it), ``notes`` are read but not honoured (the decision
record and an Event carry them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from topology import MAX_SLICE_LAYERS, SliceLayer, describe_validation_error

__all__ = [
    "BALANCED_PLACEMENT",
    "GROUP_NAME",
    "KUEUE_PODSET_PREFIX",
    "PREFERRED_TOPOLOGY",
    "REQUIRED_TOPOLOGY",
    "SLICE_CONSTRAINTS",
    "SLICE_REQUIRED_TOPOLOGY",
    "SLICE_SIZE",
    "TOPOLOGY_SPREADING",
    "UNCONSTRAINED_TOPOLOGY",
    "TopologyHints",
    "annotation_notes",
    "group_problems",
    "is_spreading_json",
    "read_topology_annotations",
]

KUEUE_PODSET_PREFIX = "kueue.x-k8s.io/podset-"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
TOPOLOGY_SPREADING = "kueue.x-k8s.io/podset-topology-spreading"
BALANCED_PLACEMENT = "atoll.dev/balanced-placement"
"""Atoll's own: ``"true"`` spreads a gang that must span islands evenly over them."""

_UNDERSTOOD = frozenset({REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY, SLICE_SIZE,
                         SLICE_CONSTRAINTS, GROUP_NAME})
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT32_MAX = 2**31 - 1


class _Constraint(BaseModel):
    """One entry of ``podset-slice-required-topology-constraints`` (Kueue's
    ``PodsetSliceRequiredTopologyConstraint``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    topology: str = Field(min_length=1, max_length=63)
    size: int = Field(ge=1, le=_INT32_MAX)


_CONSTRAINTS = TypeAdapter(list[_Constraint])


@dataclass(frozen=True, slots=True)
class TopologyHints:
    """What one PodSet's annotations ask of the engine."""

    required_topology: str | None = None
    preferred_topology: str | None = None
    unconstrained: bool = False
    slices: tuple[SliceLayer, ...] = ()
    group: str | None = None
    balanced: bool = False
    errors: tuple[str, ...] = ()
    """Annotations that make the Workload invalid; each names the annotation."""
    notes: tuple[str, ...] = ()
    """Annotations read but not honoured; each names the annotation."""


_NOTE = re.compile(r"podSets\[[^\]]*\] annotation\[" + re.escape(KUEUE_PODSET_PREFIX))


def annotation_notes(notes: Iterable[str]) -> list[str]:
    """The notes among ``notes`` (a decision's, mixed with others) that name a Kueue pod-template
    annotation read but not honoured (``TopologyHints.notes``): the controller raises an Event for them."""
    return [n for n in notes if _NOTE.match(n)]


def is_spreading_json(text: str) -> bool:
    """Is ``text`` a KEP-13746 spreading annotation (a JSON object with ``rules``) the controller
    honours across Workloads (``admission/controller/_spread.py`` reads and checks it)?"""
    try:
        raw = json.loads(text)
    except ValueError:
        return False
    return isinstance(raw, dict) and "rules" in raw


def _parse_bool(text: str) -> bool | None:
    """Go's ``strconv.ParseBool``, which Kueue uses for boolean annotations."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def _parse_int32(text: str) -> int | None:
    """Go's ``strconv.ParseInt(s, 10, 32)``: optional sign, ASCII digits, within int32."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if -(2**31) <= value <= _INT32_MAX else None


def _constraint_layers(text: str, where: str, errors: list[str]) -> tuple[SliceLayer, ...]:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        errors.append(f"{where}[{SLICE_CONSTRAINTS}]: must be a valid JSON array: {exc}")
        return ()
    if not isinstance(raw, list) or not raw or len(raw) > MAX_SLICE_LAYERS:
        count = len(raw) if isinstance(raw, list) else "no list"
        errors.append(f"{where}[{SLICE_CONSTRAINTS}]: topology constraints must contain between 1 and {MAX_SLICE_LAYERS} entries, got {count}")
        return ()
    try:
        entries = _CONSTRAINTS.validate_python(raw)
    except ValidationError as exc:  # the first problem, worded as a profiles document's: "[0].size: expected a number ≥ 1, got 0"
        first = describe_validation_error("", exc, raw).splitlines()[0].removeprefix(": ")
        errors.append(f"{where}[{SLICE_CONSTRAINTS}]{first}")
        return ()
    seen: dict[str, int] = {}
    before = len(errors)
    for i, entry in enumerate(entries):
        if entry.topology in seen:
            errors.append(f"{where}[{SLICE_CONSTRAINTS}][{i}].topology: {entry.topology} is also at index {seen[entry.topology]}")
        seen.setdefault(entry.topology, i)
        if i and entries[i - 1].size % entry.size:
            errors.append(f"{where}[{SLICE_CONSTRAINTS}][{i}].size: {entry.size} must evenly divide the parent layer size {entries[i - 1].size}")
    if len(errors) > before:
        return ()
    return tuple(SliceLayer(e.topology, e.size) for e in entries)


def read_topology_annotations(annotations: Mapping[str, str], *, podset: str, count: int | None = None) -> TopologyHints:
    """Read one PodSet's pod-template annotations. ``count`` (the PodSet's pods) adds Kueue's
    upper bound on the slice size; the multiple-of-slice-size rule is checked where the
    admitted count is final (``decide``)."""
    where = f"podSets[{podset}] annotation"
    errors: list[str] = []
    notes: list[str] = []
    required = annotations.get(REQUIRED_TOPOLOGY)
    preferred = annotations.get(PREFERRED_TOPOLOGY)
    unconstrained_text = annotations.get(UNCONSTRAINED_TOPOLOGY)
    present = [key for key in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY) if key in annotations]
    if len(present) > 1:
        errors.append(f"{where}s: must not contain more than one topology annotation, got {', '.join(present)}")
    for key, value in ((REQUIRED_TOPOLOGY, required), (PREFERRED_TOPOLOGY, preferred), (SLICE_REQUIRED_TOPOLOGY, annotations.get(SLICE_REQUIRED_TOPOLOGY))):
        if value is not None and not value.strip():
            errors.append(f"{where}[{key}]: must name a topology level, got an empty value")
    unconstrained = False
    if unconstrained_text is not None:
        parsed = _parse_bool(unconstrained_text)
        if parsed is None:
            errors.append(f"{where}[{UNCONSTRAINED_TOPOLOGY}]: must be a boolean value, got {unconstrained_text!r}")
        unconstrained = bool(parsed)

    slices: tuple[SliceLayer, ...] = ()
    slice_level = annotations.get(SLICE_REQUIRED_TOPOLOGY)
    size_text = annotations.get(SLICE_SIZE)
    size: int | None = None
    if size_text is not None:
        size = _parse_int32(size_text)
        if size is None:
            errors.append(f"{where}[{SLICE_SIZE}]: must be a numeric value, got {size_text!r}")
        elif size < 1:
            errors.append(f"{where}[{SLICE_SIZE}]: must be greater than or equal to 1, got {size}")
            size = None
        elif count is not None and size > count:
            errors.append(f"{where}[{SLICE_SIZE}]: {size} must not be greater than the PodSet's count {count}")
    if slice_level is not None and size_text is None:
        errors.append(f"{where}[{SLICE_SIZE}]: must be set when {SLICE_REQUIRED_TOPOLOGY} is specified")
    if slice_level is None and size_text is not None:
        errors.append(f"{where}[{SLICE_SIZE}]: may not be set when {SLICE_REQUIRED_TOPOLOGY} is not specified")
    constraints_text = annotations.get(SLICE_CONSTRAINTS)
    if constraints_text is not None:
        for key in (SLICE_REQUIRED_TOPOLOGY, SLICE_SIZE):
            if key in annotations:
                errors.append(f"{where}[{SLICE_CONSTRAINTS}]: may not be set when {key} is specified")
        layers = _constraint_layers(constraints_text, where, errors)
        if layers and count is not None and layers[0].size > count:
            errors.append(f"{where}[{SLICE_CONSTRAINTS}][0].size: {layers[0].size} must not be greater than the PodSet's count {count}")
        slices = layers
    elif slice_level and size is not None:
        slices = (SliceLayer(slice_level, size),)

    group = annotations.get(GROUP_NAME)
    if group is not None:
        if _parse_uint(group):
            errors.append(f"{where}[{GROUP_NAME}]: must not be a number, got {group!r}")
        for key in (SLICE_SIZE, SLICE_REQUIRED_TOPOLOGY, SLICE_CONSTRAINTS):
            if key in annotations:
                errors.append(f"{where}[{GROUP_NAME}]: may not be set when {key} is specified")
        if required is None and preferred is None:
            errors.append(f"{where}[{GROUP_NAME}]: may not be set when neither {PREFERRED_TOPOLOGY} nor {REQUIRED_TOPOLOGY} is specified")

    balanced = False
    balanced_text = annotations.get(BALANCED_PLACEMENT)
    if balanced_text is not None:
        parsed = _parse_bool(balanced_text)
        if parsed is None:
            errors.append(f"{where}[{BALANCED_PLACEMENT}]: must be a boolean value, got {balanced_text!r}")
        balanced = bool(parsed)

    if TOPOLOGY_SPREADING in annotations and not is_spreading_json(annotations[TOPOLOGY_SPREADING]):
        notes.append(f"{where}[{TOPOLOGY_SPREADING}]: not honoured: not a KEP-13746 JSON object with \"rules\"; Atoll spreads "
                     "separate Workloads of a service by that JSON or by the atoll.dev/spread-group label")
    for key in sorted(annotations):
        if key.startswith(KUEUE_PODSET_PREFIX) and key not in _UNDERSTOOD and key != TOPOLOGY_SPREADING:
            notes.append(f"{where}[{key}]: not a topology annotation Atoll knows; ignored")
    if unconstrained and slices:
        notes.append(f"{where}[{UNCONSTRAINED_TOPOLOGY}]: slices are placed anywhere, least free capacity first")
    return TopologyHints(
        required_topology=required if required else None,
        preferred_topology=preferred if preferred else None,
        unconstrained=unconstrained and not required and not preferred,
        slices=slices,
        group=group if group is not None and not errors else None,
        balanced=balanced,
        errors=tuple(errors),
        notes=tuple(notes),
    )


def _parse_uint(text: str) -> bool:
    """True when Go's ``strconv.ParseUint(s, 10, 64)`` accepts ``text`` (a group name may not be a number)."""
    return text.isascii() and text.isdigit() and int(text) < 2**64


@dataclass(frozen=True, slots=True)
class _Member:
    name: str
    count: int
    required: str | None
    preferred: str | None


def group_problems(podsets: Sequence[tuple[str, int, TopologyHints]]) -> list[str]:
    """Kueue's rules across PodSets for ``podset-group-name``: exactly 2 PodSets per group, at
    least one of them with 1 pod, both asking for the same required or preferred level."""
    groups: dict[str, list[_Member]] = {}
    for name, count, hints in podsets:
        if hints.group is not None:
            groups.setdefault(hints.group, []).append(_Member(name, count, hints.required_topology, hints.preferred_topology))
    out: list[str] = []
    for group, members in groups.items():
        names = ", ".join(m.name for m in members)
        if len(members) != 2:
            out.append(f"podSets[{names}] annotation [{GROUP_NAME}]={group!r}: can only define groups of exactly 2 PodSets, got {len(members)}")
            continue
        a, b = members
        if a.count != 1 and b.count != 1:
            out.append(f"podSets[{names}] annotation [{GROUP_NAME}]={group!r}: at least one PodSet of a group must have 1 pod, "
                       f"got {a.count} and {b.count}")
        if (a.required, a.preferred) != (b.required, b.preferred):
            out.append(f"podSets[{names}] annotation [{GROUP_NAME}]={group!r}: both PodSets must ask for the same "
                       f"{REQUIRED_TOPOLOGY} or {PREFERRED_TOPOLOGY}")
    return out

"""Which nodes a PodSet's own pod template allows: its nodeSelector and required node affinity.

The rules are Kubernetes' (``k8s.io/component-helpers/scheduling/corev1/nodeaffinity``): every
nodeSelector pair must match; of ``requiredDuringSchedulingIgnoredDuringExecution`` the
nodeSelectorTerms are ORed, the requirements inside one term ANDed, and an empty term matches
no node. Each PodSet carries its own constraint, so two PodSets of one Workload bound to two
pools each see only their pool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["NODE_OPERATORS", "NodeConstraint", "NodeRequirement", "parse_label_int"]

NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
"""The operators of a nodeSelectorRequirement, as the Kubernetes API defines them."""

_INT = re.compile(r"[+-]?[0-9]+")


def parse_label_int(text: str) -> int | None:
    """An integer the way Kubernetes reads Gt/Lt operands (``strconv.ParseInt(v, 10, 64)``):
    ASCII digits with an optional sign, within int64; None otherwise."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One matchExpressions (``key`` is a label) or matchFields (``field`` is true, key ``metadata.name``) entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        value = name if self.field else labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        if value is None:
            return False
        have, bound = parse_label_int(value), parse_label_int(self.values[0]) if self.values else None
        if have is None or bound is None:
            return False
        return have > bound if self.operator == "Gt" else have < bound


@dataclass(frozen=True, slots=True)
class NodeConstraint:
    """A pod template's node restrictions: ``selector`` pairs (all must match) and the required
    affinity's ``terms`` (any one must match; None when the template sets no required affinity)."""

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[tuple[NodeRequirement, ...], ...] | None = None

    def __post_init__(self) -> None:
        for term in self.terms or ():
            for req in term:
                if req.operator not in NODE_OPERATORS:
                    raise ValueError(f"node affinity operator {req.operator!r} is not one of {', '.join(NODE_OPERATORS)}")

    @property
    def empty(self) -> bool:
        """True when the constraint allows every node."""
        return not self.selector and self.terms is None

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.selector):
            return False
        if self.terms is None:
            return True
        return any(term and all(req.matches(name, labels) for req in term) for term in self.terms)

    def describe(self) -> str:
        """Short text for messages: what the template asks of nodes."""
        parts = [f"{k}={v}" for k, v in self.selector]
        if self.terms is not None:
            parts.append(f"required node affinity ({len(self.terms)} term{'s' if len(self.terms) != 1 else ''})")
        return ", ".join(parts) or "any node"

"""``atoll baseline kueue-bestfit SCENARIO.yaml``: what Kueue's own TAS would assign.

A scenario is one flavor's nodes and one PodSet request; the answer is the ``topologyAssignment``
Kueue would write, or Kueue's not-fit message. It lets a user check the simulator's baseline
against a real Kueue on the same nodes. Exit code: 0 fits, 1 does not fit, 2 bad scenario.

Quantities follow Kubernetes ("8", "500m", "16Gi"): ``cpu`` is counted in milli-cores, every
other resource in its base unit (bytes for memory, plain counts for GPUs and ``pods``). A node
without ``pods`` in its allocatable gets the kubelet's default of 110. Amounts are bounded as the
controller bounds them: a million cores, 1 PiB of ``memory``, ``ephemeral-storage`` or
``hugepages-*``, a million ``pods``, 4096 of any other resource (GPUs and other devices); anything
above is a typo that would otherwise overflow the placement's int64 arrays.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)

from admission.cli._args import Parser
from topology import (
    CPU,
    GPU,
    HOSTNAME_LABEL,
    LIMITS,
    MAX_COUNT,
    MEMORY,
    PODS,
    KueueNode,
    Mode,
    Taint,
    Toleration,
    build_kueue_leaves,
    kueue_place,
    load_yaml_model,
    parse_amount,
    parse_cpu_milli,
)

__all__ = ["ScenarioError", "load_scenario", "main", "run_kueue_bestfit_scenario"]

BASELINES = ("kueue-bestfit",)
DEFAULT_MAX_PODS = 110
"""The kubelet's default ``--max-pods``: what a real node reports as ``pods`` allocatable."""


class ScenarioError(ValueError):
    """A scenario file is unreadable or invalid; the message names the file and the field."""


def _quantity(value: float | str) -> float | str:
    """Check the form and the sign only; the unit depends on the resource name, applied later."""
    try:
        parse_cpu_milli(value, "")
    except ValueError as exc:  # the error's location already names the resource
        raise ValueError(str(exc).removeprefix(": ")) from None
    return value


Quantity = Annotated[StrictInt | float | str, AfterValidator(_quantity)]
"""A Kubernetes quantity as written; whole numbers stay ints so large byte counts stay exact."""


def _limit(resource: str) -> tuple[int, str]:
    """The controller's bound of a resource, in its base units."""
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return LIMITS[MEMORY] * 2**20, " bytes"
    return (LIMITS[PODS], " pods") if resource == "pods" else (LIMITS[GPU], "")


def _base_units(resource: str, value: float | str) -> int:
    """Kubernetes' integer view of a quantity: milli-cores for cpu, else the value rounded up
    ("0.1Gi" is 107374182.4 bytes); bounded as in :func:`_limit`."""
    if resource == "cpu":
        return parse_cpu_milli(value, resource, LIMITS[CPU])
    return math.ceil(parse_amount(value, resource, *_limit(resource)))


def _bounded(amounts: dict[str, float | str]) -> dict[str, float | str]:
    for resource, value in amounts.items():
        _base_units(resource, value)  # the error names the resource; the map's own key names where
    return amounts


Amounts = Annotated[dict[str, Quantity], AfterValidator(_bounded)]
"""Resource name → quantity, each within the controller's limits."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaintSpec(_Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class TolerationSpec(_Strict):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""


class NodeSpec(_Strict):
    name: str = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    allocatable: Amounts
    usage: Amounts = Field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False
    taints: list[TaintSpec] = Field(default_factory=list)


class RequestSpec(_Strict):
    count: int = Field(ge=1, le=MAX_COUNT)
    per_pod: Amounts
    required_level: str | None = None
    preferred_level: str | None = None
    unconstrained: bool = False
    slice_level: str | None = None
    slice_size: int | None = Field(default=None, ge=1, le=MAX_COUNT)

    @model_validator(mode="after")
    def _one_mode(self) -> RequestSpec:
        given = [self.required_level is not None, self.preferred_level is not None, self.unconstrained]
        if sum(given) != 1:
            raise ValueError("set exactly one of required_level, preferred_level, unconstrained")
        if (self.slice_level is None) != (self.slice_size is None):
            raise ValueError("slice_level and slice_size go together (podset-slice-required-topology and podset-slice-size)")
        if self.slice_size is not None and self.count % self.slice_size:
            raise ValueError(f"count {self.count} is not a multiple of slice_size {self.slice_size}")
        return self


class Scenario(_Strict):
    topology_name: str = Field(min_length=1)
    levels: list[str] = Field(min_length=1)
    node_labels: dict[str, str] = Field(default_factory=dict)
    tolerations: list[TolerationSpec] = Field(default_factory=list)
    nodes: list[NodeSpec]
    request: RequestSpec

    @field_validator("levels")
    @classmethod
    def _levels(cls, levels: list[str]) -> list[str]:
        if len(set(levels)) != len(levels):
            raise ValueError(f"level labels must be unique, got {levels}")
        if HOSTNAME_LABEL in levels[:-1]:
            raise ValueError(f"{HOSTNAME_LABEL} may only be the lowest level")
        return levels

    @field_validator("nodes")
    @classmethod
    def _unique_names(cls, nodes: list[NodeSpec]) -> list[NodeSpec]:
        seen: set[str] = set()
        for node in nodes:
            if node.name in seen:
                raise ValueError(f"node name {node.name!r} is listed twice")
            seen.add(node.name)
        return nodes

    @model_validator(mode="after")
    def _request_levels(self) -> Scenario:
        for key in ("required_level", "preferred_level", "slice_level"):
            value = getattr(self.request, key)
            if value is not None and value not in self.levels:
                raise ValueError(f"request.{key}: {value!r} is not one of levels {self.levels}")
        return self


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario; :class:`ScenarioError` names the file, the field and the fix."""
    return load_yaml_model(path, Scenario, ScenarioError, "topology_name, levels, nodes and request")


def _amounts(values: Mapping[str, float | str]) -> dict[str, int]:
    return {name: _base_units(name, q) for name, q in values.items()}


def run_scenario(scenario: Scenario) -> dict[str, Any]:
    """Kueue's answer for a validated scenario, as the command prints it."""
    nodes = []
    for spec in scenario.nodes:
        alloc = _amounts(spec.allocatable)
        alloc.setdefault("pods", DEFAULT_MAX_PODS)
        nodes.append(KueueNode(spec.name, dict(spec.labels), alloc, _amounts(spec.usage), spec.ready, spec.unschedulable,
                               tuple(Taint(t.key, t.value, t.effect) for t in spec.taints)))
    tolerations = [Toleration(t.key, t.operator, t.value, t.effect) for t in scenario.tolerations]
    leaves = build_kueue_leaves(scenario.levels, nodes, node_labels=scenario.node_labels, tolerations=tolerations)
    req = scenario.request
    mode: Mode = "required" if req.required_level else "preferred" if req.preferred_level else "unconstrained"
    result = kueue_place(leaves, req.count, _amounts(req.per_pod), mode=mode, level=req.required_level or req.preferred_level,
                         topology_name=scenario.topology_name, slice_level=req.slice_level, slice_size=req.slice_size or 1)
    if not result.fits:
        return {"fits": False, "reason": result.reason}
    return {
        "fits": True,
        "assignment": {
            "levels": list(result.assignment_levels),
            "domains": [{"values": list(values), "count": count} for values, count in result.domains],
        },
    }


def run_kueue_bestfit_scenario(path: str | Path) -> dict[str, Any]:
    """Load ``path`` and answer as Kueue's TAS would (raises :class:`ScenarioError` on bad input)."""
    return run_scenario(load_scenario(path))


def _parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="atoll baseline",
        description="Place a scenario's request as a baseline would. Exit code: 0 fits, 1 does not fit, 2 bad input.",
    )
    # Named as the usage line names them, so a bad one reads like a bad flag: "BASELINE: expected one of …, got …"
    p.add_argument("baseline", choices=BASELINES, metavar="BASELINE", help="kueue-bestfit: Kueue's Topology-Aware Scheduling")
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML: topology_name, levels, nodes, request")
    return p


def main(argv: Sequence[str]) -> int:
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exc:  # argparse has printed the usage
        return int(exc.code) if isinstance(exc.code, int) else 2
    try:
        from admission.cli._bundled import bundled_path

        out = run_kueue_bestfit_scenario(bundled_path(args.scenario))
    except ScenarioError as exc:
        print(f"atoll baseline: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0 if out["fits"] else 1

"""The cluster model: topology levels with their links, and nodes.

One model serves every source: a bundled YAML cluster file, live Kubernetes objects, and the
simulator. ``NodeInfo`` is the plain record the snapshot compiles; the pydantic models below
read the YAML cluster files and name the offending field on bad input.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from topology._documents import load_yaml_model
from topology._resources import ResourceVector, check_accelerator_resource

__all__ = [
    "HOSTNAME_LABEL",
    "ClusterModel",
    "ClusterModelError",
    "FlavorModel",
    "Level",
    "NodeInfo",
    "Taint",
    "Toleration",
    "load_cluster_model",
]

HOSTNAME_LABEL = "kubernetes.io/hostname"


class ClusterModelError(ValueError):
    """A cluster model file is malformed; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod or ResourceFlavor toleration, with Kubernetes matching rules."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Level:
    """One topology level (a node-label key) and the link that joins its children.

    ``bandwidth_gbps`` is the per-GPU bandwidth (GB/s) between two GPUs whose lowest common
    domain is at this level; ``latency_us`` the matching one-way latency.
    """

    label: str
    bandwidth_gbps: float = 50.0
    latency_us: float = 5.0


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the engine needs to know of one node. Usage counts every bound or reserved pod."""

    name: str
    labels: dict[str, str]
    allocatable: ResourceVector
    used: ResourceVector = ResourceVector()
    ready: bool = True
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    perf: float = 1.0
    draining: bool = False
    """Draining for maintenance: no new placement lands on it; what runs there stays."""


# ----------------------------------------------------------------------------- YAML model


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


# Kubernetes' label syntax (apimachinery's IsQualifiedName and IsValidLabelValue), ASCII only.
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*", re.ASCII)


def _label_key(key: str) -> str:
    """``key`` if Kubernetes takes it as a label key (``[prefix/]name``), else a ValueError saying what it takes:
    a node the model describes with a label no real node can carry would place onto nothing."""
    prefix, slash, name = key.partition("/")
    if not slash:
        prefix, name = "", key
    if (slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))) or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise ValueError(f"{key!r} is not a Kubernetes label key: [prefix/]name, the name at most 63 letters, digits, '-', '_' "
                         "or '.', starting and ending with a letter or digit, the prefix a DNS subdomain (e.g. nvidia.com/gpu.clique)")
    return key


def _labels(labels: dict[str, str]) -> dict[str, str]:
    """Every key and value of a label map as Kubernetes takes them (``_label_key``; a value: empty, or
    at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)."""
    for key, value in labels.items():
        _label_key(key)
        if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
            raise ValueError(f"{key}: {value!r} is not a Kubernetes label value: empty, or at most 63 letters, digits, '-', '_' "
                             "or '.', starting and ending with a letter or digit")
    return labels


class LevelModel(_Strict):
    label: str = Field(min_length=1)
    bandwidth_gbps: float = Field(default=50.0, gt=0, alias="bandwidthGBps")
    latency_us: float = Field(default=5.0, ge=0, alias="latencyUs")

    _label = field_validator("label")(_label_key)


class GenerateStep(_Strict):
    level: str
    count: int = Field(gt=0)
    prefix: str | None = None


class PerfModel(_Strict):
    """Per-node relative GPU throughput (1.0 = fleet median), drawn deterministically.

    ``tail``: each GPU draws a body ``normal(mean, stddev)``, except a share ``tailShare`` of
    slow outliers whose slowdown is uniform between 1 + (``tailWorst`` − 1)/5 and ``tailWorst``
    (perf = 1/slowdown); a node runs at its slowest GPU (a synchronous job waits for it). The
    shape of Sinha et al., "Not All GPUs Are Created Equal", SC22: a body a few percent wide
    (8 % average variation within one SKU, 22 % at most) and outliers up to 1.5× slower."""

    distribution: Literal["identical", "normal", "uniform", "tail"] = "identical"
    mean: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    stddev: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    low: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    high: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    tail_share: float = Field(default=0.0, ge=0, le=1, alias="tailShare", allow_inf_nan=False)
    tail_worst: float = Field(default=1.5, ge=1, alias="tailWorst", allow_inf_nan=False)
    seed: int = 0


class TaintModel(_Strict):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class NodeModel(_Strict):
    name: str = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    allocatable: dict[str, Any] | None = None
    used: dict[str, Any] = Field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False
    taints: list[TaintModel] = Field(default_factory=list)
    perf: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    draining: bool = False

    _labels = field_validator("labels")(_labels)


class FlavorModel(_Strict):
    """One ResourceFlavor's node pool and the Kueue Topology that describes its fabric."""

    name: str = Field(min_length=1)
    topology: str = Field(min_length=1)
    gpu_resource: str = Field(default="nvidia.com/gpu", alias="gpuResource")
    """The accelerator resource this flavor's nodes offer and its pods request (``amd.com/gpu``, ``habana.ai/gaudi``, …)."""
    gpu_model: str = Field(default="", alias="gpuModel")
    node_labels: dict[str, str] = Field(default_factory=dict, alias="nodeLabels")
    levels: list[LevelModel] = Field(min_length=1)
    node_link: LevelModel | None = Field(default=None, alias="nodeLink")
    node_allocatable: dict[str, Any] = Field(default_factory=dict, alias="nodeAllocatable")
    generate: list[GenerateStep] = Field(default_factory=list)
    perf: PerfModel = PerfModel()
    nodes: list[NodeModel] = Field(default_factory=list)

    _node_labels = field_validator("node_labels")(_labels)

    @field_validator("gpu_resource")
    @classmethod
    def _accelerator_name(cls, value: str) -> str:
        return check_accelerator_resource(value)

    @field_validator("levels")
    @classmethod
    def _levels_unique(cls, levels: list[LevelModel]) -> list[LevelModel]:
        labels = [lv.label for lv in levels]
        if len(set(labels)) != len(labels):
            raise ValueError(f"level labels must be unique, got {labels}")
        if HOSTNAME_LABEL in labels[:-1]:
            raise ValueError(f"{HOSTNAME_LABEL} may only be the lowest level")
        return levels

    @model_validator(mode="after")
    def _generate_matches_levels(self) -> FlavorModel:
        if self.generate:
            steps = [s.level for s in self.generate]
            labels = [lv.label for lv in self.levels]
            expected = labels if labels[-1] == HOSTNAME_LABEL else labels + [HOSTNAME_LABEL]
            if steps != expected:
                raise ValueError(f"generate: steps must name every level top to bottom then the node, {expected}; got {steps}")
            if not self.node_allocatable:
                raise ValueError("nodeAllocatable: required when generate is used")
        if not self.generate and not self.nodes:
            raise ValueError("a flavor needs generate or nodes")
        return self

    def level_specs(self) -> tuple[Level, ...]:
        return tuple(Level(lv.label, lv.bandwidth_gbps, lv.latency_us) for lv in self.levels)

    def node_level(self) -> Level:
        """The link inside one node (used when hostname is not itself a level)."""
        if self.levels[-1].label == HOSTNAME_LABEL:
            lv = self.levels[-1]
        else:
            low = self.levels[-1]
            lv = self.node_link or LevelModel(label=HOSTNAME_LABEL, bandwidthGBps=low.bandwidth_gbps, latencyUs=low.latency_us)
        return Level(HOSTNAME_LABEL, lv.bandwidth_gbps, lv.latency_us)

    def build_nodes(self) -> list[NodeInfo]:
        """Expand ``generate`` and ``nodes`` into node records (deterministic for a seed)."""
        rng = random.Random(self.perf.seed)
        out: list[NodeInfo] = []
        if self.generate:
            alloc = ResourceVector.from_kube(self.node_allocatable, self.gpu_resource, f"flavors.{self.name}.nodeAllocatable")
            out.extend(self._generated(alloc, rng))
        for i, node in enumerate(self.nodes):
            what = f"flavors.{self.name}.nodes[{i}]"
            alloc_map = node.allocatable if node.allocatable is not None else self.node_allocatable
            if not alloc_map:
                raise ClusterModelError(f"{what}.allocatable: required (no nodeAllocatable default)")
            labels = dict(self.node_labels) | dict(node.labels)
            labels.setdefault(HOSTNAME_LABEL, node.name)
            out.append(
                NodeInfo(
                    name=node.name,
                    labels=labels,
                    allocatable=ResourceVector.from_kube(alloc_map, self.gpu_resource, f"{what}.allocatable"),
                    used=ResourceVector.from_kube(node.used, self.gpu_resource, f"{what}.used"),
                    ready=node.ready,
                    unschedulable=node.unschedulable,
                    taints=tuple(Taint(t.key, t.value, t.effect) for t in node.taints),
                    perf=node.perf,
                    draining=node.draining,
                )
            )
        return out

    def _generated(self, alloc: ResourceVector, rng: random.Random) -> list[NodeInfo]:
        nodes: list[NodeInfo] = []
        paths: list[list[str]] = [[]]
        for step in self.generate:
            prefix = step.prefix if step.prefix is not None else step.level.rsplit("/", 1)[-1].split(".")[-1] + "-"
            width = len(str(step.count - 1))
            paths = [p + [f"{(p[-1] + '-') if p else self.name + '-'}{prefix}{i:0{width}d}"] for p in paths for i in range(step.count)]
        for path in paths:
            labels = dict(self.node_labels)
            for step, value in zip(self.generate, path):
                labels[step.level] = value
            nodes.append(NodeInfo(name=path[-1], labels=labels, allocatable=alloc, perf=self._draw_perf(rng, max(alloc.gpu, 1))))
        return nodes

    def _draw_perf(self, rng: random.Random, gpus: int = 1) -> float:
        p = self.perf
        if p.distribution == "tail":
            slowest = math.inf
            for _ in range(gpus):
                if rng.random() < p.tail_share:
                    perf = 1.0 / rng.uniform(1.0 + (p.tail_worst - 1.0) / 5.0, p.tail_worst)
                else:
                    perf = max(0.05, rng.gauss(p.mean, p.stddev))
                slowest = min(slowest, perf)
            return round(slowest, 4)
        if p.distribution == "normal":
            return round(max(0.05, rng.gauss(p.mean, p.stddev)), 4)
        if p.distribution == "uniform":
            return round(rng.uniform(p.low, p.high), 4)
        return 1.0


class ClusterModel(_Strict):
    """A whole cluster: one or more flavors, each with its own fabric."""

    name: str = Field(min_length=1)
    description: str = ""
    profiles: str | None = Field(default=None, min_length=1)
    """The profiles document written for this cluster, relative to this file (commands use it
    when no ``--profiles`` is given)."""
    flavors: list[FlavorModel] = Field(min_length=1)

    @field_validator("flavors")
    @classmethod
    def _flavors_unique(cls, flavors: list[FlavorModel]) -> list[FlavorModel]:
        names = [f.name for f in flavors]
        if len(set(names)) != len(names):
            raise ValueError(f"flavor names must be unique, got {names}")
        return flavors

    def flavor(self, name: str | None = None) -> FlavorModel:
        if name is None:
            return self.flavors[0]
        for f in self.flavors:
            if f.name == name:
                return f
        raise ClusterModelError(f"cluster {self.name!r} has no flavor {name!r}; flavors: {[f.name for f in self.flavors]}")


def load_cluster_model(path: str | Path) -> ClusterModel:
    """Read a cluster model YAML file; errors name the file and the field."""
    path = Path(path)
    model = load_yaml_model(path, ClusterModel, ClusterModelError, "name and flavors")
    for flavor in model.flavors:
        try:
            flavor.build_nodes()
        except ValueError as exc:
            raise ClusterModelError(f"{path}: {exc}") from exc
    return model



"""Atoll's placement engine: the cluster model, snapshots and the contiguous-block finder.

No Kubernetes API I/O happens here; ``admission`` feeds it plain records.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from topology._affinity import NODE_OPERATORS, NodeConstraint, NodeRequirement, parse_label_int
from topology._collectives import CONSTANTS as COLLECTIVE_CONSTANTS
from topology._collectives import ETA_RING_NET, ETA_RING_NVL, MAX_CHANNELS, Collective, Island, allreduce, calibration_table
from topology._fabric import bottleneck_bandwidth, fabric_graph, fabric_path
from topology._finder import Backend, PlacementError, find_placement, never_fits
from topology._fragmentation import fragmentation_index, island_free_gpus
from topology._link_cost import (
    DEFAULT_COMM_FRACTION,
    LINK_MODELS,
    CommJob,
    CostModel,
    GangShape,
    default_comm_fraction,
    default_model_gb,
    ring_allreduce_s,
    slowdown_from_ratio,
    step_slowdown,
)
from topology._model import (
    HOSTNAME_LABEL,
    ClusterModel,
    ClusterModelError,
    FlavorModel,
    Level,
    NodeInfo,
    NodeModel,
    Taint,
    TaintModel,
    Toleration,
    load_cluster_model,
)
from topology._placement import DomainVerdict, LinkPlacement, Placement, PodSetPlacement, SlicePlacement
from topology._request import DEFAULT_PERF_BAND, MAX_SLICE_LAYERS, PERF_RANKS, GraphLink, PlacementRequest, PodSetRequest, SliceLayer, Spread
from topology._resources import (
    CPU,
    GPU,
    LIMITS,
    MAX_COUNT,
    MEMORY,
    PODS,
    RESOURCE_NAMES,
    ResourceVector,
    check_accelerator_resource,
    parse_amount,
    parse_cpu_milli,
)
from topology._snapshot import Snapshot, node_is_healthy, untolerated_taints

if TYPE_CHECKING:
    from topology._documents import describe_validation_error, describe_yaml_error, load_yaml_model, read_yaml_file, read_yaml_text
    from topology._kueue_tas import KueueNode, Mode, build_kueue_leaves, kueue_leaves_from_snapshot, kueue_place

__all__ = [
    "COLLECTIVE_CONSTANTS",
    "CPU",
    "DEFAULT_COMM_FRACTION",
    "DEFAULT_PERF_BAND",
    "ETA_RING_NET",
    "ETA_RING_NVL",
    "GPU",
    "HOSTNAME_LABEL",
    "LIMITS",
    "LINK_MODELS",
    "MAX_CHANNELS",
    "MAX_COUNT",
    "MAX_SLICE_LAYERS",
    "MEMORY",
    "NODE_OPERATORS",
    "PERF_RANKS",
    "PODS",
    "RESOURCE_NAMES",
    "Backend",
    "ClusterModel",
    "ClusterModelError",
    "Collective",
    "CommJob",
    "CostModel",
    "DomainVerdict",
    "FlavorModel",
    "GangShape",
    "GraphLink",
    "Island",
    "KueueNode",
    "Level",
    "LinkPlacement",
    "Mode",
    "NodeConstraint",
    "NodeInfo",
    "NodeModel",
    "NodeRequirement",
    "Placement",
    "PlacementError",
    "PlacementRequest",
    "PodSetPlacement",
    "PodSetRequest",
    "ResourceVector",
    "SliceLayer",
    "SlicePlacement",
    "Snapshot",
    "Spread",
    "Taint",
    "TaintModel",
    "Toleration",
    "allreduce",
    "bottleneck_bandwidth",
    "build_kueue_leaves",
    "calibration_table",
    "check_accelerator_resource",
    "default_comm_fraction",
    "default_model_gb",
    "describe_validation_error",
    "describe_yaml_error",
    "fabric_graph",
    "fabric_path",
    "find_placement",
    "fragmentation_index",
    "island_free_gpus",
    "kueue_leaves_from_snapshot",
    "kueue_place",
    "load_cluster_model",
    "load_yaml_model",
    "never_fits",
    "node_is_healthy",
    "parse_amount",
    "parse_cpu_milli",
    "parse_label_int",
    "read_yaml_file",
    "read_yaml_text",
    "ring_allreduce_s",
    "slowdown_from_ratio",
    "step_slowdown",
    "untolerated_taints",
]

_LAZY = {"KueueNode": "_kueue_tas", "Mode": "_kueue_tas", "build_kueue_leaves": "_kueue_tas", "describe_validation_error": "_documents", "describe_yaml_error": "_documents", "kueue_leaves_from_snapshot": "_kueue_tas", "kueue_place": "_kueue_tas", "load_yaml_model": "_documents", "read_yaml_file": "_documents", "read_yaml_text": "_documents"}
"""Names whose modules ``import topology`` does not load, imported on first use."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

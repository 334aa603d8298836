"""Atoll's placement engine: the cluster model, snapshots and the contiguous-block finder.

No Kubernetes API I/O happens here; ``admission`` feeds it plain records.
"""

from topology._affinity import NODE_OPERATORS, NodeConstraint, NodeRequirement, parse_label_int
from topology._fabric import bottleneck_bandwidth, fabric_graph, fabric_path
from topology._finder import Backend, PlacementError, find_placement, never_fits
from topology._fragmentation import fragmentation_index, island_free_gpus
from topology._model import (
    HOSTNAME_LABEL,
    ClusterModel,
    ClusterModelError,
    FlavorModel,
    Level,
    NodeInfo,
    Taint,
    Toleration,
    load_cluster_model,
)
from topology._placement import DomainVerdict, Placement, PodSetPlacement, SlicePlacement
from topology._request import MAX_SLICE_LAYERS, GraphLink, PlacementRequest, PodSetRequest, SliceLayer, Spread
from topology._resources import ResourceVector
from topology._snapshot import Snapshot, node_is_healthy, untolerated_taints

__all__ = [
    "HOSTNAME_LABEL",
    "MAX_SLICE_LAYERS",
    "NODE_OPERATORS",
    "Backend",
    "ClusterModel",
    "ClusterModelError",
    "DomainVerdict",
    "FlavorModel",
    "GraphLink",
    "Level",
    "NodeConstraint",
    "NodeInfo",
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
    "Toleration",
    "bottleneck_bandwidth",
    "fabric_graph",
    "fabric_path",
    "find_placement",
    "fragmentation_index",
    "island_free_gpus",
    "load_cluster_model",
    "never_fits",
    "node_is_healthy",
    "parse_label_int",
    "untolerated_taints",
]

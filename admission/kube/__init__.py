"""The narrow port between Atoll and a cluster, and everything that speaks to a real one.

``ClusterPort`` is what the controller needs (list, watch, get, create, patch, apply); the
real adapter ``KubePort`` is the one place that imports the ``kubernetes`` client, and it is
loaded only when asked for (the client costs about 0.4 s to import, which ``atoll place`` and
``atoll simulate`` need not pay). ``parse_label_selector`` reads label selectors as the
apiserver does (for ports that answer ``list`` in memory); ``errors`` maps API failures to
Atoll's own; ``LeaderElector`` holds a Lease. The test control plane is test infrastructure, in
the repository's ``tests/envtest``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from admission.kube import errors
from admission.kube._port import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    CONFIGMAPS,
    EVENTS,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LEASES,
    LOCAL_QUEUES,
    NODES,
    PODS,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Clock,
    ClusterPort,
    ListResult,
    ManualClock,
    Obj,
    Resource,
    SystemClock,
    WatchEvent,
    WatchStream,
    newer,
    object_key,
)
from admission.kube._reflector import reflect
from admission.kube._selectors import LabelSelector, parse_label_selector

if TYPE_CHECKING:
    from admission.kube._client import KubePort, KubeWatch, api_client_from_kubeconfig
    from admission.kube._leader import LeaderElector
    from admission.kube._settings import ApiRetrySettings, LeaderSettings

__all__ = [
    "ADMISSION_CHECKS",
    "CLUSTER_QUEUES",
    "CONFIGMAPS",
    "EVENTS",
    "KUEUE_GROUP",
    "KUEUE_VERSION",
    "LEASES",
    "LOCAL_QUEUES",
    "NODES",
    "PODS",
    "RESOURCE_FLAVORS",
    "TOPOLOGIES",
    "WORKLOADS",
    "ApiRetrySettings",
    "Clock",
    "ClusterPort",
    "KubePort",
    "KubeWatch",
    "LabelSelector",
    "LeaderElector",
    "LeaderSettings",
    "ListResult",
    "ManualClock",
    "Obj",
    "Resource",
    "SystemClock",
    "WatchEvent",
    "WatchStream",
    "api_client_from_kubeconfig",
    "errors",
    "newer",
    "object_key",
    "parse_label_selector",
    "reflect",
]

_LAZY = {"KubePort": "_client", "KubeWatch": "_client", "api_client_from_kubeconfig": "_client",
         "LeaderElector": "_leader", "ApiRetrySettings": "_settings", "LeaderSettings": "_settings"}


def __getattr__(name: str) -> Any:
    """The adapter, leader election and settings, imported on first use (the adapter brings in
    the ``kubernetes`` client; the others pydantic and logging)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

"""Which queues a Workload is in: its LocalQueue (``namespace/spec.queueName``) and the
ClusterQueue that LocalQueue points at (``spec.clusterQueue``), one rule for every reader.

Both answer None when the Workload does not say (no namespace or no ``queueName``) or, for the
ClusterQueue, when the LocalQueue is not known (yet) or names none: a reader never makes up a
queue from a missing part. Kept apart from ``_queueing`` so that what reads only a name (the
quota yield, decisions before quota) imports no placement code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["cluster_queue_of", "queue_name_of"]


def queue_name_of(obj: Mapping[str, Any]) -> str | None:
    """The Workload's LocalQueue, ``namespace/spec.queueName`` (runtimes are learned per queue); None if either is unset."""
    meta = obj.get("metadata")
    spec = obj.get("spec")
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    name = spec.get("queueName") if isinstance(spec, Mapping) else None
    return f"{ns}/{name}" if ns and name else None


def cluster_queue_of(obj: Mapping[str, Any], local_queues: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The ClusterQueue the Workload's LocalQueue points at (its ``spec.clusterQueue``), the
    LocalQueue looked up in ``local_queues`` by ``namespace/name``; None when the Workload names
    no LocalQueue, the LocalQueue is not there, or it names no ClusterQueue."""
    name = queue_name_of(obj)
    found = local_queues.get(name) if name is not None else None
    spec = found.get("spec") if found is not None else None
    cq = spec.get("clusterQueue") if isinstance(spec, Mapping) else None
    return str(cq) if cq else None

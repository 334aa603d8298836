"""The narrow port between the controller and a cluster: list, watch, get, apply, create, patch.

Objects cross it as plain JSON-shaped dicts (camelCase, as the API serves them), so the real
adapter (``_kube``) and an in-memory simulator implement the same few methods and the
controller never sees a client library. Time crosses the ``Clock`` port for the same reason:
tests and the simulator drive a ``ManualClock``; backoffs then never sleep for real.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

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
    "Clock",
    "ClusterPort",
    "ListResult",
    "ManualClock",
    "Obj",
    "Resource",
    "SystemClock",
    "WatchEvent",
    "WatchStream",
    "newer",
    "object_key",
]

Obj = dict[str, Any]
"""A Kubernetes object as the API serves it in JSON."""


def object_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def newer(old: Obj | None, new: Obj) -> bool:
    """Is ``new`` at least as recent as ``old``? ResourceVersions are opaque to clients, but every
    Kubernetes storage serves them as increasing integers; comparing them keeps a late watch event
    from overwriting the answer of a write the controller just made. Non-numeric versions count
    as newer (the event order is then all there is)."""
    if old is None:
        return True
    a = (old.get("metadata") or {}).get("resourceVersion", "")
    b = (new.get("metadata") or {}).get("resourceVersion", "")
    if a.isascii() and a.isdigit() and b.isascii() and b.isdigit():  # "²".isdigit() is True; int() refuses it
        return int(b) >= int(a)
    return True


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: where it lives and what it is called."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"

NODES = Resource("", "v1", "nodes", "Node", False)
PODS = Resource("", "v1", "pods", "Pod", True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
EVENTS = Resource("", "v1", "events", "Event", True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
WORKLOADS = Resource(KUEUE_GROUP, KUEUE_VERSION, "workloads", "Workload", True)
RESOURCE_FLAVORS = Resource(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", "ResourceFlavor", False)
TOPOLOGIES = Resource(KUEUE_GROUP, KUEUE_VERSION, "topologies", "Topology", False)
ADMISSION_CHECKS = Resource(KUEUE_GROUP, KUEUE_VERSION, "admissionchecks", "AdmissionCheck", False)
LOCAL_QUEUES = Resource(KUEUE_GROUP, KUEUE_VERSION, "localqueues", "LocalQueue", True)
CLUSTER_QUEUES = Resource(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "ClusterQueue", False)


@dataclass(frozen=True, slots=True)
class ListResult:
    items: list[Obj]
    resource_version: str
    """Watch from here to see only changes after this list."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    object: Obj = field(default_factory=dict)


class WatchStream(Protocol):
    """An open watch. Iterating blocks for events; ``close()`` (from any thread) ends it.

    Raises ``errors.Gone`` when the resourceVersion is too old: the caller relists."""

    def __iter__(self) -> Iterator[WatchEvent]: ...

    def close(self) -> None: ...


class ClusterPort(Protocol):
    """What the controller needs from a cluster. Errors are ``admission.kube.errors.ApiError``s."""

    def list(self, resource: Resource, *, namespace: str | None = None, field_selector: str | None = None,
             label_selector: str | None = None) -> ListResult:
        """Every object (all pages); ``field_selector`` and ``label_selector`` in the apiserver's
        syntax (labels: ``k=v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``)."""
        ...

    def watch(self, resource: Resource, resource_version: str, *, namespace: str | None = None,
              field_selector: str | None = None, timeout_seconds: int = 300) -> WatchStream: ...

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj: ...

    def create(self, resource: Resource, obj: Obj) -> Obj: ...

    def replace(self, resource: Resource, obj: Obj) -> Obj:
        """PUT with the object's resourceVersion: ``Conflict`` if someone wrote in between."""
        ...

    def patch(self, resource: Resource, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        """JSON merge patch."""
        ...

    def apply(self, resource: Resource, obj: Obj, *, field_manager: str, subresource: str | None = None,
              force: bool = True) -> Obj:
        """Server-side apply of ``obj`` (identity plus the fields this manager owns)."""
        ...


class Clock(Protocol):
    def now(self) -> float:
        """Wall time, epoch seconds (timestamps written to the API, relax-after arithmetic)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (latencies, lease expiry, delayed requeues)."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """Time that moves only when told: ``advance()`` or ``sleep()`` (which returns at once)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self._now = now
        self._mono = 1000.0
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
            self._mono += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(seconds, 0.0))

"""The server's own record of a run: every revision of the objects the replicas write, read from
watches on the apiserver directly (not through the fault proxy), so the term audit can tell
whether, and at which revision, a write whose answer never said so was applied.

``History`` watches one run's Workloads, Leases and Events, and its AdmissionCheck, from a
list at the run's start; a watch that ends is resumed from the last revision it delivered,
so no revision is missed (a ``410 Gone`` would mean one was: ``gaps`` counts those, and the
audit then cannot settle a write on that resource). ``settled`` waits until every object's
current revision, read by a list, has arrived.

``landed`` settles one write: among the revisions of the object it wrote, newer than every
revision the server had answered before the write reached it, the first that holds what the
write set (``holds``) where the revision before it did not. Revisions the server answered to
other writes are not this write's. None: the server never applied it. A write the server
applied as a no-op made no revision, and none is found, which is right: it applied nothing.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from admission.kube import ADMISSION_CHECKS, EVENTS, LEASES, WORKLOADS, KubePort, Obj, Resource, errors
from tests.chaos.proxy import Received

__all__ = ["History", "Record", "Revision", "holds", "landed", "object_key", "written_key"]

WATCHED = (WORKLOADS, LEASES, EVENTS, ADMISSION_CHECKS)
WATCHED_PLURALS = frozenset(r.plural for r in WATCHED)
_IGNORED_META = frozenset({"resourceVersion", "managedFields", "generation", "creationTimestamp", "uid"})
"""What a write's body may name in ``metadata`` that the stored object answers on its own terms
(a precondition's resourceVersion, the server's bookkeeping): not what the write set."""


@dataclass(frozen=True, slots=True)
class Revision:
    """One revision of one object, as a watch delivered it (``seen``: when, this process's clock)."""

    key: tuple[str, str, str]
    """(plural, namespace, name)."""
    resource_version: int
    type: str
    object: Obj
    seen: float


@dataclass(frozen=True)
class Record:
    """What the watches delivered: each object's revisions in order, and the plurals with a gap."""

    revisions: dict[tuple[str, str, str], list[Revision]]
    gaps: frozenset[str] = frozenset()

    def covers(self, w: Received) -> bool:
        """Can ``landed`` settle ``w``: it addressed an object of a watched resource, with no gap?"""
        key = written_key(w)
        return key is not None and key[0] in WATCHED_PLURALS and key[0] not in self.gaps and _body(w) is not None

    def landed(self, w: Received, timeline: list[Received]) -> Revision | None:
        """The revision at which the server applied ``w`` (None: it did not); see the module's note."""
        return landed(self.revisions, w, timeline)

    def leases(self, namespace: str) -> list[tuple[int, str, int]]:
        """Every revision of ``namespace``'s Leases: (resourceVersion, holder ("" for none), term), in order."""
        out = []
        for key, revs in self.revisions.items():
            if key[0] == LEASES.plural and key[1] == namespace:
                for r in revs:
                    if r.type != "DELETED":
                        spec = r.object.get("spec") or {}
                        out.append((r.resource_version, str(spec.get("holderIdentity") or ""), int(spec.get("leaseTransitions") or 0)))
        return sorted(out)


def object_key(plural: str, obj: Obj) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return plural, str(meta.get("namespace") or ""), str(meta.get("name") or "")


def written_key(w: Received) -> tuple[str, str, str] | None:
    """The object a write addressed, from its path (and a create's body): (plural, namespace,
    name); None when the path names no object this module can read."""
    parts = [p for p in urlsplit(w.path).path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]  # /api/v1/...
    elif parts[:1] == ["apis"]:
        rest = parts[3:]  # /apis/group/version/...
    else:
        return None
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    plural = rest[0]
    if len(rest) >= 2:
        return plural, namespace, rest[1]
    body = _body(w)  # a create: the name is in the body
    name = str(((body or {}).get("metadata") or {}).get("name") or "")
    return (plural, namespace, name) if name else None


def _body(w: Received) -> Obj | None:
    if not w.body:
        return None
    try:
        out = json.loads(w.body)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def holds(obj: Any, want: Any, *, top: bool = True) -> bool:
    """Does ``obj`` hold what ``want`` (a write's body: an apply, a merge patch or a whole
    object) sets? Maps: every key of ``want`` as ``want`` has it (a null: the key is absent, as
    a merge patch deletes it); lists: every item of ``want`` held by some item of ``obj`` (an
    apply merges lists by key); anything else: equal. ``metadata`` keys the server answers on
    its own terms (``_IGNORED_META``) are not compared."""
    if isinstance(want, dict):
        if not isinstance(obj, dict):
            return False
        for k, v in want.items():
            if top and k == "metadata" and isinstance(v, dict):
                v = {mk: mv for mk, mv in v.items() if mk not in _IGNORED_META}
            if v is None:
                if obj.get(k) is not None:
                    return False
            elif k not in obj or not holds(obj[k], v, top=False):
                return False
        return True
    if isinstance(want, list):
        return isinstance(obj, list) and all(any(holds(o, x, top=False) for o in obj) for x in want)
    return bool(obj == want)


@dataclass
class History:
    """Watches of one run's objects on the apiserver itself (``port``: a direct ``KubePort``)."""

    port: KubePort
    namespace: str
    check: str
    """The run's AdmissionCheck (cluster-scoped; the only one of them kept)."""
    revisions: dict[tuple[str, str, str], list[Revision]] = field(default_factory=dict)
    gaps: set[str] = field(default_factory=set)
    """Plurals whose watch was refused as too old (410): revisions may be missing there."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _streams: dict[str, Any] = field(default_factory=dict)

    def start(self) -> History:
        for resource in WATCHED:
            listed = self.port.list(resource, namespace=self.namespace if resource.namespaced else None)
            for obj in listed.items:
                self._add(resource, "LISTED", obj)
            thread = threading.Thread(target=self._follow, args=(resource, listed.resource_version), daemon=True,
                                      name=f"chaos-history-{resource.plural}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """End the watches and close the port's client (its connections): stopping twice is fine."""
        self._stop.set()
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.close()
        for thread in self._threads:
            thread.join(timeout=5.0)
        self.port.api.close()  # type: ignore[no-untyped-call]

    def _keep(self, resource: Resource, obj: Obj) -> bool:
        return resource != ADMISSION_CHECKS or (obj.get("metadata") or {}).get("name") == self.check

    def _add(self, resource: Resource, kind: str, obj: Obj) -> int | None:
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if not version.isdigit() or not self._keep(resource, obj):
            return None
        key = object_key(resource.plural, obj)
        with self._lock:
            seen = self.revisions.setdefault(key, [])
            if not seen or seen[-1].resource_version < int(version):
                seen.append(Revision(key, int(version), kind, obj, time.monotonic()))
        return int(version)

    def _follow(self, resource: Resource, version: str) -> None:
        namespace = self.namespace if resource.namespaced else None
        while not self._stop.is_set():
            try:
                stream = self.port.watch(resource, version, namespace=namespace, timeout_seconds=60)
                with self._lock:
                    self._streams[resource.plural] = stream
                if self._stop.is_set():
                    stream.close()
                    return
                for event in stream:
                    if event.type == "BOOKMARK":
                        version = str((event.object.get("metadata") or {}).get("resourceVersion") or version)
                        continue
                    got = self._add(resource, event.type, event.object)
                    if got is not None or event.object:
                        version = str((event.object.get("metadata") or {}).get("resourceVersion") or version)
            except errors.Gone:
                with self._lock:
                    self.gaps.add(resource.plural)
                return
            except errors.ApiError:
                if self._stop.wait(0.1):
                    return

    def settled(self, timeout: float = 20.0) -> bool:
        """Wait until every watched object's current revision (a list, now) has arrived."""
        want: dict[tuple[str, str, str], int] = {}
        for resource in WATCHED:
            for obj in self.port.list(resource, namespace=self.namespace if resource.namespaced else None).items:
                version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                if version.isdigit() and self._keep(resource, obj):
                    want[object_key(resource.plural, obj)] = int(version)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                behind = [k for k, v in want.items() if not self.revisions.get(k) or self.revisions[k][-1].resource_version < v]
            if not behind:
                return True
            time.sleep(0.05)
        return False

    def record(self) -> Record:
        """What has arrived so far (after ``settled``: everything)."""
        with self._lock:
            return Record({k: list(v) for k, v in self.revisions.items()}, frozenset(self.gaps))


def landed(revisions: dict[tuple[str, str, str], list[Revision]], w: Received, timeline: list[Received]) -> Revision | None:
    """``History.landed`` over a plain map of revisions (what the unit tests build)."""
    key, want = written_key(w), _body(w)
    if key is None or want is None:
        return None
    floor = max((x.resource_version for x in timeline  # applied before the server got w: answered before it was sent
                 if x.resource_version is not None and x.answered is not None and x.answered <= w.sent), default=0)
    floor = max([floor] + [r.resource_version for revs in revisions.values() for r in revs if r.seen <= w.sent])
    others = {x.resource_version for x in timeline if x is not w and x.resource_version is not None and 200 <= x.status < 300
              and written_key(x) == key}
    previous: Revision | None = None
    for rev in revisions.get(key, []):
        if rev.resource_version > floor and rev.resource_version not in others and rev.type != "DELETED" \
                and holds(rev.object, want) and not (previous is not None and previous.type != "DELETED" and holds(previous.object, want)):
            return rev
        previous = rev
    return None

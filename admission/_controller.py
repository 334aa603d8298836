"""The admission-check reconciler.

For each Workload with ``QuotaReserved=True`` whose Atoll check entry is ``Pending``: read the
request (counts and flavors from ``status.admission``, per-pod requests and annotations from the
pod templates), pick its profile and class, run ``policies.decide`` on the flavor's snapshot
forked with the ledger's reservations, and write only Atoll's own check entry with one
server-side apply on ``workloads/status``:

- admit → ``Ready`` + ``podSetUpdates`` (domain nodeSelector, decision id, planned nodes);
- wait → ``Retry`` + ``requeueAfterSeconds`` (the backoff state lives in Workload annotations);
- reject → ``Rejected`` with the reason.

Watches feed one inbox; a single worker thread applies their events to the cache and makes the
decisions one at a time, so two Workloads never see the same free GPUs. Tests drive the same
code synchronously: ``sync()`` lists everything, ``process()`` decides what is queued.
"""

from __future__ import annotations

import datetime as dt
import heapq
import os
import queue
import secrets
import socket
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from admission import errors
from admission._cache import ClusterCache, FlavorProblem, check_entry, condition_true, object_key
from admission._ledger import ANN_DECISION_ID, ANN_PLANNED_NODES, Ledger, decode_planned, encode_planned
from admission._metrics import Metrics
from admission._port import (
    ADMISSION_CHECKS,
    CONFIGMAPS,
    EVENTS,
    NODES,
    PODS,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Clock,
    ClusterPort,
    Obj,
    Resource,
    SystemClock,
    WatchEvent,
    WatchStream,
)
from admission._records import DecisionRecord, PodSetRecord, Recorder, WhyNotRecord, iso_time
from admission._settings import Settings
from admission._workloads import ANN_CLASS, ANN_PROFILE, PodSetTemplate, WorkloadError, WorkloadView, parse_workload
from policies import Decision, PodSetSpec, Profile, ProfileLevelError, ProfilesError, WaitState, WorkloadClass, decide, profiles_from_configmap
from topology import HOSTNAME_LABEL, Level, NodeInfo, PodSetPlacement, ResourceVector, Snapshot, fragmentation_index, untolerated_taints

__all__ = [
    "ANN_ATTEMPTS",
    "ANN_FIRST_WAITED",
    "Controller",
    "EventPoster",
    "Verdict",
    "read_wait_state",
]

ANN_FIRST_WAITED = "atoll.dev/first-waited-at"
ANN_ATTEMPTS = "atoll.dev/attempts"
STATE = {"admit": "Ready", "wait": "Retry", "reject": "Rejected"}
EVENT_REASON = {"Ready": ("Normal", "TopologyPlaced"), "Retry": ("Normal", "TopologyWaiting"), "Rejected": ("Warning", "TopologyRejected")}
MAX_PODSET_UPDATES = 18
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

_log = structlog.get_logger("atoll.controller")


def _rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def read_wait_state(obj: Obj) -> WaitState:
    """The backoff state Atoll keeps on the Workload (so it survives restarts); unreadable = none."""
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    first = _parse_time(str(ann.get(ANN_FIRST_WAITED) or "")) if ann.get(ANN_FIRST_WAITED) else None
    raw = str(ann.get(ANN_ATTEMPTS) or "0")
    attempts = int(raw) if raw.isdigit() else 0
    return WaitState(first, attempts)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ----------------------------------------------------------------------------- verdicts


@dataclass
class Verdict:
    """What Atoll decided for one Workload, and everything the write, the Event and the record need."""

    outcome: str
    message: str
    profile: str = ""
    workload_class: str = ""
    flavor: str = ""
    reason: str = ""
    """Why it waits: no-domain, relax-pending or config."""
    retry_after: int = 0
    relaxed: bool = False
    podset_updates: list[dict[str, Any]] = field(default_factory=list)
    placements: list[PodSetRecord] = field(default_factory=list)
    why_not: list[WhyNotRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    generation: int = 0
    reserved_gpus: int = 0
    decision_id: str = ""
    written: bool = False
    fabric: list[tuple[str, int, float]] = field(default_factory=list)
    """(flavor, free GPUs, fragmentation index) after this decision, for the gauges."""

    @property
    def state(self) -> str:
        return STATE[self.outcome]


@dataclass
class _FlavorResult:
    flavor: str
    outcome: str
    message: str
    reason: str = ""
    retry_after: int = 0
    relaxed: bool = False
    decision: Decision | None = None
    updates: list[dict[str, Any]] = field(default_factory=list)
    placements: list[PodSetRecord] = field(default_factory=list)
    why_not: list[WhyNotRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    generation: int = 0
    reserved: int = 0
    after: Snapshot | None = None


# ----------------------------------------------------------------------------- events


class EventPoster:
    """core/v1 Events, best effort: a failure is logged, never fails a decision. Repeats of the
    same (object, reason, message) bump ``count`` on one Event instead of piling up new ones."""

    def __init__(self, port: ClusterPort, *, clock: Clock, instance: str, max_chars: int = 1024, default_namespace: str = "default") -> None:
        self.port = port
        self.clock = clock
        self.instance = instance
        self.max_chars = max_chars
        self.default_namespace = default_namespace
        self._seen: OrderedDict[tuple[str, str, str], tuple[str, str, int]] = OrderedDict()
        self._queue: queue.Queue[tuple[Obj, str, str, str] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.posted: list[tuple[str, str, str]] = []
        """(object key, reason, message) of every Event sent, for tests and explain."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="atoll-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None

    def flush(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        done = threading.Event()
        self._queue.put(({"_flush": done}, "", "", ""))
        done.wait(timeout)

    def post(self, involved: Obj, kind: str, reason: str, message: str) -> None:
        item = (involved, kind, reason, _truncate(message, self.max_chars))
        if self._thread is None:
            self._send(*item)
        else:
            self._queue.put(item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if "_flush" in item[0]:
                item[0]["_flush"].set()
                continue
            self._send(*item)

    def _send(self, involved: Obj, kind: str, reason: str, message: str) -> None:
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or self.default_namespace
        key = (str(meta.get("uid") or object_key(involved)), reason, message)
        now = _rfc3339(self.clock.now())
        try:
            if key in self._seen:
                ns, name, count = self._seen[key]
                try:
                    self.port.patch(EVENTS, name, {"count": count + 1, "lastTimestamp": now}, namespace=ns)
                    self._seen[key] = (ns, name, count + 1)
                    self._seen.move_to_end(key)
                    self.posted.append((object_key(involved), reason, message))
                    return
                except errors.NotFound:
                    del self._seen[key]
            name = f"{meta.get('name', 'atoll')}.{secrets.token_hex(8)}"
            self.port.create(EVENTS, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"), "name": meta.get("name"),
                                   "namespace": meta.get("namespace"), "uid": meta.get("uid")},
                "type": kind, "reason": reason, "message": message, "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": "atoll"}, "reportingComponent": "atoll.dev/topology", "reportingInstance": self.instance,
            })
            self._seen[key] = (namespace, name, 1)
            if len(self._seen) > 2000:
                self._seen.popitem(last=False)
            self.posted.append((object_key(involved), reason, message))
        except errors.ApiError as exc:
            _log.warning("event not posted", object=object_key(involved), reason=reason, error=str(exc))


# ----------------------------------------------------------------------------- the controller


@dataclass(frozen=True, slots=True)
class _Watch:
    resource: Resource
    namespace: str | None = None
    field_selector: str | None = None


class Controller:
    def __init__(
        self,
        port: ClusterPort,
        *,
        settings: Settings | None = None,
        clock: Clock | None = None,
        recorder: Recorder | None = None,
        metrics: Metrics | None = None,
        identity: str | None = None,
        read_only: bool = False,
        on_written: Callable[[str, str, float], None] | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.port = port
        self.settings = settings or Settings()
        self.clock = clock or SystemClock()
        self.recorder = recorder or Recorder()
        self.metrics = metrics or Metrics()
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.read_only = read_only
        self.on_written = on_written
        self._new_id = new_id or (lambda: secrets.token_hex(6))
        gpu = self.settings.kueue.gpu_resource
        self.cache = ClusterCache(gpu)
        self.ledger = Ledger(gpu, bound=self.cache.bound_pods)
        self.cache.pod_listener = self.ledger.pods_changed
        self.events = EventPoster(port, clock=self.clock, instance=self.identity, max_chars=self.settings.decisions.event_message_max_chars)
        self.config_error: str | None = None
        """The latest profiles-document problem (None when the latest document is in force)."""
        self._config_rv: str | None = None
        self._check_names: frozenset[str] = frozenset()
        self._queue: OrderedDict[str, None] = OrderedDict()
        self._delayed: list[tuple[float, str]] = []
        self._failures: Counter[str] = Counter()
        self._waiting: dict[str, str] = {}
        self._inbox: queue.Queue[tuple[str, Resource, Any]] = queue.Queue()
        self._synced: set[Resource] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._streams: dict[Resource, WatchStream] = {}
        self._streams_lock = threading.Lock()
        self.heartbeat = self.clock.monotonic()
        cfg = self.settings.config
        self.watches = (
            _Watch(CONFIGMAPS, cfg.namespace, f"metadata.name={cfg.configmap}"),
            _Watch(ADMISSION_CHECKS),
            _Watch(RESOURCE_FLAVORS),
            _Watch(TOPOLOGIES),
            _Watch(NODES),
            _Watch(PODS, None, BOUND_PODS),
            _Watch(WORKLOADS),
        )

    # ------------------------------------------------------------------ state in

    @property
    def check_names(self) -> frozenset[str]:
        return self._check_names

    @property
    def synced(self) -> bool:
        return len(self._synced) == len(self.watches)

    def sync(self) -> None:
        """List every watched resource once and apply it (tests, ``atoll explain``)."""
        for w in self.watches:
            result = self.port.list(w.resource, namespace=w.namespace, field_selector=w.field_selector)
            self._apply_list(w.resource, result.items)

    def _apply_list(self, resource: Resource, items: list[Obj]) -> None:
        self._synced.add(resource)
        if resource == CONFIGMAPS:
            self._on_configmap(items[0] if items else None)
            return
        self.cache.replace_all(resource, items)
        if resource == ADMISSION_CHECKS:
            self._on_admission_checks()
        elif resource == WORKLOADS:
            live = {str((o.get("metadata") or {}).get("uid")) for o in items}
            for uid in [u for u in self._waiting if u not in live]:
                del self._waiting[uid]
            for r in self.ledger.reservations():
                if r.uid not in live:
                    self.ledger.forget(r.uid)
            for obj in items:
                self._on_workload(obj)

    def _apply_event(self, resource: Resource, event: WatchEvent) -> None:
        obj = event.object
        if event.type == "BOOKMARK":
            return
        if resource == CONFIGMAPS:
            self._on_configmap(None if event.type == "DELETED" else obj)
            return
        if event.type == "DELETED":
            self.cache.delete(resource, obj)
            if resource == WORKLOADS:
                uid = str((obj.get("metadata") or {}).get("uid"))
                self.ledger.forget(uid)
                self._waiting.pop(uid, None)
                self._queue.pop(object_key(obj), None)
            elif resource == ADMISSION_CHECKS:
                self._on_admission_checks()
            return
        if not self.cache.upsert(resource, obj):
            return
        if resource == WORKLOADS:
            self._on_workload(obj)
        elif resource == ADMISSION_CHECKS:
            self._on_admission_checks()

    def _on_workload(self, obj: Obj) -> None:
        current = self.cache.objects[WORKLOADS].get(object_key(obj), obj)
        self.ledger.observe(current, self._check_names)
        if self._actionable(current):
            self._queue[object_key(current)] = None

    def _on_admission_checks(self) -> None:
        k = self.settings.kueue
        names = frozenset(name for name, ac in self.cache.objects[ADMISSION_CHECKS].items()
                          if (ac.get("spec") or {}).get("controllerName") == k.controller_name
                          and (k.admission_check is None or name == k.admission_check))
        if k.admission_check and k.admission_check in self.cache.objects[ADMISSION_CHECKS] and k.admission_check not in names:
            _log.error("admission check is not Atoll's", name=k.admission_check,
                       fix=f"set spec.controllerName: {k.controller_name} on AdmissionCheck {k.admission_check}")
        if names != self._check_names:
            self._check_names = names
            for obj in self.cache.objects[WORKLOADS].values():
                self._on_workload(obj)
        self._refresh_active()

    def _on_configmap(self, obj: Obj | None) -> None:
        cfg = self.settings.config
        where = f"ConfigMap {cfg.namespace}/{cfg.configmap}"
        if obj is None:
            if self.cache.profiles is None:
                self.config_error = f"{where} not found: create it with key profiles.yaml (helm/atoll values profiles.document)"
            else:
                _log.warning("profiles ConfigMap deleted; the last good document stays in force", configmap=where)
            self._refresh_active()
            return
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if rv and rv == self._config_rv:
            return
        self._config_rv = rv
        try:
            doc = profiles_from_configmap(obj.get("data"), name=f"{cfg.namespace}/{cfg.configmap}")
        except ProfilesError as exc:
            self.config_error = str(exc)
            self.metrics.config_rejections.labels("configmap").inc()
            _log.error("profiles document rejected; the last good one stays in force" if self.cache.profiles else
                       "profiles document rejected; no valid document yet, Workloads wait", configmap=where, error=str(exc))
            if not self.read_only:
                self.events.post({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata") or {}}, "Warning",
                                 "InvalidProfiles", f"{exc}\n(the last good document stays in force)" if self.cache.profiles else str(exc))
        else:
            self.config_error = None
            self.cache.set_profiles(doc)
            _log.info("profiles document loaded", configmap=where, profiles=sorted(doc.profiles), flavors=sorted(doc.flavors))
            for wl in self.cache.objects[WORKLOADS].values():
                if self._actionable(wl):
                    self._queue[object_key(wl)] = None
        self.metrics.config_valid.set(1 if self.cache.profiles else 0)
        self._refresh_active()

    def _refresh_active(self) -> None:
        """Keep ``status.conditions[Active]`` of Atoll's AdmissionChecks true (false, with the
        reason, while no valid profiles document has ever been read). No write if unchanged."""
        if self.read_only or not self._synced >= {CONFIGMAPS, ADMISSION_CHECKS}:
            return
        cfg = self.settings.config
        if self.cache.profiles is not None:
            status, reason = "True", "Active"
            message = f"Atoll places Workloads with the profiles of ConfigMap {cfg.namespace}/{cfg.configmap}"
            if self.config_error:
                message += f"; its latest update was rejected (see its Events): {self.config_error.splitlines()[0]}"
        else:
            status, reason = "False", "ProfilesInvalid" if self._config_rv else "ProfilesMissing"
            message = self.config_error or "no profiles document yet"
        message = _truncate(message, self.settings.decisions.message_max_chars)
        for name in sorted(self._check_names):
            ac = self.cache.objects[ADMISSION_CHECKS].get(name) or {}
            current = next((c for c in (ac.get("status") or {}).get("conditions") or [] if c.get("type") == "Active"), None)
            if current and (current.get("status"), current.get("reason"), current.get("message")) == (status, reason, message):
                continue
            since = current.get("lastTransitionTime") if current and current.get("status") == status else _rfc3339(self.clock.now())
            body = {"apiVersion": ADMISSION_CHECKS.api_version, "kind": "AdmissionCheck", "metadata": {"name": name},
                    "status": {"conditions": [{"type": "Active", "status": status, "reason": reason, "message": message,
                                               "lastTransitionTime": since, "observedGeneration": (ac.get("metadata") or {}).get("generation", 1)}]}}
            try:
                out = self.port.apply(ADMISSION_CHECKS, body, field_manager=self.settings.decisions.field_manager, subresource="status")
                self.cache.upsert(ADMISSION_CHECKS, out)
                _log.info("admission check condition written", name=name, active=status, reason=reason)
            except errors.ApiError as exc:
                _log.error("admission check condition not written", name=name, error=str(exc))

    # ------------------------------------------------------------------ decisions

    def _actionable(self, obj: Obj) -> bool:
        if not self._check_names or not condition_true(obj, "QuotaReserved") or condition_true(obj, "Finished"):
            return False
        if (obj.get("spec") or {}).get("active", True) is False:
            return False
        entry = check_entry(obj, self._check_names)
        return entry is not None and entry.get("state") == "Pending"

    def pending(self) -> list[str]:
        return list(self._queue)

    def process(self, limit: int | None = None) -> list[Verdict]:
        """Decide every queued Workload now, one at a time (plus delayed ones that are due)."""
        self._promote_due()
        out: list[Verdict] = []
        while self._queue and (limit is None or len(out) < limit):
            key, _ = self._queue.popitem(last=False)
            verdict = self.reconcile(key)
            if verdict is not None:
                out.append(verdict)
        return out

    def _promote_due(self) -> None:
        now = self.clock.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, key = heapq.heappop(self._delayed)
            self._queue[key] = None

    def _requeue_later(self, key: str) -> None:
        self._failures[key] += 1
        delays = self.settings.decisions.error_requeue_seconds
        delay = delays[min(self._failures[key], len(delays)) - 1]
        heapq.heappush(self._delayed, (self.clock.monotonic() + delay, key))

    def reconcile(self, key: str) -> Verdict | None:
        """Decide one Workload and write its check entry; None when there is nothing to do."""
        obj = self.cache.objects[WORKLOADS].get(key)
        if obj is None or not self._actionable(obj):
            return None
        if self.cache.profiles is None:
            _log.warning("no valid profiles document; Workload waits for one", workload=key, error=self.config_error)
            return None
        started = self.clock.monotonic()
        verdict = self.evaluate(obj, self._new_id())
        if self.read_only:
            return verdict
        try:
            self._write(obj, verdict)
        except errors.NotFound:
            _log.info("workload gone before its decision was written", workload=key)
            return verdict
        except errors.ApiError as exc:
            self.metrics.api_write_failures.labels(type(exc).__name__).inc()
            _log.error("decision not written; will retry", workload=key, error=str(exc))
            self._requeue_later(key)
            return verdict
        self._failures.pop(key, None)
        latency = self.clock.monotonic() - started
        self._after_decision(obj, verdict, latency)
        return verdict

    def _write(self, obj: Obj, verdict: Verdict) -> None:
        meta = obj.get("metadata") or {}
        ident = {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")}
        manager = self.settings.decisions.field_manager
        current = check_entry(obj, self._check_names) or {}
        name = str(current.get("name"))
        now = self.clock.now()
        entry: dict[str, Any] = {"name": name, "state": verdict.state,
                                 "message": _truncate(verdict.message, self.settings.decisions.message_max_chars) or verdict.state,
                                 "lastTransitionTime": _rfc3339(now) if current.get("state") != verdict.state else current.get("lastTransitionTime")}
        if verdict.podset_updates:
            entry["podSetUpdates"] = verdict.podset_updates
        if verdict.state == "Retry":
            entry["requeueAfterSeconds"] = verdict.retry_after
        same = all(current.get(k) == entry.get(k) for k in ("state", "message", "podSetUpdates", "requeueAfterSeconds"))
        if same:
            return

        wait = read_wait_state(obj)
        have = (meta.get("annotations") or {})
        if verdict.outcome == "wait":
            want = {ANN_FIRST_WAITED: have.get(ANN_FIRST_WAITED) if wait.first_waited_at is not None else _rfc3339(now),
                    ANN_ATTEMPTS: str(wait.attempts + 1)}
        elif wait.first_waited_at is not None or wait.attempts:
            want = {ANN_FIRST_WAITED: "", ANN_ATTEMPTS: "0"}  # done waiting: the next wait starts afresh
        else:
            want = {}
        if want and any(have.get(k) != v for k, v in want.items()):
            out = self.port.apply(WORKLOADS, {"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": {**ident, "annotations": want}},
                                  field_manager=manager)
            self.cache.upsert(WORKLOADS, out)

        body = {"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": ident, "status": {"admissionChecks": [entry]}}
        out = self.port.apply(WORKLOADS, body, field_manager=manager, subresource="status")
        written = check_entry(out, [name]) or {}
        if written.get("state") != verdict.state:
            raise errors.ApiError(f"workload {object_key(obj)}: the apply returned check state {written.get('state')!r}, "
                                  f"expected {verdict.state} (is admissionChecks merged by name on this apiserver?)")
        verdict.written = True
        self.cache.upsert(WORKLOADS, out)
        self.ledger.observe(self.cache.objects[WORKLOADS][object_key(out)], self._check_names)
        if self.on_written is not None:
            self.on_written(object_key(obj), verdict.outcome, self.clock.monotonic())
        if current.get("state") != verdict.state:
            kind, reason = EVENT_REASON[verdict.state]
            self.events.post({"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": out.get("metadata") or {}},
                             kind, reason, verdict.message)

    def _after_decision(self, obj: Obj, verdict: Verdict, latency: float) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        if verdict.outcome == "wait":
            self._waiting[uid] = verdict.reason
        else:
            self._waiting.pop(uid, None)
        self.metrics.decisions.labels(verdict.outcome).inc()
        self.metrics.decision_latency.observe(latency)
        self.metrics.set_waiting(Counter(self._waiting.values()))
        for flavor, free, frag in verdict.fabric:
            self.metrics.free_gpus.labels(flavor).set(free)
            self.metrics.fragmentation.labels(flavor).set(frag)
        status = obj.get("status") or {}
        wait = read_wait_state(self.cache.objects[WORKLOADS].get(object_key(obj), obj))
        view_queue = f"{meta.get('namespace')}/{(obj.get('spec') or {}).get('queueName', '')}"
        self.recorder.record(DecisionRecord(
            decision_id=verdict.decision_id, time=iso_time(self.clock.now()), workload=str(meta.get("name")),
            namespace=str(meta.get("namespace")), uid=uid, local_queue=view_queue,
            cluster_queue=str((status.get("admission") or {}).get("clusterQueue", "")), flavor=verdict.flavor,
            profile=verdict.profile, workload_class=verdict.workload_class, outcome=verdict.outcome, check_state=verdict.state,
            message=verdict.message, placement=verdict.placements, why_not=verdict.why_not, retry_after_seconds=verdict.retry_after,
            attempts=wait.attempts, relaxed=verdict.relaxed, latency_ms=round(latency * 1000, 3),
            snapshot_generation=verdict.generation, reserved_gpus=verdict.reserved_gpus,
        ))

    # ------------------------------------------------------------------ evaluation (no writes)

    def evaluate(self, obj: Obj, decision_id: str) -> Verdict:
        """The decision for one Workload on the current state, without writing anything."""
        doc = self.cache.profiles
        assert doc is not None
        wait = read_wait_state(obj)
        try:
            view = parse_workload(obj, gpu_resource=self.settings.kueue.gpu_resource)
        except WorkloadError as exc:
            return Verdict("reject", f"Rejected: Workload {object_key(obj)} cannot be read: {exc}", decision_id=decision_id)
        try:
            profile_name, profile = doc.profile_for(annotation=view.profile, local_queue=view.local_queue, cluster_queue=view.cluster_queue)
        except KeyError:
            return Verdict("reject", f"Rejected: pod template annotation {ANN_PROFILE}={view.profile!r} names no profile "
                                     f"(profiles: {', '.join(sorted(doc.profiles))})", decision_id=decision_id)
        cls: WorkloadClass | None = None
        if view.workload_class:
            cls = doc.classes.get(view.workload_class)
            if cls is None:
                return Verdict("reject", f"Rejected: pod template annotation {ANN_CLASS}={view.workload_class!r} names no workload class "
                                         f"(classes: {', '.join(sorted(doc.classes)) or 'none defined'})",
                               profile=profile_name, decision_id=decision_id)
        groups: dict[str, list[PodSetSpec]] = {}
        for spec in view.podsets:
            if spec.per_pod.gpu > 0 and spec.name in view.flavors:
                groups.setdefault(view.flavors[spec.name], []).append(spec)
        base = Verdict("admit", "", profile=profile_name, workload_class=view.workload_class or "", decision_id=decision_id)
        if not groups:
            base.message = "Ready: no PodSet requests GPUs from a flavor; nothing for Atoll to place"
            return base
        results = [self._evaluate_flavor(obj, view, flavor, specs, profile_name, profile, cls, wait, decision_id)
                   for flavor, specs in sorted(groups.items())]
        return self._combine(results, profile, wait, base)

    def _combine(self, results: Sequence[_FlavorResult], profile: Profile, wait: WaitState, base: Verdict) -> Verdict:
        """One verdict from the per-flavor ones: any reject rejects, any wait waits, else admit."""
        v = base
        v.flavor = ",".join(r.flavor for r in results)
        v.generation = max(r.generation for r in results)
        v.reserved_gpus = sum(r.reserved for r in results)
        v.why_not = [w for r in results for w in r.why_not]
        v.notes = [n for r in results for n in r.notes]
        v.relaxed = any(r.relaxed for r in results)
        rejected = [r for r in results if r.outcome == "reject"]
        waiting = [r for r in results if r.outcome == "wait"]
        if rejected:
            v.outcome = "reject"
            v.message = f"Rejected by Atoll (profile {v.profile}): " + "; ".join(r.message for r in rejected)
        elif waiting:
            v.outcome = "wait"
            v.reason = "config" if any(r.reason == "config" for r in waiting) else waiting[0].reason
            v.retry_after = max(r.retry_after for r in waiting)
            v.message = f"Waiting for placement (profile {v.profile}, attempt {wait.attempts + 1}): " + "; ".join(r.message for r in waiting)
        else:
            v.outcome = "admit"
            v.podset_updates = [u for r in results for u in r.updates]
            v.placements = [p for r in results for p in r.placements]
            if len(v.podset_updates) > MAX_PODSET_UPDATES:
                v.notes.append(f"only the first {MAX_PODSET_UPDATES} of {len(v.podset_updates)} podSetUpdates are written (Kueue's limit)")
                v.podset_updates = v.podset_updates[:MAX_PODSET_UPDATES]
            v.message = (f"Placed by Atoll (profile {v.profile}, decision {v.decision_id}): "
                         + "; ".join(r.message for r in results if r.message) + (" | " + "; ".join(v.notes) if v.notes else ""))
            for r in results:  # the new placement counts as used for the fabric gauges
                if r.after is not None and r.decision is not None and r.decision.placement is not None and r.decision.request is not None:
                    _reserve(r.after, r.decision)
        v.fabric = [(r.flavor, r.after.free_gpus(), fragmentation_index(r.after, _island_level(r.after, profile),
                                                                        profile.fragmentation.reference_gang_gpus))
                    for r in results if r.after is not None and r.after.num_nodes]
        return v

    def _evaluate_flavor(self, obj: Obj, view: WorkloadView, flavor: str, specs: list[PodSetSpec], profile_name: str, profile: Profile,
                         cls: WorkloadClass | None, wait: WaitState, decision_id: str) -> _FlavorResult:
        config_wait = self.settings.decisions.config_error_retry_seconds
        try:
            shared = self.cache.snapshot(flavor)
        except FlavorProblem as problem:
            if problem.kind == "kueue-tas":
                return self._validate_kueue_tas(obj, flavor, specs, profile_name, profile, wait, str(problem))
            return _FlavorResult(flavor, "wait", f"{problem}; retry in {config_wait}s", "config", config_wait)
        except ValueError as exc:
            return _FlavorResult(flavor, "wait", f"flavor {flavor}: {exc}; retry in {config_wait}s", "config", config_wait)
        snap = shared.fork()
        reserved = self.ledger.apply(snap, exclude_uid=view.uid)
        self._restrict_to_templates(snap, view, specs)
        names = {s.name for s in specs}
        links = [lk for lk in view.links if lk.a in names and lk.b in names]
        try:
            decision = decide(snap, specs, profile_name=profile_name, profile=profile, now=self.clock.now(), wait=wait,
                              workload_class=cls, links=links)
        except ProfileLevelError as exc:
            return _FlavorResult(flavor, "wait", f"{exc} (fix the profiles document); retry in {config_wait}s", "config", config_wait,
                                 generation=snap.generation, reserved=reserved)
        result = _FlavorResult(flavor, decision.outcome, decision.message, relaxed=decision.relaxed, decision=decision,
                               generation=snap.generation, reserved=reserved, after=snap)
        placement = decision.placement
        if placement is not None:
            result.why_not = [WhyNotRecord(v.podset, v.level, list(v.path), v.capacity_pods, v.need_pods, v.reason) for v in placement.why_not[:6]]
        if decision.outcome == "wait":
            result.retry_after = decision.retry_after_seconds
            result.reason = "relax-pending" if (profile.preferred_level and not decision.relaxed and profile.relax_after_seconds) else "no-domain"
        elif decision.outcome == "admit" and placement is not None:
            per_pod = {s.name: s.per_pod for s in specs}
            for ps in placement.podsets:
                update, notes, selector = self._podset_update(ps, view.templates.get(ps.name, PodSetTemplate()), snap, decision_id)
                result.updates.append(update)
                result.notes.extend(notes)
                result.placements.append(PodSetRecord(
                    ps.name, ps.pods, per_pod[ps.name].gpu, dict(zip(ps.nodes, ps.pods_per_node)), ps.domain_level, list(ps.domain_path),
                    ps.islands, ps.island_level, round(ps.min_perf, 4), round(ps.max_perf, 4), ps.bottleneck_gbps, selector))
        return result

    def _restrict_to_templates(self, snap: Snapshot, view: WorkloadView, specs: Sequence[PodSetSpec]) -> None:
        """Nodes the pods' own nodeSelector (shared by every PodSet placed here) rules out are not candidates."""
        selectors = [dict(view.templates[s.name].node_selector) if s.name in view.templates else {} for s in specs]
        common = {k: v for k, v in selectors[0].items() if all(sel.get(k) == v for sel in selectors[1:])} if selectors else {}
        if not common:
            return
        for i, name in enumerate(snap.node_names):
            info = self.cache.nodes.get(name)
            if info is None or any(info.labels.get(k) != v for k, v in common.items()):
                snap.exclude(i)

    def _podset_update(self, ps: PodSetPlacement, template: PodSetTemplate, snap: Snapshot,
                       decision_id: str) -> tuple[dict[str, Any], list[str], dict[str, str]]:
        """nodeSelector of the lowest domain holding the PodSet, plus decision id and planned nodes;
        keys that would conflict with the pod template are left out (and said so)."""
        notes: list[str] = []
        selector: dict[str, str] = {}
        if ps.domain_level in snap.level_labels:
            level = snap.level_index(ps.domain_level)
            if level == snap.node_level:
                info = self.cache.nodes.get(ps.nodes[0])
                selector[HOSTNAME_LABEL] = info.labels.get(HOSTNAME_LABEL, ps.nodes[0]) if info else ps.nodes[0]
            else:
                value = ps.domain_path[-1]
                selector[ps.domain_level] = value
                if value in _ambiguous_values(snap, level):  # the same value under two parents: pin the ancestors too
                    for i in range(level):
                        selector[snap.level_labels[i]] = ps.domain_path[i]
        annotations = {ANN_DECISION_ID: decision_id}
        budget = self.settings.decisions.planned_nodes_max_chars
        planned = encode_planned(list(zip(ps.nodes, ps.pods_per_node)), budget)
        if planned is None:
            notes.append(f"podSets[{ps.name}]: planned nodes exceed {budget} characters even compressed and are not recorded")
        else:
            annotations[ANN_PLANNED_NODES] = planned
        for where, mine, theirs in (("nodeSelector", selector, template.node_selector), ("annotation", annotations, template.annotations)):
            for key in list(mine):
                have = theirs.get(key)
                if have is None:
                    continue
                if have != mine[key]:
                    notes.append(f"podSets[{ps.name}]: not writing {where} {key}={_truncate(mine[key], 80)}: the pod template already "
                                 f"sets {key}={_truncate(have, 80)}")
                del mine[key]
        update: dict[str, Any] = {"name": ps.name}
        if selector:
            update["nodeSelector"] = selector
        if annotations:
            update["annotations"] = annotations
        return update, notes, selector

    def _validate_kueue_tas(self, obj: Obj, flavor: str, specs: Sequence[PodSetSpec], profile_name: str, profile: Profile,
                            wait: WaitState, why: str) -> _FlavorResult:
        """Kueue's TAS assigned this flavor before any check: accept it, or Retry when it breaks a
        required level of the profile (or of the PodSet's own Kueue annotation)."""
        assignments = {p.get("name"): p for p in ((obj.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []}
        notes: list[str] = []
        for spec in specs:
            required = spec.required_topology or profile.required_level
            ta = (assignments.get(spec.name) or {}).get("topologyAssignment")
            if not required:
                continue
            if not ta:
                notes.append(f"podSets[{spec.name}]: no Kueue topologyAssignment to check")
                continue
            levels = list(ta.get("levels") or [])
            if required not in levels:
                notes.append(f"podSets[{spec.name}]: Kueue's assignment names levels {levels}, not {required}; not checked")
                continue
            cut = levels.index(required) + 1
            domains = {d[:cut] for d in _tas_domains(ta)}
            if len(domains) > 1:
                delay = profile.retry.delay(wait.attempts)
                return _FlavorResult(flavor, "wait", f"{why}: Kueue's TAS placed podSets[{spec.name}] across {len(domains)} {required} "
                                                     f"domains; profile {profile_name} requires one; retry in {delay}s", "no-domain", delay)
        message = f"{why}; Kueue's TAS assignment meets profile {profile_name}"
        return _FlavorResult(flavor, "admit", message + (f" ({'; '.join(notes)})" if notes else ""))

    # ------------------------------------------------------------------ explain

    def flavor_report(self, flavor: str) -> dict[str, Any]:
        """Nodes of a flavor and why any of them are not candidates."""
        report: dict[str, Any] = {"flavor": flavor}
        try:
            topology, levels = self.cache.flavor_topology(flavor)
            snap = self.cache.snapshot(flavor).fork()
        except FlavorProblem as exc:
            report["problem"] = str(exc)
            return report
        reserved = self.ledger.apply(snap)
        excluded: dict[str, list[str]] = {}
        tol = snap.tolerations
        for name in self.cache.flavor_nodes(flavor):
            info = self.cache.nodes.get(name)
            reasons = []
            if name in self.cache.node_problems or info is None:
                reasons.append(self.cache.node_problems.get(name, "unreadable"))
            if info is not None:
                if not info.ready and name not in self.cache.node_problems:
                    reasons.append("NotReady")
                if info.unschedulable:
                    reasons.append("cordoned")
                for t in untolerated_taints(info, tol):
                    reasons.append(f"taint {t.key}={t.value}:{t.effect} not tolerated by the flavor (only pods that tolerate it)")
                missing = [lb for lb in levels if lb != HOSTNAME_LABEL and lb not in info.labels]
                if missing:
                    reasons.append(f"missing level label {', '.join(missing)}")
            for r in reasons:
                excluded.setdefault(r, []).append(name)
        report.update({"topology": topology, "levels": list(snap.level_labels), "nodes": snap.num_nodes,
                       "healthy_nodes": int(snap.eligible.sum()), "free_gpus": snap.free_gpus(), "total_gpus": snap.total_gpus(),
                       "reserved_gpus": reserved, "reservations": len(self.ledger.reservations(flavor)),
                       "excluded": {k: sorted(v) for k, v in sorted(excluded.items())}})
        return report

    def explain(self, key: str) -> dict[str, Any]:
        """Why this Workload waits, or where and why it was placed (from the current cache)."""
        obj = self.cache.objects[WORKLOADS].get(key)
        if obj is None:
            raise KeyError(f"Workload {key} not found")
        out: dict[str, Any] = {"workload": key}
        status = obj.get("status") or {}
        out["cluster_queue"] = (status.get("admission") or {}).get("clusterQueue")
        out["quota_reserved"] = condition_true(obj, "QuotaReserved")
        entry = check_entry(obj, self._check_names)
        out["check"] = {k: entry.get(k) for k in ("name", "state", "message", "requeueAfterSeconds", "lastTransitionTime")} if entry else None
        wait = read_wait_state(obj)
        out["wait_state"] = {"attempts": wait.attempts, "first_waited_at": iso_time(wait.first_waited_at) if wait.first_waited_at else None}
        if entry and entry.get("state") == "Ready":
            placed = []
            for update in entry.get("podSetUpdates") or []:
                ann = update.get("annotations") or {}
                try:
                    nodes = decode_planned(str(ann.get(ANN_PLANNED_NODES, "")))
                except ValueError as exc:
                    nodes = {"(unreadable)": 0}
                    _log.warning("planned nodes unreadable", workload=key, error=str(exc))
                placed.append({"podset": update.get("name"), "decision_id": ann.get(ANN_DECISION_ID), "node_selector": update.get("nodeSelector") or {},
                               "planned_nodes": nodes})
            out["placement"] = placed
        try:
            view = parse_workload(obj, gpu_resource=self.settings.kueue.gpu_resource)
            flavors = sorted(set(view.flavors.values()))
        except WorkloadError as exc:
            out["error"] = str(exc)
            flavors = []
        out["flavors"] = [self.flavor_report(f) for f in flavors]
        if self.cache.profiles is None:
            out["now"] = {"outcome": "none", "message": self.config_error or "no valid profiles document"}
        elif status and condition_true(obj, "QuotaReserved"):
            v = self.evaluate(obj, "dry-run")
            out["now"] = {"outcome": v.outcome, "message": v.message, "profile": v.profile, "class": v.workload_class,
                          "retry_after": v.retry_after, "why_not": [_slots(w) for w in v.why_not],
                          "placement": [_slots(p) for p in v.placements], "reserved_gpus": v.reserved_gpus}
        else:
            out["now"] = {"outcome": "none", "message": "Kueue has not reserved quota yet; Atoll decides after QuotaReserved"}
        return out

    # ------------------------------------------------------------------ the loop

    def start(self) -> None:
        """Watch every resource and decide in a worker thread until ``stop()``."""
        self._stop.clear()
        self.events.start()
        for w in self.watches:
            t = threading.Thread(target=self._watch_loop, args=(w,), name=f"watch-{w.resource.plural}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._work, name="atoll-worker", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._streams_lock:
            for stream in self._streams.values():
                stream.close()
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()
        self.events.stop()

    def wait_synced(self, timeout: float) -> bool:
        deadline = self.clock.monotonic() + timeout
        while not self.synced:
            if self._stop.wait(0.02) or self.clock.monotonic() > deadline:
                return self.synced
        return True

    def _watch_loop(self, w: _Watch) -> None:
        backoffs = self.settings.watch.error_backoffs
        failures = 0
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    result = self.port.list(w.resource, namespace=w.namespace, field_selector=w.field_selector)
                    self._inbox.put(("list", w.resource, result.items))
                    rv = result.resource_version
                stream = self.port.watch(w.resource, rv, namespace=w.namespace, field_selector=w.field_selector,
                                         timeout_seconds=self.settings.watch.timeout_seconds)
                with self._streams_lock:
                    self._streams[w.resource] = stream
                if self._stop.is_set():
                    stream.close()
                    return
                for event in stream:
                    version = (event.object.get("metadata") or {}).get("resourceVersion")
                    if version:
                        rv = str(version)
                    self._inbox.put(("event", w.resource, event))
                    failures = 0
            except errors.Gone:
                _log.info("watch expired; listing again", resource=str(w.resource))
                rv = None
            except Exception as exc:  # noqa: BLE001 - a watcher must outlive any failure; it backs off and resumes
                if self._stop.is_set():
                    return
                delay = backoffs[min(failures, len(backoffs) - 1)]
                failures += 1
                _log.warning("list/watch failed; backing off", resource=str(w.resource), attempt=failures, delay_s=delay, error=str(exc))
                self._stop.wait(delay)

    def _handle(self, item: tuple[str, Resource, Any]) -> None:
        kind, resource, payload = item
        if kind == "list":
            self._apply_list(resource, payload)
        else:
            self._apply_event(resource, payload)

    @staticmethod
    def warm_up() -> None:
        """Compile (or load from numba's cache) the finder's kernels before the first Workload
        waits on them."""
        levels = [Level("warm-up/block"), Level("warm-up/island")]
        nodes = [NodeInfo(f"n{i}", {"warm-up/block": "b", "warm-up/island": f"i{i // 2}"}, ResourceVector(4, 1000, 1000, 10))
                 for i in range(4)]
        snap = Snapshot("warm-up", levels, nodes)
        spec = [PodSetSpec("main", 2, ResourceVector(gpu=4))]
        for profile in (Profile(requiredLevel="warm-up/island"), Profile(preferredLevel="warm-up/island", relaxAfterSeconds=0)):
            decide(snap, spec, profile_name="warm-up", profile=profile, now=0.0)

    def _work(self) -> None:
        try:
            self.warm_up()
        except Exception:  # noqa: BLE001 - a failed warm-up only costs the first decision its compile time
            _log.exception("finder warm-up failed")
        while not self._stop.is_set():
            self.heartbeat = self.clock.monotonic()
            try:
                busy = bool(self._queue) and self.synced
                item = self._inbox.get_nowait() if busy else self._inbox.get(timeout=0.2)
                self._handle(item)
                while True:
                    self._handle(self._inbox.get_nowait())
            except queue.Empty:
                pass
            except Exception:  # noqa: BLE001 - one bad event must not stop the controller
                _log.exception("event handling failed")
            if not self.synced:
                continue
            self._promote_due()
            if self._queue:
                key, _ = self._queue.popitem(last=False)
                try:
                    self.reconcile(key)
                except Exception:  # noqa: BLE001 - a bug on one Workload must not stop the others
                    _log.exception("reconcile failed", workload=key)
                    self._requeue_later(key)


def _reserve(snap: Snapshot, decision: Decision) -> None:
    assert decision.placement is not None and decision.request is not None
    per_pod = {p.name: p.per_pod for p in decision.request.podsets}
    for ps in decision.placement.podsets:
        for node, pods in zip(ps.nodes, ps.pods_per_node):
            snap.reserve(node, per_pod[ps.name].scaled(pods))


def _island_level(snap: Snapshot, profile: Profile) -> int:
    """The level the fragmentation index is measured at: the profile's island level, else the lowest above nodes."""
    for label in (profile.required_level, profile.preferred_level):
        if label and label in snap.level_labels:
            return snap.level_index(label)
    return max(snap.node_level - 1, 0)


def _ambiguous_values(snap: Snapshot, level: int) -> set[str]:
    key = ("ambiguous-values", level)
    cached = snap.static_cache.get(key)
    if cached is None:
        counts = Counter(path[-1] for path in snap.domain_values[level])
        cached = {v for v, c in counts.items() if c > 1}
        snap.static_cache[key] = cached
    assert isinstance(cached, set)
    return cached


def _tas_domains(ta: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Domains (values per level) of a Kueue v1beta2 topologyAssignment."""
    out: list[tuple[str, ...]] = []
    for s in ta.get("slices") or []:
        n = int(s.get("domainCount") or 0)
        columns = []
        for lv in s.get("valuesPerLevel") or []:
            if "universal" in lv and lv["universal"] is not None:
                columns.append([str(lv["universal"])] * n)
            else:
                ind = lv.get("individual") or {}
                columns.append([f"{ind.get('prefix', '')}{r}{ind.get('suffix', '')}" for r in ind.get("roots") or []])
        out.extend(zip(*columns))
    return out


def _slots(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in getattr(obj, "__slots__", ())}

"""The admission-check controller: watches in, one worker deciding, one write per decision.

Watches feed one inbox; a single worker thread applies their events to the cache and ledger and
decides queued Workloads one at a time, so two Workloads never see the same free GPUs. A
Workload is queued while it is actionable (``QuotaReserved=True``, not ``Evicted``, not finished
or deactivated, Atoll's entry ``Pending``), and while the webhook asks for an admitted one to be
requeued (``_requeue``); the decision is ``Decider``'s (``_decide``), the write ``StatusWriter``'s
(``_status``), and the record and metrics are taken here. With
``DecisionSettings.decide_before_quota``, the worker, its queue empty, also decides Workloads still
waiting for quota (``_before_quota`` picks them and keeps their holds). A write refused
because the Workload changed since it was read (409) reads it again and decides again at once
(next, ahead of the queue). The worker never sleeps on a retry: its writes and reads make one
attempt each, and a transient failure puts the Workload on the delayed queue with its backoff
(``DecisionSettings.error_requeue_seconds``), so one slow call costs at most one request
timeout (``Settings.worker_turn_worst_case_seconds``, below the liveness stall limit).
With ``DecisionSettings.write_workers`` > 0 the decision writes are pipelined: the worker still
decides one Workload at a time, the ledger counts each decision when it is made (so the next one
sees it), a writer thread applies it, and the worker takes the answer from its inbox; a write
that is refused gives the booking back and is handled as a serial one's (one whose answer is
lost, a 5xx or none, keeps it until the Workload is decided again: the server may have applied it). One write per
Workload is in flight at a time: a later one never overtakes it.
Tests drive the same code synchronously: ``sync()`` lists everything, ``process()`` decides what
is queued.

Why this module is longer than the others: the state fed by watches, the work queue with its
delays and failure counts, and the reconcile all belong to the one worker thread; kept in one
class they need no locks and no hand-offs. The decision, the writes, the watch threads and the
explanations already live in rooms of their own.
"""

from __future__ import annotations

import functools
import heapq
import os
import queue
import secrets
import socket
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import structlog

from admission import vocabulary
from admission.controller._before_quota import BeforeQuota
from admission.controller._cache import BoundPod, ClusterCache, FlavorProblem
from admission.controller._decide import Decider, Verdict
from admission.controller._domains import build_record
from admission.controller._events import EventPoster
from admission.controller._explain import Explainer
from admission.controller._ledger import Ledger
from admission.controller._metrics import Metrics
from admission.controller._owed_index import OwedIndex
from admission.controller._owing import owes
from admission.controller._parking import Parking
from admission.controller._preempting import Preemptor, describe, victim_message
from admission.controller._queue_names import queue_name_of
from admission.controller._queue_report import queue_report
from admission.controller._queue_state import QueueState
from admission.controller._quota_line import quota_line
from admission.controller._records import DecisionRecord, Recorder, rfc3339, truncate
from admission.controller._requeue import RequeueRequest, requeue_request
from admission.controller._settings import Settings
from admission.controller._span_cost import SpanPricer
from admission.controller._status import YIELD_EVENT_REASON, StatusWriter
from admission.controller._wait import atoll_check_names, read_wait_state
from admission.controller._watching import Inbox, Informers, Watch
from admission.controller._workloads import WorkloadError, check_entry, condition_true
from admission.controller._yield_index import ReservedIndex
from admission.controller._yielding import QuotaYield, Yielded, yield_patch
from admission.kube import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    CONFIGMAPS,
    LOCAL_QUEUES,
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
    errors,
    object_key,
)
from admission.queue import Plan, QueueHints, draining_domains, fits_now, size_band
from policies import ProfilesError, profiles_from_configmap

__all__ = ["Controller"]

BOUND_PODS = "spec.nodeName!=,status.phase!=Failed"
"""Field selector of the pods the controller watches: bound ones that did not fail. Running ones
hold node resources; ``Succeeded`` ones tell the ledger which of a decision's pods are done (a
pod turning Succeeded stays in the watch, as one MODIFIED event). A pod turning ``Failed`` stops
matching, and the apiserver reports it DELETED: to the ledger it is gone like a deleted pod, and
its slot is owed again until a replacement binds."""

_log = structlog.get_logger("atoll.controller")


# ----------------------------------------------------------------------------- the controller


def _one_attempt(port: ClusterPort) -> ClusterPort:
    """``port`` making one attempt per call, when it can retry by itself (``KubePort``, and ports
    wrapping one, offer ``single_attempt()``); other ports are used as they are."""
    view = getattr(port, "single_attempt", None)
    return view() if callable(view) else port


@dataclass(slots=True)
class _InFlight:
    """A decision whose write a writer thread is applying (``DecisionSettings.write_workers``)."""

    obj: Obj
    verdict: Verdict
    names: frozenset[str]
    status: dict[str, Any]
    started: float
    term: int | None
    plan: Plan | None
    answer: Future[Obj]


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
        lease_term: Callable[[], int | None] | None = None,
    ) -> None:
        self.port = port
        self.settings = settings or Settings()
        self.clock = clock or SystemClock()
        self.recorder = recorder or Recorder()
        self.metrics = metrics or Metrics()
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.read_only = read_only
        self.lease_term = lease_term or (lambda: None)
        """The leader's lease term (``leaseTransitions`` of its tenure) for the records; None without election."""
        self._new_id = new_id or (lambda: secrets.token_hex(6))
        gpu = self.settings.kueue.gpu_resource
        self.cache = ClusterCache(gpu)
        self.ledger = Ledger(gpu, bound=self.cache.bound_pods, node_labels=self.cache.node_labels, succeeded=self.cache.succeeded_pods)
        self.cache.pod_listener = self.ledger.pods_changed
        self.writes = _one_attempt(port)
        """The worker's port: one attempt per call (a transient failure is requeued, not slept on)."""
        self.events = EventPoster(port, clock=self.clock, instance=self.identity, max_chars=self.settings.decisions.event_message_max_chars)
        self.decider = Decider(self.cache, self.ledger, self.settings)
        self.status = StatusWriter(self.writes, cache=self.cache, ledger=self.ledger, settings=self.settings, clock=self.clock,
                                   events=self.events, on_written=on_written)
        self.explainer = Explainer(self.cache, self.ledger, self.decider, self.settings)
        self.preemptor = Preemptor(self.cache, self.ledger, self.cache.objects[CLUSTER_QUEUES])
        self.before = BeforeQuota(self.cache, self.settings, self.clock)
        """Decisions made before Kueue reserves quota, and their holds (``_before_quota``)."""
        self.ledger.booked_as = self.before.view
        self.before.on_count = lambda kind: self.metrics.before_quota.labels(kind).inc()
        self._before_due = 0.0
        self.queue_state = QueueState(self.cache, self.ledger, self.decider.holds)
        """The queue manager's state fed from the cache, and kept on the Workloads (``_queue_state``)."""
        self.decider.queue = self.queue_state.outlook
        self.decider.span_cost = SpanPricer(self.settings.cost)
        self.config_error: str | None = None
        """The latest profiles-document problem (None when the latest document is in force)."""
        self._config_rv: str | None = None
        self._check_names: frozenset[str] = frozenset()
        self._queue: OrderedDict[str, None] = OrderedDict()
        self._delayed: list[tuple[float, str]] = []
        self._delayed_keys: set[str] = set()
        """Keys on ``_delayed``: one entry per key, the earliest retry."""
        self._failures: Counter[str] = Counter()
        self._conflicts: Counter[str] = Counter()
        self._unknown: set[str] = set()
        """Workloads whose last decision write failed in a way that may have been applied (a 5xx or
        no answer): the ledger keeps that decision's booking until the Workload is decided again
        or the cache shows what landed (``_written``)."""
        self._waiting: dict[str, str] = {}
        self._waiting_band: dict[str, str] = {}
        """uid → size band of each waiting Workload (``size_band``), for the gauge by reason and band."""
        self.queue_hints: QueueHints = self.queue_state
        """Reservations and expected starts, for ``atoll queue`` and the gauges (``QueueHints``)."""
        self._gauges_due: dict[str, float] = {}
        self._inbox = Inbox()  # coalesced per object: bounded by the cluster, however far the worker falls behind
        self.parking = Parking(self.cache, override=self.settings.decisions.park_waiting,
                               settle_by_fit=self.settings.decisions.quota_yield_back_when_fits,
                               in_turn=self.settings.decisions.quota_yield_in_turn,
                               turn_lead=self.settings.decisions.quota_yield_turn_lead_seconds)
        self.quota_yield = QuotaYield(self.cache.objects[WORKLOADS], self.cache.objects[LOCAL_QUEUES], self.cache.objects[CLUSTER_QUEUES],
                                      lambda: self.cache.gpu_resource, self._free_gpus, self.settings.decisions.quota_yield_max_seconds)
        """Parked Workloads giving their quota back to one waiting for quota (``_yielding``)."""
        self.queue_state.outlook.quota_waiters = lambda flavor, cq: quota_line(
            self.cache.objects[WORKLOADS], list(self.quota_yield.waiters), self.decider.read, self.quota_yield.cluster_queue_of, flavor, cq,
            shares=self.quota_yield.shares_quota(cq, flavor) if cq is not None else None)
        self.quota_yields = 0
        """Parked Workloads that gave their quota back (deactivated a moment: Kueue evicts them)."""
        self.quota_yields_timed_out = 0
        """Yields ended by ``decisions.quota_yield_max_seconds`` rather than by the queue (``QuotaYield.due``)."""
        self.quota_lends = 0
        """Yields ended because the giver's placement fit now (``queueing.lendParked``) rather than by the queue."""
        self.reparked = 0
        """Of those, parked again on their next quota without a decision (nothing they wait for changed)."""
        self._yield_due = False
        self._owed_feed = OwedIndex()
        """The owed gangs kept between looks (``_feed_owed``), told of every Workload the cache takes."""
        self.quota_yield.reserved = ReservedIndex()
        self.cache.workload_listeners += [self._owed_feed.touch, self.quota_yield.reserved.touch]
        self._synced: set[Resource] = set()
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._active_retry_at: float | None = None
        self._catch_up_due = False
        self._active_failures = 0
        self._leading.set()
        self._threads: list[threading.Thread] = []
        workers = self.settings.decisions.write_workers
        self._writers = ThreadPoolExecutor(workers, thread_name_prefix="atoll-writer") if workers else None
        self._in_flight: dict[str, _InFlight] = {}
        """Workload key → its decision being written; one at a time per Workload, so a later
        write for it never overtakes an earlier one."""
        self._after_write: set[str] = set()
        """Keys that came up while their write was in flight: decided again once it answered."""
        self.heartbeat = self.clock.monotonic()
        cfg = self.settings.config
        self.watches = (
            Watch(CONFIGMAPS, cfg.namespace, f"metadata.name={cfg.configmap}"),
            Watch(ADMISSION_CHECKS),
            Watch(RESOURCE_FLAVORS),
            Watch(TOPOLOGIES),
            Watch(NODES),
            Watch(PODS, None, BOUND_PODS),
            Watch(CLUSTER_QUEUES),  # before LocalQueues and Workloads: the first pass finds every ClusterQueue
            Watch(LOCAL_QUEUES),  # before Workloads: a Workload's first look finds its ClusterQueue
            Watch(WORKLOADS),
        )
        self.informers = Informers(port, self.watches, self.settings.watch, self._inbox, self._stop)

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
        self._warm()

    def _warm(self) -> None:
        """Once every watched resource is listed, before the first decision, what that decision
        would otherwise pay for: the owed gangs' look reads every waiting Workload once (the look
        before each decision then reads only what changed), the quota yield ranks its waiters and
        adds up the quota reserved, and each flavor's snapshot is built with what admitted
        Workloads owe resolved on it (later decisions update it where nodes or pods changed)."""
        self._feed_owed()
        self.quota_yield.warm()
        self.decider.warm()

    def _apply_list(self, resource: Resource, items: list[Obj]) -> None:
        self._synced.add(resource)
        if resource == CONFIGMAPS:
            self._on_configmap(items[0] if items else None)
            return
        if resource == LOCAL_QUEUES:
            before = set(self.cache.objects[LOCAL_QUEUES])
            self.cache.replace_all(resource, items)
            self._local_queues_added(set(self.cache.objects[LOCAL_QUEUES]) - before)
            return
        if resource == CLUSTER_QUEUES:
            specs = {k: q.get("spec") for k, q in self.cache.objects[CLUSTER_QUEUES].items()}
            self.cache.replace_all(resource, items)
            self._cluster_queues_changed({k for k, q in self.cache.objects[CLUSTER_QUEUES].items() if k not in specs or specs[k] != q.get("spec")})
            return
        if resource in (PODS, NODES) and len(self.parking.room):  # a relist: what changed since is applied at once
            nodes = (dict(self.cache.nodes), dict(self.cache.node_problems))  # what placement reads: a heartbeat changes neither
            with self._pods_leaving(dict(self.cache.pods)):
                self.cache.replace_all(resource, items)
            if resource == NODES and nodes != (dict(self.cache.nodes), dict(self.cache.node_problems)):
                self._wake(self.parking.wake_all())
            return
        listed_before = dict(self.cache.objects[WORKLOADS]) if resource == WORKLOADS else {}
        self.cache.replace_all(resource, items)
        if resource == ADMISSION_CHECKS:
            self._on_admission_checks()
        elif resource == WORKLOADS:
            keys = {object_key(o) for o in items}
            for key, obj in listed_before.items():
                if key not in keys:  # deleted while the watch was down: as if its delete event came
                    self._workload_gone(obj)
            live = {str((o.get("metadata") or {}).get("uid")) for o in items}
            for uid in [u for u in self._waiting if u not in live]:
                del self._waiting[uid]
                self._waiting_band.pop(uid, None)
            for r in self.ledger.reservations():
                if r.uid not in live:
                    self.ledger.forget(r.uid)
            self.queue_state.relisted(items)
            for gone in [k for k in (*self._failures, *self._conflicts) if k not in keys]:
                self._forget_key(gone)
            for obj in items:
                was = listed_before.get(object_key(obj))
                if was is not None:  # its limit patched while the watch was down
                    self._wake(self.parking.limit_changed(object_key(obj), was, obj))
                self._on_workload(obj)

    def _apply_event(self, resource: Resource, event: WatchEvent) -> None:
        if resource == PODS and len(self.parking.room):
            uid = str((event.object.get("metadata") or {}).get("uid"))
            with self._pods_leaving({uid: self.cache.pods[uid]} if uid in self.cache.pods else {}):
                self._apply_event_now(resource, event)
        else:
            self._apply_event_now(resource, event)

    @contextmanager
    def _pods_leaving(self, before: dict[str, BoundPod]) -> Iterator[None]:
        """Wake the parked Workloads a domain now has room for, once the pods in ``before`` that
        stop holding their node (deleted, failed, succeeded) are applied."""
        yield
        for node in sorted({bp.node for uid, bp in before.items() if uid not in self.cache.pods}):
            self._wake(self.parking.node_freed(node, self.decider.room_now))

    def _apply_event_now(self, resource: Resource, event: WatchEvent) -> None:
        obj = event.object
        if event.type == "BOOKMARK":
            return
        if resource == CONFIGMAPS:
            self._on_configmap(None if event.type == "DELETED" else obj)
            return
        if event.type == "DELETED":
            self.cache.delete(resource, obj)
            if resource == WORKLOADS:
                self._workload_gone(obj)
            elif resource == ADMISSION_CHECKS:
                self._on_admission_checks()
            return
        added = resource == LOCAL_QUEUES and object_key(obj) not in self.cache.objects[LOCAL_QUEUES]
        queue_was = self.cache.objects[CLUSTER_QUEUES].get(object_key(obj)) if resource == CLUSTER_QUEUES else None
        workload_was = self.cache.objects[WORKLOADS].get(object_key(obj)) if resource == WORKLOADS else None
        if not self.cache.upsert(resource, obj):
            return
        if workload_was is not None:  # a parked Workload whose limit a user patched may backfill now
            self._wake(self.parking.limit_changed(object_key(obj), workload_was, obj))
        if added:
            self._local_queues_added({object_key(obj)})
        if resource == CLUSTER_QUEUES and (queue_was is None or queue_was.get("spec") != self.cache.objects[resource][object_key(obj)].get("spec")):
            self._cluster_queues_changed({object_key(obj)})
        if resource == NODES and self.cache.node_changed:  # not a heartbeat: it could have room for a parked Workload now
            self._wake(self.parking.wake_all())
        if resource == WORKLOADS:
            self._on_workload(obj)
        elif resource == ADMISSION_CHECKS:
            self._on_admission_checks()

    def _local_queues_added(self, keys: set[str]) -> None:
        """LocalQueues new to the cache: the Workloads naming them are looked at again, since what
        reads a Workload's ClusterQueue (decisions before quota) found none when it saw them."""
        if not keys:
            return
        for obj in list(self.cache.objects[WORKLOADS].values()):
            if queue_name_of(obj) in keys:
                self._on_workload(obj)

    def _workload_gone(self, obj: Obj) -> None:
        """A Workload was deleted, or a relist no longer has it (its delete event was missed): every
        book the worker keeps of it goes, and the flavors its reservation held are looked at again."""
        key, uid = object_key(obj), str((obj.get("metadata") or {}).get("uid"))
        self.parking.leave(key)
        self.quota_yield.forget(key)
        self.decider.lent.discard(key)
        self._wake(self.parking.wake_flavors(r.flavor for r in self.ledger.reservations() if r.uid == uid))
        self.ledger.forget(uid)
        self._waiting.pop(uid, None)
        self._waiting_band.pop(uid, None)
        self.queue_state.gone(obj)
        self.before.gone(key)
        self._queue.pop(key, None)
        self._forget_key(key)
        live = len(self.cache.objects[WORKLOADS])
        for index in (self._owed_feed, self.quota_yield.reserved):  # their next look reads the live ones afresh: no dearer
            if index is not None and index.backlog > live:
                index.rest()
        self._hand_room_on()

    def _hand_room_on(self) -> None:
        """A Workload freed room woke left the room undecided (deleted, no longer actionable): the
        room goes to the next parked Workloads it holds, as after a decision (``WaitingRoom.leave``)."""
        if self.parking.room.owed():
            self._wake(self.parking.reoffer(self.decider.room_now))

    def _cluster_queues_changed(self, names: set[str]) -> None:
        """ClusterQueues new to the cache, or whose spec (cohort, quota, checks) changed; a change of
        status alone is not one (the Workloads' own events tell what their usage does). The
        Workloads that wait in them or hold their quota are looked at again (decisions before quota
        read the flavor and checks), and the quota yield weighs its waiters again (the quota changed)."""
        if not names:
            return
        for obj in list(self.cache.objects[WORKLOADS].values()):
            if str(((obj.get("status") or {}).get("admission") or {}).get("clusterQueue") or "") in names \
                    or self.quota_yield.cluster_queue_of(obj) in names:
                self._on_workload(obj)
        if self.parking.enabled and not self.read_only:
            self._yield_due = True

    def _forget_key(self, key: str) -> None:
        """A Workload is gone: its failure and conflict counts go with it (its delayed entry, if
        any, finds nothing to decide when due)."""
        self._failures.pop(key, None)
        self._conflicts.pop(key, None)
        self._unknown.discard(key)

    def _on_workload(self, obj: Obj) -> None:
        current = self.cache.objects[WORKLOADS].get(object_key(obj), obj)
        if self.before.list_own and self.before.enabled:
            current = self._listed(current)
        flight = self._in_flight.get(object_key(current))
        same = flight is not None and (current.get("metadata") or {}).get("resourceVersion") == (flight.obj.get("metadata") or {}).get("resourceVersion")
        if self.before.saw(current, self._check_names):  # its reservation does not match its decision made before quota
            self._queue[object_key(current)] = None
        # the version its write was made against: still counted as decided until the write answers
        self.ledger.observe(self.status.booked(current, flight.status) if same and flight else current, self._check_names)
        self.queue_state.observe(current, self._check_names)
        if self._actionable(current) or self._requeue_request(current) is not None:
            self._queue[object_key(current)] = None
        if self.parking.enabled and not self.read_only:
            self._yield_due |= self.quota_yield.saw(current)

    def _listed(self, obj: Obj) -> Obj:
        """``obj`` with Atoll's entry as Kueue will list it (``Pending``), when it holds quota, its
        entry is not listed yet and Atoll's check applies (``BeforeQuota.own_check``): decided
        now, its write adds the entry (and is refused, 409, if Kueue listed it first). A view for
        the decision only: the cache keeps what the server returned (a standby, or a write that is
        refused or never sent, would otherwise keep an entry the server never had)."""
        if not self._check_names or not condition_true(obj, "QuotaReserved") or check_entry(obj, self._check_names) is not None:
            return obj
        if condition_true(obj, "Evicted") or condition_true(obj, "Finished") or condition_true(obj, "Admitted"):
            return obj
        name = self.before.own_check(obj, self._check_names)
        if name is None:
            return obj
        status = dict(obj.get("status") or {})
        meta = obj.get("metadata") or {}
        status["admissionChecks"] = [*(status.get("admissionChecks") or []), {
            "name": name, "state": "Pending", "message": "", "lastTransitionTime": meta.get("creationTimestamp") or rfc3339(self.clock.now())}]
        return {**obj, "status": status}

    def _on_admission_checks(self) -> None:
        k = self.settings.kueue
        names = atoll_check_names(self.cache.objects[ADMISSION_CHECKS], k)
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
            if not self.read_only and self._leading.is_set():
                self.events.post({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata") or {}}, "Warning",
                                 "InvalidProfiles", f"{exc}\n(the last good document stays in force)" if self.cache.profiles else str(exc))
        else:
            self.config_error = None
            accelerators = self.cache.gpu_resource
            if self.cache.set_profiles(doc):
                if self.cache.gpu_resource != accelerators:
                    self.ledger.gpu_resource = self.cache.gpu_resource
                    if PODS in self._synced:  # pods were read for other accelerators: read them again
                        w = next(w for w in self.watches if w.resource == PODS)
                        self._apply_list(PODS, self.port.list(PODS, namespace=w.namespace, field_selector=w.field_selector).items)
                if self.synced:  # a reload dropped the snapshots: built here, as at the start, not in the next decision
                    self.decider.warm()
            _log.info("profiles document loaded", configmap=where, profiles=sorted(doc.profiles), flavors=sorted(doc.flavors))
            self.parking.wake_all()
            for wl in self.cache.objects[WORKLOADS].values():
                if self._actionable(wl):
                    self._queue[object_key(wl)] = None
        self.metrics.config_valid.set(1 if self.cache.profiles else 0)
        self._refresh_active()

    def _refresh_active(self) -> None:
        if self.read_only or not self._leading.is_set() or not self._synced >= {CONFIGMAPS, ADMISSION_CHECKS}:
            return
        if self.status.refresh_active(self._check_names, config_error=self.config_error, config_seen=self._config_rv is not None):
            self._active_retry_at, self._active_failures = None, 0
            return
        # a failed write is tried again by the worker's loop on the error backoff, not slept on here
        delays = self.settings.decisions.error_requeue_seconds
        self._active_failures += 1
        self._active_retry_at = self.clock.monotonic() + delays[min(self._active_failures, len(delays)) - 1]

    # ------------------------------------------------------------------ decisions

    def _actionable(self, obj: Obj) -> bool:
        """Atoll decides only while Kueue holds quota for the Workload and waits on Atoll's check.

        Not while ``Evicted=True``: Kueue's eviction (``prepareForEviction`` in Kueue's
        pkg/workload/evict/evict.go) resets every non-Pending check entry to Pending in the same
        write that sets Evicted, while ``QuotaReserved`` and ``status.admission`` stay until the
        job has stopped; ``Evicted`` turns False only with the next reservation
        (``SetQuotaReservation`` in pkg/workload/workload.go). A Ready written in that window
        would survive the requeue and admit the next reservation unchecked; a Retry would leave the
        Workload stuck (Kueue's ``reconcileCheckBasedEviction`` in
        pkg/controller/core/workload_controller.go skips Workloads already evicted). Kueue's own
        ProvisioningRequest check uses the same guard."""
        if not self._check_names or not condition_true(obj, "QuotaReserved") or condition_true(obj, "Finished"):
            return False
        if condition_true(obj, "Evicted"):
            return False
        if (obj.get("spec") or {}).get("active", True) is False:
            return False
        entry = check_entry(obj, self._check_names)
        return entry is not None and entry.get("state") == "Pending"

    def _requeue_request(self, obj: Obj) -> RequeueRequest | None:
        """The webhook's request to requeue this admitted Workload (a pod lost its node and its
        domain has no replacement), when it names the decision in force; ``_requeue``. Like a
        decision, never while ``Evicted=True`` (``holds_reservation``): a Retry then would leave
        the Workload stuck (Kueue #3543)."""
        return requeue_request(obj, self._check_names) if self._check_names else None

    def pending(self) -> list[str]:
        return list(self._queue)

    def process(self, limit: int | None = None) -> list[Verdict]:
        """Decide every queued Workload now, one at a time (plus delayed ones that are due)."""
        self._reactivate_due()
        self._promote_due()
        out: list[Verdict] = []
        while (self._queue or self._in_flight) and (limit is None or len(out) < limit):
            if not self._queue:
                self._write_answered(next(iter(self._in_flight)), wait=True)
                continue
            key, _ = self._queue.popitem(last=False)
            verdict = self.reconcile(key)
            if verdict is not None:
                out.append(verdict)
        while self._in_flight:
            self._write_answered(next(iter(self._in_flight)), wait=True)
        if self._yield_due:
            self._give_quota_back()
        if not self._queue:
            out.extend(self.before_quota())
            while self._in_flight:
                self._write_answered(next(iter(self._in_flight)), wait=True)
        return out

    def _give_quota_back(self) -> None:
        """Parked Workloads whose quota a Workload of their ClusterQueue or cohort waits for are
        deactivated (Kueue evicts them and releases the quota; ``_yielding`` says why not a Retry)
        and set aside, by ``_yielding``'s rules (at most once per decision)."""
        self._yield_due = False
        if not len(self.parking.room):
            return
        self.parking.settle(self.decider.room_now)  # a giver an event reached takes quota only if it fits now
        for key, waiter in self._yield_pairs():
            obj = self.cache.objects[WORKLOADS].get(key)
            if obj is None or key not in self.parking or not self._actionable(obj):
                continue
            flavor = self.quota_yield.flavor_of(key)
            meta = obj.get("metadata") or {}
            if self._written(key, obj, "quota yield", functools.partial(self._patch_workload, obj, yield_patch(obj, waiter))):
                self.parking.set_aside(key)
                self.quota_yield.gave(key, waiter, self.clock.now(), flavor, self.parking.room.need(key))
                self.quota_yields += 1
                self.metrics.quota_yields.labels(flavor).inc()
                self.events.post({"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": meta}, "Normal", YIELD_EVENT_REASON,
                                 f"Parked, gives its quota back to Workload {waiter}, which waits for quota in its ClusterQueue or "
                                 "cohort: deactivated until no Workload queued before this give waits for quota; when it holds "
                                 "quota again it parks again without a new decision unless what it waits for changed")
                _log.info("parked workload gave its quota back", workload=key, to=waiter)

    def _yield_pairs(self) -> list[tuple[str, str]]:
        """Which parked Workload gives its quota back to which waiting one now (``QuotaYield.choose``)."""
        held = self.queue_state.outlook.reservations.held_by
        objects, now = self.cache.objects[WORKLOADS], self.clock.now()
        ends = self.queue_state.outlook.reservations.soonest_free()
        may_give = [k for k in self.parking.parked() if self.parking.room.may_give(k, now, ends)]

        def keeps(k: str) -> bool:  # a reservation's holder, or a gang owed its turn (holdBehindGangs), keeps its quota
            return held(k) is not None or owes(objects.get(k), self.cache.profiles, self.decider.read, now)

        return self.quota_yield.choose(may_give, lambda k: not self.parking.room.may_take(k, now, ends), keeps)

    def _reactivate_due(self) -> None:
        """Workloads deactivated to give their quota back that no Workload queued before the give
        still waits ahead of are active again (``_yielding``); after a start or a leader change,
        those the API shows first."""
        if self.read_only:
            return
        if not self.quota_yield.rebuilt and self.quota_yield.rebuild():
            _log.info("quota yields found on Workloads; each is reactivated by the same rules", count=len(self.quota_yield.yielded))
        if not self.quota_yield.yielded:
            return
        doc = self.cache.profiles
        lending = doc is not None and any(p.queueing.lend_parked != "off" for p in doc.profiles.values())
        for key in self.quota_yield.due(self.clock.now(), self._lends if lending else None):  # no profile lends: no giver is parsed
            obj = self.cache.objects[WORKLOADS].get(key)
            if obj is None:
                continue
            try:
                self._patch_workload(obj, yield_patch(obj, None))
            except errors.NotFound:
                pass
            except errors.ApiError as exc:  # a 409 too: the next turn reads the Workload again from the cache
                _log.warning("reactivation not written; will retry", workload=key, error=str(exc))
                continue
            y = self.quota_yield.yielded.pop(key, None)
            if key in self.quota_yield.lent:  # its placement fits now: decided afresh on its next quota, never parked again undecided
                self.parking.leave(key)
                self.quota_lends += 1
                self.decider.lent.add(key)  # the decision's record says so
            if key in self.quota_yield.timed_out:  # back ahead of a Workload queued before the give: decided afresh on its next
                self.parking.leave(key)  # quota, so it may give it back again, rather than parked again undecided
                self.quota_yields_timed_out += 1
                self.metrics.quota_yields_timed_out.labels(y.flavor if y is not None and y.flavor else self.quota_yield.flavor_of(key)).inc()
            _log.info("reactivated after giving its quota back", workload=key)

    def _lends(self, key: str, y: Yielded) -> str:
        """``key``'s profile's ``queueing.lendParked`` if the placement it was parked on fits the
        flavor now (``fits_now``, on the snapshot a decision reads), else ``off``."""
        obj, doc = self.cache.objects[WORKLOADS].get(key), self.cache.profiles
        if obj is None or doc is None or y.need is None:
            return "off"
        try:
            view = self.decider.read(obj)
            _, profile = doc.profile_for(annotation=view.profile, local_queue=view.local_queue, cluster_queue=view.cluster_queue)
        except (WorkloadError, KeyError):
            return "off"
        mode = profile.queueing.lend_parked
        if mode == "off":
            return mode
        snap = self.decider.room_now(y.need.flavor)
        return mode if snap is not None and fits_now(snap, y.need) else "off"

    def _patch_workload(self, obj: Obj, patch: Obj) -> None:
        """A merge patch of a Workload's metadata and spec (Atoll's yield annotations, ``spec.active``); the cache takes the answer."""
        meta = obj.get("metadata") or {}
        self.cache.upsert(WORKLOADS, self.writes.patch(WORKLOADS, str(meta.get("name")), patch, namespace=meta.get("namespace")))

    def _free_gpus(self, flavor: str) -> int | None:
        try:
            return int(self.cache.snapshot(flavor).free_gpus())
        except (FlavorProblem, ValueError):
            return None

    def _feed_owed(self) -> None:
        """Tell the queue manager which gangs are owed their turn now (``queueing.holdBehindGangs``,
        ``_owing``); what waited behind a gang owed no longer is decided again."""
        doc = self.cache.profiles
        modes = {p.queueing.hold_behind_gangs for p in doc.profiles.values()} if doc is not None else set()
        if doc is None or modes == {"off"}:
            self._owed_feed.rest()  # nobody is owed under this document: the keys touched need no look
            return
        parked = self.parking.parked() if "start" in modes else []  # under quota only those waiting for quota are owed
        changed = self._owed_feed.look(self.cache.objects[WORKLOADS], self.quota_yield.waiters, parked, doc, self.decider.read,
                                       self.quota_yield.cluster_queue_of, self.quota_yield.flavor_of, self.clock.now())
        owed = self.queue_state.outlook.owed
        left = [k for queue, flavor in sorted(changed, key=str) for k in owed.set(queue, flavor, changed[(queue, flavor)])]
        if left:
            self._wake([str(k) for k in self.parking.room.wake_behind(left)])

    def _wake(self, keys: list[str]) -> None:
        """Parked Workloads whose wait may be over: decided again, in the order they were parked."""
        for key in keys:
            self._queue[key] = None

    def _follow(self) -> None:
        """A standby acts on no reservation that ended or was suspended as it followed the API:
        only the leader writes, and a standby parks nothing (its room is empty until it leads, when
        every Pending Workload is decided afresh), so the ends, moves and suspensions the leader's
        ``_promote_due`` would offer as freed room are dropped here, each worker turn. Kept, they
        would pile up with every gang whose reservation ended until this replica leads."""
        reservations = self.queue_state.outlook.reservations
        reservations.take_ended()
        reservations.take_moved()
        reservations.take_suspended()
        # nor does it look at the owed gangs or the quota reserved, which keep the keys touched for
        # their next look: the owed gangs' first look as leader reads afresh what it could owe, and
        # the quota reserved is kept added up (cheap per turn, and warm at takeover)
        self._owed_feed.rest()
        if self.synced and self.quota_yield.reserved is not None:
            gpu = self.cache.gpu_resource
            self.quota_yield.reserved.totals(self.cache.objects[WORKLOADS], (gpu,) if isinstance(gpu, str) else gpu)

    def _promote_due(self) -> None:
        reservations = self.queue_state.outlook.reservations
        self._wake(self.parking.suspended(reservations, self.decider.room_now))
        self._wake(self.parking.released(reservations, self.decider.room_now, self.clock.now()))
        self._wake(self.parking.due(self.clock.now()))
        now = self.clock.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, key = heapq.heappop(self._delayed)
            self._delayed_keys.discard(key)
            self._queue[key] = None

    def _requeue_later(self, key: str) -> None:
        self._failures[key] += 1
        delays = self.settings.decisions.error_requeue_seconds
        delay = delays[min(self._failures[key], len(delays)) - 1]
        if key in self._delayed_keys:  # already waiting for an earlier retry: no second entry
            return
        self._delayed_keys.add(key)
        heapq.heappush(self._delayed, (self.clock.monotonic() + delay, key))

    def reconcile(self, key: str) -> Verdict | None:
        """Decide one Workload and write its check entry; None when there is nothing to do."""
        obj = self.cache.objects[WORKLOADS].get(key)
        if obj is None:
            self.parking.leave(key)
            self._hand_room_on()
            return None
        if self.before.list_own and self.before.enabled:
            obj = self._listed(obj)
        if key in self.before.mismatched:
            return self._mismatched(key, obj)
        if not self._actionable(obj):
            if not (self.parking.is_aside(key) and ((obj.get("spec") or {}).get("active", True) is not False or key in self.quota_yield.yielded)
                    and not condition_true(obj, "Finished")):
                self.parking.leave(key)  # one that gave its quota back keeps its need through Kueue's eviction
                self._hand_room_on()
            request = self._requeue_request(obj)
            return self._requeue(key, obj, request) if request is not None else None
        if self.cache.profiles is None:
            _log.warning("no valid profiles document; Workload waits for one", workload=key, error=self.config_error)
            return None
        if key in self._in_flight:  # its earlier write answers first; then it is looked at again
            self._after_write.add(key)
            return None
        started = self.clock.monotonic()
        term = self.lease_term()  # the tenure this decision belongs to: a replica's term never changes while it runs
        if key in self.parking:  # Pending and parked: its own status write or an unrelated change is no reason to decide
            return None
        if self.parking.is_aside(key):
            self.parking.settle(self.decider.room_now)  # an event reached it and it fits now: decided afresh
        if self.parking.is_aside(key) and self.parking.room.unchanged(key, self.clock.now()) is not None:
            self.reparked += 1  # it gave its quota back and holds it again; nothing it waits for changed: parked as it was
            self.metrics.quota_reparks.labels(self.quota_yield.flavor_of(key)).inc()
            _log.info("parked again without a decision: nothing it waits for changed since it gave its quota back", workload=key)
            self._yield_due = True  # it holds quota again: a Workload may wait for it
            return None
        if key in self._unknown:  # decided afresh on what the cache holds; a landed write answers the next one with a conflict
            self._unknown.discard(key)
            self.ledger.observe(obj, self._check_names)
        self._feed_owed()
        verdict = self.decider.evaluate(obj, self._new_id(), self.clock.now())
        if verdict.outcome == "wait" and self.before.held and self._free_holds(verdict.flavor):
            verdict = self.decider.evaluate(obj, self._new_id(), self.clock.now())  # it holds quota: decisions made before quota give way
        verdict.parked = self.parking.parks(verdict)
        plan = self._preemption(obj, verdict)
        if self._writers is not None and not self.read_only:
            self._send(key, obj, verdict, started, term, plan)
            return verdict
        if self.read_only:
            return verdict
        extra = self.queue_state.conditions(obj, verdict.outcome, plan, self.clock.now())
        if self._written(key, obj, "decision", lambda: self.status.write(obj, verdict, self._check_names, extra),
                                                unknown=functools.partial(self._book_unknown, key, obj, verdict, extra)):
            self._decided(key, obj, verdict, started, term, plan)
        return verdict

    # ------------------------------------------------------------------ decisions before quota

    BEFORE_QUOTA_SECONDS = 0.25
    """How often the worker, its queue empty, looks for Workloads to decide before quota (each
    look walks the queued Workloads of every ClusterQueue)."""

    def before_quota(self) -> list[Verdict]:
        """Release the holds whose time is up, then decide the Workloads ``_before_quota`` picks
        (each queued in a ClusterQueue of one Atoll flavor, no quota yet) and write a placement as
        Ready, booked in the ledger as if reserved; a Workload that cannot be placed now is left
        Pending, to be decided at its reservation."""
        if not self.before.enabled or self.read_only or self.cache.profiles is None or not self._check_names:
            return []
        for key in self.before.due():
            self._release_hold(key, f"no quota within {self.before.hold_seconds:g}s of the decision made before it", "expired")
        out: list[Verdict] = []
        for key, cq, flavor in self.before.next_candidates():
            obj = self.cache.objects[WORKLOADS].get(key)
            entry = check_entry(obj, self._check_names) if obj is not None else None
            if obj is None or key in self._in_flight or entry is None or entry.get("state") != "Pending" or condition_true(obj, "QuotaReserved"):
                continue
            started, term = self.clock.monotonic(), self.lease_term()
            seen = self.before.reserved_view(obj, cq, flavor)
            verdict = self.decider.evaluate(seen, self._new_id(), self.clock.now())
            if verdict.outcome != "admit":
                self.before.rest(key)
                continue
            verdict.message += f" | decided before quota, on flavor {flavor}, the only one of ClusterQueue {cq}"
            for update in verdict.podset_updates:  # read back at the reservation, by this replica or a restarted one
                update["annotations"] = {**(update.get("annotations") or {}), vocabulary.DECIDED_BEFORE_QUOTA: flavor}
            self.before.hold(obj, cq, flavor)
            out.append(verdict)
            if self._writers is not None:  # pipelined as any decision: a write that does not land releases the hold (``saw``)
                self._send(key, obj, verdict, started, term, None)
                continue
            if self._written(key, obj, "decision before quota", functools.partial(self.status.write, obj, verdict, self._check_names)):
                self._after_decision(seen, verdict, self.clock.monotonic() - started, term)
            else:
                self.before.release(key)
        return out

    def _release_hold(self, key: str, why: str, kind: str) -> bool:
        """Atoll's entry of a Workload decided before quota back to Pending (its placement gone
        from the ledger), when it still has no quota; True if written."""
        obj = self.cache.objects[WORKLOADS].get(key)
        entry = check_entry(obj, self._check_names) if obj is not None else None
        if obj is None or entry is None or entry.get("state") != "Ready" or condition_true(obj, "QuotaReserved"):
            self.before.held.pop(key, None)
            return False
        message = truncate(f"Pending: the placement decided before quota was released: {why}; decided again at the reservation",
                           self.settings.decisions.message_max_chars)
        status = {"admissionChecks": [{"name": entry["name"], "state": "Pending", "message": message,
                                       "lastTransitionTime": rfc3339(self.clock.now())}]}
        def release() -> None:
            self.status.took(obj, self._check_names, status, self.status.send(obj, status))

        if not self._written(key, obj, "release of a decision made before quota", release):
            return False
        self.before.release(key, entry, str((obj.get("metadata") or {}).get("uid")), kind)
        self.ledger.observe(self.cache.objects[WORKLOADS].get(key) or obj, self._check_names)
        _log.info("released a decision made before quota", workload=key, why=why)
        return True

    def _free_holds(self, flavors: str) -> bool:
        """A Workload holding quota waits for room: the holds of decisions made before quota on its flavors are released."""
        released = [k for k in self.before.on_flavors(f for f in flavors.split(",") if f)
                    if self._release_hold(k, "a Workload holding quota needed the room", "room")]
        return bool(released)

    def _mismatched(self, key: str, obj: Obj) -> Verdict | None:
        """Kueue reserved quota on another flavor or pod count than the decision made before quota
        assumed: Atoll's entry to Retry, so Kueue evicts and requeues it and it is decided again."""
        why = self.before.mismatched.pop(key)
        entry = check_entry(obj, self._check_names) or {}
        if entry.get("state") != "Ready" or not condition_true(obj, "QuotaReserved") or condition_true(obj, "Evicted"):
            return None
        message = f"Retry: {why}; Kueue requeues the Workload and Atoll decides it again"
        verdict = Verdict("wait", message, reason="quota-mismatch")
        if not self.read_only and self._written(key, obj, "retry of a mismatched reservation",
                                                lambda: self.status.requeue(obj, self._check_names, message)):
            verdict.written = True
            _log.warning("reservation does not match the decision made before quota; asked Kueue to requeue", workload=key, why=why)
        return verdict

    def _decided(self, key: str, obj: Obj, verdict: Verdict, started: float, term: int | None, plan: Plan | None) -> None:
        """The decision's write landed (or had nothing to say): record, preempt, park."""
        self._after_decision(obj, verdict, self.clock.monotonic() - started, term)
        if plan is not None:
            self._preempt(obj, plan)
        if verdict.parked:
            self._yield_due = True
            deadline = self.parking.park(key, verdict)
            if deadline is not None:
                heapq.heappush(self._delayed, (self.clock.monotonic() + max(deadline - self.clock.now(), 0.0), key))
        else:
            self.parking.room.decided(key)
        if self.parking.room.owed():  # woken by freed room and decided: what it did not take goes to the next
            self._wake(self.parking.reoffer(self.decider.room_now))

    def _send(self, key: str, obj: Obj, verdict: Verdict, started: float, term: int | None, plan: Plan | None) -> None:
        """Pipelined write: the ledger counts the decision now (the next decision sees it), a
        writer thread applies it, and the worker takes the answer from its inbox
        (``_write_answered``); a write refused gives the booking back, one whose answer is lost keeps it."""
        status = self.status.prepare(obj, verdict, self._check_names,
                                     self.queue_state.conditions(obj, verdict.outcome, plan, self.clock.now()))
        if status is None:  # the Workload already says it: nothing to write
            self._decided(key, obj, verdict, started, term, plan)
            return
        names = self._check_names
        self.ledger.observe(self.status.booked(obj, status), names)
        answer = self._writers.submit(self.status.send, obj, status)  # type: ignore[union-attr]
        self._in_flight[key] = _InFlight(obj, verdict, names, status, started, term, plan, answer)
        answer.add_done_callback(lambda _: self._inbox.put(("written", WORKLOADS, key)))

    def _write_answered(self, key: str, *, wait: bool = False) -> None:
        """Take a pipelined write's answer on the worker: the cache and ledger take what the server
        said, or, if it did not land, the ledger goes back to the Workload as cached and the write
        is handled as a serial one's (``_written``: decide again, or retry on the backoff)."""
        flight = self._in_flight.get(key)
        if flight is None or not (wait or flight.answer.done()):
            return
        del self._in_flight[key]
        landed = self._written(key, flight.obj, "decision", lambda: self.status.landed(
            flight.obj, flight.verdict, flight.names,
            self.status.took(flight.obj, flight.names, flight.status, flight.answer.result())),
            unknown=lambda: self._unknown.add(key))  # its booking, counted when sent, stays
        if landed:
            self._decided(key, flight.obj, flight.verdict, flight.started, flight.term, flight.plan)
        elif key not in self._unknown:  # refused: the ledger goes back to the Workload as cached
            self.ledger.observe(self.cache.objects[WORKLOADS].get(key) or {"metadata": flight.obj.get("metadata")}, flight.names)
        if key in self._after_write:
            self._after_write.discard(key)
            if key not in self._queue:
                self._queue[key] = None

    def _preemption(self, obj: Obj, verdict: Verdict) -> Plan | None:
        """The domain to clear for a waiting gang whose profile preempts (``preemptDomain``), noted
        on the verdict (and so in its record); the plan to apply under ``on``, None otherwise.
        A gang that already holds a domain plans nothing more: its victims are leaving."""
        uid = str((obj.get("metadata") or {}).get("uid"))
        if verdict.outcome != "wait":
            for held in self.decider.holds.values():
                held.pop(uid, None)
            return None
        profile = self.cache.profiles.profiles.get(verdict.profile) if self.cache.profiles is not None else None
        if profile is None or any(uid in held for held in self.decider.holds.values()):
            return None
        plan = self.preemptor.plan(obj, verdict, profile, self.clock.now())
        if plan is None:
            return None
        verdict.notes.append(describe(plan, dry_run=profile.preempt_domain == "dry-run"))
        return plan if profile.preempt_domain == "on" else None

    def _preempt(self, obj: Obj, plan: Plan) -> None:
        """Hold the domain for the gang, then set Atoll's check to Retry on each victim (Kueue evicts it)."""
        uid = str((obj.get("metadata") or {}).get("uid"))
        self.decider.holds.setdefault(plan.flavor, {})[uid] = plan.nodes
        message = victim_message(plan, object_key(obj), (obj.get("spec") or {}).get("priority", 0))
        for key in plan.victims:
            victim = self.cache.objects[WORKLOADS].get(key)
            if victim is None:
                continue
            if self._written(key, victim, "preemption", functools.partial(self.status.requeue, victim, self._check_names, message)):
                _log.warning("preempted to clear a domain for a waiting gang", workload=key, gang=object_key(obj), domain=plan.domain)

    def _requeue(self, key: str, obj: Obj, request: RequeueRequest) -> Verdict:
        """Answer the webhook's request: Atoll's entry to ``Retry`` (``StatusWriter.requeue``), so
        Kueue evicts and requeues the Workload. Written once: the entry is no longer ``Ready``
        afterwards, and a refused write (409) reads the Workload again and looks again."""
        verdict = Verdict("wait", request.message, reason="node-lost", decision_id=request.decision_id)
        started = self.clock.monotonic()
        term = self.lease_term()
        if not self.read_only and self._written(key, obj, "requeue", lambda: self.status.requeue(obj, self._check_names, request.message)):
            verdict.written = True
            _log.warning("pod lost its node and its domain has no replacement; asked Kueue to requeue the workload",
                         workload=key, decision=request.decision_id, detail=request.detail)
            self._after_decision(obj, verdict, self.clock.monotonic() - started, term)
        return verdict

    def _written(self, key: str, obj: Obj, what: str, write: Callable[[], None], *, unknown: Callable[[], None] | None = None) -> bool:
        """Run one status write for ``key``; False when it did not land: the Workload is gone, it
        changed since it was read (read again, decide again at once), or the API failed (retried
        on the error backoff). A failure that may have been applied all the same (a 5xx, or no
        answer: the server may have applied the write and lost its answer) runs ``unknown`` first,
        so a decision's booking outlives the doubt: were it given back, the next decision could
        plan the same GPUs as one the server admitted."""
        try:
            write()
        except errors.NotFound:
            _log.info(f"workload gone before its {what} was written", workload=key)
            return False
        except errors.Conflict as exc:
            self._decide_again(key, obj, exc)
            return False
        except errors.ApiError as exc:
            self.metrics.api_write_failures.labels(type(exc).__name__).inc()
            if unknown is not None and isinstance(exc, (errors.ServerError, errors.NetworkError)):
                unknown()
            _log.error(f"{what} not written; will retry", workload=key, error=str(exc))
            self._requeue_later(key)
            return False
        self._failures.pop(key, None)
        self._conflicts.pop(key, None)
        return True

    def _book_unknown(self, key: str, obj: Obj, verdict: Verdict, extra: list[dict[str, Any]]) -> None:
        """A serial decision write whose outcome is unknown: the ledger books the decision as if it
        landed, until the Workload is decided again or the cache shows it."""
        status = self.status.prepare(obj, verdict, self._check_names, extra)
        if status is not None:
            self._unknown.add(key)
            self.ledger.observe(self.status.booked(obj, status), self._check_names)

    MAX_CONFLICTS = 5
    """Refused writes in a row after which a Workload waits on the error backoff instead."""

    def _decide_again(self, key: str, obj: Obj, exc: errors.Conflict) -> None:
        """The write was refused because the Workload changed after it was read (or another
        manager holds a field): read it again, keep the cache in step, and decide again at once
        (first in the queue) on what is there now (which may be nothing to do: evicted,
        re-reserved, finished). A read that fails goes on the error backoff."""
        self._conflicts[key] += 1
        self.metrics.api_write_failures.labels(type(exc).__name__).inc()
        meta = obj.get("metadata") or {}
        try:
            fresh = self.writes.get(WORKLOADS, str(meta.get("name")), namespace=meta.get("namespace"))
        except errors.NotFound:
            _log.info("workload gone before its decision was written", workload=key)
            self._conflicts.pop(key, None)
            return
        except errors.ApiError as err:
            _log.error("workload changed before its decision was written and cannot be read again; will retry",
                       workload=key, error=str(err))
            self._requeue_later(key)
            return
        if self._conflicts[key] > self.MAX_CONFLICTS:
            _log.error("decision refused repeatedly because the workload keeps changing; will retry",
                       workload=key, conflicts=self._conflicts[key], error=str(exc))
            self._conflicts.pop(key, None)
            self.cache.upsert(WORKLOADS, fresh)
            self._requeue_later(key)
            return
        _log.info("workload changed before its decision was written; deciding again on its current state", workload=key,
                  read=meta.get("resourceVersion"), current=(fresh.get("metadata") or {}).get("resourceVersion"))
        self.cache.upsert(WORKLOADS, fresh)
        self._on_workload(fresh)
        if key in self._queue:
            self._queue.move_to_end(key, last=False)

    def _after_decision(self, obj: Obj, verdict: Verdict, latency: float, term: int | None = None) -> None:
        uid = str((obj.get("metadata") or {}).get("uid"))
        if verdict.outcome == "wait":
            self._waiting[uid] = verdict.reason
            self._waiting_band[uid] = size_band(verdict.gpus)
        else:
            self._waiting.pop(uid, None)
            self._waiting_band.pop(uid, None)
        self.metrics.decisions.labels(verdict.outcome).inc()
        self.metrics.decision_latency.observe(latency)
        self.metrics.set_waiting(Counter(self._waiting.values()))
        self.metrics.set_waiting_bands(Counter((r, self._waiting_band.get(u, "0")) for u, r in self._waiting.items()))
        self._measure_fabric(verdict)
        if verdict.flavor:  # the ledger counted owed pods on these flavors' snapshots
            flavors = verdict.flavor.split(",")
            self.metrics.set_shortfalls(flavors, [s for f in flavors for s in self.ledger.shortfalls_by_flavor.get(f, ())])
        self.recorder.record(self.decision_record(obj, verdict, latency, term))

    def decision_record(self, obj: Obj, verdict: Verdict, latency: float, term: int | None = None) -> DecisionRecord:
        """The record of one decision on ``obj`` (what ``atoll place --record`` writes offline, too)."""
        # Retries so far, this one included (Kueue counts a Retry in retryCount only when it evicts)
        wait = read_wait_state(self.cache.objects[WORKLOADS].get(object_key(obj), obj), self._check_names)
        return build_record(obj, verdict, self.cache, self._check_names, now=self.clock.now(), latency=latency,
                            attempts=wait.attempts + (1 if verdict.outcome == "wait" else 0), controller=self.identity, term=term,
                            profiles_rv=self._config_rv)

    GAUGE_SECONDS = 15.0
    """How often a flavor's fabric gauges (free GPUs, fragmentation) are measured: each measure
    reads the whole flavor, too much to pay on every decision of a large fabric."""

    def _measure_fabric(self, verdict: Verdict) -> None:
        """Set the fabric gauges of the verdict's flavors after it, when one of them has not been
        measured for ``GAUGE_SECONDS`` (the first decision on a flavor always measures it)."""
        now = self.clock.monotonic()
        flavors = [f for f in verdict.flavor.split(",") if f]
        if not any(now >= self._gauges_due.get(f, now) for f in flavors):
            return
        for flavor, free, frag in verdict.fabric:
            self.metrics.free_gpus.labels(flavor).set(free)
            self.metrics.fragmentation.labels(flavor).set(frag)
            self._gauges_due[flavor] = now + self.GAUGE_SECONDS
            self._measure_queue(flavor)

    def _measure_queue(self, flavor: str) -> None:
        """The queue gauges of ``flavor``: draining nodes and domains, domains held, reservations and GPUs they idle."""
        try:
            snap = self.cache.snapshot(flavor)
        except (FlavorProblem, ValueError):
            return
        draining = self.cache.draining_mask(snap)
        self.metrics.set_draining(flavor, int(draining.sum()), draining_domains(snap, draining))
        self.metrics.held_domains.labels(flavor).set(self.queue_hints.held_domains(flavor))
        for state, count in zip(("active", "suspended"), self.queue_hints.reservations(flavor), strict=True):
            self.metrics.reservations.labels(flavor, state).set(count)
        self.metrics.idle_held_gpus.labels(flavor).set(self.queue_hints.idle_held_gpus(flavor))

    # ------------------------------------------------------------------ reading

    def evaluate(self, obj: Obj, decision_id: str) -> Verdict:
        """The decision for one Workload on the current state, without writing anything."""
        return self.decider.evaluate(obj, decision_id, self.clock.now())

    def flavor_report(self, flavor: str) -> dict[str, Any]:
        """Nodes of a flavor and why any of them are not candidates."""
        return self.explainer.flavor_report(flavor)

    def explain(self, key: str) -> dict[str, Any]:
        """Why this Workload waits, or where and why it was placed (from the current cache)."""
        return self.explainer.explain(key, check_names=self._check_names, config_error=self.config_error, now=self.clock.now())

    def waiting_line(self, *, flavor: str | None = None, queue: str | None = None) -> list[dict[str, Any]]:
        """The Workloads waiting on Atoll's check and why, in plain words (``atoll queue``)."""
        return queue_report(self.cache, self.decider, self.settings, self.queue_hints, check_names=self._check_names, now=self.clock.now(),
                            flavor=flavor, queue=queue)

    # ------------------------------------------------------------------ the loop

    def start(self, *, leading: bool = True) -> None:
        """Watch every resource and decide in a worker thread until ``stop()``. ``leading=False``
        starts a warm standby: its watches keep the cache and ledger current and its kernels are
        compiled, but it writes and decides nothing until ``lead()``, so a failover needs no
        relist and no warm-up."""
        if leading:
            self._leading.set()
        else:
            self._leading.clear()
        self._stop.clear()
        self.events.start()
        self._threads.extend(self.informers.start())
        t = threading.Thread(target=self._work, name="atoll-worker", daemon=True)
        t.start()
        self._threads.append(t)

    def lead(self) -> None:
        """Start deciding (this replica now holds the lease). A standby reads the Workloads once
        first (``_catch_up``)."""
        if not self._leading.is_set():
            self._catch_up_due = True
            self.quota_yield.rebuilt = False  # the yields the API shows are this leader's to end
        self._leading.set()

    def _catch_up(self) -> bool:
        """A standby that now leads reads every Workload once before deciding: its watch may not
        yet have delivered the previous leader's last decisions, and deciding without them could
        hand the same nodes out twice. Only newer versions are taken (a watch event may already
        be ahead of the list). No limit check (``Parking.limit_changed``, as the watch and a relist
        make) is needed: the waiting room is empty here, since a standby decides and parks nothing
        and ``atoll run`` exits when it loses the lease instead of standing by with its room. False
        if the read failed (tried again next turn)."""
        try:
            items = self.writes.list(WORKLOADS).items
        except errors.ApiError as exc:
            _log.error("workloads not read at takeover; will retry", error=str(exc))
            return False
        for obj in items:
            if self.cache.upsert(WORKLOADS, obj):
                self._on_workload(obj)
        return True

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.informers.close()
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()
        if self._writers is not None:
            self._writers.shutdown(wait=True, cancel_futures=True)
        self.events.stop()

    def wait_synced(self, timeout: float) -> bool:
        deadline = self.clock.monotonic() + timeout
        while not self.synced:
            if self._stop.wait(0.02) or self.clock.monotonic() > deadline:
                return self.synced
        return True

    def _handle(self, item: tuple[str, Resource, Any]) -> None:
        kind, resource, payload = item
        if kind == "list":
            was = self.synced
            self._apply_list(resource, payload)
            if self.synced and not was:
                self._warm()
        elif kind == "written":
            self._write_answered(payload)
        else:
            self._apply_event(resource, payload)


    def _work(self) -> None:
        try:
            self.decider.warm_up()
        except Exception:  # noqa: BLE001 - a failed warm-up only costs the first decision its compile time
            _log.exception("finder warm-up failed")
        led = False
        while not self._stop.is_set():
            self.heartbeat = self.clock.monotonic()
            leading = self._leading.is_set()
            try:
                busy = bool(self._queue) and self.synced and leading
                item = self._inbox.get_nowait() if busy else self._inbox.get(timeout=0.2)
                self._handle(item)
                while True:
                    self._handle(self._inbox.get_nowait())
            except queue.Empty:
                pass
            except Exception:  # noqa: BLE001 - one bad event must not stop the controller
                _log.exception("event handling failed")
            if not leading:
                self._follow()
            if not self.synced or not leading:
                continue
            if self._catch_up_due:
                if not self._catch_up():
                    continue
                self._catch_up_due = False
            if not led or (self._active_retry_at is not None and self.clock.monotonic() >= self._active_retry_at):
                led = True  # first turn as leader (a standby writes no condition), or a failed write's retry is due
                self._refresh_active()
                self.quota_yield.rebuilt = False  # the yields the API shows are this leader's to end
            try:
                self._reactivate_due()
            except Exception:  # noqa: BLE001 - as a reconcile's
                _log.exception("reactivating yielded Workloads failed")
            self._promote_due()
            if self._queue:
                key, _ = self._queue.popitem(last=False)
                try:
                    self.reconcile(key)
                except Exception:  # noqa: BLE001 - a bug on one Workload must not stop the others
                    _log.exception("reconcile failed", workload=key)
                    self._requeue_later(key)
            if self.before.enabled and not self._queue and self.clock.monotonic() >= self._before_due:
                self._before_due = self.clock.monotonic() + self.BEFORE_QUOTA_SECONDS
                try:
                    self.before_quota()
                except Exception:  # noqa: BLE001 - as a reconcile's
                    _log.exception("deciding before quota failed")
            if self._yield_due and not self._queue:  # once the queue is drained: one pass over the waiters seen
                try:
                    self._give_quota_back()
                except Exception:  # noqa: BLE001 - as a reconcile's
                    _log.exception("giving parked quota back failed")


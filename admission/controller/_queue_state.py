"""The queue manager in a cluster: the controller feeds the same ``Outlook`` the simulator feeds,
from its cache, and keeps what a new leader must not lose on the Workloads themselves.

Fed from each Workload the cache sees (``QueueState.observe``, after the ledger has read it):

- ``started`` when Kueue holds quota and Atoll's check is ``Ready`` (at admission, as the
  simulator's deployed path does): its GPUs per node are the planned nodes the ledger read from
  Atoll's podSetUpdates, its start the ``Admitted`` condition's time (else the check's);
- ``finished`` when Kueue marks it ``Finished`` with reason ``Succeeded``: the runtime from its
  start to the ``Finished`` condition's time is learned for its LocalQueue and size band. Any
  other reason (``Failed``, ``OutOfSync``, ``OwnerNotFound``: Kueue v0.19.2's
  ``WorkloadFinishedReason*`` in ``apis/kueue/v1beta2/workload_types.go``) ends it unlearned: a job
  that crashed after a minute says nothing about how long its queue's jobs run, and a crash loop
  would otherwise pull the estimate towards zero;
- ``forget`` when it is evicted, deactivated or deleted: nothing is learned.

Persisted on the gang's Workload, in the same server-side apply as Atoll's check entry and its
``atoll.dev/TopologyWaiting`` condition (``conditions``), as two more conditions of Atoll's own
(``status`` is written only by controllers granted ``workloads/status``, and Kueue's writes
carry only the condition types it manages, so it leaves these alone):

- ``atoll.dev/TopologyReserved``: ``True`` while the gang holds a reservation; the message is
  ``Reservation.encode()`` (domain, nodes, since, expected free time);
- ``atoll.dev/TopologyDomainHeld``: ``True`` while a domain is held for the gang as preempted
  Workloads leave it; the message names the flavor, level, domain and nodes.

Both turn ``False`` when the reservation or hold ends (placed, rejected). Every controller mirrors
them from what it reads (the leader after its own writes, a standby as it watches, a restarted
controller from its first list), so a new leader holds the same reservations and holds as the
last one. The per-flavor bound was kept when a reservation was written; it is not applied again.

What a restart loses: runtimes are learned again only from the ``Finished`` Workloads the API
still shows (Kueue and the job's owner delete them in time), and a Workload that finished while
no controller ran is learned only if it is still there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from admission import vocabulary
from admission.controller._cache import ClusterCache, FlavorProblem
from admission.controller._ledger import Ledger
from admission.controller._queue_names import queue_name_of
from admission.controller._queueing import max_execution_seconds
from admission.controller._records import parse_time, rfc3339
from admission.controller._workloads import WorkloadError, check_entry, condition_true, holds_quota, parse_workload
from admission.kube import Obj, object_key
from admission.queue import Held, Outlook, Plan, Reservation, Running

__all__ = ["HELD_CONDITION", "RESERVED_CONDITION", "QueueState", "decode_hold", "encode_hold"]

RESERVED_CONDITION = vocabulary.RESERVED_CONDITION
"""Atoll's condition on a gang's Workload while it holds a reservation (message: ``Reservation.encode``)."""
HELD_CONDITION = vocabulary.HELD_CONDITION
"""Atoll's condition on a gang's Workload while a domain is held for it during a preemption."""


def encode_hold(flavor: str, level: str, domain: str, nodes: Iterable[str]) -> str:
    return json.dumps({"flavor": flavor, "level": level, "domain": domain, "nodes": sorted(nodes)}, sort_keys=True, separators=(",", ":"))


def decode_hold(text: str) -> tuple[str, str, str, tuple[str, ...]] | None:
    """(flavor, level, domain, nodes) written by ``encode_hold``; None for anything unreadable."""
    try:
        d = json.loads(text)
        nodes = d["nodes"]
        if not isinstance(nodes, list):
            return None
        return str(d["flavor"]), str(d.get("level") or ""), str(d.get("domain") or ""), tuple(sorted(str(n) for n in nodes))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


EVICTED_BY_CHECK = "AdmissionCheck"
"""The ``Evicted`` reason Kueue writes when an admission check asks for a Retry (``WorkloadEvictedByAdmissionCheck``)."""


def between_tries(obj: Obj) -> bool:
    """Is the Workload between its own tries: evicted by an admission check's Retry (``Evicted``
    True, reason ``AdmissionCheck``, which Kueue keeps until it reserves quota again), still
    active and not finished? Kueue queues it again after a backoff (``requeueState``), so it has
    no quota for seconds to minutes; its reservation stays in force through that window, or every
    Retry would hand the domain it drains to whoever holds quota meanwhile."""
    cond = _condition(obj, "Evicted")
    return (cond is not None and cond.get("status") == "True" and cond.get("reason") == EVICTED_BY_CHECK
            and not condition_true(obj, "Finished") and (obj.get("spec") or {}).get("active", True) is not False)


FINISHED_SUCCEEDED = "Succeeded"
"""The ``Finished`` reason of a job that ran to its end (Kueue's ``WorkloadFinishedReasonSucceeded``)."""


def _condition(obj: Obj, kind: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def _since(obj: Obj, kind: str) -> float | None:
    cond = _condition(obj, kind)
    if cond is None or cond.get("status") != "True":
        return None
    return parse_time(str(cond.get("lastTransitionTime") or ""))


class QueueState:
    """The controller's ``Outlook``, fed from its cache, and the hints ``atoll queue`` and the
    gauges read (``QueueHints``)."""

    def __init__(self, cache: ClusterCache, ledger: Ledger, holds: dict[str, dict[str, tuple[str, ...]]]) -> None:
        self.cache = cache
        self.ledger = ledger
        self.holds = holds
        """The Decider's holds (flavor → gang uid → nodes): mirrored from the Workloads too."""
        self.outlook = Outlook()
        self._learned: set[str] = set()
        """uids whose runtime is learned (a Finished Workload is seen again on every relist)."""
        self._keys: dict[str, str] = {}
        """uid → key of each Workload seen."""
        self._where: dict[str, tuple[str, str]] = {}
        """gang uid → (level, domain) of the domain held for it."""

    # ------------------------------------------------------------------ fed from the cache

    def observe(self, obj: Obj, check_names: frozenset[str]) -> None:
        """Feed the outlook from one Workload as the cache now has it, and mirror what it carries."""
        meta = obj.get("metadata") or {}
        key, uid = object_key(obj), str(meta.get("uid"))
        self._keys[uid] = key
        if condition_true(obj, "Finished"):
            self.outlook.left(key)
            self._finished(obj, key, uid)
            self._drop_holds(uid)
            self.outlook.reservations.release(key)
            return
        entry = check_entry(obj, check_names) if check_names else None
        quota = holds_quota(obj)
        running = quota and entry is not None and entry.get("state") == "Ready"
        if running and entry is not None:
            if self.outlook.running(key) is None:
                got = self._running(obj, uid, entry)
                if got is not None:
                    self.outlook.started(key, got)
        else:
            self.outlook.forget(key)
        self._mirror(obj, key, uid)
        in_force = quota or between_tries(obj)  # a reservation blocks while its holder holds quota or is between its tries
        self.outlook.reservations.quota(key, in_force)  # suspended: what it held wakes parked Workloads (``wake_suspended``)

    def gone(self, obj: Obj) -> None:
        """The Workload was deleted: it is forgotten (nothing learned), its reservation and hold end."""
        key, uid = object_key(obj), str((obj.get("metadata") or {}).get("uid"))
        self.outlook.forget(key)
        self.outlook.left(key)
        self.outlook.spans.forget(key)
        self.outlook.reservations.release(key)
        self._drop_holds(uid)
        self._keys.pop(uid, None)
        self._learned.discard(uid)

    def relisted(self, items: Iterable[Obj]) -> None:
        """A full list of Workloads: those not in it are gone."""
        live = {object_key(o) for o in items}
        uids = {str((o.get("metadata") or {}).get("uid")) for o in items}
        for r in self.outlook.reservations.all():
            if r.holder not in live:
                self.outlook.reservations.release(r.holder)
        for uid in [u for u in self._keys if u not in uids]:
            gone = self._keys.pop(uid)
            self.outlook.forget(gone)
            self.outlook.left(gone)
            self.outlook.spans.forget(gone)
            self._drop_holds(uid)
            self._learned.discard(uid)

    def _running(self, obj: Obj, uid: str, entry: Mapping[str, Any]) -> Running | None:
        by_flavor: dict[str, dict[str, int]] = {}
        for r in self.ledger.reservations():
            if r.uid != uid:
                continue
            nodes = by_flavor.setdefault(r.flavor, {})
            for node, pods in r.planned:
                nodes[node] = nodes.get(node, 0) + pods * r.per_pod.gpu
        if not by_flavor:
            return None
        flavor = max(sorted(by_flavor), key=lambda f: sum(by_flavor[f].values()))  # one flavor per Running: the most GPUs
        start = _since(obj, "Admitted") or parse_time(str(entry.get("lastTransitionTime") or "")) or 0.0
        return Running(flavor, tuple(sorted((n, g) for n, g in by_flavor[flavor].items() if g > 0)), start, queue_name_of(obj),
                       max_execution_seconds(obj))

    def _finished(self, obj: Obj, key: str, uid: str) -> None:
        if uid in self._learned:
            self.outlook.forget(key)
            return
        self._learned.add(uid)
        end = _since(obj, "Finished")
        if end is None or (_condition(obj, "Finished") or {}).get("reason") != FINISHED_SUCCEEDED:
            self.outlook.forget(key)
            return
        running = self.outlook.running(key)
        if running is not None:
            if end > running.started:
                self.outlook.finished(key, end)
            else:  # clocks that disagree: nothing sure to learn
                self.outlook.forget(key)
            return
        # seen only finished (a restart, or it ran while another leader led): learned from its own times
        start = _since(obj, "Admitted")
        if start is None or end <= start:
            return
        try:
            view = parse_workload(dict(obj), gpu_resource=self.cache.gpu_resource)
        except WorkloadError:
            return
        gpus = sum(p.count * p.per_pod.gpu for p in view.podsets)
        if gpus > 0:
            self.outlook.estimator.learn(queue_name_of(obj), gpus, end - start)

    # ------------------------------------------------------------------ kept on the Workload

    def _mirror(self, obj: Obj, key: str, uid: str) -> None:
        cond = _condition(obj, RESERVED_CONDITION)
        if cond is not None and cond.get("status") == "True":
            r = Reservation.decode(key, str(cond.get("message") or ""))
            if r is not None and self.outlook.reservations.held_by(key) != r:
                self.outlook.reservations.add(r, limit=len(self.outlook.reservations) + 1)
        elif self.outlook.reservations.held_by(key) is not None:
            self.outlook.reservations.release(key)
        cond = _condition(obj, HELD_CONDITION)
        hold = decode_hold(str(cond.get("message") or "")) if cond is not None and cond.get("status") == "True" else None
        if hold is not None:
            flavor, level, domain, nodes = hold
            if self.holds.get(flavor, {}).get(uid) != nodes:
                self._drop_holds(uid)
                self.holds.setdefault(flavor, {})[uid] = nodes
            self._where[uid] = (level, domain)
        elif cond is not None:
            self._drop_holds(uid)

    def _drop_holds(self, uid: str) -> None:
        for held in self.holds.values():
            held.pop(uid, None)
        self._where.pop(uid, None)

    def conditions(self, obj: Obj, outcome: str, plan: Plan | None, now: float) -> list[dict[str, Any]]:
        """Atoll's reservation and hold conditions to write with a decision of ``outcome`` on
        ``obj`` (the reservation the Decider holds for it, the hold it has or ``plan`` starts);
        none for a Workload that never had them."""
        key, uid = object_key(obj), str((obj.get("metadata") or {}).get("uid"))
        res = self.outlook.reservations.held_by(key) if outcome == "wait" else None
        hold: str | None = None
        if plan is not None:
            hold = encode_hold(plan.flavor, plan.level, plan.domain, plan.nodes)
            self._where[uid] = (plan.level, plan.domain)
        elif outcome == "wait":
            for flavor, held in sorted(self.holds.items()):
                if uid in held:
                    level, domain = self._where.get(uid, ("", ""))
                    hold = encode_hold(flavor, level, domain, held[uid])
                    break
        gen = (obj.get("metadata") or {}).get("generation")
        return [c for c in (_cond(obj, RESERVED_CONDITION, res.encode() if res is not None else None, "Reserved", now, gen),
                            _cond(obj, HELD_CONDITION, hold, "DomainHeld", now, gen)) if c is not None]

    # ------------------------------------------------------------------ QueueHints

    def held(self, uid: str) -> Held | None:
        key = self._keys.get(uid)
        r = self.outlook.reservations.held_by(key) if key is not None else None
        if r is not None:
            return Held(r.flavor, r.level or "", "/".join(r.path), r.expected_free, "reservation")
        for flavor, held in sorted(self.holds.items()):
            if uid in held:
                level, domain = self._where.get(uid, ("", ""))
                return Held(flavor, level, domain, None, "preemption")
        return None

    def expected_start(self, uid: str) -> float | None:
        """The reservation's expected free time, else the expected start last weighed for it
        (wait-or-span or the speed floor: with ``waitCountsQueue``, after the Workloads queued ahead)."""
        key = self._keys.get(uid)
        if key is None:
            return None
        r = self.outlook.reservations.held_by(key)
        if r is not None and r.expected_free is not None:
            return r.expected_free
        return self.outlook.expected.get(key)

    def held_domains(self, flavor: str) -> int:
        return len(self.outlook.reservations.on(flavor)) + len(self.holds.get(flavor, {}))

    def reservations(self, flavor: str) -> tuple[int, int]:
        """Reservations held on ``flavor``, (active, suspended): a suspended one's holder holds no quota."""
        held = self.outlook.reservations.on(flavor)
        suspended = sum(1 for r in held if self.outlook.reservations.suspended(r.holder))
        return len(held) - suspended, suspended

    def idle_held_gpus(self, flavor: str) -> int:
        """GPUs reservations hold on ``flavor`` that are free now: no pod bound on them, and none
        owed by an admitted Workload (its planned pods are about to take them)."""
        try:
            snap = self.cache.snapshot(flavor).fork()
        except (FlavorProblem, ValueError):
            return 0
        self.ledger.apply(snap, report=False)
        return self.outlook.reservations.idle(flavor, snap)


def _cond(obj: Obj, kind: str, message: str | None, reason: str, now: float, generation: Any) -> dict[str, Any] | None:
    have = _condition(obj, kind)
    if message is None and have is None:
        return None
    status = "True" if message is not None else "False"
    since = have.get("lastTransitionTime") if have is not None and have.get("status") == status else None
    out: dict[str, Any] = {"type": kind, "status": status, "reason": reason if message is not None else "Released",
                           "message": message if message is not None else "none held", "lastTransitionTime": since or rfc3339(now)}
    if generation is not None:
        out["observedGeneration"] = generation
    return out

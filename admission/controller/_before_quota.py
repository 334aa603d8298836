"""Deciding a Workload before Kueue reserves its quota (``DecisionSettings.decide_before_quota``).

Why: Kueue admits in the quota reservation's own write only when every admission check is
already ``Ready`` (``prepareWorkload`` in Kueue's pkg/scheduler/scheduler.go); a check answered
after the reservation costs another status write, two watch deliveries and Kueue's second
reconcile, with the quota held all along. Nothing in Kueue v0.19.2 stops a check controller from
answering earlier: its Workload controller lists a check on a Workload without a reservation
when the check applies to every flavor of the ClusterQueue (``AdmissionChecksForWorkload``,
pkg/workload/workload.go), resets check entries only on eviction (``resetChecksOnEviction``,
pkg/workload/evict/evict.go), and its webhook checks only the podSetUpdates' names and that a
Ready entry's podSetUpdates do not change (pkg/webhooks/workload_webhook.go).

Which Workloads: active, no ``QuotaReserved``, Atoll's entry ``Pending``, no requeue delay
running, no PodSet with ``minCount`` (partial admission could change the counts), seen waiting
for quota for ``before_quota_settle_seconds`` (Kueue reserves from its own copy of the Workload:
one older than Atoll's Ready resets the entry to Pending, and the decision is made again), queued in a
ClusterQueue (through its LocalQueue) whose resource group covering the accelerator has exactly
one flavor, and that flavor is Atoll's: the flavor Kueue will assign is then known. Per
ClusterQueue at most ``before_quota_depth`` hold a pre-decision at once, the first in Kueue's
order (priority, then creation).

A pre-decision is booked in the ledger as if the Workload held quota on that flavor (``view``),
for ``before_quota_hold_seconds``: a Workload still without quota then is set back to
``Pending`` and its domain freed, and it is not pre-decided again for as long. A Workload that
holds quota and would wait for room frees every hold on its flavors first. A pre-decision's
podSetUpdates carry the flavor it assumed (``vocabulary.DECIDED_BEFORE_QUOTA``): at the
reservation the flavor and pod counts Kueue assigned are compared with it, from the Workload
alone, so a controller restarted after the reservation compares too; a mismatch sets the entry
to ``Retry`` (Kueue evicts and requeues; the next reservation is decided anew). A restarted
controller adopts the pre-decisions it finds (entry ``Ready`` carrying Atoll's decision id, no
quota) with a fresh hold.

With ``before_quota_list_own``, a Workload whose quota Kueue's scheduler reserved before Kueue's
Workload controller listed the checks on it (the scheduler does not wait for them:
``HasAllRequiredChecks`` only decides whether the reservation's write also admits) is decided at
once, Atoll's entry added by the decision's own write (``own_check`` names it); Kueue's listing
then finds it there and keeps it (``syncAdmissionCheckConditions``), and its next reconcile
admits. A listing that lands first makes Atoll's write conflict (409): it decides again.

A release races Kueue's scheduler: it applies its reservation from its own copy of the Workload
with forced ownership (``PatchAdmissionStatus``, pkg/workload/patching/patching.go), so a copy
taken while the entry still said ``Ready`` writes that entry back, with ``Admitted=True``, after
the release, and the Workload would run on the released placement, which may have been given
to another Workload since. Such a reservation carries the released decision's id: it is
answered with a ``Retry`` (Kueue evicts it and it is decided anew), and the ledger does not
book it meanwhile (``view``). Not covered: a controller restarted between the release and that
reservation no longer knows the decision was released (the ledger then books it from the
admitted Workload, and a Workload given the same nodes meanwhile shows up as a shortfall).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from admission import vocabulary
from admission.controller._cache import ClusterCache
from admission.controller._queue_names import cluster_queue_of
from admission.controller._settings import Settings
from admission.controller._workloads import WorkloadError, check_entry, condition_true, parse_workload
from admission.kube import CLUSTER_QUEUES, LOCAL_QUEUES, Clock, Obj, object_key

__all__ = ["BeforeQuota", "PreDecision"]


@dataclass(frozen=True, slots=True)
class PreDecision:
    """A placement decided before quota, held until ``deadline`` (wall clock)."""

    uid: str
    cluster_queue: str
    flavor: str
    counts: tuple[tuple[str, int], ...]
    deadline: float


class BeforeQuota:
    """Which Workloads may be decided before quota, their holds, and the reserved view the ledger books."""

    def __init__(self, cache: ClusterCache, settings: Settings, clock: Clock) -> None:
        self.cache = cache
        self.settings = settings
        self.clock = clock
        d = settings.decisions
        self.enabled = d.decide_before_quota
        self.hold_seconds = d.before_quota_hold_seconds
        self.depth = d.before_quota_depth
        self.settle = d.before_quota_settle_seconds
        self.held: dict[str, PreDecision] = {}
        """Workload key → its pre-decision, while it has no quota."""
        self.mismatched: dict[str, str] = {}
        """Workload key → why its reservation does not match its pre-decision (answered with a Retry)."""
        self.released: dict[str, tuple[str, str]] = {}
        """Workload key → (uid, decision id) of its pre-decision released while it had no quota."""
        self.counts: dict[str, int] = {"decided": 0, "released-expired": 0, "released-room": 0, "retry-mismatch": 0,
                                       "retry-released": 0}
        """Pre-decisions made, holds released (their time up, or room needed), and reservations
        answered with a Retry (a mismatch, or a reservation of a released placement)."""
        self.on_count: Callable[[str], None] = lambda _kind: None
        """Told each count as it is made (the controller's ``atoll_before_quota`` counter)."""
        self._checked: set[str] = set()
        """Keys whose current reservation was compared with the pre-decision its entry carries."""
        self._queued: dict[str, dict[str, tuple[int, str, str]]] = {}
        """ClusterQueue → candidate key → its place in Kueue's order (-priority, created, key)."""
        self._cq_of: dict[str, str] = {}
        self._since: dict[str, float] = {}
        """Key → when (monotonic) it was first seen waiting for quota, Pending."""
        self._not_before: dict[str, float] = {}
        """Key → when it may be pre-decided again (after a release, or a decision that was not a placement)."""
        self.list_own = d.before_quota_list_own

    # ------------------------------------------------------------------ queues and flavors

    def cluster_queue(self, obj: Obj) -> str | None:
        """The ClusterQueue the Workload's LocalQueue points at (None: unknown yet)."""
        return cluster_queue_of(obj, self.cache.objects[LOCAL_QUEUES])  # watched: no API read per Workload

    def flavor(self, cluster_queue: str) -> str | None:
        """The one flavor of ``cluster_queue``'s resource group covering the accelerator, when it
        is an Atoll flavor; None otherwise (Kueue could assign another one)."""
        doc = self.cache.profiles
        gpus = self.cache.gpu_resource
        accelerators = {gpus} if isinstance(gpus, str) else set(gpus)

        found = self.cache.objects[CLUSTER_QUEUES].get(cluster_queue)  # watched: no API read per pass
        if found is None:
            return None
        spec = found.get("spec") or {}
        groups = [g for g in spec.get("resourceGroups") or [] if accelerators & set(g.get("coveredResources") or [])]
        names = {str(f.get("name")) for g in groups for f in g.get("flavors") or []}
        name = names.pop() if len(names) == 1 else None
        return name if name is not None and doc is not None and name in doc.flavors else None

    def own_check(self, obj: Obj, check_names: Iterable[str]) -> str | None:
        """The name of Atoll's check that Kueue will list on ``obj``, a Workload holding quota
        whose entries Kueue's Workload controller has not listed yet: its ClusterQueue's checks
        that apply to a flavor of its admission, as Kueue's ``AdmissionChecksForWorkload`` picks
        them (pkg/workload/workload.go; a check with no ``onFlavors`` applies to every flavor).
        None unless exactly one of ``check_names`` applies."""
        admission = (obj.get("status") or {}).get("admission") or {}
        cq = str(admission.get("clusterQueue") or "")
        if not cq:
            return None
        found = self.cache.objects[CLUSTER_QUEUES].get(cq)  # watched: no API read per Workload
        spec = (found.get("spec") or {}) if found is not None else {}
        checks: dict[str, frozenset[str]] = {str(n): frozenset() for n in spec.get("admissionChecks") or []}
        for c in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []:
            checks[str(c.get("name"))] = frozenset(str(f) for f in c.get("onFlavors") or [])
        flavors = {str(f) for a in admission.get("podSetAssignments") or [] for f in (a.get("flavors") or {}).values()}
        names = set(check_names)
        applying = [n for n, on in checks.items() if n in names and (not on or on & flavors)]
        return applying[0] if len(applying) == 1 else None

    # ------------------------------------------------------------------ what the watch shows

    def _waits_for_quota(self, obj: Obj, check_names: Iterable[str]) -> bool:
        spec = obj.get("spec") or {}
        if condition_true(obj, "QuotaReserved") or condition_true(obj, "Finished") or spec.get("active", True) is False:
            return False
        if any(ps.get("minCount") is not None for ps in spec.get("podSets") or []):
            return False
        requeue_at = ((obj.get("status") or {}).get("requeueState") or {}).get("requeueAt")
        return not requeue_at  # Kueue clears it once the delay is over

    def saw(self, obj: Obj, check_names: Iterable[str]) -> bool:
        """Take a Workload's current state; True when its reservation does not match its
        pre-decision (the caller queues it: ``mismatched`` says why)."""
        if not self.enabled:
            return False
        key = object_key(obj)
        uid = str((obj.get("metadata") or {}).get("uid"))
        entry = check_entry(obj, check_names) or {}
        pre = self.held.get(key)
        if pre is not None and pre.uid != uid:
            self.held.pop(key)
            pre = None
        self._unqueue(key)
        if condition_true(obj, "QuotaReserved"):
            self._since.pop(key, None)
            self.held.pop(key, None)
            released = self.released.pop(key, None)
            if entry.get("state") != "Ready" or key in self._checked:
                return False
            self._checked.add(key)
            why = None
            if released is not None and released == (uid, _decision_id(entry)):
                why = ("quota reserved from a copy of the Workload older than the release of its decision made before quota "
                       "(its placement may have been given to another Workload)")
                self._count("retry-released")
            else:
                assumed = _assumed_flavor(entry)
                if assumed is not None:  # the entry says what was assumed: a controller restarted since compares too
                    pre = PreDecision(uid, "", assumed, _counts(obj), 0.0)
                why = self._mismatch(obj, pre) if pre is not None else None
                if why:
                    self._count("retry-mismatch")
            if why:
                self.mismatched[key] = why
                return True
            return False
        self._checked.discard(key)
        if not self._waits_for_quota(obj, check_names):
            self.held.pop(key, None)
            return False
        if entry.get("state") == "Ready":
            if pre is None and _atolls(entry):  # a restart: adopt it, with a fresh hold (released at once if it cannot be booked)
                cq = self.cluster_queue(obj)
                flavor = self.flavor(cq) if cq else None
                self.held[key] = PreDecision(uid, cq or "", flavor or "", _counts(obj),
                                             self.clock.now() + (self.hold_seconds if flavor else 0.0))
            return False
        self.held.pop(key, None)
        if entry.get("state") == "Pending":
            cq = self.cluster_queue(obj)
            if cq is not None:
                meta = obj.get("metadata") or {}
                self._since.setdefault(key, self.clock.monotonic())
                self._cq_of[key] = cq
                self._queued.setdefault(cq, {})[key] = (-int((obj.get("spec") or {}).get("priority") or 0),
                                                         str(meta.get("creationTimestamp") or ""), key)
        return False

    def _count(self, kind: str) -> None:
        self.counts[kind] += 1
        self.on_count(kind)

    def gone(self, key: str) -> None:
        self._unqueue(key)
        self._since.pop(key, None)
        self.held.pop(key, None)
        self.mismatched.pop(key, None)
        self.released.pop(key, None)
        self._checked.discard(key)
        self._not_before.pop(key, None)

    def _unqueue(self, key: str) -> None:
        cq = self._cq_of.pop(key, None)
        if cq is not None:
            self._queued.get(cq, {}).pop(key, None)

    @staticmethod
    def _mismatch(obj: Obj, pre: PreDecision) -> str | None:
        try:
            view = parse_workload(obj)
        except WorkloadError as exc:
            return f"the reserved Workload cannot be read: {exc}"
        flavors = sorted(set(view.flavors.values()))
        if flavors and flavors != [pre.flavor]:
            return f"quota reserved on flavor {','.join(flavors)}, decided before quota for {pre.flavor}"
        counts = tuple(sorted((p.name, p.count) for p in view.podsets))
        if counts != tuple(sorted((n, c) for n, c in pre.counts if c)):
            return f"quota reserved for pods {dict(counts)}, decided before quota for {dict(pre.counts)}"
        return None

    # ------------------------------------------------------------------ holds

    def next_candidates(self) -> list[tuple[str, str, str]]:
        """(key, ClusterQueue, flavor) of the Workloads to pre-decide now: per ClusterQueue the
        first in Kueue's order, up to ``depth`` holds at once, none in its wait after a release."""
        now, settled = self.clock.now(), self.clock.monotonic() - self.settle
        out: list[tuple[str, str, str]] = []
        holding: dict[str, int] = {}
        for pre in self.held.values():
            holding[pre.cluster_queue] = holding.get(pre.cluster_queue, 0) + 1
        for cq, queued in sorted(self._queued.items()):
            slots = self.depth - holding.get(cq, 0)
            if slots <= 0 or not queued:
                continue
            flavor = self.flavor(cq)
            if flavor is None:
                continue
            ready = (v for k, v in queued.items()
                     if k not in self.held and self._not_before.get(k, 0.0) <= now and self._since.get(k, float("inf")) <= settled)
            out.extend((k, cq, flavor) for _, _, k in heapq.nsmallest(slots, ready))
        return out

    def reserved_view(self, obj: Obj, cluster_queue: str, flavor: str) -> Obj:
        """``obj`` as Kueue's reservation on ``flavor`` will make it: what Atoll decides on."""
        gpus = self.cache.gpu_resource
        resources = [gpus] if isinstance(gpus, str) else list(gpus)
        assignments = [{"name": ps.get("name"), "count": int(ps.get("count", 1)),
                        "flavors": {r: flavor for r in (*resources, "cpu", "memory")}}
                       for ps in (obj.get("spec") or {}).get("podSets") or []]
        status = dict(obj.get("status") or {})
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": assignments}
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "QuotaReserved"] + [
            {"type": "QuotaReserved", "status": "True", "reason": "DecidedBeforeQuota", "message": "assumed by Atoll"}]
        return {**obj, "status": status}

    def view(self, obj: Obj) -> Obj:
        """What the ledger books for ``obj``: its reserved view while it holds a pre-decision; no
        placement while its reservation waits for the ``Retry`` of a mismatch (its entry read as
        ``Retry``); else itself."""
        if not self.held and not self.mismatched:
            return obj
        key = object_key(obj)
        if key in self.mismatched:
            status = dict(obj.get("status") or {})
            status["admissionChecks"] = [{**a, "state": "Retry"} if a.get("podSetUpdates") and _decision_id(a) else a
                                         for a in status.get("admissionChecks") or []]
            return {**obj, "status": status}
        pre = self.held.get(key)
        if pre is None or not pre.flavor or condition_true(obj, "QuotaReserved") or pre.uid != str((obj.get("metadata") or {}).get("uid")):
            return obj
        return self.reserved_view(obj, pre.cluster_queue, pre.flavor)

    def hold(self, obj: Obj, cluster_queue: str, flavor: str) -> None:
        self.released.pop(object_key(obj), None)
        self._count("decided")
        self.held[object_key(obj)] = PreDecision(str((obj.get("metadata") or {}).get("uid")), cluster_queue, flavor, _counts(obj),
                                                 self.clock.now() + self.hold_seconds)

    def rest(self, key: str) -> None:
        """Not pre-decided again for ``hold_seconds`` (its hold was released, or it could not be placed)."""
        self._not_before[key] = self.clock.now() + self.hold_seconds

    def release(self, key: str, entry: dict[str, Any] | None = None, uid: str = "", why: str = "") -> None:
        """``key``'s hold is gone (released, or its write did not land): it rests (``rest``).
        ``entry``: its check entry as it was when written back to ``Pending`` (``why``: "expired"
        or "room"), so that a reservation carrying that decision is caught (``saw``)."""
        self.held.pop(key, None)
        self.rest(key)
        if entry is not None:
            decision = _decision_id(entry)
            if decision:
                self.released[key] = (uid, decision)
            self._count(f"released-{why}")

    def due(self) -> list[str]:
        now = self.clock.now()
        return sorted(k for k, pre in self.held.items() if pre.deadline <= now)

    def on_flavors(self, flavors: Iterable[str]) -> list[str]:
        wanted = set(flavors)
        return sorted(k for k, pre in self.held.items() if pre.flavor in wanted)


def _counts(obj: Obj) -> tuple[tuple[str, int], ...]:
    return tuple((str(ps.get("name")), int(ps.get("count", 1))) for ps in (obj.get("spec") or {}).get("podSets") or [])


def _annotation(entry: dict[str, Any], name: str) -> str | None:
    """The first value of annotation ``name`` on the podSetUpdates of this check entry; None when none carries it."""
    return next((str(a[name]) for u in entry.get("podSetUpdates") or [] if name in (a := u.get("annotations") or {})), None)


def _decision_id(entry: dict[str, Any]) -> str:
    """The decision id Atoll's podSetUpdates of this check entry carry ("" when none)."""
    return _annotation(entry, vocabulary.DECISION_ID) or ""


def _assumed_flavor(entry: dict[str, Any]) -> str | None:
    """The flavor a decision made before quota assumed, as its podSetUpdates say; None when the
    entry was not decided before quota."""
    return _annotation(entry, vocabulary.DECIDED_BEFORE_QUOTA)


def _atolls(entry: dict[str, Any]) -> bool:
    return _annotation(entry, vocabulary.DECISION_ID) is not None

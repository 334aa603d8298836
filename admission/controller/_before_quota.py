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
holds quota and would wait for room frees every hold on its flavors first. At the reservation
the flavor and pod counts Kueue assigned are compared with the pre-decision's: a mismatch sets
the entry to ``Retry`` (Kueue evicts and requeues; the next reservation is decided anew). A
restarted controller adopts the pre-decisions it finds (entry ``Ready`` carrying Atoll's
decision id, no quota) with a fresh hold.

Not covered: Kueue's scheduler applies its reservation from its own copy of the Workload with
forced ownership (``PatchAdmissionStatus``, pkg/workload/patching/patching.go), so a release
written while that copy still says ``Ready`` can be overwritten and the Workload admitted on the
released placement; the ledger then counts it again from the admitted Workload (as after a
restart) and a Workload given the same nodes meanwhile shows up as a shortfall.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from admission import vocabulary
from admission.controller._cache import ClusterCache
from admission.controller._settings import Settings
from admission.controller._workloads import WorkloadError, check_entry, condition_true, parse_workload
from admission.kube import CLUSTER_QUEUES, LOCAL_QUEUES, Clock, ClusterPort, Obj, errors, object_key

__all__ = ["BeforeQuota", "PreDecision"]

QUEUE_TTL_SECONDS = 30.0
"""How long a LocalQueue's ClusterQueue and a ClusterQueue's flavors are taken as read."""


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

    def __init__(self, port: ClusterPort, cache: ClusterCache, settings: Settings, clock: Clock) -> None:
        self.port = port
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
        self._queued: dict[str, dict[str, tuple[int, str, str]]] = {}
        """ClusterQueue → candidate key → its place in Kueue's order (-priority, created, key)."""
        self._cq_of: dict[str, str] = {}
        self._since: dict[str, float] = {}
        """Key → when (monotonic) it was first seen waiting for quota, Pending."""
        self._not_before: dict[str, float] = {}
        """Key → when it may be pre-decided again (after a release, or a decision that was not a placement)."""
        self._lq: dict[str, tuple[float, str | None]] = {}
        self._cq: dict[str, tuple[float, str | None]] = {}

    # ------------------------------------------------------------------ queues and flavors

    def _get(self, memo: dict[str, tuple[float, str | None]], key: str, read: Callable[[], str | None]) -> str | None:
        now = self.clock.monotonic()
        hit = memo.get(key)
        if hit is not None and now - hit[0] < QUEUE_TTL_SECONDS:
            return hit[1]
        try:
            value: str | None = read()
        except errors.NotFound:
            value = None
        except errors.ApiError:
            return hit[1] if hit is not None else None
        memo[key] = (now, value)
        return value

    def cluster_queue(self, obj: Obj) -> str | None:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        ns, lq = str(meta.get("namespace") or ""), str(spec.get("queueName") or "")
        if not lq:
            return None

        def read() -> str | None:
            cq = (self.port.get(LOCAL_QUEUES, lq, namespace=ns).get("spec") or {}).get("clusterQueue")
            return str(cq) if cq else None
        return self._get(self._lq, f"{ns}/{lq}", read)

    def flavor(self, cluster_queue: str) -> str | None:
        """The one flavor of ``cluster_queue``'s resource group covering the accelerator, when it
        is an Atoll flavor; None otherwise (Kueue could assign another one)."""
        doc = self.cache.profiles
        gpus = self.cache.gpu_resource
        accelerators = {gpus} if isinstance(gpus, str) else set(gpus)

        def read() -> str | None:
            spec = self.port.get(CLUSTER_QUEUES, cluster_queue).get("spec") or {}
            groups = [g for g in spec.get("resourceGroups") or [] if accelerators & set(g.get("coveredResources") or [])]
            names = {str(f.get("name")) for g in groups for f in g.get("flavors") or []}
            return names.pop() if len(names) == 1 else None
        name = self._get(self._cq, cluster_queue, read)
        return name if name is not None and doc is not None and name in doc.flavors else None

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
            if pre is None:
                return False
            self.held.pop(key)
            why = self._mismatch(obj, pre) if entry.get("state") == "Ready" else None
            if why:
                self.mismatched[key] = why
                return True
            return False
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

    def gone(self, key: str) -> None:
        self._unqueue(key)
        self._since.pop(key, None)
        self.held.pop(key, None)
        self.mismatched.pop(key, None)
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
        """What the ledger books for ``obj``: its reserved view while it holds a pre-decision, else itself."""
        if not self.held:
            return obj
        pre = self.held.get(object_key(obj))
        if pre is None or not pre.flavor or condition_true(obj, "QuotaReserved") or pre.uid != str((obj.get("metadata") or {}).get("uid")):
            return obj
        return self.reserved_view(obj, pre.cluster_queue, pre.flavor)

    def hold(self, obj: Obj, cluster_queue: str, flavor: str) -> None:
        self.held[object_key(obj)] = PreDecision(str((obj.get("metadata") or {}).get("uid")), cluster_queue, flavor, _counts(obj),
                                                 self.clock.now() + self.hold_seconds)

    def rest(self, key: str) -> None:
        """Not pre-decided again for ``hold_seconds`` (its hold was released, or it could not be placed)."""
        self._not_before[key] = self.clock.now() + self.hold_seconds

    def release(self, key: str) -> None:
        """``key``'s hold is gone (released, or its write did not land): it rests (``rest``)."""
        self.held.pop(key, None)
        self.rest(key)

    def due(self) -> list[str]:
        now = self.clock.now()
        return sorted(k for k, pre in self.held.items() if pre.deadline <= now)

    def on_flavors(self, flavors: Iterable[str]) -> list[str]:
        wanted = set(flavors)
        return sorted(k for k, pre in self.held.items() if pre.flavor in wanted)


def _counts(obj: Obj) -> tuple[tuple[str, int], ...]:
    return tuple((str(ps.get("name")), int(ps.get("count", 1))) for ps in (obj.get("spec") or {}).get("podSets") or [])


def _atolls(entry: dict[str, Any]) -> bool:
    return any(vocabulary.DECISION_ID in (u.get("annotations") or {}) for u in entry.get("podSetUpdates") or [])

"""Parked Workloads give their quota back to a Workload waiting for quota in their ClusterQueue or cohort.

Kueue counts a Workload's quota as used from ``QuotaReserved`` on, its checks pending or not, so a
Workload parked by ``--park-waiting`` (check ``Pending``) keeps every Workload behind it out of
that quota. When the informer shows a Workload waiting for quota (active, not finished, no
``QuotaReserved``) whose LocalQueue points at the ClusterQueue of a parked Workload, or at one of
the same cohort, parked Workloads give their quota back, newest parked first, until the GPUs they
give back cover the waiting Workload's.

**How: deactivated for a moment, not a Retry.** Atoll sets the parked Workload's ``spec.active``
to false, with the annotation ``atoll.dev/quota-yield`` (the waiter), in one merge patch at the
resourceVersion it read. Kueue evicts it and releases its quota, and does not queue it while it is
inactive; its check stays ``Pending`` (eviction resets only the other states). Atoll sets
``spec.active`` back to true, and removes the annotations, once no Workload that waits for quota in
its ClusterQueue or cohort is ahead, in Kueue's order, of the place the give left it at (its
priority, the give's time), counting only waiters the quota could ever let in (``due``), or at
the latest ``decisions.quota_yield_max_seconds`` after the give (12 h by default), or, under the
profile's ``queueing.lendParked`` (off by default), as soon as the placement it was parked on
fits now (``admission.queue._lend``; it is then decided afresh): a waiter that
the quota could admit but that never is admitted, because it waits for a domain too, say, would
otherwise keep it out for ever. One reactivated by that bound goes back ahead of the Workloads
queued before the give, so its need is dropped: it is decided afresh when it holds quota again,
and may give it back again (parked again undecided, it could not, and could keep them out). Kueue
queues a reactivated Workload at its creation time (``Ordering.GetQueueOrderTimestamp``,
pkg/workload/workload.go, v0.19.2: only an admission-check or PodsReady eviction moves it; the
reactivation itself is ``Requeued=True``, reason ``Reactivated``, in ``WorkloadReconciler.
Reconcile``). Reactivated as soon as its waiter held quota, it went back ahead of every Workload
that had queued while it was parked and took the next quota freed; measured in the simulator
(``docs/numbers.md``, parking on GB200). ``atoll.dev/quota-yield-until``, which older releases
wrote, is removed with the rest and no longer read.

A Retry does not work for this on Kueue v0.19, measured on the real-Kueue tier:

- a Retry with ``requeueAfterSeconds`` delays the eviction itself, not the requeue. Kueue's
  ``WorkloadReconciler.Reconcile`` (pkg/controller/core/workload_controller.go) first turns the
  Retry into ``status.requeueState.requeueAt`` (``workload.NeedsRequeueAtUpdate``), then returns
  "Waiting for backoff to finish" while ``requeueAt`` is ahead, and reaches
  ``reconcileCheckBasedEviction`` only after it: the quota stays held for the whole delay;
- the evicted Workload is then queued at once (``WorkloadReconciler.Update``, the
  ``FromQuotaReservedOrAdmittedToPending`` case: ``requeueAt`` has passed, so ``immediate``, and
  ``AddOrUpdateWorkloadWithoutLock``), while the waiter, parked in the ClusterQueue's inadmissible
  set, comes back only through ``QueueAssociatedInadmissibleWorkloadsAfter`` →
  ``notifyRetryInadmissibleWithoutLock``, which the requeuer batches (``requeueBatchPeriod``, 1 s,
  pkg/cache/queue/inadmissible_workloads.go). The scheduler's next cycle finds the evicted
  Workload alone at the head and reserves its quota again; the waiter, tried a second later, is
  inadmissible again. ``workload.Ordering.GetQueueOrderTimestamp`` would order an
  AdmissionCheck-evicted Workload by its eviction time, behind the waiter, but the two are never
  in the heap together. A Retry without ``requeueAfterSeconds`` loses the same race.

An inactive Workload is dropped from Kueue's queues and cache in ``WorkloadReconciler.Update``
(the ``!active`` case, which also asks for the inadmissible Workloads to be retried), and a
reactivated one is queued again (``Requeued=True``, reason ``Reactivated``).

The annotation makes a yield survive a restart: a new leader reactivates every Workload that
carries it and is inactive (``rebuild``), by the same rule, the give's time read from Kueue's
``Evicted`` condition (none: at once); one without it (deactivated by someone else) is never
touched.

Their need stays on file (``WaitingRoom.set_aside``, as in the simulator): when one holds quota
again and nothing it waits for changed, it is parked again without a decision (``Controller.
reconcile``); an event that would have woken it has it decided afresh (under
``decisions.quota_yield_back_when_fits`` only if its placement fits now, ``settle_givers``). After a restart the need is
not on file, so it is decided once more, as every parked Workload is.

The churn is bounded by these rules:

- a parked Workload gives its quota back **at most once per decision**: once it has given it back
  and parked again undecided, it keeps its quota until an event has it decided afresh (under
  ``decisions.quota_yield_in_turn``, off by default, it may give again, and only the oldest one
  parked for a reservation of its flavor keeps its quota: ``WaitingRoom.may_give``; the bound is
  then the reactivation rule above, not decisions);
- a Workload waiting for quota takes GPUs up to what it asks for while it waits, however many
  passes see it (Kueue may take a while to admit it);
- a Workload that gave its quota back and waits for it again takes none from another parked one
  while its need is on file (``WaitingRoom.is_aside``, the simulator's rule too: holding quota it
  would park again undecided; one whose need an event dropped takes quota as any waiter; under
  ``decisions.quota_yield_back_when_fits`` an event drops it only if the placement it was parked
  on fits now, ``settle_givers``),
  and one holding a reservation (``reserveAfterSeconds``) keeps its quota, as in the simulator;
- nothing is given to a waiter Kueue's scheduler has not tried yet (no ``QuotaReserved=False``:
  Kueue may admit it in a moment), nor to one that the flavor of the parked Workload lacks the free GPUs for, or
  that the quota the parked Workloads could give back would not let in: it would only wait in
  their place (the simulator's rule);
- waiters are weighed in Kueue's order (priority, then creation or admission-check eviction
  time); one served is counted as taking its GPUs for the waiters after it, in that pass and,
  while it still waits, in later ones (Kueue admits it first);
- the quota is counted on one flavor as Kueue counts it (``_quota.CohortQuota``): the waiter's
  ClusterQueue may use its own unused quota and what its cohort could lend (the other
  ClusterQueues' unused nominal quota up to their ``lendingLimit``, up to its own
  ``borrowingLimit``). A parked Workload gives its quota back only if that raises the quota the
  waiter could use (not one whose quota its ClusterQueue keeps from the cohort), until what they
  give covers what the waiter asks for; usage is the larger of what the ClusterQueue's status
  reports and what the Workloads holding quota add up to (the status lags).

So two parked Workloads of one ClusterQueue cannot hand the quota to each other back and forth:
quota yields are bounded by decisions, and decisions by events.

Which ClusterQueue a waiting Workload queues in is read from the controller's watched
LocalQueues (``local_queues``), never fetched per Workload: a pass may weigh every Workload waiting
in the cluster, and one API read each (or each pass, for a LocalQueue that does not exist) would
make the decision loop as slow as the API server. A Workload whose LocalQueue is not in the cache
is in no ClusterQueue yet. ClusterQueues (cohort, quota, reported usage) are read from the
controller's watched ClusterQueues too (``cluster_queues``), never fetched per pass; one not in the
cache gives nothing back (the Workload keeps its quota, as before).

The module runs past 400 lines because who gives to whom (``choose``) and when it comes back
(``due``) read the same queue order and cohort quota; split, each half would carry the other's.
``choose`` itself is a pass in named steps: the givers (``_givers``), whether a waiter is weighed
(``_weighed``), and serving it (``_serve``: the givers on offer by flavor, ``_offers``; the cohort
quota, ``_quota_on``; which givers let it in, ``_pick``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import structlog

from admission.controller._preempting import queue_rules
from admission.controller._queue_names import cluster_queue_of
from admission.controller._quota import CohortQuota, flavor_quota, reserved_by_workloads
from admission.controller._records import parse_time
from admission.controller._workloads import condition_true
from admission.controller._yield_index import Kind, ReservedIndex, WaiterIndex, gpus_asked, kueue_order, refused_by_kueue
from admission.kube import Obj, object_key
from admission.queue import Need
from admission.vocabulary import QUOTA_YIELD, QUOTA_YIELD_UNTIL

__all__ = ["YIELD_ANNOTATION", "YIELD_UNTIL_ANNOTATION", "QuotaYield", "Yielded", "waits_for_quota", "yield_patch"]

_log = structlog.get_logger("atoll.yield")

YIELD_ANNOTATION = QUOTA_YIELD
"""On a Workload Atoll deactivated to give its quota back: the Workload (namespace/name) it gave way to."""
YIELD_UNTIL_ANNOTATION = QUOTA_YIELD_UNTIL
"""Written by older releases (epoch seconds by which they reactivated it); removed on reactivation, no longer read."""


def waits_for_quota(obj: Obj) -> bool:
    """A Workload Kueue has not reserved quota for yet, which could take some (active, not finished, queued)."""
    spec = obj.get("spec") or {}
    return (bool(spec.get("queueName")) and spec.get("active", True) is not False and not condition_true(obj, "QuotaReserved")
            and not condition_true(obj, "Finished"))


@dataclass(frozen=True)
class Yielded:
    """A Workload deactivated to give its quota back: to whom, when (epoch seconds: its place in
    Kueue's order had the give been an eviction), on which flavor ("": unknown), and the need it
    was parked on (None: unknown, as after a restart; ``queueing.lendParked`` asks it again)."""

    waiter: str
    at: float
    flavor: str
    need: Need | None = None


def yield_patch(obj: Obj, waiter: str | None) -> Obj:
    """The merge patch that deactivates ``obj`` for ``waiter`` (at the resourceVersion read), or,
    with ``waiter`` None, reactivates it and removes the annotations."""
    meta = obj.get("metadata") or {}
    if waiter is None:
        return {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                             "annotations": {YIELD_ANNOTATION: None, YIELD_UNTIL_ANNOTATION: None}}, "spec": {"active": True}}
    return {"metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": {YIELD_ANNOTATION: waiter}},
            "spec": {"active": False}}


def _flavor(obj: Obj, gpu: str | tuple[str, ...]) -> str:
    """The flavor the Workload's GPUs are admitted on ("" when none is named)."""
    names = (gpu,) if isinstance(gpu, str) else gpu
    for ps in ((obj.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        for resource, flavor in (ps.get("flavors") or {}).items():
            if resource in names:
                return str(flavor)
    return ""


@dataclass
class _Pass:
    """One ``choose`` pass: its givers (key, GPUs, ClusterQueue, flavor; newest parked first), each
    flavor's free GPUs, the givers taken, the ClusterQueues and cohort quotas read, the pairs so far."""

    gpu: str | tuple[str, ...]
    givers: list[tuple[str, int, str, str]] = field(default_factory=list)
    free: dict[str, int | None] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    queues: dict[str, Obj | None] = field(default_factory=dict)
    quotas: dict[tuple[str, str], CohortQuota] = field(default_factory=dict)
    out: list[tuple[str, str]] = field(default_factory=list)
    floor: dict[str, int] = field(default_factory=dict)
    """ClusterQueue → the fewest GPUs a waiter of it given none yet asked for, tried every giver, and found nothing, since the last serve."""
    dead: set[Kind] = field(default_factory=set)
    """Kinds of waiter that found nothing since the last serve."""


class QuotaYield:
    """Which parked Workloads give their quota back to which waiting one (the rules above)."""

    def __init__(self, objects: Mapping[str, Obj], local_queues: Mapping[str, Obj], cluster_queues: Mapping[str, Obj],
                 gpu_resource: Callable[[], str | tuple[str, ...]], free_gpus: Callable[[str], int | None] = lambda flavor: None,
                 max_seconds: float = math.inf) -> None:
        self.objects = objects
        self.local_queues = local_queues
        """LocalQueues by ``namespace/name``, as the controller watches them."""
        self.cluster_queues = cluster_queues
        """ClusterQueues by name, as the controller watches them."""
        self.max_seconds = max_seconds
        """The longest a yield lasts (s, from the give): ``decisions.quota_yield_max_seconds``."""
        self.timed_out: set[str] = set()
        self.lent: set[str] = set()
        """Yields ``due`` ends because the giver's placement fits now (``queueing.lendParked``)
        while a Workload queued before the give still waits (the caller takes them out too)."""
        """Yields ``due`` ends by ``max_seconds`` while a Workload queued before the give still waits
        (the caller takes them out once it has reactivated them)."""
        self.gpu_resource = gpu_resource
        self.free_gpus = free_gpus
        """Free GPUs of a flavor now (None: unknown, and then nothing is given on it)."""
        self.waiters: dict[str, None] = {}
        """Workloads seen waiting for quota, until they hold it or are gone (weighed in Kueue's order: ``_kueue_order``)."""
        self.yielded: dict[str, Yielded] = {}
        """Workloads deactivated to give their quota back, until Atoll reactivates them."""
        self._served: dict[str, int] = {}
        """GPUs given back so far to each Workload still waiting for quota: it takes no more than it asks for."""
        self._refused: set[str] = set()
        """Waiters Kueue's scheduler has refused quota (``refused_by_kueue``)."""
        self._claims: dict[str, tuple[str, str, int]] = {}
        """Waiters given their GPUs' worth, still waiting: (ClusterQueue, flavor, GPUs) each will take
        when Kueue admits it, counted as taken for the other waiters until it holds quota or is gone."""
        self._reserved: dict[tuple[str, str], int] | None = None
        """Within a pass: GPUs of quota reserved per (ClusterQueue, flavor), from the Workloads."""
        self.rebuilt = False
        self._index = WaiterIndex(self.cluster_queue_of, waits_for_quota)
        """Each waiter's and parked Workload's read, kept between passes."""
        self.reserved: ReservedIndex | None = None
        """The quota reserved, kept between passes, when the caller tells it every Workload that
        changed (``ReservedIndex.touch``); None: added up over every Workload on each pass."""

    def saw(self, obj: Obj) -> bool:
        """Note ``obj`` if it waits for quota; True when it is new to the waiters, or Kueue has
        just refused it quota (``refused_by_kueue``): a pass over the waiters is due. One that
        no longer waits (it holds quota, finished, or was deactivated) is no longer a waiter."""
        key = object_key(obj)
        if not waits_for_quota(obj):
            if key in self.waiters:
                self.forget(key)
            return False
        refused = refused_by_kueue(obj)
        due = key not in self.waiters or (refused and key not in self._refused)
        self.waiters[key] = None
        self._index.read(key, obj, self.gpu_resource())
        if refused:
            self._refused.add(key)
        return due

    def warm(self) -> None:
        """Rank the waiters read so far in Kueue's order (``WaiterIndex.ranked``), and add up the
        quota every Workload listed so far reserves (``ReservedIndex.totals``), as the first
        quota-yield pass would, so that pass neither sorts nor reads them all."""
        if all(w in self._index.reads for w in self.waiters):
            self._index.ranked(self.waiters, self._served)
        if self.reserved is not None:
            gpu = self.gpu_resource()
            self.reserved.totals(self.objects, (gpu,) if isinstance(gpu, str) else gpu)

    def forget(self, key: str) -> None:
        self.waiters.pop(key, None)
        self._index.drop(key)
        self._served.pop(key, None)
        self._claims.pop(key, None)
        self._refused.discard(key)

    def gave(self, key: str, waiter: str, at: float, flavor: str, need: Need | None = None) -> None:
        """``key``, parked on ``need``, was deactivated for ``waiter`` at ``at`` (epoch seconds)."""
        self.yielded[key] = Yielded(waiter, at, flavor, need)

    def rebuild(self) -> int:
        """After a start or a leader change: every inactive Workload that carries Atoll's yield
        annotations is owed its reactivation. Returns how many."""
        self.rebuilt = True
        for key, obj in self.objects.items():
            ann = ((obj.get("metadata") or {}).get("annotations") or {})
            if YIELD_ANNOTATION not in ann or (obj.get("spec") or {}).get("active", True) is not False or key in self.yielded:
                continue
            evicted = next((c for c in (obj.get("status") or {}).get("conditions") or []
                            if isinstance(c, dict) and c.get("type") == "Evicted" and c.get("status") == "True"), None)
            at = parse_time(str((evicted or {}).get("lastTransitionTime") or "")) or 0.0  # none: nothing is ahead, reactivated at once
            self.yielded[key] = Yielded(str(ann[YIELD_ANNOTATION]), at, "")
        return len(self.yielded)

    def due(self, now: float, lends: Callable[[str, Yielded], str] | None = None) -> list[str]:
        """Yielded Workloads to reactivate at ``now`` (epoch seconds): no Workload that waits for
        quota in their ClusterQueue or cohort, and that the quota could ever let in, is ahead in
        Kueue's order (priority, then queue-order time; a tie counts as ahead) of the place the
        give left them at: their priority and the give's time. Kueue queues a reactivated
        Workload at its creation time, so reactivated sooner it would go back ahead of the
        Workloads that queued while it was parked. Or the give is ``max_seconds`` old, whoever
        still waits (those are in ``timed_out`` until the next call). Or its profile lends parked
        quota and its placement fits now: ``lends(key, yielded)`` is then its ``lendParked``
        (``fits``, or ``starts``: only while the quota its ClusterQueue could use now covers it,
        each taking its share in turn), else ``off`` (those are in ``lent`` until the next call).
        One no longer inactive (reactivated by someone else) or gone is forgotten."""
        out: list[str] = []
        self.timed_out.clear()
        self.lent.clear()
        self._reserved = None
        quotas: dict[tuple[str, str], CohortQuota | None] = {}
        queues: dict[str, Obj | None] = {}
        waiting: list[tuple[tuple[int, float], str, str | None]] | None = None
        for key, y in list(self.yielded.items()):
            obj = self.objects.get(key)
            if obj is None or (obj.get("spec") or {}).get("active", True) is not False:
                del self.yielded[key]
                continue
            if waiting is None:
                gpu = self.gpu_resource()
                waiting = [(r.order[:2], w, r.cluster_queue) for w in self.waiters
                           if (wobj := self.objects.get(w)) is not None and waits_for_quota(wobj) and (r := self._index.read(w, wobj, gpu))]
            place = (self._kueue_order(key)[0], y.at)
            cq = self.cluster_queue_of(obj)
            if not any(order <= place and w != key and wcq is not None and cq is not None
                       and (wcq == cq or self._same_cohort(wcq, cq, queues)) and self._could_ever_admit(w, wcq, y.flavor, queues)
                       for order, w, wcq in waiting):
                out.append(key)
            elif now - y.at >= self.max_seconds:
                out.append(key)
                self.timed_out.add(key)
                _log.warning("quota yield ended by its time bound while a Workload queued before the give still waits for quota",
                             workload=key, gave_to=y.waiter, seconds=round(now - y.at), bound=self.max_seconds)
            elif lends is not None and y.need is not None and self._lent_now(key, y, lends(key, y), cq, queues, quotas):
                out.append(key)
                self.lent.add(key)
                _log.info("quota yield ended: the giver's placement fits now (lendParked)", workload=key, gave_to=y.waiter)
        return out

    def _lent_now(self, key: str, y: Yielded, mode: str, cq: str | None, queues: dict[str, Obj | None],
                  quotas: dict[tuple[str, str], CohortQuota | None]) -> bool:
        """``due``'s lend: ``fits`` lends; ``starts`` only while the quota ``cq`` could use on the
        flavor now covers what ``key`` asks for (taken from what the next one sees)."""
        if mode == "fits":
            return True
        if mode != "starts" or cq is None or not y.flavor:
            return False
        gpu = self.gpu_resource()
        want = gpus_asked(self.objects.get(key) or {}, gpu)
        if want is None:
            return False
        if (cq, y.flavor) not in quotas:
            quota = self._cohort_quota(cq, y.flavor, queues, gpu)
            for name in quota.queues if quota is not None else (cq,):
                quotas[(name, y.flavor)] = quota
        quota = quotas[(cq, y.flavor)]
        if quota is None or quota.available(cq) < want:
            return False
        quota.release(cq, -want)
        return True

    def _could_ever_admit(self, key: str, cq: str, flavor: str, queues: dict[str, Obj | None]) -> bool:
        """The quota ``cq`` could use on ``flavor`` with nothing reserved anywhere covers what
        Workload ``key`` asks for (unknown flavor or unreadable ClusterQueue: True). A Workload
        that asks for more is never admitted, and Kueue's BestEffortFIFO lets others pass it."""
        if not flavor:
            return True
        gpu = self.gpu_resource()
        obj = self.objects.get(key)
        want = self._index.read(key, obj, gpu).want if obj is not None else None
        if want is None:
            return True
        quota = self._cohort_quota(cq, flavor, queues, gpu, empty=True)
        return quota is None or want <= quota.available(cq)

    def shares_quota(self, cluster_queue: str, flavor: str) -> Callable[[str, str], bool]:
        """For the quota line of a Workload deciding in ``cluster_queue`` on ``flavor``: whether a
        waiter (its key, its ClusterQueue) of another ClusterQueue waits for quota it shares: the
        two are in one cohort and Kueue could admit the waiter there (``_could_ever_admit``).
        ClusterQueues are read once per line."""
        queues: dict[str, Obj | None] = {}

        def shares(key: str, theirs: str) -> bool:
            return self._same_cohort(theirs, cluster_queue, queues) and self._could_ever_admit(key, theirs, flavor, queues)
        return shares

    def choose(self, parked: Iterable[str], set_aside: Callable[[str], bool], reserving: Callable[[str], bool]) -> list[tuple[str, str]]:
        """(parked Workload, waiting Workload it gives its quota to) pairs. A waiter takes GPUs up
        to what it asks for while it waits, not more however many passes see it. ``parked``: keys in the order they were parked
        that may give their quota back (``WaitingRoom.may_give``: at most once per decision); ``set_aside(key)``:
        it gave its quota back and waits to hold it again; ``reserving(key)``: it holds a reservation.
        Each version of a Workload is read once (``_yield_index``), and the pass stops once no
        waiter left could be served."""
        gpu = self.gpu_resource()
        run = self._givers(list(parked), reserving, gpu)
        if not run.givers:
            return run.out
        self._reserved = None
        if self._index.stale(self.waiters):  # a waiter came, went or moved since the last pass: each read again where new
            self._read_waiters(gpu)
        ranked = self._index.ranked(self.waiters, self._served)
        stop = self._index.stop_after(run.dead, run.floor)
        for i, w in enumerate(ranked):
            if len(run.taken) == len(run.givers) or i > stop:
                break  # every giver has given, or no waiter left could be served
            kind = self._weighed(w, run, set_aside)
            if kind is None:
                continue
            served, tried_all = self._serve(w, kind, run)
            if served:
                run.floor.clear()
                run.dead.clear()
            else:
                cq, want, given = kind
                run.dead.add(kind)
                if not given and tried_all:  # the most every giver could make free is short of its want: so for any want as large
                    run.floor[cq] = min(want, run.floor.get(cq, want))
            stop = self._index.stop_after(run.dead, run.floor)
        return run.out

    def _givers(self, order: list[str], reserving: Callable[[str], bool], gpu: str | tuple[str, ...]) -> _Pass:
        """``choose``'s pass, with its givers: the parked Workloads (``order``, oldest first) that
        hold quota on a flavor whose free GPUs are known and hold no reservation, newest first."""
        self._index.keep_givers(set(order))
        run = _Pass(gpu)
        for p in reversed(order):
            pobj = self.objects.get(p)
            if pobj is None:
                continue
            g = self._index.giver(p, pobj, gpu, _flavor)
            if not g.holds or g.gpus is None or reserving(p):
                continue
            if g.flavor not in run.free:
                run.free[g.flavor] = self.free_gpus(g.flavor) if g.flavor else None
            if run.free[g.flavor] is not None:
                run.givers.append((p, g.gpus, g.cluster_queue, g.flavor))
        return run

    def _read_waiters(self, gpu: str | tuple[str, ...]) -> None:
        """Each waiter read again where its version is new; one that holds quota now, or is gone, is no longer a waiter."""
        for w in list(self.waiters):
            wobj = self.objects.get(w)
            if wobj is None or not waits_for_quota(wobj):
                self.forget(w)
            else:
                self._index.read(w, wobj, gpu)

    def _weighed(self, w: str, run: _Pass, set_aside: Callable[[str], bool]) -> Kind | None:
        """Waiter ``w``'s kind if this pass weighs it: Kueue tried it, it waits for quota, gave none
        back and is not set aside, asks for GPUs in a known ClusterQueue, was not served in full,
        and none of its kind (nor of its ClusterQueue asking for no more) found nothing since the last serve."""
        obj = self.objects.get(w)
        if obj is None:
            return None
        r = self._index.read(w, obj, run.gpu)
        if not r.waits or set_aside(w) or w in self.yielded or not r.refused:
            return None
        cq, want = r.cluster_queue, r.want
        if cq is None or want is None or want <= 0:
            return None
        given = self._served.get(w, 0)
        if given >= want:
            return None  # served in full already: it takes no more while it waits
        kind = (cq, want, given)
        if self._index.stop_early and (kind in run.dead or (not given and cq in run.floor and want >= run.floor[cq])):
            return None  # one of its kind, or of its ClusterQueue asking for no more, found nothing, and nothing changed since
        return kind

    def _serve(self, w: str, kind: Kind, run: _Pass) -> tuple[bool, bool]:
        """Give waiter ``w`` (``kind``) its want on the first flavor, the newest parked Workload's
        first, whose givers let it in. Returns whether it was served, and whether every giver was
        weighed (none left untried by reaching the want early)."""
        cq, want, given = kind
        tried_all = True
        for flavor, group in self._offers(cq, want, run).items():
            quota = self._quota_on(w, cq, flavor, run)
            if quota is None:
                continue
            picked, gain, reached = self._pick(quota, group, cq, given, want)
            tried_all = tried_all and not reached
            if not picked:
                continue
            for p in picked:
                run.taken.add(p)
                run.out.append((p, w))
            given += gain
            self._served[w] = given
            if given < want:
                self._index.served(w, (cq, want, given))
            quota.release(cq, -want)  # Kueue admits it first: the next waiter sees the quota it takes
            if given >= want:
                self._claims[w] = (cq, flavor, want)
            return True, tried_all
        return False, tried_all

    def _offers(self, cq: str, want: int, run: _Pass) -> dict[str, list[tuple[str, int, str]]]:
        """The givers not taken yet of ``cq`` or its cohort, by flavor (the newest parked's first),
        on flavors with free GPUs for ``want``: on another the waiter would only wait in the parked one's place."""
        by_flavor: dict[str, list[tuple[str, int, str]]] = {}
        for p, gpus, pcq, flavor in run.givers:
            if p in run.taken or (pcq != cq and not self._same_cohort(pcq, cq, run.queues)):
                continue
            room = run.free[flavor]
            if room is None or room < want:
                continue
            by_flavor.setdefault(flavor, []).append((p, gpus, pcq))
        return by_flavor

    def _quota_on(self, w: str, cq: str, flavor: str, run: _Pass) -> CohortQuota | None:
        """The cohort quota ``cq`` could use on ``flavor`` this pass (None: a ClusterQueue unreadable):
        one object per cohort, so what one waiter is given and takes, the next sees; read first, it
        counts as taken what the waiters given their want in earlier passes (``_claims``) will take."""
        quota = run.quotas.get((cq, flavor))
        if quota is None:
            quota = self._cohort_quota(cq, flavor, run.queues, run.gpu)
            if quota is None:
                return None
            for name in quota.queues:
                run.quotas[(name, flavor)] = quota
            for other, (ocq, oflavor, ogpus) in list(self._claims.items()):  # _still_waits drops a claim whose waiter is gone
                if oflavor == flavor and ocq in quota.queues and other != w and self._still_waits(other):
                    quota.release(ocq, -ogpus)  # given its quota in an earlier pass, not admitted yet: Kueue admits it first
        return quota

    @staticmethod
    def _pick(quota: CohortQuota, group: list[tuple[str, int, str]], cq: str, given: int, want: int) -> tuple[list[str], int, bool]:
        """The givers of ``group``, in turn, whose quota raises what ``cq`` could use, until what they
        give covers ``want`` (less ``given``): (picked, GPUs of quota they make usable, whether the
        want was reached before every giver was weighed). None picked, their quota back, when all they
        make usable, with what is free, would not let the waiter in: with the quota over-used,
        reaching the want is not letting it in, and the waiter takes no more than its want."""
        before = now = quota.available(cq)
        picked: list[tuple[str, int, str]] = []
        reached = False
        for p, gpus, pcq in group:
            if given + now - before >= want:
                reached = True
                break
            quota.release(pcq, gpus)
            after = quota.available(cq)
            if after <= now:  # its quota stays with its own ClusterQueue (lendingLimit), or past the waiter's borrowingLimit
                quota.release(pcq, -gpus)
                continue
            picked.append((p, gpus, pcq))
            now = after
        if not picked or given + now < want:
            for _, gpus, pcq in picked:
                quota.release(pcq, -gpus)
            return [], 0, reached
        return [p for p, _, _ in picked], now - before, reached

    def _kueue_order(self, key: str) -> tuple[int, float, str]:
        """Where Kueue's BestEffortFIFO puts a waiter (``kueue_order``)."""
        return kueue_order(self.objects.get(key) or {}, key)

    def _still_waits(self, key: str) -> bool:
        obj = self.objects.get(key)
        if obj is None or not waits_for_quota(obj):
            self._claims.pop(key, None)
            return False
        return True

    def flavor_of(self, key: str) -> str:
        obj = self.objects.get(key)
        return _flavor(obj, self.gpu_resource()) if obj is not None else ""

    def cluster_queue_of(self, obj: Obj) -> str | None:
        """The ClusterQueue the Workload's LocalQueue points at (None: unknown yet)."""
        return cluster_queue_of(obj, self.local_queues)

    def _queue(self, name: str, queues: dict[str, Obj | None]) -> Obj | None:
        """The ClusterQueue as the watch shows it, taken once per pass (None: not in the cache)."""
        if name not in queues:
            queues[name] = self.cluster_queues.get(name)
        return queues[name]

    def _same_cohort(self, a: str, b: str, queues: dict[str, Obj | None]) -> bool:
        qa, qb = self._queue(a, queues), self._queue(b, queues)
        if qa is None or qb is None:
            return False
        ca = queue_rules(qa).cohort
        return ca is not None and ca == queue_rules(qb).cohort

    def _cohort_quota(self, cq: str, flavor: str, queues: dict[str, Obj | None], gpu: str | tuple[str, ...],
                      empty: bool = False) -> CohortQuota | None:
        """The GPU quota on ``flavor`` of ``cq`` and, if it is in a cohort, of every ClusterQueue of
        that cohort (taken from the watched ClusterQueues once per pass); None when a ClusterQueue is not in the cache. ``empty``: as
        if nothing held any of it."""
        obj = self._queue(cq, queues)
        if obj is None:
            return None
        cohort = queue_rules(obj).cohort
        members = {cq: obj}
        if cohort is not None:
            if _ALL not in queues:
                queues[_ALL] = None
                queues.update(self.cluster_queues)
            members = {name: q for name, q in queues.items() if q is not None and name != _ALL and queue_rules(q).cohort == cohort}
            members.setdefault(cq, obj)
        names = (gpu,) if isinstance(gpu, str) else gpu
        if self._reserved is None and not empty:
            self._reserved = (self.reserved.totals(self.objects, names) if self.reserved is not None
                              else reserved_by_workloads(self.objects.values(), names))
        out = CohortQuota(cohort)
        for name, q in members.items():
            quota = flavor_quota(q, flavor, names)
            if quota is not None:
                nominal, borrowing, lending, reported = quota
                out.add(name, nominal, borrowing, lending, 0 if empty else max(reported, (self._reserved or {}).get((name, flavor), 0)))
        return out if cq in out.queues else None


_ALL = "\x00all"
"""Key, among a pass's ClusterQueues, marking that every watched ClusterQueue was taken."""

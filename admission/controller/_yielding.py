"""Parked Workloads give their quota back to a Workload waiting for quota in their ClusterQueue or cohort.

Kueue counts a Workload's quota as used from ``QuotaReserved`` on, its checks pending or not, so a
Workload parked by ``--park-waiting`` (check ``Pending``) keeps every Workload behind it out of
that quota. When the informer shows a Workload waiting for quota (active, not finished, no
``QuotaReserved``) whose LocalQueue points at the ClusterQueue of a parked Workload, or at one of
the same cohort, parked Workloads turn their wait into a ``Retry``, newest parked first, until the
GPUs they give back cover the waiting Workload's. The Retry asks Kueue to requeue them after
the backoff their wait gave (``requeueAfterSeconds``), as the simulator does, so that the waiting
Workload has a chance to take the quota first. Kueue then evicts and requeues them
(``reconcileCheckBasedEviction`` in Kueue v0.19's pkg/controller/core/workload_controller.go: a
Workload holding quota with a check in ``Retry`` is evicted, and its quota released).

Their need stays on file (``WaitingRoom.set_aside``, as in the simulator): when one holds quota
again and nothing it waits for changed, it is parked again without a decision (``Controller.
reconcile``); an event that would have woken it has it decided afresh.

The churn is bounded by two rules:

- a parked Workload gives its quota back **at most once per decision**: once it has given it back
  and parked again undecided, it keeps its quota until an event has it decided afresh;
- a Workload waiting for quota takes GPUs up to what it asks for while it waits, however many
  passes see it (Kueue may take a while to admit it);
- a Workload that gave its quota back and waits for it again takes none from another parked one,
  and one holding a reservation (``reserveAfterSeconds``) keeps its quota, as in the simulator.

So two parked Workloads of one ClusterQueue cannot hand the quota to each other back and forth:
quota yields are bounded by decisions, and decisions by events.

A LocalQueue's ``spec.clusterQueue`` is immutable (Kueue's CRD validation), so it is read once
(``get``) and kept; a ClusterQueue's cohort is read on each pass that needs it. One that cannot be
read gives nothing back (the Workload keeps its quota, as before).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import structlog

from admission.controller._preempting import queue_rules
from admission.controller._workloads import WorkloadError, condition_true, parse_workload
from admission.kube import CLUSTER_QUEUES, LOCAL_QUEUES, ClusterPort, Obj, errors, object_key

__all__ = ["QuotaYield", "waits_for_quota"]

_log = structlog.get_logger("atoll.yield")


def waits_for_quota(obj: Obj) -> bool:
    """A Workload Kueue has not reserved quota for yet, which could take some (active, not finished, queued)."""
    spec = obj.get("spec") or {}
    return (bool(spec.get("queueName")) and spec.get("active", True) is not False and not condition_true(obj, "QuotaReserved")
            and not condition_true(obj, "Finished"))


class QuotaYield:
    """Which parked Workloads give their quota back to which waiting one (the rules above)."""

    def __init__(self, objects: Mapping[str, Obj], port: ClusterPort, gpu_resource: Callable[[], str | tuple[str, ...]]) -> None:
        self.objects = objects
        self.port = port
        self.gpu_resource = gpu_resource
        self.waiters: dict[str, None] = {}
        """Workloads seen waiting for quota, until they hold it or are gone (insertion order: oldest event first)."""
        self.given: set[str] = set()
        """Workloads that gave their quota back since their last decision (the first rule)."""
        self._served: dict[str, int] = {}
        """GPUs given back so far to each Workload still waiting for quota: it takes no more than it asks for."""
        self._local_queues: dict[str, str | None] = {}

    def saw(self, obj: Obj) -> bool:
        """Note ``obj`` if it waits for quota; True when it is new to the waiters."""
        if not waits_for_quota(obj):
            return False
        key = object_key(obj)
        new = key not in self.waiters
        self.waiters[key] = None
        return new

    def decided(self, key: str) -> None:
        """``key`` was decided afresh: it may give its quota back once more."""
        self.given.discard(key)

    def forget(self, key: str) -> None:
        self.given.discard(key)
        self.waiters.pop(key, None)
        self._served.pop(key, None)

    def choose(self, parked: Iterable[str], set_aside: Callable[[str], bool], reserving: Callable[[str], bool]) -> list[tuple[str, str]]:
        """(parked Workload, waiting Workload it gives its quota to) pairs. A waiter takes GPUs up
        to what it asks for while it waits, not more however many passes see it. ``parked``: keys in the order they were parked; ``set_aside(key)``:
        it gave its quota back and waits to hold it again; ``reserving(key)``: it holds a reservation."""
        waiters = list(self.waiters)
        order = list(parked)
        out: list[tuple[str, str]] = []
        taken: set[str] = set()
        cohorts: dict[str, str | None] = {}
        for w in waiters:
            obj = self.objects.get(w)
            if obj is None or not waits_for_quota(obj):
                self.waiters.pop(w, None)  # it holds quota now, or is gone: no longer a waiter
                self._served.pop(w, None)
                continue
            if set_aside(w):
                continue
            cq = self._cluster_queue(obj)
            try:
                want = sum(s.count * s.per_pod.gpu for s in parse_workload(obj, gpu_resource=self.gpu_resource()).podsets)
            except WorkloadError:
                continue
            if cq is None or want <= 0:
                continue
            given = self._served.get(w, 0)
            for p in reversed(order):  # newest parked first
                if given >= want:
                    break
                if p in taken or p in self.given or reserving(p):
                    continue
                pobj = self.objects.get(p)
                if pobj is None or not condition_true(pobj, "QuotaReserved") or condition_true(pobj, "Evicted"):
                    continue
                pcq = str(((pobj.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
                if not pcq:
                    continue
                if pcq != cq and not self._same_cohort(pcq, cq, cohorts):
                    continue
                try:
                    gpus = sum(s.count * s.per_pod.gpu for s in parse_workload(pobj, gpu_resource=self.gpu_resource()).podsets)
                except WorkloadError:
                    continue
                taken.add(p)
                out.append((p, w))
                given += gpus
            if given:
                self._served[w] = given
        return out

    def _cluster_queue(self, obj: Obj) -> str | None:
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str((obj.get("spec") or {}).get("queueName") or "")
        key = f"{ns}/{name}"
        if key not in self._local_queues:
            try:
                lq = self.port.get(LOCAL_QUEUES, name, namespace=ns)
            except errors.NotFound:
                return None  # not kept: the LocalQueue may be created later
            except errors.ApiError as exc:
                _log.warning("LocalQueue unreadable; no quota given back for its Workloads", local_queue=key, error=str(exc))
                return None
            self._local_queues[key] = str((lq.get("spec") or {}).get("clusterQueue") or "") or None
        return self._local_queues[key]

    def _same_cohort(self, a: str, b: str, cohorts: dict[str, str | None]) -> bool:
        for name in (a, b):
            if name not in cohorts:
                try:
                    cohorts[name] = queue_rules(self.port.get(CLUSTER_QUEUES, name)).cohort
                except errors.ApiError as exc:
                    _log.warning("ClusterQueue unreadable; its cohort gives no quota back", cluster_queue=name, error=str(exc))
                    cohorts[name] = None
        return cohorts[a] is not None and cohorts[a] == cohorts[b]

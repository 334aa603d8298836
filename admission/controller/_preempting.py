"""Preemption that clears a domain, applied: the plan (``plan_preemption``) built from the
controller's cache and ledger, the victims evicted through Kueue, the domain held for the gang.

Eviction goes through the mechanism Kueue honours for admission checks. Atoll's entry on each
victim is set to ``Retry`` (``StatusWriter.requeue``). Kueue's workload controller evicts any
Workload that holds quota and has a check in ``Retry``, admitted or not: ``Reconcile`` calls
``reconcileCheckBasedEviction`` under ``workload.HasQuotaReservation``, and that calls
``workloadevict.Evict`` with reason ``AdmissionCheck`` (kubernetes-sigs/kueue v0.19.2,
pkg/controller/core/workload_controller.go).

Nodes slower than the gang's class allows (``perfFloor``) are no room for it, in the plan as in its
decision: a cleared domain it then could not use would be held for nothing.

While the victims terminate, the domain's nodes are held for the gang: other Workloads' decisions
leave them out (``Decider.holds``). The hold ends when the gang is placed, rejected or deleted.
A gang that holds a domain plans no other preemption.

A victim of another ClusterQueue of the cohort is taken only while that ClusterQueue borrows, as
Kueue reclaims (``admission.queue.plan_preemption``): the GPUs it uses above its nominal quota on
the gang's flavor are its usage (the larger of its status's ``flavorsReservation`` and what the
cache's Workloads holding quota reserve, as ``QuotaYield`` counts it) less its ``nominalQuota``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from admission.controller._cache import ClusterCache, FlavorProblem
from admission.controller._decide import Verdict
from admission.controller._ledger import Ledger
from admission.controller._quota import flavor_quota, reserved_by_workloads
from admission.controller._records import parse_time
from admission.controller._workloads import condition_true
from admission.kube import WORKLOADS, Obj, object_key
from admission.queue import Candidate, Gang, Plan, QueueRules, plan_preemption
from policies import Profile

__all__ = ["Preemptor", "describe", "queue_rules", "victim_message"]

def queue_rules(obj: Obj) -> QueueRules:
    """A ClusterQueue's cohort and preemption policy; Kueue's defaults (``Never``) where unset."""
    spec = obj.get("spec") or {}
    pre = spec.get("preemption") or {}
    cohort = spec.get("cohortName") or spec.get("cohort")
    return QueueRules(str(cohort) if cohort else None, str(pre.get("withinClusterQueue") or "Never"),
                      str(pre.get("reclaimWithinCohort") or "Never"))


def _since(obj: Obj, kind: str) -> float | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return parse_time(str(cond.get("lastTransitionTime") or ""))
    return None


def _priority(obj: Obj) -> int:
    value = (obj.get("spec") or {}).get("priority")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


class Preemptor:
    """Plans (and, under ``preemptDomain: on``, applies) the clearing of one domain for a gang."""

    def __init__(self, cache: ClusterCache, ledger: Ledger, cluster_queues: Mapping[str, Obj],
                 borrowed: Callable[[str], Mapping[str, int]] | None = None) -> None:
        self.cache = cache
        self.ledger = ledger
        self.cluster_queues = cluster_queues
        """ClusterQueues by name (the controller's: as its watch shows them)."""
        self.borrowed = borrowed
        """Flavor → GPUs each ClusterQueue uses above its nominal quota there; None: read from the
        ClusterQueue objects and the cache (module docstring). The simulator counts its own."""

    def plan(self, obj: Obj, verdict: Verdict, profile: Profile, now: float) -> Plan | None:
        """The domain to clear for a Workload that waits for one domain; None when its profile
        does not preempt, it has more than one GPU PodSet or flavor, it fits already, or nothing
        can be cleared under its ClusterQueue's rules."""
        if profile.preempt_domain == "off" or verdict.outcome != "wait" or len(verdict.needs) != 1:
            return None
        need = verdict.needs[0]
        podsets = [p for p in (obj.get("spec") or {}).get("podSets") or [] if int(p.get("count") or 0) > 0]
        if need.level is None or len(podsets) != 1:
            return None
        status = obj.get("status") or {}
        meta = obj.get("metadata") or {}
        cq = str((status.get("admission") or {}).get("clusterQueue") or "")
        gang = Gang(object_key(obj), cq, _priority(obj), need.level, need.pods, need.gpus_per_pod,
                    parse_time(str(meta.get("creationTimestamp") or "")) or 0.0)
        try:
            snap = self.cache.snapshot(need.flavor).fork()
        except (FlavorProblem, ValueError):
            return None
        self.ledger.apply(snap, exclude_uid=str(meta.get("uid")))
        docs = self.cache.profiles
        cls = docs.classes.get(verdict.workload_class) if docs is not None and verdict.workload_class else None
        if cls is not None and cls.perf_floor > 0:  # the gang's decision leaves slower nodes out: so does the plan
            for i in np.flatnonzero(snap.perf < cls.perf_floor).tolist():
                snap.exclude(i)
        running = list(self._candidates(need.flavor, str(meta.get("uid")), now))
        objs = self._queues({cq, *(c.cluster_queue for c in running)})
        rules = {name: queue_rules(obj) if obj is not None else QueueRules() for name, obj in objs.items()}
        reclaims = rules.get(cq, QueueRules()).reclaim_within_cohort != "Never" and any(c.cluster_queue != cq for c in running)
        borrowed = self._borrowed(need.flavor, objs) if reclaims else {}
        return plan_preemption(snap, gang, running, rules, now, borrowed=borrowed)

    def _candidates(self, flavor: str, gang_uid: str, now: float) -> Iterable[Candidate]:
        """Admitted Workloads on ``flavor`` with their GPUs per node, not being evicted: running
        pods where they run (under ``domain`` enforcement the scheduler may have put them on other
        nodes of the domain than planned), pods still owed where planned (``Ledger.outstanding``)."""
        by_uid: dict[str, dict[str, int]] = {}
        keys: dict[str, str] = {}
        for r in self.ledger.reservations(flavor):
            if r.uid == gang_uid:
                continue
            keys[r.uid] = r.workload
            nodes = by_uid.setdefault(r.uid, {})
            bound = self.ledger.bound(r.decision_id) if r.decision_id else {}
            for node, pods in (*bound.get(r.podset, {}).items(), *self.ledger.outstanding(r, bound)):
                nodes[node] = nodes.get(node, 0) + pods * r.per_pod.gpu
        for uid, nodes in sorted(by_uid.items()):
            obj = self.cache.objects[WORKLOADS].get(keys[uid])
            if obj is None or condition_true(obj, "Evicted") or condition_true(obj, "Finished"):
                continue
            started = next((t for t in (_since(obj, "Admitted"), _since(obj, "QuotaReserved")) if t is not None), now)  # epoch 0 is a time
            cq = str(((obj.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
            yield Candidate(keys[uid], cq, _priority(obj), nodes, started, started)

    def _queues(self, names: Iterable[str]) -> dict[str, Obj | None]:
        """Each ClusterQueue as the watch shows it; None for one not in the cache: it allows nothing (``Never``)."""
        return {name: self.cluster_queues.get(name) for name in sorted(n for n in names if n)}

    def _borrowed(self, flavor: str, objs: Mapping[str, Obj | None]) -> dict[str, int]:
        """GPUs each ClusterQueue of a cohort uses above its nominal quota on ``flavor`` (module docstring)."""
        if self.borrowed is not None:
            return dict(self.borrowed(flavor))
        names = self.cache.gpu_resource
        reserved: dict[tuple[str, str], int] | None = None
        out: dict[str, int] = {}
        for name, obj in objs.items():
            quota = flavor_quota(obj, flavor, names) if obj is not None and queue_rules(obj).cohort is not None else None
            if quota is None:
                continue
            if reserved is None:
                reserved = reserved_by_workloads(self.cache.objects[WORKLOADS].values(), names)
            nominal, _, _, reported = quota
            out[name] = max(reported, reserved.get((name, flavor), 0)) - nominal
        return out


def describe(plan: Plan, *, dry_run: bool) -> str:
    """The note a decision record carries: the domain and who leaves it."""
    return (f"preemption{' (dry run, nothing evicted)' if dry_run else ''}: clears {plan.level.rsplit('/', 1)[-1]} {plan.domain} "
            f"by evicting {', '.join(plan.victims)} ({plan.freed_gpus} GPUs, {plan.gpu_hours_lost:.1f} GPU-hours of work lost, "
            f"highest priority {plan.highest_priority})")


def victim_message(plan: Plan, gang: str, priority: Any) -> str:
    return (f"Preempted by Atoll to clear {plan.level.rsplit('/', 1)[-1]} {plan.domain} for Workload {gang} (priority {priority}); "
            "Kueue evicts and requeues this Workload")

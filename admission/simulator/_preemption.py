"""Preemption that clears a domain (a profile's ``preemptDomain``), in the simulator, through the
controller's own code.

The plan is ``Preemptor.plan`` (``admission/controller/_preempting.py``), the very call the
controller makes, on the simulated controller's cache and ledger (``DeployedAtoll``): the same
snapshot with what admitted Workloads owe counted, the same candidates (the ledger's admitted
Workloads on the gang's flavor, each with its GPUs per planned node, its ``spec.priority`` and
its ``Admitted`` time) and the same ClusterQueue rules, read from a ClusterQueue object. It is
made when the controller makes it: after a decision that waits, unless the gang already holds a
domain; a decision that admits or rejects it ends its hold. The plan's note goes on the verdict,
so the decision record names the victims (``atoll simulate --records``).

Under ``on`` the domain's nodes are held for the gang (``Decider.holds``, as the controller's
``_preempt`` does) and the victims are evicted as Kueue evicts them after Atoll's check goes to
``Retry`` with no delay: at once, their pods gone (no termination grace is modelled), their quota
and GPUs released, Atoll's check back to ``Pending``. Each rejoins its flavor's queue ordered by
the eviction time (Kueue's queue-order timestamp of a Workload evicted by an admission check) and
is decided again like any queued job. The restart is from scratch: a victim that ran loses all
it ran (its preempted GPU-hours are its GPUs × the hours since it started) and runs its whole
duration again when it is admitted anew; its wait is counted from its arrival to its last start.
Under ``dry-run`` the plan is counted and recorded, and nothing is held or evicted.

One ClusterQueue per flavor, as the simulator's Kueue model has (``_sim``); every simulated
Workload names the same ClusterQueue object, whose ``spec.preemption`` is ``SimSettings``'
``within_cluster_queue``. A plan only takes victims on the gang's own flavor, so one object read
for all flavors is one ClusterQueue per flavor with the same rules. With a cohort
(``SimSettings.cohort``) each Workload names its own ClusterQueue, and each ClusterQueue object
names the cohort and its ``reclaimWithinCohort`` and ``borrowWithinCohort``: the plan reads them
as the controller does (``admission.queue.plan_preemption``: a victim of another ClusterQueue of
the cohort only under ``reclaimWithinCohort``, and only while that ClusterQueue borrows, its usage
above its nominal quota counted from the run's own quota, ``quotas``). Kueue's own preemption for quota is
``_kueue_preemption`` (``SimSettings.kueue_preemption``, off by default).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from admission.controller import Preemptor, Verdict, describe, rfc3339
from admission.kube import PODS, WORKLOADS
from admission.queue import Plan
from admission.simulator._cohort import COHORT_NAME, CohortShape, FlavorQuota

if TYPE_CHECKING:
    from admission.simulator._deployed import DeployedAtoll

__all__ = ["CLUSTER_QUEUE", "WITHIN_CLUSTER_QUEUE", "SimPreemption", "drop_events", "release_admitted"]

CLUSTER_QUEUE = "cluster-queue"
"""The ClusterQueue every simulated Workload names (``_port.workload_object``'s default)."""
WITHIN_CLUSTER_QUEUE = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
"""Kueue's ``spec.preemption.withinClusterQueue`` values."""


class SimPreemption:
    """The controller's preemption on a ``DeployedAtoll``: plans after decisions, victims to evict, what was lost."""

    def __init__(self, deployed: DeployedAtoll, mode: str, within_cluster_queue: str = "LowerPriority", cohort: CohortShape | None = None) -> None:
        if within_cluster_queue not in WITHIN_CLUSTER_QUEUE:
            raise ValueError(f"within_cluster_queue: {within_cluster_queue!r} is not one of {', '.join(WITHIN_CLUSTER_QUEUE)}")
        self.deployed = deployed
        self.mode = mode
        """The profile's ``preemptDomain``: ``on`` or ``dry-run``."""
        queues = {str(q["metadata"]["name"]): q for q in cluster_queue_objects(within_cluster_queue, cohort)}
        self.preemptor = Preemptor(deployed.cache, deployed.ledger, queues, self.borrowed)
        self.quotas: dict[str, FlavorQuota] = {}
        """Flavor → the cohort's quota on it (set by the run, ``_sim``); empty without a cohort."""
        self.due: list[int] = []
        """Victims (job indices) of the plans applied since the simulator last took them."""
        self.plans: list[tuple[float, str, Plan, bool]] = []
        """Every plan made: (time, gang, plan, applied): applied False under ``dry-run``."""
        self.evicted = 0
        self.lost_gpu_hours = 0.0

    def admitted(self, obj: dict[str, Any], key: str, now: float) -> None:
        """An admitted Workload is a candidate: in the cache as the watch delivers it, with its ``Admitted`` time."""
        obj["status"]["conditions"].append({"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": rfc3339(now)})
        self.deployed.cache.objects[WORKLOADS][key] = obj

    def gone(self, key: str) -> None:
        self.deployed.cache.objects[WORKLOADS].pop(key, None)

    def decided(self, obj: dict[str, Any], verdict: Verdict, now: float) -> None:
        """The controller's ``_preemption`` and ``_preempt``: end the gang's hold when it is
        placed or rejected; else plan (unless it holds a domain), note the plan on the verdict,
        and under ``on`` hold the domain and mark the victims for eviction."""
        holds = self.deployed.decider.holds
        uid = str(obj["metadata"]["uid"])
        if verdict.outcome != "wait":
            for held in holds.values():
                held.pop(uid, None)
            return
        docs = self.deployed.cache.profiles
        profile = docs.profiles.get(verdict.profile) if docs is not None else None
        if profile is None or profile.preempt_domain == "off" or any(uid in held for held in holds.values()):
            return
        plan = self.preemptor.plan(obj, verdict, profile, now)
        if plan is None:
            return
        apply = profile.preempt_domain == "on"
        verdict.notes.append(describe(plan, dry_run=not apply))
        gang = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        self.plans.append((now, gang, plan, apply))
        if apply:
            holds.setdefault(plan.flavor, {})[uid] = plan.nodes
            self.due.extend(int(key.rsplit("job-", 1)[1]) for key in plan.victims)

    def borrowed(self, flavor: str) -> dict[str, int]:
        """GPUs each ClusterQueue uses above its nominal quota on ``flavor`` now (``Preemptor.borrowed``)."""
        quota = self.quotas.get(flavor)
        if quota is None:
            return {}
        return {name: used - nominal for name, used, nominal in zip(quota.names, quota.used, quota.nominal, strict=True)}

    def figures(self) -> dict[str, Any]:
        """``SimResult``'s preemption fields."""
        return {"preempt_domain": self.mode, "preemption_plans": len(self.plans), "preempted": self.evicted,
                "preempted_gpu_hours": self.lost_gpu_hours}

    def take(self) -> list[int]:
        out, self.due = self.due, []
        return out

    def evict(self, job: int, lost_gpu_hours: float) -> None:
        """Kueue evicts ``job`` (Atoll's check went to Retry): ``release_admitted``, counted."""
        release_admitted(self.deployed, job)
        self.evicted += 1
        self.lost_gpu_hours += lost_gpu_hours


def cluster_queue_objects(within_cluster_queue: str, cohort: CohortShape | None) -> list[dict[str, Any]]:
    """The ClusterQueue objects Atoll's plan reads: the one ClusterQueue, or every ClusterQueue of
    the cohort (``spec.cohortName``, its ``reclaimWithinCohort`` and ``borrowWithinCohort``)."""
    if cohort is None:
        return [{"metadata": {"name": CLUSTER_QUEUE}, "spec": {"preemption": {"withinClusterQueue": within_cluster_queue}}}]
    return [{"metadata": {"name": q.name},
             "spec": {"cohortName": COHORT_NAME,
                      "preemption": {"withinClusterQueue": within_cluster_queue, "reclaimWithinCohort": cohort.reclaim_within_cohort,
                                     "borrowWithinCohort": {"policy": cohort.borrow_within_cohort}}}}
            for q in cohort.queues]


def release_admitted(d: DeployedAtoll, job: int) -> None:
    """Kueue evicts admitted ``job`` (Atoll's Retry, or Kueue's own preemption for quota): its pods
    go, the ledger and the queue manager let it go, it is no preemption candidate any more, and its
    Workload is Pending again with its quota to be reserved anew. Its check's ``retryCount`` goes
    up, so its next decision has an id of its own."""
    adm = d.admitted.pop(job)
    d.outlook.forget(adm.key)
    d.drop_owing(adm.flavor, job)
    with d.cache.pods_at_once():
        for ps in adm.podsets:
            for pod in ps.pods:
                d.cache.delete(PODS, pod)
    status = adm.obj["status"]
    entry = status["admissionChecks"][0]
    entry["state"] = "Pending"
    entry.pop("podSetUpdates", None)
    entry["retryCount"] = int(entry.get("retryCount") or 0) + 1
    status["conditions"] = [c for c in status["conditions"] if c.get("type") != "Admitted"]
    d.ledger.observe(adm.obj, d.check_names)
    d.cache.objects[WORKLOADS].pop(adm.key, None)


def drop_events(events: list[tuple[float, int, int, int]], job: int, kinds: Sequence[int]) -> None:
    """Take ``job``'s pending events of ``kinds`` off the event heap (an evicted job's completion or binding)."""
    keep = [e for e in events if not (e[3] == job and e[2] in kinds)]
    if len(keep) != len(events):
        events[:] = keep
        heapq.heapify(events)

"""Kueue's own preemption for quota, in the simulator, as Kueue v0.19.2's classical preemptor does it
within one ClusterQueue.

When a Workload in Kueue's queue cannot get quota (or, on a Kueue TAS flavor, quota but no
topology), Kueue's flavor assigner gives it mode ``Preempt`` and the scheduler asks the preemptor
for targets (``Preemptor.GetTargets`` → ``classicalPreemptions`` in
``pkg/scheduler/preemption/preemption.go``):

- the candidates are the Workloads holding quota in its ClusterQueue (``cq.Workloads``: every
  Workload with ``QuotaReserved``, Atoll's check pending or not) that the ClusterQueue's
  ``withinClusterQueue`` lets it preempt (``findCandidatesForPolicy``,
  ``common.SatisfiesPreemptionPolicy``: ``LowerPriority`` a lower priority;
  ``LowerOrNewerEqualPriority`` also an equal priority whose queue-order time is later; ``Never``
  none; the ``SchedulerTimestampPreemptionBuffer`` gate is off by default in v0.19.2);
- ordered by ``common.CandidatesOrdering``: lower priority first, then the quota reserved most
  recently first (``quotaReservationTime``), then UID (``"sim-<job>"`` here, as the simulated
  Workloads are named). Its first keys (Workloads being evicted, other ClusterQueues' first) never
  apply here: evictions are instant and there is one ClusterQueue per flavor;
- taken one by one off the snapshot until the Workload fits (``workloadFits``: quota, and on a TAS
  flavor the topology placement too), then each but the last is put back, last taken first, and
  left out of the targets when the Workload still fits with it (``fillBackWorkloads``). No fit
  with every candidate gone: no targets, and the Workload waits for quota.

Cohorts: the simulator has one ClusterQueue per flavor and no cohort (``_sim``), so
``reclaimWithinCohort`` and ``borrowWithinCohort`` have no Workload of another ClusterQueue to act
on: ``findCandidates`` looks at cohort members only when ``cq.HasParent()``.

The scheduler then evicts the targets (reason ``Preempted``) and the preemptor takes their quota
once they are gone. Here the eviction is instant (no termination grace, as for Atoll's
domain-clearing victims in ``_preemption``), so the preemptor is admitted in the same pass, which
is what Kueue's next cycle does once the victims' quota is released; the scheduler also counts the
preemptor's usage for the rest of its cycle (``processEntry``'s ``cq.AddUsage``), so no later
Workload takes the quota meanwhile. A victim restarts from scratch and rejoins the queue at its
creation time: an eviction by preemption leaves ``Ordering.GetQueueOrderTimestamp``
(``pkg/workload/workload.go``) at ``CreationTimestamp``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["KUEUE_PREEMPTION", "Holder", "candidates", "minimal_targets", "satisfies"]

KUEUE_PREEMPTION = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
"""The ``withinClusterQueue`` values Kueue's own preemption is modelled for (``Never``: off)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """A Workload holding quota in the preemptor's ClusterQueue."""

    job: int
    priority: int
    order: float
    """Its queue-order time (``GetQueueOrderTimestamp``: its creation, the job's arrival)."""
    reserved: float
    """When it last took quota (its ``QuotaReserved`` condition's ``lastTransitionTime``)."""
    gpus: int


def satisfies(policy: str, priority: int, order: float, candidate: Holder) -> bool:
    """``common.SatisfiesPreemptionPolicy``: may a Workload of ``priority`` and queue-order time
    ``order`` preempt ``candidate`` under ``withinClusterQueue: policy``?"""
    if policy == "LowerPriority":
        return priority > candidate.priority
    if policy == "LowerOrNewerEqualPriority":
        return priority > candidate.priority or (priority == candidate.priority and order < candidate.order)
    return False


def candidates(policy: str, priority: int, order: float, holders: Sequence[Holder]) -> list[Holder]:
    """The holders ``policy`` lets the Workload preempt, in ``CandidatesOrdering``: lower priority
    first, then quota reserved most recently first, then UID (``sim-<job>`` as text)."""
    found = [h for h in holders if satisfies(policy, priority, order, h)]
    found.sort(key=lambda h: (h.priority, -h.reserved, f"sim-{h.job}"))
    return found


def minimal_targets(ordered: Sequence[Holder], remove: Callable[[Holder], None], add: Callable[[Holder], None],
                    fits: Callable[[], bool]) -> list[Holder] | None:
    """``classicalPreemptions`` with ``fillBackWorkloads``: take ``ordered`` off one by one until
    ``fits()``; then, from the second-last taken back to the first, put each back and keep it out
    of the targets when the Workload still fits. ``remove`` and ``add`` change what ``fits`` sees;
    everything is put back before returning (``restoreSnapshot``). None: it fits with none of them."""
    targets: list[Holder] = []
    for candidate in ordered:
        remove(candidate)
        targets.append(candidate)
        if fits():
            for i in range(len(targets) - 2, -1, -1):
                add(targets[i])
                if fits():
                    targets[i] = targets[-1]  # Go's O(1) deletion: the order of what is left follows it
                    targets.pop()
                else:
                    remove(targets[i])
            for t in targets:
                add(t)
            return targets
    for t in targets:
        add(t)
    return None

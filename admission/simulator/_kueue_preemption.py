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

Cohorts (``SimSettings.cohort``, ``_cohort``): ``findCandidates`` looks at the other ClusterQueues
of the cohort only when ``cq.HasParent()`` and ``reclaimWithinCohort`` is not ``Never``, and only at
those borrowing (``cqIsBorrowing``: usage above nominal), whose Workloads it takes under that
policy (``LowerPriority``: a lower priority; ``Any``: any). ``CandidatesOrdering`` puts them
before the preemptor's own. ``classicalPreemptions`` then: with no candidate of another
ClusterQueue, the preemptor's own with borrowing allowed; under ``borrowWithinCohort:
LowerPriority``, all of them with borrowing allowed (those of other ClusterQueues below the
preemptor's priority unless its ClusterQueue is under nominal, and a target of another at or above
it turns borrowing off); otherwise, if its ClusterQueue is under nominal, all of them without
borrowing (``workloadFits`` with ``allowBorrowing`` false: its usage plus the request within
nominal), and failing that its own with borrowing. While targets are taken (``minimalPreemptions``)
a candidate of a ClusterQueue no longer borrowing is passed over. Without a cohort every candidate
is the preemptor's own ClusterQueue's, and that first case is the whole of it.

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

__all__ = ["KUEUE_PREEMPTION", "Holder", "Preemptor", "candidates", "classical_targets", "minimal_targets", "satisfies"]

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
    queue: int = 0
    """Its ClusterQueue (an index into the cohort's; 0 without one)."""


def satisfies(policy: str, priority: int, order: float, candidate: Holder) -> bool:
    """``common.SatisfiesPreemptionPolicy``: may a Workload of ``priority`` and queue-order time
    ``order`` preempt ``candidate`` under ``withinClusterQueue: policy``?"""
    if policy == "LowerPriority":
        return priority > candidate.priority
    if policy == "LowerOrNewerEqualPriority":
        return priority > candidate.priority or (priority == candidate.priority and order < candidate.order)
    return False


def candidates(policy: str, priority: int, order: float, holders: Sequence[Holder], *, queue: int = 0, reclaim: str = "Never",
               borrowing: Callable[[int], bool] | None = None) -> list[Holder]:
    """The holders ``policy`` (``withinClusterQueue``) lets the Workload of ClusterQueue ``queue``
    preempt, and with ``reclaim`` (``reclaimWithinCohort``) those of the other ClusterQueues that
    are ``borrowing``; in ``CandidatesOrdering``: other ClusterQueues' first, then lower priority,
    then quota reserved most recently first, then UID (``sim-<job>`` as text)."""
    found = [h for h in holders if h.queue == queue and satisfies(policy, priority, order, h)]
    if reclaim != "Never" and borrowing is not None:
        found += [h for h in holders if h.queue != queue and borrowing(h.queue) and (reclaim == "Any" or h.priority < priority)]
    found.sort(key=lambda h: (h.queue == queue, h.priority, -h.reserved, f"sim-{h.job}"))
    return found


def minimal_targets(ordered: Sequence[Holder], remove: Callable[[Holder], None], add: Callable[[Holder], None],
                    fits: Callable[[], bool], skip: Callable[[Holder], bool] | None = None) -> list[Holder] | None:
    """``classicalPreemptions`` with ``fillBackWorkloads``: take ``ordered`` off one by one until
    ``fits()``; then, from the second-last taken back to the first, put each back and keep it out
    of the targets when the Workload still fits. ``remove`` and ``add`` change what ``fits`` sees;
    everything is put back before returning (``restoreSnapshot``). None: it fits with none of them."""
    targets: list[Holder] = []
    for candidate in ordered:
        if skip is not None and skip(candidate):
            continue
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


@dataclass(frozen=True, slots=True)
class Preemptor:
    """The preemptor's side of ``classicalPreemptions`` over a cohort: its ClusterQueue and
    priority, and the ClusterQueues' state as the targets are taken."""

    queue: int
    priority: int
    borrow_within_cohort: str
    borrowing: Callable[[int], bool]
    """A ClusterQueue uses more than its nominal quota now (``cqIsBorrowing``)."""
    under_nominal: Callable[[], bool]
    """The preemptor's ClusterQueue uses less than its nominal quota (``queueUnderNominalInResourcesNeedingPreemption``)."""
    fits: Callable[[bool], bool]
    """``workloadFits(allowBorrowing)``."""


def classical_targets(ordered: Sequence[Holder], who: Preemptor, remove: Callable[[Holder], None],
                      add: Callable[[Holder], None]) -> list[Holder] | None:
    """``classicalPreemptions``' choice among ``ordered`` (``candidates``), module docstring."""
    own = [h for h in ordered if h.queue == who.queue]
    if len(own) == len(ordered):
        return minimal_targets(own, remove, add, lambda: who.fits(True))
    allow = [True]

    def reclaim(threshold: int | None) -> Callable[[Holder], bool]:
        def skip(h: Holder) -> bool:
            if h.queue == who.queue:
                return False
            if not who.borrowing(h.queue):
                return True  # its ClusterQueue no longer borrows: nothing to reclaim from it
            if threshold is not None and h.priority >= threshold:
                allow[0] = False
            return False
        return skip

    if who.borrow_within_cohort == "LowerPriority":
        chosen = list(ordered) if who.under_nominal() else [h for h in ordered if h.queue == who.queue or h.priority < who.priority]
        return minimal_targets(chosen, remove, add, lambda: who.fits(allow[0]), reclaim(who.priority))
    if who.under_nominal():
        got = minimal_targets(ordered, remove, add, lambda: who.fits(False), reclaim(None))
        if got:
            return got
    return minimal_targets(own, remove, add, lambda: who.fits(True))

"""Preemption that clears a domain: which lower-priority Workloads leave which one domain so that a
waiting gang fits there, chosen by what it costs.

Pure: a snapshot, the running Workloads and the ClusterQueues' rules in, a ``Plan`` out. The
controller applies it (Atoll's check set to ``Retry`` on each victim, which makes Kueue evict it)
and the simulator can run the same choice.

The rules, Kueue's own for a pending Workload's preemptions (``ClusterQueue.spec.preemption``):

- ``withinClusterQueue``: ``Never`` (Kueue's default) forbids victims of the gang's own
  ClusterQueue; ``LowerPriority`` allows those of lower priority; ``LowerOrNewerEqualPriority``
  also those of equal priority admitted after the gang was created.
- ``reclaimWithinCohort``: ``Never`` (the default) forbids victims of the other ClusterQueues of
  its cohort; ``LowerPriority`` allows those of lower priority; ``Any`` allows any. A victim
  outside the gang's cohort is never taken.
- and, as Kueue reclaims (kubernetes-sigs/kueue v0.19.2, ``pkg/scheduler/preemption/preemption.go``:
  ``findCandidates`` passes over every other ClusterQueue for which ``cqIsBorrowing`` is false,
  that is one using no more than its nominal quota of the resource, and ``minimalPreemptions``
  passes over a candidate whose ClusterQueue stopped borrowing as targets were taken), a victim of
  another ClusterQueue only while that ClusterQueue borrows: ``borrowed`` gives the GPUs each uses
  above its nominal quota on the gang's flavor, and each victim taken from it counts against that.

A domain is a candidate when the gang does not fit there now and would fit once some allowed
victims leave. Victims are taken whole (all their GPUs, in every domain), cheapest first (GPU-hours
of work lost, then priority), and then each is given back if the domain still fits without it. The
domain chosen costs least: GPU-hours lost, then the highest victim priority, then fewest victims,
then its path (so the same state always gives the same plan).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from topology import Snapshot

__all__ = ["Candidate", "Gang", "Plan", "QueueRules", "plan_preemption"]


@dataclass(frozen=True, slots=True)
class QueueRules:
    """A ClusterQueue's cohort and preemption policy (``spec.cohortName``, ``spec.preemption``)."""

    cohort: str | None = None
    within_cluster_queue: str = "Never"
    reclaim_within_cohort: str = "Never"


@dataclass(frozen=True, slots=True)
class Gang:
    """The waiting Workload: ``pods`` pods of ``gpus_per_pod`` GPUs in one domain of ``level``."""

    key: str
    cluster_queue: str
    priority: int
    level: str
    pods: int
    gpus_per_pod: int
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """An admitted Workload that could be evicted: its GPUs per node and since when it runs."""

    key: str
    cluster_queue: str
    priority: int
    gpus_on: Mapping[str, int]
    started_at: float
    admitted_at: float = 0.0

    @property
    def gpus(self) -> int:
        return sum(self.gpus_on.values())

    def gpu_hours(self, now: float) -> float:
        """The work lost when it is evicted now: its GPUs × the hours it has run."""
        return self.gpus * max(0.0, now - self.started_at) / 3600.0


@dataclass(frozen=True, slots=True)
class Plan:
    """The domain to clear and who leaves it; ``None`` fields when no domain can be cleared."""

    flavor: str
    level: str
    domain: str
    victims: tuple[str, ...]
    gpu_hours_lost: float
    highest_priority: int
    freed_gpus: int
    nodes: tuple[str, ...] = field(default=())
    """The domain's nodes: kept for the gang while the victims terminate."""


def allowed(gang: Gang, victim: Candidate, rules: Mapping[str, QueueRules], borrowed: Mapping[str, int] | None = None) -> bool:
    """Whether the ClusterQueues' rules let ``gang`` preempt ``victim``: one of another
    ClusterQueue only while that one borrows (``borrowed``: GPUs above its nominal quota; none
    given, none borrows)."""
    mine = rules.get(gang.cluster_queue, QueueRules())
    if victim.cluster_queue == gang.cluster_queue:
        policy = mine.within_cluster_queue
        if policy == "LowerPriority":
            return victim.priority < gang.priority
        if policy == "LowerOrNewerEqualPriority":
            return victim.priority < gang.priority or (victim.priority == gang.priority and victim.admitted_at > gang.created_at)
        return False
    theirs = rules.get(victim.cluster_queue, QueueRules())
    if mine.cohort is None or theirs.cohort != mine.cohort or (borrowed or {}).get(victim.cluster_queue, 0) <= 0:
        return False
    if mine.reclaim_within_cohort == "Any":
        return True
    if mine.reclaim_within_cohort == "LowerPriority":
        return victim.priority < gang.priority
    return False


def plan_preemption(snapshot: Snapshot, gang: Gang, running: Sequence[Candidate], rules: Mapping[str, QueueRules],
                    now: float, *, borrowed: Mapping[str, int] | None = None) -> Plan | None:
    """The cheapest domain of ``gang.level`` that fits the gang once allowed victims leave it;
    None when one fits already (no preemption needed) or none can be cleared. ``snapshot.free``
    counts what the running Workloads hold; only open nodes (``eligible``) count for the gang.
    ``borrowed``: GPUs each ClusterQueue uses above its nominal quota on ``snapshot.flavor`` now
    (absent or 0: it does not borrow, and no victim of it is taken unless it is the gang's own)."""
    if gang.level not in snapshot.level_labels or gang.pods <= 0:
        return None
    lv = snapshot.level_index(gang.level)
    per = max(gang.gpus_per_pod, 1)
    open_nodes = snapshot.eligible != 0
    free = snapshot.free[:, 0].astype(np.int64)
    pods_now = np.where(open_nodes, free // per, 0)
    borrowed = borrowed or {}
    victims = [v for v in running if allowed(gang, v, rules, borrowed)]
    best: tuple[tuple[float, int, int, tuple[str, ...]], Plan] | None = None
    for d in range(snapshot.num_domains(lv)):
        lo, hi = snapshot.domain_range(lv, d)
        if int(pods_now[lo:hi].sum()) >= gang.pods:
            return None  # it fits without anyone leaving: no preemption
        inside = [v for v in victims if any(lo <= snapshot.node_index.get(n, -1) < hi for n in v.gpus_on)]
        chosen = _clear(snapshot, lo, hi, gang, inside, free, open_nodes, now, borrowed)
        if chosen is None:
            continue
        path = snapshot.domain_path(lv, d)
        cost = (round(sum(v.gpu_hours(now) for v in chosen), 6), max(v.priority for v in chosen), len(chosen), path)
        if best is None or cost < best[0]:
            plan = Plan(snapshot.flavor, gang.level, "/".join(path), tuple(sorted(v.key for v in chosen)), cost[0], cost[1],
                        sum(v.gpus for v in chosen), tuple(snapshot.node_names[lo:hi]))
            best = (cost, plan)
    return best[1] if best is not None else None


def _fits(snapshot: Snapshot, lo: int, hi: int, gang: Gang, leaving: Sequence[Candidate], free: np.ndarray,
          open_nodes: np.ndarray) -> bool:
    room = free[lo:hi].copy()
    for v in leaving:
        for node, g in v.gpus_on.items():
            i = snapshot.node_index.get(node, -1)
            if lo <= i < hi:
                room[i - lo] += g
    room = np.minimum(room, snapshot.alloc[lo:hi, 0])
    return int(np.where(open_nodes[lo:hi], room // max(gang.gpus_per_pod, 1), 0).sum()) >= gang.pods


def _clear(snapshot: Snapshot, lo: int, hi: int, gang: Gang, inside: Sequence[Candidate], free: np.ndarray, open_nodes: np.ndarray,
           now: float, borrowed: Mapping[str, int]) -> list[Candidate] | None:
    """Victims that clear the domain: cheapest first until it fits, then each given back (dearest
    first) if it still fits without it. None when all of them together are not enough. One of
    another ClusterQueue is passed over once the victims taken from that one leave it borrowing
    nothing (``minimalPreemptions``' ``cqIsBorrowing`` check)."""
    order = sorted(inside, key=lambda v: (v.gpu_hours(now), v.priority, v.key))
    left = dict(borrowed)
    chosen: list[Candidate] = []
    for v in order:
        if v.cluster_queue != gang.cluster_queue:
            if left.get(v.cluster_queue, 0) <= 0:
                continue
            left[v.cluster_queue] -= v.gpus
        chosen.append(v)
        if _fits(snapshot, lo, hi, gang, chosen, free, open_nodes):
            break
    else:
        return None
    for v in sorted(chosen, key=lambda v: (v.gpu_hours(now), v.priority, v.key), reverse=True):
        rest = [c for c in chosen if c is not v]
        if rest and _fits(snapshot, lo, hi, gang, rest, free, open_nodes):
            chosen = rest
    return chosen

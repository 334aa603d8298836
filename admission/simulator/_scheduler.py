"""How the kube-scheduler binds an admitted Workload's pods: filter, score, pick.

Atoll's ``domain`` enforcement writes a nodeSelector; the planned nodes are a preference the
kube-scheduler never sees. So the simulator binds each pod as the scheduler would, one pod at a
time, over the nodes the pod may use:

Filter (the scheduler's NodeAffinity, TaintToleration, NodeUnschedulable and NodeResourcesFit
filters): the node carries every nodeSelector label, satisfies the template's required node
affinity, is Ready and schedulable, every NoSchedule/NoExecute taint is tolerated (the pod's
tolerations plus the ResourceFlavor's, which Kueue adds), and its free GPUs, CPU, memory and pod
slots hold the pod's requests.

Score, per model (``SCHEDULERS``):

- ``least-allocated``: the default kube-scheduler. NodeResourcesFit's default scoring strategy is
  ``LeastAllocated`` over ``cpu`` and ``memory`` with weight 1 each (NodeResourcesFitArgs,
  kubescheduler.config.k8s.io/v1; extended resources such as ``nvidia.com/gpu`` are not scored
  unless listed), plus the default NodeResourcesBalancedAllocation score on the same resources.
  Both are integers in [0, 100] computed as kube-scheduler 1.36 computes them: per resource
  ``(allocatable - requested) * 100 / allocatable`` in integer division, averaged; balance
  ``(1 - |cpu share - memory share| / 2) * 100`` truncated, scored as the change the pod makes
  (``50 + (50 + after - before) / 2``). The scheduler picks at random among the nodes with the
  highest total (``selectHost``). tests/kueue/test_agreement_scheduler.py holds this against the
  real kube-scheduler.
- ``most-allocated``: bin packing as the Kubernetes "Resource Bin Packing" page configures it:
  ``MostAllocated`` over ``cpu`` 1, ``memory`` 1 and ``nvidia.com/gpu`` 3.
- ``random``: any feasible node, uniformly.
- ``adversarial``: the worst order the selector allows: nodes where other admitted Workloads
  still owe planned pods first (most owed first), the pod's own planned nodes last.

Under ``exact`` enforcement the webhook pins each pod to a planned node; no model is consulted.
Ties are drawn from a seeded generator, so a run is deterministic for its seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["SCHEDULERS", "BindingModel"]

SCHEDULERS = ("least-allocated", "most-allocated", "random", "adversarial")
IntArray = npt.NDArray[np.int64]


class BindingModel:
    """Picks a node for each pod of a PodSet; ``free`` is updated as pods bind."""

    def __init__(self, name: str, seed: int) -> None:
        if name not in SCHEDULERS:
            raise ValueError(f"scheduler: {name!r} is not one of {', '.join(SCHEDULERS)}")
        self.name = name
        self.rng = np.random.default_rng(seed)

    def bind(self, free: IntArray, alloc: IntArray, allowed: IntArray, per_pod: Sequence[int], pods: int, *,
             own: IntArray | None = None, others: IntArray | None = None) -> list[tuple[int, int]]:
        """Bind up to ``pods`` pods of shape ``per_pod`` (gpu, cpu m, memory MiB) on ``allowed``
        (node indices the filter passes but for resources). ``own``: the pod set's planned nodes;
        ``others``: per node, pods other Workloads still owe there (adversarial only). Returns
        (node, pods) in binding order; fewer than ``pods`` when the rest fit nowhere (they stay
        Pending). ``free`` is decremented in place."""
        req = np.array([per_pod[0], per_pod[1], per_pod[2], 1], dtype=np.int64)
        out: dict[int, int] = {}
        order: list[int] = []
        cand = np.ascontiguousarray(allowed, dtype=np.int64)
        scored = _SCORED.get(self.name, 0)
        for _ in range(pods):
            fit, best = _fit_and_best(free, alloc, cand, req, scored)
            if fit.size == 0:
                break
            if fit.size == 1:
                node = int(fit[0])
            elif scored:  # the scheduler's integer scores, highest first; ties drawn as selectHost draws them
                node = int(fit[best[0] if best.size == 1 else best[self.rng.integers(best.size)]])
            else:
                node = self._pick(fit, free, alloc, req, own, others)
            free[node] -= req
            if node not in out:
                order.append(node)
            out[node] = out.get(node, 0) + 1
            cand = fit
        return [(n, out[n]) for n in order]

    def best_nodes(self, free: IntArray, alloc: IntArray, allowed: IntArray, per_pod: Sequence[int]) -> IntArray:
        """The nodes among ``allowed`` this model scores equally best for one more pod of shape
        ``per_pod`` (a scored model; every feasible node otherwise), empty when none fits: the
        set the scheduler draws from. ``free`` is not changed."""
        req = np.array([per_pod[0], per_pod[1], per_pod[2], 1], dtype=np.int64)
        fit, best = _fit_and_best(free, alloc, np.ascontiguousarray(allowed, dtype=np.int64), req, _SCORED.get(self.name, 0))
        out: IntArray = fit[best] if best.size else fit
        return out

    def _pick(self, fit: IntArray, free: IntArray, alloc: IntArray, req: IntArray, own: IntArray | None,
              others: IntArray | None) -> int:
        """The unscored models: any feasible node (random), or the adversary's order."""
        if self.name == "random":
            return int(fit[self.rng.integers(fit.size)])
        score = np.zeros(fit.size, dtype=np.int64)
        if others is not None:
            score += others[fit] * 2
        if own is not None:
            score -= np.isin(fit, own).astype(np.int64)
        best = np.flatnonzero(score == score.max())
        return int(fit[best[0] if best.size == 1 else best[self.rng.integers(best.size)]])


_SCORED = {"least-allocated": 1, "most-allocated": 2}
"""Models whose score ``_fit_and_best`` computes (the others pick in ``_pick``)."""


@njit(cache=True)
def _share(alloc, free, req):  # type: ignore[no-untyped-def]
    """Requested share of one resource after the pod, in whole percent (at most 100)."""
    cap = alloc if alloc > 1 else np.int64(1)
    v = (alloc - free + req) * 100 // cap
    return v if v < 100 else np.int64(100)


@njit(cache=True)
def _least(alloc, requested):  # type: ignore[no-untyped-def]
    """NodeResourcesFit's leastRequestedScore: unused share in whole percent, rounded down."""
    if alloc <= 0 or requested > alloc:
        return np.int64(0)
    return (alloc - requested) * 100 // alloc


@njit(cache=True)
def _balance(cpu_alloc, cpu_requested, mem_alloc, mem_requested):  # type: ignore[no-untyped-def]
    """NodeResourcesBalancedAllocation's balancedResourceScore over cpu and memory: ``(1 - std) *
    100`` truncated, std = half the gap between the two requested fractions (float64, as Go)."""
    if cpu_alloc <= 0 or mem_alloc <= 0:
        return np.int64(100)
    fc = min(cpu_requested / cpu_alloc, 1.0)
    fm = min(mem_requested / mem_alloc, 1.0)
    return np.int64((1.0 - abs(fc - fm) / 2.0) * 100.0)


@njit(cache=True)
def _fit_and_best(free, alloc, cand, req, scored):  # type: ignore[no-untyped-def]
    """The candidates with room for one pod (NodeResourcesFit's filter, in ``cand`` order) and,
    for a scored model, the positions among them with the highest score: ``_pick``'s
    arithmetic for least-allocated (1) and most-allocated (2), one pass instead of a dozen
    array operations per pod."""
    n = cand.shape[0]
    fit = np.empty(n, dtype=np.int64)
    k = 0
    for j in range(n):
        i = cand[j]
        ok = True
        for r in range(4):
            if req[r] > 0 and free[i, r] < req[r]:
                ok = False
                break
        if ok:
            fit[k] = i
            k += 1
    fit = fit[:k]
    if scored == 0 or k < 2:
        return fit, np.empty(0, dtype=np.int64)
    score = np.empty(k, dtype=np.int64)
    top = np.int64(-(1 << 62))
    for j in range(k):
        i = fit[j]
        cpu_before, mem_before = alloc[i, 1] - free[i, 1], alloc[i, 2] - free[i, 2]
        with_pod = _balance(alloc[i, 1], cpu_before + req[1], alloc[i, 2], mem_before + req[2])
        without = _balance(alloc[i, 1], cpu_before, alloc[i, 2], mem_before)
        balanced = 50 + (50 + with_pod - without) // 2  # the change the pod makes to the node's balance
        if req[1] == 0 and req[2] == 0:
            balanced = 0  # a best-effort pod: the plugin skips scoring
        if scored == 1:  # LeastAllocated counts a pod without a request as 100m CPU and 200MiB
            cpu_pod = req[1] if req[1] > 0 else np.int64(100)
            mem_pod = req[2] if req[2] > 0 else np.int64(200)
            fit_score = (_least(alloc[i, 1], cpu_before + cpu_pod) + _least(alloc[i, 2], mem_before + mem_pod)) // 2
        else:
            gpu = _share(alloc[i, 0], free[i, 0], req[0])
            cpu = _share(alloc[i, 1], free[i, 1], req[1])
            mem = _share(alloc[i, 2], free[i, 2], req[2])
            fit_score = (cpu + mem + 3 * gpu) // 5  # weights cpu 1, memory 1, nvidia.com/gpu 3
        score[j] = fit_score + balanced
        if score[j] > top:
            top = score[j]
    best = np.empty(k, dtype=np.int64)
    m = 0
    for j in range(k):
        if score[j] == top:
            best[m] = j
            m += 1
    return fit, best[:m]

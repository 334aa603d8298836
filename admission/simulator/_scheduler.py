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
  unless listed), plus the default NodeResourcesBalancedAllocation score on the same resources;
  each score is an integer in [0, 100] (``(allocatable - requested) * 100 / allocatable``), and
  the scheduler picks at random among the nodes with the highest total (``selectHost``).
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

__all__ = ["SCHEDULERS", "BindingModel"]

SCHEDULERS = ("least-allocated", "most-allocated", "random", "adversarial")
IntArray = npt.NDArray[np.int64]
_GPU, _CPU, _MEM, _PODS = 0, 1, 2, 3
_MOST_WEIGHTS = {_CPU: 1, _MEM: 1, _GPU: 3}


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
        need = req > 0
        out: dict[int, int] = {}
        order: list[int] = []
        cand = allowed
        for _ in range(pods):
            rows = free[cand]
            fit = cand[(rows[:, need] >= req[need]).all(axis=1)]
            if fit.size == 0:
                break
            node = int(fit[0]) if fit.size == 1 else self._pick(fit, free, alloc, req, own, others)
            free[node] -= req
            if node not in out:
                order.append(node)
            out[node] = out.get(node, 0) + 1
            cand = fit
        return [(n, out[n]) for n in order]

    def _pick(self, fit: IntArray, free: IntArray, alloc: IntArray, req: IntArray, own: IntArray | None,
              others: IntArray | None) -> int:
        if self.name == "random":
            return int(fit[self.rng.integers(fit.size)])
        if self.name == "adversarial":
            score = np.zeros(fit.size, dtype=np.int64)
            if others is not None:
                score += others[fit] * 2
            if own is not None:
                score -= np.isin(fit, own).astype(np.int64)
        else:
            cap = np.maximum(alloc[fit], 1)
            requested = alloc[fit] - free[fit] + req
            share = np.minimum(requested * 100 // cap, 100)  # per resource, integer as the scheduler computes it
            balanced = 100 - np.abs(share[:, _CPU] - share[:, _MEM]) // 2
            if self.name == "least-allocated":
                fit_score = (200 - share[:, _CPU] - share[:, _MEM]) // 2
            else:
                total = sum(_MOST_WEIGHTS.values())
                fit_score = sum(w * share[:, r] for r, w in _MOST_WEIGHTS.items()) // total
            score = fit_score + balanced
        best = np.flatnonzero(score == score.max())
        return int(fit[best[0] if best.size == 1 else best[self.rng.integers(best.size)]])

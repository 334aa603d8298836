"""The controller's price of a span: the simulator's cost model, on the cluster's own link figures.

Wait-or-span (``_queueing``) weighs the expected wait for one domain against what the best span
costs: the Workload's expected runtime × (slowdown − 1). The slowdown is ``topology.CostModel``'s,
the arithmetic ``atoll simulate`` charges, on the flavor's snapshot, whose per-level bandwidth and
latency come from the profiles document (``flavors.X.links``) or Atoll's documented defaults
(``policies.DEFAULT_LINKS``; any other level an InfiniBand NDR hop). The assumptions are the
simulator's defaults unless ``atoll run`` changes them (``CostSettings``): the calibrated link
model, every multi-GPU Workload a training gang whose all-reduce is a tenth of its ideal step,
its gradient ``topology.default_model_gb``, nothing of it hidden behind compute.

A span this cannot price (PodSets of different pod shapes, no GPUs) is None: not priced, and
``relaxAfterSeconds`` decides, as the decision's message says.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from admission.controller._settings import CostSettings
from policies import Decision
from topology import CostModel, ResourceVector, Snapshot, default_model_gb

__all__ = ["SpanPricer"]


@dataclass(frozen=True, slots=True)
class _Gang:
    """A Workload as the cost model reads it (``topology.CommJob`` and ``topology.GangShape``)."""

    id: str
    pods: int
    per_pod: ResourceVector
    comm_fraction: float
    overlap: float
    model_gb: float
    kind: str = "training"

    @property
    def gpus(self) -> int:
        return self.pods * self.per_pod.gpu


class SpanPricer:
    """``Decider.span_cost``: the slowdown a span placement costs, by ``settings``' assumptions."""

    def __init__(self, settings: CostSettings) -> None:
        self.settings = settings

    def __call__(self, snap: Snapshot, decision: Decision) -> float | None:
        placement, request = decision.placement, decision.request
        if placement is None or request is None or not placement.fits:
            return None
        shapes = {ps.per_pod for ps in request.podsets if ps.per_pod.gpu > 0}
        if len(shapes) != 1:
            return None  # no GPUs, or PodSets of different shapes: not one gang the model knows
        per_pod = shapes.pop()
        gpu_podsets = {ps.name for ps in request.podsets if ps.per_pod.gpu > 0}
        count: Counter[int] = Counter()
        for ps in placement.podsets:
            if ps.name not in gpu_podsets:
                continue
            for name, k in zip(ps.nodes, ps.pods_per_node):
                i = snap.node_index.get(name)
                if i is None:
                    return None
                count[i] += k
        if not count:
            return None
        nodes = np.array(sorted(count), dtype=np.int64)
        pods = np.array([count[int(i)] for i in nodes], dtype=np.int64)
        gpus = int(pods.sum()) * per_pod.gpu
        gang = _Gang(decision.profile, int(pods.sum()), per_pod, self.settings.comm_fraction if gpus > 1 else 0.0,
                     self.settings.overlap, default_model_gb(gpus))
        # A fresh model per price: its caches are keyed by the snapshot's identity, and the
        # controller's snapshots are rebuilt (a span is priced once per change of what it reads).
        return float(CostModel(self.settings.link_model)(snap, nodes, gang, gang, pods))

"""What a placement costs a job: the slowdown the simulator charges when a job starts.

``CostModel`` turns a placement on a snapshot into the numbers of a link model (``_cost``'s flat
ring, or ``_collectives``' calibrated all-reduce) and the job's step formula
(``_cost.slowdown_from_ratio``). This is the small API a queueing model measured on the
simulator calls: ``CostModel(link_model)(snapshot, nodes, shape, job, pods)`` → slowdown ≥ 1/perf.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from admission.simulator._collectives import Island, allreduce
from admission.simulator._cost import LINK_MODELS, slowdown_from_ratio, step_slowdown
from admission.simulator._jobs import Job
from admission.simulator._policies import JobShape
from topology import Snapshot

__all__ = ["CostModel"]

IntArray = npt.NDArray[np.int64]


class CostModel:
    """The job's slowdown on a placement: ``_cost.step_slowdown`` (``flat-ring``) or the
    calibrated collective model (``calibrated``, the default; ``_collectives``).

    Flat ring: the bottleneck link is that of the lowest common domain of the placement's nodes
    (one node: the node's own link). Calibrated: the GPUs the job holds in each NVLink island
    (the levels above the node whose link is as fast as the node's), NVLink at half the island
    level's (two-direction) figure, one NIC per GPU at the bandwidth and latency of the lowest
    common domain's level. The ideal is the same model on the best placement the empty flavor
    allows: one island when the job fits one (NVLS), else the fewest islands of the lowest level
    that can hold it, evenly split (an unavoidable span is not a slowdown). Min perf is the
    slowest chosen node's.
    """

    def __init__(self, link_model: str = "calibrated") -> None:
        if link_model not in LINK_MODELS:
            raise ValueError(f"link_model: {link_model!r} is not one of {', '.join(LINK_MODELS)}")
        self.link_model = link_model
        self._ideal: dict[tuple[int, JobShape], int] = {}
        self._ideal_s: dict[tuple[int, JobShape, float], float] = {}
        self._islands: dict[int, int] = {}

    def ideal_level(self, snapshot: Snapshot, shape: JobShape) -> int:
        key = (id(snapshot.node_names), shape)
        level = self._ideal.get(key)
        if level is None:
            level = self._ideal[key] = _ideal_level(snapshot, shape)
        return level

    def island_level(self, snapshot: Snapshot) -> int:
        """The NVLink island: the highest level whose link, and every link below it, is as fast as the node's."""
        key = id(snapshot.node_names)
        lv = self._islands.get(key)
        if lv is None:
            bw = snapshot.bandwidth_gbps
            lv = snapshot.node_level
            while lv > 0 and bw[lv - 1] >= bw[snapshot.node_level]:
                lv -= 1
            self._islands[key] = lv
        return lv

    def __call__(self, snapshot: Snapshot, nodes: IntArray, shape: JobShape, job: Job, pods: IntArray | None = None) -> float:
        lo, hi = int(nodes.min()), int(nodes.max())
        level = 0
        for lv in range(snapshot.node_level, -1, -1):
            if snapshot.node_dom[lv, lo] == snapshot.node_dom[lv, hi]:
                level = lv
                break
        min_perf = float(snapshot.perf[nodes].min())
        ideal = self.ideal_level(snapshot, shape)
        if self.link_model == "flat-ring":
            return step_slowdown(job, min_perf, float(snapshot.bandwidth_gbps[level]), float(snapshot.latency_us[level]),
                                 float(snapshot.bandwidth_gbps[ideal]), float(snapshot.latency_us[ideal]))
        if job.gpus <= 1 or job.kind != "training" or job.comm_fraction == 0.0:
            return slowdown_from_ratio(job, min_perf, 1.0)
        island = self.island_level(snapshot)
        per_node = (pods if pods is not None else np.ones(nodes.size, dtype=np.int64)) * shape.per_pod.gpu
        doms = snapshot.node_dom[island, nodes]
        _, inverse = np.unique(doms, return_inverse=True)
        gpus = np.bincount(inverse, weights=per_node).astype(np.int64).tolist()
        actual = allreduce(job.model_gb, gpus, _fabric(snapshot, island, min(level, island))).time_s
        ideal_s = self._ideal_time(snapshot, shape, job.model_gb, island, ideal)
        if ideal_s <= 0.0:
            return slowdown_from_ratio(job, min_perf, 1.0)
        return slowdown_from_ratio(job, min_perf, actual / ideal_s)

    def _ideal_time(self, snapshot: Snapshot, shape: JobShape, size_gb: float, island: int, ideal: int) -> float:
        key = (id(snapshot.node_names), shape, size_gb)
        t = self._ideal_s.get(key)
        if t is None:
            k = shape.gpus
            if ideal >= island:
                split = [k]
            else:
                starts = snapshot.bounds[snapshot.bptr[island]: snapshot.bptr[island + 1]]
                alloc = np.where(snapshot.eligible.astype(bool), snapshot.alloc[:, 0], 0)
                biggest = int(np.add.reduceat(alloc, starts[:-1]).max()) if starts.size > 1 else k
                n = max(1, -(-k // max(biggest, 1)))
                split = [k // n + (1 if i < k % n else 0) for i in range(n)]
            t = self._ideal_s[key] = allreduce(size_gb, split, _fabric(snapshot, island, min(ideal, island))).time_s
        return t


def _fabric(snapshot: Snapshot, island: int, crossed: int) -> Island:
    """The calibrated model's view of a flavor: NVLink at the island level (vendor figures are
    both directions: half each way), one NIC per GPU at the crossed level's figure (per GPU rail,
    one direction, after that level's oversubscription)."""
    return Island(nvlink_gbps=float(snapshot.bandwidth_gbps[island]) / 2.0, nvlink_latency_us=float(snapshot.latency_us[island]),
                  nic_gbps=float(snapshot.bandwidth_gbps[crossed]), cross_latency_us=float(snapshot.latency_us[crossed]))


def _ideal_level(snapshot: Snapshot, shape: JobShape) -> int:
    req = np.array(shape.per_pod.as_tuple()[:3] + (1,), dtype=np.int64)
    mask = req > 0
    cap = (snapshot.alloc[:, mask] // req[mask]).min(axis=1)
    cap[snapshot.eligible == 0] = 0
    for lv in range(snapshot.node_level, -1, -1):
        starts = snapshot.bounds[snapshot.bptr[lv]: snapshot.bptr[lv + 1] - 1]
        if int(np.add.reduceat(cap, starts).max()) >= shape.pods:
            return lv
    return 0

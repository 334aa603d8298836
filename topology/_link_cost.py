"""What a placement costs a job: the link models and the slowdown they give a job's step.

``CostModel`` turns a placement on a snapshot into the numbers of a link model (the flat ring of
``ring_allreduce_s``, or ``_collectives``' calibrated all-reduce) and the job's step formula
(``slowdown_from_ratio``). The simulator charges it when a job starts; the controller prices a
span with it before admitting one: ``CostModel(link_model)(snapshot, nodes, shape, job, pods)`` →
slowdown ≥ 1/perf. The step formula, its assumptions and their sources are described in
``admission/simulator/_cost.py``, which sets them per run; this module is the arithmetic alone
(plain floats and arrays, no I/O), below both the simulator and the controller.
"""

from __future__ import annotations

import math
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from topology._collectives import Island, allreduce
from topology._resources import ResourceVector
from topology._snapshot import Snapshot

__all__ = ["DEFAULT_COMM_FRACTION", "LINK_MODELS", "CommJob", "CostModel", "GangShape", "default_comm_fraction", "default_model_gb",
           "ring_allreduce_s", "slowdown_from_ratio", "step_slowdown"]

IntArray = npt.NDArray[np.int64]

LINK_MODELS: Final = ("calibrated", "flat-ring")
"""``calibrated`` (the default): ``_collectives``, NCCL's algorithms on aggregated rails, checked
against published nccl-tests points; ``flat-ring``: the ring at one rail, the pessimistic end
(``--link-model``)."""

DEFAULT_COMM_FRACTION: Final = 0.1
"""Share of an ideal training step spent in all-reduce on one NVLink island.

Data-parallel all-reduce of a 7B-parameter model in bf16 (14 GB) over 8 H100s on NVLink takes
about 2·7/8·14 GB / 450 GB/s ≈ 55 ms of a ~1 s step (≈ 5%); communication-heavy jobs (bigger
models, small batches, little overlap) reach 15–20%. 0.1 sits between, and matches the ≈ 10 % a
measurement of GPT/LLaMA training attributes to communication (the simulator's ``SOURCES``).
Spanning from NVLink (900 GB/s) to NDR (50 GB/s) then costs 0.9 + 0.1 × 18 ≈ 2.7× on the ring
term's bandwidth part. ``--cost-comm-fraction`` changes it (``atoll simulate`` per run and by job
size, ``atoll run`` for every Workload).
"""

_GRAD_GB_PER_SQRT_GPU: Final = 2.0
_US = 1e-6


class CommJob(Protocol):
    """What the cost model reads of a job (the simulator's ``Job``, the controller's Workload)."""

    @property
    def id(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def comm_fraction(self) -> float: ...
    @property
    def overlap(self) -> float: ...
    @property
    def model_gb(self) -> float: ...


class GangShape(Protocol):
    """What the cost model reads of a job's pods (hashable: ideal placements are kept per shape)."""

    @property
    def pods(self) -> int: ...
    @property
    def per_pod(self) -> ResourceVector: ...
    @property
    def gpus(self) -> int: ...
    def __hash__(self) -> int: ...


def default_comm_fraction(kind: str, gpus: int) -> float:
    """``DEFAULT_COMM_FRACTION`` for multi-GPU training; 0 for one GPU (nothing to all-reduce)
    and for inference (replicas do not synchronise; their slowdown is only GPU perf)."""
    return DEFAULT_COMM_FRACTION if kind == "training" and gpus > 1 else 0.0


def default_model_gb(gpus: int) -> float:
    """Gradient bytes per step (GB) when a trace gives none: 2 GB × √gpus.

    2 GB is the bf16 gradient of a 1B-parameter model. Larger jobs train larger models, but they
    also shard them (tensor/pipeline parallel), so the data-parallel gradient each ring carries
    grows more slowly than the job: √gpus gives 5.7 GB at 8 GPUs, 16 GB at 64, 64 GB at 1,024.
    """
    return _GRAD_GB_PER_SQRT_GPU * math.sqrt(max(gpus, 1))


def ring_allreduce_s(size_gb: float, gpus: int, bandwidth_gbps: float, latency_us: float) -> float:
    """Seconds for a ring all-reduce of ``size_gb`` GB over ``gpus`` GPUs:
    ``2(k−1)/k · S/B + 2(k−1)·α``; 0 for one GPU."""
    if gpus <= 1:
        return 0.0
    steps = 2.0 * (gpus - 1)
    return steps / gpus * size_gb / bandwidth_gbps + steps * latency_us * _US


def step_slowdown(
    job: CommJob,
    min_perf: float,
    bottleneck_bandwidth_gbps: float,
    bottleneck_latency_us: float,
    ideal_bandwidth_gbps: float,
    ideal_latency_us: float,
) -> float:
    """actual step / ideal step for ``job`` on a placement with these numbers (module docstring).

    Plain floats in, one float out: called once per admitted job, so it does no lookups.
    """
    if not min_perf > 0.0:
        raise ValueError(f"job {job.id!r}: min_perf must be > 0, got {min_perf}")
    f = job.comm_fraction
    if f == 0.0 or job.gpus <= 1 or job.kind != "training":
        return 1.0 / min_perf
    if not (bottleneck_bandwidth_gbps > 0.0 and ideal_bandwidth_gbps > 0.0):
        raise ValueError(
            f"job {job.id!r}: link bandwidths must be > 0 GB/s, got bottleneck {bottleneck_bandwidth_gbps}, ideal {ideal_bandwidth_gbps}"
        )
    if bottleneck_latency_us < 0.0 or ideal_latency_us < 0.0:
        raise ValueError(f"job {job.id!r}: link latencies must be ≥ 0 µs, got bottleneck {bottleneck_latency_us}, ideal {ideal_latency_us}")
    ideal = ring_allreduce_s(job.model_gb, job.gpus, ideal_bandwidth_gbps, ideal_latency_us)
    if ideal <= 0.0:  # model_gb 0 on a zero-latency ideal link: no all-reduce to scale, compute only
        return 1.0 / min_perf
    actual = ring_allreduce_s(job.model_gb, job.gpus, bottleneck_bandwidth_gbps, bottleneck_latency_us)
    return slowdown_from_ratio(job, min_perf, actual / ideal)


def slowdown_from_ratio(job: CommJob, min_perf: float, ratio: float) -> float:
    """actual step / ideal step for ``job`` when its all-reduce takes ``ratio`` × the ideal one's
    (any link model: the flat ring above, or ``_collectives.allreduce`` times)."""
    if not min_perf > 0.0:
        raise ValueError(f"job {job.id!r}: min_perf must be > 0, got {min_perf}")
    f = job.comm_fraction
    if f == 0.0 or job.gpus <= 1 or job.kind != "training":
        return 1.0 / min_perf
    o = job.overlap
    if o == 0.0:
        return 1.0 + (1.0 - f) * (1.0 / min_perf - 1.0) + f * (ratio - 1.0)
    return _overlapped_step(f, o, min_perf, f * ratio) / _overlapped_step(f, o, 1.0, f)


def _overlapped_step(f: float, o: float, perf: float, allreduce: float) -> float:
    """One step in units of the ideal un-overlapped step: compute, plus the all-reduce not hidden."""
    compute = (1.0 - f) / perf
    return compute + allreduce - min(o * allreduce, compute)


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
        self._ideal: dict[tuple[int, GangShape], int] = {}
        self._ideal_s: dict[tuple[int, GangShape, float], float] = {}
        self._islands: dict[int, int] = {}

    def ideal_level(self, snapshot: Snapshot, shape: GangShape) -> int:
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

    def __call__(self, snapshot: Snapshot, nodes: IntArray, shape: GangShape, job: CommJob, pods: IntArray | None = None) -> float:
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

    def _ideal_time(self, snapshot: Snapshot, shape: GangShape, size_gb: float, island: int, ideal: int) -> float:
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


def _ideal_level(snapshot: Snapshot, shape: GangShape) -> int:
    req = np.array(shape.per_pod.as_tuple()[:3] + (1,), dtype=np.int64)
    mask = req > 0
    cap = (snapshot.alloc[:, mask] // req[mask]).min(axis=1)
    cap[snapshot.eligible == 0] = 0
    for lv in range(snapshot.node_level, -1, -1):
        starts = snapshot.bounds[snapshot.bptr[lv]: snapshot.bptr[lv + 1] - 1]
        if int(np.add.reduceat(cap, starts).max()) >= shape.pods:
            return lv
    return 0

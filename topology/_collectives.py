"""All-reduce time on a placement, calibrated to published NCCL measurements (the default link model).

The flat ring of ``_cost`` prices a job spanning islands as if every GPU talked over one rail:
across two GB200 NVL72 racks that is 50 GB/s against 1.8 TB/s, a 36× slower all-reduce. NCCL
does not run that way, and nccl-tests measure it (``MEASURED`` below, ``atoll bench collectives``):
two racks reach 793 GB/s of bus bandwidth, not 50. This module predicts what NCCL achieves from
link figures and a few stated constants; it is what ``atoll simulate`` uses unless
``--link-model flat-ring`` asks for the pessimistic model.

The model (bus bandwidth = algorithm bandwidth × 2(k−1)/k, nccl-tests ``doc/PERFORMANCE.md``)

A placement is the GPUs it holds in each island (NVLink domain) ``g₁ … gₙ``, k = Σ gᵢ.

- **One island: NVLS** (NVLink SHARP; the switch reduces). Bus bandwidth
  ``ETA_NVLS × B_nvl`` with ``B_nvl`` a GPU's NVLink bandwidth in one direction (vendor
  figures are both directions: 900 GB/s per H100 is 450 each way; 1.8 TB/s per GB200 is 900).
- **Across islands: ring**, NCCL's choice for large messages (NVIDIA/nccl issue #1801: the
  default keeps ring at 16 GB). Rails are aggregated: NCCL runs one channel per NIC, each ring
  leaves an island through its own NIC, so a boundary carries as many channels as the side
  with fewer NICs has, at most ``MAX_CHANNELS``. Each channel runs at the per-NIC bandwidth
  ``b`` of the highest level crossed, which already holds that level's oversubscription (a 2:1
  spine gives 25 of a rail's 50 GB/s). Every ring also passes through every GPU on NVLink, so
  NVLink caps the sum::

      busbw_ring = min(ETA_RING_NET · C · b,  ETA_RING_NVL · B_nvl),  C = min(min_i nics_i, MAX_CHANNELS)

  A job with one GPU in some island gets one channel: that is what a bad split costs.
- **Across islands: tree** (double binary tree between islands): algorithm bandwidth
  ``ETA_TREE_NET · C · b``, capped by NVLink as the ring is. Chosen only where latency
  dominates (below).
- **Message size.** ``time = ALPHA_S + steps × latency + (2(k−1)/k) · S / busbw``: a fixed
  start-up ``ALPHA_S`` per collective (launch and pipeline fill, the reason nccl-tests bus
  bandwidth at 512 MB is 20–60 % below its 8 GB plateau), plus each step's link latency (the
  cluster model's per-level latency): a ring has 2(k−1) steps (those that cross an island at the
  crossed level's latency), a tree 2⌈log₂ k⌉, NVLS 2.
- **Which algorithm (``auto``).** One island: NVLS. Across islands: the one whose time is
  least as NCCL's tuner rates it, the tree's bandwidth counted at ``TREE_TUNER_SHARE`` of the
  ring's: NCCL's tuner rates tree well below ring across nodes at large sizes (issue #1801: it
  keeps ring although tree measures 19–23 % faster there), so tree wins only where its
  logarithmic latency matters: small messages over many islands. The time charged is the chosen
  algorithm's own.

Constants (each stated, each with the measurement it rests on)

- ``ETA_NVLS = 0.97``: NVLS bus bandwidth per one-direction NVLink bandwidth (GB200 one rack
  834.6 of 900; H100 one node 479.7 of 450: NVLS can exceed the link as the switch reduces).
- ``ETA_RING_NVL = 0.82``: a ring through NVLink (public nccl-tests ring runs on 8 × H100 reach
  ≈ 370 of 450 GB/s).
- ``ETA_RING_NET = 0.985``, ``ETA_TREE_NET = 0.64``: ring bus bandwidth and tree algorithm
  bandwidth per aggregated NIC bandwidth (issue #1801: three NVL4 / NVL8 partitions on
  different racks, IB only: ring 197 / 394 GB/s on 4 / 8 NICs of 50 GB/s; tree algbw 128 / 253).
- ``MAX_CHANNELS = 16``: channels across a boundary (two racks: 793 GB/s ≈ 16 × 50).
- ``ALPHA_S = 0.5 ms``: start-up per collective (one rack at 512 MB: 586 vs 835 GB/s).
- ``TREE_TUNER_SHARE = 0.25``: how NCCL's tuner rates tree bandwidth against ring's.

What it does not model: SHARP in the InfiniBand switches, congestion from other jobs, PXN,
topologies where a GPU has no NIC of its own. ``atoll bench collectives`` shows every published
point beside its prediction; all are within ±20 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["ALGORITHMS", "CONSTANTS", "MEASURED", "Collective", "Island", "MeasuredPoint", "allreduce", "calibration_table"]

Algorithm = Literal["auto", "nvls", "ring", "tree"]
ALGORITHMS: Final = ("auto", "nvls", "ring", "tree")

ETA_NVLS: Final = 0.97
ETA_RING_NVL: Final = 0.82
ETA_RING_NET: Final = 0.985
ETA_TREE_NET: Final = 0.64
MAX_CHANNELS: Final = 16
ALPHA_S: Final = 0.5e-3
TREE_TUNER_SHARE: Final = 0.25
CONSTANTS: Final[dict[str, float]] = {
    "eta_nvls": ETA_NVLS, "eta_ring_nvl": ETA_RING_NVL, "eta_ring_net": ETA_RING_NET, "eta_tree_net": ETA_TREE_NET,
    "max_channels": MAX_CHANNELS, "alpha_s": ALPHA_S, "tree_tuner_share": TREE_TUNER_SHARE,
}
"""The model's efficiency constants (module docstring says what each rests on)."""

_US = 1e-6


@dataclass(frozen=True, slots=True)
class Island:
    """The fabric as a placement sees it: NVLink inside an island, NICs across islands.

    ``nvlink_gbps``: a GPU's NVLink bandwidth, one direction (GB/s). ``nvlink_latency_us``: one
    step inside an island. ``nic_gbps``: one NIC's bandwidth at the highest level the placement
    crosses, one direction, after that level's oversubscription. ``cross_latency_us``: one step
    across islands. ``nics_per_gpu``: NICs per GPU (1 on DGX H100 and GB200 compute trays)."""

    nvlink_gbps: float
    nvlink_latency_us: float = 1.0
    nic_gbps: float = 50.0
    cross_latency_us: float = 5.0
    nics_per_gpu: float = 1.0
    nvls: bool = True


@dataclass(frozen=True, slots=True)
class Collective:
    """One all-reduce: the algorithm NCCL would run, its time and its bus bandwidth."""

    algorithm: str
    time_s: float
    busbw_gbps: float


def _bus_factor(k: int) -> float:
    return 2.0 * (k - 1) / k


def _ring_steps_latency(island_gpus: Sequence[int], fabric: Island) -> float:
    k = sum(island_gpus)
    crossings = len(island_gpus) if len(island_gpus) > 1 else 0
    return 2.0 * ((k - crossings) * fabric.nvlink_latency_us + crossings * fabric.cross_latency_us) * _US


def allreduce(size_gb: float, island_gpus: Sequence[int], fabric: Island, algorithm: Algorithm = "auto") -> Collective:
    """An all-reduce of ``size_gb`` GB over a placement holding ``island_gpus[i]`` GPUs in island i.

    ``algorithm``: ``auto`` (what NCCL would pick, module docstring), or one forced. NVLS needs a
    single island; ring and tree across one island run on NVLink alone. Time 0 for one GPU."""
    gpus = [int(g) for g in island_gpus if g > 0]
    k = sum(gpus)
    if size_gb < 0 or not fabric.nvlink_gbps > 0 or not fabric.nic_gbps > 0:
        raise ValueError(f"allreduce: size ({size_gb}) must be ≥ 0 and bandwidths > 0")
    if k <= 1:
        return Collective("none", 0.0, math.inf)
    n = len(gpus)
    bus = _bus_factor(k) * size_gb
    if algorithm == "nvls" and n > 1:
        raise ValueError("allreduce: NVLS runs inside one island; this placement spans " + str(n))
    chosen: str = algorithm
    if algorithm == "auto":
        chosen = "nvls" if n == 1 and fabric.nvls else ("ring" if n == 1 else _tuner_choice(bus, k, gpus, fabric))
    if chosen == "nvls":
        bw = ETA_NVLS * fabric.nvlink_gbps
        t = ALPHA_S + 2.0 * fabric.nvlink_latency_us * _US + bus / bw
    elif chosen == "ring":
        bw = _ring_bw(gpus, fabric)
        t = ALPHA_S + _ring_steps_latency(gpus, fabric) + bus / bw
    elif chosen == "tree":
        bw = _tree_busbw(k, gpus, fabric)
        t = ALPHA_S + _tree_latency(k, n, fabric) + bus / bw
    else:
        raise ValueError(f"allreduce: algorithm {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    return Collective(chosen, t, bus / t if t > 0 else math.inf)


def _channels(gpus: Sequence[int], fabric: Island) -> float:
    return min(min(gpus) * fabric.nics_per_gpu, MAX_CHANNELS)


def _ring_bw(gpus: Sequence[int], fabric: Island) -> float:
    nvl = ETA_RING_NVL * fabric.nvlink_gbps
    if len(gpus) == 1:
        return nvl
    return min(ETA_RING_NET * _channels(gpus, fabric) * fabric.nic_gbps, nvl)


def _tree_busbw(k: int, gpus: Sequence[int], fabric: Island) -> float:
    nvl = ETA_RING_NVL * fabric.nvlink_gbps
    if len(gpus) == 1:
        return nvl
    return min(ETA_TREE_NET * _channels(gpus, fabric) * fabric.nic_gbps * _bus_factor(k), nvl)


def _tree_latency(k: int, n: int, fabric: Island) -> float:
    cross = math.ceil(math.log2(n)) if n > 1 else 0
    inside = max(math.ceil(math.log2(k)) - cross, 0)
    return 2.0 * (cross * fabric.cross_latency_us + inside * fabric.nvlink_latency_us) * _US


def _tuner_choice(bus: float, k: int, gpus: Sequence[int], fabric: Island) -> str:
    ring_bw = _ring_bw(gpus, fabric)
    ring = _ring_steps_latency(gpus, fabric) + bus / ring_bw
    tree = _tree_latency(k, len(gpus), fabric) + bus / (TREE_TUNER_SHARE * ring_bw)
    return "tree" if tree < ring else "ring"


# ------------------------------------------------------------------------------ calibration


@dataclass(frozen=True, slots=True)
class MeasuredPoint:
    """One published nccl-tests all-reduce measurement and the placement it ran on."""

    source: str
    setup: str
    size_gb: float
    island_gpus: tuple[int, ...]
    fabric: Island
    algorithm: Algorithm
    measured_gbps: float


_GB200 = Island(nvlink_gbps=900.0, nvlink_latency_us=1.0, nic_gbps=50.0, cross_latency_us=4.0)
_GB200_SPINE = Island(nvlink_gbps=900.0, nvlink_latency_us=1.0, nic_gbps=25.0, cross_latency_us=8.0)
_H100 = Island(nvlink_gbps=450.0, nvlink_latency_us=1.0, nic_gbps=50.0, cross_latency_us=4.0)
_CW = "coreweave/nccl-tests README"
_NCCL = "NVIDIA/nccl issue #1801"
_VP = "Voltage Park public H100 benchmarks"

MEASURED: Final[tuple[MeasuredPoint, ...]] = (
    MeasuredPoint(_CW, "GB200 NVL72, 1 rack (72 GPUs), 8 GB", 8.0, (72,), _GB200, "auto", 834.6),
    MeasuredPoint(_CW, "GB200 NVL72, 2 racks (144 GPUs) in one scalable unit, 8 GB", 8.0, (72, 72), _GB200, "auto", 793.1),
    MeasuredPoint(_CW, "GB200 NVL72, 20 racks (1,440 GPUs) across scalable units (2:1 above), 8 GB", 8.0, (72,) * 20, _GB200_SPINE, "auto",
                  381.5),
    MeasuredPoint(_CW, "GB200 NVL72, 1 rack (72 GPUs), 512 MB", 0.512, (72,), _GB200, "auto", 586.0),
    MeasuredPoint(_CW, "GB200 NVL72, 2 racks (144 GPUs) in one scalable unit, 512 MB", 0.512, (72, 72), _GB200, "auto", 494.0),
    MeasuredPoint(_CW, "GB200 NVL72, 20 racks (1,440 GPUs) across scalable units (2:1 above), 512 MB", 0.512, (72,) * 20, _GB200_SPINE,
                  "auto", 151.0),
    MeasuredPoint(_NCCL, "GB200, 3 NVL4 partitions on different racks, IB only (12 GPUs), ring, 16 GiB", 17.179869184, (4, 4, 4), _GB200,
                  "ring", 196.72),
    MeasuredPoint(_NCCL, "GB200, 3 NVL8 partitions on different racks, IB only (24 GPUs), ring, 16 GiB", 17.179869184, (8, 8, 8), _GB200,
                  "ring", 393.66),
    MeasuredPoint(_NCCL, "GB200, 3 NVL4 partitions on different racks, IB only (12 GPUs), tree, 16 GiB", 17.179869184, (4, 4, 4), _GB200,
                  "tree", 234.43),
    MeasuredPoint(_NCCL, "GB200, 3 NVL8 partitions on different racks, IB only (24 GPUs), tree, 16 GiB", 17.179869184, (8, 8, 8), _GB200,
                  "tree", 485.68),
    MeasuredPoint(_VP, "H100 x 8, one node (NVLink 4), 8 GB", 8.0, (8,), _H100, "auto", 479.7),
    MeasuredPoint(_VP, "H100 x 8, 4 nodes (32 GPUs, 8 x 400 Gb/s InfiniBand per node), 8 GB", 8.0, (8, 8, 8, 8), _H100, "auto", 330.9),
)
"""The published points ``atoll bench collectives`` checks. Link figures: NVLink 5 900 GB/s per
GPU each way (GB200), NVLink 4 450 (H100), one 400 Gb/s NIC (50 GB/s) per GPU; the 20-rack run
crosses scalable units, modelled 2:1 oversubscribed above them as the bundled GB200 model is.
Where a source gives no message size (Voltage Park) the nccl-tests plateau size of 8 GB is used."""


def calibration_table() -> list[dict[str, object]]:
    """Each published point with the model's prediction: {source, setup, measured_gbps, predicted_gbps, ...}."""
    out: list[dict[str, object]] = []
    for p in MEASURED:
        c = allreduce(p.size_gb, p.island_gpus, p.fabric, p.algorithm)
        out.append({"source": p.source, "setup": p.setup, "measured_gbps": p.measured_gbps, "predicted_gbps": round(c.busbw_gbps, 1),
                    "algorithm": c.algorithm, "error": round(c.busbw_gbps / p.measured_gbps - 1.0, 4)})
    return out

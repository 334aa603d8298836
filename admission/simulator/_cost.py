"""The simulator's job cost model: how much slower a job runs on the placement it got.

Two link models price the all-reduce (``LINK_MODELS``, ``--link-model``). The default,
``calibrated``, lives in ``topology/_collectives.py``: NCCL's algorithms on aggregated rails, checked against
published nccl-tests measurements (coreweave/nccl-tests README, NVIDIA/nccl issue #1801, Voltage
Park's public H100 benchmarks; ``atoll bench collectives``); its all-reduce times go through
``slowdown_from_ratio`` (``topology/_link_cost.py``, with the formulas below). ``flat-ring``, described next, is the pessimistic end: it prices a
span across two GB200 racks at one 50 GB/s rail where nccl-tests measure 793 GB/s. Placement
still matters, by less: Fluidstack's engineering blog reports a 256-GPU job at 412 ms per step
placed topology-aware, 631 ms first-fit and 905 ms split across pods.

One synchronous step of a job is compute plus a ring all-reduce of its gradients::

    step = compute / p  +  A(S, k, B, α)
    A(S, k, B, α) = 2(k−1)/k · S/B  +  2(k−1) · α          (ring all-reduce)

- ``p``: the lowest perf score among the job's GPUs (1.0 = fleet median); a gang runs at its
  slowest member.
- ``S``: bytes all-reduced per step (``Job.model_gb``, GB); ``k``: the job's GPUs.
- ``B``, ``α``: per-GPU bandwidth (GB/s) and one-hop latency (µs) of the *bottleneck link* of the
  placement: the link of the highest topology level it crosses, i.e. of the lowest common domain
  of all its nodes; for a one-pod job, the intra-node link.

The ideal step puts all GPUs in one island at the island link (``B₀``, ``α₀``) and perf 1.0. The
job's ``comm_fraction`` f is the share of that ideal step spent in the all-reduce, so
``compute = (1 − f)·ideal`` and ``A(B₀, α₀) = f·ideal``, which gives::

    slowdown = actual / ideal = (1 − f)/p + f · A(S, k, B, α) / A(S, k, B₀, α₀)
    runtime  = duration_s × slowdown

``S`` only matters through the latency term: for large gradients the ratio tends to B₀/B.
The ideal placement gives exactly 1.0. Slowdown drops below 1 when every GPU is faster than
the fleet median (p > 1) and the link is ideal; that is real (a job on fast GPUs finishes
early) and is kept. It is computed in the form ``1 + (1 − f)(1/p − 1) + f(ratio − 1)``, equal to
the above, so that the ideal case is 1.0 exactly, not up to rounding.

No all-reduce term for single-GPU jobs (k = 1: nothing to reduce) nor for inference jobs
(replicas serve independently; shards of one replica talk, but the trace gives no shape for it),
whose slowdown is therefore only 1/p.

Choosing the ideal link: pass the island link (the best level) when the job fits one island.
For a job larger than any island, no placement can reach that link; pass the link of the lowest
level whose domains can hold it, so an unavoidable span is not counted as slowdown.

Overlap. Frameworks start the all-reduce of a gradient bucket while backward still computes the
next one (PyTorch DDP buckets, Li et al., "PyTorch Distributed", VLDB 2020), so part of the
all-reduce is hidden. With ``o`` (``Job.overlap``) the share of the all-reduce that can run behind
compute, hidden up to the compute time itself::

    step(p, A) = C/p + A − min(o·A, C/p)        C = 1 − f,  A = f · ratio
    slowdown   = step(p, A) / step(1, f)

``o = 0`` is the formula above. Overlap shrinks the penalty of a slow link only while the
all-reduce stays shorter than compute; a span that makes it several times longer is paid almost
in full whatever ``o`` is.

The assumptions, their sources and the flags that change them (``CostParams``, ``SOURCES``):

- ``f`` (comm fraction, ``--cost-comm-fraction``, by job size): 0.1 for every multi-GPU
  training job. Wang et al., "Characterizing Compute-Communication Overlap in GPU-Accelerated
  Distributed Deep Learning" (arXiv 2507.03114, 2025) measure GPT and LLaMA training on 4 A100 /
  H100 / MI250 / MI210 GPUs running compute and communication one after the other 10.2 % slower
  on average (26.6 % at most) than overlapped: an all-reduce of about a tenth of the step. A ring
  all-reduce moves 2(k−1)/k·S bytes per GPU, nearly independent of k, so at a fixed per-GPU batch
  f does not grow with the job by itself; the gradient size S does (``default_model_gb``).
- ``o`` (overlap, ``--cost-overlap``, per workload class): 0 by default, the upper bound of the
  penalty (nothing hidden); the sensitivity table of ``atoll bench quality`` also runs 0.5.
- Link bandwidths per level (``--cost-bandwidth``, both link models): the cluster model's vendor figures per GPU:
  NVLink 4 900 GB/s (H100), NVLink 5 1.8 TB/s (GB200 NVL72), InfiniBand NDR 400 Gb/s = 50 GB/s
  per GPU rail. The ring over the bottleneck link is a *flat* ring: NCCL's rings across nodes use
  every rail of a node at once (one ring per rail), so its measured bus bandwidth across DGX H100
  nodes approaches the sum of the node's rails, not one rail (nccl-tests, ``doc/PERFORMANCE.md``
  defines bus bandwidth = algorithm bandwidth × 2(k−1)/k). The vendor figure is therefore the
  pessimistic end for data-parallel traffic; pass the bus bandwidth your nccl-tests run measures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from admission.simulator._jobs import JOB_KINDS, Job, _unchecked_jobs
from topology import LINK_MODELS

if TYPE_CHECKING:
    from topology import ClusterModel

__all__ = ["SOURCES", "CostError", "CostParams", "apply_bandwidths", "apply_cost", "parse_bandwidths", "parse_comm_fraction",
           "parse_link_model", "parse_overlap"]

SOURCES: Final[dict[str, str]] = {
    "comm_fraction": "Wang et al., Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning, "
                     "arXiv 2507.03114 (2025): sequential compute+communication 10.2 % slower on average than overlapped (max 26.6 %)",
    "overlap": "Li et al., PyTorch Distributed: Experiences on Accelerating Data Parallel Training, VLDB 2020 (bucketed all-reduce "
               "overlapped with backward); 0 = nothing hidden, the upper bound of the penalty",
    "bandwidth": "NVIDIA: NVLink 4 900 GB/s per H100, NVLink 5 1.8 TB/s per GPU in GB200 NVL72; InfiniBand NDR 400 Gb/s = 50 GB/s "
                 "per GPU rail; nccl-tests doc/PERFORMANCE.md for bus bandwidth (algbw × 2(k−1)/k)",
    "gpu_perf": "Sinha et al., Not All GPUs Are Created Equal, SC22 (arXiv 2208.11035): 8 % average (max 22 %) performance "
                "variation among GPUs of one SKU, outliers up to 1.5x slower than the median",
    "collectives": "calibrated link model (_collectives): coreweave/nccl-tests README (GB200 NVL72 1/2/20 racks at 8 GB and 512 MB); "
                   "NVIDIA/nccl issue #1801 (GB200 NVL partitions over InfiniBand, ring and tree); Voltage Park public H100 benchmarks "
                   "(one node vs 4 nodes); `atoll bench collectives` prints each point with its prediction",
    "step_times": "Fluidstack engineering blog: a 256-GPU job at 412 ms per step placed topology-aware, 631 ms first-fit, 905 ms split "
                  "across pods (placement matters, by 1.5-2.2x, not by the flat ring's order of magnitude)",
}
"""Where each cost assumption comes from (printed by ``atoll bench quality`` and the README)."""


class CostError(ValueError):
    """A ``--cost-*`` value cannot be used; the message names the flag and the expected form."""


# ------------------------------------------------------------------------------ assumptions


@dataclass(frozen=True)
class CostParams:
    """The cost model's assumptions a run may change; ``None`` keeps what each job carries.

    ``comm_fraction``: (up to this many GPUs, f) steps in ascending order, the last may be
    ``math.inf``; applies to multi-GPU training jobs. ``overlap``: per workload class.
    ``bandwidth_gbps``: per-GPU bandwidth per topology level (label, or its last segment).
    ``link_model``: one of ``LINK_MODELS``."""

    comm_fraction: tuple[tuple[float, float], ...] | None = None
    overlap: Mapping[str, float] | None = None
    bandwidth_gbps: Mapping[str, float] = field(default_factory=dict)
    link_model: str = "calibrated"

    def fraction_for(self, gpus: int) -> float | None:
        if self.comm_fraction is None:
            return None
        for upto, f in self.comm_fraction:
            if gpus <= upto:
                return f
        return self.comm_fraction[-1][1]

    def describe(self) -> str:
        """One line naming every assumption in force (for titles and JSON)."""
        f = "as the jobs say (0.1)" if self.comm_fraction is None else ", ".join(
            f"{'≤' + format(int(u)) if math.isfinite(u) else 'larger'}: {v:g}" for u, v in self.comm_fraction)
        o = "0" if self.overlap is None else ", ".join(f"{k} {v:g}" for k, v in sorted(self.overlap.items()))
        bw = ", ".join(f"{k} {v:g} GB/s" for k, v in sorted(self.bandwidth_gbps.items())) or "as the cluster model"
        return f"link model {self.link_model}; comm fraction {f}; overlap {o}; link bandwidth {bw}"


def _number(flag: str, text: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CostError(f"{flag}: {text!r} is not a number") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise CostError(f"{flag}: {text!r} must be in [{low:g}, {high:g}]")
    return value


def parse_comm_fraction(spec: str) -> tuple[tuple[float, float], ...]:
    """``0.1`` (every size) or ``8:0.05,64:0.1,*:0.15`` (up to 8 GPUs 0.05, up to 64 0.1, larger 0.15)."""
    flag = "--cost-comm-fraction"
    out: list[tuple[float, float]] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        size, sep, value = part.rpartition(":")
        if not sep:
            out.append((math.inf, _number(flag, value, 0.0, 1.0)))
            continue
        upto = math.inf if size.strip() in ("*", "inf") else _number(flag, size, 1.0, math.inf)
        out.append((upto, _number(flag, value, 0.0, 1.0)))
    if not out:
        raise CostError(f"{flag}: give a fraction (0.1) or size steps (8:0.05,64:0.1,*:0.15)")
    sizes = [u for u, _ in out]
    if sizes != sorted(sizes) or len(set(sizes)) != len(sizes):
        raise CostError(f"{flag}: {spec!r}: the GPU counts must ascend (8:…,64:…,*:…)")
    return tuple(out)


def parse_link_model(spec: str) -> str:
    """``calibrated`` or ``flat-ring``."""
    if spec not in LINK_MODELS:
        raise CostError(f"--link-model: {spec!r} is not one of {', '.join(LINK_MODELS)}")
    return spec


def parse_overlap(spec: str) -> dict[str, float]:
    """``0.5`` (training) or ``training=0.5,inference=0``."""
    flag = "--cost-overlap"
    out: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        kind, sep, value = part.rpartition("=")
        kind = kind.strip() if sep else "training"
        if kind not in JOB_KINDS:
            raise CostError(f"{flag}: unknown workload class {kind!r}; use {', '.join(JOB_KINDS)}")
        out[kind] = _number(flag, value, 0.0, 1.0)
    if not out:
        raise CostError(f"{flag}: give a share (0.5) or per class (training=0.5,inference=0)")
    return out


def parse_bandwidths(spec: str) -> dict[str, float]:
    """``su=400,spine=200``: per-GPU GB/s per level (label or its last segment)."""
    flag = "--cost-bandwidth"
    out: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        level, sep, value = part.rpartition("=")
        if not sep or not level.strip():
            raise CostError(f"{flag}: {part!r} is not LEVEL=GBps (e.g. su=400)")
        out[level.strip()] = _number(flag, value, 1e-3, 1e9)
    if not out:
        raise CostError(f"{flag}: give LEVEL=GBps pairs (e.g. su=400,spine=200)")
    return out


def apply_cost(jobs: Sequence[Job], params: CostParams) -> list[Job]:
    """The jobs with ``params``' comm fraction and overlap; the same objects when nothing changes."""
    if params.comm_fraction is None and params.overlap is None:
        return list(jobs)
    comm = [j.comm_fraction for j in jobs]
    overlap = [j.overlap for j in jobs]
    for i, j in enumerate(jobs):
        f = params.fraction_for(j.gpus)
        if f is not None and j.kind == "training" and j.gpus > 1:
            comm[i] = f
        if params.overlap is not None:
            overlap[i] = params.overlap.get(j.kind, 0.0)
    return _unchecked_jobs(
        [j.id for j in jobs], [j.submit_s for j in jobs], [j.duration_s for j in jobs], [j.gpus for j in jobs],
        [j.pods for j in jobs], [j.gpus_per_pod for j in jobs], [j.kind for j in jobs], [j.queue for j in jobs],
        [j.cpu_milli_per_pod for j in jobs], [j.memory_mib_per_pod for j in jobs], comm, [j.model_gb for j in jobs], overlap,
        [j.priority for j in jobs],
    )


def apply_bandwidths(cluster: ClusterModel, params: CostParams) -> ClusterModel:
    """The cluster with ``params.bandwidth_gbps`` on the levels it names (every flavor having them)."""
    if not params.bandwidth_gbps:
        return cluster
    used: set[str] = set()
    flavors = []
    for flavor in cluster.flavors:
        levels = []
        for lv in flavor.levels:
            key = next((k for k in (lv.label, lv.label.rsplit("/", 1)[-1]) if k in params.bandwidth_gbps), None)
            if key is not None:
                used.add(key)
                lv = lv.model_copy(update={"bandwidth_gbps": params.bandwidth_gbps[key]})
            levels.append(lv)
        flavors.append(flavor.model_copy(update={"levels": levels}))
    unknown = sorted(set(params.bandwidth_gbps) - used)
    if unknown:
        known = sorted({lv.label for f in cluster.flavors for lv in f.levels})
        raise CostError(f"--cost-bandwidth: no level {', '.join(map(repr, unknown))} in cluster {cluster.name!r}; levels: {', '.join(known)}")
    return cluster.model_copy(update={"flavors": flavors})

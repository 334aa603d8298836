"""The simulator's job cost model: how much slower a job runs on the placement it got.

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
"""

from __future__ import annotations

from admission.simulator._jobs import Job

__all__ = ["ring_allreduce_s", "step_slowdown"]

_US = 1e-6


def ring_allreduce_s(size_gb: float, gpus: int, bandwidth_gbps: float, latency_us: float) -> float:
    """Seconds for a ring all-reduce of ``size_gb`` GB over ``gpus`` GPUs:
    ``2(k−1)/k · S/B + 2(k−1)·α``; 0 for one GPU."""
    if gpus <= 1:
        return 0.0
    steps = 2.0 * (gpus - 1)
    return steps / gpus * size_gb / bandwidth_gbps + steps * latency_us * _US


def step_slowdown(
    job: Job,
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
    return 1.0 + (1.0 - f) * (1.0 / min_perf - 1.0) + f * (actual / ideal - 1.0)

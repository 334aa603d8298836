"""Seeded synthetic workloads: the simulator's default input, since Atoll ships no trace.

All draws are vectorised on one ``numpy.random.Generator`` (PCG64) in a fixed order, so a seed
gives the same jobs on every machine and numpy release that keeps PCG64's streams:

1. inter-arrival gaps ~ Exponential(1 / rate) (a Poisson process), first job at ``start_s``;
2. kind: inference with probability ``inference_share``;
3. GPUs from ``size_mix`` (training) or from its entries ≤ ``inference_max_gpus`` (inference),
   both without entries above ``max_gpus``, weights renormalised;
4. duration ~ LogNormal(ln median, sigma), clipped to [``min_duration_s``, ``max_duration_s``].

A job's priority is not drawn: ``priority`` gives one per GPU count of the mix (its job class),
0 for the sizes it leaves out, so adding it changes no job but its priority.

The defaults follow the Microsoft ITP cluster-04 trace in shape (median duration 9,040 s, p90
26,002 s: sigma 1.0 gives a p90 of 3.6× the median, ITP has 2.9×) and a size mix with more
multi-node jobs than ITP, so topology matters. Offered load is usually set afterwards with
``scale_load``; ``arrival_rate_per_hour`` then only fixes the arrival pattern's randomness.
"""

from __future__ import annotations

from itertools import repeat
from typing import Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from admission.simulator._jobs import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    Job,
    _unchecked_jobs,
    split_into_pods,
)
from topology import DEFAULT_COMM_FRACTION, default_model_gb

__all__ = ["DEFAULT_SIZE_MIX", "SyntheticParams", "synthetic_jobs"]

DEFAULT_SIZE_MIX: Final[dict[int, float]] = {1: 0.45, 2: 0.10, 4: 0.10, 8: 0.20, 16: 0.07, 32: 0.05, 64: 0.02, 128: 0.01}


class SyntheticParams(BaseModel):
    """Knobs of the synthetic workload (YAML/JSON keys in camelCase or snake_case)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    arrival_rate_per_hour: float = Field(default=30.0, gt=0, validation_alias="arrivalRatePerHour")
    """Mean arrivals per hour of the Poisson process (ITP cluster 04: ≈ 14/h)."""
    start_s: float = Field(default=0.0, validation_alias="startSeconds")
    """Arrival time of the first job."""
    size_mix: dict[int, float] = Field(default_factory=lambda: dict(DEFAULT_SIZE_MIX), validation_alias="sizeMix")
    """GPUs per job → relative weight (normalised; weights need not sum to 1)."""
    max_gpus: int | None = Field(default=None, gt=0, validation_alias="maxGPUs")
    """Drop sizes above this (e.g. the cluster's largest island or the whole cluster)."""
    duration_median_s: float = Field(default=9000.0, gt=0, validation_alias="durationMedianSeconds")
    duration_sigma: float = Field(default=1.0, ge=0, validation_alias="durationSigma")
    """Sigma of ln(duration); 0 makes every job last the median."""
    min_duration_s: float = Field(default=60.0, ge=0, validation_alias="minDurationSeconds")
    max_duration_s: float = Field(default=14 * 86400.0, gt=0, validation_alias="maxDurationSeconds")
    inference_share: float = Field(default=0.2, ge=0, le=1, validation_alias="inferenceShare")
    """Share of jobs that are inference (no all-reduce; slowdown only from GPU perf)."""
    inference_max_gpus: int = Field(default=8, gt=0, validation_alias="inferenceMaxGPUs")
    """Inference replicas draw their size only from mix entries up to this many GPUs."""
    comm_fraction: float = Field(default=DEFAULT_COMM_FRACTION, ge=0, le=1, validation_alias="commFraction")
    """All-reduce share of an ideal step for multi-GPU training jobs (see ``_cost``)."""
    queue: str = Field(default="default", min_length=1)
    priority: dict[int, int] = Field(default_factory=dict)
    """GPU count of the mix → the ``spec.priority`` of its jobs (Kueue's int32); sizes not listed get 0."""

    @field_validator("size_mix")
    @classmethod
    def _mix(cls, mix: dict[int, float]) -> dict[int, float]:
        # The error's location already names the field (``sizeMix: …``), so the messages do not.
        if not mix:
            raise ValueError("lists no GPU count; give at least one, e.g. {8: 1}")
        for gpus, weight in mix.items():
            if gpus < 1:
                raise ValueError(f"GPU count {gpus} must be ≥ 1")
            if not weight >= 0:
                raise ValueError(f"GPU count {gpus}: weight {weight} must be ≥ 0")
        if sum(mix.values()) <= 0:
            raise ValueError("weights must not all be 0; give one GPU count a weight > 0")
        return mix

    @field_validator("priority", mode="before")
    @classmethod
    def _whole(cls, value: object) -> object:
        if isinstance(value, dict):
            for gpus, p in value.items():
                if isinstance(p, bool) or not isinstance(p, int) or not PRIORITY_MIN <= p <= PRIORITY_MAX:
                    raise ValueError(f"GPU count {gpus}: {p!r} must be a whole number in [{PRIORITY_MIN}, {PRIORITY_MAX}] "
                                     "(Kueue's int32 spec.priority)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SyntheticParams:
        unknown = sorted(set(self.priority) - set(self.size_mix))
        if unknown:
            raise ValueError(f"priority: GPU count {unknown[0]} is not in sizeMix ({', '.join(map(str, sorted(self.size_mix)))}); "
                             "give priorities to sizes the mix draws")
        if self.max_duration_s < self.min_duration_s:
            raise ValueError(f"maxDurationSeconds ({self.max_duration_s}) must be ≥ minDurationSeconds ({self.min_duration_s})")
        if not self._sizes(None)[1].sum() > 0:
            raise ValueError(f"sizeMix has no weight at or below maxGPUs ({self.max_gpus}); raise maxGPUs or add smaller sizes")
        if self.inference_share > 0 and not self._sizes(self.inference_max_gpus)[1].sum() > 0:
            raise ValueError(
                f"sizeMix has no weight at or below inferenceMaxGPUs ({self.inference_max_gpus}) for inferenceShare "
                f"{self.inference_share}; add a smaller size or set inferenceShare to 0"
            )
        return self

    def _sizes(self, cap: int | None) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """(sizes, probabilities) of the mix up to ``max_gpus`` and ``cap``, sorted by size."""
        caps = [c for c in (cap, self.max_gpus) if c is not None]
        limit = min(caps) if caps else None
        items = sorted((g, w) for g, w in self.size_mix.items() if limit is None or g <= limit)
        sizes = np.array([g for g, _ in items], dtype=np.int64)
        weights = np.array([w for _, w in items], dtype=np.float64)
        total = weights.sum()
        return sizes, (weights / total if total > 0 else weights)


_DEFAULT_PARAMS: Final = SyntheticParams()


def synthetic_jobs(n: int, seed: int, gpus_per_node: int, params: SyntheticParams = _DEFAULT_PARAMS) -> list[Job]:
    """``n`` jobs drawn from ``params`` (module docstring), sorted by arrival, ids ``syn-000000``…"""
    if n < 0:
        raise ValueError(f"n must be ≥ 0, got {n}")
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be ≥ 1, got {gpus_per_node}")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(3600.0 / params.arrival_rate_per_hour, size=n)
    submit = params.start_s + np.cumsum(gaps) - (gaps[0] if n else 0.0)
    inference = rng.random(n) < params.inference_share
    gpus = np.empty(n, dtype=np.int64)
    n_inf = int(inference.sum())
    sizes, probs = params._sizes(None)
    gpus[~inference] = rng.choice(sizes, size=n - n_inf, p=probs)
    if n_inf:
        sizes_i, probs_i = params._sizes(params.inference_max_gpus)
        gpus[inference] = rng.choice(sizes_i, size=n_inf, p=probs_i)
    duration = rng.lognormal(np.log(params.duration_median_s), params.duration_sigma, size=n)
    np.clip(duration, params.min_duration_s, params.max_duration_s, out=duration)

    sizes_used = np.unique(gpus)
    at = np.searchsorted(sizes_used, gpus)
    shapes = [split_into_pods(int(g), gpus_per_node) for g in sizes_used]
    pods = np.array([p for p, _ in shapes], dtype=np.int64)[at]
    per_pod = np.array([q for _, q in shapes], dtype=np.int64)[at]
    model_gb = np.array([default_model_gb(int(g)) for g in sizes_used])[at]
    comm = np.where(inference | (gpus == 1), 0.0, params.comm_fraction)
    kind = np.where(inference, "inference", "training").astype(object)
    return _unchecked_jobs(
        [f"syn-{i:06d}" for i in range(n)], submit.tolist(), duration.tolist(), gpus.tolist(), pods.tolist(),
        per_pod.tolist(), kind.tolist(), repeat(params.queue, n), repeat(0, n), repeat(0, n), comm.tolist(), model_gb.tolist(),
        repeat(0.0, n), [params.priority.get(g, 0) for g in gpus.tolist()] if params.priority else repeat(0, n),
    )

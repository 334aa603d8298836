"""Numbers a comparison can stand on: same jobs, the spread across seeds, how concentrated a win is.

- **Same jobs.** Every mean and percentile that compares policies is taken over the *common set*:
  the jobs every compared policy completed in that seed's run. A policy that rejects or strands
  jobs no longer averages over fewer, easier jobs than the others; what it dropped is counted in
  its own columns (jobs and GPU-hours, rejected and unfinished). All-jobs figures stay in JSON.
- **Seeds.** A figure measured over ``n`` seeds is reported as its mean and the half-width of a
  95 % confidence interval, ``t(0.975, n−1) · s / √n`` (Student's t, ``s`` the sample standard
  deviation across seeds). A comparison with the baseline is *paired*: per seed, policy minus
  baseline on the same workload and the same tie-breaks, then the interval over those
  differences. A difference whose interval holds 0 is a tie, whatever its sign.
- **Concentration.** Per seed, each common job's JCT gain ``d = JCT(baseline) − JCT(policy)``.
  The share of the gains in the net's direction (every job's gain when the net Σd is a gain,
  every job's loss when it is a loss) carried by the top 1 % / 10 % of jobs, at most 100 %: a
  share of the *net* exceeds 100 % whenever other jobs went the other way, and on a small run,
  where gains and losses nearly cancel, read 434 % or 1,233 %; how much went the other way is in
  the counts of jobs better / worse / equal (|d| ≤ 1 s) and in ``driven_by``: the fewest jobs
  whose gains alone reach the net.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from admission.simulator._sim import STATUS_DONE, STATUS_REJECTED, STATUS_UNFINISHED

__all__ = [
    "EQUAL_JCT_S",
    "ISLAND_FIGURES",
    "Concentration",
    "Estimate",
    "RunRecord",
    "common_mask",
    "concentration",
    "estimate",
    "paired",
    "per_seed_figures",
    "t95",
]

FloatArray = npt.NDArray[np.float64]
EQUAL_JCT_S: Final = 1.0
ISLAND_FIGURES: Final = ("p95_gang_slowdown", "island_block_72", "island_block_64", "island_block_32", "island_block_16",
                         "stranded_gpu_hours")
"""Per-run figures of whole-island availability and the gang slowdown tail (``_metrics``)."""
"""Two JCTs of one job closer than this (seconds) count as equal."""

_T975: Final = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(n: int) -> float:
    """Student's t quantile 0.975 with ``n − 1`` degrees of freedom (NaN for fewer than 2 values)."""
    if n < 2:
        return math.nan
    df = n - 1
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


@dataclass(frozen=True, slots=True)
class Estimate:
    """A figure over seeds: mean, 95 % half-width (NaN with one seed) and the number of seeds."""

    mean: float
    half: float
    n: int

    @property
    def known(self) -> bool:
        return self.n > 0 and not math.isnan(self.mean)

    def holds_zero(self) -> bool:
        """True when the interval contains 0 (a tie). With one seed only an exact 0 is a tie."""
        if not self.known:
            return True
        if math.isnan(self.half):
            return self.mean == 0.0
        return self.mean - self.half <= 0.0 <= self.mean + self.half

    def to_json(self, digits: int = 6) -> dict[str, Any]:
        return {"mean": _r(self.mean, digits), "ci95": _r(self.half, digits), "n": self.n}


def _r(x: float, digits: int) -> float | None:
    return None if math.isnan(x) else round(x, digits)


def estimate(values: Sequence[float | None]) -> Estimate:
    """Mean and 95 % half-width of the known values (``None``/NaN left out)."""
    xs = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if xs.size == 0:
        return Estimate(math.nan, math.nan, 0)
    if xs.size == 1:
        return Estimate(float(xs[0]), math.nan, 1)
    half = t95(int(xs.size)) * float(xs.std(ddof=1)) / math.sqrt(xs.size)
    return Estimate(float(xs.mean()), half, int(xs.size))


@dataclass(frozen=True)
class RunRecord:
    """What the statistics need of one run (one policy, one seed, one load): per-job outcome
    arrays in the prepared workload's order, and the run's all-jobs summary (``summarize``)."""

    policy: str
    seed: int
    load: float | None
    status: npt.NDArray[np.int64]
    arrival: FloatArray
    start: FloatArray
    end: FloatArray
    gpus: npt.NDArray[np.int64]
    duration: FloatArray
    """Ideal runtime per job (s): GPU-hours of what a policy dropped are gpus × duration."""
    summary: Mapping[str, Any] = field(default_factory=dict)


def common_mask(records: Sequence[RunRecord]) -> npt.NDArray[np.bool_]:
    """Jobs every run in ``records`` completed (the runs must share one workload)."""
    if not records:
        return np.zeros(0, dtype=bool)
    n = records[0].status.size
    mask = np.ones(n, dtype=bool)
    for r in records:
        if r.status.size != n:
            raise ValueError(f"{r.policy}: {r.status.size} jobs, other runs have {n}; compare runs of one workload only")
        mask &= r.status == STATUS_DONE
    return mask


def _mean(x: FloatArray) -> float:
    return float(x.mean()) if x.size else math.nan


def _pct(x: FloatArray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else math.nan


def per_seed_figures(record: RunRecord, common: npt.NDArray[np.bool_]) -> dict[str, float]:
    """One run's figures: JCT and wait over the common set, what it dropped, and its all-jobs numbers."""
    jct = (record.end - record.arrival)[common]
    wait = (record.start - record.arrival)[common]
    gpu_h = record.gpus * record.duration / 3600.0
    rejected = record.status == STATUS_REJECTED
    unfinished = record.status == STATUS_UNFINISHED
    s = record.summary
    done = record.status == STATUS_DONE
    return {
        "mean_jct_s": _mean(jct),
        "p50_jct_s": _pct(jct, 50),
        "p95_jct_s": _pct(jct, 95),
        "mean_wait_s": _mean(wait),
        "p95_wait_s": _pct(wait, 95),
        "common_jobs": float(common.sum()),
        "jobs_rejected": float(rejected.sum()),
        "gpu_hours_rejected": float(gpu_h[rejected].sum()),
        "jobs_unfinished": float(unfinished.sum()),
        "gpu_hours_unfinished": float(gpu_h[unfinished].sum()),
        "all_mean_jct_s": _mean((record.end - record.arrival)[done]),
        "all_mean_wait_s": _num(s.get("mean_wait_s")),
        "all_jobs_done": float(done.sum()),
        **{k: _num(s.get(k)) for k in ("gpu_allocation", "gpu_goodput", "single_island_share", "mean_slowdown", "p95_slowdown",
                                      "fragmentation_mean", "decisions_per_job", *ISLAND_FIGURES)},
    }


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def paired(policy: Sequence[float], baseline: Sequence[float], *, relative: bool = False) -> Estimate:
    """Per-seed differences policy − baseline (relative: ÷ baseline, in %), then their interval."""
    if len(policy) != len(baseline):
        raise ValueError(f"paired: {len(policy)} policy values vs {len(baseline)} baseline values")
    diffs: list[float | None] = []
    for p, b in zip(policy, baseline):
        if math.isnan(p) or math.isnan(b) or (relative and b == 0.0):
            diffs.append(None)
        else:
            diffs.append(100.0 * (p - b) / b if relative else p - b)
    return estimate(diffs)


@dataclass(frozen=True, slots=True)
class Concentration:
    """Where one seed's JCT difference comes from (module docstring)."""

    jobs: int
    net_s: float
    """Σ (JCT baseline − JCT policy) over common jobs: > 0 the policy gained job-seconds."""
    top1_share: float
    """Share of the gains in the net's direction carried by the top 1 % of jobs (0 to 1)."""
    top10_share: float
    better: int
    worse: int
    equal: int
    driven_by: int
    """Fewest jobs whose gains alone reach the net (0 when the net is 0)."""


def concentration(policy: RunRecord, baseline: RunRecord, common: npt.NDArray[np.bool_]) -> Concentration:
    """Concentration of ``policy``'s JCT difference against ``baseline`` on ``common`` jobs."""
    d = ((baseline.end - baseline.arrival) - (policy.end - policy.arrival))[common]
    n = int(d.size)
    net = float(d.sum())
    better = int((d > EQUAL_JCT_S).sum())
    worse = int((d < -EQUAL_JCT_S).sum())
    if n == 0 or net == 0.0:
        return Concentration(n, net, math.nan, math.nan, better, worse, n - better - worse, 0)
    signed = np.sort(d if net > 0 else -d)[::-1]
    total = abs(net)
    cum = np.cumsum(signed)
    gains = np.cumsum(np.maximum(signed, 0.0))  # the gains in the net's direction, largest first
    top1 = float(gains[max(1, math.ceil(0.01 * n)) - 1] / gains[-1])
    top10 = float(gains[max(1, math.ceil(0.10 * n)) - 1] / gains[-1])
    driven = int(np.searchsorted(cum, total * (1 - 1e-12))) + 1
    return Concentration(n, net, top1, top10, better, worse, n - better - worse, min(driven, n))

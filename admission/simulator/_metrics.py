"""Numbers per policy from a ``SimResult``, and the comparison table.

Definitions (the README's table uses them):

- JCT = completion − arrival; queueing delay = start − arrival (jobs that started).
- GPU allocation = time-weighted allocated GPUs / flavor GPUs over the arrival window (first to
  last arrival: the span in which the load is offered; the drain after it measures the trace's
  longest job, not the policy). A slowed job holds its GPUs longer, so ``gpu_goodput`` weights
  each allocated GPU by 1/slowdown: the share of the cluster doing work at ideal speed.
- Single-island share: of the gangs (multi-pod training jobs) that fit one island of the empty
  flavor, those placed in one island. Single-pod jobs are left out (one island by construction),
  and so are inference replicas (their class spreads them across islands on purpose). ``None``
  when no such gang exists (e.g. every gang is bigger than an island).
- Slowdown: the cost model's stretch of each completed job (1.0 = ideal placement).
- Fragmentation: time-weighted mean of ``topology.fragmentation_index`` at the island level,
  sampled over the arrival window.
- Whole-island availability (``island_block_<G>``): the share of the arrival window (sampled
  with fragmentation) in which some island had a free block of G GPUs (72, 64, 32, 16; sizes no
  island can hold are left out). ``stranded_gpu_hours``: GPU-hours of gangs (multi-pod training
  jobs that fit one island) waiting while their flavor had that many GPUs free but no island did:
  what fragmentation costs the queue. ``p95_gang_slowdown``: the cost model's p95 stretch of
  completed multi-GPU jobs (the GPU speed tail lands here: a gang runs at its slowest GPU).
- Preemption (a profile's ``preemptDomain``): ``preemption_plans`` domain-clearing plans made
  (``dry-run`` ones too), ``preempted`` victims evicted, ``preempted_gpu_hours`` the GPU-hours they
  had run when evicted (lost: each restarts from scratch). A victim's wait runs from its arrival
  to its last start, and its JCT to its last end. Kueue's own preemption for quota
  (``SimSettings.kueue_preemption``, ``_kueue_preemption``): ``kueue_preemptions`` times it
  preempted, ``kueue_preempted`` Workloads it evicted, ``kueue_preempted_gpu_hours`` what they had run.
- Decisions per second: placement calls the policy answered per second of wall time spent in
  them (every call counts, admitted or not).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from admission.simulator._sim import ISLAND_BLOCKS, STATUS_DONE, STATUS_REJECTED, STATUS_UNFINISHED, SimResult

__all__ = ["INVARIANT_KEYS", "JSON_KEYS", "format_table", "summarize", "time_weighted_mean"]

JSON_KEYS = (
    "mean_jct_s", "p50_jct_s", "p95_jct_s", "mean_wait_s", "p95_wait_s", "gpu_allocation", "gpu_goodput",
    "single_island_share", "mean_slowdown", "p95_slowdown", "p95_gang_slowdown", "fragmentation_mean", "island_block_72",
    "island_block_64", "island_block_32", "island_block_16", "stranded_gpu_hours", "decisions_per_s",
    "jobs_done", "jobs_rejected", "jobs_unfinished", "makespan_s", "wall_s",
    "invariant_checks", "invariant_full_checks", "invariant_violations",
    "jobs_done", "jobs_rejected", "jobs_unfinished", "makespan_s", "wall_s", "decisions_per_job", "wait_by_size_band",
    "reserved_idle_gpu_hours",
    "quota_yields", "reparked", "quota_yields_timed_out", "longest_quota_yield_hours",
    "preempt_domain", "preemption_plans", "preempted", "preempted_gpu_hours", "mean_jct_by_size_band",
    "kueue_preemption", "kueue_preemptions", "kueue_preempted", "kueue_preempted_gpu_hours",
)
INVARIANT_KEYS = ("invariant_checks", "invariant_full_checks", "invariant_violations")
"""What a run reports of the no-double-booking invariant (per run in ``atoll simulate``'s JSON)."""

SIZE_BANDS = ((1, 7), (8, 15), (16, 63), (64, None))
"""GPU-count bands of the wait report: 1-7, 8-15, 16-63, 64+."""


def time_weighted_mean(times: npt.NDArray[np.float64], values: npt.NDArray[np.float64], lo: float, hi: float) -> float:
    """Mean over [lo, hi] of the step function that holds ``values[i]`` from ``times[i]`` on."""
    if times.size == 0:
        return 0.0
    if hi <= lo:
        return float(values[np.searchsorted(times, lo, side="right") - 1]) if times[0] <= lo else 0.0
    edges = np.clip(np.append(times, hi), lo, hi)
    widths = np.diff(edges)
    return float((widths * values).sum() / (hi - lo))


def _pct(values: npt.NDArray[np.float64], q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def _mean(values: npt.NDArray[np.float64]) -> float | None:
    return float(values.mean()) if values.size else None


def summarize(result: SimResult) -> dict[str, Any]:
    """The per-policy numbers (the JSON object under ``policies.<name>``)."""
    done = result.status == STATUS_DONE
    started = ~np.isnan(result.start)
    jct = (result.end - result.arrival)[done]
    wait = (result.start - result.arrival)[started]
    slow = result.slowdown[done]
    lo, hi = result.window
    if hi <= lo:
        hi = float(np.nanmax(result.end)) if done.any() else lo
    total = max(result.total_gpus, 1)
    gangs = result.gang_fits_island & started
    frag_hi = max(hi, float(result.frag_times[-1]) + 1.0) if result.frag_times.size else hi
    out: dict[str, Any] = {
        "mean_jct_s": _mean(jct),
        "p50_jct_s": _pct(jct, 50),
        "p95_jct_s": _pct(jct, 95),
        "mean_wait_s": _mean(wait),
        "p95_wait_s": _pct(wait, 95),
        "gpu_allocation": time_weighted_mean(result.times, result.allocated, lo, hi) / total,
        "gpu_goodput": time_weighted_mean(result.times, result.useful, lo, hi) / total,
        "single_island_share": float((result.islands[gangs] == 1).mean()) if gangs.any() else None,
        "mean_slowdown": _mean(slow),
        "p95_slowdown": _pct(slow, 95),
        "fragmentation_mean": time_weighted_mean(result.frag_times, result.frag_values, float(result.frag_times[0]), frag_hi)
        if result.frag_times.size else 0.0,
        "p95_gang_slowdown": _pct(result.slowdown[done & (result.gpus > 1)], 95),
        **_island_figures(result),
        "decisions_per_s": result.decisions / result.decision_seconds if result.decision_seconds > 0 else None,
        "jobs_done": int(done.sum()),
        "jobs_rejected": int((result.status == STATUS_REJECTED).sum()),
        "jobs_unfinished": int((result.status == STATUS_UNFINISHED).sum()),
        "makespan_s": float(np.nanmax(result.end) - result.arrival[0]) if done.any() else None,
        "wall_s": result.wall_seconds,
        "invariant_checks": result.invariant_checks,
        "invariant_full_checks": result.invariant_full_checks,
        "invariant_violations": result.invariant_violations,
        "decisions_per_job": result.decisions / len(result.status) if len(result.status) else None,
        "reserved_idle_gpu_hours": result.reserved_idle_gpu_hours,
        "quota_yields": result.quota_yields,
        "reparked": result.reparked,
        "quota_yields_timed_out": result.quota_yields_timed_out,
        "longest_quota_yield_hours": result.longest_quota_yield_hours,
        "preempt_domain": result.preempt_domain,
        "preemption_plans": result.preemption_plans,
        "preempted": result.preempted,
        "preempted_gpu_hours": float(result.preempted_gpu_hours),
        "kueue_preemption": result.kueue_preemption,
        "kueue_preemptions": result.kueue_preemptions,
        "kueue_preempted": result.kueue_preempted,
        "kueue_preempted_gpu_hours": float(result.kueue_preempted_gpu_hours),
    }
    rounded: dict[str, Any] = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}
    rounded["wait_by_size_band"] = wait_by_size_band(result)
    rounded["mean_jct_by_size_band"] = mean_jct_by_size_band(result)
    return rounded


def mean_jct_by_size_band(result: SimResult) -> dict[str, float | None]:
    """Per size band (``SIZE_BANDS``): the mean JCT of its completed jobs (None: none completed)."""
    done = result.status == STATUS_DONE
    jct = result.end - result.arrival
    out: dict[str, float | None] = {}
    for lo, hi in SIZE_BANDS:
        band = done & (result.gpus >= lo) & ((result.gpus <= hi) if hi is not None else True)
        out[f"{lo}-{hi}" if hi is not None else f"{lo}+"] = round(float(jct[band].mean()), 3) if band.any() else None
    return out


def wait_by_size_band(result: SimResult) -> dict[str, dict[str, Any]]:
    """Per size band (``SIZE_BANDS``): jobs, p95 and maximum wait of the jobs that started, and
    how many never started (a wait with no end, not in the percentiles)."""
    started = ~np.isnan(result.start)
    wait = result.start - result.arrival
    out: dict[str, dict[str, Any]] = {}
    for lo, hi in SIZE_BANDS:
        band = (result.gpus >= lo) & ((result.gpus <= hi) if hi is not None else True)
        w = wait[band & started]
        out[f"{lo}-{hi}" if hi is not None else f"{lo}+"] = {
            "jobs": int(band.sum()), "p95_wait_s": None if not w.size else round(float(np.percentile(w, 95)), 3),
            "max_wait_s": None if not w.size else round(float(w.max()), 3), "never_started": int((band & ~started).sum())}
    return out


def _island_figures(result: SimResult) -> dict[str, Any]:
    """Whole-island availability per block size and stranded gang GPU-hours (module docstring)."""
    t = result.frag_times
    out: dict[str, Any] = {}
    if not t.size:
        return {**{f"island_block_{b}": None for b in ISLAND_BLOCKS}, "stranded_gpu_hours": 0.0}
    lo, hi = float(t[0]), max(result.window[1], float(t[-1]) + 1.0)
    for b in ISLAND_BLOCKS:
        v = result.block_free.get(b)
        out[f"island_block_{b}"] = time_weighted_mean(t, v, lo, hi) if v is not None and v.size == t.size else None
    s = result.stranded_gpus
    out["stranded_gpu_hours"] = time_weighted_mean(t, s, lo, hi) * (hi - lo) / 3600.0 if s.size == t.size else 0.0
    return out


def _time_unit(rows: Sequence[Mapping[str, Any]]) -> tuple[str, float]:
    big = max((r.get("mean_jct_s") or 0.0) for r in rows) if rows else 0.0
    if big >= 3 * 3600:
        return "h", 3600.0
    if big >= 180:
        return "min", 60.0
    return "s", 1.0


def _fmt(value: Any, spec: str, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return format(value / scale, spec)


def format_table(summaries: Mapping[str, Mapping[str, Any]], *, title: str = "") -> str:
    """A fixed-width comparison table, one row per policy."""
    rows = list(summaries.values())
    unit, scale = _time_unit(rows)
    header = ["policy", f"mean JCT {unit}", f"p50 JCT {unit}", f"p95 JCT {unit}", f"mean wait {unit}", f"p95 wait {unit}",
              "GPU alloc %", "goodput %", "1-island %", "mean slow", "p95 slow", "frag", "decisions/s", "rejected"]
    lines = []
    for name, s in summaries.items():
        lines.append([
            name,
            _fmt(s["mean_jct_s"], ".2f", scale), _fmt(s["p50_jct_s"], ".2f", scale), _fmt(s["p95_jct_s"], ".2f", scale),
            _fmt(s["mean_wait_s"], ".2f", scale), _fmt(s["p95_wait_s"], ".2f", scale),
            _fmt(s["gpu_allocation"], ".1f", 0.01), _fmt(s["gpu_goodput"], ".1f", 0.01),
            _fmt(s["single_island_share"], ".1f", 0.01),
            _fmt(s["mean_slowdown"], ".3f"), _fmt(s["p95_slowdown"], ".3f"), _fmt(s["fragmentation_mean"], ".3f"),
            _fmt(s["decisions_per_s"], ",.0f"), str(s["jobs_rejected"] + s["jobs_unfinished"]) if s["jobs_unfinished"] == 0
            else f"{s['jobs_rejected']}+{s['jobs_unfinished']} unfinished",
        ])
    widths = [max(len(h), *(len(r[i]) for r in lines)) if lines else len(h) for i, h in enumerate(header)]
    out = [title] if title else []
    out.append("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))))
    out.append("  ".join("-" * w for w in widths))
    for r in lines:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)

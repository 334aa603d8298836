"""Policies against a baseline over seeds: the table, the verdicts, the plain-words summary, JSON.

Every figure here follows ``_stats``: means and percentiles over the jobs every compared policy
completed in that seed, a 95 % interval over seeds, paired differences against the baseline, and
a difference whose interval holds 0 reported as a tie. A policy that rejected or stranded jobs
carries a ``†`` and its dropped jobs in their own columns, so its mean is never read as a win
bought by dropping work.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from admission.simulator._stats import (
    ISLAND_FIGURES,
    Concentration,
    Estimate,
    RunRecord,
    common_mask,
    concentration,
    estimate,
    paired,
    per_seed_figures,
)

__all__ = ["Comparison", "compare", "comparison_json", "dropped_more", "format_comparison", "format_islands", "format_sweep", "policy_verdict",
           "summary_lines", "verdict", "verdict_lines"]

DEFAULT_BASELINE = "kueue-bestfit"
_FIGURES = ("mean_jct_s", "p50_jct_s", "p95_jct_s", "mean_wait_s", "p95_wait_s", "gpu_allocation", "gpu_goodput", "mean_slowdown",
            "single_island_share", "fragmentation_mean", "common_jobs", "jobs_rejected", "gpu_hours_rejected", "jobs_unfinished",
            "gpu_hours_unfinished", "all_mean_jct_s", "all_mean_wait_s", "all_jobs_done", *ISLAND_FIGURES)
_RELATIVE = ("mean_jct_s", "p95_jct_s", "mean_wait_s")
"""Differences in % of the baseline; the others (allocation, goodput, slowdown) as plain differences."""
_ABSOLUTE = ("gpu_allocation", "gpu_goodput", "mean_slowdown")
_SAME_ALLOCATION = 0.01
"""Allocations within one point (interval under two) read as "the same allocation"; the numbers stay in the line."""


@dataclass(frozen=True)
class Comparison:
    """One configuration (one load) over its seeds."""

    load: float | None
    seeds: tuple[int, ...]
    policies: tuple[str, ...]
    baseline: str
    figures: dict[str, dict[str, Estimate]]
    per_seed: dict[str, list[dict[str, float]]]
    diffs: dict[str, dict[str, Estimate]]
    concentration: dict[str, list[Concentration]]


def compare(records: Mapping[tuple[float | None, int, str], RunRecord], *, load: float | None, seeds: Sequence[int],
            policies: Sequence[str], baseline: str | None = None) -> Comparison:
    """Aggregate the runs of one load: per seed the common set of all ``policies``, then over seeds."""
    base = baseline if baseline is not None and baseline in policies else (DEFAULT_BASELINE if DEFAULT_BASELINE in policies else policies[0])
    per_seed: dict[str, list[dict[str, float]]] = {p: [] for p in policies}
    conc: dict[str, list[Concentration]] = {p: [] for p in policies if p != base}
    for seed in seeds:
        runs = [records[(load, seed, p)] for p in policies]
        common = common_mask(runs)
        for p, r in zip(policies, runs):
            per_seed[p].append(per_seed_figures(r, common))
        b = records[(load, seed, base)]
        for p, r in zip(policies, runs):
            if p != base:
                conc[p].append(concentration(r, b, common))
    figures = {p: {k: estimate([s[k] for s in per_seed[p]]) for k in _FIGURES} for p in policies}
    diffs: dict[str, dict[str, Estimate]] = {}
    for p in policies:
        if p == base:
            continue
        d = {k: paired([s[k] for s in per_seed[p]], [s[k] for s in per_seed[base]], relative=True) for k in _RELATIVE}
        d |= {k: paired([s[k] for s in per_seed[p]], [s[k] for s in per_seed[base]]) for k in _ABSOLUTE}
        diffs[p] = d
    return Comparison(load, tuple(seeds), tuple(policies), base, figures, per_seed, diffs, conc)


NO_INTERVAL_ONE_SEED = "no verdict (1 seed: no interval)"
NO_INTERVAL_IDENTICAL = "no verdict (seeds identical: no interval)"


def verdict(diff: Estimate, *, lower_is_better: bool = True) -> str:
    """``win`` / ``loss`` when the interval excludes 0, ``tie`` when it holds 0. Without an
    interval there is no verdict: one seed, or seeds that all gave the same difference (identical
    GPUs and a trace: every seed is the same run, and "± 0" would call any difference a win)."""
    if not diff.known:
        return "n/a"
    if diff.mean == 0.0:
        return "tie"
    if diff.n < 2 or math.isnan(diff.half):
        return NO_INTERVAL_ONE_SEED
    if diff.half <= 1e-9 * abs(diff.mean):
        return NO_INTERVAL_IDENTICAL
    if diff.holds_zero():
        return "tie"
    better = diff.mean < 0 if lower_is_better else diff.mean > 0
    return "win" if better else "loss"


def _pm(e: Estimate, scale: float = 1.0, spec: str = ".2f", sign: bool = False) -> str:
    if not e.known:
        return "–"
    fmt = ("+" if sign else "") + spec
    head = format(e.mean / scale, fmt)
    if math.isnan(e.half):
        return head
    return f"{head} ± {format(e.half / scale, spec)}"


def _time_unit(seconds: float) -> tuple[str, float]:
    if seconds >= 3 * 3600:
        return "h", 3600.0
    if seconds >= 180:
        return "min", 60.0
    return "s", 1.0


def _dropped(jobs: Estimate, gpu_hours: Estimate) -> str:
    if not jobs.known or jobs.mean == 0:
        return "0"
    count = f"{jobs.mean:.0f}" if float(jobs.mean).is_integer() else f"{jobs.mean:.1f}"
    return f"{count} ({gpu_hours.mean:,.0f} GPU-h)"


def _dropped_any(cmp: Comparison, p: str) -> bool:
    f = cmp.figures[p]
    return (f["jobs_rejected"].known and f["jobs_rejected"].mean > 0) or (f["jobs_unfinished"].known and f["jobs_unfinished"].mean > 0)


def dropped_more(cmp: Comparison, p: str) -> bool:
    """``p`` rejected or stranded more jobs than the baseline: its JCT is over less work, no verdict."""
    f, b = cmp.figures[p], cmp.figures[cmp.baseline]

    def lost(x: dict[str, Estimate]) -> float:
        return sum(x[k].mean for k in ("jobs_rejected", "jobs_unfinished") if x[k].known)

    return lost(f) > lost(b)


def policy_verdict(cmp: Comparison, p: str) -> str:
    """``verdict`` on mean JCT, or ``dropped work`` when ``p`` ran fewer jobs than the baseline."""
    return "dropped work" if dropped_more(cmp, p) else verdict(cmp.diffs[p]["mean_jct_s"])


def _share(conc: Sequence[Concentration], attr: str) -> Estimate:
    return estimate([getattr(c, attr) for c in conc])


def _rows(cmp: Comparison, scale: float, with_load: bool) -> list[list[str]]:
    rows: list[list[str]] = []
    for p in cmp.policies:
        f = cmp.figures[p]
        name = p + (" †" if _dropped_any(cmp, p) else "")
        if p == cmp.baseline:
            delta, verdict_text, top, bwe = "(baseline)", "", "", ""
        else:
            d = cmp.diffs[p]["mean_jct_s"]
            delta = _pm(d, 1.0, ".1f", sign=True) + " %"
            verdict_text = policy_verdict(cmp, p)
            conc = cmp.concentration[p]
            t1, t10 = _share(conc, "top1_share"), _share(conc, "top10_share")
            top = "–" if not t1.known or verdict(d) == "tie" else f"{100 * t1.mean:.0f} / {100 * t10.mean:.0f} %"
            bwe = "/".join(f"{sum(getattr(c, k) for c in conc) / max(len(conc), 1):.0f}" for k in ("better", "worse", "equal"))
        row = [name, _pm(f["mean_jct_s"], scale), _pm(f["p95_jct_s"], scale), _pm(f["mean_wait_s"], scale),
               _pm(f["gpu_allocation"], 0.01, ".1f"), _dropped(f["jobs_rejected"], f["gpu_hours_rejected"]),
               _dropped(f["jobs_unfinished"], f["gpu_hours_unfinished"]), delta, verdict_text, top, bwe]
        rows.append(([f"{cmp.load:g}" if cmp.load is not None else "as recorded"] if with_load else []) + row)
    return rows


def _header(unit: str, with_load: bool) -> list[str]:
    return (["load"] if with_load else []) + [
        "policy", f"mean JCT {unit}", f"p95 JCT {unit}", f"mean wait {unit}", "GPU alloc %", "rejected", "unfinished",
        "Δ mean JCT", "verdict", "top 1/10 % share", "better/worse/equal"]


def _render(header: list[str], rows: list[list[str]], title: str, separators: Sequence[int] = ()) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join
    out = [title] if title else []
    out.append(line(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))))
    out.append(line("-" * w for w in widths))
    for k, r in enumerate(rows):
        if k in separators:
            out.append("")
        out.append(line(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)


def format_comparison(cmp: Comparison, *, title: str = "") -> str:
    """One configuration: a row per policy, JCT and wait over the common jobs."""
    unit, scale = _time_unit(cmp.figures[cmp.baseline]["mean_jct_s"].mean or 0.0)
    common = cmp.figures[cmp.baseline]["common_jobs"]
    foot = (f"JCT and wait over the {common.mean:,.0f} jobs every policy completed "
            f"({f'mean of {len(cmp.seeds)} seeds' if len(cmp.seeds) > 1 else 'one seed: no intervals'}); ± = 95 % interval over seeds; Δ is paired per seed "
            f"against {cmp.baseline}, a tie when its interval holds 0; † = rejected or unfinished jobs (own columns).")
    return _render(_header(unit, False), _rows(cmp, scale, False), title) + "\n" + foot


def format_sweep(cmps: Sequence[Comparison], *, title: str = "") -> str:
    """Every load of a sweep in one table (loads as row groups)."""
    unit, scale = _time_unit(max((c.figures[c.baseline]["mean_jct_s"].mean for c in cmps if c.figures), default=0.0) or 0.0)
    rows: list[list[str]] = []
    seps: list[int] = []
    for c in cmps:
        if rows:
            seps.append(len(rows))
        rows.extend(_rows(c, scale, True))
    seeds = len(cmps[0].seeds) if cmps else 0
    foot = (f"per load: JCT and wait over the jobs every policy completed, mean of {seeds} seeds ± 95 % interval; "
            "Δ paired per seed against the baseline, a tie when its interval holds 0; † = rejected or unfinished jobs.")
    return _render(_header(unit, True), rows, title, seps) + "\n" + foot


def format_islands(cmps: Sequence[Comparison], *, title: str = "") -> str:
    """Whole-island availability per load and policy: the share of time a free block of G GPUs
    existed inside one island, the GPU-hours gangs waited stranded by fragmentation (their flavor
    had the GPUs free, no island did), and the p95 slowdown of multi-GPU jobs; mean ± 95 %."""
    blocks = [k for k in ISLAND_FIGURES if k.startswith("island_block_")]
    shown = [k for k in blocks if any(c.figures[p][k].known for c in cmps for p in c.policies)]
    header = ["load", "policy"] + [f"{k.rsplit('_', 1)[1]}-GPU block %" for k in shown] + ["stranded GPU-h", "p95 gang slowdown"]
    rows: list[list[str]] = []
    seps: list[int] = []
    for c in cmps:
        if rows:
            seps.append(len(rows))
        for p in c.policies:
            f = c.figures[p]
            rows.append([f"{c.load:g}" if c.load is not None else "as recorded", p] + [_pm(f[k], 0.01, ".0f") for k in shown]
                        + [_pm(f["stranded_gpu_hours"], 1.0, ",.0f"), _pm(f["p95_gang_slowdown"], 1.0, ".3f")])
    foot = ("block %: share of the arrival window in which some island had that many GPUs free"
            + ("" if len(shown) == len(blocks) else " (sizes no island holds are left out)")
            + "; stranded: GPU-hours of gangs waiting while their flavor had the GPUs free but no single island did.")
    return _render(header, rows, title, seps) + "\n" + foot


def _pct_text(e: Estimate) -> str:
    return f"{e.mean:+.1f} %" + ("" if math.isnan(e.half) else f" ± {e.half:.1f} %")


def summary_lines(cmp: Comparison) -> list[str]:
    """The plain-words summary: one line per policy against the baseline, intervals respected."""
    out: list[str] = []
    n = len(cmp.seeds)
    base = cmp.baseline
    for p in cmp.policies:
        if p == base:
            continue
        f = cmp.figures[p]
        d = cmp.diffs[p]["mean_jct_s"]
        v = verdict(d)
        alloc = cmp.diffs[p]["gpu_allocation"]
        points = "" if not alloc.known else f"{100 * alloc.mean:+.1f}" + ("" if math.isnan(alloc.half) else f" ± {100 * alloc.half:.1f}")
        if not alloc.known:
            at = ""
        elif abs(alloc.mean) < _SAME_ALLOCATION and (math.isnan(alloc.half) or alloc.half < 2 * _SAME_ALLOCATION):
            at = f" at the same GPU allocation ({points} points)"
        else:
            at = f" with GPU allocation {points} points" + (" (inside its interval)" if alloc.holds_zero() else "")
        words = {"win": "lower (a win)", "loss": "higher (a loss)", "tie": "a tie"}.get(v.split(" ")[0], v)
        if dropped_more(cmp, p):
            words = "no verdict: it ran less work than the baseline, so the jobs it did run queued behind less"
            v = "dropped work"
        line = f"{p}: mean JCT {_pct_text(d)} vs {base}{at}, over {n} seed{'s' if n != 1 else ''}: {words}"
        if v.startswith(("win", "loss")):
            conc = cmp.concentration[p]
            drivers = sorted(c.driven_by for c in conc if c.driven_by)
            jobs = conc[0].jobs if conc else 0
            if drivers and jobs and drivers[len(drivers) // 2] <= max(1, math.ceil(0.01 * jobs)):
                med = drivers[len(drivers) // 2]
                line += f"; driven by {med} job{'s' if med != 1 else ''} (median over seeds) of {jobs:,}"
            t1 = _share(conc, "top1_share")
            if t1.known:
                line += f"; top 1 % of jobs carry {100 * t1.mean:.0f} % of the {'gains' if v.startswith('win') else 'losses'}"
        rej, unf = f["jobs_rejected"], f["jobs_unfinished"]
        if rej.known and rej.mean > 0:
            line += f"; rejected {rej.mean:.0f} jobs ({f['gpu_hours_rejected'].mean:,.0f} GPU-h)"
        if unf.known and unf.mean > 0:
            line += f"; {unf.mean:.0f} jobs unfinished"
        out.append(line)
    return out


def verdict_lines(cmps: Sequence[Comparison], *, prefix: str = "") -> list[str]:
    """One line per load: each Atoll policy's verdict on mean JCT against the baseline."""
    out = []
    for c in cmps:
        parts = []
        for p in c.policies:
            if p == c.baseline or not p.startswith("atoll-"):
                continue
            d = c.diffs[p]["mean_jct_s"]
            tag = " †" if _dropped_any(c, p) else ""
            parts.append(f"{p}{tag} {policy_verdict(c, p)} ({_pct_text(d)})")
        load = f"{c.load:g}" if c.load is not None else "as recorded"
        out.append(f"{prefix}load {load}: " + ("; ".join(parts) if parts else "no Atoll policy compared") + f" vs {c.baseline}")
    return out


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """Common-set figures with intervals, all-jobs figures, paired differences and concentration."""
    out: dict[str, Any] = {"load": cmp.load, "seeds": list(cmp.seeds), "baseline": cmp.baseline, "policies": {}}
    for p in cmp.policies:
        f = cmp.figures[p]
        entry: dict[str, Any] = {
            "common_set": {k: f[k].to_json() for k in ("mean_jct_s", "p50_jct_s", "p95_jct_s", "mean_wait_s", "p95_wait_s", "common_jobs")},
            "all_jobs": {k: f[k].to_json() for k in ("all_mean_jct_s", "all_mean_wait_s", "all_jobs_done", "gpu_allocation", "gpu_goodput",
                                                    "mean_slowdown", "single_island_share", "fragmentation_mean", *ISLAND_FIGURES)},
            "dropped": {k: f[k].to_json() for k in ("jobs_rejected", "gpu_hours_rejected", "jobs_unfinished", "gpu_hours_unfinished")},
            "per_seed": [{k: (None if math.isnan(v) else round(v, 6)) for k, v in s.items()} for s in cmp.per_seed[p]],
        }
        if p != cmp.baseline:
            entry["vs_baseline"] = {k: {**e.to_json(), "unit": "%" if k in _RELATIVE else "abs", "verdict": verdict(e)}
                                    for k, e in cmp.diffs[p].items()}
            entry["verdict"] = policy_verdict(cmp, p)
            entry["concentration"] = [
                {"jobs": c.jobs, "net_job_hours": round(c.net_s / 3600.0, 3),
                 "top1_share": None if math.isnan(c.top1_share) else round(c.top1_share, 4),
                 "top10_share": None if math.isnan(c.top10_share) else round(c.top10_share, 4),
                 "better": c.better, "worse": c.worse, "equal": c.equal, "driven_by": c.driven_by} for c in cmp.concentration[p]]
        out["policies"][p] = entry
    out["summary"] = summary_lines(cmp)
    return out

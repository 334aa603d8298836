"""``atoll simulate``'s report: the comparison of a finished sweep, as a table or JSON, the wait
by size band, preemption's figures, and plots. The command line and the runs are ``_simulate``'s;
this module reads only their results."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from admission.cli._args import counted
from admission.simulator import (
    INVARIANT_KEYS,
    Comparison,
    CostParams,
    SimResult,
    SweepSpec,
    TraceFormat,
    cluster_gpus,
    compare,
    comparison_json,
    format_comparison,
    format_islands,
    format_sweep,
    summary_lines,
    verdict_lines,
)

__all__ = ["PER_RUN_KEYS", "PREEMPTION_KEYS", "Report", "report"]

PER_RUN_KEYS = ("wait_by_size_band", "reserved_idle_gpu_hours", "decisions_per_job", "quota_yields", "reparked", "quota_yields_timed_out",
                "longest_quota_yield_hours")
"""Figures every run reports in ``runs`` besides its invariant checks (a seed's own queue, not only the first seed's)."""
PREEMPTION_KEYS = ("preempt_domain", "preemption_plans", "preempted", "preempted_gpu_hours", "mean_jct_by_size_band",
                   "kueue_preemption", "kueue_preemptions", "kueue_preempted", "kueue_preempted_gpu_hours")
"""Figures every run also reports when a policy's profile sets ``preemptDomain`` or Kueue preempts (``--kueue-preemption``)."""


@dataclass(frozen=True)
class Report:
    """A finished sweep and what its report names."""

    spec: SweepSpec
    fmt: TraceFormat
    names: list[str]
    baseline: str
    profiles: str
    """The profiles document, as shown (``_bundled.shown``)."""
    sliced: int
    """Jobs given slice annotations on the first seed (``--slice-level``)."""
    records: Mapping[Any, Any]
    """Each run's record, by (load, seed, policy)."""
    results: Mapping[Any, SimResult]
    """The whole results kept for plots (``SweepSpec.keep_results``)."""
    wall: float
    cores: int


def report(r: Report, *, fmt: str, plots: str | None) -> None:
    """Print the comparison against the baseline (and against ``kueue-required`` too, when it ran
    beside Atoll) as ``fmt`` (table or json), and write the plots into ``plots``."""
    spec, records, names = r.spec, r.records, r.names
    loads, seeds = spec.loads, spec.seeds
    cmps = [compare(records, load=load, seeds=seeds, policies=names, baseline=r.baseline) for load in loads]
    second = _second_baseline(names, r.baseline)
    others = [compare(records, load=load, seeds=seeds, policies=names, baseline=second) for load in loads] if second else []
    first = {n: records[(loads[0], seeds[0], n)] for n in names}
    preempting = any(s.summary["preempt_domain"] != "off" or s.summary["kueue_preemption"] != "Never" for s in records.values())
    if fmt == "json":
        print(json.dumps({**_json_head(r, first), "policies": {n: dict(s.summary) for n, s in first.items()},
                          "runs": [{"load": load, "seed": seed, "policy": name,
                                    **{k: records[(load, seed, name)].summary[k]
                                       for k in (*INVARIANT_KEYS, *PER_RUN_KEYS, *(PREEMPTION_KEYS if preempting else ()))}}
                                   for load in loads for seed in seeds for name in names],
                          "comparisons": [comparison_json(c) for c in cmps],
                          **({"comparisons_vs_" + second: [comparison_json(c) for c in others]} if second else {})}, indent=2))
    else:
        print(_text(cmps, _title(r, first), spec.cost, others))
        print(f"profiles: {r.profiles}")
        print(_bands(first, seeds[0], loads[0]))
        if preempting:
            print(_preemption(records, names, seeds, loads[0]))
    if plots:
        from admission.simulator import write_plots, write_sweep_plots

        cluster = spec.cluster.name
        paths = write_plots({n: r.results[(loads[0], seeds[0], n)] for n in names}, plots, title=cluster, seed=seeds[0], load=loads[0])
        if len(loads) > 1:
            paths += write_sweep_plots(cmps, plots, title=cluster)
        print(f"plots: {', '.join(str(p) for p in paths)}", file=sys.stderr)


def _title(r: Report, first: Mapping[str, Any]) -> str:
    """The table's first line: cluster, jobs, GPUs, GPU speeds, slices, quota, seeds, runs, cores and wall time."""
    spec, seeds = r.spec, r.spec.seeds
    n_jobs = next(iter(first.values())).status.size
    what = f"{n_jobs:,} jobs ({r.fmt})" if r.fmt != "synthetic" else f"{n_jobs:,} synthetic jobs per seed"
    perf = f", GPU perf {spec.gpu_perf}" if spec.gpu_perf else ""
    if spec.slicing is not None:
        which = " on the first seed" if r.fmt == "synthetic" and len(seeds) > 1 else ""  # each seed draws its own jobs
        perf += f", {r.sliced:,} jobs{which} in slices of {spec.slicing.size} pods on {spec.slicing.level}"
    if spec.quota_factor != 1.0:
        perf += f", ClusterQueue quota {spec.quota_factor:g} x GPUs"
    return (f"{spec.cluster.name}: {what} on {cluster_gpus(spec.cluster):,} GPUs{perf}, {counted(len(seeds), 'seed')}, "
            f"{counted(len(r.records), 'run')} on {counted(r.cores, 'core')} in {r.wall:.1f} s")


def _json_head(r: Report, first: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON report's fields that say what was run."""
    spec, slicing = r.spec, r.spec.slicing
    return {"cluster": spec.cluster.name, "profiles": r.profiles, "jobs": next(iter(first.values())).status.size, "trace_format": r.fmt,
            "gpus": cluster_gpus(spec.cluster), "gpu_perf": spec.gpu_perf,
            "slices": {"level": slicing.level, "size": slicing.size, "sliced_jobs": r.sliced, "counted_on_seed": spec.seeds[0]} if slicing else None,
            "seeds": list(spec.seeds), "loads": list(spec.loads), "cost": spec.cost.describe(), "quota_factor": spec.quota_factor,
            "wall_s": round(r.wall, 2)}


def _second_baseline(names: Sequence[str], baseline: str) -> str | None:
    """Kueue's other mode, when it ran: Atoll is also judged against a user who writes Kueue's
    required topology (it waits for one island, as ``atoll-strict`` does)."""
    other = "kueue-required" if baseline == "kueue-bestfit" else None
    return other if other in names and any(n.startswith("atoll-") for n in names) else None


def _bands(first: Mapping[str, Any], seed: int, load: float | None) -> str:
    """Wait by size band and decisions per job, per policy, on the first run (all its jobs)."""
    rows = {name: record.summary for name, record in first.items()}
    bands = list(next(iter(rows.values()))["wait_by_size_band"]) if rows else []
    head = ["policy", "decisions/job"] + [f"{b} GPUs p95/max wait h" for b in bands]

    def hours(v: Any) -> str:
        return "–" if v is None else f"{v / 3600:.2f}"

    table = [head] + [[name, f"{s['decisions_per_job']:.2f}" if s.get("decisions_per_job") is not None else "–"]
                      + [f"{hours(w['p95_wait_s'])} / {hours(w['max_wait_s'])}" + (f" ({w['never_started']} never)" if w["never_started"] else "")
                         for w in s["wait_by_size_band"].values()] for name, s in rows.items()]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    out = [f"wait by size band, all jobs of seed {seed}" + (f", load {load:g}" if load is not None else "")]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table[:1]]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table[1:]]
    return "\n".join(out)


def _kueue_policy(records: Mapping[Any, Any]) -> str:
    """The ``withinClusterQueue`` Kueue's own preemption ran under (one per command)."""
    return next((r.summary["kueue_preemption"] for r in records.values() if r.summary["kueue_preemption"] != "Never"), "Never")


def _preemption(records: Mapping[Any, Any], names: Sequence[str], seeds: Sequence[int], load: float | None) -> str:
    """Per policy and seed: its preemptDomain, the plans made, the victims evicted and the GPU-hours
    they had run, the p95/max wait of the largest size band, and each band's mean JCT."""
    def hours(v: Any) -> str:
        return "–" if v is None else f"{v / 3600:.2f}"

    bands = list(records[(load, seeds[0], names[0])].summary["wait_by_size_band"])
    top = bands[-1]
    kueue = any(records[(load, seed, name)].summary["kueue_preemption"] != "Never" for name in names for seed in seeds)
    head = ["policy", "seed", "preemptDomain", "plans", "victims", "preempted GPU-h"]
    head += ["Kueue preemptions", "Kueue victims", "Kueue preempted GPU-h"] if kueue else []
    head += [f"{top} GPUs p95/max wait h"]
    head += [f"{b} mean JCT h" for b in bands]
    table = [head]
    for name in names:
        for seed in seeds:
            s = records[(load, seed, name)].summary
            w = s["wait_by_size_band"][top]
            table.append([name, str(seed), s["preempt_domain"], str(s["preemption_plans"]), str(s["preempted"]), f"{s['preempted_gpu_hours']:.1f}"]
                         + ([str(s["kueue_preemptions"]), str(s["kueue_preempted"]), f"{s['kueue_preempted_gpu_hours']:.1f}"] if kueue else [])
                         + [f"{hours(w['p95_wait_s'])} / {hours(w['max_wait_s'])}"
                          + (f" ({w['never_started']} never)" if w["never_started"] else "")]
                         + [hours(s["mean_jct_by_size_band"][b]) for b in bands])
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    what = "preemption that clears a domain (preemptDomain)" + (f", and Kueue's own for quota (withinClusterQueue: {_kueue_policy(records)})" if kueue else "")
    out = [what + ", every seed" + (f", load {load:g}" if load is not None else "")]
    out.append("  ".join(c.ljust(w) for c, w in zip(table[0], widths)).rstrip())
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table[1:]]
    return "\n".join(out)


def _text(cmps: Sequence[Comparison], title: str, cost: CostParams, others: Sequence[Comparison] = ()) -> str:
    lines: list[str] = []
    if len(cmps) == 1:
        load = cmps[0].load
        lines.append(format_comparison(cmps[0], title=title + (f", load {load:g}" if load is not None else "")))
        lines.append("")
        lines.extend(summary_lines(cmps[0]))
        lines.extend(line for c in others for line in summary_lines(c) if line.startswith("atoll-"))
    else:
        lines.append(format_sweep(cmps, title=title))
        lines.append("")
        lines.extend(verdict_lines(cmps))
        lines.extend(verdict_lines(others))
    lines.append("")
    lines.append(format_islands(cmps, title="whole-island availability and the gang slowdown tail"))
    lines.append(f"cost model: {cost.describe()}")
    return "\n".join(lines)

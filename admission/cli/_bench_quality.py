"""``atoll bench quality``: placement quality on a real trace, and the simulator at scale.

Quality: the Microsoft ITP cluster-04 trace (first 14 days, 4,567 training jobs), shipped in the
package (``admission/simulator/traces``, with its source and MIT licence; ``ATOLL_TRACES_DIR``
overrides the folder) on the bundled GB200 NVL72 and DGX H100 SuperPOD models, under the
calibrated link model (``--link-model flat-ring`` for the pessimistic one), with the sample
profiles ``config/profiles.yaml`` on both models (``--profiles``; ``atoll simulate`` runs the
document a cluster model names, which for DGX H100 is another). For each model:

- a load sweep (offered load 0.7 … 1.3, inter-arrival times scaled) over every policy and
  several seeds (tie-breaks drawn anew per seed; GPU speed varying as measured on real
  clusters, one draw for the whole run), one table on the jobs every policy completed, with 95 %
  intervals, the paired difference against ``kueue-bestfit``, how concentrated it is, and a
  verdict per load (win / tie / loss);
- a sensitivity table: ``atoll-elastic``'s mean JCT as a ratio of ``kueue-bestfit``'s for comm
  fraction f ∈ {0.02, 0.05, 0.1, 0.2} × overlap ∈ {0, 0.5}, at load 1.0;
- the binding table: Atoll (strict, elastic) with pods pinned to their planned nodes (``exact``)
  and bound by each kube-scheduler model under ``domain`` enforcement, against ``kueue-bestfit``,
  at loads 0.85 and 1.3, on the same jobs (every row's mean over the jobs all rows completed),
  with the share of the exact-enforcement advantage each model keeps.

``--goal`` judges the queue manager's goal at loads 1.0-1.3 (``_quality_goal``): a profile that
wins against both Kueue modes, drops nothing and costs at most one point of allocation; exit 1
when none does.

``--reservations PROFILE`` runs that profile three ways on the same jobs and seeds (reserving at the
island level, at the span level, and not at all: ``admission.simulator.reservation_variants``) and
prints, per load, the largest size band's p95 and maximum wait, the GPU-hours reservations idled
and mean JCT, and the cut against the variant without reservations. It judges the goal that
reservations cut that p95 by at least half at loads 1.0-1.3 (the profile as written; exit 1 when
missed). With ``--skip-quality`` only those three run.

Over 400 lines: the quality sweep, its reservation, sensitivity and binding tables, and the scale
run share one trace, one profiles document and one report; split apart they would pass all three
between modules.

Scale: 100,000 synthetic jobs on a generated ~100,000-GPU GB200 model (22 spines × 8 scalable
units × 8 NVL72 racks × 18 nodes × 4 GPUs), run in a child process so its wall time and peak
resident memory are its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from admission.cli._args import PARKING, Parser, counted, number, quota_factor, seed, whole

__all__ = ["main", "records_file", "scale_cluster", "traces_dir"]

ITP_FILE = "msft_itp_cluster04_day00-14.csv"
QUALITY_CLUSTERS = ("gb200-nvl72-superpod", "dgx-h100-superpod")
QUALITY_LOAD = 0.85
QUALITY_LOADS = "0.7,0.85,1.0,1.15,1.3"
QUALITY_SEEDS = 3
PARKING_TITLE = {None: ", Atoll's waits parked where the profile says (queueing.parkWaiting)", True: ", Atoll waits parked (quota given back)",
                 False: ", Atoll waits on Retries"}
QUALITY_GPU_PERF = "tail:0.015:0.01:1.5"
"""``_sweep.GPU_PERF_TAIL``: a narrow body plus slow outliers (Sinha et al., SC22), drawn per seed."""
SENSITIVITY_F = (0.02, 0.05, 0.1, 0.2)
SENSITIVITY_OVERLAP = (0.0, 0.5)
SENSITIVITY_LOAD = 1.0
SENSITIVITY_POLICIES = ("kueue-bestfit", "atoll-elastic")
BINDINGS = "exact,least-allocated,most-allocated,random,adversarial"
BINDING_LOADS = "0.85,1.3"
BINDING_POLICIES = ("atoll-strict", "atoll-elastic")
SCALE_JOBS = 100_000
SCALE_POLICIES = ("atoll-elastic",)
SPINE, SU, CLIQUE, HOST = "network.example.com/spine", "network.example.com/su", "nvidia.com/gpu.clique", "kubernetes.io/hostname"


def traces_dir() -> Path:
    """``$ATOLL_TRACES_DIR``, else the traces shipped in the package."""
    from admission.cli._bundled import TRACES_DIR

    env = os.environ.get("ATOLL_TRACES_DIR")
    if env:
        return Path(env)
    return TRACES_DIR


def scale_cluster(spines: int = 22, sus: int = 8, racks: int = 8, nodes: int = 18) -> Any:
    """A GB200 NVL72 fabric of ``spines × sus × racks`` racks (default 1,408 racks, 101,376 GPUs)."""
    from topology import ClusterModel

    return ClusterModel.model_validate({
        "name": f"gb200-scale-{spines * sus * racks}-racks",
        "description": "generated GB200 NVL72 fabric for the scale run",
        "flavors": [{
            "name": "gb200", "topology": "nvl72-fabric", "gpuModel": "GB200",
            "levels": [
                {"label": SPINE, "bandwidthGBps": 25, "latencyUs": 8},
                {"label": SU, "bandwidthGBps": 50, "latencyUs": 4},
                {"label": CLIQUE, "bandwidthGBps": 1800, "latencyUs": 1},
                {"label": HOST, "bandwidthGBps": 1800, "latencyUs": 0.5},
            ],
            "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "144", "memory": "1800Gi", "pods": 110},
            "generate": [
                {"level": SPINE, "count": spines, "prefix": "s"},
                {"level": SU, "count": sus, "prefix": "u"},
                {"level": CLIQUE, "count": racks, "prefix": "r"},
                {"level": HOST, "count": nodes, "prefix": "n"},
            ],
        }],
    })


def records_file(path: str | None, cluster: str, clusters: Sequence[str]) -> str | None:
    """Where ``--records`` writes one cluster's decision records: ``path`` itself for one cluster,
    ``path.<cluster>`` for each of several."""
    if path is None:
        return None
    return path if len(clusters) == 1 else f"{path}.{cluster}"


def quota_title(factor: float) -> str:
    """The table title's note of ``--quota-factor`` (nothing at the default, quota = GPUs)."""
    return "" if factor == 1.0 else f", ClusterQueue quota {factor:g} x GPUs"


def _spec(cluster: Any, trace: Path, policies: Sequence[str], doc: Any, loads: Sequence[float], seeds: Sequence[int],
          cost: Any) -> Any:
    from admission.simulator import SweepSpec, WorkloadSpec

    return SweepSpec(cluster, WorkloadSpec(str(trace), "itp"), tuple(policies), doc, tuple(loads), tuple(seeds), cost, QUALITY_GPU_PERF)


def sensitivity(cluster: Any, trace: Path, doc: Any, seeds: Sequence[int], workers: int | None,
                link_model: str = "calibrated") -> dict[str, Any]:
    """``atoll-elastic`` mean JCT ÷ ``kueue-bestfit``'s (common jobs, paired per seed) per f × overlap."""
    from admission.simulator import CostParams, compare, run_sweep, verdict

    table: dict[str, Any] = {}
    for f in SENSITIVITY_F:
        for o in SENSITIVITY_OVERLAP:
            cost = CostParams(comm_fraction=((math.inf, f),), overlap={"training": o}, link_model=link_model)
            records, _ = run_sweep(_spec(cluster, trace, SENSITIVITY_POLICIES, doc, (SENSITIVITY_LOAD,), seeds, cost), workers=workers)
            cmp = compare(records, load=SENSITIVITY_LOAD, seeds=seeds, policies=SENSITIVITY_POLICIES, baseline="kueue-bestfit")
            d = cmp.diffs["atoll-elastic"]["mean_jct_s"]
            table[f"f={f:g},overlap={o:g}"] = {"f": f, "overlap": o, "ratio": 1.0 + d.mean / 100.0,
                                                "ci95": None if math.isnan(d.half) else d.half / 100.0, "verdict": verdict(d)}
    return table


def format_sensitivity(table: dict[str, Any], title: str) -> str:
    head = ["comm fraction f"] + [f"overlap {o:g}" for o in SENSITIVITY_OVERLAP]
    rows = []
    for f in SENSITIVITY_F:
        row = [f"{f:g}"]
        for o in SENSITIVITY_OVERLAP:
            c = table[f"f={f:g},overlap={o:g}"]
            ci = "" if c["ci95"] is None else f" ± {c['ci95']:.3f}"
            row.append(f"{c['ratio']:.3f}{ci} {c['verdict']}")
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def binding(cluster: Any, trace: Path, doc: Any, loads: Sequence[float], seeds: Sequence[int], workers: int | None,
            bindings: Sequence[str], link_model: str = "calibrated") -> list[Any]:
    """Atoll under each binding, and ``kueue-bestfit``, compared load by load on the jobs every row
    completed. A row is named ``<policy> <binding>``: ``exact`` pins pods to the planned nodes,
    the others are kube-scheduler models binding inside the ``domain`` selector."""
    from dataclasses import replace

    from admission.simulator import CostParams, compare, run_sweep

    records: dict[Any, Any] = {}
    cost = CostParams(link_model=link_model)
    base, _ = run_sweep(_spec(cluster, trace, ("kueue-bestfit",), doc, loads, seeds, cost), workers=workers)
    records.update(base)
    for b in bindings:
        spec = replace(_spec(cluster, trace, BINDING_POLICIES, doc, loads, seeds, cost),
                       scheduler=None if b == "exact" else b, enforcement="exact" if b == "exact" else "domain")
        runs, _ = run_sweep(spec, workers=workers)
        records.update({(load, seed, f"{p} {b}"): r for (load, seed, p), r in runs.items()})
    names = ["kueue-bestfit"] + [f"{p} {b}" for p in BINDING_POLICIES for b in bindings]
    return [compare(records, load=load, seeds=seeds, policies=names, baseline="kueue-bestfit") for load in loads]


def kept_lines(cmps: Sequence[Any], bindings: Sequence[str]) -> list[str]:
    """Per policy and load, the share of exact enforcement's JCT advantage over ``kueue-bestfit``
    each scheduler model keeps (100 % = as good as pinning every pod)."""
    out = []
    for c in cmps:
        for p in BINDING_POLICIES:
            exact = c.diffs.get(f"{p} exact", {}).get("mean_jct_s")
            if exact is None or not exact.known or exact.mean >= 0 or exact.holds_zero():
                out.append(f"load {c.load:g} {p}: exact enforcement has no JCT advantage to keep (a tie or a loss against kueue-bestfit)")
                continue
            parts = []
            for b in bindings:
                d = c.diffs.get(f"{p} {b}", {}).get("mean_jct_s")
                if b != "exact" and d is not None and d.known:
                    parts.append(f"{b} {100.0 * d.mean / exact.mean:.0f} %")
            out.append(f"load {c.load:g} {p}: exact {exact.mean:+.1f} % JCT vs kueue-bestfit; kept under domain: " + ", ".join(parts))
    return out


def quality(policies: Sequence[str], fmt: str, profiles: str | None, *, loads: str = QUALITY_LOADS, seeds: int = QUALITY_SEEDS,
            workers: int | None = None, with_sensitivity: bool = True, with_quality: bool = True, bindings: Sequence[str] = (),
            binding_loads: str = BINDING_LOADS, clusters: Sequence[str] = QUALITY_CLUSTERS,
            link_model: str = "calibrated", with_goal: bool = False, reservations: str | None = None,
            parking: bool | None = None, records_path: str | None = None, cohort: Any = None,
            quota_factor: float = 1.0, yield_back_when_fits: bool = False, first_seed: int = 0,
            yield_in_turn: bool = False, yield_turn_lead: float | None = None) -> tuple[dict[str, Any], int]:
    from admission.cli._bundled import resolve_cluster, resolve_profiles, shown
    from admission.cli._quality_goal import format_goal, goal_json, goal_rows
    from admission.simulator import (
        SOURCES,
        CostParams,
        cluster_gpus,
        compare,
        comparison_json,
        format_islands,
        format_reservations,
        format_sweep,
        gather_records,
        parse_loads,
        reservation_cell,
        reservation_variants,
        reservations_goal,
        reservations_json,
        run_sweep,
        seeds_of,
        summary_lines,
        verdict_lines,
    )
    from policies import load_profiles_file
    from topology import load_cluster_model

    trace = traces_dir() / ITP_FILE
    if not trace.exists():
        print(f"atoll bench quality: {trace}: not found (set ATOLL_TRACES_DIR to the folder holding {ITP_FILE})", file=sys.stderr)
        return {}, 2
    doc = load_profiles_file(resolve_profiles(profiles))
    res_policies: list[str] = []
    shipped = ""
    if reservations:
        try:
            doc, shipped = reservation_variants(doc, reservations)
        except ValueError as exc:
            print(f"atoll bench quality: {exc}", file=sys.stderr)
            return {}, 2
        res_policies = [f"atoll-{reservations}-{v}" for v in ("island", "span", "nores")]
    load_list = [x for x in parse_loads(loads) if x is not None]
    seed_list = seeds_of(first_seed, seeds)
    report: dict[str, Any] = {"sources": SOURCES, "gpu_perf": QUALITY_GPU_PERF, "link_model": link_model, "parking": {True: "on", False: "off", None: "profile"}[parking],
                              "profiles": shown(resolve_profiles(profiles)),  # on every cluster (atoll simulate runs the model's own)
                              "cohort": cohort.describe() if cohort is not None else "one ClusterQueue per flavor",
                              "quota_factor": quota_factor}
    goal: list[Any] = []
    res_cells: list[Any] = []
    for name in clusters:
        t0 = time.perf_counter()
        cluster = load_cluster_model(resolve_cluster(name))
        report[name] = {}
        if bindings:
            b_loads = [x for x in parse_loads(binding_loads) if x is not None]
            b_cmps = binding(cluster, trace, doc, b_loads, seed_list, workers, bindings, link_model)
            kept = kept_lines(b_cmps, bindings)
            report[name]["binding"] = {"comparisons": [comparison_json(c) for c in b_cmps], "kept": kept}
            if fmt == "table":
                print(format_sweep(b_cmps, title=f"{name}: Atoll by binding (exact = pinned to planned nodes; the rest = kube-scheduler "
                                                 f"models under domain enforcement), ITP cluster04, {counted(len(seed_list), 'seed')} per load"))
                print("\n".join(kept))
                print(f"({time.perf_counter() - t0:.1f} s)\n")
        if not with_quality and not res_policies:
            continue
        ran = (list(policies) if with_quality else []) + [p for p in res_policies if p not in policies]
        spec = dataclasses.replace(_spec(cluster, trace, ran, doc, load_list, seed_list, CostParams(link_model=link_model)), parking=parking,
                                   records=records_file(records_path, name, clusters), cohort=cohort, quota_factor=quota_factor,
                                   yield_back_when_fits=yield_back_when_fits, yield_in_turn=yield_in_turn,
                                   yield_turn_lead=yield_turn_lead)
        try:
            records, _ = run_sweep(spec, workers=workers)
        finally:
            if spec.records:
                written = gather_records(spec.records, spec.keys())
                print(f"atoll bench quality: {written:,} decision records written to {spec.records}", file=sys.stderr)
        if res_policies:
            cells = [reservation_cell(records, cluster=name, load=load, seeds=seed_list, profile=str(reservations), shipped=shipped,
                                      gpus=cluster_gpus(cluster)) for load in load_list]
            res_cells += cells
            report[name]["reservations"] = reservations_json(cells)
            if fmt == "table":
                print(f"{name}: reservations of {reservations}, the largest size band, ITP cluster04, {counted(len(seed_list), 'seed')} per load "
                      f"(means ± 95 %; paired per seed against {reservations}-nores)")
                print(format_reservations(cells))
                print()
        if not with_quality:
            continue
        cmps = [compare(records, load=load, seeds=seed_list, policies=policies, baseline="kueue-bestfit") for load in load_list]
        sweep_s = time.perf_counter() - t0
        wanted = with_sensitivity and "elastic" in doc.profiles and {"kueue-bestfit", "atoll-elastic"} <= set(policies)
        sens = sensitivity(cluster, trace, doc, seed_list, workers, link_model) if wanted else {}
        wall = time.perf_counter() - t0
        jobs = next(iter(records.values())).status.size
        verdicts = verdict_lines(cmps, prefix=f"{name} ")
        if "kueue-required" in policies:  # the same runs, against a user who writes Kueue's required topology
            req_cmps = [compare(records, load=load, seeds=seed_list, policies=policies, baseline="kueue-required") for load in load_list]
            verdicts += verdict_lines(req_cmps, prefix=f"{name} ")
            if "kueue-bestfit" in policies:  # the goal is judged against both modes, run side by side
                goal += goal_rows(name, {"kueue-bestfit": cmps, "kueue-required": req_cmps})
        report[name] |= {"jobs": jobs, "loads": load_list, "seeds": list(seed_list), "wall_s": round(wall, 1), "sweep_s": round(sweep_s, 1),
                        "comparisons": [comparison_json(c) for c in cmps], "verdicts": verdicts, "sensitivity": sens}
        if fmt == "table":
            gpus = cluster_gpus(cluster)
            print(format_sweep(cmps, title=f"{name}: ITP cluster04 days 0-14, {jobs:,} jobs on {gpus:,} GPUs, GPU perf "
                                           f"{QUALITY_GPU_PERF}, link model {link_model}, {counted(len(seed_list), 'seed')} per load"
                                           f"{PARKING_TITLE[parking]}{quota_title(quota_factor)}"))
            print()
            print("\n".join(verdicts))
            print()
            print(format_islands(cmps, title=f"{name}: whole-island availability and the gang slowdown tail"))
            for c in cmps:
                for line in summary_lines(c):
                    if line.startswith("atoll-"):
                        print(f"  load {c.load:g}: {line}")
            if sens:
                print()
                print(format_sensitivity(sens, f"{name}: atoll-elastic mean JCT ÷ kueue-bestfit's (jobs both completed), load "
                                               f"{SENSITIVITY_LOAD:g}, {counted(len(seed_list), 'seed')}; < 1 = Atoll faster"))
            print(f"({sweep_s:.1f} s sweep, {wall:.1f} s in all)\n")
    code = 0
    if res_policies:
        from admission.cli._quality_goal import in_range

        judged = [c for c in res_cells if in_range(c.load)]
        report["reservation_goal"] = reservations_json(judged)
        if judged and not reservations_goal(judged):
            code = 1
        if fmt == "table":
            print(f"loads 1.0-1.3: {format_reservations(judged).splitlines()[-1]}" if judged
                  else "reservation goal: not judged (no load in 1.0-1.3)")
            print()
    if with_goal:
        report["goal"] = goal_json(goal)
        code = max(code, 0 if report["goal"]["met_by"] else 1)
        if fmt == "table":
            print(format_goal(goal))
            print()
    if fmt == "table":
        print(f"cost model: {CostParams(link_model=link_model).describe()}; sources:")
        print("\n".join(f"  {key}: {text}" for key, text in SOURCES.items()))
        print()
    return report, code


def _scale_child(jobs: int, policies: Sequence[str], seed: int, load: float) -> dict[str, Any]:
    """Runs inside the child process: build, prepare, simulate; report times and peak memory."""
    from admission.cli._bundled import resolve_profiles
    from admission.cli._simulate import load_workload, run_policies
    from admission.simulator import summarize

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    t0 = time.perf_counter()
    cluster = scale_cluster()
    work = load_workload(cluster, trace=None, trace_format="synthetic", jobs=jobs, load=load, seed=seed)
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    results = run_policies(cluster, work, policies, profiles_path=str(resolve_profiles(None)), seed=seed)
    total = time.perf_counter() - t1
    summaries = {k: summarize(r) for k, r in results.items()}
    gpus = next(iter(results.values())).total_gpus
    return {
        "cluster": cluster.name, "gpus": gpus, "nodes": gpus // 4, "jobs": jobs, "load": load,
        "build_s": round(build_s, 2), "simulate_s": round(total, 2),
        "per_policy_s": {k: round(r.wall_seconds, 2) for k, r in results.items()},
        "decisions": {k: r.decisions for k, r in results.items()},
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "rss_after_imports_mib": round(base_rss, 1),
        "policies": summaries,
    }


def scale(jobs: int, policies: Sequence[str], seed: int, fmt: str, load: float = QUALITY_LOAD) -> tuple[dict[str, Any], int]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "admission.cli._bench_quality", "--scale-child", "--scale-jobs", str(jobs),
           "--scale-policies", ",".join(policies), "--seed", str(seed), "--scale-load", str(load)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(f"atoll bench quality: scale run failed:\n{proc.stderr}", file=sys.stderr)
        return {}, 1
    data: dict[str, Any] = json.loads(proc.stdout)
    data["wall_s"] = round(wall, 2)
    if fmt == "table":
        from admission.simulator import format_table

        print(format_table(data["policies"], title=f"scale: {data['jobs']:,} synthetic jobs on {data['cluster']} "
                                                    f"({data['gpus']:,} GPUs, {data['nodes']:,} nodes), load {data['load']}"))
        for name, secs in data["per_policy_s"].items():
            verdict = "PASS" if secs < 120 else "FAIL"
            print(f"{verdict} scale: {name} simulated {data['jobs']:,} jobs in {secs:.1f} s ({data['decisions'][name]:,} decisions; under 120 s)")
        print(f"workload + model build {data['build_s']:.1f} s; whole child process {wall:.1f} s; peak RSS {data['peak_rss_mib']:.0f} MiB "
              f"({data['rss_after_imports_mib']:.0f} MiB after imports)")
    return data, 0


def _loads(text: str) -> str:
    """``--loads``/``--binding-loads``, checked when parsed (a bad load is one line naming the flag, not a
    traceback minutes into the run); the text is kept, the sweep parses it as ``atoll simulate --load``."""
    from admission.simulator import TraceError, parse_loads

    try:
        parse_loads(text)
    except TraceError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--load").lstrip(": ")) from None
    return text


def _policies_problem(profiles: str | None, policies: Sequence[str], scale_policies: Sequence[str]) -> str | None:
    """The first unreadable profiles document or unknown policy name, as one line naming the flag, before any run starts."""
    from admission.cli._bundled import resolve_profiles
    from admission.simulator import PolicyError, make_policies
    from policies import ProfilesError, load_profiles_file

    try:
        doc = load_profiles_file(resolve_profiles(profiles))
    except ProfilesError as exc:
        return f"--profiles: {exc}"
    try:
        make_policies(policies, doc, seed=0)
    except PolicyError as exc:
        return str(exc)
    try:  # the scale run reads the sample profiles whatever --profiles says
        make_policies(scale_policies, load_profiles_file(resolve_profiles(None)), seed=0) if scale_policies else None
    except PolicyError as exc:
        return "--scale-policies" + str(exc).removeprefix("--policies")
    return None


def main(argv: Sequence[str]) -> int:
    p = Parser(prog="atoll bench quality", description="placement quality on the ITP trace, and the simulator at scale")
    p.add_argument("--policies", default="count-only,random,kueue-bestfit,kueue-required,atoll-strict,atoll-elastic")
    p.add_argument("--loads", type=_loads, default=QUALITY_LOADS, help=f"offered loads of the sweep (default {QUALITY_LOADS})")
    p.add_argument("--seeds", type=whole(1), default=QUALITY_SEEDS, help=f"seeds per load (default {QUALITY_SEEDS})")
    p.add_argument("--workers", type=whole(1), default=None, help="processes for independent runs (default: the cores available)")
    p.add_argument("--skip-sensitivity", action="store_true")
    p.add_argument("--profiles", default=None, help="profiles document (default config/profiles.yaml)")
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument("--skip-binding", action="store_true", help="leave out Atoll under each binding model")
    p.add_argument("--bindings", default=BINDINGS, help=f"bindings compared (default {BINDINGS}): exact, or a kube-scheduler model")
    p.add_argument("--binding-loads", type=_loads, default=BINDING_LOADS, help=f"offered loads of the binding table (default {BINDING_LOADS})")
    p.add_argument("--skip-scale", action="store_true")
    p.add_argument("--scale-jobs", type=whole(1), default=SCALE_JOBS)
    p.add_argument("--scale-policies", default=",".join(SCALE_POLICIES))
    p.add_argument("--scale-load", type=number(above=0), default=QUALITY_LOAD, help="offered load of the scale run (above 1 builds a queue)")
    p.add_argument("--link-model", choices=("calibrated", "flat-ring"), default="calibrated",
                   help="how a placement's all-reduce is priced (default calibrated; flat-ring: the pessimistic model)")
    p.add_argument("--clusters", default=",".join(QUALITY_CLUSTERS), help=f"bundled models to run (default {','.join(QUALITY_CLUSTERS)})")
    p.add_argument("--seed", type=seed, default=0,
                   help="the first seed: the sweep runs seeds S .. S+n-1 (--seeds n), so --seed 2 --seeds 1 is seed 2 of a larger run; "
                        "the scale run uses S")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--parking", choices=("profile", "on", "off"), default="profile",
                   help="profile (default): each profile parks its waits as its queueing.parkWaiting says (the sample costed "
                        "profiles do); on: every Atoll policy's waits park the Workload and give its quota back (atoll run "
                        "--park-waiting); off: each wait is a Retry, which keeps its quota through the delay as Kueue does")
    p.add_argument("--quota-factor", type=quota_factor, default=1.0, metavar="F",
                   help="each ClusterQueue's nominal GPU quota as F x its flavor's healthy GPUs (default 1: quota is capacity); "
                        "above 1, quota bounds reservations and Atoll's ledger alone bounds the GPUs")
    p.add_argument("--yield-back-when-fits", action="store_true",
                   help="the quality runs with atoll simulate --yield-back-when-fits (a quota giver an event reached comes back "
                        "only when its placement fits now)")
    p.add_argument("--yield-turn-lead", type=number(0), default=None, metavar="SECONDS",
                   help="from SECONDS before a reservation of its flavor is expected free, the first gang in line for one keeps "
                        "its quota and is given quota first (the controller's decisions.quota_yield_turn_lead_seconds)")
    p.add_argument("--yield-in-turn", action="store_true",
                   help="the quality runs with atoll simulate --yield-in-turn (quota givers take turns as the controller's "
                        "--quota-yield-in-turn makes them)")
    p.add_argument("--goal", action="store_true", help="judge the queue manager's goal at loads 1.0-1.3 (exit 1 when missed)")
    p.add_argument("--reservations", default=None, metavar="PROFILE",
                   help="run PROFILE reserving at the island level, at the span level and not at all; judge the reservation goal "
                        "at loads 1.0-1.3 (exit 1 when missed)")
    p.add_argument("--records", default=None, metavar="FILE",
                   help="write the Atoll runs' decision records (atoll.dev/decision/v1, each naming its run) to FILE; with several "
                        "--clusters, to FILE.<cluster> each")
    p.add_argument("--cohort", default=None, metavar="N|FILE",
                   help="each flavor's quota split over N ClusterQueues of one cohort (equal nominal shares, borrowing unlimited), "
                        "or as a YAML file of clusterQueues (name, nominalQuota, borrowingLimit, lendingLimit: shares of the "
                        "flavor's quota); jobs go to a ClusterQueue by a seeded hash of their id (default: one ClusterQueue per flavor)")
    p.add_argument("--scale-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(list(argv))
    clusters = [c for c in args.clusters.split(",") if c]
    if not clusters or sorted(set(clusters) - set(QUALITY_CLUSTERS)):
        print(f"atoll bench quality: --clusters: choose from {', '.join(QUALITY_CLUSTERS)}", file=sys.stderr)
        return 2
    scale_policies = [s for s in args.scale_policies.split(",") if s]
    if args.scale_child:
        print(json.dumps(_scale_child(args.scale_jobs, scale_policies, args.seed, args.scale_load)))
        return 0
    out: dict[str, Any] = {}
    code = 0
    bindings = [] if args.skip_binding else [b for b in args.bindings.split(",") if b]
    unknown = sorted(set(bindings) - set(BINDINGS.split(",")))
    if unknown:
        print(f"atoll bench quality: --bindings: unknown {', '.join(unknown)} (choose from {BINDINGS})", file=sys.stderr)
        return 2
    from admission.cli._quality_goal import goal_judgeable
    from admission.simulator import CohortError, load_cohort

    try:
        cohort = load_cohort(args.cohort) if args.cohort is not None else None
    except CohortError as exc:
        print(f"atoll bench quality: --cohort: {exc}", file=sys.stderr)
        return 2

    policies = [s for s in args.policies.split(",") if s]
    problem = _policies_problem(args.profiles, policies, scale_policies if not args.skip_scale else [])
    if not problem and args.records and not Path(args.records).resolve().parent.is_dir():
        problem = f"--records: the folder of {args.records} does not exist; make it or give a file in a folder that does"
    if problem:
        print(f"atoll bench quality: {problem}", file=sys.stderr)
        return 2
    if args.goal and (args.skip_quality or not goal_judgeable(policies, args.loads)):
        print("atoll bench quality: --goal: nothing to judge: run the quality sweep with kueue-bestfit, kueue-required and an atoll- "
              "profile at a load in 1.0-1.3 (--policies, --loads)", file=sys.stderr)
        return 2
    if not args.skip_quality or bindings or args.reservations:
        from admission.simulator import RunFailed

        try:
            out["quality"], code = quality(policies, args.format, args.profiles, loads=args.loads,
                                           seeds=args.seeds, first_seed=args.seed, workers=args.workers, with_sensitivity=not args.skip_sensitivity,
                                           with_quality=not args.skip_quality, bindings=bindings, binding_loads=args.binding_loads,
                                           clusters=clusters, link_model=args.link_model, with_goal=args.goal,
                                           reservations=args.reservations, parking=PARKING[args.parking], records_path=args.records,
                                           cohort=cohort, quota_factor=args.quota_factor,
                                           yield_back_when_fits=args.yield_back_when_fits, yield_in_turn=args.yield_in_turn,
                                           yield_turn_lead=args.yield_turn_lead)
        except RunFailed as exc:
            print(f"atoll bench quality: simulation stopped: {exc}", file=sys.stderr)
            return 1
    if not args.skip_scale and code in (0, 1):  # 1: the goal missed; the scale run still runs
        out["scale"], scale_code = scale(args.scale_jobs, scale_policies, args.seed, args.format, args.scale_load)
        code = max(code, scale_code)
    if args.format == "json":
        print(json.dumps(out, indent=2))
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

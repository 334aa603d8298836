"""``atoll bench quality``: placement quality on a real trace, and the simulator at scale.

Quality: the Microsoft ITP cluster-04 trace (first 14 days, 4,567 training jobs) from
``../shared/traces`` (beside the repository; ``ATOLL_TRACES_DIR`` overrides) on the bundled
GB200 NVL72 and DGX H100 SuperPOD models, inter-arrival times scaled to an offered load of 0.85,
every policy; one table per cluster and the verdicts Atoll is held to (its better profile beats
``kueue-bestfit`` on mean JCT and mean modeled slowdown, with GPU allocation at most one point
lower; ``atoll-strict`` keeps every gang that fits one island in one island).

Scale: 100,000 synthetic jobs on a generated ~100,000-GPU GB200 model (22 spines × 8 scalable
units × 8 NVL72 racks × 18 nodes × 4 GPUs), run in a child process so its wall time and peak
resident memory are its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "scale_cluster", "traces_dir"]

ITP_FILE = "msft_itp_cluster04_day00-14.csv"
QUALITY_CLUSTERS = ("gb200-nvl72-superpod", "dgx-h100-superpod")
QUALITY_LOAD = 0.85
SCALE_JOBS = 100_000
SCALE_POLICIES = ("atoll-elastic",)
SPINE, SU, CLIQUE, HOST = "network.example.com/spine", "network.example.com/su", "nvidia.com/gpu.clique", "kubernetes.io/hostname"


def traces_dir() -> Path:
    """``$ATOLL_TRACES_DIR``, else ``shared/traces`` beside the repository root."""
    env = os.environ.get("ATOLL_TRACES_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "traces"


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


def _verdicts(cluster: str, s: dict[str, dict[str, Any]]) -> list[str]:
    """The issue's acceptance checks for one cluster, each a PASS/FAIL line with its numbers."""
    out: list[str] = []
    kueue = s.get("kueue-bestfit")
    # A profile that rejects or strands jobs Kueue runs would win on JCT by dropping them: only
    # profiles that complete as many jobs as Kueue are candidates for "the better profile".
    atoll = {k: v for k, v in s.items() if k.startswith("atoll-") and v["mean_jct_s"] is not None
             and (kueue is None or v["jobs_done"] >= kueue["jobs_done"])}
    for k, v in s.items():
        if k.startswith("atoll-") and k not in atoll:
            out.append(f"NOTE {cluster}: {k} is not compared on JCT: it completed {v['jobs_done']} jobs "
                       f"({v['jobs_rejected']} rejected, {v['jobs_unfinished']} unfinished)")
    if kueue and atoll:
        best_name = min(atoll, key=lambda k: (atoll[k]["mean_jct_s"], atoll[k]["mean_slowdown"]))
        b = atoll[best_name]
        jct = b["mean_jct_s"] < kueue["mean_jct_s"]
        slow = b["mean_slowdown"] < kueue["mean_slowdown"]
        alloc = (kueue["gpu_allocation"] - b["gpu_allocation"]) * 100 <= 1.0
        out.append(f"{'PASS' if jct else 'FAIL'} {cluster}: {best_name} mean JCT {b['mean_jct_s']:.0f} s vs kueue-bestfit {kueue['mean_jct_s']:.0f} s")
        out.append(f"{'PASS' if slow else 'FAIL'} {cluster}: {best_name} mean slowdown {b['mean_slowdown']:.4f} vs kueue-bestfit {kueue['mean_slowdown']:.4f}")
        out.append(f"{'PASS' if alloc else 'FAIL'} {cluster}: {best_name} GPU allocation {100 * b['gpu_allocation']:.2f}% vs kueue-bestfit "
                   f"{100 * kueue['gpu_allocation']:.2f}% (at most 1 point lower)")
    strict = s.get("atoll-strict")
    if strict:
        share = strict["single_island_share"]
        if share is None:
            out.append(f"n/a  {cluster}: atoll-strict single-island share: no gang here fits one island")
        else:
            out.append(f"{'PASS' if share == 1.0 else 'FAIL'} {cluster}: atoll-strict puts {100 * share:.1f}% of one-island gangs in one island")
    return out


def quality(policies: Sequence[str], fmt: str, profiles: str | None) -> tuple[dict[str, Any], int]:
    from admission.cli._bundled import resolve_cluster
    from admission.cli._simulate import load_workload, run_policies
    from admission.simulator._metrics import format_table, summarize
    from topology import load_cluster_model

    trace = traces_dir() / ITP_FILE
    if not trace.exists():
        print(f"atoll bench quality: {trace}: not found (set ATOLL_TRACES_DIR to the folder holding {ITP_FILE})", file=sys.stderr)
        return {}, 2
    report: dict[str, Any] = {}
    for name in QUALITY_CLUSTERS:
        t0 = time.perf_counter()
        cluster = load_cluster_model(resolve_cluster(name))
        jobs = load_workload(cluster, trace=str(trace), trace_format="itp", load=QUALITY_LOAD)
        results = run_policies(cluster, jobs, policies, profiles_path=profiles)
        summaries = {k: summarize(r) for k, r in results.items()}
        wall = time.perf_counter() - t0
        verdicts = _verdicts(name, summaries)
        report[name] = {"jobs": len(jobs), "load": QUALITY_LOAD, "wall_s": round(wall, 1), "policies": summaries, "verdicts": verdicts}
        if fmt == "table":
            gpus = next(iter(results.values())).total_gpus
            print(format_table(summaries, title=f"{name}: ITP cluster04 days 0-14, {len(jobs):,} jobs on {gpus:,} GPUs, load {QUALITY_LOAD}"))
            print("\n".join(verdicts))
            print(f"({wall:.1f} s)\n")
    return report, 0


def _scale_child(jobs: int, policies: Sequence[str], seed: int, load: float) -> dict[str, Any]:
    """Runs inside the child process: build, prepare, simulate; report times and peak memory."""
    from admission.cli._bundled import resolve_profiles
    from admission.cli._simulate import load_workload, run_policies
    from admission.simulator._metrics import summarize

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
        from admission.simulator._metrics import format_table

        print(format_table(data["policies"], title=f"scale: {data['jobs']:,} synthetic jobs on {data['cluster']} "
                                                    f"({data['gpus']:,} GPUs, {data['nodes']:,} nodes), load {data['load']}"))
        for name, secs in data["per_policy_s"].items():
            verdict = "PASS" if secs < 120 else "FAIL"
            print(f"{verdict} scale: {name} simulated {data['jobs']:,} jobs in {secs:.1f} s ({data['decisions'][name]:,} decisions; under 120 s)")
        print(f"workload + model build {data['build_s']:.1f} s; whole child process {wall:.1f} s; peak RSS {data['peak_rss_mib']:.0f} MiB "
              f"({data['rss_after_imports_mib']:.0f} MiB after imports)")
    return data, 0


def main(argv: Sequence[str]) -> int:
    from admission.simulator._policies import DEFAULT_POLICIES

    p = argparse.ArgumentParser(prog="atoll bench quality", description="placement quality on the ITP trace, and the simulator at scale")
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    p.add_argument("--profiles", default=None, help="profiles document (default config/profiles.yaml)")
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument("--skip-scale", action="store_true")
    p.add_argument("--scale-jobs", type=int, default=SCALE_JOBS)
    p.add_argument("--scale-policies", default=",".join(SCALE_POLICIES))
    p.add_argument("--scale-load", type=float, default=QUALITY_LOAD, help="offered load of the scale run (above 1 builds a queue)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--scale-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(list(argv))
    scale_policies = [s for s in args.scale_policies.split(",") if s]
    if args.scale_child:
        print(json.dumps(_scale_child(args.scale_jobs, scale_policies, args.seed, args.scale_load)))
        return 0
    out: dict[str, Any] = {}
    code = 0
    if not args.skip_quality:
        out["quality"], code = quality([s for s in args.policies.split(",") if s], args.format, args.profiles)
    if not args.skip_scale and code == 0:
        out["scale"], code = scale(args.scale_jobs, scale_policies, args.seed, args.format, args.scale_load)
    if args.format == "json":
        print(json.dumps(out, indent=2))
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

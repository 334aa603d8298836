"""``atoll bench``: speed of the finder (numba vs the pure-Python reference, in one run) and of
the simulator at scale (``simulate``), plus the controller and placement-quality benchmarks that
live in their own modules."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from admission.cli._args import PARKING, Parser, number, seed, suggest, whole
from topology import Level, NodeInfo, PlacementRequest, PodSetRequest, ResourceVector, Snapshot, find_placement

__all__ = ["COLLECTIVES_TOLERANCE", "bench_simulate", "main", "synthetic_fabric", "synthetic_requests"]

SPINE, SU, CLIQUE = "network.example.com/spine", "network.example.com/su", "nvidia.com/gpu.clique"
NODES_PER_RACK, RACKS_PER_SU, SUS_PER_SPINE, GPUS_PER_NODE = 18, 8, 4, 4
SIZES = np.array([1, 2, 4, 8, 16, 32, 64, 72, 128, 256, 512])
SIZE_WEIGHTS = np.array([0.18, 0.08, 0.14, 0.16, 0.12, 0.1, 0.08, 0.04, 0.05, 0.03, 0.02])


def synthetic_fabric(nodes: int, seed: int) -> Snapshot:
    """GB200-like fabric (racks of 18 × 4 GPUs, 8 racks per SU, 4 SUs per spine) at 60-90%
    random GPU occupancy: each rack draws its own target share, each node a binomial."""
    rng = np.random.default_rng(seed)
    out = []
    rack_share = 0.0
    for i in range(nodes):
        rack, node = divmod(i, NODES_PER_RACK)
        su, spine = rack // RACKS_PER_SU, rack // (RACKS_PER_SU * SUS_PER_SPINE)
        if node == 0:
            rack_share = float(rng.uniform(0.6, 0.9))
        used = int(rng.binomial(GPUS_PER_NODE, rack_share))
        labels = {SPINE: f"s{spine}", SU: f"s{spine}-u{su}", CLIQUE: f"s{spine}-u{su}-r{rack}"}
        out.append(NodeInfo(f"n{i:06d}", labels, ResourceVector(GPUS_PER_NODE, 144000, 1800 * 1024, 110),
                            ResourceVector(used, used * 32000, used * 256 * 1024, used), perf=float(np.round(rng.normal(1.0, 0.03), 3))))
    levels = [Level(SPINE, 25, 8), Level(SU, 50, 4), Level(CLIQUE, 1800, 1)]
    return Snapshot("bench", levels, out, node_level=Level("kubernetes.io/hostname", 1800, 0.5))


def synthetic_requests(count: int, seed: int, uniform_share: float = 0.0) -> list[PlacementRequest]:
    """Mixed requests, 1 to 512 GPUs: up to an island's 72 GPUs half required, half preferred;
    bigger ones preferred at the island level with spans bounded by the SU or the spine.
    ``uniform_share`` of them (drawn from their own stream, so the mix is the same) ask for
    uniform perf, the ranking that sorts each candidate domain's nodes by perf."""
    rng = np.random.default_rng(seed + 1)
    uniform = np.random.default_rng(seed + 2).random(count) < uniform_share
    out = []
    for k in range(count):
        gpus = int(rng.choice(SIZES, p=SIZE_WEIGHTS / SIZE_WEIGHTS.sum()))
        per = min(gpus, GPUS_PER_NODE)
        pods = gpus // per
        floor = 0.95 if rng.random() < 0.2 else 0.0
        if gpus <= 72 and rng.random() < 0.5:
            ps = PodSetRequest(f"r{k}", pods, ResourceVector(gpu=per), required_level=CLIQUE, perf_floor=floor)
        else:
            span = SU if rng.random() < 0.5 else SPINE
            ps = PodSetRequest(f"r{k}", pods, ResourceVector(gpu=per), preferred_level=CLIQUE, max_span_level=span, perf_floor=floor)
        if uniform[k]:
            ps = dataclasses.replace(ps, uniform_perf=True, perf_rank=("min", "reach")[k % 2])  # both rankings, alternately
        out.append(PlacementRequest((ps,), protect_empty_domains=bool(rng.random() < 0.5)))
    return out


def bench_finder(nodes: int, requests: int, reference_sample: int, seed: int, uniform_share: float = 0.0) -> dict[str, Any]:
    snap = synthetic_fabric(nodes, seed)
    reqs = synthetic_requests(requests, seed, uniform_share)
    t0 = time.perf_counter()
    find_placement(snap, reqs[0])  # jit compile (or load from the on-disk cache)
    compile_s = time.perf_counter() - t0
    lat = np.empty(len(reqs))
    results = []
    for i, r in enumerate(reqs):
        t = time.perf_counter()
        results.append(find_placement(snap, r))
        lat[i] = time.perf_counter() - t
    step = max(1, len(reqs) // max(1, reference_sample))
    sample = list(range(0, len(reqs), step))[:reference_sample]
    ref_lat = np.empty(len(sample))
    identical = True
    for j, i in enumerate(sample):
        t = time.perf_counter()
        ref = find_placement(snap, reqs[i], backend="reference")
        ref_lat[j] = time.perf_counter() - t
        identical &= ref == results[i]
    fast_sample = lat[sample]
    return {
        "nodes": nodes,
        "gpus": snap.total_gpus(),
        "free_gpu_share": round(snap.free_gpus() / snap.total_gpus(), 3),
        "requests": len(reqs),
        "uniform_perf_share": uniform_share,
        "fits": int(sum(r.fits for r in results)),
        "compile_s": round(compile_s, 3),
        "p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 4),
        "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 4),
        "max_ms": round(float(lat.max()) * 1e3, 4),
        "reference_requests": len(sample),
        "reference_p50_ms": round(float(np.percentile(ref_lat, 50)) * 1e3, 3),
        "reference_p99_ms": round(float(np.percentile(ref_lat, 99)) * 1e3, 3),
        "speedup_vs_reference": round(float(ref_lat.sum() / fast_sample.sum()), 1),
        "identical": bool(identical),
    }


def _finder_main(argv: Sequence[str]) -> int:
    p = Parser(prog="atoll bench finder", description="finder latency: numba vs reference, same requests, one run")
    p.add_argument("--nodes", type=whole(NODES_PER_RACK), default=10000, help=f"nodes of the fabric (at least one rack, {NODES_PER_RACK})")
    p.add_argument("--requests", type=whole(1), default=2000)
    p.add_argument("--reference-sample", type=whole(1), default=200, help="requests also run on the (slow) reference finder")
    p.add_argument("--seed", type=seed, default=7)
    p.add_argument("--uniform-perf", type=number(0, 1), default=0.0, metavar="SHARE", help="share of requests that ask for uniform perf (default 0)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    _print_row(bench_finder(args.nodes, args.requests, args.reference_sample, args.seed, args.uniform_perf), args.format)
    return 0


def _print_row(row: dict[str, Any], fmt: str) -> None:
    """One benchmark row: JSON, or a header line and a value line."""
    if fmt == "json":
        print(json.dumps(row))
    else:
        print(" | ".join(row))
        print(" | ".join(str(v) for v in row.values()))


def bench_simulate(jobs: int, load: float, policy: str, scheduler: str, enforcement: str | None, seed: int,
                   parking: bool | None = None) -> dict[str, Any]:
    """The simulator at scale: ``jobs`` ITP-shaped synthetic jobs on the generated ~100,000-GPU
    GB200 NVL72 fabric, one policy, Atoll run as deployed (decision, ledger, binding, invariant);
    ``parking`` as ``atoll simulate --parking`` (None: each profile as it says)."""
    from admission.cli._bench_quality import scale_cluster
    from admission.cli._bundled import resolve_profiles
    from admission.cli._simulate import load_workload
    from admission.simulator import SimSettings, make_policies, prepare_workload, simulate
    from policies import load_profiles_file

    t0 = time.perf_counter()
    cluster = scale_cluster()
    work = prepare_workload(cluster, load_workload(cluster, trace=None, trace_format="synthetic", jobs=jobs, load=load, seed=seed))
    (pol,) = make_policies([policy], load_profiles_file(resolve_profiles(None)), seed=seed)
    build_s = time.perf_counter() - t0
    cpu0 = time.process_time()
    result = simulate(cluster, work, pol, settings=SimSettings(scheduler=scheduler, enforcement=enforcement, seed=seed, parking=parking))
    cpu_s = time.process_time() - cpu0  # on a shared machine the CPU time compares runs, the wall time also counts the others' load
    parked = {None: "profile", True: "on", False: "off"}[parking]
    return {"policy": policy, "scheduler": scheduler, "enforcement": enforcement or "profile", "parking": parked, "jobs": jobs, "load": load,
            "gpus": result.total_gpus, "build_s": round(build_s, 2), "simulate_s": round(result.wall_seconds, 2),
            "simulate_cpu_s": round(cpu_s, 2), "decisions": result.decisions, "decision_s": round(result.decision_seconds, 2),
            "jobs_per_s": round(jobs / result.wall_seconds, 1)}


def _simulate_main(argv: Sequence[str]) -> int:
    p = Parser(prog="atoll bench simulate", description="simulator speed at scale (the deployed decision path)")
    p.add_argument("--jobs", type=whole(1), default=100_000)
    p.add_argument("--load", type=number(above=0), default=1.3)
    p.add_argument("--policy", default="atoll-elastic")
    p.add_argument("--scheduler", default="least-allocated", help="least-allocated, most-allocated, random or adversarial")
    p.add_argument("--enforcement", choices=("domain", "exact"), default=None, help="default: what the profiles document says")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--parking", choices=tuple(PARKING), default="profile",
                   help="profile (default): each profile's waits park as it says; on: every profile's; off: each wait is a Retry")
    p.add_argument("--goal-seconds", type=number(0), default=60.0,
                   help="PASS (exit 0) when the simulation takes at most this long, else FAIL (exit 1)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    from admission.cli._simulate import settings_check

    try:
        settings_check(args.scheduler, args.enforcement)
        row = bench_simulate(args.jobs, args.load, args.policy, args.scheduler, args.enforcement, args.seed, PARKING[args.parking])
    except ValueError as exc:  # the one policy of --policy, as make_policies names it
        print(f"atoll bench simulate: {str(exc).replace('--policies: ', '--policy: ', 1)}", file=sys.stderr)
        return 2
    met = row["simulate_s"] <= args.goal_seconds
    row["goal_seconds"], row["goal_met"] = args.goal_seconds, met
    _print_row(row, args.format)
    if args.format == "table":
        print(f"{'PASS' if met else 'FAIL'} simulate: {row['jobs']:,} jobs in {row['simulate_s']:.1f} s, {row['simulate_cpu_s']:.1f} s of CPU "
              f"(goal ≤ {args.goal_seconds:g} s)")
    return 0 if met else 1  # a missed goal fails the run (make bench)


COLLECTIVES_TOLERANCE = 0.20
"""``atoll bench collectives`` fails when a prediction is further than this from its measurement."""


def _collectives_main(argv: Sequence[str]) -> int:
    from topology import COLLECTIVE_CONSTANTS as CONSTANTS
    from topology import calibration_table

    p = Parser(prog="atoll bench collectives",
                description="the calibrated link model against published nccl-tests all-reduce bus bandwidths")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    rows = calibration_table()
    misses = [r for r in rows if abs(float(r["error"])) > COLLECTIVES_TOLERANCE]  # type: ignore[arg-type]
    if args.format == "json":
        print(json.dumps({"tolerance": COLLECTIVES_TOLERANCE, "constants": CONSTANTS, "points": rows, "pass": not misses}, indent=2))
    else:
        width = max(len(str(r["setup"])) for r in rows)
        print(f"{'setup'.ljust(width)}  {'measured GB/s':>13}  {'predicted GB/s':>14}  {'error':>7}  algorithm  source")
        for r in rows:
            print(f"{str(r['setup']).ljust(width)}  {r['measured_gbps']:>13.1f}  {r['predicted_gbps']:>14.1f}  "
                  f"{100 * float(r['error']):>+6.1f}%  {str(r['algorithm']):<9}  {r['source']}")  # type: ignore[arg-type]
        verdict = "PASS" if not misses else "FAIL"
        print(f"{verdict} collectives: {len(rows) - len(misses)} of {len(rows)} published points within ±{100 * COLLECTIVES_TOLERANCE:.0f} %")
    return 0 if not misses else 1


_OTHERS = {"controller": "admission.cli._bench_controller", "decide": "admission.cli._bench_decide",
           "failover": "admission.cli._bench_failover", "kueue": "admission.cli._bench_kueue", "quality": "admission.cli._bench_quality", "serving": "admission.cli._bench_serving",
           "webhook": "admission.cli._bench_webhook"}


# One line each for ``atoll bench --help``; each benchmark's --help has the rest.
BENCHMARKS = {
    "finder": "finder latency: numba vs reference, same requests",
    "simulate": "simulator speed at scale (the deployed decision path)",
    "collectives": "the link model against published nccl-tests all-reduce bandwidths",
    "controller": "decisions against a real kube-apiserver: admissions/s and latency",
    "decide": "the controller's own decision at fleet scale, in memory",
    "failover": "time from a leader's loss to the new leader's first decision",
    "kueue": "Kueue TAS alone vs Kueue plus Atoll's check, on real Kueue",
    "quality": "placement quality on the ITP trace, and the simulator at scale",
    "serving": "a serving graph's placement replayed on the Azure LLM inference trace",
    "webhook": "a burst of recreated pods through the webhook: review latency and refusals",
}


def _usage() -> str:
    lines = ["usage: atoll bench <benchmark> [options]", "", "benchmarks:"]
    lines += [f"  {name:<12} {text}" for name, text in BENCHMARKS.items()]
    return "\n".join([*lines, "", "atoll bench <benchmark> --help shows a benchmark's options."])


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] == "finder":
        return _finder_main(args[1:])
    if args[0] == "simulate":
        return _simulate_main(args[1:])
    if args[0] == "collectives":
        return _collectives_main(args[1:])
    if args[0] in _OTHERS:
        code: int = importlib.import_module(_OTHERS[args[0]]).main(args[1:])
        return code
    print(f"atoll bench: unknown benchmark {args[0]!r}{suggest(args[0], list(BENCHMARKS))} (atoll bench --help lists them)", file=sys.stderr)
    return 2

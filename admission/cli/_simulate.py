"""``atoll simulate``: replay a workload on a cluster model, every policy side by side.

With no arguments it runs the bundled GB200 NVL72 SuperPOD model and a seeded synthetic
workload of 2,000 jobs through every policy and prints the comparison table (well under a
minute). Exit codes: 0 done, 2 bad input (the message names the file, line and column).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from pydantic import ValidationError

from admission.cli._bundled import resolve_cluster, resolve_profiles
from admission.simulator._jobs import Job
from admission.simulator._metrics import format_table, summarize
from admission.simulator._plots import write_plots
from admission.simulator._policies import DEFAULT_POLICIES, AtollPolicy, Policy, PolicyError, make_policies
from admission.simulator._sim import SimResult, SimSettings, build_snapshots, prepare_workload, simulate
from admission.simulator._traces import TraceError, TraceFormat, read_trace, scale_load
from policies import ProfileLevelError, ProfilesError, load_profiles_file
from topology import ClusterModel, ClusterModelError, Snapshot, load_cluster_model
from topology._documents import describe_validation_error

__all__ = ["cluster_gpus", "load_workload", "main", "run_policies", "with_gpu_perf"]

DEFAULT_JOBS = 2000
DEFAULT_LOAD = 0.85


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="atoll simulate", description="Replay a workload on a cluster model under every placement policy.")
    p.add_argument("--cluster", default=None, help="cluster model file or bundled name (default gb200-nvl72-superpod)")
    p.add_argument("--trace", default=None,
                   help="trace file: itp CSV, openb pod list CSV, or synthetic parameters (YAML/JSON); omit for the default synthetic workload")
    p.add_argument("--trace-format", choices=("itp", "openb", "synthetic"), default=None,
                   help="format of --trace (default: synthetic without --trace, itp with it)")
    p.add_argument("--nodes", default=None, help="openb: the trace's node list CSV (sets the pod split; the fabric is --cluster)")
    p.add_argument("--jobs", type=int, default=None, help=f"synthetic: how many jobs (default {DEFAULT_JOBS}); traces: keep the first N")
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES), help="comma-separated: count-only, random, kueue-bestfit, atoll-<profile>")
    p.add_argument("--load", type=float, default=None,
                   help=f"offered load as a share of cluster GPU capacity; inter-arrival times are scaled to it (synthetic default {DEFAULT_LOAD}; traces: as recorded unless given)")
    p.add_argument("--seed", type=int, default=0, help="seed for the synthetic workload, the random policy and --gpu-perf draws")
    p.add_argument("--gpu-perf", default=None, metavar="SPEC",
                   help="per-node relative GPU throughput for every generated flavor: identical, normal:STDDEV, normal:MEAN:STDDEV "
                        "or uniform:LOW:HIGH (default: as the cluster model says; the bundled models use identical GPUs)")
    p.add_argument("--profiles", default=None, help="profiles document (default config/profiles.yaml)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--plots", default=None, metavar="DIR", help="write PNG plots into DIR")
    return p


class _Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.label = ""
        self._last = 0.0

    def start(self, label: str) -> Callable[[int, int], None] | None:
        self.label = label
        return self.update if self.enabled else None

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = int(width * done / max(total, 1))
        self.stream.write(f"\r{self.label:<16} [{'#' * filled}{'.' * (width - filled)}] {done:>7,}/{total:,} jobs")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def with_gpu_perf(cluster: ClusterModel, spec: str, seed: int = 0) -> ClusterModel:
    """The cluster with every flavor's per-node perf drawn from ``spec`` (explicit nodes keep theirs).

    GPUs of one SKU differ in speed; this is how a run asks what that costs each policy."""
    kind, _, rest = spec.partition(":")
    try:
        numbers = [float(x) for x in rest.split(":")] if rest else []
    except ValueError:
        raise ClusterModelError(f"--gpu-perf: {spec!r}: the parameters must be numbers (e.g. normal:0.05, uniform:0.9:1.1)") from None
    params: dict[str, float]
    if kind == "identical" and not numbers:
        params = {}
    elif kind == "normal" and len(numbers) in (1, 2):
        params = {"mean": numbers[0] if len(numbers) == 2 else 1.0, "stddev": numbers[-1]}
    elif kind == "uniform" and len(numbers) == 2:
        params = {"low": numbers[0], "high": numbers[1]}
    else:
        raise ClusterModelError(f"--gpu-perf: {spec!r} is not identical, normal:STDDEV, normal:MEAN:STDDEV or uniform:LOW:HIGH")
    if kind == "uniform" and not 0 < params["low"] <= params["high"]:
        raise ClusterModelError(f"--gpu-perf: {spec!r}: uniform needs 0 < LOW ≤ HIGH")
    flavors = []
    for flavor in cluster.flavors:
        try:
            perf = type(flavor.perf).model_validate({"distribution": kind, "seed": seed, **params})
        except ValidationError as exc:
            raise ClusterModelError(describe_validation_error(f"--gpu-perf {spec!r}", exc)) from None
        flavors.append(flavor.model_copy(update={"perf": perf}))
    return cluster.model_copy(update={"flavors": flavors})


def cluster_gpus(cluster: ClusterModel) -> int:
    """GPUs on the healthy nodes of every flavor: the capacity ``--load`` is a share of."""
    return sum(snap.free_gpus() for snap in build_snapshots(cluster))


def load_workload(
    cluster: ClusterModel,
    *,
    trace: str | None,
    trace_format: TraceFormat,
    nodes: str | None = None,
    jobs: int | None = None,
    load: float | None = None,
    seed: int = 0,
) -> list[Job]:
    """The jobs to replay: a trace file or a synthetic draw, arrivals scaled to ``load``.

    Pods are cut for the first flavor's node size here; the simulator re-cuts each job for the
    flavor it is routed to. For ``synthetic``, ``trace`` is an optional parameters file.
    """
    per_node = max((int(s.alloc[:, 0].max()) for s in build_snapshots(cluster) if s.num_nodes), default=8)
    out = read_trace(trace, trace_format, gpus_per_node=per_node, nodes_path=nodes, n=jobs, seed=seed)
    if not out:
        raise TraceError(f"{trace or 'synthetic workload'}: no jobs to simulate")
    if load is not None:
        out = scale_load(out, cluster_gpus(cluster), load)
    return out


def run_policies(
    cluster: ClusterModel,
    jobs: Sequence[Job],
    policy_names: Sequence[str],
    *,
    profiles_path: str | None = None,
    seed: int = 0,
    record_islands: bool = False,
    progress: _Progress | None = None,
) -> dict[str, SimResult]:
    """Prepare the workload once and run each policy on a fresh copy of the cluster."""
    doc = load_profiles_file(resolve_profiles(profiles_path))
    policies = make_policies(policy_names, doc, seed=seed)
    snapshots = build_snapshots(cluster)
    _check_profile_levels(policies, snapshots)
    work = prepare_workload(cluster, jobs, snapshots=snapshots)
    settings = SimSettings(record_islands=record_islands)
    out: dict[str, SimResult] = {}
    for policy in policies:
        report = progress.start(policy.name) if progress else None
        out[policy.name] = simulate(cluster, work, policy, settings=settings, progress=report)
    return out


def _check_profile_levels(policies: Sequence[Policy], snapshots: Sequence[Snapshot]) -> None:
    """Fail before any run when an Atoll profile names a level a flavor lacks (decide() would
    raise the same error mid-run, after the other policies had been simulated)."""
    for policy in policies:
        if not isinstance(policy, AtollPolicy):
            continue
        prof = policy.profile
        for key, label in (("requiredLevel", prof.required_level), ("preferredLevel", prof.preferred_level),
                           ("maxSpanLevel", prof.max_span_level)):
            for snap in snapshots:
                if label and label not in snap.level_labels:
                    raise ProfileLevelError(f"profiles.{policy.profile_name}.{key}: flavor {snap.flavor} has no level {label!r} "
                                            f"(levels: {list(snap.level_labels)}); pick --policies without {policy.name} "
                                            "or a --profiles document for this cluster")


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    fmt: TraceFormat = args.trace_format or ("synthetic" if args.trace is None else "itp")
    try:
        if args.load is not None and not args.load > 0:
            raise TraceError(f"--load must be > 0 (a share of cluster GPU capacity, e.g. 0.85), got {args.load}")
        if args.jobs is not None and args.jobs < 1:
            raise TraceError(f"--jobs must be ≥ 1, got {args.jobs}")
        if fmt == "openb" and not args.nodes:
            raise TraceError("--trace-format openb needs --nodes NODE_LIST.csv (the trace's node list) besides --trace PODS.csv")
        if fmt != "synthetic" and not args.trace:
            raise TraceError(f"--trace-format {fmt} needs --trace FILE")
        cluster = load_cluster_model(resolve_cluster(args.cluster))
        if args.gpu_perf is not None:
            cluster = with_gpu_perf(cluster, args.gpu_perf, args.seed)
        jobs = load_workload(
            cluster, trace=args.trace, trace_format=fmt, nodes=args.nodes,
            jobs=args.jobs if args.jobs is not None else (DEFAULT_JOBS if fmt == "synthetic" else None),
            load=args.load if args.load is not None else (DEFAULT_LOAD if fmt == "synthetic" else None), seed=args.seed,
        )
        progress = _Progress(sys.stderr, sys.stderr.isatty())
        results = run_policies(cluster, jobs, args.policies.split(","), profiles_path=args.profiles, seed=args.seed,
                               record_islands=args.plots is not None, progress=progress)
    except (TraceError, ClusterModelError, ProfilesError, PolicyError, ProfileLevelError) as exc:
        print(f"atoll simulate: {exc}", file=sys.stderr)
        return 2
    summaries = {name: summarize(r) for name, r in results.items()}
    if args.format == "json":
        print(json.dumps({"cluster": cluster.name, "jobs": len(jobs), "policies": summaries}, indent=2))
    else:
        total = next(iter(results.values())).total_gpus if results else 0
        print(format_table(summaries, title=f"{cluster.name}: {len(jobs):,} jobs ({fmt}) on {total:,} GPUs"))
    if args.plots:
        paths = write_plots(results, args.plots, title=cluster.name)
        print(f"plots: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0

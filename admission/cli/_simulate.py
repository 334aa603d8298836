"""``atoll simulate``: replay a workload on a cluster model, every policy side by side.

With no arguments it runs the bundled GB200 NVL72 SuperPOD model under contention (offered
load 1.3, GPU speed varying as measured on real clusters) with fresh synthetic workloads over a
few seeds, and prints the comparison on the jobs every policy completed, with 95 % intervals
and a plain-words summary (seconds on two cores). ``--load`` takes a list (a load sweep, one
table), ``--seeds`` the number of seeds, ``--cost-*`` the cost model's assumptions. Runs go to
every core. Exit codes: 0 done, 1 a run stopped on a violated invariant (the message names the
Workloads), 2 bad input (the message names the flag, file, line or column).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from admission.cli._args import PARKING, Parser, quota_factor
from admission.cli._args import seed as first_seed
from admission.cli._bundled import TRACES, model_profiles, resolve_cluster, resolve_profiles, resolve_trace, shown
from admission.simulator import (
    GPU_PERF_TAIL,
    INVARIANT_KEYS,
    AtollPolicy,
    CohortError,
    Comparison,
    CostError,
    CostParams,
    Job,
    Policy,
    PolicyError,
    RunFailed,
    SimResult,
    SimSettings,
    Slicing,
    SweepSpec,
    TraceError,
    TraceFormat,
    WorkloadSpec,
    available_cores,
    build_snapshots,
    cluster_gpus,
    compare,
    comparison_json,
    format_comparison,
    format_islands,
    format_sweep,
    gather_records,
    load_cohort,
    make_policies,
    parse_bandwidths,
    parse_comm_fraction,
    parse_link_model,
    parse_loads,
    parse_overlap,
    prepare_workload,
    run_sweep,
    seeds_of,
    simulate,
    slice_workload,
    sliced_jobs,
    summary_lines,
    verdict_lines,
    with_gpu_perf,
    workload_jobs,
)
from policies import ProfileLevelError, ProfilesError, load_profiles_file
from topology import LINK_MODELS, ClusterModel, ClusterModelError, Snapshot, load_cluster_model

__all__ = ["cluster_gpus", "load_workload", "main", "run_policies", "with_gpu_perf"]

DEFAULT_JOBS = 1000
DEFAULT_LOAD = 1.3
DEFAULT_SEEDS = 4
DEFAULT_GPU_PERF = GPU_PERF_TAIL
"""Same-SKU GPU speed of the first command and of trace runs on the bundled models: a narrow
body plus slow outliers, the shape Sinha et al. (SC22) measured (``_sweep.GPU_PERF_TAIL``)."""
DEFAULT_SIM_POLICIES = ("count-only", "random", "kueue-bestfit", "kueue-required", "atoll-strict", "atoll-elastic")

PER_RUN_KEYS = ("wait_by_size_band", "reserved_idle_gpu_hours", "decisions_per_job", "quota_yields", "reparked", "quota_yields_timed_out",
                "longest_quota_yield_hours")
"""Figures every run reports in ``runs`` besides its invariant checks (a seed's own queue, not only the first seed's)."""
PREEMPTION_KEYS = ("preempt_domain", "preemption_plans", "preempted", "preempted_gpu_hours", "mean_jct_by_size_band",
                   "kueue_preemption", "kueue_preemptions", "kueue_preempted", "kueue_preempted_gpu_hours")
"""Figures every run also reports when a policy's profile sets ``preemptDomain`` or Kueue preempts (``--kueue-preemption``)."""


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="atoll simulate", description="Replay a workload on a cluster model under every placement policy.")
    p.add_argument("--cluster", default=None, help="cluster model file or bundled name (default gb200-nvl72-superpod)")
    p.add_argument("--trace", default=None,
                   help=f"trace file: itp CSV, openb pod list CSV, or synthetic parameters (YAML/JSON), or a bundled trace "
                        f"({', '.join(TRACES)}: ITP cluster 04, 14 days, MIT); omit for the default synthetic workload")
    p.add_argument("--trace-format", choices=("itp", "openb", "synthetic"), default=None,
                   help="format of --trace (default: synthetic without --trace, itp with it)")
    p.add_argument("--nodes", default=None, help="openb: the trace's node list CSV (sets the pod split; the fabric is --cluster)")
    p.add_argument("--jobs", type=int, default=None, help=f"synthetic: how many jobs (default {DEFAULT_JOBS}); traces: keep the first N")
    p.add_argument("--policies", default=None,
                   help=f"comma-separated: count-only, random, kueue-bestfit, kueue-required, atoll-<profile> (default {','.join(DEFAULT_SIM_POLICIES)})")
    p.add_argument("--baseline", default=None,
                   help="the policy every other one is compared with (default kueue-bestfit when run, else the first policy)")
    p.add_argument("--load", default=None, metavar="F[,F...]",
                   help=f"offered load(s) as a share of cluster GPU capacity; a list runs a sweep (synthetic default {DEFAULT_LOAD}; "
                        "traces: as recorded unless given)")
    p.add_argument("--seed", type=first_seed, default=0,
                   help="the first seed: the runs are seeds S .. S+n-1 (--seeds n), each drawn from its own seed alone (workload, "
                        "tie-breaks, the random policy, --gpu-perf), so --seed 2 --seeds 1 is seed 2 of a larger run and of atoll "
                        "bench quality")
    p.add_argument("--seeds", type=int, default=None,
                   help=f"how many seeds per configuration (default {DEFAULT_SEEDS} for synthetic workloads, 3 for traces)")
    p.add_argument("--gpu-perf", default=None, metavar="SPEC",
                   help="per-node relative GPU throughput for every generated flavor: identical, normal:STDDEV, normal:MEAN:STDDEV, "
                        f"uniform:LOW:HIGH or tail:BODY_STDDEV:SHARE:WORST (default {DEFAULT_GPU_PERF}, drawn anew per seed, on a "
                        "bundled cluster or without --cluster; a cluster file keeps its own perf)")
    p.add_argument("--cost-comm-fraction", default=None, metavar="SPEC",
                   help="share of an ideal step in all-reduce for multi-GPU training: 0.1, or by size 8:0.05,64:0.1,*:0.15 (default 0.1)")
    p.add_argument("--cost-overlap", default=None, metavar="SPEC",
                   help="share of the all-reduce hidden behind compute: 0.5 (training) or training=0.5,inference=0 (default 0)")
    p.add_argument("--cost-bandwidth", default=None, metavar="LEVEL=GBPS[,...]",
                   help="per-GPU link bandwidth per topology level, e.g. su=400 (default: the cluster model's vendor figures)")
    p.add_argument("--link-model", default="calibrated", metavar="MODEL",
                   help=f"how a placement's all-reduce is priced: {' or '.join(LINK_MODELS)} (default calibrated: NCCL's algorithms "
                        "on aggregated rails, checked against published nccl-tests points by `atoll bench collectives`; flat-ring: "
                        "every GPU on one rail of the slowest link crossed, the pessimistic end)")
    p.add_argument("--slice-level", default=None, metavar="LEVEL",
                   help="give Kueue's slice annotations (podset-slice-required-topology: LEVEL, podset-slice-size) to every "
                        "training job that no single LEVEL domain of its empty flavor can hold and whose pod count is a multiple "
                        "of --slice-size; every other job (one that fits a LEVEL domain, a pod count the size does not divide, "
                        "inference, a flavor without LEVEL) keeps its unsliced request. Every policy sees the same requests")
    p.add_argument("--slice-size", type=int, default=None, metavar="PODS", help="pods per slice, with --slice-level (e.g. 16)")
    p.add_argument("--scheduler", default=None, help="kube-scheduler binding model: least-allocated, most-allocated, random, adversarial")
    p.add_argument("--enforcement", default=None, help="domain or exact (default: what the profiles document says)")
    p.add_argument("--declared-runtime", type=float, default=None, metavar="FACTOR",
                   help="every job's Workload declares Kueue's maximumExecutionTimeSeconds as FACTOR x its runtime (e.g. 2), so it "
                        "may backfill a reserved domain; default: no job declares a limit")
    p.add_argument("--parking", choices=("profile", "on", "off"), default="profile",
                   help="profile (default, as the controller): each profile as its queueing.parkWaiting says; on: for every "
                        "profile, a Workload waiting for a domain stays Pending and is decided again when room frees or it may "
                        "span, and gives its quota back to a job blocked on quota its quota would let in (the controller's "
                        "--park-waiting); off: every wait is a Retry decided again when its backoff ends (--no-park-waiting)")
    p.add_argument("--quota-yield-max-seconds", type=float, default=None, metavar="S",
                   help="the longest a parked Workload that gave its quota back stays deactivated (the controller's "
                        "--quota-yield-max-seconds; default its default, 43200); it comes back sooner once no job queued before "
                        "the give waits for quota")
    p.add_argument("--yield-back-when-fits", action="store_true",
                   help="an event that reaches a parked Workload that gave its quota back drops its need only if the placement "
                        "it was parked on fits now (the controller's --quota-yield-back-when-fits; default: any such event does)")
    p.add_argument("--kueue-preemption", choices=("Never", "LowerPriority", "LowerOrNewerEqualPriority"), default="Never",
                   help="the ClusterQueues' withinClusterQueue, with Kueue's own preemption for quota modelled: a Workload short of "
                        "quota (on a Kueue TAS flavor, of a placement) evicts a minimal set of the Workloads the policy lets it "
                        "preempt, as Kueue v0.19.2 does; Never (default, Kueue's): Kueue preempts nobody")
    p.add_argument("--cohort", default=None, metavar="N|FILE",
                   help="each flavor's quota split over N ClusterQueues of one cohort (equal nominal shares, borrowing unlimited), "
                        "or as a YAML file of clusterQueues (name, nominalQuota, borrowingLimit, lendingLimit: shares of the "
                        "flavor's quota; reclaimWithinCohort, borrowWithinCohort); each job goes to a ClusterQueue by a seeded hash "
                        "of its id; Kueue borrows and orders across them as v0.19.2 does (default: one ClusterQueue per flavor)")
    p.add_argument("--quota-factor", type=quota_factor, default=1.0, metavar="F",
                   help="each ClusterQueue's nominal GPU quota as F x its flavor's healthy GPUs (default 1: quota is capacity; above "
                        "1, Kueue reserves quota for more Workloads than fit, and Atoll's ledger alone keeps pods within the GPUs; "
                        "Kueue TAS checks the topology's free capacity itself)")
    p.add_argument("--workers", type=int, default=None, help="processes for independent runs (default: the cores available)")
    p.add_argument("--profiles", default=None, help="profiles document (default: the one the cluster model names, else config/profiles.yaml)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--plots", default=None, metavar="DIR", help="write PNG plots into DIR")
    p.add_argument("--records", default=None, metavar="FILE",
                   help="write the Atoll policies' decision records (atoll.dev/decision/v1, as atoll run writes them, each naming "
                        "its run) to FILE; read them with atoll audit")
    return p


class _Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.label = ""
        self.unit = "jobs"
        self._last = 0.0

    def start(self, label: str, unit: str = "jobs") -> Callable[[int, int], None] | None:
        self.label = label
        self.unit = unit
        return self.update if self.enabled else None

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = int(width * done / max(total, 1))
        self.stream.write(f"\r{self.label:<16} [{'#' * filled}{'.' * (width - filled)}] {done:>7,}/{total:,} {self.unit}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


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
    return workload_jobs(cluster, WorkloadSpec(trace, trace_format, nodes, jobs), load, seed)


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


def _check_profile_levels(policies: Sequence[Policy], snapshots: Sequence[Snapshot], hint: str = "a --profiles document for this cluster") -> None:
    """Fail before any run when an Atoll profile names a level a flavor lacks (decide() would
    raise the same error mid-run, after the other policies had been simulated). A list of levels
    resolves to the first the flavor has, as the controller resolves it."""
    for policy in policies:
        if not isinstance(policy, AtollPolicy):
            continue
        for snap in snapshots:
            try:
                policy.profile.for_flavor(snap.flavor, snap.level_labels, name=policy.profile_name)
            except ProfileLevelError as exc:
                raise ProfileLevelError(f"{exc}; pick --policies without {policy.name} or {hint}") from None


def too_few_jobs(jobs: Sequence[Job], loads: Sequence[float | None]) -> str | None:
    """A warning when the jobs arrive over less than twice the mean job's runtime at the highest
    asked load: the queue then has no time to build before the cluster drains, so the run's wait
    and GPU use say little about that load (400 ITP jobs at load 1.3 read 0 h wait, 43 % GPU use)."""
    asked = [x for x in loads if x is not None]
    if not asked or len(jobs) < 2:
        return None
    window = max(j.submit_s for j in jobs) - min(j.submit_s for j in jobs)  # arrivals scale as 1/load
    window *= (loads[0] or max(asked)) / max(asked)
    runtime = sum(j.duration_s for j in jobs) / len(jobs)
    if window >= 2 * runtime:
        return None
    need = math.ceil(len(jobs) * 2 * runtime / max(window, 1.0))
    return (f"{len(jobs):,} jobs at load {max(asked):g} arrive over {window / 3600:.1f} h, less than twice the mean job's runtime "
            f"({runtime / 3600:.1f} h): the queue has no time to build before the cluster drains, so wait and GPU use understate "
            f"that load; about --jobs {need:,} would give it room")


def _cost_params(args: argparse.Namespace) -> CostParams:
    return CostParams(
        comm_fraction=parse_comm_fraction(args.cost_comm_fraction) if args.cost_comm_fraction is not None else None,
        overlap=parse_overlap(args.cost_overlap) if args.cost_overlap is not None else None,
        bandwidth_gbps=parse_bandwidths(args.cost_bandwidth) if args.cost_bandwidth is not None else {},
        link_model=parse_link_model(args.link_model),
    )


def _slicing(level: str | None, size: int | None, cluster: ClusterModel) -> Slicing | None:
    """``--slice-level`` and ``--slice-size``, checked: both or neither, a size ≥ 1, a level some flavor has."""
    if level is None and size is None:
        return None
    if level is None or size is None:
        raise PolicyError("--slice-level and --slice-size go together (podset-slice-required-topology and podset-slice-size)")
    try:
        slicing = Slicing(level, size)
    except ValueError as exc:
        raise PolicyError(str(exc)) from None
    levels = sorted({lb for s in build_snapshots(cluster) for lb in s.level_labels})
    if level not in levels:
        raise PolicyError(f"--slice-level: no flavor of {cluster.name} has level {level!r} (levels: {', '.join(levels)})")
    return slicing


def _settings_check(scheduler: str | None, enforcement: str | None) -> None:
    try:
        chosen: dict[str, Any] = {"scheduler": scheduler, "enforcement": enforcement}
        SimSettings(**{k: v for k, v in chosen.items() if v})
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"--scheduler/--enforcement: {exc}") from None


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    args.trace = resolve_trace(args.trace)
    fmt: TraceFormat = args.trace_format or ("synthetic" if args.trace is None else "itp")
    t0 = time.perf_counter()
    try:
        cohort = load_cohort(args.cohort) if args.cohort is not None else None
        if args.jobs is not None and args.jobs < 1:
            raise TraceError(f"--jobs must be ≥ 1, got {args.jobs}")
        if args.declared_runtime is not None and not args.declared_runtime >= 1:
            raise TraceError(f"--declared-runtime must be at least 1 (a factor over each job's runtime, e.g. 2), got {args.declared_runtime}")
        if fmt == "openb" and not args.nodes:
            raise TraceError("--trace-format openb needs --nodes NODE_LIST.csv (the trace's node list) besides --trace PODS.csv")
        if fmt != "synthetic" and not args.trace:
            raise TraceError(f"--trace-format {fmt} needs --trace FILE")
        if args.quota_yield_max_seconds is not None and not args.quota_yield_max_seconds > 0:
            raise TraceError(f"--quota-yield-max-seconds must be above 0 (seconds), got {args.quota_yield_max_seconds:g}")
        if args.workers is not None and args.workers < 1:
            raise TraceError(f"--workers must be ≥ 1, got {args.workers}")
        loads = parse_loads(args.load) if args.load is not None else ((DEFAULT_LOAD,) if fmt == "synthetic" else (None,))
        seeds = seeds_of(args.seed, args.seeds if args.seeds is not None else (DEFAULT_SEEDS if fmt == "synthetic" else 3))
        cost = _cost_params(args)
        _settings_check(args.scheduler, args.enforcement)
        cluster_path = resolve_cluster(args.cluster)
        cluster = load_cluster_model(cluster_path)
        bundled = args.cluster is None or not Path(args.cluster).suffix  # a bundled name, not a file of its own
        gpu_perf = args.gpu_perf if args.gpu_perf is not None else (DEFAULT_GPU_PERF if bundled else None)
        if gpu_perf is not None:
            with_gpu_perf(cluster, gpu_perf)  # checks the spec before any run
        names = [n.strip() for n in (args.policies or ",".join(DEFAULT_SIM_POLICIES)).split(",") if n.strip()]
        profiles_path = resolve_profiles(args.profiles, cluster_path, cluster)
        doc = load_profiles_file(profiles_path)
        policies = make_policies(names, doc, seed=args.seed)
        own = model_profiles(cluster_path, cluster)
        _check_profile_levels(policies, build_snapshots(cluster),
                              f"--profiles {shown(own)} (the document cluster {cluster.name} is set up with)" if own else
                              "a --profiles document for this cluster")
        names = [p.name for p in policies]
        if args.baseline is not None and args.baseline not in names:
            raise PolicyError(f"--baseline: {args.baseline!r} is not among --policies ({', '.join(names)})")
        baseline = args.baseline or ("kueue-bestfit" if "kueue-bestfit" in names else names[0])
        workload = WorkloadSpec(args.trace, fmt, args.nodes, args.jobs if args.jobs is not None else (DEFAULT_JOBS if fmt == "synthetic" else None))
        first_jobs = workload_jobs(cluster, workload, loads[0], seeds[0])  # bad rows fail here, with file and line
        warning = too_few_jobs(first_jobs, loads)
        if warning:
            print(f"atoll simulate: warning: {warning}", file=sys.stderr)
        slicing = _slicing(args.slice_level, args.slice_size, cluster)
        sliced = sliced_jobs(slice_workload(prepare_workload(cluster, first_jobs), slicing, build_snapshots(cluster))) if slicing else 0
        spec = SweepSpec(cluster, workload, tuple(names), doc, loads, seeds, cost, gpu_perf, scheduler=args.scheduler,
                         enforcement=args.enforcement, slicing=slicing,
                         keep_results=frozenset((loads[0], seeds[0], n) for n in names) if args.plots else frozenset(),
                         parking=PARKING[args.parking], records=args.records, declared_runtime_factor=args.declared_runtime,
                         kueue_preemption=args.kueue_preemption, quota_yield_max_seconds=args.quota_yield_max_seconds,
                         cohort=cohort, quota_factor=args.quota_factor,
                         yield_back_when_fits=args.yield_back_when_fits)
        if args.records and not any(n.startswith("atoll-") for n in names):
            raise PolicyError(f"--records: only Atoll's policies write decision records, and --policies has none ({', '.join(names)})")
        progress = _Progress(sys.stderr, sys.stderr.isatty())
        try:
            records, results = run_sweep(spec, workers=args.workers, progress=progress.start("simulating", "runs"))
        finally:
            if args.records:
                written = gather_records(args.records, spec.keys())
        if args.records:
            print(f"atoll simulate: {written:,} decision records written to {args.records}", file=sys.stderr)
    except CohortError as exc:
        print(f"atoll simulate: --cohort: {exc}", file=sys.stderr)
        return 2
    except (TraceError, ClusterModelError, ProfilesError, PolicyError, ProfileLevelError, CostError) as exc:
        print(f"atoll simulate: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:  # a run found admitted pods without room: report it, do not print numbers
        print(f"atoll simulate: simulation stopped: {exc}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - t0
    cmps = [compare(records, load=load, seeds=seeds, policies=names, baseline=baseline) for load in loads]
    second = _second_baseline(names, baseline)
    others = [compare(records, load=load, seeds=seeds, policies=names, baseline=second) for load in loads] if second else []
    first = {n: records[(loads[0], seeds[0], n)] for n in names}
    preempting = any(r.summary["preempt_domain"] != "off" or r.summary["kueue_preemption"] != "Never" for r in records.values())
    n_jobs = next(iter(first.values())).status.size
    total = cluster_gpus(cluster)
    what = f"{n_jobs:,} jobs ({fmt})" if fmt != "synthetic" else f"{n_jobs:,} synthetic jobs per seed"
    perf = f", GPU perf {gpu_perf}" if gpu_perf else ""
    if slicing is not None:
        which = " on the first seed" if fmt == "synthetic" and len(seeds) > 1 else ""  # each seed draws its own jobs
        perf += f", {sliced:,} jobs{which} in slices of {slicing.size} pods on {slicing.level}"
    if args.quota_factor != 1.0:
        perf += f", ClusterQueue quota {args.quota_factor:g} x GPUs"
    title = (f"{cluster.name}: {what} on {total:,} GPUs{perf}, {len(seeds)} seed{'s' if len(seeds) != 1 else ''}, "
             f"{len(records)} runs on {min(args.workers or available_cores(), len(records))} cores in {wall:.1f} s")
    if args.format == "json":
        print(json.dumps({
            "cluster": cluster.name, "profiles": shown(profiles_path), "jobs": n_jobs, "trace_format": fmt, "gpus": total, "gpu_perf": gpu_perf,
            "slices": {"level": slicing.level, "size": slicing.size, "sliced_jobs": sliced, "counted_on_seed": seeds[0]} if slicing else None,
            "seeds": list(seeds), "loads": list(loads), "cost": cost.describe(), "quota_factor": args.quota_factor, "wall_s": round(wall, 2),
            "policies": {n: dict(r.summary) for n, r in first.items()},
            "runs": [{"load": load, "seed": seed, "policy": name,
                      **{k: records[(load, seed, name)].summary[k]
                         for k in (*INVARIANT_KEYS, *PER_RUN_KEYS, *(PREEMPTION_KEYS if preempting else ()))}}
                     for load in loads for seed in seeds for name in names],
            "comparisons": [comparison_json(c) for c in cmps],
            **({"comparisons_vs_" + second: [comparison_json(c) for c in others]} if second else {}),
        }, indent=2))
    else:
        print(_text(cmps, title, cost, others))
        print(f"profiles: {shown(profiles_path)}")
        print(_bands(first, seeds[0], loads[0]))
        if preempting:
            print(_preemption(records, names, seeds, loads[0]))
    if args.plots:
        from admission.simulator import write_plots, write_sweep_plots

        paths = write_plots({n: results[(loads[0], seeds[0], n)] for n in names}, args.plots, title=cluster.name, seed=seeds[0],
                            load=loads[0])
        if len(loads) > 1:
            paths += write_sweep_plots(cmps, args.plots, title=cluster.name)
        print(f"plots: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


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

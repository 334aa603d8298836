"""``atoll simulate``: replay a workload on a cluster model, every policy side by side.

With no arguments it runs the bundled GB200 NVL72 SuperPOD model under contention (offered
load 1.3, GPU speed varying as measured on real clusters) with fresh synthetic workloads over a
few seeds, and prints the comparison on the jobs every policy completed, with 95 % intervals
and a plain-words summary (seconds on two cores). ``--load`` takes a list (a load sweep, one
table), ``--seeds`` the number of seeds, ``--cost-*`` the cost model's assumptions. Runs go to
every core. Exit codes: 0 done, 1 a run stopped on a violated invariant (the message names the
Workloads), 2 bad input (the message names the flag, file, line or column).

Here the command line is read and checked (``_plan``: every flag before any run) and the sweep
run; the report of its results, table or JSON, is ``_simulate_report``'s.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from admission.cli._args import PARKING, Parser, number, quota_factor
from admission.cli._args import seed as first_seed
from admission.cli._bundled import TRACES, model_profiles, resolve_cluster, resolve_profiles, resolve_trace, shown, unreadable
from admission.cli._simulate_report import Report, report
from admission.simulator import (
    GPU_PERF_TAIL,
    AtollPolicy,
    CohortError,
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
    with_gpu_perf,
    workload_jobs,
)
from policies import ProfileLevelError, ProfilesError, load_profiles_file
from topology import LINK_MODELS, ClusterModel, ClusterModelError, Snapshot, load_cluster_model

__all__ = ["cluster_gpus", "load_workload", "main", "run_policies", "settings_check", "with_gpu_perf"]

DEFAULT_JOBS = 1000
DEFAULT_LOAD = 1.3
DEFAULT_SEEDS = 4
DEFAULT_GPU_PERF = GPU_PERF_TAIL
"""Same-SKU GPU speed of the first command and of trace runs on the bundled models: a narrow
body plus slow outliers, the shape Sinha et al. (SC22) measured (``_sweep.GPU_PERF_TAIL``)."""
DEFAULT_SIM_POLICIES = ("count-only", "random", "kueue-bestfit", "kueue-required", "atoll-strict", "atoll-elastic")


def _parser() -> argparse.ArgumentParser:
    """Every flag with its help, one ``add_argument`` each: a flat list, longer than most functions,
    that reads best in one place (split, a flag's help would be looked for in two)."""
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
    p.add_argument("--yield-turn-lead", type=number(0), default=None, metavar="SECONDS",
                   help="from SECONDS before a reservation of its flavor is expected free, the first gang in line for one keeps "
                        "its quota and is given quota first (the controller's decisions.quota_yield_turn_lead_seconds)")
    p.add_argument("--yield-in-turn", action="store_true",
                   help="quota givers take turns as the controller's --quota-yield-in-turn makes them (freed room counts them after "
                        "the parked, a re-parked Workload may give again, the first gang in line for a reservation keeps its quota)")
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


def settings_check(scheduler: str | None, enforcement: str | None) -> None:
    """``--scheduler`` and ``--enforcement`` as the simulator checks them, a bad one named by its flag:
    ``--scheduler: 'fastest' is not one of least-allocated, …``."""
    for field, value in (("scheduler", scheduler), ("enforcement", enforcement)):
        if value:
            try:
                chosen: dict[str, Any] = {field: value}
                SimSettings(**chosen)
            except (TypeError, ValueError) as exc:
                raise PolicyError(f"--{field}: {str(exc).removeprefix(field + ': ')}") from None


@dataclass(frozen=True)
class _Plan:
    """What the command line asks for, checked: the sweep to run and what its report names."""

    spec: SweepSpec
    fmt: TraceFormat
    names: list[str]
    baseline: str
    profiles_path: Path
    sliced: int


def _plan(args: argparse.Namespace) -> _Plan:
    """Every flag checked and the sweep built, before any run; bad input raises the error ``main``
    reports with exit code 2."""
    fmt: TraceFormat = args.trace_format or ("synthetic" if args.trace is None else "itp")
    cohort = load_cohort(args.cohort) if args.cohort is not None else None
    if args.jobs is not None and args.jobs < 1:
        raise TraceError(f"--jobs must be ≥ 1, got {args.jobs}")
    if args.declared_runtime is not None and not args.declared_runtime >= 1:
        raise TraceError(f"--declared-runtime must be at least 1 (a factor over each job's runtime, e.g. 2), got {args.declared_runtime}")
    if fmt == "openb" and not args.nodes:
        raise TraceError("--trace-format openb needs --nodes NODE_LIST.csv (the trace's node list) besides --trace PODS.csv")
    if fmt != "openb" and args.nodes:
        raise TraceError(f"--nodes: only an openb trace has a node list (--trace-format openb); leave it out for {fmt}")
    if args.plots and Path(args.plots).exists() and not Path(args.plots).is_dir():
        raise TraceError(f"--plots: {args.plots} is a file; give a folder for the PNG plots (made if missing)")
    try:
        Path(args.plots).mkdir(parents=True, exist_ok=True) if args.plots else None
    except OSError as exc:
        raise TraceError(f"--plots: cannot make the folder {args.plots}: {exc.strerror or exc}") from None
    if args.records and not Path(args.records).resolve().parent.is_dir():
        raise TraceError(f"--records: the folder of {args.records} does not exist; make it or give a file in a folder that does")
    if fmt != "synthetic" and not args.trace:
        raise TraceError(f"--trace-format {fmt} needs --trace FILE")
    if args.quota_yield_max_seconds is not None and not args.quota_yield_max_seconds > 0:
        raise TraceError(f"--quota-yield-max-seconds must be above 0 (seconds), got {args.quota_yield_max_seconds:g}")
    if args.workers is not None and args.workers < 1:
        raise TraceError(f"--workers must be ≥ 1, got {args.workers}")
    loads = parse_loads(args.load) if args.load is not None else ((DEFAULT_LOAD,) if fmt == "synthetic" else (None,))
    seeds = seeds_of(args.seed, args.seeds if args.seeds is not None else (DEFAULT_SEEDS if fmt == "synthetic" else 3))
    cost = _cost_params(args)
    settings_check(args.scheduler, args.enforcement)
    cluster_path = resolve_cluster(args.cluster)
    problem = (unreadable("--trace", Path(args.trace) if args.trace else None) or unreadable("--cluster", cluster_path)
               or unreadable("--profiles", resolve_profiles(args.profiles) if args.profiles else None))
    if problem:
        raise TraceError(problem)
    cluster = load_cluster_model(cluster_path)
    bundled = args.cluster is None or not Path(args.cluster).suffix  # a bundled name, not a file of its own
    gpu_perf = args.gpu_perf if args.gpu_perf is not None else (DEFAULT_GPU_PERF if bundled else None)
    if gpu_perf is not None:
        with_gpu_perf(cluster, gpu_perf)  # checks the spec before any run
    names = [n.strip() for n in (args.policies or ",".join(DEFAULT_SIM_POLICIES)).split(",") if n.strip()]
    profiles_path = resolve_profiles(args.profiles, cluster_path, cluster)
    doc = load_profiles_file(profiles_path)
    try:
        policies = make_policies(names, doc, seed=args.seed)
    except PolicyError as exc:
        if args.policies:
            raise
        atoll = " and ".join(n for n in DEFAULT_SIM_POLICIES if n.startswith("atoll-"))
        raise PolicyError(f"{exc}: --policies was not given, and its default runs {atoll}, which {shown(profiles_path)} does not both "
                          "define; give --policies") from None
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
    slicing = _slicing(args.slice_level, args.slice_size, cluster)
    sliced = sliced_jobs(slice_workload(prepare_workload(cluster, first_jobs), slicing, build_snapshots(cluster))) if slicing else 0
    spec = SweepSpec(cluster, workload, tuple(names), doc, loads, seeds, cost, gpu_perf, scheduler=args.scheduler,
                     enforcement=args.enforcement, slicing=slicing,
                     keep_results=frozenset((loads[0], seeds[0], n) for n in names) if args.plots else frozenset(),
                     parking=PARKING[args.parking], records=args.records, declared_runtime_factor=args.declared_runtime,
                     kueue_preemption=args.kueue_preemption, quota_yield_max_seconds=args.quota_yield_max_seconds,
                     cohort=cohort, quota_factor=args.quota_factor,
                     yield_back_when_fits=args.yield_back_when_fits, yield_in_turn=args.yield_in_turn,
                     yield_turn_lead=args.yield_turn_lead)
    if args.records and not any(n.startswith("atoll-") for n in names):
        raise PolicyError(f"--records: only Atoll's policies write decision records, and --policies has none ({', '.join(names)})")
    warning = too_few_jobs(first_jobs, loads)
    if warning:  # after every check, so that a bad flag is its one error line alone
        print(f"atoll simulate: warning: {warning}", file=sys.stderr)
    return _Plan(spec, fmt, names, baseline, profiles_path, sliced)


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    given, args.trace = args.trace, resolve_trace(args.trace)
    t0 = time.perf_counter()
    try:
        plan = _plan(args)
        progress = _Progress(sys.stderr, sys.stderr.isatty())
        try:
            records, results = run_sweep(plan.spec, workers=args.workers, progress=progress.start("simulating", "runs"))
        finally:
            if args.records:
                written = gather_records(args.records, plan.spec.keys())
        if args.records:
            print(f"atoll simulate: {written:,} decision records written to {args.records}", file=sys.stderr)
    except CohortError as exc:
        print(f"atoll simulate: --cohort: {exc}", file=sys.stderr)
        return 2
    except (TraceError, ClusterModelError, ProfilesError, PolicyError, ProfileLevelError, CostError) as exc:
        said = str(exc).replace(args.trace, given) if given and args.trace and given != args.trace else str(exc)
        print(f"atoll simulate: {said}", file=sys.stderr)  # a bundled trace as the user named it, not where it was installed
        return 2
    except RunFailed as exc:  # a run found admitted pods without room: report it, do not print numbers
        print(f"atoll simulate: simulation stopped: {exc}", file=sys.stderr)
        return 1
    report(Report(plan.spec, plan.fmt, plan.names, plan.baseline, shown(plan.profiles_path), plan.sliced, records, results,
                  wall=time.perf_counter() - t0, cores=min(args.workers or available_cores(), len(records))),
           fmt=args.format, plots=args.plots)
    return 0

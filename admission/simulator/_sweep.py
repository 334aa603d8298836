"""Many runs at once: every (load, seed, policy) of a comparison, spread over the machine's cores.

Each run is a pure function of its key: the workload (a trace, or a synthetic draw seeded by the
seed), its arrivals scaled to the load, the cluster with its tie-breaks drawn from the seed
(``shuffle_ties``), GPU perf drawn from the seed when asked, the policy seeded by the seed, and
the cost assumptions. No state passes between runs, so the results do not depend on the order
the runs happen in nor on how many processes share them (a test runs them both ways).

Tie-breaks. Policies break ties between places equally good *to them* by node order (the
topology path): count-only fills nodes in that order, Kueue's TAS prefers the first of domains
with equal room, Atoll's finder the first of equal room and equal perf. ``shuffle_ties`` relabels
the cluster with a seeded permutation of the children of every domain: the same physical nodes
(same perf, same links), siblings in another order, so only decisions that were ties can change
(e.g. which of two racks with equal room but different GPU speed Kueue takes). When every node is
identical, every such order gives the very same run: ties among identical nodes change nothing,
and the seeds then vary only what else is seeded (synthetic workloads, the scheduler model's
ties, the random policy). Seed 0 keeps the model's order. GPU perf (``--gpu-perf``) is drawn
anew per seed, from the seed alone: which GPUs are the slow outliers is itself luck, so a seed is
another machine of the same make, and intervals include it.

Nothing but the key seeds a run: not the sweep's first seed, nor how many seeds it has. Seed 2 of
``--seed 0 --seeds 3`` is the run ``--seed 2 --seeds 1`` gives, and ``atoll simulate`` and ``atoll
bench quality`` draw the same run for the same key and the same spec.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from admission.controller import Decider
from admission.simulator._cohort import CohortShape
from admission.simulator._cost import CostParams, apply_bandwidths, apply_cost
from admission.simulator._jobs import Job
from admission.simulator._metrics import summarize
from admission.simulator._policies import make_policies
from admission.simulator._sim import InvariantViolation, PreparedWorkload, SimResult, SimSettings, build_snapshots, prepare_workload, simulate
from admission.simulator._slicing import Slicing, slice_workload
from admission.simulator._stats import RunRecord
from admission.simulator._traces import TraceError, TraceFormat, read_trace, scale_load
from topology import HOSTNAME_LABEL, ClusterModel, ClusterModelError

__all__ = ["GPU_PERF_TAIL", "RunFailed", "RunKey", "SweepSpec", "WorkloadSpec", "available_cores", "cluster_gpus", "gather_records", "parse_loads",
           "record_part", "run_label", "run_one", "run_sweep", "seeds_of", "shuffle_ties", "with_gpu_perf", "workload_jobs"]

RunKey = tuple[float | None, int, str]
"""(load, seed, policy)."""


def available_cores() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def cluster_gpus(cluster: ClusterModel) -> int:
    """GPUs on the healthy nodes of every flavor: the capacity a load is a share of."""
    return sum(snap.free_gpus() for snap in build_snapshots(cluster))


@dataclass(frozen=True)
class WorkloadSpec:
    """Where the jobs come from. A synthetic workload is drawn anew for every seed; a trace is the
    same jobs in every seed (only the tie-breaks change)."""

    trace: str | None = None
    trace_format: TraceFormat = "synthetic"
    nodes: str | None = None
    jobs: int | None = None


def workload_jobs(cluster: ClusterModel, spec: WorkloadSpec, load: float | None, seed: int) -> list[Job]:
    """The jobs of ``spec`` for ``seed``, arrivals scaled to ``load`` (None: as recorded)."""
    per_node = max((int(s.alloc[:, 0].max()) for s in build_snapshots(cluster) if s.num_nodes), default=8)
    out = read_trace(spec.trace, spec.trace_format, gpus_per_node=per_node, nodes_path=spec.nodes, n=spec.jobs, seed=seed)
    if not out:
        raise TraceError(f"{spec.trace or 'synthetic workload'}: no jobs to simulate")
    if load is not None:
        out = scale_load(out, cluster_gpus(cluster), load)
    return out


def shuffle_ties(cluster: ClusterModel, seed: int) -> ClusterModel:
    """The same fabric with the children of every domain in a seeded order (module docstring)."""
    if seed == 0:
        return cluster
    from topology import NodeModel, TaintModel

    rng = np.random.default_rng([seed, 0x71E5])
    flavors = []
    for flavor in cluster.flavors:
        labels = [lv.label for lv in flavor.levels]
        if labels[-1] != HOSTNAME_LABEL:
            labels.append(HOSTNAME_LABEL)
        nodes = flavor.build_nodes()
        paths = [tuple(n.labels.get(lb, n.name if lb == HOSTNAME_LABEL else "") for lb in labels) for n in nodes]
        rename: list[dict[tuple[str, ...], str]] = []
        for depth in range(len(labels)):
            groups: dict[tuple[str, ...], list[str]] = {}
            for p in paths:
                group = groups.setdefault(p[:depth], [])
                if p[depth] not in group:
                    group.append(p[depth])
            mapping: dict[tuple[str, ...], str] = {}
            for parent, values in sorted(groups.items()):
                named = sorted(v for v in values if v)  # a node without the label keeps lacking it
                for old, new in zip(named, (named[i] for i in rng.permutation(len(named)))):
                    mapping[parent + (old,)] = new
                if "" in values:
                    mapping[parent + ("",)] = ""
            rename.append(mapping)
        models = []
        for node, path in zip(nodes, paths):
            new_path: list[str] = []
            for d in range(len(labels)):
                value = rename[d][path[: d + 1]]
                if d and value.startswith(path[d - 1]):  # generated names carry their parent's: keep them readable
                    value = new_path[-1] + value[len(path[d - 1]):]
                new_path.append(value)
            node_labels = dict(node.labels) | {lb: v for lb, v in zip(labels, new_path) if lb in node.labels or lb == HOSTNAME_LABEL}
            models.append(NodeModel(name=new_path[-1], labels=node_labels, allocatable=_kube(node.allocatable, flavor.gpu_resource),
                                    used=_kube(node.used, flavor.gpu_resource), ready=node.ready, unschedulable=node.unschedulable,
                                    taints=[TaintModel.model_validate({"key": t.key, "value": t.value, "effect": t.effect}) for t in node.taints], perf=node.perf))
        flavors.append(flavor.model_copy(update={"generate": [], "nodes": models}))
    return cluster.model_copy(update={"flavors": flavors})


def _kube(v: Any, gpu_resource: str) -> dict[str, Any]:
    return {gpu_resource: v.gpu, "cpu": f"{v.cpu_milli}m", "memory": f"{v.memory_mib}Mi", "pods": v.pods}


@dataclass(frozen=True)
class SweepSpec:
    """One comparison: every load × seed × policy of it is one run."""

    cluster: ClusterModel
    workload: WorkloadSpec
    policies: tuple[str, ...]
    profiles: Any
    """The profiles document (``policies.ProfilesDocument``)."""
    loads: tuple[float | None, ...] = (None,)
    seeds: tuple[int, ...] = (0,)
    cost: CostParams = field(default_factory=CostParams)
    gpu_perf: str | None = None
    """``--gpu-perf`` spec, drawn from each run's seed (every seed draws its own GPUs); None keeps
    the cluster model's perf."""
    scheduler: str | None = None
    enforcement: str | None = None
    slicing: Slicing | None = None
    """Kueue slice annotations on jobs larger than one island (``_slicing``); None: no slices."""
    keep_results: frozenset[RunKey] = frozenset()
    """Runs whose whole ``SimResult`` is returned too (for plots over time)."""
    parking: bool | None = None
    """``SimSettings.parking``: True parks every profile's waits for a domain, False none (Retry
    loop), None each as its ``queueing.parkWaiting`` says."""
    declared_runtime_factor: float | None = None
    """``SimSettings.declared_runtime_factor``: jobs declare this factor × their runtime as Kueue's limit (None: no limits)."""
    records: str | None = None
    """``atoll simulate --records``: each Atoll run writes its decision records to ``record_part``
    of this path; ``gather_records`` joins them, in run order, into the file."""
    kueue_preemption: str = "Never"
    """``SimSettings.kueue_preemption`` (and ``within_cluster_queue`` when not ``Never``): Kueue's own preemption for quota."""
    quota_yield_max_seconds: float | None = None
    """``SimSettings.quota_yield_max_seconds``; None: its default (the controller's)."""
    cohort: CohortShape | None = None
    """``SimSettings.cohort``: several ClusterQueues per flavor in one cohort (None: one ClusterQueue per flavor)."""
    quota_factor: float = 1.0
    """``SimSettings.quota_factor``: each ClusterQueue's nominal GPU quota as this multiple of its flavor's GPUs."""
    yield_back_when_fits: bool = False
    """``SimSettings.yield_back_when_fits`` (the controller's ``decisions.quota_yield_back_when_fits``)."""
    yield_in_turn: bool = False
    """``SimSettings.yield_in_turn`` (the controller's ``decisions.quota_yield_in_turn``)."""
    yield_turn_lead: float | None = None
    """``SimSettings.yield_turn_lead`` (the controller's ``decisions.quota_yield_turn_lead_seconds``)."""

    def keys(self) -> list[RunKey]:
        return [(load, seed, p) for load in self.loads for seed in self.seeds for p in self.policies]


class RunFailed(RuntimeError):
    """A run stopped (a violated invariant); the message names the run. Plain enough to cross
    process boundaries, unlike the simulator's own exception."""


# One prepared workload per (load, seed) per process: the policies of one seed share it.
_PREPARED: dict[tuple[int, float | None, int], tuple[ClusterModel, PreparedWorkload]] = {}
_SPEC: SweepSpec | None = None


def _prepared(spec: SweepSpec, load: float | None, seed: int) -> tuple[ClusterModel, PreparedWorkload]:
    key = (id(spec), load, seed)
    hit = _PREPARED.get(key)
    if hit is None:
        cluster = apply_bandwidths(spec.cluster, spec.cost)
        if spec.gpu_perf is not None:
            cluster = with_gpu_perf(cluster, spec.gpu_perf, seed)
        cluster = shuffle_ties(cluster, seed)
        jobs = apply_cost(workload_jobs(cluster, spec.workload, load, seed), spec.cost)
        work = prepare_workload(cluster, jobs)
        if spec.slicing is not None:
            work = slice_workload(work, spec.slicing, build_snapshots(cluster))
        hit = (cluster, work)
        if len(_PREPARED) >= 4:
            _PREPARED.pop(next(iter(_PREPARED)))
        _PREPARED[key] = hit
    return hit


def run_one(spec: SweepSpec, key: RunKey) -> tuple[RunKey, RunRecord, SimResult | None]:
    """One run of ``spec``: a function of ``key`` and ``spec`` alone."""
    load, seed, name = key
    cluster, work = _prepared(spec, load, seed)
    policy = make_policies([name], spec.profiles, seed=seed)[0]
    chosen: dict[str, Any] = {"scheduler": spec.scheduler, "enforcement": spec.enforcement}
    if spec.kueue_preemption != "Never":  # one ClusterQueue, one policy: Atoll's plan reads what Kueue applies
        chosen["within_cluster_queue"] = spec.kueue_preemption
    if spec.quota_yield_max_seconds is not None:
        chosen["quota_yield_max_seconds"] = spec.quota_yield_max_seconds
    if spec.cohort is not None:
        chosen["cohort"] = spec.cohort
    if spec.yield_back_when_fits:
        chosen["yield_back_when_fits"] = True
    if spec.yield_in_turn:
        chosen["yield_in_turn"] = True
    if spec.yield_turn_lead is not None:
        chosen["yield_turn_lead"] = spec.yield_turn_lead
    settings = SimSettings(record_islands=key in spec.keep_results, seed=seed, parking=spec.parking, link_model=spec.cost.link_model,
                           declared_runtime_factor=spec.declared_runtime_factor, kueue_preemption=spec.kueue_preemption,
                           records=record_part(spec.records, key) if spec.records else None, run_label=run_label(key),
                           quota_factor=spec.quota_factor,
                           **{k: v for k, v in chosen.items() if v})
    try:
        result = simulate(cluster, work, policy, settings=settings)
    except InvariantViolation as exc:
        raise RunFailed(f"{name}, seed {seed}{'' if load is None else f', load {load:g}'}: {exc}") from None
    record = RunRecord(name, seed, load, result.status.copy(), result.arrival, result.start, result.end, result.gpus,
                       work.duration, summarize(result))
    return key, record, (result if key in spec.keep_results else None)


def run_label(key: RunKey) -> str:
    """A run as its records name it: ``atoll-strict seed 0 load 0.9``."""
    load, seed, name = key
    return f"{name} seed {seed}" + ("" if load is None else f" load {load:g}")


def record_part(path: str, key: RunKey) -> str:
    """Where one run writes its records before ``gather_records`` joins them (runs may be in other processes)."""
    load, seed, name = key
    return f"{path}.part-{name}-s{seed}-l{'trace' if load is None else f'{load:g}'}"


def gather_records(path: str, keys: Iterable[RunKey]) -> int:
    """Join the runs' record parts into ``path`` in ``keys`` order (removing the parts); the records written."""
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for key in keys:
            part = Path(record_part(path, key))
            if not part.exists():  # a policy that is not Atoll's writes none
                continue
            with part.open(encoding="utf-8") as src:
                for line in src:
                    out.write(line)
                    written += 1
            part.unlink()
    return written


def _worker_init(spec: SweepSpec) -> None:
    global _SPEC
    _SPEC = spec


def _worker_run(key: RunKey) -> tuple[RunKey, RunRecord, SimResult | None]:
    assert _SPEC is not None
    return run_one(_SPEC, key)


def _cost_rank(key: RunKey) -> tuple[int, float]:
    """Slow runs first (Atoll at high load) so the cores finish together; results do not depend on it."""
    load, _, name = key
    return (0 if name.startswith("atoll-") else 1, -(load if load is not None else 1.0))


def run_sweep(
    spec: SweepSpec,
    *,
    workers: int | None = None,
    order: Iterable[RunKey] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[RunKey, RunRecord], dict[RunKey, SimResult]]:
    """Every run of ``spec`` (``order``: the runs to do and their order; default all, slow first),
    on ``workers`` processes (default: the cores available; 1 runs here). Results keyed by run."""
    _PREPARED.clear()
    keys = list(order) if order is not None else sorted(spec.keys(), key=_cost_rank)
    n_workers = min(workers if workers is not None else available_cores(), max(len(keys), 1))
    records: dict[RunKey, RunRecord] = {}
    results: dict[RunKey, SimResult] = {}

    def keep(out: tuple[RunKey, RunRecord, SimResult | None]) -> None:
        key, record, result = out
        records[key] = record
        if result is not None:
            results[key] = result
        if progress is not None:
            progress(len(records), len(keys))

    if n_workers <= 1:
        for key in keys:
            keep(run_one(spec, key))
    else:
        # compiled (or loaded from numba's cache) once here, the workers fork with the kernels in
        # memory instead of each compiling them on a cold cache
        Decider.warm_up()
        with ProcessPoolExecutor(n_workers, mp_context=get_context("fork"), initializer=_worker_init, initargs=(spec,)) as pool:
            for out in pool.map(_worker_run, keys, chunksize=1):
                keep(out)
    _PREPARED.clear()
    return records, results


GPU_PERF_TAIL = "tail:0.015:0.01:1.5"
"""The default GPU speed model of the first command, traces and the bench: per GPU a body
normal(1, 1.5 %) (across a thousand GPUs its range is ≈ 10 %, near the 8 % average variation
Sinha et al., SC22, measured within one SKU) and 1 % slow outliers, 1.1–1.5× slower (the study's
outliers reach 1.5×; their share is this model's assumption); a node runs at its slowest GPU."""


def with_gpu_perf(cluster: ClusterModel, spec: str, seed: int = 0) -> ClusterModel:
    """The cluster with every flavor's per-node perf drawn from ``spec`` (explicit nodes keep theirs).

    ``identical``, ``normal:[MEAN:]STDDEV``, ``uniform:LOW:HIGH`` or ``tail[:BODY_STDDEV:SHARE:WORST]``
    (``GPU_PERF_TAIL``). GPUs of one SKU differ in speed; this is how a run asks what that costs
    each policy."""
    from pydantic import ValidationError

    from topology import describe_validation_error

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
    elif kind == "tail" and len(numbers) in (0, 3):
        body, share, worst = numbers or [float(x) for x in GPU_PERF_TAIL.split(":")[1:]]
        params = {"stddev": body, "tailShare": share, "tailWorst": worst}
    else:
        raise ClusterModelError(f"--gpu-perf: {spec!r} is not identical, normal:STDDEV, normal:MEAN:STDDEV, uniform:LOW:HIGH "
                                "or tail:BODY_STDDEV:SHARE:WORST")
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


def parse_loads(text: str | None) -> tuple[float | None, ...]:
    """``0.7,0.85,1.0`` → loads; None → (None,) (as recorded)."""
    if text is None:
        return (None,)
    out: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise TraceError(f"--load: {part!r} is not a number (e.g. 0.85 or 0.7,0.85,1.0)") from None
        if not (math.isfinite(value) and value > 0):
            raise TraceError(f"--load must be > 0 (a share of cluster GPU capacity, e.g. 0.85), got {part}")
        if value not in out:
            out.append(value)
    if not out:
        raise TraceError("--load: give at least one load (e.g. 0.85 or 0.7,0.85,1.0)")
    return tuple(out)


def seeds_of(first: int, count: int) -> tuple[int, ...]:
    if count < 1:
        raise TraceError(f"--seeds must be ≥ 1, got {count}")
    return tuple(range(first, first + count))


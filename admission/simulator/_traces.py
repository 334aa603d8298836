"""Trace readers (public GPU-cluster traces → ``Job`` lists) and offered-load scaling.

Every reader returns jobs sorted by submit time (stable: ties keep file order) and stops at
the first bad row with a ``TraceError`` naming file, line and column::

    msft_itp.csv:17: column num_gpu: 'abc' is not an integer

Formats (column names as published; the ITP window ships with its source and licence in
``admission/simulator/traces``):

``itp`` (Microsoft ITP / ElasticFlow): ``job_id``, ``submission_time``, ``duration``, ``num_gpu``,
    and an optional ``priority`` (not in the published trace: a column a user adds; empty or
    absent is 0).
    All training. Node shape is not published: pods follow ``split_into_pods`` with the
    ``gpus_per_node`` the caller gives (8 by default, an HGX/DGX node).

``openb`` (Alibaba GPU trace of the FGD paper): a pod list and a node list.
    - arrival = ``creation_time``;
    - duration = ``deletion_time − scheduled_time`` when the pod was scheduled: the simulator
      models the wait itself, so the recorded pending time must not count as runtime. Pods never
      scheduled (phase Pending) have no ``scheduled_time``; their whole lifetime
      ``deletion_time − creation_time`` is the best estimate of how long they wanted GPUs;
    - GPUs = ``num_gpu``; a fractional share (``gpu_milli`` < 1000, GPU sharing) rounds up to one
      whole GPU, since Atoll places whole GPUs;
    - CPU-only pods (``num_gpu`` 0) are skipped and counted in ``OpenbTrace.cpu_only_pods``;
    - kind: ``qos`` LS (latency-sensitive) → inference, any other → training. The trace has no
      class label; this mapping is an assumption, as the traces README says;
    - ``cpu_milli``/``memory_mib`` become the pod's requests. Each row is one pod; it is split only
      when it is larger than ``gpus_per_node`` (default: the largest GPU node of the node list).
    The node list gives the GPU node mix (``NodeMix``) a cluster model can be derived from.
    Caveat from the README: the trace is a snapshot, so ``deletion_time`` of pods still running
    at its end is the snapshot's end, not a completion.

``synthetic``: ``synthetic_jobs`` with ``SyntheticParams`` from an optional YAML/JSON file.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError

from admission.simulator._jobs import PRIORITY_MAX, PRIORITY_MIN, Job, JobKind, _unchecked_jobs, make_job
from admission.simulator._synthetic import SyntheticParams, synthetic_jobs
from topology import describe_validation_error, describe_yaml_error

__all__ = [
    "ITP_COLUMNS",
    "OPENB_NODE_COLUMNS",
    "OPENB_POD_COLUMNS",
    "TRACE_FORMATS",
    "NodeGroup",
    "NodeMix",
    "OpenbTrace",
    "TraceError",
    "TraceFormat",
    "offered_load",
    "read_itp",
    "read_openb",
    "read_openb_nodes",
    "read_trace",
    "scale_load",
]

TraceFormat = Literal["itp", "openb", "synthetic"]
TRACE_FORMATS: Final = ("itp", "openb", "synthetic")
ITP_COLUMNS: Final = ("job_id", "submission_time", "duration", "num_gpu")
OPENB_POD_COLUMNS: Final = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time",
)
OPENB_NODE_COLUMNS: Final = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
DEFAULT_ITP_GPUS_PER_NODE: Final = 8

StrPath = str | os.PathLike[str]


class TraceError(ValueError):
    """A trace cannot be read or used; the message names file, line and column, and the fix."""


# --------------------------------------------------------------------------------- CSV rows


def _rows(path: StrPath, columns: Sequence[str], optional: Sequence[str] = ()) -> Iterator[tuple[str, list[str]]]:
    """Yield (``"file:line"``, values of ``columns`` then ``optional`` in that order) per data row,
    ``""`` for an optional column the header lacks; blank lines are skipped. Fails on a missing file, an empty file, a missing column, a ragged row, or a
    header with no rows."""
    name = os.fspath(path)
    try:
        fh = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115 - a missing file gets its own message; the with below closes it
    except OSError as exc:
        raise TraceError(f"{name}: cannot open trace: {exc.strerror or exc}") from exc
    with fh:
        reader = csv.reader(fh)
        line = 0
        try:
            header = next(reader, None)
            while header is not None and not any(cell.strip() for cell in header):
                header = next(reader, None)
            if header is None:
                raise TraceError(f"{name}: empty file; expected a CSV header with columns {', '.join(columns)}")
            header = [cell.strip() for cell in header]
            missing = [c for c in columns if c not in header]
            if missing:
                raise TraceError(
                    f"{name}:{reader.line_num}: missing column {', '.join(missing)} (header has: {', '.join(header)}); "
                    "is this the right file and --trace-format?"
                )
            repeated = [c for c in (*columns, *optional) if header.count(c) > 1]
            if repeated:
                raise TraceError(f"{name}:{reader.line_num}: column {', '.join(repeated)} appears more than once in the header")
            index = [header.index(c) if c in header else -1 for c in (*columns, *optional)]
            width = len(header)
            rows = 0
            for row in reader:
                line = reader.line_num
                if not row:
                    continue
                if len(row) != width:
                    raise TraceError(f"{name}:{line}: {len(row)} fields, but the header has {width}")
                rows += 1
                yield f"{name}:{line}", [row[i] if i >= 0 else "" for i in index]
        except csv.Error as exc:
            raise TraceError(f"{name}:{reader.line_num}: not valid CSV: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise TraceError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}); is this a CSV trace?") from exc
        if rows == 0:
            raise TraceError(f"{name}: header but no rows; a trace needs at least one job")


def _number(where: str, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: column {column}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(f"{where}: column {column}: {text!r} is not a finite number")
    return value


def _integer(where: str, column: str, text: str, low: int, why: str) -> int:
    """An integer column of at least ``low`` (``why`` says what the column holds)."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not number.is_integer():  # "8.0" passes: some exports write counts that way
            raise TraceError(f"{where}: column {column}: {text!r} is not an integer") from None
        value = int(number)
    _at_least(where, column, text, value, low, why)
    return value


def _priority(where: str, text: str) -> int:
    """The optional ``priority`` column: the Workload's ``spec.priority`` (Kueue's int32); empty or absent: 0."""
    if not text.strip():
        return 0
    value = _integer(where, "priority", text, -math.inf, "")  # type: ignore[arg-type]
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise TraceError(f"{where}: column priority: {text!r} must be in [{PRIORITY_MIN}, {PRIORITY_MAX}] (Kueue's int32)")
    return value


def _unique_name(where: str, column: str, text: str, seen: dict[str, str], what: str) -> str:
    """A row's name or id: not empty and not used by an earlier row (``seen`` maps names to rows)."""
    name = text.strip()
    if not name:
        raise TraceError(f"{where}: column {column}: empty; every {what}")
    if name in seen:
        raise TraceError(f"{where}: column {column}: {name!r} already used at {seen[name]}")
    seen[name] = where
    return name


def _cpu_memory(where: str, cpu: str, memory: str) -> tuple[int, int]:
    """The openb ``cpu_milli`` and ``memory_mib`` columns, shared by pod and node rows."""
    return _integer(where, "cpu_milli", cpu, 0, "milli-cores"), _integer(where, "memory_mib", memory, 0, "MiB")


def _at_least(where: str, column: str, text: str, value: float, low: float, why: str) -> None:
    if value < low:
        raise TraceError(f"{where}: column {column}: {text!r} must be ≥ {low:g} ({why})")


def _by_submit(jobs: list[Job]) -> list[Job]:
    jobs.sort(key=lambda j: j.submit_s)  # list.sort is stable: ties keep file order
    return jobs


def _check_gpus_per_node(gpus_per_node: int) -> None:
    if gpus_per_node < 1:
        raise TraceError(f"gpus_per_node must be ≥ 1, got {gpus_per_node}")


# --------------------------------------------------------------------------------- ITP


def read_itp(path: StrPath, gpus_per_node: int = DEFAULT_ITP_GPUS_PER_NODE) -> list[Job]:
    """Microsoft ITP training jobs (module docstring), cut into pods for ``gpus_per_node``."""
    _check_gpus_per_node(gpus_per_node)
    jobs: list[Job] = []
    seen: dict[str, str] = {}
    for where, (job_id, submitted, duration, num_gpu, priority) in _rows(path, ITP_COLUMNS, ("priority",)):
        job_id = _unique_name(where, "job_id", job_id, seen, "job needs an id")
        submit_s = _number(where, "submission_time", submitted)
        duration_s = _number(where, "duration", duration)
        _at_least(where, "duration", duration, duration_s, 0, "a duration in seconds")
        gpus = _integer(where, "num_gpu", num_gpu, 1, "a training job uses at least one GPU")
        jobs.append(make_job(job_id, submit_s, duration_s, gpus, gpus_per_node, "training", priority=_priority(where, priority)))
    return _by_submit(jobs)


# --------------------------------------------------------------------------------- openb


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """Identical GPU nodes of the node list: ``count`` nodes of ``gpus`` × ``model``."""

    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    count: int


@dataclass(frozen=True, slots=True)
class NodeMix:
    """The GPU nodes of an openb node list, grouped; CPU-only nodes are only counted."""

    groups: tuple[NodeGroup, ...]
    """Sorted by model, GPUs, CPU and memory."""
    cpu_nodes: int

    @property
    def gpu_nodes(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def gpus(self) -> int:
        return sum(g.count * g.gpus for g in self.groups)

    @property
    def max_gpus_per_node(self) -> int:
        return max((g.gpus for g in self.groups), default=0)

    def by_model(self) -> dict[tuple[str, int], int]:
        """Nodes per (model, GPUs per node), as the traces README tabulates them."""
        out: Counter[tuple[str, int]] = Counter()
        for g in self.groups:
            out[(g.model, g.gpus)] += g.count
        return dict(out)


@dataclass(frozen=True, slots=True)
class OpenbTrace:
    """The GPU pods of an openb pod list as jobs, and the cluster's node mix."""

    jobs: list[Job]
    nodes: NodeMix
    cpu_only_pods: int
    """Pods with ``num_gpu`` 0, skipped."""


def read_openb_nodes(path: StrPath) -> NodeMix:
    """The node list: GPU nodes grouped by (model, GPUs, CPU, memory); needs a GPU node."""
    groups: Counter[tuple[str, int, int, int]] = Counter()
    cpu_nodes = 0
    seen: dict[str, str] = {}
    for where, (sn, cpu, memory, gpu, model) in _rows(path, OPENB_NODE_COLUMNS):
        sn = _unique_name(where, "sn", sn, seen, "node needs a name")
        cpu_milli, memory_mib = _cpu_memory(where, cpu, memory)
        gpus = _integer(where, "gpu", gpu, 0, "a GPU count")
        model = model.strip()
        if gpus == 0:
            cpu_nodes += 1
            continue
        if not model:
            raise TraceError(f"{where}: column model: empty for a node with {gpus} GPUs; name its GPU model")
        groups[(model, gpus, cpu_milli, memory_mib)] += 1
    if not groups:
        raise TraceError(f"{os.fspath(path)}: no GPU nodes (every row has gpu 0); is this the node list of a GPU cluster?")
    return NodeMix(tuple(NodeGroup(*key, count) for key, count in sorted(groups.items())), cpu_nodes)


def read_openb(pods_path: StrPath, nodes_path: StrPath, gpus_per_node: int | None = None) -> OpenbTrace:
    """Alibaba openb GPU pods as jobs plus the node mix (module docstring for every mapping)."""
    nodes = read_openb_nodes(nodes_path)
    per_node = nodes.max_gpus_per_node if gpus_per_node is None else gpus_per_node
    _check_gpus_per_node(per_node)
    jobs: list[Job] = []
    cpu_only = 0
    seen: dict[str, str] = {}
    for where, (name, cpu, memory, num_gpu, gpu_milli, qos, created, deleted, scheduled) in _rows(pods_path, OPENB_POD_COLUMNS):
        name = _unique_name(where, "name", name, seen, "pod needs a name")
        cpu_milli, memory_mib = _cpu_memory(where, cpu, memory)
        gpus = _integer(where, "num_gpu", num_gpu, 0, "a GPU count")
        milli = _integer(where, "gpu_milli", gpu_milli, 0, "milli-GPUs")
        if milli > 1000:
            raise TraceError(f"{where}: column gpu_milli: {gpu_milli!r} must be ≤ 1000 (1000 = one whole GPU)")
        if gpus > 0 and milli == 0:
            raise TraceError(f"{where}: column gpu_milli: 0 for a pod with {gpus} GPUs; a GPU pod uses 1–1000 milli-GPUs")
        creation = _number(where, "creation_time", created)
        deletion = _number(where, "deletion_time", deleted)
        if deletion < creation:
            raise TraceError(f"{where}: column deletion_time: {deleted!r} is before creation_time {created!r}")
        start = creation
        if scheduled.strip():
            start = _number(where, "scheduled_time", scheduled)
            if not creation <= start <= deletion:
                raise TraceError(
                    f"{where}: column scheduled_time: {scheduled!r} is outside [creation_time {created!r}, deletion_time {deleted!r}]"
                )
        if gpus == 0:
            cpu_only += 1
            continue
        kind: JobKind = "inference" if qos.strip() == "LS" else "training"
        jobs.append(make_job(name, creation, deletion - start, gpus, per_node, kind, cpu_milli=cpu_milli, memory_mib=memory_mib))
    return OpenbTrace(_by_submit(jobs), nodes, cpu_only)


# --------------------------------------------------------------------------------- dispatch


def _synthetic_params(path: StrPath) -> SyntheticParams:
    name = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{name}: cannot open synthetic parameters: {exc.strerror or exc}") from exc
    if name.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{name}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    else:
        import yaml  # only this path needs it

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TraceError(f"{name}: {describe_yaml_error(exc)}") from exc
    if isinstance(data, dict) and "profiles" in data:
        raise TraceError(f"{name}: a profiles document (it has profiles:), not synthetic parameters; give it with --profiles, "
                         "and --trace a file of sizeMix, arrivalRatePerHour, … (config/streams/small-jobs-with-gangs.yaml)")
    try:
        return SyntheticParams.model_validate(data or {})
    except ValidationError as exc:  # the first problem, on one line as the profiles document's read
        raise TraceError(describe_validation_error(name, exc, data, SyntheticParams).splitlines()[0]) from exc


def read_trace(
    path: StrPath | None,
    fmt: TraceFormat,
    *,
    gpus_per_node: int | None = None,
    nodes_path: StrPath | None = None,
    n: int | None = None,
    seed: int = 0,
    params: SyntheticParams | None = None,
) -> list[Job]:
    """Jobs of a trace in format ``fmt``; ``n`` keeps the first n by submit time (traces) or is
    how many to draw (synthetic, where it is required).

    - ``itp``: ``path`` is the CSV; ``gpus_per_node`` defaults to 8.
    - ``openb``: ``path`` is the pod list, ``nodes_path`` the node list (required).
    - ``synthetic``: ``path`` is an optional YAML/JSON file of ``SyntheticParams`` (or pass
      ``params``); ``gpus_per_node`` defaults to 8; ``seed`` seeds the draws.
    """
    if n is not None and n < 0:
        raise TraceError(f"n must be ≥ 0, got {n}")
    if fmt == "synthetic":
        if n is None:
            raise TraceError("synthetic traces need n, the number of jobs to draw")
        if path is not None and params is not None:
            raise TraceError(f"{os.fspath(path)}: give synthetic parameters as a file or as params, not both")
        chosen = _synthetic_params(path) if path is not None else (params or SyntheticParams())
        return synthetic_jobs(n, seed, gpus_per_node or DEFAULT_ITP_GPUS_PER_NODE, chosen)
    if path is None:
        raise TraceError(f"trace format {fmt} needs a trace file")
    if fmt == "itp":
        jobs = read_itp(path, gpus_per_node or DEFAULT_ITP_GPUS_PER_NODE)
    elif fmt == "openb":
        if nodes_path is None:
            raise TraceError(f"{os.fspath(path)}: the openb format needs its node list too (nodes_path)")
        jobs = read_openb(path, nodes_path, gpus_per_node).jobs
    else:
        raise TraceError(f"unknown trace format {fmt!r}; use one of {', '.join(TRACE_FORMATS)}")
    return jobs if n is None else jobs[:n]


# --------------------------------------------------------------------------------- load


def offered_load(jobs: Sequence[Job], cluster_gpus: int) -> float:
    """Offered load = Σ(gpus × duration_s) / (span × cluster_gpus), span = last − first submit_s.

    The GPU-seconds the jobs ask for (at their ideal durations) per GPU-second of cluster
    capacity over the arrival window; 1.0 keeps every GPU busy for the whole window.
    """
    if cluster_gpus < 1:
        raise TraceError(f"cluster_gpus must be ≥ 1, got {cluster_gpus}")
    span = _span(jobs)
    return math.fsum(j.gpus * j.duration_s for j in jobs) / (span * cluster_gpus)


def _span(jobs: Sequence[Job]) -> float:
    if not jobs:
        raise TraceError("offered load needs jobs; the trace is empty")
    first = min(j.submit_s for j in jobs)
    span = max(j.submit_s for j in jobs) - first
    if not span > 0:
        raise TraceError(f"all {len(jobs)} jobs arrive at {first:g} s; offered load needs arrivals spread over time")
    return span


def scale_load(jobs: Sequence[Job], cluster_gpus: int, load: float) -> list[Job]:
    """The jobs with inter-arrival times scaled so that ``offered_load`` equals ``load``.

    With W = Σ(gpus × duration_s), span T = last − first submit_s and C = ``cluster_gpus``, the
    offered load is W / (T·C). Every arrival moves to ``first + c·(submit_s − first)`` with
    c = W / (T·C·load), so the new span is c·T and the new offered load W / (c·T·C) = load.
    Durations, sizes and order are unchanged; the first arrival stays put. Sorted by submit time.
    """
    if not (math.isfinite(load) and load > 0):
        raise TraceError(f"load must be > 0 (a share of cluster GPU capacity, e.g. 0.85), got {load}")
    current = offered_load(jobs, cluster_gpus)
    factor = current / load
    first = min(j.submit_s for j in jobs)
    return _by_submit(_unchecked_jobs(
        [j.id for j in jobs], [first + factor * (j.submit_s - first) for j in jobs], [j.duration_s for j in jobs],
        [j.gpus for j in jobs], [j.pods for j in jobs], [j.gpus_per_pod for j in jobs], [j.kind for j in jobs],
        [j.queue for j in jobs], [j.cpu_milli_per_pod for j in jobs], [j.memory_mib_per_pod for j in jobs],
        [j.comm_fraction for j in jobs], [j.model_gb for j in jobs], [j.overlap for j in jobs], [j.priority for j in jobs],
    ))

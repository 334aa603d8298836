"""The job the simulator replays: what a trace row or a synthetic draw becomes.

A job is a gang of identical pods. Its ``duration_s`` is the runtime on an ideal placement (one
island, best link, GPUs of perf 1.0); the cost model (``_cost``) stretches it for the placement
it actually gets, using ``comm_fraction`` and ``model_gb`` (their defaults:
``topology.default_comm_fraction``, ``topology.default_model_gb``).

Shape rule (DESIGN, "Simulator"): a job larger than one node becomes pods of one node's GPUs
each; a job that fits a node is one pod with all its GPUs. When a large job's GPU count is not a
multiple of the node size, its pods take the *largest divisor of the GPU count that fits a
node* (12 GPUs on 8-GPU nodes → 2 pods × 6): the job keeps exactly the GPUs it asked for (so
quota, offered load and GPU-hours stay true to the trace) and its pods stay identical, as one
Job/JobSet PodSet requires. Rounding pods up instead would hand the job GPUs it never used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields, make_dataclass
from typing import Any, Final, Literal

from topology import default_comm_fraction, default_model_gb

__all__ = [
    "JOB_KINDS",
    "Job",
    "JobKind",
    "make_job",
    "split_into_pods",
]

JobKind = Literal["training", "inference"]
JOB_KINDS: Final = ("training", "inference")

_NOT_GIVEN: Final = math.nan
PRIORITY_MIN: Final = -(2**31)
PRIORITY_MAX: Final = 2**31 - 1
"""Kueue's ``spec.priority`` is an int32."""


def split_into_pods(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(pods, gpus_per_pod) for a job of ``gpus`` GPUs on nodes of ``gpus_per_node``.

    ≤ one node: one pod with all GPUs. Larger: pods of ``gpus_per_node`` GPUs when that divides
    ``gpus``, else pods of the largest divisor of ``gpus`` that fits a node (module docstring).
    """
    if gpus < 1:
        raise ValueError(f"gpus must be ≥ 1, got {gpus}")
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be ≥ 1, got {gpus_per_node}")
    if gpus <= gpus_per_node:
        return 1, gpus
    per_pod = gpus_per_node
    while gpus % per_pod:
        per_pod -= 1
    return gpus // per_pod, per_pod


@dataclass(frozen=True, slots=True)
class Job:
    """One job of a trace. Times in seconds; ``cpu_milli_per_pod``/``memory_mib_per_pod`` 0 = not
    requested. ``comm_fraction`` and ``model_gb`` left unset take ``default_comm_fraction`` and
    ``default_model_gb``. Build with ``make_job`` to get the pod shape from a node size."""

    id: str
    submit_s: float
    duration_s: float
    """Runtime on an ideal single-island placement; the cost model stretches it."""
    gpus: int
    pods: int
    gpus_per_pod: int
    kind: JobKind
    queue: str = "default"
    cpu_milli_per_pod: int = 0
    memory_mib_per_pod: int = 0
    comm_fraction: float = _NOT_GIVEN
    """Share of an ideal step spent in all-reduce on an ideal island, in [0, 1]."""
    model_gb: float = _NOT_GIVEN
    """Bytes all-reduced per step, in GB."""
    overlap: float = _NOT_GIVEN
    """Share of the all-reduce that runs behind compute, in [0, 1] (see ``_cost``); unset: 0."""
    priority: int = 0
    """Its Workload's ``spec.priority`` (a WorkloadPriorityClass's value): Kueue queues higher
    first, and a gang may preempt lower ones (``preemptDomain``). 0 for every job unless given."""

    def __post_init__(self) -> None:
        where = f"job {self.id!r}"
        if not self.id:
            raise ValueError("job id must not be empty")
        if not math.isfinite(self.submit_s):
            raise ValueError(f"{where}: submit_s must be a finite number of seconds, got {self.submit_s}")
        if not (math.isfinite(self.duration_s) and self.duration_s >= 0):
            raise ValueError(f"{where}: duration_s must be ≥ 0 seconds, got {self.duration_s}")
        if self.gpus < 1:
            raise ValueError(f"{where}: gpus must be ≥ 1, got {self.gpus}")
        if self.pods < 1 or self.gpus_per_pod < 1 or self.pods * self.gpus_per_pod != self.gpus:
            raise ValueError(
                f"{where}: pods ({self.pods}) × gpus_per_pod ({self.gpus_per_pod}) must equal gpus ({self.gpus});"
                " get the shape from split_into_pods(gpus, gpus_per_node)"
            )
        if self.kind not in JOB_KINDS:
            raise ValueError(f"{where}: kind must be one of {', '.join(JOB_KINDS)}, got {self.kind!r}")
        if self.cpu_milli_per_pod < 0 or self.memory_mib_per_pod < 0:
            raise ValueError(f"{where}: cpu_milli_per_pod and memory_mib_per_pod must be ≥ 0")
        if math.isnan(self.comm_fraction):
            object.__setattr__(self, "comm_fraction", default_comm_fraction(self.kind, self.gpus))
        elif not 0.0 <= self.comm_fraction <= 1.0:
            raise ValueError(f"{where}: comm_fraction must be in [0, 1], got {self.comm_fraction}")
        if math.isnan(self.model_gb):
            object.__setattr__(self, "model_gb", default_model_gb(self.gpus))
        elif not (math.isfinite(self.model_gb) and self.model_gb >= 0):
            raise ValueError(f"{where}: model_gb must be ≥ 0, got {self.model_gb}")
        if math.isnan(self.overlap):
            object.__setattr__(self, "overlap", 0.0)
        elif not 0.0 <= self.overlap <= 1.0:
            raise ValueError(f"{where}: overlap must be in [0, 1], got {self.overlap}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int) or not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise ValueError(f"{where}: priority must be a whole number in [{PRIORITY_MIN}, {PRIORITY_MAX}] "
                             f"(Kueue's int32 spec.priority), got {self.priority!r}")


def make_job(
    id: str,  # noqa: A002 - the Job field it fills
    submit_s: float,
    duration_s: float,
    gpus: int,
    gpus_per_node: int,
    kind: JobKind = "training",
    *,
    queue: str = "default",
    cpu_milli: int = 0,
    memory_mib: int = 0,
    comm_fraction: float = _NOT_GIVEN,
    model_gb: float = _NOT_GIVEN,
    overlap: float = _NOT_GIVEN,
    priority: int = 0,
) -> Job:
    """A ``Job`` cut into pods by ``split_into_pods``; ``cpu_milli``/``memory_mib`` are the whole
    job's and are shared evenly by its pods (rounded up, so no pod asks for less than its share)."""
    pods, per_pod = split_into_pods(gpus, gpus_per_node)
    return Job(
        id, submit_s, duration_s, gpus, pods, per_pod, kind, queue,
        -(-cpu_milli // pods), -(-memory_mib // pods), comm_fraction, model_gb, overlap, priority,
    )


# Bulk construction. A frozen dataclass sets each field through object.__setattr__, which makes
# ``Job(...)`` about 5× slower than a plain slots class; the synthetic generator and
# ``scale_load`` build 100,000 jobs from values already checked in bulk, so they fill a mutable
# twin with the very same slots and retype it (CPython allows __class__ assignment between
# classes of identical layout). The result is a genuine, frozen ``Job``.
_JobBuilder: Any = make_dataclass("_JobBuilder", [(f.name, f.type) for f in fields(Job)], slots=True)
if _JobBuilder.__slots__ != Job.__slots__:  # pragma: no cover - guards the retyping below
    raise RuntimeError("_JobBuilder must have Job's slots, in order")


def _unchecked_jobs(*columns: Iterable[Any]) -> list[Job]:
    """``Job``s from fourteen columns (one iterable per field, in field order) without
    ``__post_init__``: only for values that already satisfy its checks, defaults filled in."""
    jobs: list[Any] = list(map(_JobBuilder, *columns))
    for job in jobs:
        job.__class__ = Job
    return jobs

"""ClusterQueues of one cohort in the simulator: how a flavor's quota is split, which
ClusterQueue each job's Workload queues in, Kueue's quota check with borrowing, and Kueue's
scheduling order across the ClusterQueues of the cohort.

The shape (``CohortShape``)
    N ClusterQueues share each flavor in one cohort. Each has a ``nominalQuota`` (a share of the
    flavor's quota: the shares sum to 1, so the cohort's quota is the single ClusterQueue's), and
    may have a ``borrowingLimit`` and a ``lendingLimit`` (shares of the flavor's quota too; unset:
    no limit), as Kueue's ``spec.resourceGroups[].flavors[].resources[]`` has them. Shares are
    turned into whole GPUs per flavor by largest remainder (ties to the earlier ClusterQueue), so
    the GPUs add up to the flavor's quota. ``--cohort N`` is N equal shares, borrowing unlimited.
    The default, no shape, is the simulator's one ClusterQueue per flavor with no cohort.

Which ClusterQueue a job queues in
    A job whose ``queue`` names one of the cohort's ClusterQueues queues there. The ITP trace
    carries no user, team or queue column, so its jobs are split by a stated, seeded rule: job ``id`` goes to the ClusterQueue whose cumulative nominal share first exceeds
    ``crc32("<seed>:<id>") / 2**32``: each team's expected share of the jobs is its share of the
    quota, the same job goes to the same team for every policy of a run, and the split does not
    depend on the order jobs are read in.

Kueue's quota check (``CohortQuota``, the controller's own arithmetic)
    A Workload of ClusterQueue ``c`` fits when its GPUs are at most what Kueue v0.19.2's
    ``available`` gives ``c`` (``pkg/cache/scheduler/resource_node.go``): its nominal quota past
    its lendingLimit less its usage there, plus the cohort's unused lendable quota, capped by its
    own share in the cohort less its usage there plus its borrowingLimit. The simulator calls the
    controller's ``admission.controller.CohortQuota`` (what ``QuotaYield`` counts with), so the two
    sides count quota by one rule. A Workload borrows when its ClusterQueue's usage plus its GPUs
    passes its nominal quota (``Assignment.Borrows``).

Kueue's order across the ClusterQueues (``CohortHeads``)
    Each scheduling cycle Kueue takes the head of every ClusterQueue (BestEffortFIFO within each:
    priority, then queue-order time) and admits them in ``entryOrdering.Less`` order
    (``pkg/scheduler/scheduler.go``): entries that fit without borrowing before those that borrow,
    then higher priority (``PrioritySortingWithinCohort``, on by default), then the earlier
    queue-order time; each is checked against the usage the entries before it left. A pass of the
    simulator runs such cycles at one instant until every ClusterQueue's queue has been tried; a
    ClusterQueue whose head was taken shows its next head in the next cycle. With one
    ClusterQueue, a cycle is its head alone: the order is the single queue's, as before.
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from admission.controller import CohortQuota
from topology import describe_validation_error, read_yaml_file

__all__ = ["COHORT_NAME", "HELD", "CohortError", "CohortHeads", "CohortShape", "FlavorQuota", "Gift", "QueueHeads", "QueueShare", "cluster_queue_name",
           "load_cohort", "parse_cohort", "split_shapes"]

COHORT_NAME = "cohort"
"""The cohort every simulated ClusterQueue names (``spec.cohortName``)."""
Reclaim = Literal["Never", "LowerPriority", "Any"]
RECLAIM: tuple[str, ...] = get_args(Reclaim)
"""Kueue's ``spec.preemption.reclaimWithinCohort`` values."""
Borrow = Literal["Never", "LowerPriority"]
BORROW: tuple[str, ...] = get_args(Borrow)
"""Kueue's ``spec.preemption.borrowWithinCohort.policy`` values."""

_Entry = tuple[tuple[float, float], int]
_Head = tuple[tuple[float, float], int, int]

HELD: tuple[float, float] = (-math.inf, -math.inf)
"""The queue key of a job that holds its quota while it is decided again (a parked Workload woken
by freed room keeps ``QuotaReserved``): first in every order, and in a cohort's cycle never counted
as borrowing, since the quota it is checked against is its own."""


class CohortError(ValueError):
    """A cohort shape that cannot be used: the message names the field."""


def cluster_queue_name(index: int) -> str:
    return f"cq-{index}"


@dataclass(frozen=True, slots=True)
class QueueShare:
    """One ClusterQueue: its quota as shares of each flavor's quota (None: no limit)."""

    name: str
    nominal: float
    borrowing_limit: float | None = None
    lending_limit: float | None = None


@dataclass(frozen=True)
class CohortShape:
    """N ClusterQueues of one cohort sharing every flavor, and their cohort preemption policy."""

    queues: tuple[QueueShare, ...]
    reclaim_within_cohort: str = "Never"
    """``spec.preemption.reclaimWithinCohort`` of every ClusterQueue (Kueue's default ``Never``)."""
    borrow_within_cohort: str = "Never"
    """``spec.preemption.borrowWithinCohort.policy`` of every ClusterQueue (Kueue's default ``Never``)."""

    def __post_init__(self) -> None:
        if not self.queues:
            raise CohortError("clusterQueues: give at least one ClusterQueue")
        names = [q.name for q in self.queues]
        if len(set(names)) != len(names):
            raise CohortError(f"clusterQueues: names must differ, got {', '.join(names)}")
        for i, q in enumerate(self.queues):
            if not q.nominal > 0:
                raise CohortError(f"clusterQueues[{i}].nominalQuota: {q.nominal!r} must be a share above 0 of the flavor's quota")
            for field_name, value in (("borrowingLimit", q.borrowing_limit), ("lendingLimit", q.lending_limit)):
                if value is not None and not value >= 0:
                    raise CohortError(f"clusterQueues[{i}].{field_name}: {value!r} must be a share of at least 0, or left out for no limit")
            if q.lending_limit is not None and q.lending_limit > q.nominal:
                raise CohortError(f"clusterQueues[{i}].lendingLimit: {q.lending_limit!r} is above its nominalQuota {q.nominal!r}")
        total = sum(q.nominal for q in self.queues)
        if abs(total - 1.0) > 1e-6:
            raise CohortError(f"clusterQueues: the nominalQuota shares add up to {total:g}; they must add up to 1 (the flavor's quota)")
        if self.reclaim_within_cohort not in RECLAIM:
            raise CohortError(f"reclaimWithinCohort: {self.reclaim_within_cohort!r} is not one of {', '.join(RECLAIM)}")
        if self.borrow_within_cohort not in BORROW:
            raise CohortError(f"borrowWithinCohort: {self.borrow_within_cohort!r} is not one of {', '.join(BORROW)}")

    @classmethod
    def equal(cls, n: int, *, reclaim_within_cohort: str = "Never", borrow_within_cohort: str = "Never") -> CohortShape:
        """``n`` ClusterQueues of equal nominal shares, borrowing and lending unlimited."""
        if n < 1:
            raise CohortError(f"{n!r} ClusterQueues; give at least 1")
        return cls(tuple(QueueShare(cluster_queue_name(i), 1.0 / n) for i in range(n)), reclaim_within_cohort, borrow_within_cohort)

    def __len__(self) -> int:
        return len(self.queues)

    def split(self, quota: int) -> list[int]:
        """Each ClusterQueue's nominal GPUs of a flavor whose quota is ``quota`` (largest remainder)."""
        exact = [q.nominal * quota for q in self.queues]
        out = [int(x) for x in exact]
        for i in sorted(range(len(exact)), key=lambda i: (-(exact[i] - out[i]), i))[: quota - sum(out)]:
            out[i] += 1
        return out

    def assign(self, ids: Sequence[str], seed: int) -> npt.NDArray[np.int64]:
        """The ClusterQueue index of each job (module docstring: a seeded hash of its id)."""
        edges = np.cumsum([q.nominal for q in self.queues])
        edges[-1] = 1.0 + 1e-9
        u = np.fromiter((zlib.crc32(f"{seed}:{i}".encode()) / 2**32 for i in ids), dtype=np.float64, count=len(ids))
        return np.searchsorted(edges, u, side="right").astype(np.int64)

    def quota(self, flavor_quota: int) -> FlavorQuota:
        return FlavorQuota(self, flavor_quota)

    def describe(self) -> str:
        """One line for a report: the ClusterQueues and their shares."""
        def share(x: float | None) -> str:
            return "unlimited" if x is None else f"{x:g}"
        parts = [f"{q.name} nominal {q.nominal:g} borrowing {share(q.borrowing_limit)} lending {share(q.lending_limit)}" for q in self.queues]
        return f"cohort of {len(self.queues)} ClusterQueues ({'; '.join(parts)}), reclaimWithinCohort {self.reclaim_within_cohort}"


class _QueueDoc(BaseModel):
    """One item of a cohort file's ``clusterQueues``, as users write it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    nominal: float = Field(strict=True, alias="nominalQuota")
    borrowing_limit: float | None = Field(default=None, strict=True, alias="borrowingLimit")
    lending_limit: float | None = Field(default=None, strict=True, alias="lendingLimit")


class _CohortDoc(BaseModel):
    """A cohort file (``--cohort FILE``): the edge where users' YAML is checked, field by field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster_queues: list[_QueueDoc] = Field(min_length=1, alias="clusterQueues")
    reclaim_within_cohort: Reclaim = Field(default="Never", alias="reclaimWithinCohort")
    borrow_within_cohort: Borrow = Field(default="Never", alias="borrowWithinCohort")


def parse_cohort(doc: object, source: str = "cohort file") -> CohortShape:
    """A cohort shape from a mapping: ``clusterQueues`` (a list of ``name``, ``nominalQuota``,
    optional ``borrowingLimit`` and ``lendingLimit``, all shares of the flavor's quota), optional
    ``reclaimWithinCohort`` and ``borrowWithinCohort``. Types and names are checked by the
    pydantic model (every problem, one line each, naming ``source`` and the key path); what the
    fields mean together (shares that sum to 1, a lendingLimit within its nominalQuota) by
    ``CohortShape``."""
    if not isinstance(doc, Mapping):
        raise CohortError(f"{source}: expected a mapping with clusterQueues")
    try:
        model = _CohortDoc.model_validate(doc)
    except ValidationError as exc:
        raise CohortError(describe_validation_error(source, exc, doc)) from None
    queues = tuple(QueueShare(q.name or cluster_queue_name(i), q.nominal, q.borrowing_limit, q.lending_limit)
                   for i, q in enumerate(model.cluster_queues))
    return CohortShape(queues, model.reclaim_within_cohort, model.borrow_within_cohort)


def load_cohort(spec: str) -> CohortShape:
    """``--cohort``: a whole number N (N equal ClusterQueues) or a YAML file (``parse_cohort``)."""
    if spec.strip().isdigit():
        return CohortShape.equal(int(spec))
    path = Path(spec)
    if not path.is_file():
        raise CohortError(f"{spec!r} is neither a number of ClusterQueues nor a readable YAML file")
    return parse_cohort(read_yaml_file(path, CohortError), str(path))


class FlavorQuota:
    """One flavor's quota over the ClusterQueues of a cohort, with each one's usage."""

    def __init__(self, shape: CohortShape, flavor_quota: int) -> None:
        self.names = [q.name for q in shape.queues]
        self.nominal = shape.split(flavor_quota)
        self.used = [0] * len(self.names)
        self.quota = CohortQuota(COHORT_NAME)
        for q, nominal in zip(shape.queues, self.nominal, strict=True):
            self.quota.add(q.name, nominal, _gpus(q.borrowing_limit, flavor_quota), _gpus(q.lending_limit, flavor_quota), 0)
        self.ceiling = [self.available(c) for c in range(len(self.names))]
        """What each ClusterQueue could use with nothing reserved: a larger Workload is never admitted."""

    def available(self, c: int) -> int:
        """GPUs a Workload of ClusterQueue ``c`` may reserve now (Kueue's ``available``)."""
        return self.quota.available(self.names[c])

    def hold(self, c: int, gpus: int) -> None:
        """ClusterQueue ``c`` takes ``gpus`` of quota (negative: gives them back)."""
        self.used[c] += gpus
        self.quota.release(self.names[c], -gpus)

    def borrows(self, c: int, gpus: int) -> bool:
        """Admitting ``gpus`` more in ``c`` would pass its nominal quota (``Assignment.Borrows``)."""
        return self.used[c] + gpus > self.nominal[c]

    def borrowing(self, c: int) -> bool:
        """``c`` uses more than its nominal quota now (``ClusterQueueSnapshot.Borrowing``)."""
        return self.used[c] > self.nominal[c]


def _gpus(share: float | None, flavor_quota: int) -> int | None:
    return None if share is None else int(round(share * flavor_quota))


class CohortHeads:
    """The heads of a scheduling pass in Kueue's cycle order over the cohort (module docstring).
    ``pop`` gives the next head to try; ``push`` the next entry of a shape whose head left the
    queue. A head tried and left in its queue is not offered again in the pass (its shape is
    skipped whole, as for one ClusterQueue)."""

    def __init__(self, heads: Sequence[_Head], cq_of_shape: Sequence[int], gpus_of_shape: Sequence[int], quota: FlavorQuota) -> None:
        self.cq_of = cq_of_shape
        self.gpus_of = gpus_of_shape
        self.quota = quota
        self.queues: dict[int, list[_Head]] = {}
        for h in heads:
            self.queues.setdefault(cq_of_shape[h[2]], []).append(h)
        for q in self.queues.values():
            heapq.heapify(q)
        self.cycle: list[_Head] = []

    def __bool__(self) -> bool:
        return bool(self.cycle) or any(self.queues.values())

    def pop(self) -> _Head:
        if not self.cycle:
            entries = []
            for c, q in self.queues.items():
                if q:
                    h = heapq.heappop(q)
                    entries.append((h[0] != HELD and self.quota.borrows(c, self.gpus_of[h[2]]), h))
            entries.sort()
            self.cycle = [h for _, h in reversed(entries)]
        return self.cycle.pop()

    def push(self, head: _Head) -> None:
        heapq.heappush(self.queues.setdefault(self.cq_of[head[2]], []), head)


class QueueHeads:
    """The heads of a pass over one ClusterQueue: its shapes' heads in Kueue's queue order (a heap)."""

    def __init__(self, heads: list[_Head]) -> None:
        heapq.heapify(heads)
        self.heap = heads

    def __bool__(self) -> bool:
        return bool(self.heap)

    def pop(self) -> _Head:
        return heapq.heappop(self.heap)

    def push(self, head: _Head) -> None:
        heapq.heappush(self.heap, head)


class Gift:
    """What parked Workloads giving their quota back would add to the quota a waiter's
    ClusterQueue could use, as the controller's ``QuotaYield.choose`` counts it: each giver's
    usage is released in turn, and one that raises nothing (its quota kept local by a
    lendingLimit, or past the waiter's borrowingLimit) adds nothing. ``undo`` puts it all back."""

    def __init__(self, quota: FlavorQuota, c: int) -> None:
        self.quota = quota
        self.c = c
        self.taken: list[tuple[int, int]] = []

    def add(self, giver: int, gpus: int) -> int:
        """The rise in ``available`` if ClusterQueue ``giver`` gave ``gpus`` back (0: none, not kept)."""
        before = self.quota.available(self.c)
        self.quota.hold(giver, -gpus)
        rise = self.quota.available(self.c) - before
        if rise <= 0:
            self.quota.hold(giver, gpus)
            return 0
        self.taken.append((giver, gpus))
        return rise

    def undo(self) -> None:
        for giver, gpus in self.taken:
            self.quota.hold(giver, gpus)
        self.taken.clear()


def split_shapes(shape_of: npt.NDArray[np.int64], shapes: Sequence[tuple[int, Any]], jobs: Sequence[Any], cohort: CohortShape | None,
                 seed: int) -> tuple[npt.NDArray[np.int64], list[tuple[int, Any]], list[int]]:
    """The simulator's shapes with each job's ClusterQueue folded in: shape ``s`` of ClusterQueue
    ``c`` becomes ``s × N + c``, so a flavor's queue per shape is one ClusterQueue's. Returns the
    job → shape array, the shapes, and shape → ClusterQueue. No cohort: unchanged, all in 0."""
    if cohort is None:
        return shape_of, list(shapes), [0] * len(shapes)
    n = len(cohort)
    cq = cohort.assign([str(j.id) for j in jobs], seed)
    named = {q.name: i for i, q in enumerate(cohort.queues)}
    for i, j in enumerate(jobs):
        if getattr(j, "queue", None) in named:  # a job that names a ClusterQueue of the cohort queues there
            cq[i] = named[j.queue]
    out = np.where(shape_of >= 0, shape_of * n + cq, shape_of).astype(np.int64)
    return out, [shapes[s // n] for s in range(len(shapes) * n)], [s % n for s in range(len(shapes) * n)]

"""What the quota yield reads of each Workload, kept between passes (``QuotaYield.choose``).

A pass weighs every Workload waiting for quota, in Kueue's order, against the parked Workloads
that may give theirs back. Read afresh on every pass, each waiter's order, GPUs and ClusterQueue
(and each parked Workload's, once per waiter) cost seconds a pass at thousands waiting
(``atoll bench decide --park-waiting``, ``docs/queue.md``). Here each version of a
Workload is read once (by identity: the cache holds a new object for each new version), the
waiters are kept in Kueue's order and re-sorted only when one came, went or moved, and a pass
skips and stops early: a waiter that finds no quota leaves everything as it was, so another of
the same kind (``Kind``) finds none either while nobody has been served in between, nor, when the
first tried every giver, one of its ClusterQueue that asks for as many GPUs or more; the pass
ends past the last place a kind not known to find nothing stands (``WaiterIndex.stop_after``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from admission.controller._quota import reserved_by_workloads
from admission.controller._records import parse_time
from admission.controller._workloads import WorkloadError, condition_true, parse_workload
from admission.kube import Obj

__all__ = ["GiverRead", "Kind", "ReservedIndex", "WaiterIndex", "WaiterRead", "gpus_asked", "kueue_order", "read_giver", "refused_by_kueue"]

Kind = tuple[str, int, int]
"""A waiter as a pass weighs it: its ClusterQueue, the GPUs it asks for, the GPUs given it so far.
Two of one kind find the same in one state: a pass that found nothing for one skips the other."""


def kueue_order(obj: Obj, key: str) -> tuple[int, float, str]:
    """Where Kueue's BestEffortFIFO puts a waiter: higher priority first, then its queue-order
    time (``Ordering.GetQueueOrderTimestamp``, pkg/workload/workload.go, v0.19.2: the eviction's
    time for one evicted by an admission check, else its creation), then its name."""
    priority = (obj.get("spec") or {}).get("priority")
    evicted = next((c for c in (obj.get("status") or {}).get("conditions") or []
                    if isinstance(c, dict) and c.get("type") == "Evicted" and c.get("status") == "True"
                    and c.get("reason") == "AdmissionCheck"), None)
    stamp = str((evicted or {}).get("lastTransitionTime") or (obj.get("metadata") or {}).get("creationTimestamp") or "")
    return (-priority if isinstance(priority, int) and not isinstance(priority, bool) else 0, parse_time(stamp) or 0.0, key)


def gpus_asked(obj: Obj, gpu: str | tuple[str, ...]) -> int | None:
    """The GPUs a Workload asks for in all its PodSets (None: it does not parse)."""
    try:
        return sum(s.count * s.per_pod.gpu for s in parse_workload(obj, gpu_resource=gpu).podsets)
    except WorkloadError:
        return None


@dataclass(frozen=True, slots=True)
class WaiterRead:
    """One version of a waiting Workload as a pass weighs it."""

    obj: Obj
    gpu: str | tuple[str, ...]
    order: tuple[int, float, str]
    waits: bool
    """It waits for quota (``waits_for_quota``)."""
    refused: bool
    want: int | None
    cluster_queue: str | None


@dataclass(frozen=True, slots=True)
class GiverRead:
    """One version of a parked Workload as a pass weighs what it could give back."""

    obj: Obj
    gpu: str | tuple[str, ...]
    holds: bool
    """It holds quota and is not being evicted."""
    cluster_queue: str
    flavor: str
    gpus: int | None


def read_giver(obj: Obj, gpu: str | tuple[str, ...], flavor: Callable[[Obj, str | tuple[str, ...]], str]) -> GiverRead:
    holds = condition_true(obj, "QuotaReserved") and not condition_true(obj, "Evicted")
    cq = str(((obj.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
    if not holds or not cq:
        return GiverRead(obj, gpu, False, cq, "", None)
    return GiverRead(obj, gpu, True, cq, flavor(obj, gpu), gpus_asked(obj, gpu))


class WaiterIndex:
    """The waiters' reads, in Kueue's order, and where in that order each kind of waiter (its
    ClusterQueue, GPUs asked, GPUs given so far) comes last, so a pass stops once every kind
    still to come is known to find nothing (``stop_after``)."""

    def __init__(self, cluster_queue: Callable[[Obj], str | None], waits: Callable[[Obj], bool]) -> None:
        self.cluster_queue = cluster_queue
        self.waits = waits
        self.stop_early = True
        """Skip and stop by what found nothing (off: every waiter is weighed, as each pass once was; the tests compare the two)."""
        self.reads: dict[str, WaiterRead] = {}
        self._ranked: list[str] | None = None
        self._place: dict[str, int] = {}
        self._last: dict[Kind, int] = {}
        self.givers: dict[str, GiverRead] = {}

    def read(self, key: str, obj: Obj, gpu: str | tuple[str, ...]) -> WaiterRead:
        """``key``'s read of this version (read now if the version or the GPU resource is new)."""
        r = self.reads.get(key)
        if r is not None and r.obj is obj and r.gpu == gpu and r.cluster_queue is not None:
            return r
        new = WaiterRead(obj, gpu, kueue_order(obj, key), self.waits(obj), refused_by_kueue(obj), gpus_asked(obj, gpu), self.cluster_queue(obj))
        if r is None or (r.order, r.want, r.cluster_queue) != (new.order, new.want, new.cluster_queue):
            self._ranked = None  # it came or moved: ranked again at the next pass
        self.reads[key] = new
        return new

    def giver(self, key: str, obj: Obj, gpu: str | tuple[str, ...], flavor: Callable[[Obj, str | tuple[str, ...]], str]) -> GiverRead:
        r = self.givers.get(key)
        if r is None or r.obj is not obj or r.gpu != gpu:
            r = self.givers[key] = read_giver(obj, gpu, flavor)
        return r

    def drop(self, key: str) -> None:
        if self.reads.pop(key, None) is not None:
            self._ranked = None
        self.givers.pop(key, None)

    def keep_givers(self, keys: set[str]) -> None:
        """Forget the reads of Workloads no longer parked."""
        for key in [k for k in self.givers if k not in keys]:
            del self.givers[key]

    def served(self, key: str, kind: Kind) -> None:
        """Waiter ``key`` was served in part: it is of ``kind`` now, where it stands."""
        i = self._place.get(key)
        if i is not None and self._ranked is not None:
            self._last[kind] = max(self._last.get(kind, -1), i)

    def stale(self, waiters: Mapping[str, None]) -> bool:
        """Whether the order kept is not that of ``waiters`` (``ranked`` sorts them again)."""
        return self._ranked is None or len(self._ranked) != len(waiters)

    def ranked(self, waiters: Mapping[str, None], served: Mapping[str, int]) -> list[str]:
        """``waiters`` in Kueue's order (each must have a read)."""
        if self.stale(waiters):
            self._ranked = sorted(waiters, key=lambda k: self.reads[k].order)
            self._place = {k: i for i, k in enumerate(self._ranked)}
            self._last = {}
            for i, k in enumerate(self._ranked):
                r = self.reads[k]
                if r.want is not None and r.cluster_queue is not None and r.want > served.get(k, 0):
                    self._last[(r.cluster_queue, r.want, served.get(k, 0))] = i
        assert self._ranked is not None
        return self._ranked

    def stop_after(self, dead: set[Kind], floor: Mapping[str, int]) -> float:
        """The last place a waiter that could still be served may stand: past it, every kind of
        waiter found nothing since the last serve (``dead``), or asks for as many GPUs as one of
        its ClusterQueue that tried every giver and found nothing (``floor``, those given none yet)."""
        if not self.stop_early:
            return math.inf
        return max((i for kind, i in self._last.items()
                    if kind not in dead and not (kind[2] == 0 and kind[0] in floor and kind[1] >= floor[kind[0]])), default=-1)


def refused_by_kueue(obj: Obj) -> bool:
    """Kueue's scheduler has tried the Workload and not reserved quota for it (``QuotaReserved``
    written False): a Workload just created, which Kueue may admit in a moment, is not yet that."""
    return any(c.get("type") == "QuotaReserved" and c.get("status") == "False"
               for c in (obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict))


class ReservedIndex:
    """GPUs of quota reserved per (ClusterQueue, flavor) (``reserved_by_workloads``), kept between
    passes: each Workload's share is read again only when the cache says it changed (``touch``)."""

    def __init__(self) -> None:
        self._names: tuple[str, ...] | None = None
        self._share: dict[str, dict[tuple[str, str], int]] = {}
        self._totals: dict[tuple[str, str], int] = {}
        self._touched: set[str] = set()

    def touch(self, key: str) -> None:
        self._touched.add(key)

    @property
    def backlog(self) -> int:
        """Workloads touched since the last ``totals``."""
        return len(self._touched)

    def rest(self) -> None:
        """Forget what was touched; the next ``totals`` reads every Workload afresh (``OwedIndex.rest`` says when)."""
        self._names, self._share, self._totals, self._touched = None, {}, {}, set()

    def totals(self, objects: Mapping[str, Obj], names: tuple[str, ...]) -> dict[tuple[str, str], int]:
        if names != self._names:
            self._names, self._share, self._totals = names, {}, {}
            touched: Iterable[str] = list(objects)
        else:
            touched = self._touched
        self._touched = set()
        for key in touched:
            for where, gpus in self._share.pop(key, {}).items():
                self._totals[where] -= gpus
            obj = objects.get(key)
            share = reserved_by_workloads([obj], names) if obj is not None else {}
            if share:
                self._share[key] = share
                for where, gpus in share.items():
                    self._totals[where] = self._totals.get(where, 0) + gpus
        return dict(self._totals)

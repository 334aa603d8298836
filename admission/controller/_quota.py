"""A ClusterQueue's GPU quota as Kueue counts it, with its cohort's: what a Workload of it could
reserve now (Kueue v0.19.2's ``available``), and what giving quota back would change."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from admission.controller._workloads import condition_true
from admission.kube import Obj
from topology import parse_amount

__all__ = ["CohortQuota", "flavor_quota", "reserved_by_workloads"]


@dataclass
class _Queue:
    nominal: int
    borrowing: int | None
    lending: int | None
    usage: int

    @property
    def local(self) -> int:
        """Quota its cohort never sees (Kueue's ``localQuota``: nominal past the lendingLimit)."""
        return max(self.nominal - self.lending, 0) if self.lending is not None else 0


class CohortQuota:
    """One flavor's GPU quota of a ClusterQueue and of the others of its (flat) cohort, as Kueue
    v0.19.2 counts it (pkg/cache/scheduler/resource_node.go): a ClusterQueue may use its
    nominal quota past its lendingLimit (``LocalAvailable``) plus what the cohort has unused
    (the members' nominal quota up to their lendingLimit, less their usage past the part kept
    local: ``accumulateFromChild``), that at most to its own stored quota, less its usage in the
    cohort, plus its borrowingLimit (``available``). A Cohort object's own quota, and a cohort's
    parent, are not read: a cohort is the ClusterQueues that name it."""

    def __init__(self, cohort: str | None) -> None:
        self.cohort = cohort
        self.queues: dict[str, _Queue] = {}

    def add(self, name: str, nominal: int, borrowing: int | None, lending: int | None, usage: int) -> None:
        self.queues[name] = _Queue(nominal, borrowing, lending, usage)

    def release(self, name: str, gpus: int) -> None:
        """``name`` gives ``gpus`` of its quota back (negative: takes them again)."""
        q = self.queues.get(name)
        if q is not None:
            q.usage -= gpus

    def available(self, name: str) -> int:
        """GPU quota Kueue would let a Workload of ``name`` reserve now on this flavor (Kueue's ``available``)."""
        q = self.queues[name]
        if self.cohort is None:
            return q.nominal - q.usage
        parent = sum(m.nominal - m.local for m in self.queues.values()) - sum(max(m.usage - m.local, 0) for m in self.queues.values())
        if q.borrowing is not None:
            parent = min(q.nominal - q.local - max(q.usage - q.local, 0) + q.borrowing, parent)
        return max(q.local - q.usage, 0) + parent


def flavor_quota(obj: Obj, flavor: str, names: tuple[str, ...]) -> tuple[int, int | None, int | None, int] | None:
    """A ClusterQueue's GPU nominalQuota, borrowingLimit, lendingLimit (None: unset) and reserved
    usage (as its status reports) on ``flavor``; None when it has no quota on that flavor."""
    found = False
    nominal, borrowing, lending = 0, None, None
    for group in (obj.get("spec") or {}).get("resourceGroups") or []:
        for fl in group.get("flavors") or []:
            if fl.get("name") != flavor:
                continue
            for r in fl.get("resources") or []:
                if r.get("name") in names:
                    found = True
                    nominal += _quantity(r.get("nominalQuota"))
                    if r.get("borrowingLimit") is not None:
                        borrowing = (borrowing or 0) + _quantity(r.get("borrowingLimit"))
                    if r.get("lendingLimit") is not None:
                        lending = (lending or 0) + _quantity(r.get("lendingLimit"))
    if not found:
        return None
    reported = 0
    for fl in (obj.get("status") or {}).get("flavorsReservation") or []:
        if fl.get("name") == flavor:
            reported += sum(_quantity(r.get("total")) for r in fl.get("resources") or [] if r.get("name") in names)
    return nominal, borrowing, lending, reported


def reserved_by_workloads(objects: Iterable[Obj], names: tuple[str, ...]) -> dict[tuple[str, str], int]:
    """GPUs of quota reserved per (ClusterQueue, flavor), from the active Workloads holding it
    (``QuotaReserved``, their ``resourceUsage``): Kueue's cache counts them at once, where the
    ClusterQueue's status lags."""
    out: dict[tuple[str, str], int] = {}
    for obj in objects:
        if not condition_true(obj, "QuotaReserved") or (obj.get("spec") or {}).get("active", True) is False:
            continue  # Kueue drops an inactive Workload from its cache at once (WorkloadReconciler.Update)
        admission = (obj.get("status") or {}).get("admission") or {}
        cq = str(admission.get("clusterQueue") or "")
        for ps in admission.get("podSetAssignments") or []:
            flavors, usage = ps.get("flavors") or {}, ps.get("resourceUsage") or {}
            for resource in names:
                if resource in flavors:
                    key = (cq, str(flavors[resource]))
                    out[key] = out.get(key, 0) + _quantity(usage.get(resource))
    return out


def _quantity(value: object) -> int:
    """A GPU count as Kubernetes writes it ("16", 16, "1k"); 0 when absent or unreadable (nothing is given on it)."""
    try:
        return int(parse_amount(value, "nominalQuota")) if value is not None else 0
    except ValueError:
        return 0

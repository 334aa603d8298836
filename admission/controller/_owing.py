"""Which gangs are owed their turn (``queueing.holdBehindGangs``), read from the controller's cache.

The decision code holds a Workload behind an owed gang (``_queueing.behind_gang``) on what the
``Outlook`` says is owed; the simulator says it from its queues, the controller from here: each
Workload that waits for quota (``QuotaYield.waiters``) and, under ``start``, each parked one (it
holds quota and waits for room), that is a gang (more than one pod, at least
``holdBehindGangsMinGPUs`` GPUs) of a profile with ``holdBehindGangs``, and has waited ``reserveAfterSeconds`` since its creation. One waiting for
quota is keyed by the ClusterQueue its LocalQueue points at, its flavor not known yet (Kueue picks
it when it reserves quota); a parked one by its admission's ClusterQueue and flavor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from admission.controller._queueing import created_at, is_owed, priority_of
from admission.controller._workloads import WorkloadError, WorkloadView, condition_true
from admission.kube import Obj
from policies import Profile, ProfilesDocument

__all__ = ["owes"]


@dataclass(frozen=True, slots=True)
class _Read:
    """What was read of one version of a Workload under one profiles document (``OwedIndex`` keeps it)."""

    obj: Obj
    """The version read (by identity: the cache holds a new object for each new version)."""
    doc: ProfilesDocument
    profile: Profile | None = None
    """None: not a gang that a profile holding Workloads behind gangs could owe (read no further)."""
    pods: int = 0
    gpus: int = 0
    created: float | None = None
    priority: int = 0
    quota: bool = False
    cluster_queue: str | None = None
    """Its admission's ClusterQueue (when it holds quota)."""


def _read_gang(obj: Obj, doc: ProfilesDocument, read: Callable[[Obj], WorkloadView]) -> _Read:
    pods = sum(int(ps.get("count", 1)) for ps in (obj.get("spec") or {}).get("podSets") or [] if isinstance(ps, dict))
    if pods <= 1:  # not a gang: read no further
        return _Read(obj, doc)
    try:
        view = read(obj)
        _, profile = doc.profile_for(annotation=view.profile, local_queue=view.local_queue, cluster_queue=view.cluster_queue)
    except (WorkloadError, KeyError):
        return _Read(obj, doc)
    mode = profile.queueing.hold_behind_gangs
    quota = condition_true(obj, "QuotaReserved")
    created = created_at(obj)
    if mode == "off" or (quota and mode != "start") or created is None:
        return _Read(obj, doc)
    return _Read(obj, doc, profile, sum(s.count for s in view.podsets), sum(s.count * s.per_pod.gpu for s in view.podsets), created,
                 priority_of(obj), quota, view.cluster_queue)


def owes(obj: Obj | None, doc: ProfilesDocument | None, read: Callable[[Obj], WorkloadView], now: float) -> bool:
    """Whether ``obj`` is a gang owed its turn (``is_owed`` under its profile): it keeps its quota
    when parked, as a reservation's holder does (given away, it would be owed again and hold back
    the Workload it gave it to)."""
    if obj is None or doc is None:
        return False
    try:
        view = read(obj)
        _, profile = doc.profile_for(annotation=view.profile, local_queue=view.local_queue, cluster_queue=view.cluster_queue)
    except (WorkloadError, KeyError):
        return False
    return is_owed(profile, sum(s.count for s in view.podsets), sum(s.count * s.per_pod.gpu for s in view.podsets), created_at(obj), now)

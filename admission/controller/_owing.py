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

from collections.abc import Callable, Iterable, Mapping

from admission.controller._queueing import created_at, is_owed, priority_of
from admission.controller._workloads import WorkloadError, WorkloadView, condition_true
from admission.kube import Obj
from admission.queue import OwedGang
from policies import ProfilesDocument

__all__ = ["owed_gangs", "owes"]


def owed_gangs(objects: Mapping[str, Obj], waiting: Iterable[str], parked: Iterable[str], doc: ProfilesDocument,
               read: Callable[[Obj], WorkloadView], cluster_queue_of: Callable[[Obj], str | None], flavor_of: Callable[[str], str],
               now: float) -> dict[tuple[str, str | None], list[OwedGang]]:
    """(ClusterQueue, flavor or None) → the gangs owed there now, from the Workloads ``waiting``
    for quota and ``parked`` (each looked at once; gone or unreadable ones are left out)."""
    out: dict[tuple[str, str | None], list[OwedGang]] = {}
    seen: set[str] = set()
    for key in [*waiting, *parked]:
        obj = objects.get(key)
        if obj is None or key in seen:
            continue
        seen.add(key)
        pods = sum(int(ps.get("count", 1)) for ps in (obj.get("spec") or {}).get("podSets") or [] if isinstance(ps, dict))
        if pods <= 1:  # not a gang: read no further (this runs before every decision)
            continue
        try:
            view = read(obj)
            _, profile = doc.profile_for(annotation=view.profile, local_queue=view.local_queue, cluster_queue=view.cluster_queue)
        except (WorkloadError, KeyError):
            continue
        mode = profile.queueing.hold_behind_gangs
        quota = condition_true(obj, "QuotaReserved")
        if mode == "off" or (quota and mode != "start"):
            continue
        created = created_at(obj)
        gpus = sum(s.count * s.per_pod.gpu for s in view.podsets)
        if created is None or not is_owed(profile, sum(s.count for s in view.podsets), gpus, created, now):
            continue
        queue = view.cluster_queue if quota else cluster_queue_of(obj)
        if not queue:
            continue
        flavor = (flavor_of(key) or None) if quota else None
        out.setdefault((queue, flavor), []).append(OwedGang(-priority_of(obj), created, key, queue, gpus, flavor))
    return out


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

"""The Workloads waiting for quota, as the controller's cache shows them: the part of the line a
span is priced by (``queueing.spanCountsQueue``, ``Outlook.quota_waiters``) that has no domain to
wait for yet.

Kueue assigns a flavor with the quota, so a Workload still waiting for it has none: it is counted
for a Workload deciding in the same ClusterQueue (the one whose quota it waits for), on the
flavor being decided, and for one deciding in another ClusterQueue of its cohort when Kueue could
let it in there (``shares``: the quota its ClusterQueue could use on the flavor, with nothing
reserved, covers it; ``QuotaYield.shares_quota``): it may borrow what the span would take. Read only when a span is priced; at most ``MAX_AHEAD`` from the front of
Kueue's order (higher ``spec.priority`` first, then the earlier creation, then the key).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping

from admission.controller._queue_names import queue_name_of
from admission.controller._queueing import created_at, max_execution_seconds, priority_of
from admission.controller._workloads import WorkloadError, WorkloadView
from admission.controller._yielding import waits_for_quota
from admission.kube import Obj
from admission.queue import MAX_AHEAD, Waiter

__all__ = ["quota_line"]


def quota_line(objects: Mapping[str, Obj], waiting: Iterable[str], read: Callable[[Obj], WorkloadView],
               cluster_queue_of: Callable[[Obj], str | None], flavor: str, cluster_queue: str | None,
               limit: int = MAX_AHEAD, shares: Callable[[str, str], bool] | None = None) -> list[Waiter]:
    """The Workloads among ``waiting`` that still wait for quota in ``cluster_queue``, or, with
    ``shares(key, their ClusterQueue)`` true, in another of its cohort (gone, unreadable or
    GPU-less ones left out), as waiters on ``flavor``, front of Kueue's order first."""
    if cluster_queue is None:
        return []
    found: list[tuple[tuple[int, float, str], Waiter]] = []
    for key in waiting:
        obj = objects.get(key)
        if obj is None or not waits_for_quota(obj):
            continue
        theirs = cluster_queue_of(obj)
        if theirs is None or (theirs != cluster_queue and (shares is None or not shares(key, theirs))):
            continue
        try:
            view = read(obj)
        except WorkloadError:
            continue
        gpus = sum(s.count * s.per_pod.gpu for s in view.podsets)
        if gpus <= 0:
            continue
        per_pod = max(s.per_pod.gpu for s in view.podsets)
        created = created_at(obj)
        since = created if created is not None else 0.0
        prio = priority_of(obj)
        found.append(((-prio, since, key), Waiter(flavor, gpus, per_pod, prio, since, queue_name_of(obj), max_execution_seconds(obj))))
    return [w for _, w in heapq.nsmallest(limit, found, key=lambda t: t[0])]

"""The owed gangs kept between looks, updated by the Workloads that changed (``queueing.holdBehindGangs``).

The controller looks before every decision. Walking every Workload waiting for quota and
rebuilding and sorting every owed list each time costs most of a decision at 10,000 waiting
(3,258 owed gangs; ``atoll bench decide --waiting``), and the lists made and dropped each time
set off the collector's full passes over the whole cache (the look's p99, ``docs/queue.md``).
``OwedIndex`` keeps the lists, each in Kueue's order, and between two looks reads only the
Workloads the cache says changed (``touch``), the gangs whose ``reserveAfterSeconds`` has passed
since (kept in a heap by when they come due) and, under ``start``, the parked Workloads (they
park and leave without a change of their own; they are as many as hold quota, not as many as
wait). A new profiles document reads everything again. A look returns only the lists that
changed (its test reads everything afresh at every look and gets the same).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Collection, Mapping

from admission.controller._owing import _Read, _read_gang
from admission.controller._queueing import is_owed
from admission.controller._workloads import WorkloadView
from admission.kube import Obj
from admission.queue import OwedGang
from policies import ProfilesDocument

__all__ = ["OwedIndex"]

Where = tuple[str, str | None]


def _order(g: OwedGang) -> tuple[int, float, str]:
    return g.neg_priority, g.created, g.key


class OwedIndex:
    def __init__(self) -> None:
        self._doc: ProfilesDocument | None = None
        self._read: dict[str, _Read] = {}
        self._owed: dict[str, tuple[Where, OwedGang]] = {}
        self._lists: dict[Where, list[tuple[tuple[int, float, str], OwedGang]]] = {}
        self._later: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}
        self._touched: set[str] = set()
        self._parked: set[str] = set()
        self._unplaced: set[str] = set()
        """Owed gangs whose ClusterQueue was not known (their LocalQueue unread): looked at again each look."""

    def touch(self, key: str) -> None:
        """Workload ``key`` changed in the cache (or went)."""
        self._touched.add(key)

    @property
    def backlog(self) -> int:
        """Workloads touched since the last look."""
        return len(self._touched)

    def rest(self) -> None:
        """Forget what was touched; the next look reads afresh every Workload it could owe (those
        owed, due, waiting or parked), as the first look does. The controller calls it when more
        Workloads were touched than live ones (a standby, or no profile holding behind gangs, never
        looks): such a look costs no more, and the keys of Workloads gone do not pile up."""
        self._touched = set()
        self._doc = None

    def look(self, objects: Mapping[str, Obj], waiting: Collection[str], parked: Collection[str], doc: ProfilesDocument,
             read: Callable[[Obj], WorkloadView], cluster_queue_of: Callable[[Obj], str | None], flavor_of: Callable[[str], str],
             now: float) -> dict[Where, list[OwedGang]]:
        """The owed lists that changed since the last look, each whole and in Kueue's order (empty:
        nothing owed there now), from the Workloads ``waiting`` for quota and ``parked``."""
        if doc is not self._doc:
            self._doc = doc
            touched = set(self._owed) | set(waiting) | set(self._due) | self._touched
            self._read.clear()
        else:
            touched = self._touched
        self._touched = set()
        while self._later and self._later[0][0] <= now:
            at, key = heapq.heappop(self._later)
            if self._due.get(key) == at:
                del self._due[key]
                touched.add(key)
        now_parked = set(parked)
        touched |= self._parked | now_parked | self._unplaced
        self._parked = now_parked
        self._unplaced = set()
        changed: set[Where] = set()
        for key in touched:
            self._update(key, objects, waiting, now_parked, doc, read, cluster_queue_of, flavor_of, now, changed)
        return {where: [g for _, g in self._lists.get(where, [])] for where in changed}

    def _update(self, key: str, objects: Mapping[str, Obj], waiting: Collection[str], parked: set[str], doc: ProfilesDocument,
                read: Callable[[Obj], WorkloadView], cluster_queue_of: Callable[[Obj], str | None], flavor_of: Callable[[str], str],
                now: float, changed: set[Where]) -> None:
        old = self._owed.get(key)
        obj = objects.get(key)
        gang: tuple[Where, OwedGang] | None = None
        if obj is not None and (key in waiting or key in parked):
            r = self._read.get(key)
            if r is None or r.obj is not obj or r.doc is not doc:
                r = self._read[key] = _read_gang(obj, doc, read)
            if r.profile is not None and r.created is not None:
                if is_owed(r.profile, r.pods, r.gpus, r.created, now):
                    queue = r.cluster_queue if r.quota else cluster_queue_of(obj)
                    if queue:
                        flavor = (flavor_of(key) or None) if r.quota else None
                        gang = ((queue, flavor), OwedGang(-r.priority, r.created, key, queue, r.gpus, flavor))
                    else:
                        self._unplaced.add(key)
                elif is_owed(r.profile, r.pods, r.gpus, r.created, float("inf")):  # owed once it has waited long enough
                    at = r.created + float(r.profile.queueing.reserve_after_seconds or 0)
                    if self._due.get(key) != at:
                        self._due[key] = at
                        heapq.heappush(self._later, (at, key))
        else:
            self._read.pop(key, None)
            self._due.pop(key, None)
        if gang == old:
            return
        if old is not None:
            where, g = old
            entries = self._lists[where]
            i = bisect.bisect_left(entries, (_order(g),), key=lambda e: e[:1])
            while entries[i][1].key != key:
                i += 1
            del entries[i]
            if not entries:
                del self._lists[where]
            changed.add(where)
            del self._owed[key]
        if gang is not None:
            where, g = gang
            bisect.insort(self._lists.setdefault(where, []), (_order(g), g), key=lambda e: e[:1])
            self._owed[key] = gang
            changed.add(where)

"""Lending parked quota to a Workload that can start now (``queueing.lendParked``).

A parked Workload that gave its quota back (a quota yield, ``WaitingRoom.set_aside``) is
deactivated until no Workload queued before the give still waits for quota. When those waiters
wait for more quota than can free, or for a domain themselves, the giver stays out while GPUs it
could use sit free: the quota it gave is lent, and nothing lends it back. With ``lendParked`` a
giver whose own placement would succeed now is due back at once, whoever waits ahead: Kueue queues
it at its creation time and it takes the next quota, from a parked Workload's too if one would
give it (``QuotaYield.choose``, the simulator's ``yield_quota``); it is decided afresh, never
parked again undecided. Nobody running is preempted for it.

The fit test is the placement's own answer, not a GPU count: the request the decision that
parked it searched (``Need.request``: its level, speed floor, slices, tolerations), on the
flavor's snapshot with what admitted Workloads still owe counted as used (``Decider.room_now``).
A domain GPU count is only the bound that spares most searches. Reservations held for other
gangs are not subtracted: the decision it meets may still make it wait for one.

Pure: the controller and the simulator ask ``fits_now`` with the same snapshot and need.

With ``decisions.quota_yield_back_when_fits`` (off by default; the simulator's
``SimSettings.yield_back_when_fits``) the same test decides when a giver an event reached may take
quota again (``settle_givers``, whatever ``lendParked`` says): only when it fits now. Otherwise it would take quota, be decided,
find no room, park and give the quota back again, a deactivation and an eviction in Kueue and a
decision each time, growing with waiting Workloads × time rather than with events.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from admission.queue._room import Need, WaitingRoom
from topology import Snapshot, find_placement

__all__ = ["fits_now", "settle_givers"]


def fits_now(snapshot: Snapshot, need: Need) -> bool:
    """Whether the request ``need`` was parked on would find a placement on ``snapshot`` now
    (False when the need carries none, as one held behind a gang or rebuilt after a restart)."""
    request = need.request
    if request is None or snapshot.flavor != need.flavor:
        return False
    per_pod = max(need.gpus_per_pod, 1)
    gpus = snapshot.free[:, 0] // per_pod
    if need.level is None or need.level not in snapshot.level_labels:
        most = int(gpus.sum())
    else:
        lv = snapshot.level_index(need.level)
        most = int(np.bincount(snapshot.node_dom[lv], weights=gpus).max()) if gpus.size else 0
    if most < need.pods:
        return False
    return find_placement(snapshot, request, explain=False).fits


def settle_givers(room: WaitingRoom, room_now: Callable[[str], Snapshot | None]) -> list[Hashable]:
    """``WaitingRoom.settle`` with the lend's fit test: a Workload set aside that an event reached
    leaves the room (its need dropped: it may take quota, and is decided afresh on it) only if the
    placement it was parked on fits its flavor now (``fits_now`` on ``room_now(flavor)``, what
    admitted Workloads still owe counted as used: ``Decider.room_now``), or the flavor cannot be
    read (a decision says why). The one rule the controller and the simulator both call."""
    snaps: dict[str, Snapshot | None] = {}

    def fits(need: Need) -> bool:
        if need.flavor not in snaps:
            snaps[need.flavor] = room_now(need.flavor)
        snap = snaps[need.flavor]
        return snap is None or fits_now(snap, need)

    return room.settle(fits)

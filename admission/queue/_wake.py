"""Room that frees, offered to the waiting room: pods that end, and reservations that stop blocking.

A pod that ends (or a victim evicted) frees its node (``wake_freed``). A reservation suspended
(its holder lost its quota) or ended (its gang placed, rejected or gone) leaves the GPUs it held
to others. Both are offered as a pod that ends offers its node (``WaitingRoom.freed``): only the parked Workloads those GPUs can hold are woken, oldest first,
counted on the room a decision would search. An ended reservation also leaves its slot of the
flavor's bound (``maxReservationsPerFlavor``): the oldest parked gang refused one for that bound
(``Need.reserves``) is woken to take it, whether or not the GPUs held can hold it (a gang placed
on its reservation leaves no GPU free, and the next gang would wait for its relax deadline). A
reservation that moves (to a domain expected free sooner, or a span's nodes chosen again) leaves
the GPUs of its old nodes it no longer holds, offered the same way; it keeps its slot. A
reservation whose expected free time moves later (its gang's blockers overran, or it was chosen
again on the same nodes) offers the nodes it still holds to the parked Workloads that may
backfill them now and could not before (``backfills_now``: their ``maximumExecutionTimeSeconds``
ends before the new time, not before the old one); a drift that lets nobody new in wakes nobody,
so a gang decided often, its estimate sliding later, does not re-decide the room each time. The
controller and the simulator call these same functions, at the same moments.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

import numpy as np

from admission.queue._reserve import Reservation, Reservations, backfills_now, nodes_changed, window_later
from admission.queue._room import Need, WaitingRoom
from topology import Snapshot

__all__ = ["wake_freed", "wake_released", "wake_suspended"]


def wake_freed(room: WaitingRoom | None, flavor: str, rows: Iterable[int], room_now: Callable[[str], Snapshot | None]) -> list[Hashable]:
    """The parked Workloads to decide again when pods stop holding ``rows`` (node indices of the
    flavor's snapshot): ``WaitingRoom.freed`` on ``room_now(flavor)``, the room a decision would
    search, so GPUs admitted Workloads still owe, though free on the nodes, wake nobody; a flavor
    ``room_now`` cannot give wakes all its parked Workloads. The controller asks it when a pod
    leaves a node, the simulator when a job ends or a victim goes."""
    if room is None or not len(room):
        return []
    snapshot = room_now(flavor)
    if snapshot is None:
        return room.wake_flavor(flavor)
    return room.freed(snapshot, np.fromiter(rows, dtype=np.int64))


def wake_suspended(room: WaitingRoom | None, reservations: Reservations, room_now: Callable[[str], Snapshot | None]) -> list[Hashable]:
    """The parked Workloads to decide again for the reservations suspended since the last call
    and suspended still (``Reservations.take_suspended``): the GPUs each would hold (``would_hold``)
    are free for others now, so they are offered as freed room (``WaitingRoom.freed``, on
    ``room_now(flavor)``: the room a decision would search, what admitted Workloads still owe
    counted), waking only the parked Workloads it can hold; a flavor ``room_now`` cannot give
    (None) wakes all its parked Workloads. The controller asks it before each decision, the
    simulator after each instant's passes: the same rule at the same moments."""
    taken = reservations.take_suspended()

    def held(flavor: str, snapshot: Snapshot) -> Iterable[str]:
        mine = {r.holder for r in taken if r.flavor == flavor}
        return (n for r, held in reservations.would_hold(flavor, snapshot) if r.holder in mine for n in held)
    return _offer_held(room, taken, room_now, held)


def wake_released(room: WaitingRoom | None, reservations: Reservations, room_now: Callable[[str], Snapshot | None],
                  now: float) -> list[Hashable]:
    """The parked Workloads to decide again for the reservations ended since the last call
    (``Reservations.take_ended``: the gang placed, rejected or gone): the GPUs each held, on the
    flavor as it is now (``held_on``, what the reservations still held keep left out), are
    offered as freed room, as a suspension's are (``wake_suspended``): only the parked Workloads
    it can hold are woken, oldest first; a flavor ``room_now`` cannot give wakes all its parked
    Workloads. Then, per reservation ended, the oldest parked gang waiting for one of the flavor
    (``WaitingRoom.wake_reservers``). A reservation moved since the last call
    (``Reservations.take_moved``) offers the GPUs it held before and holds no more, the same way,
    and wakes no reserver (it keeps its slot). One whose window moved later (``window_later``)
    offers the nodes it held before and holds still to the parked Workloads that, started at
    ``now``, may backfill them now and could not before (``backfills_now``, on the limit each
    was parked with), and to no other: a drift that lets nobody new in wakes nobody, and a
    flavor ``room_now`` cannot give wakes nobody here. The controller asks it before each
    decision, the simulator after each instant's passes: the same rule at the same moments."""
    taken = reservations.take_ended()
    changed = reservations.take_moved()
    moved = [(b, n) for b, n in changed if nodes_changed(b, n)]

    def held(flavor: str, snapshot: Snapshot) -> Iterable[str]:
        kept = reservations.holding(flavor, snapshot)
        others = _sum_held(kept)
        out = [n for r in taken if r.flavor == flavor for n in r.held_on(snapshot, others)]
        for before, now in moved:
            if before.flavor != flavor:
                continue
            mine = next((h for r, h in kept if r.holder == now.holder), {})
            rest = _sum_held([(r, h) for r, h in kept if r.holder != now.holder])
            out.extend(n for n, g in before.held_on(snapshot, rest).items() if g > mine.get(n, 0))
        return out
    out = _offer_held(room, taken + [before for before, _ in moved], room_now, held)
    out.extend(_offer_window(room, reservations, [(b, n) for b, n in changed if window_later(b, n)], room_now, now))
    if room is not None:
        for flavor in sorted({r.flavor for r in taken}):
            out.extend(room.wake_reservers(flavor, sum(1 for r in taken if r.flavor == flavor)))
    return out


def _offer_window(room: WaitingRoom | None, reservations: Reservations, later: list[tuple[Reservation, Reservation]],
                  room_now: Callable[[str], Snapshot | None], now: float) -> list[Hashable]:
    """Per reservation whose window moved later (``before`` → ``after``, oldest first), the nodes
    it held before and holds still, on the flavor as it is now (``holding``), offered as freed
    room (``WaitingRoom.freed``) only to the parked Workloads that may backfill them at ``now``
    and could not before (``backfills_now``)."""
    if room is None or not later or not len(room):
        return []
    out: list[Hashable] = []
    for before, after in later:
        if not room.limited(after.flavor):  # nobody parked there may backfill by time
            continue
        snapshot = room_now(after.flavor)
        if snapshot is None:
            continue
        kept = reservations.holding(after.flavor, snapshot)
        mine = next((h for r, h in kept if r.holder == after.holder), None)
        if mine is None:
            continue
        was = before.held_on(snapshot, _sum_held([(r, h) for r, h in kept if r.holder != after.holder]))
        rows = sorted(snapshot.node_index[n] for n, g in mine.items() if g > 0 and was.get(n, 0) > 0 and n in snapshot.node_index)

        def backfills(need: Need, before: Reservation = before, after: Reservation = after) -> bool:
            return backfills_now(before, after, now, need.limit)
        out.extend(room.freed(snapshot, np.asarray(rows, dtype=np.int64), only=backfills))
    return out


def _sum_held(kept: Iterable[tuple[Reservation, dict[str, int]]]) -> dict[str, int]:
    """Node → GPUs the reservations of ``kept`` (``Reservations.holding``) hold together."""
    out: dict[str, int] = {}
    for _, held in kept:
        for n, g in held.items():
            out[n] = out.get(n, 0) + g
    return out


def _offer_held(room: WaitingRoom | None, taken: list[Reservation], room_now: Callable[[str], Snapshot | None],
                held: Callable[[str, Snapshot], Iterable[str]]) -> list[Hashable]:
    """``WaitingRoom.freed`` on the nodes ``held(flavor, snapshot)`` names, per flavor of ``taken``."""
    if room is None or not taken or not len(room):
        return []
    out: list[Hashable] = []
    for flavor in sorted({r.flavor for r in taken}):
        snapshot = room_now(flavor)
        if snapshot is None:
            out.extend(room.wake_flavor(flavor))
            continue
        rows = sorted({snapshot.node_index[n] for n in held(flavor, snapshot) if n in snapshot.node_index})
        out.extend(room.freed(snapshot, np.asarray(rows, dtype=np.int64)))
    return out

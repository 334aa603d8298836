"""A pod that ends offers its node to the waiting room on the room a decision would search, so
GPUs admitted Workloads still owe wake nobody. A reservation that ends (its gang placed, rejected or gone) is offered to the waiting room as
freed room, as a suspended one is: only the parked Workloads the GPUs it held can hold are woken,
once. A reservation that moves offers the nodes it left, and keeps its slot; one read back
before anyone looked offers nothing. One whose expected free time moves later offers the nodes
it still holds only to the parked Workloads whose limit lets them backfill now and did not before."""

from __future__ import annotations

from dataclasses import replace

from admission.queue import Need, Reservation, Reservations, WaitingRoom, wake_freed, wake_released
from tests.admission.queue.test_reserve import CLIQUE, SU, busy, cluster
from topology import ResourceVector, Snapshot

GANG = Reservation("ns/gang", "f", CLIQUE, ("u0", "c2"), (("c2n0", 4), ("c2n1", 4)), 10.0, 900.0)
NOW = 100.0


def parked() -> WaitingRoom:
    """Oldest first: a 2 × 4-GPU Workload, a 1 × 4-GPU one (both on island level), one of another flavor."""
    room = WaitingRoom()
    room.park("ns/pair", Need("f", CLIQUE, 2, 4))
    room.park("ns/one", Need("f", CLIQUE, 1, 4))
    room.park("ns/other-flavor", Need("g", CLIQUE, 1, 4))
    return room


def test_an_ended_reservation_wakes_only_the_parked_workloads_what_it_held_can_hold() -> None:
    """The gang reserved c2n0 and c2n1 (one free, one busy), then was placed elsewhere: the free
    node holds the 4-GPU Workload parked on it, not the 8-GPU one parked before it, so only the
    first is woken (every parked Workload of the flavor was, in the simulator, and none in the
    controller). Taken once; with no room to count on, every parked Workload of the flavor."""
    snap = cluster()
    busy(snap, {"c0n0": 900.0, "c0n1": 900.0, "c0n2": 900.0, "c1n0": 900.0, "c1n1": 900.0, "c1n2": 900.0, "c2n0": 900.0, "c2n2": 900.0,
                "c2n3": 900.0})
    book = Reservations()
    assert book.add(GANG, limit=1)
    room = parked()
    seen: list[str] = []

    def room_now(flavor: str) -> Snapshot:
        seen.append(flavor)
        return snap

    assert wake_released(room, book, room_now, NOW) == [] and seen == []  # nothing ended yet
    assert book.release("ns/gang") == GANG
    assert wake_released(room, book, room_now, NOW) == ["ns/one"] and seen == ["f"]
    assert "ns/pair" in room and "ns/other-flavor" in room
    assert wake_released(room, book, room_now, NOW) == []  # taken once
    book.add(GANG, limit=1)
    book.release("ns/gang")
    assert wake_released(room, book, lambda flavor: None, NOW) == ["ns/pair"]  # no room to count on: every parked Workload of the flavor
    book.add(GANG, limit=1)
    book.release("ns/gang")
    assert wake_released(None, book, room_now, NOW) == [] and book.take_ended() == []  # no room: taken all the same


def test_a_moved_reservation_offers_the_nodes_it_left_and_keeps_its_slot() -> None:
    """A reservation that moves to another domain (``add`` replacing it) still holds a slot, so
    no gang refused one is woken; but the nodes it left block nobody now: c2n0 is free, so the
    4-GPU Workload parked there is woken (the 8-GPU one does not fit one free node). Before, a
    move woke nobody, and those GPUs waited for some other end on the flavor. The same when the
    controller saw the release and then read the moved reservation back before its next decision."""
    snap = cluster()
    busy(snap, {"c0n0": 900.0, "c0n1": 900.0, "c0n2": 900.0, "c1n0": 900.0, "c1n1": 900.0, "c1n2": 900.0, "c2n1": 900.0, "c2n2": 900.0,
                "c2n3": 900.0})
    moved = Reservation("ns/gang", "f", CLIQUE, ("u0", "c1"), (("c1n0", 4), ("c1n1", 4)), 10.0, 600.0)
    for read_back in (False, True):
        book = Reservations()
        assert book.add(GANG, limit=1)
        assert wake_released(parked(), book, lambda flavor: snap, NOW) == []
        if read_back:
            book.release("ns/gang")
        assert book.add(moved, limit=1) and book.held_by("ns/gang") == moved
        room = parked()
        room.park("ns/reserver", Need("f", CLIQUE, 2, 4, reserves=True))
        assert book.take_ended() == []  # nothing ended: the holder holds one still
        assert wake_released(room, book, lambda flavor: snap, NOW) == ["ns/one"], read_back
        assert {"ns/pair", "ns/reserver", "ns/other-flavor"} <= set(room.parked())
        assert wake_released(room, book, lambda flavor: snap, NOW) == []  # taken once


def test_a_reservation_read_back_or_on_the_same_nodes_offers_only_the_nodes_it_left() -> None:
    """Read back from the Workload after a release, or replaced by one on the same nodes (a later
    expected free time), a reservation holds what it held: nobody is woken. Replaced by one that
    keeps c2n1 and takes c2n2 (a span's nodes chosen again), only c2n0, the node it left, is
    offered, once; a holder that holds no quota blocked nobody before its move, so it offers nothing."""
    snap = cluster()
    busy(snap, {"c0n0": 900.0, "c0n1": 900.0, "c0n2": 900.0, "c0n3": 900.0, "c1n0": 900.0, "c1n1": 900.0, "c1n2": 900.0, "c1n3": 900.0,
                "c2n1": 900.0, "c2n2": 900.0, "c2n3": 900.0})
    book = Reservations()
    assert book.add(GANG, limit=1)
    room = parked()
    book.release("ns/gang")
    book.add(GANG, limit=1)  # read back
    later = Reservation("ns/gang", "f", CLIQUE, ("u0", "c2"), GANG.nodes, 10.0, 950.0)
    assert book.add(later, limit=1)
    assert wake_released(room, book, lambda flavor: snap, NOW) == [] and len(room) == 3
    again = Reservation("ns/gang", "f", CLIQUE, ("u0", "c2"), (("c2n1", 4), ("c2n2", 4)), 10.0, 950.0)
    assert book.add(again, limit=1)
    assert book.take_moved() == [(later, again)]
    assert book.add(later, limit=1) and book.take_moved() == [(again, later)]
    assert book.add(again, limit=1)
    assert wake_released(room, book, lambda flavor: snap, NOW) == ["ns/one"] and "ns/pair" in room
    assert wake_released(room, book, lambda flavor: snap, NOW) == []
    book.quota("ns/gang", held=False)
    assert book.add(GANG, limit=1)
    assert book.take_moved() == []


def test_an_ended_capturing_reservation_offers_the_free_gpus_it_captured_not_what_another_still_holds() -> None:
    """A span-level reservation that captures (``capture``) held, besides its two named busy nodes,
    free GPUs anywhere in its domain up to the gang's: c1n3, while the free c2n3 is an older
    reservation's, still in force. Ended, its named nodes and c1n3 are offered: one parked 4-GPU
    Workload is woken, the older one. c2n3 is not offered, so the next is not woken (offering
    every free GPU of the domain would wake both; offering the named nodes alone, neither)."""
    snap = cluster()
    busy(snap, {"c0n0": 900.0, "c0n1": 900.0, "c0n2": 900.0, "c0n3": 900.0, "c1n0": 900.0, "c1n1": 900.0, "c1n2": 900.0, "c2n0": 900.0,
                "c2n1": 900.0, "c2n2": 900.0})
    book = Reservations()
    span = Reservation("ns/span", "f", SU, ("u0",), (("c0n0", 4), ("c0n1", 4)), 10.0, 900.0, capture=True, per_pod=4)
    keeps = Reservation("ns/keeps", "f", CLIQUE, ("u0", "c2"), (("c2n3", 4),), 5.0, 900.0)
    assert book.add(keeps, limit=2) and book.add(span, limit=2)
    assert dict(book.holding("f", snap))[span] == {"c0n0": 4, "c0n1": 4, "c1n3": 4}  # c2n3 is the older reservation's
    room = WaitingRoom()
    room.park("ns/first", Need("f", CLIQUE, 1, 4))
    room.park("ns/second", Need("f", CLIQUE, 1, 4))
    book.release("ns/span")
    assert wake_released(room, book, lambda flavor: snap, NOW) == ["ns/first"] and "ns/second" in room


def test_an_ended_reservation_wakes_the_oldest_gang_refused_one_though_its_gpus_hold_nothing() -> None:
    """The gang was placed on the GPUs it reserved, so the reservation leaves none free: no parked
    Workload fits them. Its slot of the flavor's bound is free all the same, so the oldest gang
    parked waiting for a reservation (``Need.reserves``) is woken to take it, one per reservation
    ended; a gang not waiting for one, the younger reserver and another flavor's stay parked
    (without this, the next gang waits for its relax deadline)."""
    snap = cluster()
    busy(snap, {f"c{c}n{n}": 900.0 for c in range(3) for n in range(4)})
    book = Reservations()
    assert book.add(GANG, limit=1)
    room = WaitingRoom()
    room.park("ns/plain", Need("f", CLIQUE, 2, 4))
    room.park("ns/first", Need("f", CLIQUE, 2, 4, reserves=True))
    room.park("ns/second", Need("f", CLIQUE, 2, 4, reserves=True))
    room.park("ns/other", Need("g", CLIQUE, 2, 4, reserves=True))
    book.release("ns/gang")
    assert wake_released(room, book, lambda flavor: snap, NOW) == ["ns/first"]
    assert {"ns/plain", "ns/second", "ns/other"} <= set(room.parked())
    assert wake_released(room, book, lambda flavor: snap, NOW) == []  # taken once


def test_a_freed_node_wakes_only_the_parked_workloads_the_room_free_now_can_hold() -> None:
    """Island c2 is full but for c2n0, which a pod just left; an admitted Workload still owes a
    4-GPU pod there (planned, not bound). On the flavor's snapshot c2n0 looks free and would
    wake the 4-GPU Workload parked on it, which a decision would then find no room for; on the
    room free now (what is owed counted, ``room_now``) it wakes nobody. With no room to count on,
    every parked Workload of the flavor."""
    snap = cluster()
    busy(snap, {n: 900.0 for n in ("c0n0", "c0n1", "c0n2", "c0n3", "c1n0", "c1n1", "c1n2", "c1n3", "c2n1", "c2n2", "c2n3")})
    owed = snap.fork()
    owed.reserve("c2n0", ResourceVector(gpu=4))
    rows = [snap.node_index["c2n0"]]
    assert wake_freed(parked(), "f", rows, lambda flavor: snap) == ["ns/one"]  # what the shared snapshot alone would wake
    room = parked()
    assert wake_freed(room, "f", rows, lambda flavor: owed) == [] and "ns/one" in room
    assert wake_freed(room, "f", rows, lambda flavor: None) == ["ns/pair", "ns/one"]
    assert wake_freed(None, "f", rows, lambda flavor: snap) == []


def test_a_window_moved_later_wakes_only_the_parked_its_new_time_lets_backfill() -> None:
    """The gang holds c2n0 (free) and c2n1 (busy), expected free at 900 s; every other node is
    busy. Parked at 100 s, oldest first, each 1 × 4-GPU on island level: one without a limit, one
    of 2,000 s, one of 500 s (it ends at 600 s, before 900 s: it could backfill already, and is
    parked for some other reason), and two of 1,200 s and 1,300 s. The gang's blockers overrun: the
    same nodes, expected free at 1,500 s. The 1,200 s one ends before that and did not before, and
    c2n0 holds it: woken. The 1,300 s one would backfill too, but c2n0 holds one pod, counted for
    the first. Nothing else is woken, then or when the window drifts within what lets nobody new in
    (1,600 s) or sooner (1,000 s); once the first is decided and parked again, a move to 2,200 s
    lets in the 2,000 s one, the oldest, and c2n0 holds one: it is woken. Before, a window moved
    on the same nodes woke nobody: ``take_moved`` compared nodes only."""
    snap = cluster()
    busy(snap, {n: 900.0 for n in ("c0n0", "c0n1", "c0n2", "c0n3", "c1n0", "c1n1", "c1n2", "c1n3", "c2n1", "c2n2", "c2n3")})
    book = Reservations()
    assert book.add(GANG, limit=1)
    room = WaitingRoom()
    for key, limit in (("ns/none", None), ("ns/long", 2000.0), ("ns/already", 500.0), ("ns/now", 1200.0), ("ns/now2", 1300.0)):
        room.park(key, Need("f", CLIQUE, 1, 4, limit=limit))
    assert room.limited("f") and not room.limited("g") and not parked().limited("f")  # who may backfill by time: counted
    assert wake_released(room, book, lambda flavor: snap, NOW) == []
    assert book.add(replace(GANG, expected_free=1500.0), limit=1)
    assert wake_released(room, book, lambda flavor: snap, NOW) == ["ns/now"]
    assert set(room.parked()) == {"ns/none", "ns/long", "ns/already", "ns/now2"}
    assert wake_released(room, book, lambda flavor: snap, NOW) == []  # taken once
    assert book.add(replace(GANG, expected_free=1600.0), limit=1)  # lets nobody new in: ns/now2 could at 1,500 s
    assert wake_released(room, book, lambda flavor: snap, NOW) == []
    assert book.add(replace(GANG, expected_free=1000.0), limit=1) and book.take_moved() == []  # sooner: moves nobody in
    room.park("ns/now", Need("f", CLIQUE, 1, 4, limit=1200.0))  # decided, and parked again (c2n0 stays free)
    assert book.add(replace(GANG, expected_free=2200.0), limit=1)  # from 1,000 s: the oldest it lets in, c2n0 holds
    assert wake_released(room, book, lambda flavor: snap, NOW) == ["ns/long"]
    for key in ("ns/already", "ns/now", "ns/now2"):
        room.leave(key)
    assert not room.limited("f")  # none left with a limit: a later window is not even counted


def test_a_window_moved_later_offers_only_the_nodes_held_before_and_still() -> None:
    """The gang moves from c2 (expected free at 900 s) to c1, expected free later (1,500 s): c1's
    nodes were not the gang's before, so nobody was refused them by it, and the 1,200 s Workload
    parked at 100 s is not offered c1n0. It is offered c2n0, the node the reservation left (as any
    parked Workload is), and that wakes the oldest parked, the one without a limit. A suspended
    reservation that moves later offers nothing (it blocks nobody)."""
    snap = cluster()
    busy(snap, {n: 900.0 for n in ("c0n0", "c0n1", "c0n2", "c0n3", "c1n1", "c1n2", "c1n3", "c2n1", "c2n2", "c2n3")})
    book = Reservations()
    assert book.add(GANG, limit=1)
    room = WaitingRoom()
    room.park("ns/none", Need("f", CLIQUE, 1, 4))
    room.park("ns/now", Need("f", CLIQUE, 1, 4, limit=1200.0))
    moved = Reservation("ns/gang", "f", CLIQUE, ("u0", "c1"), (("c1n0", 4), ("c1n1", 4)), 10.0, 1500.0)
    assert book.add(moved, limit=1)
    assert wake_released(room, book, lambda flavor: snap, NOW) == ["ns/none"] and "ns/now" in room
    book.quota("ns/gang", held=False)
    assert book.add(replace(moved, expected_free=3000.0), limit=1)
    assert wake_released(room, book, lambda flavor: snap, NOW) == [] and "ns/now" in room

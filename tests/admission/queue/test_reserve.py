"""Reservations: the target is the domain with the fewest GPUs to drain (ties: soonest free), its
nodes those the gang will need; others keep out except by backfill; bounded per flavor; and
what is written on the Workload reads back as the same reservation (the controller rebuilds
them from it: tests/admission/controller/test_queue_state.py)."""

from __future__ import annotations

from dataclasses import replace

from admission.queue import (
    Need,
    Reservation,
    Reservations,
    Running,
    RuntimeEstimator,
    WaitingRoom,
    choose_target,
    domain_outlook,
    free_at,
    should_move,
    wake_suspended,
)
from topology import Level, NodeInfo, ResourceVector, Snapshot

SU, CLIQUE = "network.example.com/su", "nvidia.com/gpu.clique"


def cluster() -> Snapshot:
    """1 SU × 3 islands × 4 nodes × 4 GPUs, all free."""
    nodes = [NodeInfo(f"c{c}n{n}", {SU: "u0", CLIQUE: f"c{c}"}, ResourceVector(4, 1000, 1000, 10)) for c in range(3) for n in range(4)]
    return Snapshot("f", [Level(SU, 50), Level(CLIQUE, 1800)], nodes)


def busy(snap: Snapshot, until: dict[str, float]) -> list[Running]:
    for name in until:
        snap.reserve(name, ResourceVector(gpu=4))
    return [Running("f", ((name, 4),), 0.0, limit=end) for name, end in until.items()]


def target(snap: Snapshot, running: list[Running], gpus: int = 12, by: str = "drain") -> Reservation | None:
    est = RuntimeEstimator()
    outlooks = domain_outlook(snap, CLIQUE, gpus, running, est, now=10.0)
    return choose_target(snap, "ns/gang", CLIQUE, gpus, 4, outlooks, running, est, now=10.0, by=by)


def test_the_fewest_gpus_to_drain_win_then_the_soonest_free() -> None:
    snap = cluster()
    running = busy(snap, {"c0n0": 500, "c0n1": 500, "c1n0": 900, "c2n0": 300, "c2n1": 2000})
    r = target(snap, running)
    assert r is not None and r.path[-1] == "c1"  # c1 has 12 GPUs free: nothing to drain (c0 and c2 lack 4)
    assert dict(r.nodes) == {"c1n1": 4, "c1n2": 4, "c1n3": 4}  # free nodes first: the busy one is not needed
    assert r.expected_free == 10.0
    snap = cluster()
    running = busy(snap, {"c0n0": 500, "c0n1": 500, "c1n0": 900, "c1n1": 900, "c2n0": 300, "c2n1": 2000})
    r = target(snap, running)  # every island lacks 4 GPUs: c2 frees them soonest (300 s)
    assert r is not None and r.path[-1] == "c2" and dict(r.nodes) == {"c2n2": 4, "c2n3": 4, "c2n0": 4} and r.expected_free == 300.0


def test_a_held_reservation_is_expected_free_when_its_own_nodes_are_not_when_fresh_ones_would_be() -> None:
    """A reservation holding c2n1 (busy until 2,000 s) and c2n2 (free) is expected free at 2,000 s,
    though the nodes ``choose_target`` takes in c2 now (c2n2, c2n3, then c2n0, free at 300 s) are
    free at 300 s; with only free nodes held it is free now, and a node gone from the snapshot
    holds nothing. An unknown runtime on a held node leaves the time unknown."""
    snap = cluster()
    running = busy(snap, {"c0n0": 500, "c0n1": 500, "c1n0": 900, "c1n1": 900, "c2n0": 300, "c2n1": 2000})
    fresh = target(snap, running)
    assert fresh is not None and fresh.path[-1] == "c2" and fresh.expected_free == 300.0
    held = replace(fresh, nodes=(("c2n1", 4), ("c2n2", 4)))
    est = RuntimeEstimator()
    assert free_at(snap, held, running, est, now=10.0) == 2000.0
    assert free_at(snap, replace(fresh, nodes=(("c2n2", 4), ("c2n3", 4))), running, est, now=10.0) == 10.0
    assert free_at(snap, replace(fresh, nodes=(("c2n2", 4), ("gone", 4))), running, est, now=10.0) == 10.0
    unknown = [*running, Running("f", (("c2n3", 4),), 0.0)]
    assert free_at(snap, replace(fresh, nodes=(("c2n3", 4),)), unknown, est, now=10.0) is None


def test_soonest_free_picks_the_domain_that_drains_first_where_fewest_to_drain_does_not() -> None:
    snap = cluster()
    # c0 lacks 4 GPUs, held by one job until 20,000 s; c1 lacks 8, held by two jobs ending at 600 s
    running = busy(snap, {"c0n0": 20000, "c0n1": 20000, "c1n0": 600, "c1n1": 600, "c1n2": 600, "c2n0": 30000, "c2n1": 30000})
    drain = target(snap, running)
    soon = target(snap, running, by="soonest")
    assert drain is not None and drain.path[-1] == "c0" and drain.expected_free == 20000.0
    assert soon is not None and soon.path[-1] == "c1" and soon.expected_free == 600.0
    assert dict(soon.nodes) == {"c1n3": 4, "c1n0": 4, "c1n1": 4}  # the free node, then two of those back at 600 s
    snap = cluster()  # a tie at the same free time: fewest to drain, then domain order
    running = busy(snap, {"c0n0": 600, "c0n1": 600, "c1n0": 600, "c2n0": 600})
    tied = target(snap, running, by="soonest")
    assert tied is not None and tied.path[-1] == "c1"  # c1 and c2 lack 0 GPUs of 12 (3 free nodes each); c1 comes first


def test_a_held_reservation_moves_only_when_another_domain_frees_sooner_by_more_than_the_margin() -> None:
    snap = cluster()
    running = busy(snap, {"c0n0": 5000, "c0n1": 5000, "c1n0": 900, "c1n1": 900, "c1n2": 900, "c2n0": 30000, "c2n1": 30000})
    est = RuntimeEstimator()
    outlooks = domain_outlook(snap, CLIQUE, 12, running, est, now=10.0)
    held = Reservation("ns/gang", "f", CLIQUE, ("u0", "c0"), (("c0n0", 4), ("c0n1", 4), ("c0n2", 4)), 0.0, 2000.0)
    soon = choose_target(snap, "ns/gang", CLIQUE, 12, 4, outlooks, running, est, now=10.0, by="soonest")
    assert soon is not None and soon.path[-1] == "c1" and soon.expected_free == 900.0
    assert should_move(held, soon, outlooks, margin=3600)  # c0 now frees at 5000 s: 4,100 s later than c1
    assert not should_move(held, soon, outlooks, margin=4200)  # within the margin: it stays
    assert not should_move(held, soon, outlooks, margin=None)  # no margin set: never moves
    assert not should_move(soon, soon, outlooks, margin=1)  # the same domain is no move


def test_others_keep_out_of_the_reserved_nodes_except_by_backfill() -> None:
    book = Reservations()
    r = Reservation("ns/gang", "f", CLIQUE, ("u0", "c2"), (("c2n0", 4), ("c2n2", 4), ("c2n3", 4)), since=10.0, expected_free=300.0)
    assert book.add(r, limit=1)
    assert book.blocked("f", "ns/small", None) == {"c2n0": 4, "c2n2": 4, "c2n3": 4}  # no limit: kept out of the gang's nodes
    assert "c2n1" not in book.blocked("f", "ns/small", None)  # a GPU the gang will not need stays open
    assert book.blocked("f", "ns/small", 299.0) == {}  # its limit ends before the domain is expected free: backfills
    assert book.blocked("f", "ns/small", 300.0) == {}
    assert book.blocked("f", "ns/small", 301.0) != {}  # ends after: kept out
    assert book.blocked("f", "ns/gang", None) == {}  # the holder itself is not kept out
    assert book.blocked("g", "ns/small", None) == {}  # another flavor
    unknown = Reservations()
    unknown.add(Reservation("ns/gang", "f", CLIQUE, ("u0", "c2"), (("c2n0", 4),), 10.0, None), limit=1)
    assert unknown.blocked("f", "ns/small", 11.0) == {"c2n0": 4}  # no expected free time: no backfill by time


def test_reservations_are_bounded_per_flavor_and_end_with_their_gang() -> None:
    book = Reservations()
    a = Reservation("ns/a", "f", CLIQUE, ("u0", "c0"), (("c0n0", 4),), 1.0, None)
    b = Reservation("ns/b", "f", CLIQUE, ("u0", "c1"), (("c1n0", 4),), 2.0, None)
    assert book.add(a, limit=1) and not book.add(b, limit=1)
    assert book.add(Reservation("ns/c", "g", CLIQUE, ("u0", "c1"), (("c1n0", 4),), 2.0, None), limit=1)  # the bound is per flavor
    assert book.add(a, limit=1)  # its own holder refreshes it
    assert book.release("ns/a") == a and book.held_by("ns/a") is None and book.add(b, limit=1)


def test_soonest_free_is_the_earliest_known_expected_end_per_flavor() -> None:
    held = Reservations()
    assert held.soonest_free() == {}
    held.add(Reservation("ns/a", "f", CLIQUE, ("u0", "c0"), (("c0n0", 4),), 1.0, 900.0), limit=3)
    held.add(Reservation("ns/b", "f", CLIQUE, ("u0", "c1"), (("c1n0", 4),), 2.0, 400.0), limit=3)
    held.add(Reservation("ns/c", "f", CLIQUE, ("u1", "c0"), (("c0n0", 4),), 3.0, None), limit=3)
    held.add(Reservation("ns/d", "g", CLIQUE, ("u0", "c0"), (("c0n0", 4),), 1.0, None), limit=3)
    assert held.soonest_free() == {"f": 400.0}  # g's end is unknown: not in it
    held.release("ns/b")
    assert held.soonest_free() == {"f": 900.0}


def test_what_is_written_on_the_workload_reads_back_as_the_same_reservation_and_anything_else_as_none() -> None:
    a = Reservation("ns/a", "f", CLIQUE, ("u0", "c0"), (("c0n0", 4), ("c0n1", 4)), 1.0, 250.0)
    b = Reservation("ns/b", "f", None, (), (("c1n0", 4), ("c1n1", 4)), 2.0, None, capture=True, per_pod=4)
    assert Reservation.decode("ns/a", a.encode()) == a
    assert Reservation.decode("ns/b", b.encode()) == b  # no level, unknown free time, capture and pod size kept
    assert Reservation.decode("ns/c", a.encode()) == replace(a, holder="ns/c")  # the holder is the Workload it is read from
    for bad in ("{not json", "", "[]", '{"flavor":"f"}', a.encode().replace('"c0n0":4', '"c0n0":"four"')):
        assert Reservation.decode("ns/a", bad) is None  # unreadable: the controller holds nothing for it, the gang reserves afresh


def test_a_span_level_reservation_takes_the_nodes_expected_free_soonest_across_the_islands_of_its_domain() -> None:
    snap = cluster()
    # every island has a node busy until 20,000 s: an island reservation drains only then
    running = busy(snap, {"c0n0": 20_000.0, "c1n0": 20_000.0, "c2n0": 20_000.0, "c0n1": 500.0, "c1n1": 900.0, "c2n1": 700.0,
                          "c0n2": 20_000.0, "c1n2": 20_000.0, "c2n2": 20_000.0, "c0n3": 20_000.0, "c1n3": 20_000.0, "c2n3": 20_000.0})
    island = target(snap, running)
    assert island is not None and island.expected_free == 20_000.0
    est = RuntimeEstimator()
    span = choose_target(snap, "ns/gang", SU, 12, 4, domain_outlook(snap, SU, 12, running, est, now=10.0), running, est, now=10.0)
    assert span is not None and span.level == SU and span.path == ("u0",)
    assert dict(span.nodes) == {"c0n1": 4, "c2n1": 4, "c1n1": 4}  # one node of each island: those that end first
    assert span.expected_free == 900.0  # the span it will take drains with its third node, not with the longest job


def test_a_capturing_reservation_holds_what_frees_anywhere_in_its_domain_up_to_the_gangs_gpus() -> None:
    snap = cluster()
    busy(snap, {f"c{c}n{n}": 20_000.0 for c in range(3) for n in range(4)})
    r = Reservation("ns/gang", "f", SU, ("u0",), (("c0n1", 4), ("c1n1", 4), ("c2n1", 4)), 10.0, 900.0, capture=True)
    book = Reservations()
    assert book.add(r, limit=1)
    assert book.blocked("f", "ns/small", None, snap) == dict(r.nodes) and book.idle("f", snap) == 0  # nothing free yet
    snap.release("c0n3", ResourceVector(gpu=4))  # a node the reservation did not name frees first: it is held too
    snap.release("c1n2", ResourceVector(gpu=2))
    held = book.blocked("f", "ns/small", None, snap)
    assert held == {**dict(r.nodes), "c0n3": 4, "c1n2": 2} and book.idle("f", snap) == 6
    snap.release("c1n1", ResourceVector(gpu=4))
    snap.release("c2n1", ResourceVector(gpu=4))  # 14 free in the domain, the gang needs 12: its two named nodes, then whole c0n3
    held = book.blocked("f", "ns/small", None, snap)
    assert held == {**dict(r.nodes), "c0n3": 4} and book.idle("f", snap) == 12  # c1n2's 2 GPUs are open again: the gang will not need them
    assert book.blocked("f", "ns/gang", None, snap) == {}
    assert book.blocked("f", "ns/small", 800.0, snap) == {}  # backfill by time still holds
    plain = Reservations()
    plain.add(replace(r, capture=False), limit=1)
    assert plain.blocked("f", "ns/small", None, snap) == dict(r.nodes)  # without capture only the named nodes
    assert Reservation.decode("ns/gang", r.encode()) == r  # restored with the flag
    assert "capture" not in replace(r, capture=False).encode()  # a plain reservation is written as before


def test_a_capturing_reservation_holds_free_gpus_only_in_whole_pods_of_the_gang() -> None:
    snap = cluster()
    busy(snap, {f"c{c}n{n}": 20_000.0 for c in range(3) for n in range(4)})
    r = Reservation("ns/gang", "f", SU, ("u0",), (("c0n1", 4), ("c1n1", 4), ("c2n1", 4)), 10.0, 900.0, capture=True, per_pod=4)
    book = Reservations()
    assert book.add(r, limit=1)
    snap.release("c1n2", ResourceVector(gpu=2))  # 2 GPUs: no room for one of the gang's 4-GPU pods
    snap.release("c0n3", ResourceVector(gpu=3))
    assert book.blocked("f", "ns/small", None, snap) == dict(r.nodes) and book.idle("f", snap) == 0  # the scraps stay open
    snap.release("c0n3", ResourceVector(gpu=1))  # c0n3 is whole now: a pod of the gang fits, and it is held
    assert book.blocked("f", "ns/small", None, snap) == {**dict(r.nodes), "c0n3": 4} and book.idle("f", snap) == 4
    assert Reservation.decode("ns/gang", r.encode()) == r and '"perPod":4' in r.encode()  # restored with its pod size
    assert "perPod" not in replace(r, per_pod=1).encode()  # a reservation of 1-GPU pods is written as before


def test_two_capturing_reservations_in_one_domain_never_hold_the_same_free_gpus() -> None:
    snap = cluster()
    busy(snap, {f"c{c}n{n}": 20_000.0 for c in range(3) for n in range(4)})
    old = Reservation("ns/a", "f", SU, ("u0",), (("c0n0", 4), ("c0n1", 4)), 10.0, 900.0, capture=True, per_pod=4)
    new = Reservation("ns/b", "f", SU, ("u0",), (("c1n0", 4), ("c1n1", 4)), 20.0, 900.0, capture=True, per_pod=4)
    book = Reservations()
    assert book.add(old, limit=2) and book.add(new, limit=2)
    for name in ("c1n0", "c2n0", "c2n1"):  # b's named node frees, and two nodes no reservation named
        snap.release(name, ResourceVector(gpu=4))
    held = dict((r.holder, h) for r, h in book.holding("f", snap))
    assert held["ns/a"] == {"c0n0": 4, "c0n1": 4, "c2n0": 4, "c2n1": 4}  # the older captures what frees elsewhere, never b's c1n0
    assert held["ns/b"] == dict(new.nodes)  # b's own free node is its own; nothing is left to capture
    assert book.blocked("f", "ns/a", None, snap) == dict(new.nodes)  # a's gang is kept out of b's nodes only
    assert book.blocked("f", "ns/b", None, snap) == held["ns/a"]  # and b's out of what a holds, not out of its own c1n0
    assert book.idle("f", snap) == 12  # each free GPU counted once


def test_a_reservation_whose_holder_holds_no_quota_is_kept_but_blocks_nobody_until_it_holds_quota_again() -> None:
    snap = cluster()
    book = Reservations()
    r = Reservation("ns/gang", "f", CLIQUE, ("u0", "c2"), (("c2n0", 4), ("c2n1", 4)), since=10.0, expected_free=300.0)
    other = Reservation("ns/other", "f", CLIQUE, ("u0", "c1"), (("c1n0", 4),), since=20.0, expected_free=None)
    assert book.add(r, limit=1)
    assert book.quota("ns/nobody", False) is None and not book.suspended("ns/nobody")  # no reservation: nothing to suspend
    assert book.quota("ns/gang", True) is None  # it held quota already: nothing changes
    assert book.quota("ns/gang", False) == r and book.suspended("ns/gang")
    assert book.quota("ns/gang", False) is None  # told again: no change
    assert book.blocked("f", "ns/small", None, snap) == {} and book.idle("f", snap) == 0  # blocks nobody, holds nothing idle
    assert book.held_by("ns/gang") == r and book.on("f") == [r] and not book.add(other, limit=1)  # on record, in the bound
    assert book.add(replace(r, expected_free=400.0), limit=1) and book.suspended("ns/gang")  # refreshed: still suspended
    assert book.quota("ns/gang", True) is not None and not book.suspended("ns/gang")
    assert book.blocked("f", "ns/small", None, snap) == {"c2n0": 4, "c2n1": 4} and book.idle("f", snap) == 8  # blocks again
    book.quota("ns/gang", False)
    assert book.release("ns/gang") is not None and not book.suspended("ns/gang")
    assert book.add(r, limit=1) and book.blocked("f", "ns/small", None, snap) != {}  # a new reservation is made with quota


SUSPENDED = "reservations suspended, their holders hold no quota, so they block nobody"


def test_only_a_placement_on_what_a_suspended_reservation_would_hold_names_it() -> None:
    """The suspension explains a placement only where the reservation in force would have kept it
    out: on its nodes, and not by backfill. A placement elsewhere says nothing of it, nor does a
    reservation in force."""
    snap = cluster()
    book = Reservations()
    gang = Reservation("ns/gang", "f", CLIQUE, ("u0", "c2"), (("c2n0", 4), ("c2n1", 4)), since=10.0, expected_free=300.0)
    live = Reservation("ns/live", "f", CLIQUE, ("u0", "c1"), (("c1n0", 4),), since=20.0, expected_free=None)
    assert book.add(gang, limit=2) and book.add(live, limit=2)
    assert book.suspended_note("f", "ns/small", None, {"c2n1"}, snap) == ""  # in force: it blocks, so nothing landed there by it
    book.quota("ns/gang", False)
    assert book.suspended_note("f", "ns/small", None, {"c0n0", "c0n1"}, snap) == ""  # elsewhere
    assert book.suspended_note("f", "ns/small", None, {"c1n0"}, snap) == ""  # on a reservation in force (a backfill)
    assert book.suspended_note("f", "ns/small", None, {"c2n2"}, snap) == ""  # the domain's nodes the gang will not need
    assert book.suspended_note("f", "ns/small", 300.0, {"c2n1"}, snap) == ""  # it ends before the gang could start: backfills anyway
    assert book.suspended_note("f", "ns/gang", None, {"c2n1"}, snap) == ""  # the holder's own nodes
    note = book.suspended_note("f", "ns/small", None, {"c0n0", "c2n1"}, snap)
    assert note == f" ({SUSPENDED}: ns/gang on {CLIQUE} u0/c2)"
    assert book.suspended_note("f", "ns/small", 301.0, {"c2n0"}, snap) == note  # ends after the gang could start: it was kept out
    assert book.suspended_note("g", "ns/small", None, {"c2n1"}, snap) == ""  # another flavor


def test_a_suspended_capturing_reservation_is_named_on_the_free_gpus_it_would_capture_only() -> None:
    snap = cluster()
    busy(snap, {"c0n0": 900.0, "c0n1": 900.0})
    book = Reservations()
    cap = Reservation("ns/cap", "f", SU, ("u0",), (("c0n0", 4), ("c0n1", 4)), 10.0, 900.0, capture=True, per_pod=4)
    assert book.add(cap, limit=1) and book.quota("ns/cap", False) == cap
    assert [(r, held) for r, held in book.would_hold("f", snap)] == [(cap, {"c0n0": 4, "c0n1": 4, "c0n2": 4, "c0n3": 4})]
    assert SUSPENDED in book.suspended_note("f", "ns/small", None, {"c0n3"}, snap)  # free GPUs it would capture
    assert book.suspended_note("f", "ns/small", None, {"c1n0"}, snap) == ""  # free, but beyond the gang's GPUs: open anyway
    assert book.holding("f", snap) == [] and book.blocked("f", "ns/small", None, snap) == {}


def test_a_suspension_is_taken_once_and_only_while_it_lasts() -> None:
    book = Reservations()
    a = Reservation("ns/a", "f", CLIQUE, ("u0", "c0"), (("c0n0", 4),), 1.0, None)
    b = Reservation("ns/b", "f", CLIQUE, ("u0", "c1"), (("c1n0", 4),), 2.0, None)
    assert book.add(a, limit=2) and book.add(b, limit=2)
    assert book.take_suspended() == []
    book.quota("ns/b", False)
    book.quota("ns/a", False)
    book.quota("ns/a", True)  # holds quota again before anyone looked: nothing was freed
    assert book.take_suspended() == [b] and book.take_suspended() == []
    book.quota("ns/b", True)
    book.quota("ns/b", False)
    book.release("ns/b")  # ended: its end is the caller's to tell
    assert book.take_suspended() == []


def test_a_suspension_wakes_only_the_parked_workloads_what_it_held_can_hold() -> None:
    """The gang reserved c2n0 and c2n1 (one free, one busy). Suspended, its free node can hold the
    4-GPU Workload parked on it, not the 8-GPU one: only the first is woken. A suspension that
    ended before the caller looked wakes nobody."""
    snap = cluster()
    busy(snap, {"c0n0": 900.0, "c0n1": 900.0, "c0n2": 900.0, "c1n0": 900.0, "c1n1": 900.0, "c1n2": 900.0, "c2n0": 900.0, "c2n2": 900.0,
                "c2n3": 900.0})
    book = Reservations()
    book.add(Reservation("ns/gang", "f", CLIQUE, ("u0", "c2"), (("c2n0", 4), ("c2n1", 4)), 10.0, 900.0), limit=1)
    room = WaitingRoom()
    room.park("ns/pair", Need("f", CLIQUE, 2, 4))
    room.park("ns/one", Need("f", CLIQUE, 1, 4))
    room.park("ns/other-flavor", Need("g", CLIQUE, 1, 4))
    seen: list[str] = []

    def room_now(flavor: str) -> Snapshot:
        seen.append(flavor)
        return snap

    book.quota("ns/gang", False)
    book.quota("ns/gang", True)
    assert wake_suspended(room, book, room_now) == [] and seen == []  # back in force before anyone looked
    book.quota("ns/gang", False)
    assert wake_suspended(room, book, room_now) == ["ns/one"] and seen == ["f"]
    assert "ns/pair" in room and "ns/other-flavor" in room
    assert wake_suspended(room, book, room_now) == []  # taken once
    book.quota("ns/gang", True)
    book.quota("ns/gang", False)
    assert wake_suspended(room, book, lambda flavor: None) == ["ns/pair"]  # no room to count on: every parked Workload of the flavor
    book.quota("ns/gang", True)
    book.quota("ns/gang", False)
    assert wake_suspended(None, book, room_now) == [] and book.take_suspended() == []  # no room: taken all the same

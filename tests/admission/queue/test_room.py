"""The waiting room: a parked Workload is woken only by freed room that could hold it, by its
deadline, or by a change the GPU counts cannot see; oldest first."""

from __future__ import annotations

from admission.queue import Need, WaitingRoom
from topology import Level, NodeInfo, PlacementRequest, PodSetRequest, ResourceVector, Snapshot

SU, CLIQUE = "network.example.com/su", "nvidia.com/gpu.clique"


def cluster() -> Snapshot:
    """2 SUs × 2 islands × 4 nodes × 4 GPUs, every GPU in use."""
    nodes = [NodeInfo(f"u{u}c{c}n{n}", {SU: f"u{u}", CLIQUE: f"u{u}c{c}"}, ResourceVector(4, 1000, 1000, 10), ResourceVector(gpu=4))
             for u in range(2) for c in range(2) for n in range(4)]
    return Snapshot("f", [Level(SU, 50), Level(CLIQUE, 1800)], nodes)


def free(snap: Snapshot, *names: str, gpus: int = 4) -> list[int]:
    for name in names:
        snap.release(name, ResourceVector(gpu=gpus))
    return [snap.node_index[n] for n in names]


def test_freed_room_wakes_only_what_one_domain_of_its_level_could_now_hold() -> None:
    snap, room = cluster(), WaitingRoom()
    room.park("gang3", Need("f", CLIQUE, 3, 4))
    room.park("gang2", Need("f", CLIQUE, 2, 4))
    room.park("wide", Need("f", SU, 6, 4))
    room.park("other-flavor", Need("g", CLIQUE, 1, 4))
    assert room.freed(snap, free(snap, "u0c0n0")) == []  # one free node in u0c0: nothing needs only one
    assert room.freed(snap, free(snap, "u0c1n0")) == []  # one in each island of u0: still no island with two
    assert room.freed(snap, free(snap, "u0c0n1")) == ["gang2"]  # u0c0 has two free nodes
    assert "gang3" in room and "wide" in room and len(room) == 3
    assert room.freed(snap, free(snap, "u1c0n0", "u1c0n1")) == []  # u1 has 2 free nodes; gang3 waits for 3 in one island
    # u0c1: 4 free, u0: 6 free; gang3 (older) is counted against 3 of them, so wide's 6 are not there for it
    assert room.freed(snap, free(snap, "u0c1n1", "u0c1n2", "u0c1n3")) == ["gang3"]
    assert "wide" in room and room.owed() == set()
    room.decided("gang2")  # gang2 went elsewhere: its two u0c0 nodes are free
    room.park("gang3", Need("f", CLIQUE, 3, 4))  # decided and parked again: it took none of the room
    assert room.owed() == {"f"}
    assert room.reoffer(snap) == ["wide"] and room.owed() == set()


def test_pods_are_counted_whole_not_as_scattered_gpus() -> None:
    snap, room = cluster(), WaitingRoom()
    room.park("two-by-four", Need("f", CLIQUE, 2, 4))
    freed = free(snap, "u0c0n0", "u0c0n1", "u0c0n2", gpus=2)  # 6 free GPUs in u0c0, but no node with 4
    assert room.freed(snap, freed) == []
    assert room.freed(snap, free(snap, "u0c0n0", "u0c0n1", gpus=2)) == ["two-by-four"]


def test_anywhere_in_the_flavor_counts_every_node() -> None:
    snap, room = cluster(), WaitingRoom()
    room.park("spread", Need("f", None, 3, 4))
    assert room.freed(snap, free(snap, "u0c0n0", "u1c1n3")) == []
    assert room.freed(snap, free(snap, "u1c0n2")) == ["spread"]


def test_deadlines_wake_in_order_and_a_workload_parked_again_keeps_only_its_new_need() -> None:
    room = WaitingRoom()
    room.park("a", Need("f", CLIQUE, 2, 4, deadline=300.0))
    room.park("b", Need("f", CLIQUE, 2, 4, deadline=200.0))
    room.park("a", Need("f", CLIQUE, 2, 4, deadline=500.0))  # decided again: the old deadline no longer counts
    assert room.next_deadline() == 200.0
    assert room.due(299.0) == ["b"]
    assert room.due(499.0) == [] and room.next_deadline() == 500.0
    assert room.due(500.0) == ["a"] and len(room) == 0


def test_leaving_and_waking_everything() -> None:
    room = WaitingRoom()
    for key, flavor in (("x", "f"), ("y", "g"), ("z", "f")):
        room.park(key, Need(flavor, CLIQUE, 1, 4, deadline=10.0))
    assert room.flavors() == {"f", "g"}
    assert room.leave("y") == Need("g", CLIQUE, 1, 4, deadline=10.0) and room.leave("y") is None
    assert room.flavors() == {"f"}
    assert room.wake_flavor("f") == ["x", "z"] and len(room) == 0
    assert room.due(100.0) == []  # deadlines of Workloads that left are dropped
    room.park("w", Need("g", SU, 2, 1))
    assert room.wake_all() == ["w"]


def test_a_workload_set_aside_parks_again_unchanged_until_an_event_would_have_woken_it() -> None:
    snap, room = cluster(), WaitingRoom()
    room.park("gang", Need("f", CLIQUE, 2, 4, deadline=900.0))
    room.park("small", Need("f", CLIQUE, 1, 4))
    room.set_aside("gang")  # it gave its quota back: no longer parked, its need kept on file
    assert "gang" not in room and len(room) == 2  # not parked, but on file: events must still reach it
    assert room.unchanged("gang", 100.0) == Need("f", CLIQUE, 2, 4, deadline=900.0)  # nothing changed: parks as it was
    assert "gang" in room and len(room) == 2
    room.set_aside("gang")
    assert room.freed(snap, free(snap, "u0c0n0", "u0c0n1")) == ["small"]  # room for it: the set-aside one is not returned...
    assert room.unchanged("gang", 100.0) is None and "gang" not in room  # ...but is decided afresh when it holds quota again
    assert room.unchanged("small", 100.0) is None  # never set aside: decided as usual


def given_back(room: WaitingRoom) -> None:
    """Gangs a, b, c of 2 × 4 GPUs parked, then gave their quota back; one of 4 GPUs parked after them."""
    for key in ("a", "b", "c"):
        room.park(key, Need("f", CLIQUE, 2, 4))
    room.park("parked", Need("f", CLIQUE, 1, 4))
    for key in ("a", "b", "c"):
        room.set_aside(key)


def test_freed_room_drops_the_needs_of_every_set_aside_workload_it_could_hold_alone() -> None:
    """The default: a Workload that gave its quota back takes none of the room, so one pod's end
    drops the need of every set-aside Workload it could hold alone."""
    snap, room = cluster(), WaitingRoom()
    given_back(room)
    assert room.freed(snap, free(snap, "u0c0n0", "u0c0n1", "u0c0n2")) == ["parked"]
    assert [room.unchanged(k, 0.0) for k in ("a", "b", "c")] == [None, None, None]  # each decided afresh


def test_in_turn_freed_room_drops_the_needs_of_only_as_many_set_aside_workloads_as_it_holds() -> None:
    """With ``in_turn`` a pod's end reaches the Workloads that gave their quota back as it wakes the
    parked ones: counted against the room, after the parked ones, oldest first."""
    snap, room = cluster(), WaitingRoom(in_turn=True)
    given_back(room)
    assert room.freed(snap, free(snap, "u0c0n0", "u0c0n1", "u0c0n2")) == ["parked"]  # the parked one first, then room for one more gang
    assert room.unchanged("a", 0.0) is None  # the oldest: decided afresh when it holds quota again
    assert room.unchanged("b", 0.0) == Need("f", CLIQUE, 2, 4)  # the room held none for it: parked again undecided
    room.set_aside("b")
    assert room.freed(snap, free(snap, "u1c0n0", "u1c0n1")) == []  # new room in another island: for the next one
    assert room.unchanged("b", 0.0) is None and room.unchanged("c", 0.0) == Need("f", CLIQUE, 2, 4)


def test_a_workload_set_aside_is_aside_only_while_its_need_is_on_file() -> None:
    """The one rule the simulator and the controller ask before a Workload waiting for quota takes
    a parked one's: set aside and unchanged, it would park again undecided in what it took."""
    snap, room = cluster(), WaitingRoom()
    room.park("gang", Need("f", CLIQUE, 2, 4))
    room.park("big", Need("f", CLIQUE, 4, 4))
    assert not room.is_aside("gang") and not room.is_aside("never-parked")  # parked: it holds its quota
    room.set_aside("gang")
    room.set_aside("big")
    assert room.is_aside("gang") and room.is_aside("big")
    assert room.freed(snap, free(snap, "u0c0n0", "u0c0n1")) == []  # room for two pods in one island: an event that reaches the gang
    assert not room.is_aside("gang")  # its need is dropped: it may fit now
    assert room.is_aside("big")  # nothing it waits for changed
    room.set_aside("never-parked")
    assert not room.is_aside("never-parked")  # nothing on file, nothing set aside


def placed(pods: int, level: str | None = CLIQUE) -> Need:
    """A need that carries the placement request its decision searched (``settle`` asks it again)."""
    request = PlacementRequest((PodSetRequest("main", pods, ResourceVector(gpu=4, cpu_milli=100), required_level=level),))
    return Need("f", level, pods, 4, request=request)


def test_a_workload_set_aside_is_aside_until_an_event_lets_it_fit() -> None:
    """The one rule the simulator and the controller ask before a Workload waiting for quota takes
    a parked one's: set aside, it would park again undecided in what it took, so an event that
    reaches it drops its need only if ``settle``'s fit test says it fits now
    (``decisions.quota_yield_back_when_fits``)."""
    snap, room = cluster(), WaitingRoom(settle_by_fit=True)
    room.park("gang", placed(2))
    room.park("big", placed(4))
    assert not room.is_aside("gang") and not room.is_aside("never-parked")  # parked: it holds its quota
    room.set_aside("gang")
    room.set_aside("big")
    assert room.is_aside("gang") and room.is_aside("big")
    assert room.settle(lambda need: True) == []  # no event reached them: nothing to ask
    assert room.freed(snap, free(snap, "u0c0n0", "u0c0n1")) == []  # room for two pods in one island: an event that reaches the gang
    assert room.is_aside("gang")  # reached, but its need stays on file until the fit is asked
    asked: list[Need] = []
    assert room.settle(lambda need: asked.append(need) is None and False) == []  # it does not fit (taken in the same instant, say)
    assert [n.pods for n in asked] == [2]  # only the one an event reached was asked
    assert room.is_aside("gang") and room.unchanged("gang", 0.0) == placed(2)  # as if no event had come: parked again undecided
    room.set_aside("big")
    assert room.freed(snap, free(snap, "u0c0n2", "u0c0n3")) == ["gang"]  # a whole island: wakes the parked gang, reaches the big one
    assert room.settle(lambda need: need.pods == 4) == ["big"]  # it fits now: its need is dropped
    assert not room.is_aside("big") and room.need("big") is None
    room.set_aside("never-parked")
    assert not room.is_aside("never-parked")  # nothing on file, nothing set aside


def test_a_set_aside_need_without_a_placement_to_ask_is_dropped_by_the_event() -> None:
    """A need that carries no request (held behind a gang, or parked before a restart) cannot be
    asked whether it fits: the event that reaches it drops it, as without ``settle_by_fit``."""
    room = WaitingRoom(settle_by_fit=True)
    room.park("held", Need("f", None, 2, 4, behind="ns/gang"))
    room.park("plain", Need("f", CLIQUE, 2, 4))
    room.set_aside("held")
    room.set_aside("plain")
    assert room.wake_behind(["ns/gang"]) == [] and not room.is_aside("held")
    assert room.wake_flavor("f") == [] and not room.is_aside("plain")
    assert len(room) == 0


def test_a_deadline_ends_a_workloads_time_aside() -> None:
    room = WaitingRoom()
    room.park("late", Need("f", CLIQUE, 2, 4, deadline=300.0))
    room.park("kept", Need("f", CLIQUE, 2, 4))
    room.set_aside("late")
    room.set_aside("kept")
    assert room.due(299.0) == [] and room.is_aside("late")
    assert room.due(300.0) == [] and not room.is_aside("late")  # it may span now: decided afresh, and waits as any Workload
    assert room.unchanged("kept", 300.0) is not None and not room.is_aside("kept")  # holds quota again: parked, not aside
    room.set_aside("kept")
    room.leave("kept")
    assert not room.is_aside("kept")


def test_in_turn_a_workload_parked_again_undecided_may_give_its_quota_back_again() -> None:
    room = WaitingRoom(in_turn=True)
    room.park("gang", Need("f", CLIQUE, 2, 4))
    room.set_aside("gang")
    assert not room.may_give("gang")  # set aside: it holds no quota to give
    assert room.unchanged("gang", 100.0) is not None  # parked again undecided...
    assert room.may_give("gang")  # ...it may give again: the give goes to the first waiter in Kueue's order
    room.leave("gang")
    assert not room.may_give("gang")


def test_in_turn_the_first_in_line_for_a_reservation_keeps_its_quota() -> None:
    """A reservation that ends wakes the oldest gang waiting for one (``wake_reservers``): given
    away, its quota would have to be free all at once again before it could take the slot."""
    room = WaitingRoom(in_turn=True)
    room.park("small", Need("f", CLIQUE, 2, 4))
    room.park("first", Need("f", CLIQUE, 16, 4, reserves=True))
    room.park("second", Need("f", CLIQUE, 16, 4, reserves=True))
    room.park("elsewhere", Need("g", CLIQUE, 16, 4, reserves=True))
    assert [room.may_give(k) for k in ("small", "first", "second", "elsewhere")] == [True, False, True, False]
    room.set_aside("second")
    room.set_aside("first")  # it gave its quota back before it was first in line: the next one holding quota keeps its own
    assert room.unchanged("second", 0.0) is not None and not room.may_give("second")
    room.park("third", Need("f", CLIQUE, 16, 4, reserves=True))
    assert room.may_give("third")
    assert room.wake_reservers("g", 1) == ["elsewhere"] and not room.may_give("elsewhere")
    assert not WaitingRoom().may_give("never-parked")
    plain = WaitingRoom()
    plain.park("first", Need("f", CLIQUE, 16, 4, reserves=True))
    assert plain.may_give("first")  # without ``in_turn``: once per decision, reservation or not


def test_the_first_in_line_for_a_reservation_keeps_its_quota_once_the_reservation_is_near_its_end() -> None:
    """With ``turn_lead`` the oldest gang waiting for a reservation of its flavor gives like anyone
    until the soonest reservation of its flavor is expected free within the lead; from then it
    keeps its quota, and if it gave it back, givers serve it as a waiter (``may_take``), so it holds
    quota when the reservation ends. The others, and other flavors, give as before."""
    room = WaitingRoom(turn_lead=600.0)
    room.park("small", Need("f", CLIQUE, 2, 4))
    room.park("first", Need("f", CLIQUE, 16, 4, reserves=True))
    room.park("second", Need("f", CLIQUE, 16, 4, reserves=True))
    room.park("elsewhere", Need("g", CLIQUE, 16, 4, reserves=True))
    far, near = {"f": 2000.0, "g": 2000.0}, {"f": 1500.0, "g": 2000.0}
    gangs = ("small", "first", "second", "elsewhere")
    assert [room.may_give(k, 1000.0, far) for k in gangs] == [True, True, True, True]  # the end 1000 s away: give like anyone
    assert [room.may_give(k, 1000.0, near) for k in gangs] == [True, False, True, True]  # 500 s away: the first in line keeps it
    assert room.may_give("first", 1000.0, {}) and room.may_give("first")  # no reservation's end known: gives
    room.set_aside("first")  # gave it back before the window
    assert not room.may_take("first", 1000.0, far) and room.is_aside("first")  # passed over while the end is far
    assert room.may_take("first", 1000.0, near) and room.is_aside("first")  # near: served first, its need still on file
    assert room.may_give("second", 1000.0, near)  # not first in line: the set-aside one still is
    assert room.may_take("second", 1000.0, near) and room.may_take("never-parked", 1000.0, near)
    assert room.unchanged("first", 1100.0) is not None and not room.may_give("first", 1100.0, near)
    off = WaitingRoom()
    off.park("first", Need("f", CLIQUE, 16, 4, reserves=True))
    assert off.may_give("first", 1000.0, near)  # without ``turn_lead``: never kept
    off.set_aside("first")
    assert not off.may_take("first", 1000.0, near)


def test_a_workload_gives_its_quota_back_at_most_once_per_decision() -> None:
    room = WaitingRoom()
    room.park("gang", Need("f", CLIQUE, 2, 4))
    assert room.may_give("gang")
    room.set_aside("gang")
    assert not room.may_give("gang")  # set aside: it holds no quota to give
    assert room.unchanged("gang", 100.0) is not None  # parked again undecided...
    assert not room.may_give("gang")  # ...it keeps its quota
    room.park("gang", Need("f", CLIQUE, 2, 4))  # decided afresh, parked again
    assert room.may_give("gang")
    room.leave("gang")
    assert not room.may_give("gang") and not room.may_give("never-parked")


def test_a_set_aside_workload_is_decided_again_after_its_deadline_or_a_flavor_change() -> None:
    room = WaitingRoom()
    room.park("late", Need("f", CLIQUE, 2, 4, deadline=300.0))
    room.park("moved", Need("f", CLIQUE, 2, 4))
    room.park("other", Need("g", CLIQUE, 2, 4))
    for key in ("late", "moved", "other"):
        room.set_aside(key)
    assert room.unchanged("late", 300.0) is None  # its deadline passed while it was out
    assert room.wake_flavor("f") == []  # a node changed: nothing parked to wake, the set-aside one is taken out
    assert room.unchanged("moved", 400.0) is None
    assert room.due(1000.0) == [] and room.wake_all() == []
    assert room.unchanged("other", 400.0) is None and len(room) == 0


def test_parked_lists_what_is_parked_oldest_first_without_those_set_aside() -> None:
    room = WaitingRoom()
    for key in ("a", "b", "c"):
        room.park(key, Need("f", CLIQUE, 1, 4))
    room.park("a", Need("f", CLIQUE, 2, 4))  # parked again: now the newest
    room.set_aside("b")
    assert room.parked() == ["c", "a"]
    assert room.unchanged("b", 0.0) is not None and room.parked() == ["b", "c", "a"]  # back in its old place


def test_a_workload_held_behind_an_owed_gang_is_woken_by_its_flavor_or_deadline_never_by_freed_gpus() -> None:
    snap, room = cluster(), WaitingRoom()
    room.park("small", Need("f", None, 1, 4, behind="ns/gang"))
    room.park("timed", Need("f", None, 1, 4, deadline=50.0, behind="ns/gang"))
    room.park("waits", Need("f", None, 1, 4))
    assert room.freed(snap, free(snap, "u0c0n0", "u0c0n1")) == ["waits"]  # room for all three: only the one not held goes
    assert "small" in room and "timed" in room and room.flavors() == {"f"}
    assert room.due(49.0) == [] and room.due(50.0) == ["timed"]
    room.park("other", Need("f", None, 1, 4, behind="ns/other-gang"))
    assert room.wake_behind(["ns/gang"]) == ["small"]  # the gang is owed no longer: what waited behind it is decided again
    assert room.wake_flavor("f") == ["other"]
    assert len(room) == 0


def test_a_freed_node_wakes_only_as_many_parked_as_its_gpus_hold_oldest_first() -> None:
    snap = Snapshot("f", [Level(CLIQUE, 1800)], [NodeInfo("big", {CLIQUE: "c"}, ResourceVector(8, 1000, 1000, 10), ResourceVector(gpu=8))])
    room = WaitingRoom()
    for k in "abcde":
        room.park(k, Need("f", CLIQUE, 1, 4))
    assert room.freed(snap, free(snap, "big", gpus=8)) == ["a", "b"]
    assert room.parked() == ["c", "d", "e"]  # the rest stay parked, in their order
    assert room.reoffer(snap) == []  # no woken Workload came back: nothing to offer again


def test_room_a_woken_workload_parks_again_without_is_offered_to_the_next_and_a_chain_costs_one_wake_each() -> None:
    snap = Snapshot("f", [Level(CLIQUE, 1800)], [NodeInfo("big", {CLIQUE: "c"}, ResourceVector(8, 1000, 1000, 10), ResourceVector(gpu=8))])
    room = WaitingRoom()
    for k in "abcde":
        room.park(k, Need("f", CLIQUE, 1, 4))
    assert room.freed(snap, free(snap, "big", gpus=8)) == ["a", "b"]
    room.park("a", Need("f", CLIQUE, 1, 4))  # its speed floor refused the node: parked again
    assert room.reoffer(snap) == ["c"]  # a's share goes to the next, not back to a; b, undecided, keeps its own
    snap.reserve("big", ResourceVector(gpu=4))  # b was placed
    room.decided("b")
    assert room.reoffer(snap) == []  # nothing left: b took its share
    room.park("c", Need("f", CLIQUE, 1, 4))
    assert room.reoffer(snap) == ["d"]
    room.park("d", Need("f", CLIQUE, 1, 4))
    assert room.reoffer(snap) == ["e"]
    room.park("e", Need("f", CLIQUE, 1, 4))
    assert room.reoffer(snap) == [] and room.owed() == set()  # everyone had a look: each woken once
    assert room.parked() == ["a", "c", "d", "e"]
    snap.release("big", ResourceVector(gpu=4))  # new room: everyone may have it again
    assert room.freed(snap, [snap.node_index["big"]]) == ["a", "c"]


def test_room_taken_by_a_placed_workload_is_not_offered_again() -> None:
    snap = Snapshot("f", [Level(CLIQUE, 1800)], [NodeInfo("big", {CLIQUE: "c"}, ResourceVector(8, 1000, 1000, 10), ResourceVector(gpu=8))])
    room = WaitingRoom()
    for k in "abc":
        room.park(k, Need("f", CLIQUE, 1, 4))
    assert room.freed(snap, free(snap, "big", gpus=8)) == ["a", "b"]
    snap.reserve("big", ResourceVector(gpu=8))  # both placed
    room.decided("a")
    room.park("b", Need("f", CLIQUE, 1, 4))  # say b parked again and something else took its GPUs
    assert room.reoffer(snap) == [] and room.owed() == set() and room.parked() == ["c", "b"]


def test_workloads_of_different_pod_sizes_share_one_nodes_budget() -> None:
    snap, room = cluster(), WaitingRoom()
    room.park("wide", Need("f", SU, 2, 4))
    room.park("small", Need("f", CLIQUE, 2, 2))
    room.park("also", Need("f", CLIQUE, 1, 4))
    # two free nodes in u0c0: wide takes both, so neither island Workload is woken
    assert room.freed(snap, free(snap, "u0c0n0", "u0c0n1")) == ["wide"]
    assert room.parked() == ["small", "also"]


def test_room_a_woken_workload_that_leaves_undecided_hands_its_share_on() -> None:
    """Deleted (or no longer Atoll's) before its decision: the room it was woken for goes to the
    next parked Workload, as if it had been decided elsewhere."""
    snap = Snapshot("f", [Level(CLIQUE, 1800)], [NodeInfo("big", {CLIQUE: "c"}, ResourceVector(8, 1000, 1000, 10), ResourceVector(gpu=8))])
    room = WaitingRoom()
    for k in "abc":
        room.park(k, Need("f", CLIQUE, 1, 8))
    assert room.freed(snap, free(snap, "big", gpus=8)) == ["a"]
    assert room.owed() == set()  # a is not decided yet: nothing to offer again
    room.leave("a")  # deleted
    assert room.reoffer(snap) == ["b"] and room.parked() == ["c"]
    room.leave("c")  # a parked one leaving hands on nothing
    assert room.owed() == set()

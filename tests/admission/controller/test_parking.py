"""Parking (``decisions.park_waiting``): a Workload waiting for a domain keeps Atoll's check
Pending, is not decided again as time passes or on its own writes, and is decided again when a
pod leaving a node gives one domain room for it, when its relax deadline passes, when a user
patches its limit, or after a restart (the room is rebuilt from API state)."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import Controller, DecisionSettings
from admission.controller._parking import Parking
from admission.queue import Reservation, Running
from tests.admission.controller.test_queue_state import finished_at
from tests.admission.controller.test_watch_loop import wait_until
from tests.admission.fabric import BLOCK, CLIQUE, GROUP, VERSION, Fabric, planned, profiles_doc, run
from tests.kube_objects import workload

pytestmark = pytest.mark.apiserver


def parking(fabric: Fabric):  # type: ignore[no-untyped-def]
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(park_waiting=True)})
    return fabric.controller(settings=settings)


def busy(fabric: Fabric) -> None:
    """Every island keeps one of its two 4-GPU nodes busy; island b0c0's busy node holds two 2-GPU pods."""
    fabric.bind_pod("busy-b0c0-a", fabric.node_name(0, 0, 0), 2)
    fabric.bind_pod("busy-b0c0-b", fabric.node_name(0, 0, 0), 2)
    for b, c in ((0, 1), (1, 0), (1, 1)):
        fabric.bind_pod(f"busy-b{b}c{c}", fabric.node_name(b, c, 0), 4)


def test_a_parked_strict_gang_is_decided_again_only_when_an_island_has_room(fabric: Fabric) -> None:
    fabric.install()
    busy(fabric)
    ctrl = parking(fabric)
    fabric.submit("gang", [("main", 2, 4)])  # 8 GPUs: one whole island
    (first,) = run(ctrl)
    entry = fabric.entry("gang")
    assert first.outcome == "wait" and first.parked and entry["state"] == "Pending" and "requeueAfterSeconds" not in entry
    assert "largest fits 1" in entry["message"]
    cond = [c for c in fabric.workload("gang")["status"]["conditions"] if c["type"] == "atoll.dev/TopologyWaiting"]
    assert [c["status"] for c in cond] == ["True"]
    rv = fabric.workload("gang")["metadata"]["resourceVersion"]
    fabric.clock.advance(3600)  # far past any backoff: time alone decides nothing
    assert run(ctrl) == []
    fabric.core.delete_namespaced_pod("busy-b1c1", fabric.ns, grace_period_seconds=0)  # island b1c1 now has two free nodes
    fabric.core.delete_namespaced_pod("busy-b0c0-a", fabric.ns, grace_period_seconds=0)  # b0c0: 2 GPUs freed, still no room for a second pod
    (woken,) = run(ctrl)
    entry = fabric.entry("gang")
    assert woken.outcome == "admit" and entry["state"] == "Ready"
    assert entry["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: fabric.clique(1, 1)}
    assert fabric.workload("gang")["metadata"]["resourceVersion"] != rv
    assert len(fabric.decision_records()) == 2


def test_freed_room_too_small_for_the_gang_wakes_nothing(fabric: Fabric) -> None:
    fabric.install()
    busy(fabric)
    ctrl = parking(fabric)
    fabric.submit("gang", [("main", 2, 4)])
    run(ctrl)
    fabric.core.delete_namespaced_pod("busy-b0c0-a", fabric.ns, grace_period_seconds=0)  # node b0c0n0 keeps 2 GPUs busy: one free node in b0c0
    assert run(ctrl) == [] and len(fabric.decision_records()) == 1
    fabric.finish_pod("busy-b0c0-b")  # a pod that succeeds stops holding its node too
    (woken,) = run(ctrl)
    assert woken.outcome == "admit" and fabric.entry("gang")["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: fabric.clique(0, 0)}


def test_a_restart_decides_a_parked_workload_once_and_parks_it_again(fabric: Fabric) -> None:
    fabric.install()
    busy(fabric)
    fabric.submit("gang", [("main", 2, 4)])
    run(parking(fabric))
    again = parking(fabric)  # a new leader: empty room, the Workload still Pending
    (verdict,) = run(again)
    assert verdict.outcome == "wait" and fabric.entry("gang")["state"] == "Pending"
    assert run(again) == [] and len(fabric.decision_records()) == 2


def test_an_elastic_gang_parked_before_its_relax_time_spans_when_the_deadline_passes(fabric: Fabric) -> None:
    fabric.install()
    busy(fabric)
    ctrl = parking(fabric)
    fabric.submit("gang", [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}})
    (first,) = run(ctrl)
    assert first.outcome == "wait" and first.reason == "relax-pending" and fabric.entry("gang")["state"] == "Pending"
    fabric.clock.advance(299)
    assert run(ctrl) == []
    fabric.clock.advance(1)
    (late,) = run(ctrl)
    entry = fabric.entry("gang")
    assert late.outcome == "admit" and late.relaxed and entry["state"] == "Ready"
    (label, _), = entry["podSetUpdates"][0]["nodeSelector"].items()
    assert label == BLOCK and len(planned(entry)) == 2


def test_in_one_controller_a_workload_of_a_parking_profile_parks_and_one_of_another_profile_gets_a_retry(fabric: Fabric) -> None:
    """``queueing.parkWaiting`` is the profile's: with no override (``decisions.park_waiting`` None,
    the default) the gang of the parking profile parks, keeps its entry Pending and gives its quota
    back to a Workload waiting for quota; the gang of the other profile goes to Retry."""
    from admission import vocabulary
    from tests.admission.controller.test_yielding import active, waiter, yielded_to

    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["parked"] = {"requiredLevel": CLIQUE, "queueing": {"parkWaiting": True}}
    fabric.install(doc)
    busy(fabric)
    ctrl = fabric.controller()
    assert ctrl.settings.decisions.park_waiting is None
    fabric.submit("parks", [("main", 2, 4)], podset_annotations={"main": {vocabulary.PROFILE: "parked"}})
    fabric.submit("retries", [("main", 2, 4)])  # the default profile, strict: no parkWaiting
    verdicts = {v.profile: v for v in run(ctrl)}
    assert verdicts["parked"].outcome == verdicts["strict"].outcome == "wait"
    assert verdicts["parked"].parked and not verdicts["strict"].parked
    assert fabric.entry("parks")["state"] == "Pending" and "requeueAfterSeconds" not in fabric.entry("parks")
    assert fabric.entry("retries")["state"] == "Retry" and fabric.entry("retries")["requeueAfterSeconds"] == 30
    assert f"{fabric.ns}/parks" in ctrl.parking and f"{fabric.ns}/retries" not in ctrl.parking
    waiter(fabric, "late")
    run(ctrl)
    assert not active(fabric, "parks") and yielded_to(fabric, "parks") == f"{fabric.ns}/late"  # the parked one gives its quota back
    assert active(fabric, "retries") and yielded_to(fabric, "retries") is None


@pytest.mark.parametrize("override", [True, False])
def test_the_controllers_park_waiting_wins_over_every_profile(fabric: Fabric, override: bool) -> None:
    """``atoll run --park-waiting`` parks the waits of a profile without ``parkWaiting``;
    ``--no-park-waiting`` sends those of a profile with it to Retry."""
    from admission import vocabulary

    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["parked"] = {"requiredLevel": CLIQUE, "queueing": {"parkWaiting": True}}
    fabric.install(doc)
    busy(fabric)
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(park_waiting=override)})
    ctrl = fabric.controller(settings=settings)
    fabric.submit("parks", [("main", 2, 4)], podset_annotations={"main": {vocabulary.PROFILE: "parked"}})
    fabric.submit("retries", [("main", 2, 4)])
    verdicts = run(ctrl)
    assert len(verdicts) == 2 and all(v.outcome == "wait" and v.parked is override for v in verdicts)
    assert {fabric.entry(n)["state"] for n in ("parks", "retries")} == {"Pending" if override else "Retry"}


def test_a_freed_node_wakes_only_as_many_parked_as_it_holds_and_one_parked_again_passes_the_room_on(fabric: Fabric) -> None:
    """One island of three 4-GPU nodes, the first tainted, every node busy; four 4-GPU Workloads
    park, the oldest without the taint's toleration. The tainted node frees: its GPUs hold one
    pod, so only the oldest is woken; it cannot use the node and parks again, and the room goes
    to the next (which tolerates it), not to all of them: the last two see no decision write."""
    from tests.admission.controller.test_node_health import TAINT

    fabric.add_node(0, 0, 0, taints=[TAINT])
    fabric.add_node(0, 0, 1)
    fabric.add_node(0, 0, 2)
    fabric.install(nodes=False)
    for i in range(3):
        fabric.bind_pod(f"busy{i}", fabric.node_name(0, 0, i), 4)
    ctrl = parking(fabric)
    tolerates = [{"key": TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    fabric.submit("intolerant", [("main", 1, 4)])
    run(ctrl)
    for name in ("t1", "t2", "t3"):
        fabric.submit(name, [("main", 1, 4)], tolerations=tolerates)
        run(ctrl)
    assert all(fabric.entry(n)["state"] == "Pending" for n in ("intolerant", "t1", "t2", "t3"))
    assert len(fabric.decision_records()) == 4
    rv = {n: fabric.workload(n)["metadata"]["resourceVersion"] for n in ("t2", "t3")}

    fabric.core.delete_namespaced_pod("busy0", fabric.ns, grace_period_seconds=0)  # the tainted node frees
    verdicts = run(ctrl)
    assert [(v.outcome, v.parked) for v in verdicts] == [("wait", True), ("admit", False)]
    assert fabric.entry("intolerant")["state"] == "Pending" and fabric.entry("t1")["state"] == "Ready"
    assert planned(fabric.entry("t1")) == {fabric.node_name(0, 0, 0): 1}
    assert {n: fabric.workload(n)["metadata"]["resourceVersion"] for n in ("t2", "t3")} == rv  # still parked, nothing written
    assert len(fabric.decision_records()) == 6 and f"{fabric.ns}/t2" in ctrl.parking and f"{fabric.ns}/t3" in ctrl.parking

    decision = fabric.entry("t1")["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"]
    fabric.bind_pod("t1-0", fabric.node_name(0, 0, 0), 4, decision_id=decision)  # the scheduler binds t1 where Atoll planned
    fabric.core.delete_namespaced_pod("busy1", fabric.ns, grace_period_seconds=0)  # the next room frees: the next in the room's order
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and fabric.entry("t2")["state"] == "Ready"
    assert fabric.workload("t3")["metadata"]["resourceVersion"] == rv["t3"] and len(fabric.decision_records()) == 7


@pytest.mark.parametrize("gone", ["deleted", "finished"])
def test_a_woken_workload_that_leaves_before_its_decision_hands_the_room_to_the_next_parked(fabric: Fabric, gone: str) -> None:
    """One 4-GPU node busy; two 4-GPU Workloads park on it. The busy pod ends: its room holds one
    pod, so only the older is woken. It goes before it is decided (deleted; or finished, so no
    longer Atoll's to decide): the room passes to the next, which is admitted on the node in the
    same round, instead of waiting for another pod to end with the node free."""
    fabric.add_node(0, 0, 0)
    fabric.install(nodes=False)
    fabric.bind_pod("busy", fabric.node_name(0, 0, 0), 4)
    ctrl = parking(fabric)
    for name in ("first", "next"):
        fabric.submit(name, [("main", 1, 4)])
        run(ctrl)
    assert {fabric.entry(n)["state"] for n in ("first", "next")} == {"Pending"} and len(fabric.decision_records()) == 2

    fabric.core.delete_namespaced_pod("busy", fabric.ns, grace_period_seconds=0)
    ctrl.sync()  # the node's room wakes the older only
    assert f"{fabric.ns}/first" not in ctrl.parking and f"{fabric.ns}/next" in ctrl.parking
    if gone == "deleted":
        fabric.custom.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", fabric.ns, "workloads", "first")
    else:
        fabric.finish("first")
    ctrl.sync()
    (verdict,) = ctrl.process()
    assert verdict.outcome == "admit" and fabric.entry("next")["state"] == "Ready"
    assert planned(fabric.entry("next")) == {fabric.node_name(0, 0, 0): 1}


def park_gang_one_pair(fabric: Fabric, ctrl: Controller) -> tuple[str, Reservation | None]:
    """Submit and park, in turn, a 2 × 4-GPU gang (which reserves), a 1 × 4-GPU Workload and a
    2 × 4-GPU one; the gang's key and its reservation."""
    for name, pods in (("gang", 2), ("one", 1), ("pair", 2)):
        fabric.submit(name, [("main", pods, 4)])
        (verdict,) = run(ctrl)
        assert verdict.outcome == "wait" and verdict.parked, (name, verdict.message)
    key = f"{fabric.ns}/gang"
    return key, ctrl.queue_state.outlook.reservations.held_by(key)


def test_a_suspended_reservation_wakes_only_the_parked_its_gpus_hold_and_only_while_it_is_suspended(fabric: Fabric) -> None:
    """Three islands full, the fourth half full; a parked 2 × 4-GPU gang reserves that island
    (its free node among the nodes it reserves); a 1 × 4-GPU Workload parks behind the
    reservation, a 2 × 4-GPU one for want of an island. The gang loses its quota (Kueue's
    preemption) and gets it back before the next decision: nothing was free for anyone meanwhile,
    so nobody is decided again. It loses it again: the reserved free node holds the 1-pod
    Workload, which is woken and placed there; the 2-pod one is not decided again."""
    from tests.admission.controller.test_queue_state import submit as submit_limited

    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["queueing"] = {"reserveAfterSeconds": 0}
    fabric.install(doc)
    ctrl = parking(fabric)
    for i in range(3):
        fabric.submit(f"full-{i}", [("main", 2, 4)])
    submit_limited(fabric, "half", 1, limit=3600)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 4
    key, held = park_gang_one_pair(fabric, ctrl)
    assert held is not None and set(planned(fabric.entry("half"))) < {n for n, _ in held.nodes}
    decided = len(fabric.decision_records())

    fabric.kueue.preempt(fabric.ns, "gang")
    ctrl.sync()  # seen: suspended
    assert ctrl.queue_state.outlook.reservations.suspended(key)
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    ctrl.sync()  # quota again before any decision: in force again
    assert ctrl.process() == [] and len(fabric.decision_records()) == decided
    assert f"{fabric.ns}/one" in ctrl.parking and f"{fabric.ns}/pair" in ctrl.parking

    fabric.kueue.preempt(fabric.ns, "gang")
    (one,) = run(ctrl)  # the reserved free node is open now, and holds the 1-pod Workload only
    assert one.outcome == "admit" and set(planned(fabric.entry("one"))) <= {n for n, _ in held.nodes}
    assert f"reservations suspended, their holders hold no quota, so they block nobody: {key}" in fabric.entry("one")["message"]
    assert [(r["workload"], r["outcome"]) for r in fabric.decision_records()[decided:]] == [("one", "admit")]  # not the pair


def test_an_ended_reservation_wakes_only_the_parked_its_gpus_hold(fabric: Fabric) -> None:
    """Three islands full, the fourth with one free node; a parked 2 × 4-GPU gang reserves that
    island (its free node among the nodes it reserves); a 1 × 4-GPU Workload parks behind the
    reservation, a 2 × 4-GPU one for want of an island. Island b0c1 frees whole: the gang, parked
    first, is woken and placed there, and its reservation ends. Before the next decision what it
    held is offered as freed room (``wake_released``, the simulator's rule too): its free node
    holds the 1-pod Workload, which is woken and placed there. The 2-pod one, refused a
    reservation (the flavor held its one), is woken for the slot the ended reservation leaves,
    and reserves; it is not placed (no island holds it)."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["queueing"] = {"reserveAfterSeconds": 0}
    fabric.install(doc)
    for b, c, i in ((0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0)):
        fabric.bind_pod(f"busy-b{b}c{c}n{i}", fabric.node_name(b, c, i), 4)
    ctrl = parking(fabric)
    key, held = park_gang_one_pair(fabric, ctrl)
    assert held is not None and fabric.node_name(1, 1, 1) in dict(held.nodes)
    decided = len(fabric.decision_records())

    for i in (0, 1):
        fabric.core.delete_namespaced_pod(f"busy-b0c1n{i}", fabric.ns, grace_period_seconds=0)
    (gang,) = run(ctrl)  # the freed island holds the gang, parked first, and nobody after it
    assert gang.outcome == "admit" and fabric.entry("gang")["podSetUpdates"][0]["nodeSelector"] == {CLIQUE: fabric.clique(0, 1)}
    assert ctrl.queue_state.outlook.reservations.held_by(key) is None
    one, pair = ctrl.process()  # before the next decision: the reservation's free node, offered; its slot, to the gang refused one
    assert one.outcome == "admit" and planned(fabric.entry("one")) == {fabric.node_name(1, 1, 1): 1}
    assert [(r["workload"], r["outcome"]) for r in fabric.decision_records()[decided:]] == [("gang", "admit"), ("one", "admit"),
                                                                                             ("pair", "wait")]
    assert ctrl.queue_state.outlook.reservations.held_by(f"{fabric.ns}/pair") is not None
    assert f"{fabric.ns}/pair" in ctrl.parking


def submit_gpus(fabric: Fabric, name: str, gpus: int, limit: int | None = None) -> None:
    """A 1-pod Workload of ``gpus`` GPUs (``limit``: its maximumExecutionTimeSeconds), quota reserved."""
    manifest = workload(fabric.ns, name, [("main", 1, gpus)])
    if limit is not None:
        manifest["spec"]["maximumExecutionTimeSeconds"] = limit
    fabric.kueue.create(manifest)
    fabric.kueue.reserve_quota(fabric.ns, name, fabric.cq, fabric.flavor)


def start(fabric: Fabric, name: str, gpus: int) -> None:
    """Bind the pods of admitted ``name`` (``gpus`` GPUs each) to its planned nodes, as the scheduler would."""
    entry = fabric.entry(name)
    decision = entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"]
    nodes = [n for n, pods in sorted(planned(entry).items()) for _ in range(pods)]
    for i, node in enumerate(nodes):
        fabric.bind_pod(f"{name}-{i}", node, gpus, decision_id=decision)


def test_a_moved_reservation_wakes_the_parked_the_nodes_it_left_hold(fabric: Fabric) -> None:
    """Four cliques full but one node of clique A, whose Workload has no limit (so A's free time
    is unknown); clique B holds a 600 s Workload on one node and, on the other, a 600 s 2-GPU
    Workload and a 2-GPU one without a limit. A 2 × 4-GPU gang (``soonestFree``, margin 1,800 s;
    it may span a block after an hour) reserves A, fewest to drain; two strict 1 × 4-GPU
    Workloads park behind the reservation (no limit ends before an unknown time, so neither
    backfills). B's unlimited Workload ends (2 GPUs: no room for a 4-GPU pod, nobody is woken).
    At its relax deadline the gang is decided again (no block has two free nodes: it waits) and
    moves its reservation to B, now expected free sooner. The node it left in A blocks nobody
    now: before the next decision it is offered as freed room, and the older 1-pod Workload is
    woken and placed there; the younger one is not. Before, a move offered nothing: both stayed
    parked with A's node free."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["moving"] = {"preferredLevel": CLIQUE, "maxSpanLevel": BLOCK, "relaxAfterSeconds": 3600, "queueing": {
        "reserveAfterSeconds": 0, "reserveTarget": "soonestFree", "retargetMarginSeconds": 1800}}
    fabric.install(doc)
    ctrl = parking(fabric)
    for name, gpus, limit in (("b-soon", 4, 600), ("b-long", 2, None), ("b-short", 2, 600)):
        submit_gpus(fabric, name, gpus, limit)
        assert [v.outcome for v in run(ctrl)] == ["admit"]
        start(fabric, name, gpus)
    for name, pods in (("c", 2), ("d", 2), ("a", 1)):
        fabric.submit(name, [("main", pods, 4)])
        assert [v.outcome for v in run(ctrl)] == ["admit"]
        start(fabric, name, 4)
    cliques = {fabric.node_name(b, c, i): fabric.clique(b, c) for b in (0, 1) for c in (0, 1) for i in (0, 1)}
    on = {name: next(iter(planned(fabric.entry(name)))) for name in ("b-soon", "b-long", "b-short", "a")}
    assert on["b-long"] == on["b-short"] != on["b-soon"] and cliques[on["b-soon"]] == cliques[on["b-long"]] != cliques[on["a"]]
    key = f"{fabric.ns}/gang"
    fabric.submit("gang", [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/profile": "moving"}})
    (gang,) = run(ctrl)
    held = ctrl.queue_state.outlook.reservations.held_by(key)
    assert gang.outcome == "wait" and held is not None and held.path[-1] == cliques[on["a"]], gang.message
    (a_free,) = set(dict(held.nodes)) - {on["a"]}
    for name in ("one", "two"):
        fabric.submit(name, [("main", 1, 4)])
        (verdict,) = run(ctrl)
        assert verdict.outcome == "wait" and verdict.parked, (name, verdict.message)

    fabric.finish("b-long")
    fabric.core.delete_namespaced_pod("b-long-0", fabric.ns, grace_period_seconds=0)
    assert run(ctrl) == []  # 2 GPUs free: no room for any parked Workload
    decided = len(fabric.decision_records())
    fabric.clock.advance(3600)
    (moved,) = run(ctrl)  # the gang's relax deadline
    now = ctrl.queue_state.outlook.reservations.held_by(key)
    assert moved.outcome == "wait" and f"moved from {'/'.join(held.path)}" in moved.message, moved.message
    assert now is not None and now.path[-1] == cliques[on["b-soon"]]
    (one,) = ctrl.process()  # before the next decision: the node the reservation left, offered
    assert one.outcome == "admit" and planned(fabric.entry("one")) == {a_free: 1}
    assert [(r["workload"], r["outcome"]) for r in fabric.decision_records()[decided:]] == [("gang", "wait"), ("one", "admit")]
    assert f"{fabric.ns}/two" in ctrl.parking


def test_a_freed_node_that_an_admitted_workload_still_owes_wakes_nobody(fabric: Fabric) -> None:
    """``first`` is admitted onto n0 and, before its pod binds, a pod Atoll did not place takes
    n0; ``second`` parks (n1 is busy too). When that pod ends, n0 is free on the nodes but owed
    to ``first``: nobody is woken (a decision would find no room). When n1 frees, ``second`` is."""
    n0, n1 = fabric.add_node(0, 0, 0), fabric.add_node(0, 0, 1)
    fabric.install(nodes=False)
    fabric.bind_pod("busy1", n1, 4)
    ctrl = parking(fabric)
    fabric.submit("first", [("main", 1, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and planned(entry := fabric.entry("first")) == {n0: 1}
    fabric.bind_pod("intruder", n0, 4)
    fabric.submit("second", [("main", 1, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait" and verdict.parked
    records = len(fabric.decision_records())

    fabric.core.delete_namespaced_pod("intruder", fabric.ns, grace_period_seconds=0)
    assert run(ctrl) == [] and len(fabric.decision_records()) == records and f"{fabric.ns}/second" in ctrl.parking
    fabric.bind_pod("first-0", n0, 4, decision_id=entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])
    fabric.core.delete_namespaced_pod("busy1", fabric.ns, grace_period_seconds=0)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit" and planned(fabric.entry("second")) == {n1: 1}


def learned(fabric: Fabric, names: list[str], seconds: float) -> None:
    """1 × 4-GPU Workloads of the test's queue that ran ``seconds`` each and succeeded, as the
    controller sees Workloads another leader ran: the runtime it learns for the queue."""
    t0 = fabric.clock.now() - seconds
    for name in names:
        fabric.kueue.create(workload(fabric.ns, name, [("main", 1, 4)]))
        finished_at(fabric, name, t0, t0 + seconds)


def one_clique_open(fabric: Fabric) -> Controller:
    """Profile ``gang`` (a clique preferred, a block after an hour, reserves at once) installed; a
    parking controller that learned the test's queue runs 1,000 s; every clique but b0c0 full
    (pods Atoll did not place)."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["gang"] = {"preferredLevel": CLIQUE, "maxSpanLevel": BLOCK, "relaxAfterSeconds": 3600,
                               "queueing": {"reserveAfterSeconds": 0}}
    fabric.install(doc)
    ctrl: Controller = parking(fabric)
    learned(fabric, ["done-0", "done-1", "done-2"], 1000.0)
    run(ctrl)
    for b, c, i in ((0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)):
        fabric.bind_pod(f"busy-b{b}c{c}n{i}", fabric.node_name(b, c, i), 4)
    return ctrl


def gang_reserves_b0c0(fabric: Fabric, ctrl: Controller, gpus: int) -> tuple[Reservation, Running]:
    """Gang ``gang`` (2 pods of ``gpus`` GPUs, profile ``gang``) waits and reserves clique b0c0,
    expected free when ``blocker`` (running there, its learned runtime 1,000 s) ends: the
    reservation and the blocker's run."""
    started = ctrl.queue_state.outlook.running(f"{fabric.ns}/blocker")
    assert started is not None
    fabric.submit("gang", [("main", 2, gpus)], podset_annotations={"main": {"atoll.dev/profile": "gang"}})
    (gang,) = run(ctrl)
    held = ctrl.queue_state.outlook.reservations.held_by(f"{fabric.ns}/gang")
    assert gang.outcome == "wait" and held is not None and held.path[-1] == fabric.clique(0, 0), gang.message
    assert held.expected_free == started.started + 1000.0
    return held, started


def test_a_reservation_expected_free_later_wakes_the_parked_workload_that_backfills_now(fabric: Fabric) -> None:
    """Three cliques are full (pods Atoll did not place); in clique b0c0 one node runs ``blocker``,
    of the test's queue, whose runtime was learned as 1,000 s, and the other is free. A 2 × 4-GPU
    gang reserves b0c0, expected free when ``blocker`` ends. ``one`` (1 × 4 GPUs, limit 1,500 s)
    would end after that, so it may not backfill the free node and parks; ``none`` (no limit)
    parks too. Then runs of the queue turn out far longer (the learned runtime grows to 10,500 s).
    At its relax deadline, an hour on, the gang is decided again (no block has room to span):
    same nodes, expected free 10,500 s after ``blocker`` started. Before the next decision the
    controller offers the reserved nodes to the parked Workloads that may backfill now and could
    not before: ``one`` (it ends 5,100 s after ``blocker`` started) is woken and placed on the free
    node; ``none`` is not. Before, the reservation kept its nodes, so nothing was offered: ``one``
    stayed parked with the node free."""
    ctrl = one_clique_open(fabric)
    est = ctrl.queue_state.outlook.estimator.estimate(f"{fabric.ns}/lq", 4)
    assert est is not None and est.seconds == 1000.0
    fabric.submit("blocker", [("main", 1, 4)])
    assert [v.outcome for v in run(ctrl)] == ["admit"]
    start(fabric, "blocker", 4)
    assert run(ctrl) == []
    (busy_node,) = planned(fabric.entry("blocker"))
    key = f"{fabric.ns}/gang"
    held, started = gang_reserves_b0c0(fabric, ctrl, 4)
    submit_gpus(fabric, "one", 4, limit=1500)
    submit_gpus(fabric, "none", 4)
    assert [(v.outcome, v.parked) for v in run(ctrl)] == [("wait", True), ("wait", True)]

    learned(fabric, ["long-0", "long-1", "long-2"], 20000.0)
    assert run(ctrl) == []  # what is learned wakes nobody
    decided = len(fabric.decision_records())
    fabric.clock.advance(3600)
    (again,) = run(ctrl)  # the gang's relax deadline
    later = ctrl.queue_state.outlook.reservations.held_by(key)
    assert again.outcome == "wait" and later is not None and later.nodes == held.nodes, again.message
    assert later.expected_free == started.started + 10500.0
    (one,) = ctrl.process()  # before the next decision: the reserved nodes, offered to who may backfill them now
    (free_node,) = {n for n, _ in held.nodes} - {busy_node}
    assert one.outcome == "admit" and planned(fabric.entry("one")) == {free_node: 1}
    assert [(r["workload"], r["outcome"]) for r in fabric.decision_records()[decided:]] == [("gang", "wait"), ("one", "admit")]
    assert f"{fabric.ns}/none" in ctrl.parking


@pytest.mark.parametrize("seen", ["relisted", "watched"])
def test_a_parked_workload_whose_limit_is_patched_shorter_is_decided_again_and_backfills(fabric: Fabric, seen: str) -> None:
    """A 2 × 4-GPU gang reserves clique b0c0, expected free when ``blocker`` ends (1,000 s after it
    started); ``short`` and ``steady`` (1 × 4 GPUs, limit 1,500 s) would end after that, so they may
    not backfill b0c0's free node and park. A user patches ``short``'s limit to 600 s: the
    controller sees the Workload change (in a relist, or from its watch), decides it again, and it
    backfills the free node. ``steady``, whose labels change but not its spec, is not decided again."""
    ctrl = one_clique_open(fabric)
    fabric.submit("blocker", [("main", 1, 4)])
    assert [v.outcome for v in run(ctrl)] == ["admit"]
    start(fabric, "blocker", 4)
    assert run(ctrl) == []
    (busy_node,) = planned(fabric.entry("blocker"))
    held, _ = gang_reserves_b0c0(fabric, ctrl, 4)
    submit_gpus(fabric, "short", 4, limit=1500)
    submit_gpus(fabric, "steady", 4, limit=1500)
    assert [(v.outcome, v.parked) for v in run(ctrl)] == [("wait", True), ("wait", True)]
    assert run(ctrl) == []  # parked: nothing changed, nothing decided
    decided = len(fabric.decision_records())

    def patch(name: str, body: dict[str, Any]) -> None:
        fabric.custom.patch_namespaced_custom_object(GROUP, VERSION, fabric.ns, "workloads", name, body)

    if seen == "relisted":
        patch("steady", {"metadata": {"labels": {"team": "a"}}})
        assert run(ctrl) == []  # a change that is not its limit wakes nothing
        patch("short", {"spec": {"maximumExecutionTimeSeconds": 600}})
        (verdict,) = run(ctrl)
        assert verdict.outcome == "admit", verdict.message
    else:
        ctrl.start()
        try:
            assert ctrl.wait_synced(30)
            patch("steady", {"metadata": {"labels": {"team": "a"}}})
            patch("short", {"spec": {"maximumExecutionTimeSeconds": 600}})
            assert wait_until(lambda: fabric.entry("short").get("state") == "Ready")
        finally:
            ctrl.stop()
    (free_node,) = {n for n, _ in held.nodes} - {busy_node}
    assert planned(fabric.entry("short")) == {free_node: 1}
    assert [(r["workload"], r["outcome"]) for r in fabric.decision_records()[decided:]] == [("short", "admit")]
    assert f"{fabric.ns}/steady" in ctrl.parking and ctrl.queue_state.outlook.reservations.held_by(f"{fabric.ns}/gang") == held


def test_only_a_limit_change_of_a_workload_on_file_takes_it_out_and_only_a_parked_one_is_decided_again() -> None:
    from admission.controller import ClusterCache
    from admission.queue import Need

    def wl(limit: int | None, team: str = "a") -> dict[str, Any]:
        spec = {"queueName": "lq"} if limit is None else {"queueName": "lq", "maximumExecutionTimeSeconds": limit}
        return {"metadata": {"namespace": "ns", "name": "w", "labels": {"team": team}}, "spec": spec}

    room = Parking(ClusterCache(), override=True)
    for key in ("ns/parked", "ns/aside"):
        room.room.park(key, Need("f", CLIQUE, 1, 4, limit=1500.0))
    room.set_aside("ns/aside")
    assert room.limit_changed("ns/parked", wl(1500), wl(1500, team="b")) == []  # not its limit: stays parked
    assert room.limit_changed("ns/other", wl(1500), wl(600)) == []  # not on file: nothing to wake
    assert "ns/parked" in room and room.limit_changed("ns/parked", wl(1500), wl(600)) == ["ns/parked"]
    assert "ns/parked" not in room and room.room.need("ns/parked") is None
    assert room.limit_changed("ns/aside", wl(1500), wl(None)) == []  # it holds no quota: decided once it does
    assert room.room.need("ns/aside") is None and not room.is_aside("ns/aside")


def test_a_kept_reservation_is_expected_free_when_its_own_node_is_and_a_workload_ending_before_that_backfills(fabric: Fabric) -> None:
    """Three cliques are full (pods Atoll did not place). In clique b0c0, ``blocker`` (2 GPUs, of
    the test's queue, runtime learned as 1,000 s) runs on one node and ``short`` (4 GPUs, limit
    3,000 s) on the other. A 2 × 2-GPU gang, one node's worth, reserves b0c0's node expected free
    first: the blocker's. Runs of the queue then turn out far longer (learned runtime 10,500 s).
    At its relax deadline, an hour on, the gang is decided again and keeps the blocker's node,
    so it is expected free when the blocker is, 10,500 s after it started; not when ``short``'s
    node, the one it would choose now (overdue, so expected free now), is. ``fill`` (2 GPUs,
    limit 1,500 s) ends before that and is placed on the blocker's node by backfill. Before, the
    kept reservation took the time of the node it did not hold, and ``fill`` waited."""
    ctrl = one_clique_open(fabric)
    submit_gpus(fabric, "blocker", 2)
    assert [v.outcome for v in run(ctrl)] == ["admit"]
    start(fabric, "blocker", 2)
    submit_gpus(fabric, "short", 4, limit=3000)
    assert [v.outcome for v in run(ctrl)] == ["admit"]
    start(fabric, "short", 4)
    assert run(ctrl) == []
    (blocker_node,) = planned(fabric.entry("blocker"))
    assert set(planned(fabric.entry("short"))) != {blocker_node}
    key = f"{fabric.ns}/gang"
    held, started = gang_reserves_b0c0(fabric, ctrl, 2)
    assert held.nodes == ((blocker_node, 4),)

    learned(fabric, ["long-0", "long-1", "long-2"], 20000.0)
    assert run(ctrl) == []
    fabric.clock.advance(3600)
    (again,) = run(ctrl)  # the gang's relax deadline: no block has room to span
    later = ctrl.queue_state.outlook.reservations.held_by(key)
    assert again.outcome == "wait" and later is not None and later.nodes == held.nodes, again.message
    assert later.expected_free == started.started + 10500.0
    submit_gpus(fabric, "fill", 2, limit=1500)
    (fill,) = run(ctrl)
    assert fill.outcome == "admit" and planned(fabric.entry("fill")) == {blocker_node: 1}

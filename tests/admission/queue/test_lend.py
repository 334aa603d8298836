"""``queueing.lendParked``'s fit test (``fits_now``): the placement's own answer on the request a
parked Workload's decision searched, not a GPU count; and ``settle_givers``, the same test for a
giver an event reached."""

from __future__ import annotations

from admission.queue import Need, WaitingRoom, fits_now, settle_givers
from tests.admission.queue.test_room import CLIQUE, cluster, free
from topology import PlacementRequest, PodSetRequest, ResourceVector, Snapshot


def need(pods: int, per_pod: ResourceVector, *, level: str | None = CLIQUE, with_request: bool = True) -> Need:
    request = PlacementRequest((PodSetRequest("main", pods, per_pod, required_level=level),)) if with_request else None
    return Need("f", level, pods, per_pod.gpu, request=request)


def test_a_parked_request_fits_now_when_one_island_has_room_for_its_pods() -> None:
    snap = cluster()
    free(snap, "u0c0n0", "u0c0n1")  # 8 GPUs free in island u0c0, the rest in use
    assert fits_now(snap, need(2, ResourceVector(gpu=4, cpu_milli=100)))
    assert not fits_now(snap, need(3, ResourceVector(gpu=4, cpu_milli=100)))  # 12 GPUs in one island: none has them
    free(snap, "u1c0n0")  # 4 more GPUs, in another island: still no island with 12
    assert not fits_now(snap, need(3, ResourceVector(gpu=4, cpu_milli=100)))
    assert fits_now(snap, need(3, ResourceVector(gpu=4, cpu_milli=100), level=None))  # anywhere: 12 free GPUs will do


def test_the_placement_answers_where_the_gpu_count_would_say_yes() -> None:
    snap = cluster()
    free(snap, "u0c0n0", "u0c0n1")
    # the GPUs are free, but each node has 1,000 millicores: two pods of 4 GPUs and 2 CPUs do not fit
    assert not fits_now(snap, need(2, ResourceVector(gpu=4, cpu_milli=2000)))
    assert not fits_now(snap, need(2, ResourceVector(gpu=4, cpu_milli=100), with_request=False))  # nothing to ask: no lend


def test_a_need_of_another_flavor_never_fits() -> None:
    snap = cluster()
    free(snap, "u0c0n0", "u0c0n1")
    other = Need("g", CLIQUE, 2, 4, request=PlacementRequest((PodSetRequest("main", 2, ResourceVector(gpu=4), required_level=CLIQUE),)))
    assert not fits_now(snap, other)


def test_a_giver_an_event_reached_comes_back_only_when_its_placement_fits_now() -> None:
    """The rule both the simulator and the controller call: freed GPUs that the room's count says
    could hold the giver, but that its placement cannot use (each node has 1,000 millicores, the
    giver's pods ask 2,000), leave it aside; one whose placement fits leaves the room."""
    snap, room = cluster(), WaitingRoom(settle_by_fit=True)
    room.park("cpu-bound", need(2, ResourceVector(gpu=4, cpu_milli=2000)))
    room.park("fits", need(2, ResourceVector(gpu=4, cpu_milli=100)))
    room.park("elsewhere", Need("g", CLIQUE, 2, 4, request=need(2, ResourceVector(gpu=4)).request))
    for key in ("cpu-bound", "fits", "elsewhere"):
        room.set_aside(key)
    assert room.freed(snap, free(snap, "u0c0n0", "u0c0n1")) == []  # reaches both gangs of flavor f
    read: list[str] = []

    def room_now(flavor: str) -> Snapshot | None:
        read.append(flavor)
        return snap if flavor == "f" else None

    assert settle_givers(room, room_now) == ["fits"]
    assert read == ["f"]  # the flavor's snapshot read once, and only for the Workloads an event reached
    assert room.is_aside("cpu-bound") and not room.is_aside("fits") and room.is_aside("elsewhere")
    assert room.wake_flavor("g") == [] and settle_givers(room, room_now) == ["elsewhere"]  # its flavor cannot be read: a decision says why
    assert settle_givers(room, room_now) == []  # each event asked once: the cpu-bound giver waits for the next

"""The controller's side of the waiting room (``admission.queue``): which Workloads are parked,
and which cluster events wake them.

A Workload that waits for a domain, of a profile with ``queueing.parkWaiting: true`` (or of any
profile under ``atoll run --park-waiting``; none under ``--no-park-waiting``: ``decisions.park_waiting``
wins over the profile when set), keeps Atoll's check
``Pending`` (with the reason in its message and ``atoll.dev/TopologyWaiting=True``) instead of
going to ``Retry``. Kueue then keeps its quota reserved and neither evicts nor requeues it, as
for any check still at work (its own ProvisioningRequest check waits the same way), and Atoll
decides it again itself when something it waits for changes:

- a pod stops holding a node (deleted, failed or succeeded): the Workloads parked on that node's flavor,
  oldest first, that one domain holding the node has room for once those woken before them are
  counted against it (``WaitingRoom.freed``); one woken that parks again gives its share of the
  room to the next parked Workloads (``reoffer``, asked once it is decided);
- an admitted Workload goes away before its pods bound: every Workload parked on its flavors;
- a node or the profiles document changes: every parked Workload;
- a reservation is suspended (its holder lost its quota) and still is when the next decision is
  due: the parked Workloads the GPUs it held can hold (``suspended``);
- a reservation ends (its gang placed, rejected or gone), before the next decision
  (``released``): the parked Workloads the GPUs it held can hold; and, per reservation ended, the
  oldest gang parked on its flavor that was refused a reservation for the flavor's bound
  (``maxReservationsPerFlavor``), to take the freed slot, whether or not those GPUs hold it;
- a reservation moves (``released`` too): the parked Workloads the nodes it left can hold; and
  when its expected free time moves later, those whose ``maximumExecutionTimeSeconds`` now ends
  before it and did not before, which the nodes it still holds can hold (backfill);
- an elastic profile's relax deadline passes (``due``);
- its own ``spec.maximumExecutionTimeSeconds`` changes (``limit_changed``): a user may patch it
  while the Workload waits (Kueue's Workload webhook, ``ValidateWorkloadUpdate`` in
  ``pkg/webhooks/workload_webhook.go``, holds only ``podSets`` immutable once quota is reserved),
  and the limit decides whether it may backfill a reserved domain, and which moved reservation
  windows wake it (``Need.limit``, read when it parked). Any other change of the Workload wakes
  nothing. The simulator has no such event: a simulated job's limit never changes.

A parked Workload whose quota another Workload of its ClusterQueue or cohort waits for gives it
back (``_yielding``) and is set aside; when it holds quota again and nothing it waits for
changed (under ``decisions.quota_yield_back_when_fits``: no event let it fit, ``settle``), it is
parked again without a decision.

After a restart or a leader change the room is empty and every Pending Workload is decided once
more, then parked again: the room is rebuilt from API state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from admission.controller._cache import ClusterCache, FlavorProblem
from admission.controller._decide import Verdict
from admission.controller._queueing import max_execution_seconds
from admission.kube import Obj
from admission.queue import Reservations, WaitingRoom, settle_givers, wake_freed, wake_released, wake_suspended
from topology import Snapshot

__all__ = ["Parking"]


class Parking:
    def __init__(self, cache: ClusterCache, *, override: bool | None, settle_by_fit: bool = False, in_turn: bool = False,
                 turn_lead: float | None = None) -> None:
        self.cache = cache
        self.override = override
        """``decisions.park_waiting``: True parks every profile's waits, False none, None each as its profile says."""
        self.room = WaitingRoom(settle_by_fit=settle_by_fit, in_turn=in_turn, turn_lead=turn_lead)
        self.backoff: dict[str, int] = {}
        """The Retry delay (s) each parked Workload's wait gave: what it asks Kueue for when it gives its quota back."""

    def __contains__(self, key: str) -> bool:
        return key in self.room

    @property
    def enabled(self) -> bool:
        """Some Workload may park (a profile may ask for it unless parking is overridden off)."""
        return self.override is not False

    def parks(self, verdict: Verdict) -> bool:
        """Whether this verdict parks its Workload (``Verdict.waits_parked``: a wait for a domain, its profile or the override parks)."""
        return verdict.waits_parked(self.override)

    def park(self, key: str, verdict: Verdict) -> float | None:
        """Park ``key`` with the verdict's need; its deadline (epoch seconds), if any."""
        need = verdict.needs[0]
        self.room.park(key, need)
        self.backoff[key] = verdict.retry_after
        return need.deadline

    def parked(self) -> list[str]:
        """Parked Workloads (not those set aside), oldest first."""
        return [str(k) for k in self.room.parked()]

    def set_aside(self, key: str) -> None:
        """Parked ``key`` gave its quota back: its need stays on file (``WaitingRoom.set_aside``)."""
        self.room.set_aside(key)

    def is_aside(self, key: str) -> bool:
        """``key`` gave its quota back and its need is still on file (``WaitingRoom.is_aside``)."""
        return self.room.is_aside(key)

    def settle(self, room_now: Callable[[str], Snapshot | None]) -> list[str]:
        """Set-aside Workloads an event reached leave the room only if the placement they were
        parked on fits now (``settle_givers``, the simulator's rule too); the others stay aside."""
        return [str(k) for k in settle_givers(self.room, room_now)]

    def leave(self, key: str) -> None:
        self.room.leave(key)
        self.backoff.pop(key, None)

    def due(self, now: float) -> list[str]:
        return [str(k) for k in self.room.due(now)]

    def wake_all(self) -> list[str]:
        return [str(k) for k in self.room.wake_all()]

    def wake_flavors(self, flavors: Iterable[str]) -> list[str]:
        return [str(k) for f in sorted(set(flavors)) for k in self.room.wake_flavor(f)]

    def limit_changed(self, key: str, before: Obj, after: Obj) -> list[str]:
        """``key``'s Workload changed from ``before`` to ``after``: if its ``maximumExecutionTimeSeconds``
        did and it is on file, it leaves the room (its need carries the old limit) and, if parked,
        is returned to be decided again; one set aside (it gave its quota back) is decided afresh
        when it holds quota again, as after any event that reaches it."""
        if key not in self.room and not self.room.is_aside(key):
            return []
        if max_execution_seconds(before) == max_execution_seconds(after):
            return []
        parked = key in self.room
        self.leave(key)
        return [key] if parked else []

    def node_freed(self, node: str, room_now: Callable[[str], Snapshot | None]) -> list[str]:
        """A pod stopped holding ``node``: the parked Workloads a domain holding it now has room
        for, counted on ``room_now(flavor)`` (``wake_freed``, the simulator's rule too)."""
        if not len(self.room):
            return []
        out: list[str] = []
        for flavor in sorted(self.room.flavors()):
            try:
                snap = self.cache.snapshot(flavor)
            except (FlavorProblem, ValueError):
                out.extend(self.wake_flavors([flavor]))
                continue
            if node in snap.node_index:
                out.extend(str(k) for k in wake_freed(self.room, flavor, [snap.node_index[node]], room_now))
        return out

    def suspended(self, reservations: Reservations, room_now: Callable[[str], Snapshot | None]) -> list[str]:
        """Reservations suspended since the last call and suspended still: the parked Workloads the
        GPUs they held can hold (``wake_suspended``, the simulator's rule too), on ``room_now(flavor)``.
        Asked before each decision, so a holder that lost its quota and got it back in between wakes nobody."""
        return [str(k) for k in wake_suspended(self.room, reservations, room_now)]

    def released(self, reservations: Reservations, room_now: Callable[[str], Snapshot | None], now: float) -> list[str]:
        """Reservations ended since the last call (their gangs placed, rejected or gone): the parked
        Workloads the GPUs they held can hold, on ``room_now(flavor)``, then, per reservation ended,
        the oldest gang parked on its flavor that was refused a reservation for the flavor's bound,
        to take the freed slot; reservations moved: the nodes they left, and where the expected
        free time moved later, the nodes still held to the parked Workloads that may backfill them
        at ``now`` and could not before (``wake_released``, the simulator's rule too). Asked before each decision."""
        return [str(k) for k in wake_released(self.room, reservations, room_now, now)]

    def reoffer(self, room_now: Callable[[str], Snapshot | None]) -> list[str]:
        """Freed room that a Workload it woke was decided on (parked again, or placed maybe elsewhere):
        the next parked Workloads it can hold (``WaitingRoom.reoffer``) on ``room_now(flavor)``
        (what admitted Workloads still owe counted as used), asked after each decision."""
        out: list[str] = []
        for flavor in sorted(self.room.owed()):
            snap = room_now(flavor)
            if snap is None:
                out.extend(self.wake_flavors([flavor]))
                continue
            out.extend(str(k) for k in self.room.reoffer(snap))
        return out

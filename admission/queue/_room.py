"""The waiting room: Workloads that wait for a domain, parked until something they wait for changes.

Pure state, no clock and no API: the controller and the simulator feed it the same events and
ask it the same questions, so both re-decide the same Workloads at the same moments.

A Workload waits for room in one domain of a level (its profile's island level, the level a
strict gang was widened to, or the span level once an elastic profile has relaxed), or anywhere
in the flavor. It is parked with that ``Need`` and, if its profile relaxes on time, the
deadline at which it may span. It is woken, and decided again, only when

- capacity is freed in a domain of its level that now has at least the GPUs it needs there
  (fewer free GPUs than that is a proof it still cannot fit, so nothing is lost by not asking),
  and the Workloads parked before it have not taken that room: ``freed`` counts, oldest first,
  each Workload it wakes against the freed domain's free GPUs (whole pods per node), so a freed
  8-GPU node wakes two parked 4-GPU Workloads, not all of them;
- a reservation is suspended (its holder lost its quota) or ends (its gang placed, rejected or
  gone): the GPUs it would hold, or held, are offered as freed room
  (``admission.queue.wake_suspended``, ``wake_released``);
- its deadline passes (``due``);
- anything else changes that the GPU count cannot see (a node, the profiles, what admitted
  Workloads still owe): ``wake_flavor`` or ``wake_all``.

A parked Workload that gives its quota back (Kueue then evicts it) is ``set_aside``: its need
stays on file, and until one of those events touches it, it is ``unchanged``. When it holds
quota again it is parked again on the need it had, without being decided (the answer could not
have changed); an event that would have woken it takes it out instead, and it is decided afresh.
With ``in_turn`` (the controller's ``decisions.quota_yield_in_turn``, off by default)
freed room reaches the set-aside as it wakes the parked: counted against the room, after every
parked one, oldest first, so one pod's end drops as many needs as its room holds; one parked again
undecided may give its quota back again; and the oldest parked for a reservation of its flavor
keeps its quota (``may_give``).
With ``turn_lead`` (the controller's ``decisions.quota_yield_turn_lead_seconds``, off by default)
the first in line for a reservation keeps its quota only from that lead before the soonest
reservation of its flavor is expected free, and, if it gave it back, is served by givers from then
(``near_turn``, ``may_take``).
With ``settle_by_fit`` (the controller's ``decisions.quota_yield_back_when_fits``, off by
default) such an event only marks it reached; ``settle`` then asks the placement it was parked on
(the caller's fit test, ``admission.queue.settle_givers``): if it fits now, its need is dropped;
if not, it stays on file, as if no event had come. Without ``in_turn`` one parked again undecided
keeps its quota until it is decided afresh (``may_give``): a Workload gives its quota back at most
once per decision, so yields are bounded by decisions. While its need is on file (``is_aside``) one that
gave its quota back takes none from another parked Workload.

The GPU count is only a bound (speed floor, taints, reservations and pod shapes can still
refuse a Workload), so room counted for a woken Workload may be left unused. The invariant:
no Workload stays parked while a freed domain of its level has free GPUs it fits, beyond the
decisions of the Workloads woken before it. A flavor whose freed room left someone out is
owed a look: when a Workload that room woke is decided (parked again, it took none of the room;
placed, it may have gone elsewhere: ``decided``), ``reoffer`` (asked by the caller once it is
decided, on the snapshot as a decision would search it then, what admitted Workloads owe counted)
offers that room again, counted afresh, to the parked Workloads not yet woken by it, oldest
first; it closes once it leaves nobody out. A Workload woken by the room and parked again is
not offered the same room again until new room is freed, so a chain of N that park again
costs N decisions, not N².

So decisions grow with those events, not with waiting Workloads × time. Kueue does the same
with Workloads it found inadmissible: they are parked until a cluster event can change the
answer.

The module runs past 400 lines because the room is one state (needs by level and order, the
set-aside, the room owed and woken) that every event reads and changes; split, each part would
carry the others' indexes.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from topology import PlacementRequest, Snapshot

__all__ = ["Need", "WaitingRoom"]


@dataclass(frozen=True, slots=True)
class Need:
    """What a parked Workload waits for on one flavor: room for ``pods`` pods of ``gpus_per_pod``
    GPUs in one domain of ``level`` (a level label; None: anywhere in the flavor), or
    ``deadline`` (epoch seconds, None: none)."""

    flavor: str
    level: str | None
    pods: int
    gpus_per_pod: int
    deadline: float | None = None
    behind: str | None = None
    """Held behind this owed gang (``holdBehindGangs``): woken by ``wake_behind`` when the gang is
    owed no longer (or ``wake_flavor``, or the deadline); freed GPUs never wake it (it could go at
    once, and it must not)."""
    reserves: bool = field(default=False, compare=False)
    """A gang past ``reserveAfterSeconds`` that holds no reservation (the flavor's bound was
    reached): a reservation of its flavor that ends wakes it (``wake_reservers``), so the slot
    goes to a gang that waits for one, not to whichever is decided next. Not part of the need's
    identity."""
    request: PlacementRequest | None = field(default=None, compare=False, repr=False)
    """The placement request the decision that parked it searched (``queueing.lendParked`` asks it
    again: ``fits_now``); None: unknown. Not part of the need's identity."""
    limit: float | None = field(default=None, compare=False)
    """The Workload's ``maximumExecutionTimeSeconds`` (None: unset): a reservation whose expected
    free time moves later lets it backfill the reserved nodes only if it ends before the new time
    (``admission.queue.wake_released``). Not part of the need's identity."""

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


class WaitingRoom:
    """Parked Workloads by flavor and level, sorted by the GPUs they need (``Need``)."""

    def __init__(self, *, settle_by_fit: bool = False, in_turn: bool = False, turn_lead: float | None = None) -> None:
        self._settle_by_fit = settle_by_fit
        """An event drops a set-aside need only once ``settle`` finds it fits (else: at once)."""
        self._turn_lead = turn_lead
        """Seconds before a reservation of its flavor is expected free from which the first in line
        for one keeps its quota and is served first by givers (``near_turn``); None: never."""
        self._in_turn = in_turn
        """Set-aside Workloads counted against freed room after the parked; a give again without a decision;
        the first in line for a reservation keeps its quota (``may_give``)."""
        self._reservers: dict[Hashable, tuple[str, int]] = {}
        """Keys whose need waits for a reservation (``Need.reserves``): flavor and order parked. Few: gangs only."""
        self._needs: dict[Hashable, Need] = {}
        self._by_level: dict[tuple[str, str | None, int], list[tuple[int, int, Hashable]]] = {}
        self._deadlines: list[tuple[float, int, Hashable]] = []
        self._seq = 0
        self._order: dict[Hashable, int] = {}
        self._aside: set[Hashable] = set()
        """Keys set aside (quota given back): indexed so events find them, never returned by them."""
        self._kept: set[Hashable] = set()
        """Keys parked again undecided after giving their quota back: they keep it until decided afresh."""
        self._reached: set[Hashable] = set()
        """Keys set aside that an event reached since: their need is dropped only if they fit now (``settle``)."""
        self._owed: dict[str, set[str]] = {}
        """Flavor → names of freed nodes whose room left a parked Workload out: owed a look (``reoffer``)."""
        self._woken: dict[Hashable, tuple[Need, tuple[tuple[str, int], ...]]] = {}
        """Keys freed room woke, not decided since, in the order woken: their room stays counted against
        the freed domains (``freed``, ``reoffer``) until they are decided; parked again, they give it back."""
        self._tried: dict[str, set[Hashable]] = {}
        """Flavor → keys its owed room woke and that parked again: not offered the same room again."""
        self._again: set[str] = set()
        """Owed flavors a woken Workload parked again on since the last ``reoffer``."""
        self._limited: dict[str, int] = {}
        """Flavor → Workloads on file whose need carries a limit (``Need.limit``): only they may backfill by time."""

    def __len__(self) -> int:
        """Workloads on file: parked, or set aside (an event must still reach them)."""
        return len(self._needs)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._needs and key not in self._aside

    def need(self, key: Hashable) -> Need | None:
        return self._needs.get(key)

    def flavors(self) -> set[str]:
        """The flavors some parked Workload waits on."""
        return {n.flavor for n in self._needs.values()}

    def limited(self, flavor: str) -> bool:
        """Some Workload on file for ``flavor`` has a limit (``Need.limit``): a reservation's window
        that moves later can let it backfill (without one, none can, and nothing need be counted)."""
        return self._limited.get(flavor, 0) > 0

    def park(self, key: Hashable, need: Need) -> None:
        """Park ``key`` (again) with ``need``; a Workload parked before keeps only the new need. One
        that freed room of an owed flavor woke took none of it: that room is offered again (``reoffer``)."""
        woken = self._woken.pop(key, None)
        if woken is not None and woken[0].flavor in self._owed:
            self._tried.setdefault(woken[0].flavor, set()).add(key)
            self._again.add(woken[0].flavor)
        self.leave(key)
        self._seq += 1
        self._needs[key] = need
        self._order[key] = self._seq
        if need.limit is not None:
            self._limited[need.flavor] = self._limited.get(need.flavor, 0) + 1
        if need.reserves:
            self._reservers[key] = (need.flavor, self._seq)
        if need.behind is None:
            bisect.insort(self._by_level.setdefault((need.flavor, need.level, need.gpus_per_pod), []), (need.pods, self._seq, key))
        if need.deadline is not None:
            heapq.heappush(self._deadlines, (need.deadline, self._seq, key))

    def decided(self, key: Hashable) -> None:
        """``key`` was decided and not parked (admitted, rejected, sent to a Retry). If freed room of an
        owed flavor woke it, that room is offered again (``reoffer``): it may have gone elsewhere."""
        self._hand_on(key)

    def _hand_on(self, key: Hashable) -> None:
        woken = self._woken.pop(key, None)
        if woken is not None and woken[0].flavor in self._owed:
            self._again.add(woken[0].flavor)

    def parked(self) -> list[Hashable]:
        """The parked Workloads (not those set aside), in the order they were parked."""
        return [k for _, k in sorted((seq, k) for k, seq in self._order.items() if k not in self._aside)]

    def set_aside(self, key: Hashable) -> None:
        """Parked ``key`` gave its quota back (Kueue evicted it): its need stays on file,
        so ``unchanged`` tells whether anything it waits for changed before it holds quota again."""
        if key in self._needs:
            self._aside.add(key)
            self._reached.discard(key)

    def is_aside(self, key: Hashable) -> bool:
        """``key`` gave its quota back and its need is still on file: no event that would have woken
        it came since (under ``settle_by_fit``: none that let it fit, ``settle``). While so, waiting
        for quota again, it takes none from another parked Workload: holding quota, it would only
        park again undecided in the quota it took. One whose need an event dropped has left the
        room: it may fit now, and waits for quota as any Workload does. The one rule the simulator
        and the controller both ask (Kueue itself queues a reactivated Workload as any other, at
        its creation time)."""
        return key in self._aside

    def settle(self, fits: Callable[[Need], bool]) -> list[Hashable]:
        """The Workloads set aside that an event reached since the last call: each whose need
        ``fits`` (the placement it was parked on would succeed now) leaves the room, and is
        returned, oldest first; the others stay aside, their need on file, as if no event had come
        (taking quota, they would be decided, find no room, park and give it back again: a
        deactivation, an eviction and a decision for nothing). The controller and the simulator
        ask it with the same fit test (``admission.queue.settle_givers``) before a giver may take
        quota or is parked again undecided."""
        if not self._reached:
            return []
        out = []
        for _, key in sorted((self._order[k], k) for k in self._reached):
            if fits(self._needs[key]):
                self.leave(key)
                out.append(key)
        self._reached.clear()
        return out

    def unchanged(self, key: Hashable, now: float) -> Need | None:
        """``key``'s need if it was set aside and no event that would have woken it came since
        (nor its deadline, by ``now``): it is then parked again as it was, in its old place, since
        no decision could answer differently. None: decide it (it left the room if it was in it)."""
        if key not in self._aside:
            return None
        need = self._needs[key]
        if need.deadline is not None and need.deadline <= now:
            self.leave(key)
            return None
        self._aside.discard(key)
        self._reached.discard(key)
        self._kept.add(key)
        return need

    def may_give(self, key: Hashable, now: float | None = None, ends: Mapping[str, float] | None = None) -> bool:
        """Parked ``key`` may give its quota back: not if it already gave it back since it was last
        decided (parked again undecided by ``unchanged``): at most once per decision. With
        ``in_turn`` it may give again, except the first in line for a reservation of its flavor
        (``Need.reserves``, the oldest parked one holding quota): a reservation that ends wakes it
        (``wake_reservers``), and without its quota it would have to wait for all of it to be free
        at once again, which a stream of smaller Workloads passing quota among themselves almost
        never leaves. With ``turn_lead`` the first in line keeps it from the moment its turn is near
        (``near_turn``), whatever the other rules say."""
        if key not in self:
            return False
        if self.near_turn(key, now, ends):
            return False
        if not self._in_turn:
            return key not in self._kept
        mine = self._reservers.get(key)
        if mine is None:
            return True
        return any(fl == mine[0] and seq < mine[1] and k not in self._aside for k, (fl, seq) in self._reservers.items())

    def near_turn(self, key: Hashable, now: float | None, ends: Mapping[str, float] | None) -> bool:
        """With ``turn_lead``: ``key`` is the first in line for a reservation of its flavor (the
        oldest on file whose need waits for one, ``Need.reserves``, whether it holds quota or gave
        it back) and the soonest a reservation of that flavor is expected free (``ends``: flavor →
        epoch seconds, ``Reservations.soonest_free``) is at most ``turn_lead`` after ``now``. From
        then it keeps its quota (``may_give``) and, if it gave it back, may be given quota before
        its need is dropped (``may_take``): when the reservation ends it holds quota, instead of
        waiting for all of it free at one pass, which smaller Workloads passing quota among
        themselves almost never leave. Before that it gives like any parked Workload."""
        if self._turn_lead is None or now is None or not ends:
            return False
        mine = self._reservers.get(key)
        if mine is None:
            return False
        end = ends.get(mine[0])
        if end is None or end > now + self._turn_lead:
            return False
        return not any(fl == mine[0] and seq < mine[1] for fl, seq in self._reservers.values())

    def may_take(self, key: Hashable, now: float | None = None, ends: Mapping[str, float] | None = None) -> bool:
        """``key`` may be given quota by parked Workloads while it waits for quota: not while it
        gave its quota back with its need on file (``is_aside``), unless its turn is near
        (``near_turn``): then givers serve it as any waiter, in Kueue's order."""
        return key not in self._aside or self.near_turn(key, now, ends)

    def leave(self, key: Hashable) -> Need | None:
        """Take ``key`` out (decided, admitted, deleted, or no longer Atoll's); its need, if parked.
        One that freed room woke and that leaves undecided (deleted, say) hands that room on as a
        decided one does (``reoffer``): otherwise the parked Workloads behind it would wait for the
        next pod to end, with the room free."""
        self._hand_on(key)
        need = self._needs.pop(key, None)
        if need is None:
            return None
        self._aside.discard(key)
        self._kept.discard(key)
        self._reached.discard(key)
        self._reservers.pop(key, None)
        seq = self._order.pop(key)
        if need.limit is not None:
            left = self._limited.pop(need.flavor) - 1
            if left:
                self._limited[need.flavor] = left
        if need.behind is not None:
            return need
        row = self._by_level[(need.flavor, need.level, need.gpus_per_pod)]
        i = bisect.bisect_left(row, (need.pods, seq))
        while i < len(row) and row[i][1] != seq:
            i += 1
        del row[i]
        if not row:
            del self._by_level[(need.flavor, need.level, need.gpus_per_pod)]
        return need  # its deadline entry is dropped lazily by ``due``

    def due(self, now: float) -> list[Hashable]:
        """Parked Workloads whose deadline is at or before ``now``; they leave the room."""
        out = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, seq, key = heapq.heappop(self._deadlines)
            if self._order.get(key) == seq:
                aside = key in self._aside
                self.leave(key)
                if not aside:
                    out.append(key)
        return out

    def next_deadline(self) -> float | None:
        while self._deadlines and self._order.get(self._deadlines[0][2]) != self._deadlines[0][1]:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def freed(self, snapshot: Snapshot, nodes: Iterable[int] | npt.NDArray[np.int64],
              only: Callable[[Need], bool] | None = None) -> list[Hashable]:
        """Capacity was freed on ``nodes`` of ``snapshot``'s flavor (its ``free`` already counts
        it): the parked Workloads of that flavor, oldest first, that a domain of their level holding
        one of those nodes has room for once those woken before them are counted against it (whole
        pods of their GPUs per pod on each node). They leave the room. If the room left someone out,
        the flavor is owed a look (``reoffer``). With ``only``, the room is open to the Workloads
        whose need it accepts alone (a reservation's nodes, to those that may backfill them now), and
        owes no look: offered again to every parked Workload, it would wake those it keeps out."""
        rows = np.unique(np.asarray(list(nodes) if not isinstance(nodes, np.ndarray) else nodes, dtype=np.int64))
        if not rows.size:
            return []
        flavor = snapshot.flavor
        keys, left, took = self._offer(snapshot, rows, frozenset(), only)
        if left and only is None:
            self._owed.setdefault(flavor, set()).update(snapshot.node_names[int(r)] for r in rows)
            tried = self._tried.get(flavor)
            if tried:
                tried.difference_update(left)  # new room they fit: theirs to be offered
        return self._woken_by(snapshot, keys, took)

    def reoffer(self, snapshot: Snapshot) -> list[Hashable]:
        """The room ``freed`` owed on ``snapshot``'s flavor, offered again as ``freed`` offers it
        (counted on ``snapshot`` as it is now), once a Workload it woke was decided: to the
        parked Workloads it has not woken since it was freed, oldest first. Callers ask it after the
        woken Workloads are decided; [] when no woken Workload was decided since. The flavor is owed no
        more once the room leaves nobody out."""
        flavor = snapshot.flavor
        if flavor not in self._again:
            return []
        self._again.discard(flavor)
        rows = np.array(sorted(snapshot.node_index[n] for n in self._owed.get(flavor, ()) if n in snapshot.node_index), dtype=np.int64)
        keys, left, took = self._offer(snapshot, rows, self._tried.get(flavor, set())) if rows.size else ([], [], {})
        if not left:
            self._close(flavor)
        return self._woken_by(snapshot, keys, took)

    def owed(self) -> set[str]:
        """Flavors whose owed room a woken Workload came back to: ``reoffer`` has work there."""
        return set(self._again)

    def _close(self, flavor: str) -> None:
        self._owed.pop(flavor, None)
        self._tried.pop(flavor, None)
        self._again.discard(flavor)

    def _woken_by(self, snapshot: Snapshot, keys: list[tuple[int, Hashable]],
                  took: dict[Hashable, list[tuple[int, int]]]) -> list[Hashable]:
        needs = {k: self._needs[k] for _, k in keys}
        out = self._wake(keys)
        for k in out:
            self._woken[k] = (needs[k], tuple((snapshot.node_names[r], g) for r, g in took.get(k, ())))
        return out

    def _offer(self, snapshot: Snapshot, rows: npt.NDArray[np.int64], skip: set[Hashable] | frozenset[Hashable],
               only: Callable[[Need], bool] | None = None) -> tuple[list[tuple[int, Hashable]], list[Hashable], dict[Hashable, list[tuple[int, int]]]]:
        """The parked Workloads of the flavor (not in ``skip``; with ``only``, those whose need it accepts), oldest first, that the domains holding
        ``rows`` have room for, each counted against the first such domain of its level it fits,
        node by node, after the Workloads woken before and not decided yet; and those left out (they
        fit the room, not what the earlier ones left of it).
        One set aside takes no room: it is returned if it fits the room, for ``_wake`` to handle.
        With ``in_turn`` it is counted after every parked one, against what they left, and returned
        (its need dropped) only if that holds it: one pod's end drops the needs of as many set-aside
        Workloads as its room holds, not of every one it would hold alone. Under ``settle_by_fit``
        one the room fits is returned uncounted: ``settle`` asks its placement, which the GPU count
        only bounds."""
        flavor = snapshot.flavor
        fresh = np.asarray(snapshot.free[:, 0], dtype=np.int64)
        budget = fresh.copy()
        spans: dict[str | None, list[tuple[int, int, int]]] = {}
        entries: list[tuple[int, Hashable]] = []
        for (fl, level, per_pod), row in self._by_level.items():  # only those the room fits, by the rows' pod order
            if fl != flavor or not row:
                continue
            if level not in spans:
                spans[level] = self._spans(snapshot, level, rows, fresh)
            per = max(per_pod, 1)
            most = max((int((fresh[lo:hi] // per).sum()) for lo, hi, _ in spans[level]), default=0)
            entries.extend((seq, key) for _, seq, key in row[:bisect.bisect_right(row, (most, float("inf")))])
        entries.sort()
        for earlier, held in self._woken.values():  # woken before and not decided yet: the GPUs counted for them stay theirs
            if earlier.flavor == flavor:
                for name, gpus in held:
                    r = snapshot.node_index.get(name)
                    if r is not None:
                        budget[r] = max(int(budget[r]) - gpus, 0)
        took: dict[Hashable, list[tuple[int, int]]] = {}
        woken: list[tuple[int, Hashable]] = []
        left: list[Hashable] = []
        # the parked first (they hold quota and can take the room now), then the set-aside against what they left
        if self._in_turn:
            entries = [e for e in entries if e[1] not in self._aside] + [e for e in entries if e[1] in self._aside]
        for seq, key in entries:
            need = self._needs[key]
            if key in skip or (only is not None and not only(need)):
                continue
            per = max(need.gpus_per_pod, 1)
            for lo, hi, room in spans[need.level]:
                if need.gpus > room or not _fits(fresh[lo:hi], per, need.pods):
                    continue
                if key in self._aside and (self._settle_by_fit or not self._in_turn):  # reached: ``settle``'s fit test, not the count, decides
                    woken.append((seq, key))
                    break
                if _fits(budget[lo:hi], per, need.pods):
                    taken = _take(budget[lo:hi], per, need.pods)
                    if key not in self._aside:
                        took[key] = [(lo + i, g) for i, g in taken]
                    woken.append((seq, key))
                    break
            else:  # it fits the room, not what the Workloads before it left of it
                left.append(key)
        if self._in_turn:
            woken.sort()  # back to park order, which the reordering above set aside
        return woken, left, took

    @staticmethod
    def _spans(snapshot: Snapshot, level: str | None, rows: npt.NDArray[np.int64], free: npt.NDArray[np.int64]) -> list[tuple[int, int, int]]:
        """The node ranges of the domains of ``level`` holding ``rows`` (the whole flavor: None, or a
        level the flavor lacks), each with its free GPUs."""
        if level is None or level not in snapshot.level_labels:
            return [(0, len(free), int(free.sum()))]
        lv = snapshot.level_index(level)
        out = []
        for d in np.unique(snapshot.node_dom[lv, rows]).tolist():
            lo, hi = snapshot.domain_range(lv, int(d))
            out.append((lo, hi, int(free[lo:hi].sum())))
        return out

    def wake_flavor(self, flavor: str) -> list[Hashable]:
        """Every Workload parked on ``flavor`` (a change the GPU counts cannot see), oldest first."""
        self._close(flavor)
        return self._wake(sorted((self._order[k], k) for k, n in self._needs.items() if n.flavor == flavor))

    def wake_reservers(self, flavor: str, count: int) -> list[Hashable]:
        """The ``count`` oldest Workloads parked on ``flavor`` waiting for a reservation
        (``Need.reserves``): as many reservations of the flavor have ended."""
        keys = sorted((self._order[k], k) for k, n in self._needs.items() if n.flavor == flavor and n.reserves)
        return self._wake(keys[:max(count, 0)])

    def wake_behind(self, gangs: Iterable[str]) -> list[Hashable]:
        """Every Workload held behind one of ``gangs`` (``Need.behind``), owed no longer, oldest first."""
        left = set(gangs)
        if not left:
            return []
        return self._wake(sorted((self._order[k], k) for k, n in self._needs.items() if n.behind is not None and n.behind in left))

    def wake_all(self) -> list[Hashable]:
        for flavor in list(self._owed):
            self._close(flavor)
        return self._wake(sorted((seq, k) for k, seq in self._order.items()))

    def _wake(self, keys: list[tuple[int, Hashable]]) -> list[Hashable]:
        """``keys`` leave the room; the parked ones are returned (to be decided), oldest first. One
        set aside is not: it holds no quota, and leaves the room (its need dropped). Under
        ``settle_by_fit`` it stays aside, reached, until ``settle`` asks whether it fits now; one
        whose need carries no placement to ask (held behind a gang) leaves the room at once."""
        out = []
        for _, key in keys:
            if key in self._aside:
                if not self._settle_by_fit or self._needs[key].request is None:
                    self.leave(key)
                else:
                    self._reached.add(key)
                continue
            self.leave(key)
            out.append(key)
        return out


def _fits(free: npt.NDArray[np.int64], per_pod: int, pods: int) -> bool:
    """``pods`` pods of ``per_pod`` GPUs fit ``free`` (GPUs per node), each pod whole on one node.
    Every node counts (a tainted one is open to a PodSet that tolerates it), and only GPUs: a
    bound, never an answer."""
    return int((free // per_pod).sum()) >= pods


def _take(free: npt.NDArray[np.int64], per_pod: int, pods: int) -> list[tuple[int, int]]:
    """Count ``pods`` pods of ``per_pod`` GPUs against ``free`` (a view, changed in place), node by
    node; the GPUs taken, by position in ``free``."""
    per = free // per_pod
    before = np.cumsum(per) - per
    gpus = np.clip(pods - before, 0, per) * per_pod
    free -= gpus
    return [(int(i), int(gpus[i])) for i in np.flatnonzero(gpus)]

"""The queue manager's turn in a decision: reservations kept out of other placements, and for a
Workload that found no domain, its reservation and the wait-or-span comparison.

The ``Decider`` calls these when it has an ``Outlook`` (``admission.queue``); without one nothing
here runs and decisions are what the profile's fixed rules give. The numbers are said in the
decision's message, so the check, the Event, the decision record and ``atoll explain`` carry them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

import numpy as np

from admission.controller._queue_names import queue_name_of
from admission.controller._records import parse_time
from admission.controller._span_cost import holds_blocked, line_priced
from admission.queue import (
    DomainOutlook,
    Need,
    Outlook,
    OwedGang,
    Reservation,
    Running,
    Waiter,
    WaitOrSpan,
    choose_target,
    domain_outlook,
    ends_before_gang,
    free_at,
    gang_start,
    queued_start,
    should_move,
    soonest,
    weigh,
)
from policies import Decision, PodSetSpec, Profile, WaitState
from topology import Snapshot

__all__ = ["QueueTurn", "SpanCost", "behind_gang", "created_at", "hold_reservations", "is_owed", "join_line", "max_execution_seconds",
           "priority_of", "queue_turn", "reserve_deadline", "suspended_note"]

SpanCost = Callable[[Snapshot, Decision], "float | None"]
"""The slowdown (≥ 1) a span placement costs the Workload under the cost model; None: unknown."""
Found = TypeVar("Found")


def max_execution_seconds(obj: Mapping[str, Any]) -> float | None:
    """Kueue's ``spec.maximumExecutionTimeSeconds``; None when unset or unreadable."""
    spec = obj.get("spec")
    value = spec.get("maximumExecutionTimeSeconds") if isinstance(spec, Mapping) else None
    return float(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def created_at(obj: Mapping[str, Any]) -> float | None:
    """The Workload's ``metadata.creationTimestamp`` (epoch seconds); None when unset or unreadable."""
    meta = obj.get("metadata")
    return parse_time(str(meta.get("creationTimestamp") or "")) if isinstance(meta, Mapping) else None


def priority_of(obj: Mapping[str, Any]) -> int:
    """Kueue's ``spec.priority`` (0 when unset)."""
    spec = obj.get("spec")
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def is_owed(profile: Profile, pods: int, gpus: int, created: float | None, now: float) -> bool:
    """Whether a Workload of ``pods`` pods and ``gpus`` GPUs created at ``created`` is a gang owed
    its turn under ``profile``'s ``holdBehindGangs``: more than one pod, at least
    ``holdBehindGangsMinGPUs`` GPUs, waiting ``reserveAfterSeconds`` since creation."""
    q = profile.queueing
    return (q.hold_behind_gangs != "off" and q.reserve_after_seconds is not None and pods > 1 and gpus >= q.hold_min_gpus
            and created is not None and now - created >= q.reserve_after_seconds)


def behind_gang(outlook: Outlook | None, profile: Profile, key: str, obj: Mapping[str, Any], cluster_queue: str | None, flavor: str,
                specs: Sequence[PodSetSpec], now: float, free_gpus: int = 0) -> OwedGang | None:
    """The owed gang this Workload waits behind (``holdBehindGangs``), or None: the profile holds
    nothing, the Workload is an owed gang itself, no owed gang of its ClusterQueue is ahead of
    it in Kueue's order (priority, then creation time), or under ``holdBehindGangsBackfill`` it is expected to end before the gang has its GPUs
    (``free_gpus`` free on the flavor now)."""
    if outlook is None or profile.queueing.hold_behind_gangs == "off" or not len(outlook.owed):
        return None
    created = created_at(obj)
    gpus = sum(s.count * s.per_pod.gpu for s in specs)
    if is_owed(profile, sum(s.count for s in specs), gpus, created, now):
        return None
    gang = outlook.owed.ahead(cluster_queue, flavor, key, priority_of(obj), created)
    if gang is not None and profile.queueing.hold_backfill:
        est = outlook.estimator.estimate(queue_name_of(obj), gpus, max_execution_seconds(obj))
        starts = gang_start(gang.gpus, free_gpus, outlook.on(flavor), outlook.estimator, now)
        if ends_before_gang(None if est is None else est.seconds, starts, now):
            return None
    return gang


def join_line(outlook: Outlook, key: str, flavor: str, specs: Sequence[PodSetSpec], obj: Mapping[str, Any], wait: WaitState,
              now: float) -> None:
    """``key`` waits for a domain on ``flavor``: it takes (or keeps) its place in Kueue's order
    there, by its ``spec.priority`` and its creation time (else its first wait, else ``now``)."""
    gpus = sum(s.count * s.per_pod.gpu for s in specs)
    per_pod = max((s.per_pod.gpu for s in specs), default=1)
    have = outlook.queued.get(key)
    if have is not None and have.flavor == flavor:
        since = have.since
    else:
        created = created_at(obj)
        since = created if created is not None else wait.first_waited_at if wait.first_waited_at is not None else now
    outlook.queued.waits(key, Waiter(flavor, gpus, per_pod, priority_of(obj), since, queue_name_of(obj), max_execution_seconds(obj)))


def hold_reservations(outlook: Outlook | None, shared: Snapshot, snap: Snapshot, flavor: str, key: str, obj: Mapping[str, Any],
                      now: float) -> tuple[Snapshot, dict[str, int]]:
    """``snap`` with the GPUs other gangs reserved taken out (on a fork of its own), unless this
    Workload backfills them by time; and those GPUs by node."""
    if outlook is None or not len(outlook.reservations):
        return snap, {}
    limit = max_execution_seconds(obj)
    blocked = outlook.reservations.blocked(flavor, key, None if limit is None else now + limit, snap)
    if not blocked:
        return snap, {}
    if snap is shared:
        snap = shared.fork()
    for name, gpus in blocked.items():
        i = snap.node_index.get(name)
        if i is not None:
            snap.free[i, 0] = max(0, int(snap.free[i, 0]) - gpus)
    return snap, blocked


def suspended_note(outlook: Outlook | None, flavor: str, key: str, decision: Decision, snap: Snapshot, obj: Mapping[str, Any],
                   now: float) -> str:
    """What an admitting decision's message says of the other gangs' reservations on ``flavor``
    that are suspended (their holders hold no quota: ``Reservations.quota``): only those whose
    GPUs its placement uses, which they would have kept it off (``Reservations.suspended_note``,
    on ``snap``, the flavor as the cache has it). A wait or a placement elsewhere says nothing
    of them: a suspended reservation blocks nobody, so it explains no wait."""
    if outlook is None or not len(outlook.reservations) or decision.outcome != "admit" or decision.placement is None:
        return ""
    limit = max_execution_seconds(obj)
    nodes = (n for ps in decision.placement.podsets for n in ps.nodes)  # read only while a reservation is suspended
    return outlook.reservations.suspended_note(flavor, key, None if limit is None else now + limit, nodes, snap)


@dataclass
class QueueTurn:
    note: str = ""
    weighed: WaitOrSpan | None = None
    floor: WaitOrSpan | None = None
    """Waiting weighed against a placement below the class's speed floor (``perfFloorByCost``)."""
    reservation: Reservation | None = None


def queue_turn(outlook: Outlook, key: str, snap: Snapshot, specs: Sequence[PodSetSpec], profile: Profile, wait: WaitState, now: float,
               decision: Decision, blocked: Mapping[str, int], obj: Mapping[str, Any],
               span_search: Callable[[], Found | None], span_decision: Callable[[Found], Decision],
               span_cost: SpanCost | None, stamp: Callable[[], tuple[object, ...] | None] | None = None,
               floor_search: Callable[[], Found | None] | None = None, class_floor: float = 0.0) -> tuple[QueueTurn, Found | None]:
    """For a Workload that waits: hold or refresh its reservation once it has waited
    ``reserveAfterSeconds``, and weigh waiting against the best span. The span found (to admit)
    when spanning is cheaper, else None. The wait is for one domain with room for whole pods of
    the Workload's largest pod (``domain_outlook(per_pod=)``) on GPUs at its class's speed floor
    (``class_floor``) or above: GPUs free in scraps too small for a pod, or too slow for the
    class, are no room now.

    The best span's slowdown is kept in ``outlook.spans`` under ``stamp()`` (what the search reads;
    None: not kept) and reused while the stamp is unchanged; the span is searched again only to
    admit it. Without a cost model there is nothing to weigh, and no span is searched.

    With ``queueing.perfFloorByCost``, ``floor_search`` (the placement found with the class's
    speed floor lowered to it; None: not asked) is priced the same way and weighed against the
    expected wait for one domain of GPUs at ``class_floor`` or above: it is the one found when
    it is cheaper and no span was. That wait is for a domain of the level the Workload would be
    placed at (its island, or once it may span, its ``maxSpanLevel``: ``_floor_level``), and
    counts only the GPUs running Workloads free on nodes at the floor or above, in whole pods of
    the Workload's largest pod. With
    ``perfFloorHoldSeconds``, a Workload that has waited that long takes the slower placement
    whatever the costs say (the bound, as ``relaxAfterSeconds`` is for spans). With
    ``perfFloorIdle: take``, a placement under the floor whose GPUs are all under the class floor
    is taken at once (``_all_under``): no GPU at the floor is slowed by it, and the Workloads the
    floor holds back cannot use those GPUs, so they would idle; one that mixes is weighed."""
    q = profile.queueing
    turn = QueueTurn()
    if not q.wait_or_span and q.reserve_after_seconds is None and (q.perf_floor_by_cost is None or floor_search is None):
        return turn, None
    gpus = sum(s.count * s.per_pod.gpu for s in specs)
    per_pod = max((s.per_pod.gpu for s in specs), default=1)
    widened = decision.widened_to
    level = (widened or None) if widened is not None else (profile.required_level or profile.preferred_level)
    running = outlook.running_on(snap.flavor)  # by node, ends kept: every domain_outlook below, and the other waiters', share them
    outlooks = domain_outlook(snap, level, gpus, running, outlook.estimator, now, blocked)
    notes = []
    waited = now - wait.first_waited_at if wait.first_waited_at is not None else 0.0
    created = created_at(obj) if q.hold_behind_gangs != "off" else None
    if created is not None:  # an owed gang's wait counts from its creation: the time it waited for quota counts
        waited = max(waited, now - created)
    gang = sum(s.count for s in specs) > 1
    if q.reserve_after_seconds is not None and gang and waited >= q.reserve_after_seconds:
        mine = outlook.reservations.held_by(key)
        by = "soonest" if q.reserve_target == "soonestFree" else "drain"
        spans = q.reserve_at == "span" and bool(profile.preferred_level) and widened is None  # the gang may span: reserve where it will
        at = profile.max_span_level if spans else level
        # the GPUs to drain count only whole pods on nodes the gang can use (at its class's speed floor or above):
        # scraps too small for a pod, or GPUs too slow for the class, are not room it can be placed in
        usable = _at_floor(snap, class_floor)
        here = domain_outlook(usable, at, gpus, running, outlook.estimator, now, blocked, per_pod=per_pod)
        target = choose_target(usable, key, at, gpus, per_pod, here, running, outlook.estimator, now, by)
        if target is not None and spans:
            target = replace(target, capture=True)
        if mine is not None and target is not None and mine.path == target.path and mine.level == target.level:
            # an island's nodes stay as first chosen; a span's are chosen again (those free now first, then the soonest to end)
            # an island's kept nodes are timed as they are: backfill is judged against when they free, not the fresh nodes
            target = replace(target, since=mine.since) if spans else \
                replace(target, nodes=mine.nodes, since=mine.since, expected_free=free_at(usable, mine, running, outlook.estimator, now))
        elif mine is not None and target is not None and by == "soonest" and should_move(mine, target, here, q.retarget_margin_seconds):
            notes.append(f"moved from {'/'.join(mine.path) or 'the whole flavor'}: expected free more than {q.retarget_margin_seconds}s later")
            target = replace(target, since=mine.since)
        elif mine is not None:  # a reservation held is kept: its gang is first in line there, timed on its nodes as they are now
            target = replace(mine, expected_free=free_at(usable, mine, running, outlook.estimator, now))
        if target is not None and outlook.reservations.add(target, q.max_reservations_per_flavor):
            turn.reservation = target
            notes.append(target.describe())
        elif target is not None:
            notes.append(f"no reservation: flavor {snap.flavor} holds its {q.max_reservations_per_flavor} already")
        elif decision.relaxed and not spans and at is not None and not _holds(snap, at, gpus):  # a DGX H100 gang past its 8-GPU node
            notes.append(f"no reservation: no {at} domain holds {gpus} GPUs, and it spans; queueing.reserveAt: span reserves "
                         "where a span lands")
    found: Found | None = None
    if q.wait_or_span and profile.preferred_level and not decision.relaxed:
        # in whole pods: GPUs free in scraps too small for one are no room now, nor is a GPU freed that completes no pod;
        # and only on GPUs at the class's speed floor or above (the search leaves the slower ones out)
        usable = _at_floor(snap, class_floor)
        best = soonest(outlooks if per_pod <= 1 and usable is snap else
                       domain_outlook(usable, level, gpus, running, outlook.estimator, now, blocked, per_pod=per_pod))
        est = outlook.estimator.estimate(queue_name_of(obj), gpus, max_execution_seconds(obj))
        span: Found | None = None
        searched = False
        mark = stamp() if stamp is not None and span_cost is not None else None
        priced = outlook.spans.get(key, mark) if mark is not None else outlook.spans.MISS
        if priced is not outlook.spans.MISS:
            slowdown = cast("float | None", priced)
        elif span_cost is None:
            slowdown = None
        else:
            span, searched = span_search(), True
            placed = span_decision(span) if span is not None else None
            slowdown = span_cost(snap, placed) if placed is not None and placed.outcome == "admit" else None
            if mark is not None:
                outlook.spans.put(key, mark, slowdown)
        wait_s, error, where, ahead, alone = _expected_wait(outlook, key, usable, level, gpus, per_pod, running, now, blocked, best,
                                                           q.wait_counts_queue)
        turn.weighed = weigh(wait_s, error, where, slowdown, None if est is None else est.seconds, 0.0 if est is None else est.error,
                             ahead=ahead, wait_alone_s=alone, wait_weight=q.wait_weight)
        if turn.weighed.choice == "span":
            found = span if searched else span_search()
            if q.span_counts_queue != "off" and found is not None:  # the span is charged what it costs the others in line too
                turn.weighed = line_priced(turn.weighed, outlook, key, usable, level, span_decision(found), list(running), now, blocked,
                                           _admitted_in(obj) if q.span_counts_queue == "quota" else None)
                found = found if turn.weighed.choice == "span" else None
        notes.append(turn.weighed.describe())
    if found is None and turn.reservation is not None and turn.reservation.capture and not decision.relaxed:
        found = span_search()  # reserved at the span level, it takes a span as soon as one is free
        if found is not None:
            notes.append("spans now: it reserved at the span level")
    if found is None and q.perf_floor_by_cost is not None and floor_search is not None and span_cost is not None:
        slower = floor_search()
        placed = span_decision(slower) if slower is not None else None
        slowdown = span_cost(snap, placed) if placed is not None and placed.outcome == "admit" else None
        fast = _at_floor(snap, class_floor)  # the wait is for GPUs that meet the class's floor: the slower ones are left out
        at_level = _floor_level(profile, snap, decision, level)
        best = soonest(domain_outlook(fast, at_level, gpus, running, outlook.estimator, now, blocked,
                                      per_pod=per_pod))  # in whole pods: GPUs free in scraps too small for one are no room
        est = outlook.estimator.estimate(queue_name_of(obj), gpus, max_execution_seconds(obj))
        wait_s, error, where, ahead, alone = _expected_wait(outlook, key, fast, at_level, gpus, per_pod, running, now, blocked, best,
                                                           q.wait_counts_queue)
        turn.floor = weigh(wait_s, error, where, slowdown, None if est is None else est.seconds, 0.0 if est is None else est.error,
                           kind="floor", ahead=ahead, wait_alone_s=alone, wait_weight=q.wait_weight)
        notes.append(turn.floor.describe())
        hold = q.perf_floor_hold_seconds
        idle = q.perf_floor_idle == "take" and placed is not None and _all_under(placed, class_floor)
        if idle and turn.floor.choice != "span":
            notes.append(f"every GPU it takes is under the speed floor {class_floor:g} (none at the floor is slowed, and none "
                         "the floor holds back may use them), perfFloorIdle take: takes the slower GPUs")
            found = slower
        elif turn.floor.choice == "span":
            found = slower
        elif slower is not None and hold is not None and waited >= hold:
            notes.append(f"the speed floor has held it {waited:.0f}s, perfFloorHoldSeconds {hold}: takes the slower GPUs")
            found = slower
    turn.note = "; ".join(notes)
    return turn, found


def _expected_wait(outlook: Outlook, key: str, snap: Snapshot, level: str | None, gpus: int, per_pod: int, running: Iterable[Running],
                   now: float, blocked: Mapping[str, int], best: DomainOutlook | None,
                   counts_queue: bool) -> tuple[float | None, float, str, int | None, float | None]:
    """The expected wait for one domain, its error and domain, the waiters queued ahead it counts
    and the wait for the room alone (the last two None unless ``counts_queue``): the room alone is
    ``best`` (``domain_outlook``'s soonest); with the queue counted, ``queued_start`` after the
    Workloads queued ahead of ``key`` (a gang ahead holding a reservation whose room is
    ``blocked`` left out: it takes that room, no other). The expected start is kept for ``atoll queue``."""
    alone = None if best is None or best.free_at is None else best.free_at - now
    wait, error, where = alone, best.error if best is not None else 0.0, "/".join(best.path) if best is not None else ""
    ahead: int | None = None
    if counts_queue:
        line = outlook.queued.ahead(key, skip=lambda k: holds_blocked(outlook, k, blocked))  # a reserving gang takes its own room
        got = queued_start(snap, level, gpus, per_pod, running, outlook.estimator, now, line, blocked)
        if got is not None:
            wait = None if got.free_at is None else got.free_at - now
            error, where, ahead = got.error, "/".join(got.path), got.ahead
    if wait is not None:
        outlook.expected[key] = now + wait
    else:
        outlook.expected.pop(key, None)
    return wait, error, where, ahead, alone if counts_queue else None


def _at_floor(snap: Snapshot, floor: float) -> Snapshot:
    """``snap`` with nodes under the class's speed floor made ineligible (on a fork); ``snap`` itself when none is."""
    if floor <= 0 or not (snap.perf < floor).any():
        return snap
    fast = snap.fork()
    fast.restrict(snap.perf >= floor)
    return fast


def _all_under(decision: Decision, floor: float) -> bool:
    """Whether ``decision`` admits on GPUs all under ``floor`` (each PodSet's fastest node below it)."""
    placement = decision.placement
    return (decision.outcome == "admit" and placement is not None and bool(placement.podsets)
            and all(ps.max_perf < floor for ps in placement.podsets))


def _floor_level(profile: Profile, snap: Snapshot, decision: Decision, level: str | None) -> str | None:
    """The level whose domain a Workload held back by its speed floor waits for: ``level`` (one
    island), or once its profile lets it span (``decision.relaxed``, a strict gang widened aside)
    the profile's ``maxSpanLevel`` on this flavor (None: the whole flavor). A gang larger than any
    island waits for a span, never for an island that cannot hold it."""
    if not decision.relaxed or decision.widened_to is not None:
        return level
    try:
        span = profile.for_flavor(snap.flavor, snap.level_labels).max_span_level
    except ValueError:
        return None
    return span if span in snap.level_labels else None


def _holds(snap: Snapshot, level: str, gpus: int) -> bool:
    """Whether some domain of ``level`` has ``gpus`` GPUs on its eligible nodes when empty (True
    for a level the flavor lacks: nothing to say)."""
    if level not in snap.level_labels:
        return True
    alloc = np.where(snap.eligible.astype(bool), snap.alloc[:, 0], 0)
    lv = snap.level_index(level)
    return any(int(alloc[slice(*snap.domain_range(lv, d))].sum()) >= gpus for d in range(snap.num_domains(lv)))


def _admitted_in(obj: Mapping[str, Any]) -> str | None:
    """The ClusterQueue Kueue admitted the Workload's quota in (``status.admission.clusterQueue``)."""
    admission = (obj.get("status") or {}).get("admission")
    name = admission.get("clusterQueue") if isinstance(admission, Mapping) else None
    return str(name) if name else None


def reserve_deadline(need: Need | None, outlook: Outlook | None, key: str, profile: Profile, wait: WaitState, now: float,
                     specs: Sequence[PodSetSpec], created: float | None = None) -> Need | None:
    """A parked gang that will reserve is woken when ``reserveAfterSeconds`` has passed (if that
    comes before its relax deadline), so it reserves on time without a timer Retry; and with
    ``perfFloorHoldSeconds``, a parked Workload is woken when that has passed, so the class
    speed floor holds it no longer. With ``holdBehindGangs``, ``reserveAfterSeconds`` counts from
    ``created`` (the Workload's creation). A gang past ``reserveAfterSeconds`` that holds no
    reservation is marked ``Need.reserves``: a reservation of its flavor that ends wakes it."""
    q = profile.queueing
    if need is None or outlook is None:
        return need
    first = wait.first_waited_at if wait.first_waited_at is not None else now
    if created is not None and q.hold_behind_gangs != "off":
        first = min(first, created)
    times = []
    if q.reserve_after_seconds is not None and sum(s.count for s in specs) > 1 and not outlook.reservations.held_by(key):
        times.append(first + q.reserve_after_seconds)
        if first + q.reserve_after_seconds <= now:  # it could reserve and holds none (the bound reached, or no domain to reserve)
            need = replace(need, reserves=True)
    if q.perf_floor_by_cost is not None and q.perf_floor_hold_seconds is not None:
        times.append(first + q.perf_floor_hold_seconds)
    at = min((t for t in times if t > now), default=None)
    if at is None:
        return need
    return replace(need, deadline=at if need.deadline is None else min(need.deadline, at))

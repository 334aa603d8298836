"""Reservations against starvation, and the backfill rules that let work into a reserved domain.

A gang that has waited ``reserveAfterSeconds`` for one domain reserves one (``choose_target``):
of the domains of its level that hold it when empty, the one with the fewest GPUs still to drain,
ties broken by the soonest expected free time (``domain_outlook``); or, with ``by="soonest"``
(profile ``reserveTarget: soonestFree``), the one whose GPUs the gang needs are expected free
first, ties by fewest to drain (an unknown free time comes last). In that domain it reserves the
nodes it will need: free nodes first, then those expected free soonest, until their GPUs hold it.
A held reservation moves only by ``should_move``: to a domain expected free more than a margin
sooner than its own, so estimates that shift by less never make it flap. A kept reservation is
expected free when its own nodes are, as they are now (``free_at``): not when the nodes
``choose_target`` would take in its domain now are, nor as they were when it was made.

A gang whose profile may span reserves where its span will land when the profile says
``reserveAt: span``: ``choose_target`` at the span level (``maxSpanLevel``; the whole flavor
without one) takes the nodes of that domain expected free soonest, whatever island they are in,
and the reservation ``capture``s: it also holds the GPUs that free anywhere else in the domain,
until the free GPUs it holds reach the gang's (``Reservation.held_on``). So the domain drains as
fast as anything in it ends, not as the reserved nodes do, and at most the gang's GPUs sit idle.

New placements avoid a reserved node (``Reservations.blocked``), except by backfill:

- a Workload whose ``maximumExecutionTimeSeconds`` ends before the reservation's expected free
  time may use the reserved nodes (it is gone before the gang could start);
- any Workload may use the reserved domain's other nodes: GPUs the gang will not need (with
  ``capture``, those beyond the gang's GPUs once that many are free there).

At most ``limit`` reservations are held per flavor (``Reservations.add``), oldest first. A
reservation ends when its gang is placed, rejected or deleted (``release``).

A reservation blocks only while its holder holds quota (``Reservations.quota``; the controller
and the simulator tell it, from the Workload's conditions or the simulated Kueue's books): Kueue's
``QuotaReserved`` is True, the Workload is active and not being evicted. A holder without quota
(preempted or evicted by Kueue, deactivated, given its quota back) is in Kueue's queue behind the
Workloads that hold quota; were its reservation to keep them out, those could wait on it holding
the quota it needs, and nobody would move. So its reservation is suspended: it stays on record
(its place in the flavor's limit, its nodes, ``encode``'s text on the Workload) but blocks nobody
(``holding``, ``blocked``, ``idle`` skip it) until its holder holds quota again; the domain
drains for it again from then. A placement's message names it (``suspended_note``) only where
the reservation in force would have kept that placement out (``would_hold``, less backfill by
time): a placement elsewhere, or a wait, owes nothing to the suspension. What a suspension
frees is offered to the parked Workloads as freed room (``wake_suspended``, in ``_wake``): only
those it can hold are woken, and only if it is suspended still when the caller looks (the
controller before its next decision, the simulator once an instant's passes are done), since a
suspension that ended before anyone could use the GPUs changed nothing. A reservation that ends
is offered the same way (``take_ended``, ``wake_released``): the GPUs it held wake only the
parked Workloads they can hold; so are the GPUs a reservation that moves leaves behind
(``take_moved``), and, when its expected free time moves later, the nodes it still holds, to
the parked Workloads that may backfill them now and could not before (``backfills_now``). A
reservation is stored on the gang's Workload (``encode``; the controller writes it beside
Atoll's waiting condition), so a new leader or a restarted controller rebuilds the same
reservations from the API (``decode``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from admission.queue._estimate import DomainOutlook, Running, RuntimeEstimator, latest_ends
from topology import Snapshot

__all__ = ["Reservation", "Reservations", "backfills_now", "choose_target", "free_at", "nodes_changed", "should_move", "window_later"]


@dataclass(frozen=True, slots=True)
class Reservation:
    """``holder`` (a Workload key) holds ``nodes`` (node → GPUs it will need there) of domain
    ``path`` at ``level`` on ``flavor`` since ``since``, expected free at ``expected_free``
    (None: unknown, so no Workload can backfill by time)."""

    holder: str
    flavor: str
    level: str | None
    path: tuple[str, ...]
    nodes: tuple[tuple[str, int], ...]
    since: float
    expected_free: float | None
    capture: bool = False
    """Also hold what frees elsewhere in the domain, up to the gang's GPUs (``held_on``)."""
    per_pod: int = 1
    """The GPUs of the gang's largest pod: with ``capture``, only free GPUs in whole pods of that
    size are held (scraps too small for one are no room for the gang, and stay open to others)."""

    @property
    def gpus(self) -> int:
        return sum(g for _, g in self.nodes)

    def encode(self) -> str:
        out = {"flavor": self.flavor, "level": self.level, "domain": list(self.path), "nodes": dict(self.nodes),
               "since": self.since, "expectedFree": self.expected_free}
        if self.capture:
            out["capture"] = True
        if self.per_pod > 1:
            out["perPod"] = self.per_pod
        return json.dumps(out, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, holder: str, text: str) -> Reservation | None:
        """The reservation written by ``encode``; None for anything unreadable (it is then made afresh)."""
        try:
            d = json.loads(text)
            nodes = tuple(sorted((str(n), int(g)) for n, g in dict(d["nodes"]).items()))
            free = d.get("expectedFree")
            return cls(holder, str(d["flavor"]), None if d.get("level") is None else str(d["level"]), tuple(str(p) for p in d["domain"]),
                       nodes, float(d["since"]), None if free is None else float(free), d.get("capture") is True,
                       max(1, int(d.get("perPod", 1))))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def describe(self) -> str:
        where = "/".join(self.path) or "the whole flavor"
        when = f", expected free at t={self.expected_free:.0f}" if self.expected_free is not None else ", expected free time unknown"
        also = f", and GPUs freed elsewhere in {where} up to {self.gpus}" if self.capture else ""
        return f"reserves {self.gpus} GPUs on {len(self.nodes)} nodes of {self.level or 'flavor'} {where}{also}{when}"

    def held_on(self, snapshot: Snapshot, taken: Mapping[str, int] | None = None) -> dict[str, int]:
        """Node → GPUs this reservation keeps from other Workloads on ``snapshot`` (its flavor, GPUs
        free as they are now): its nodes, and with ``capture`` the free GPUs of its domain's other
        nodes (whole nodes first, then the most free, then node order) until the free GPUs it holds
        reach the gang's, counted in whole pods of ``per_pod`` GPUs (a node's scraps too small for
        one are left open). So at most the gang's GPUs sit idle, and the domain drains as fast as
        anything in it ends, not as its reserved nodes do. ``taken``: node → GPUs other
        reservations hold (``Reservations.holding``), never captured again here."""
        out = dict(self.nodes)
        if not self.capture:
            return out
        rows = np.array([snapshot.node_index.get(n, -1) for n, _ in self.nodes], dtype=np.int64)
        rows = rows[rows >= 0]
        if not rows.size:
            return out
        per = max(self.per_pod, 1)
        free = np.where(snapshot.eligible.astype(bool), np.minimum(snapshot.free[:, 0], snapshot.alloc[:, 0]), 0)
        if taken:
            free = free.copy()
            for n, g in taken.items():
                i = snapshot.node_index.get(n)
                if i is not None and n not in out:
                    free[i] = max(0, int(free[i]) - g)
        free = free // per * per
        room = self.gpus - sum(min(g, int(free[snapshot.node_index[n]])) for n, g in self.nodes if n in snapshot.node_index)
        if room <= 0:
            return out
        if self.level is not None and self.level in snapshot.level_labels:
            lv = snapshot.level_index(self.level)
            lo, hi = snapshot.domain_range(lv, int(snapshot.node_dom[lv, rows[0]]))
        else:
            lo, hi = 0, snapshot.num_nodes
        idx = np.arange(lo, hi, dtype=np.int64)
        idx = idx[(free[lo:hi] > 0) & ~np.isin(idx, rows)]
        whole = free[idx] >= snapshot.alloc[idx, 0]
        for i in idx[np.lexsort((idx, -free[idx], ~whole))].tolist():
            take = min(int(free[i]), room)
            out[snapshot.node_names[i]] = take
            room -= take
            if room <= 0:
                break
        return out


class Reservations:
    """The reservations held, by flavor and holder."""

    def __init__(self) -> None:
        self._by_flavor: dict[str, dict[str, Reservation]] = {}
        self._flavor_of: dict[str, str] = {}
        self._no_quota: set[str] = set()
        """Holders of a reservation that hold no quota now: their reservations are suspended."""
        self._newly: dict[str, None] = {}
        """Holders whose reservation was suspended since ``take_suspended`` last looked."""
        self._ended: dict[str, Reservation] = {}
        """Reservations released since ``take_ended`` last looked, by holder."""
        self._was: dict[str, Reservation] = {}
        """Reservations replaced since ``take_moved`` last looked (the first replaced), by holder."""

    def __len__(self) -> int:
        return len(self._flavor_of)

    def held_by(self, holder: str) -> Reservation | None:
        flavor = self._flavor_of.get(holder)
        return None if flavor is None else self._by_flavor[flavor].get(holder)

    def on(self, flavor: str) -> list[Reservation]:
        return sorted(self._by_flavor.get(flavor, {}).values(), key=lambda r: (r.since, r.holder))

    def soonest_free(self) -> dict[str, float]:
        """Flavor → the soonest a reservation held on it is expected free (those with a known time)."""
        out: dict[str, float] = {}
        for flavor, held in self._by_flavor.items():
            known = [r.expected_free for r in held.values() if r.expected_free is not None]
            if known:
                out[flavor] = min(known)
        return out

    def all(self) -> list[Reservation]:
        return sorted((r for rs in self._by_flavor.values() for r in rs.values()), key=lambda r: (r.flavor, r.since, r.holder))

    def add(self, reservation: Reservation, limit: int) -> bool:
        """Hold ``reservation`` (replacing its holder's) if its flavor holds fewer than ``limit``."""
        mine = self.held_by(reservation.holder)
        if mine is None and len(self._by_flavor.get(reservation.flavor, {})) >= limit:
            return False
        suspended = reservation.holder in self._no_quota
        self._drop(reservation.holder)
        if suspended:
            self._no_quota.add(reservation.holder)
        if mine is not None:
            self._was.setdefault(reservation.holder, mine)
        self._by_flavor.setdefault(reservation.flavor, {})[reservation.holder] = reservation
        self._flavor_of[reservation.holder] = reservation.flavor
        return True

    def quota(self, holder: str, held: bool) -> Reservation | None:
        """``holder`` holds quota now (``held``) or not: without it its reservation, if any, is
        suspended (kept, blocking nobody); with it again it blocks again. The reservation whose
        state changed, else None."""
        r = self.held_by(holder)
        if r is None or held == (holder not in self._no_quota):
            return None
        if held:
            self._no_quota.discard(holder)
        else:
            self._no_quota.add(holder)
            self._newly[holder] = None
        return r

    def take_suspended(self) -> list[Reservation]:
        """The reservations suspended since the last call and suspended still, oldest first: what
        each held is free for others now. One whose holder holds quota again by now (or that
        ended) is left out: a suspension that ended before anyone could use it changed nothing."""
        out = [r for r in (self.held_by(h) for h in self._newly) if r is not None and r.holder in self._no_quota]
        self._newly.clear()
        return sorted(out, key=lambda r: (r.flavor, r.since, r.holder))

    def suspended(self, holder: str) -> bool:
        """Does ``holder`` hold a reservation while it holds no quota (one that blocks nobody)?"""
        return holder in self._no_quota

    def release(self, holder: Hashable) -> Reservation | None:
        out = self._drop(str(holder))
        if out is not None:
            self._ended[str(holder)] = out
        return out

    def _drop(self, holder: str) -> Reservation | None:
        self._no_quota.discard(holder)
        flavor = self._flavor_of.pop(holder, None)
        if flavor is None:
            return None
        out = self._by_flavor[flavor].pop(holder)
        if not self._by_flavor[flavor]:
            del self._by_flavor[flavor]
        return out

    def take_ended(self) -> list[Reservation]:
        """The reservations released since the last call whose holders hold none now, oldest
        first: what each held is free for others. One whose holder holds a reservation again by
        now (the controller read it back, or released and reserved anew) did not end: it is
        left to ``take_moved``, which offers what it no longer holds."""
        out = []
        for h, r in self._ended.items():
            if h in self._flavor_of:
                self._was.setdefault(h, r)
            else:
                out.append(r)
        self._ended.clear()
        return sorted(out, key=lambda r: (r.flavor, r.since, r.holder))

    def take_moved(self) -> list[tuple[Reservation, Reservation]]:
        """(before, now) for each holder whose reservation was replaced since the last call, and
        that holds it still, oldest first, when the replacement frees something for others: it is
        on other nodes (``add`` moved it to another domain, or chose a span's nodes again), so
        the nodes ``before`` held that ``now`` does not are free; or its window moved later
        (``window_later``), so a Workload whose limit ends before the new expected free time, and
        did not end before the old one, may backfill the nodes it still holds. One replaced by the
        same nodes and a window no later (an estimate drifting sooner, or read back as it was), or
        whose holder holds no quota (it blocked nobody before nor blocks now), is left out. Ask
        ``take_ended`` first: a reservation released and reserved anew since it last looked is
        passed on here."""
        out = []
        for h, before in self._was.items():
            now = self.held_by(h)
            if now is None or h in self._no_quota:
                continue
            if nodes_changed(before, now) or window_later(before, now):
                out.append((before, now))
        self._was.clear()
        return sorted(out, key=lambda p: (p[0].flavor, p[0].since, p[0].holder))

    def holding(self, flavor: str, snapshot: Snapshot | None) -> list[tuple[Reservation, dict[str, int]]]:
        """Each reservation on ``flavor``, oldest first, with what it holds on ``snapshot``
        (``held_on``; without a snapshot, its named nodes). Held together: a capturing reservation
        never captures another's named nodes, nor GPUs an older one captured, so two in one domain
        do not hold the same free GPUs and keep each other's gang out. A suspended one (its holder
        holds no quota: ``quota``) holds nothing and is left out."""
        return self._hold([r for r in self.on(flavor) if r.holder not in self._no_quota], snapshot)

    def _hold(self, rs: list[Reservation], snapshot: Snapshot | None) -> list[tuple[Reservation, dict[str, int]]]:
        if snapshot is None or not any(r.capture for r in rs):
            return [(r, dict(r.nodes)) for r in rs]
        taken: dict[str, int] = {}
        for r in rs:
            for n, g in r.nodes:
                taken[n] = taken.get(n, 0) + g
        out = []
        for r in rs:
            own = dict(r.nodes)
            others = {n: g - own.get(n, 0) for n, g in taken.items() if g - own.get(n, 0) > 0}
            held = r.held_on(snapshot, others)
            for n, g in held.items():
                if n not in own:
                    taken[n] = taken.get(n, 0) + g
            out.append((r, held))
        return out

    def blocked(self, flavor: str, holder: str, ends_at: float | None, snapshot: Snapshot | None = None) -> dict[str, int]:
        """Node → GPUs a Workload (``holder``; its limit ends at ``ends_at``, None: no limit) may
        not use: those other gangs reserved (on ``snapshot``, what they hold there: ``holding``),
        except where it backfills by time."""
        out: dict[str, int] = {}
        for r, held in self.holding(flavor, snapshot):
            if r.holder == holder:
                continue
            if ends_at is not None and r.expected_free is not None and ends_at <= r.expected_free:
                continue  # backfill: gone before the gang can start
            for n, g in held.items():
                out[n] = out.get(n, 0) + g
        return out

    def would_hold(self, flavor: str, snapshot: Snapshot | None) -> list[tuple[Reservation, dict[str, int]]]:
        """Each suspended reservation on ``flavor`` with what it would hold on ``snapshot`` were
        every reservation there in force (``holding`` with the suspended ones counted): the GPUs
        its suspension leaves to others."""
        return [(r, held) for r, held in self._hold(self.on(flavor), snapshot) if r.holder in self._no_quota]

    def suspended_note(self, flavor: str, holder: str, ends_at: float | None, nodes: Iterable[str], snapshot: Snapshot | None) -> str:
        """What a placement of ``holder`` (its limit ends at ``ends_at``; None: no limit) on
        ``nodes`` says of the suspended reservations: only those that would have kept it off one
        of those nodes (``would_hold``, less backfill by time, as ``blocked`` rules) are named;
        "" when none did (it landed where no suspension let it)."""
        if not self._no_quota:
            return ""
        used = set(nodes)
        if not used:
            return ""
        named = [r for r, held in self.would_hold(flavor, snapshot) if r.holder != holder and used.intersection(held)
                 and not (ends_at is not None and r.expected_free is not None and ends_at <= r.expected_free)]
        if not named:
            return ""
        what = "; ".join(f"{r.holder} on {r.level or 'flavor'} {'/'.join(r.path) or 'the whole flavor'}" for r in named)
        return f" (reservations suspended, their holders hold no quota, so they block nobody: {what})"

    def idle(self, flavor: str, snapshot: Snapshot) -> int:
        """GPUs the reservations on ``flavor`` hold idle on ``snapshot``: held and free."""
        free = snapshot.free[:, 0]
        return sum(min(g, int(free[snapshot.node_index[n]])) for _, held in self.holding(flavor, snapshot) for n, g in held.items()
                   if n in snapshot.node_index)


def nodes_changed(before: Reservation, now: Reservation) -> bool:
    """``now`` (the same holder's reservation, replaced) holds other nodes than ``before``: on
    another flavor, other nodes, or captured differently, so what ``before`` held may be free."""
    return (now.flavor, now.nodes, now.capture) != (before.flavor, before.nodes, before.capture)


def window_later(before: Reservation, now: Reservation) -> bool:
    """``now`` (the same holder's reservation, replaced) is expected free later than ``before`` on
    the same flavor: known now, and unknown (no backfill by time) or sooner before. Workloads
    whose limit ends in between may backfill what it still holds (``backfills_now``)."""
    if now.flavor != before.flavor or now.expected_free is None:
        return False
    return before.expected_free is None or now.expected_free > before.expected_free


def backfills_now(before: Reservation, now: Reservation, at: float, limit: float | None) -> bool:
    """A Workload with ``limit`` (its ``maximumExecutionTimeSeconds``; None: none), started at
    ``at``, ends before ``now``'s expected free time and did not end before ``before``'s: the
    backfill rule (``Reservations.blocked``) lets it onto the reserved nodes now, and did not when
    the window was ``before``. One that could backfill already gained nothing by the move."""
    if limit is None or now.expected_free is None or at + limit > now.expected_free:
        return False
    return before.expected_free is None or at + limit > before.expected_free


def choose_target(snapshot: Snapshot, holder: str, level: str | None, gpus: int, per_pod_gpus: int, outlooks: Sequence[DomainOutlook],
                  running: Iterable[Running], estimator: RuntimeEstimator, now: float, by: str = "drain") -> Reservation | None:
    """The domain to reserve (``by="drain"``: fewest GPUs to drain, then soonest expected free;
    ``by="soonest"``: soonest expected free, then fewest to drain; then domain order) and its
    nodes the gang will need there; None when no domain holds it."""
    if not outlooks:
        return None
    def rank(o: DomainOutlook) -> tuple[float, float, int]:
        free = o.free_at if o.free_at is not None else math.inf
        return (free, o.to_drain, o.domain) if by == "soonest" else (o.to_drain, free, o.domain)

    best = min(outlooks, key=rank)
    lv = snapshot.level_index(level) if level is not None and level in snapshot.level_labels else None
    lo, hi = snapshot.domain_range(lv, best.domain) if lv is not None else (0, snapshot.num_nodes)
    node_end = latest_ends(snapshot, lv, best.domain, running, estimator, now)
    per = max(per_pod_gpus, 1)
    alloc = np.where(snapshot.eligible.astype(bool), snapshot.alloc[:, 0], 0)
    order = sorted(range(lo, hi), key=lambda i: (snapshot.free[i, 0] < alloc[i], node_end.get(i, now), -int(alloc[i]), i))
    chosen: list[tuple[str, int]] = []
    rows: list[int] = []
    got_gpus = 0
    for i in order:
        usable = int(alloc[i]) // per * per
        if usable <= 0:
            continue
        take = min(usable, gpus - got_gpus)
        take = -(-take // per) * per
        chosen.append((snapshot.node_names[i], take))
        rows.append(i)
        got_gpus += take
        if got_gpus >= gpus:
            break
    if got_gpus < gpus:
        return None
    expected = _free_at(node_end, rows, now)
    return Reservation(holder, snapshot.flavor, level, best.path, tuple(sorted(chosen)), now, expected, per_pod=per)


def free_at(snapshot: Snapshot, held: Reservation, running: Iterable[Running], estimator: RuntimeEstimator, now: float) -> float | None:
    """When the nodes ``held`` holds are expected free, as ``choose_target`` times the nodes it
    chooses: the latest expected end of what runs on them, never before ``now``; None when a
    runtime there is unknown. A held reservation keeps its nodes, so this, not the time of the
    nodes ``choose_target`` would choose now, is the time backfill is judged against. Nodes no
    longer on ``snapshot`` hold nothing and are left out; None when none is left."""
    rows = [snapshot.node_index[n] for n, _ in held.nodes if n in snapshot.node_index]
    if not rows:
        return None
    lv = snapshot.level_index(held.level) if held.level is not None and held.level in snapshot.level_labels else None
    node_end: dict[int, float] = {}
    for domain in sorted({int(snapshot.node_dom[lv, i]) for i in rows} if lv is not None else {0}):
        node_end.update(latest_ends(snapshot, lv, domain, running, estimator, now))
    return _free_at(node_end, rows, now)


def _free_at(node_end: Mapping[int, float], rows: Iterable[int], now: float) -> float | None:
    """The latest of ``node_end`` (node index → expected end) over ``rows``, never before ``now``;
    None when infinite (a runtime unknown)."""
    latest = max((node_end.get(i, now) for i in rows), default=now)
    latest = max(latest, now)
    return latest if math.isfinite(latest) else None


def should_move(held: Reservation, target: Reservation, outlooks: Sequence[DomainOutlook], margin: float | None) -> bool:
    """Whether ``held`` moves to ``target`` (another domain): only with a ``margin``, and only when
    its own domain is now expected free more than ``margin`` seconds after ``target`` (a domain
    no longer able to hold the gang, or with an unknown free time, counts as never free)."""
    if margin is None or held.path == target.path or target.expected_free is None:
        return False
    own = next((o for o in outlooks if o.path == held.path), None)
    own_free = own.free_at if own is not None and own.free_at is not None else math.inf
    return own_free > target.expected_free + margin


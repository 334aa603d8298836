"""The decision itself: cluster state + one Workload → a Verdict with its podSetUpdates.

Pure with respect to the API: it reads the cache's snapshots and the ledger and writes nothing,
so the controller, ``atoll explain`` and the simulator run the same code. Per flavor the
Workload's GPU PodSets are placed together on the flavor's snapshot forked with what admitted
Workloads still hold; the per-flavor answers combine into one verdict (any reject rejects, any
wait waits, else admit). An admitted PodSet gets the nodeSelector of the lowest domain that holds
its whole placement, plus the decision id and the planned nodes as annotations.

Why this module is longer than the others: one decision runs, in order, the profile, the
snapshot forked with what admitted Workloads hold, the spread and queue turns, the search that
must stay robust to what the scheduler may still bind, and the podSetUpdates; each step reads
what the one before left in the same ``Decider``. The parts that stand alone already live in
rooms of their own (``_queueing``, ``_spread``, ``_records``, ``_invariant``, ``_domains``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from admission import vocabulary
from admission.controller._cache import ClusterCache, FlavorProblem
from admission.controller._domains import DomainLedger
from admission.controller._invariant import Claim, ClaimSet, exposed_claims
from admission.controller._ledger import ANN_DECISION_ID, ANN_ENFORCEMENT, ANN_PLANNED_NODES, Ledger, encode_planned
from admission.controller._queueing import (
    SpanCost,
    behind_gang,
    created_at,
    hold_reservations,
    join_line,
    max_execution_seconds,
    queue_turn,
    reserve_deadline,
    suspended_note,
)
from admission.controller._records import PodSetRecord, WhyNotRecord, slice_records, truncate
from admission.controller._settings import Settings
from admission.controller._spread import apply_spread, never_message, read_spread
from admission.controller._wait import atoll_check_names, read_wait_state
from admission.controller._weighed import weighing_records
from admission.controller._workloads import ANN_CLASS, ANN_PROFILE, PodSetTemplate, WorkloadError, WorkloadView, parse_workload
from admission.kube import ADMISSION_CHECKS, WORKLOADS, Obj, object_key
from admission.queue import Need, Outlook, span_stamp
from policies import Decision, PodSetSpec, Profile, ProfileLevelError, WaitState, WorkloadClass, decide
from topology import HOSTNAME_LABEL, Level, NodeInfo, PodSetPlacement, ResourceVector, SliceLayer, Snapshot, fragmentation_index

__all__ = ["LABEL_DECISION_ID", "MAX_PODSET_UPDATES", "STATE", "Decider", "Verdict"]

STATE = {"admit": "Ready", "wait": "Retry", "reject": "Rejected"}
"""Decision outcome → Atoll's check state."""
LABEL_DECISION_ID = vocabulary.DECISION_ID
"""Pod label Atoll's podSetUpdates add: selects the pods of a placed Workload (the exact-placement
webhook's objectSelector) without reading annotations."""
MAX_PODSET_UPDATES = 18
"""Kueue's limit on podSetUpdates per check entry."""


@dataclass
class Verdict:
    """What Atoll decided for one Workload, and everything the write, the Event and the record need."""

    outcome: str
    message: str
    profile: str = ""
    workload_class: str = ""
    flavor: str = ""
    reason: str = ""
    """Why it waits: no-domain, relax-pending or config."""
    retry_after: int = 0
    relaxed: bool = False
    podset_updates: list[dict[str, Any]] = field(default_factory=list)
    placements: list[PodSetRecord] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    """Each graph edge as placed (``LinkPlacement.as_dict``), when admitted."""
    why_not: list[WhyNotRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    generation: int = 0
    reserved_gpus: int = 0
    decision_id: str = ""
    written: bool = False
    needs: list[Need] = field(default_factory=list)
    """Waiting for a domain: per waiting flavor, the room that could change the answer (``Need``:
    GPUs free in one domain of a level, or the moment an elastic profile may span). Empty when it
    waits for something else (owed pods, the configuration): then only a timer helps."""
    fabric_after: Callable[[], list[tuple[str, int, float]]] | None = None
    """(flavor, free GPUs, fragmentation index) after this decision, for the gauges: measured
    over the whole flavor, so only when asked (the simulator never asks)."""

    @property
    def fabric(self) -> list[tuple[str, int, float]]:
        return self.fabric_after() if self.fabric_after is not None else []

    gpus: int = 0
    """GPUs the Workload asks for in all (pods × GPUs a pod), for its size band."""
    parked: bool = False
    """A wait for a domain the controller parks (``waits_parked``): the check stays ``Pending``
    so Kueue keeps the quota, and Atoll decides again when what it waits for changes."""
    park: bool = False
    """Its profile parks its waits for a domain (``queueing.parkWaiting``)."""
    wait_or_span: list[dict[str, object]] = field(default_factory=list)
    """Per flavor where the queue manager weighed waiting for one domain against spanning (or
    against GPUs under the speed floor): both sides and the choice (``weighing_records``)."""

    @property
    def state(self) -> str:
        return "Pending" if self.parked and self.outcome == "wait" else STATE[self.outcome]

    def waits_parked(self, override: bool | None) -> bool:
        """Whether this verdict parks its Workload: a wait for a domain (``needs``) whose profile
        parks its waits (``park``), unless ``override`` (``decisions.park_waiting``, the
        simulator's ``parking``) decides for every profile: True parks, False never. The
        controller and the simulator ask this same question."""
        return self.outcome == "wait" and bool(self.needs) and (self.park if override is None else override)


@dataclass
class _FlavorResult:
    flavor: str
    outcome: str
    message: str
    reason: str = ""
    retry_after: int = 0
    relaxed: bool = False
    decision: Decision | None = None
    updates: list[dict[str, Any]] = field(default_factory=list)
    placements: list[PodSetRecord] = field(default_factory=list)
    why_not: list[WhyNotRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    generation: int = 0
    reserved: int = 0
    after: Snapshot | None = None
    need: Need | None = None
    weighed: list[dict[str, object]] = field(default_factory=list)


class Decider:
    """Decides Workloads on the state the controller (or the simulator) keeps in ``cache`` and ``ledger``."""

    def __init__(self, cache: ClusterCache, ledger: Ledger, settings: Settings, *, explain: bool = True) -> None:
        self.cache = cache
        self.ledger = ledger
        self.explain = explain
        """False: verdicts leave out the losing domains (``why_not``); outcome, message and
        podSetUpdates are the same (``decide``'s contract). For a caller that keeps no records."""
        self.settings = settings
        self._shapes: dict[object, object] = {}
        """PodSet specs and links by value → the one instance decisions use (``read``)."""
        self.queue: Outlook | None = None
        """The queue manager's state (reservations, expected ends); None: the profiles' fixed rules alone."""
        self.span_cost: SpanCost | None = None
        """Prices a span for wait-or-span (``_queueing``); None: relaxAfterSeconds decides."""
        self.lent: set[str] = set()
        """Workloads (namespace/name) reactivated by ``queueing.lendParked`` since their last
        decision: the next one says so in its record's notes."""
        self.holds: dict[str, dict[str, tuple[str, ...]]] = {}
        """flavor → gang uid → the nodes of a domain held for that gang while preempted Workloads
        leave it: every other Workload's decision leaves them out (``Preemptor``)."""

    MAX_SHAPES = 8192
    """Distinct PodSet specs and links kept for ``read`` (all are dropped when it is passed)."""

    def read(self, obj: Obj) -> WorkloadView:
        """``parse_workload(obj)``, with each PodSet spec and link the one instance of its value.

        The engine remembers a request's derived forms by the identity of these frozen inputs
        (``Snapshot.remember``); a Workload read afresh for every decision would never find them.
        Equal values give equal answers, so Workloads of one shape share them, as the
        simulator's do (it reads each shape once)."""
        view = parse_workload(obj, gpu_resource=self.cache.gpu_resource)
        if len(self._shapes) > self.MAX_SHAPES:
            self._shapes.clear()
        podsets = tuple(self._shapes.setdefault(s, s) for s in view.podsets)
        links = tuple(self._shapes.setdefault(lk, lk) for lk in view.links)
        return dataclasses.replace(view, podsets=podsets, links=links)  # type: ignore[arg-type]

    @staticmethod
    def warm_up() -> None:
        """Compile (or load from numba's cache) the finder's kernels before the first Workload
        waits on them."""
        levels = [Level("warm-up/block"), Level("warm-up/island")]
        nodes = [NodeInfo(f"n{i}", {"warm-up/block": "b", "warm-up/island": f"i{i // 2}"}, ResourceVector(4, 1000, 1000, 10))
                 for i in range(4)]
        snap = Snapshot("warm-up", levels, nodes)
        spec = [PodSetSpec("main", 2, ResourceVector(gpu=4))]
        for profile in (Profile(requiredLevel="warm-up/island"), Profile(preferredLevel="warm-up/island", relaxAfterSeconds=0)):
            decide(snap, spec, profile_name="warm-up", profile=profile, now=0.0)
        # no island holds 3 pods, nor a slice of 4: the reason a wait gives is counted by kernels of its own
        for ps in (PodSetSpec("main", 3, ResourceVector(gpu=4)), PodSetSpec("main", 4, ResourceVector(gpu=4), slices=(SliceLayer("warm-up/island", 4),))):
            decide(snap, [ps], profile_name="warm-up", profile=Profile(requiredLevel="warm-up/island"), now=0.0)

    def warm(self) -> list[str]:
        """Build the snapshot of every flavor the profiles map and resolve on it what admitted
        Workloads still owe (the ledger's book), as the first decision on each flavor would: a
        controller pays this once, when everything is listed, instead of in its first decision.
        Returns the flavors warmed; one that cannot be read is left to its first decision, which
        says why."""
        doc = self.cache.profiles
        warmed = []
        for flavor in sorted(doc.flavors) if doc is not None else []:
            try:
                self.ledger.warm(self.cache.snapshot(flavor))
            except (FlavorProblem, ValueError):
                continue
            warmed.append(flavor)
        return warmed

    def evaluate(self, obj: Obj, decision_id: str, now: float, *, view: WorkloadView | None = None) -> Verdict:
        """The decision for one Workload on the current cache and ledger, at time ``now``.

        ``view``: ``parse_workload(obj)`` already read by a caller whose Workload has not changed
        since (the simulator reads each of its Workloads once; its spec and admission never change
        while it waits)."""
        doc = self.cache.profiles
        assert doc is not None
        wait = read_wait_state(obj, atoll_check_names(self.cache.objects[ADMISSION_CHECKS], self.settings.kueue))
        try:
            if view is None:
                view = self.read(obj)
        except WorkloadError as exc:
            name = object_key(obj) if isinstance(obj.get("metadata"), dict) else "(no metadata)"
            return Verdict("reject", f"Rejected: Workload {name} cannot be read: {exc}", decision_id=decision_id)
        try:
            profile_name, profile = doc.profile_for(annotation=view.profile, local_queue=view.local_queue, cluster_queue=view.cluster_queue)
        except KeyError:
            return Verdict("reject", f"Rejected: pod template annotation {ANN_PROFILE}={view.profile!r} names no profile "
                                     f"(profiles: {', '.join(sorted(doc.profiles))})", decision_id=decision_id)
        cls: WorkloadClass | None = None
        if view.workload_class:
            cls = doc.classes.get(view.workload_class)
            if cls is None:
                return Verdict("reject", f"Rejected: pod template annotation {ANN_CLASS}={view.workload_class!r} names no workload class "
                                         f"(classes: {', '.join(sorted(doc.classes)) or 'none defined'})",
                               profile=profile_name, decision_id=decision_id)
        broken = doc.disallowed(profile=view.profile, workload_class=view.workload_class, local_queue=view.local_queue,
                                cluster_queue=view.cluster_queue)
        if broken:  # an admin's queue rule: the team may not pick another profile or class here
            return Verdict("reject", f"Rejected: pod template annotation {broken}", profile=profile_name, decision_id=decision_id)
        groups: dict[str, list[PodSetSpec]] = {}
        for spec in view.podsets:
            if spec.per_pod.gpu > 0 and spec.name in view.flavors:
                groups.setdefault(view.flavors[spec.name], []).append(spec)
            elif spec.per_pod.gpu <= 0 and view.other_flavors.get(spec.name) in doc.flavors:  # no GPU, on an Atoll flavor: placed and counted
                groups.setdefault(view.other_flavors[spec.name], []).append(spec)
        base = Verdict("admit", "", profile=profile_name, workload_class=view.workload_class or "", decision_id=decision_id,
                       park=profile.queueing.park_waiting)
        placed_here = {s.name for specs in groups.values() for s in specs}
        base.notes = [n for n in unplaced_podsets(view, self.cache.gpu_resource)
                      if not any(n.startswith(f"podSets[{name}]:") for name in placed_here)]
        base.gpus = sum(s.count * s.per_pod.gpu for s in view.podsets)
        if not groups:
            if view.empty_podsets and not view.podsets:
                base.message = "Ready: every PodSet has count 0; nothing for Atoll to place"
            else:
                base.message = "Ready: nothing for Atoll to place: " + "; ".join(base.notes)
            return base
        results = [self._evaluate_flavor(obj, view, flavor, specs, profile_name, profile, cls, wait, decision_id, now)
                   for flavor, specs in sorted(groups.items())]
        verdict = self._combine(results, profile, wait, base)
        if self.lent and (lent := f"{view.namespace}/{view.name}") in self.lent:
            self.lent.discard(lent)
            verdict.notes.append(f"back from a quota yield by queueing.lendParked: {profile.queueing.lend_parked}, the placement "
                                 "it was parked on fitting while a Workload queued before the give still waited for quota")
        if self.queue is not None and verdict.outcome != "wait":  # placed or rejected: out of the line
            self.queue.left(f"{view.namespace}/{view.name}")
        return verdict

    def _combine(self, results: Sequence[_FlavorResult], profile: Profile, wait: WaitState, base: Verdict) -> Verdict:
        """One verdict from the per-flavor ones: any reject rejects, any wait waits, else admit."""
        v = base
        v.flavor = ",".join(r.flavor for r in results)
        v.generation = max(r.generation for r in results)
        v.reserved_gpus = sum(r.reserved for r in results)
        v.why_not = [w for r in results for w in r.why_not]
        v.notes = v.notes + [n for r in results for n in r.notes]
        v.relaxed = any(r.relaxed for r in results)
        v.wait_or_span = [w for r in results for w in r.weighed]
        rejected = [r for r in results if r.outcome == "reject"]
        waiting = [r for r in results if r.outcome == "wait"]
        if rejected:
            v.outcome = "reject"
            v.message = f"Rejected by Atoll (profile {v.profile}): " + "; ".join(r.message for r in rejected)
        elif waiting:
            v.outcome = "wait"
            v.reason = "config" if any(r.reason == "config" for r in waiting) else waiting[0].reason
            v.retry_after = max(r.retry_after for r in waiting)
            if all(r.need is not None for r in waiting):
                v.needs = [r.need for r in waiting if r.need is not None]
            v.message = f"Waiting for placement (profile {v.profile}, attempt {wait.attempts + 1}): " + "; ".join(r.message for r in waiting)
        else:
            v.outcome = "admit"
            v.podset_updates = [u for r in results for u in r.updates]
            v.placements = [p for r in results for p in r.placements]
            v.links = [link.as_dict() for r in results if r.decision is not None and r.decision.placement is not None
                       for link in r.decision.placement.links]
            if len(v.podset_updates) > MAX_PODSET_UPDATES:
                v.notes.append(f"only the first {MAX_PODSET_UPDATES} of {len(v.podset_updates)} podSetUpdates are written (Kueue's limit)")
                v.podset_updates = v.podset_updates[:MAX_PODSET_UPDATES]
            v.message = (f"Placed by Atoll (profile {v.profile}, decision {v.decision_id}): "
                         + "; ".join(r.message for r in results if r.message) + (" | " + "; ".join(v.notes) if v.notes else ""))
        placed = {id(r.after): r.decision for r in results if v.outcome == "admit" and r.after is not None and r.decision is not None
                  and r.decision.placement is not None and r.decision.request is not None}
        after = [r.after for r in results if r.after is not None and r.after.num_nodes]

        def fabric_after() -> list[tuple[str, int, float]]:
            for i, s in enumerate(after):  # the new placement counts as used, once, on a fork (the search may have read the cache's own)
                decision = placed.pop(id(s), None)
                if decision is not None:
                    after[i] = s.fork()
                    _reserve(after[i], decision)
            return [(s.flavor, s.free_gpus(), fragmentation_index(s, _island_level(s, profile), profile.fragmentation.reference_gang_gpus))
                    for s in after]

        v.fabric_after = fabric_after
        return v

    def room_now(self, flavor: str) -> Snapshot | None:
        """The flavor's snapshot as a decision would search it, what admitted Workloads still owe
        counted as used (on a fork; the shared one when nothing is owed); None when the flavor
        cannot be read. ``queueing.lendParked``'s fit test (``fits_now``) reads it."""
        try:
            shared = self.cache.snapshot(flavor)
        except (FlavorProblem, ValueError):
            return None
        owed = self.ledger.witness(shared)
        snap = shared.fork() if owed.used_rows()[0].size or owed.short() else shared
        self.ledger.apply(snap, witness=owed, report=False)
        return snap

    def _evaluate_flavor(self, obj: Obj, view: WorkloadView, flavor: str, specs: list[PodSetSpec], profile_name: str, profile: Profile,
                         cls: WorkloadClass | None, wait: WaitState, decision_id: str, now: float) -> _FlavorResult:
        config_wait = self.settings.decisions.config_error_retry_seconds
        try:
            shared = self.cache.snapshot(flavor)
        except FlavorProblem as problem:
            if problem.kind == "kueue-tas":
                return self._validate_kueue_tas(obj, flavor, specs, profile_name, profile, wait, str(problem))
            return _FlavorResult(flavor, "wait", f"{problem}; retry in {config_wait}s", "config", config_wait)
        except ValueError as exc:
            return _FlavorResult(flavor, "wait", f"flavor {flavor}: {exc}; retry in {config_wait}s", "config", config_wait)
        key = f"{view.namespace}/{view.name}"
        gang = behind_gang(self.queue, profile, key, obj, view.cluster_queue, flavor, specs, now,
                           shared.free_gpus() if profile.queueing.hold_backfill else 0)
        if gang is not None:  # holdBehindGangs: an owed gang comes first; parked (its quota can go back to the gang)
            smallest = min(specs, key=lambda s: (s.count * s.per_pod.gpu, s.per_pod.gpu))
            delay = profile.retry.delay(wait.attempts)
            behind = _FlavorResult(flavor, "wait", f"waits behind an owed gang: {gang.describe()} (it has waited "
                                                 f"{now - gang.created:.0f}s since it was created, queueing.reserveAfterSeconds "
                                                 f"{profile.queueing.reserve_after_seconds}), and queueing.holdBehindGangs "
                                                 f"{profile.queueing.hold_behind_gangs} keeps what is behind it from taking its quota "
                                                 f"and GPUs; decided again when it is owed no longer; retry in {delay}s",
                                 "behind-gang", delay, generation=shared.generation)
            behind.need = Need(flavor, None, smallest.count, max(smallest.per_pod.gpu, 1), behind=gang.key)
            return behind
        owed = self.ledger.witness(shared, exclude_uid=view.uid)
        # What admitted Workloads still owe counts as used, on a fork; with nothing owed the
        # search reads the shared snapshot itself (nothing below writes to it).
        snap = shared.fork() if owed.used_rows()[0].size or owed.short() else shared
        reserved = self.ledger.apply(snap, exclude_uid=view.uid, witness=owed)
        held_away = [snap.node_index[n] for uid, nodes in self.holds.get(flavor, {}).items() if uid != view.uid for n in nodes
                     if n in snap.node_index]
        if held_away:  # a domain being cleared for another gang takes no new work
            snap = snap.fork() if snap is shared else snap
            for i in held_away:
                snap.exclude(i)
        unreserved = snap
        snap, blocked = hold_reservations(self.queue, shared, snap, flavor, key, obj, now)
        names = {s.name for s in specs}
        links = [lk for lk in view.links if lk.a in names and lk.b in names]
        away, cleared = (None, None) if self._enforcement(flavor) == "exact" else _out_of_reach(unreserved, held_away, blocked)
        held = _Holding(self.ledger.claims(snap, exclude_uid=view.uid), np.asarray(shared.free[:, 0]), np.asarray(shared.alloc[:, 0]), away, cleared)
        try:
            group = read_spread(obj, view)
        except WorkloadError as exc:
            return _FlavorResult(flavor, "reject", str(exc), generation=snap.generation, reserved=reserved)
        spread = None
        if group is not None:  # replicas of one service, each its own Workload: leave out the domains the group has filled
            never = never_message(shared, group, sum(s.count * s.per_pod.gpu for s in specs))
            if never:
                return _FlavorResult(flavor, "reject", never, generation=snap.generation, reserved=reserved)
            spread = apply_spread(snap, shared, group, self._spread_members(flavor, group, view.uid))
            snap = spread.snapshot

        def search(on: Snapshot) -> Decision:
            return decide(on, specs, profile_name=profile_name, profile=profile, now=now, wait=wait, workload_class=cls, links=links,
                          explain=self.explain)

        try:
            profile = profile.for_flavor(flavor, shared.level_labels, name=profile_name)  # the levels this flavor has
            found = self._search_robust(shared, snap, search, view, specs, profile, held)
            if spread is not None and spread.preferred_only and (isinstance(found, _Conflict) or found[0].outcome != "admit"):
                snap = spread.plain  # a Preferred spread only orders: without a placement clear of the full domains, take one in them
                found = self._search_robust(shared, snap, search, view, specs, profile, held)
        except ProfileLevelError as exc:
            fix = "" if exc.typo else " (fix the profiles document)"
            return _FlavorResult(flavor, "wait", f"{exc}{fix}; retry in {config_wait}s", "config", config_wait,
                                 generation=snap.generation, reserved=reserved)
        if isinstance(found, _HeldAway):
            delay = profile.retry.delay(wait.attempts)
            what = "nodes cleared for another gang" if held_away else "free GPUs reserved for another gang"
            return _FlavorResult(flavor, "wait", f"every placement found has a nodeSelector domain ({found.selector}) that holds "
                                                 f"{what}, and under domain enforcement the kube-scheduler "
                                                 f"could bind its pods there; waiting until the "
                                                 f"{'hold' if held_away else 'reservation'} ends; retry in {delay}s",
                                 "no-domain", delay, generation=snap.generation, reserved=reserved)
        if isinstance(found, _Conflict):
            delay = profile.retry.delay(wait.attempts)
            remedy = (f"flavors.{flavor}.enforcement: exact pins each pod to its planned node, so PodSets cannot trade room"
                      if self._enforcement(flavor) != "exact" else "")
            if found.waited_on:  # pods other Workloads owe are in the way: they bind (or go), and the room is settled
                return _FlavorResult(flavor, "wait", f"every placement found shares a nodeSelector domain with pods admitted Workloads "
                                                     f"{', '.join(found.waited_on)} still owe, and the scheduler could give one's room "
                                                     f"to the other; waiting until they bind; retry in {delay}s", "owed-pods", delay,
                                     generation=snap.generation, reserved=reserved)
            own = (f"podSets {', '.join(found.podsets)} of this Workload share a nodeSelector domain, and the kube-scheduler could "
                   f"bind one's pods in the room the other needs")
            if found.on_empty:  # no event makes this placeable: say so now, with the remedy
                return _FlavorResult(flavor, "reject", f"{own}, on every placement found even with the flavor empty; no other "
                                                       f"Workload is involved, so waiting cannot help"
                                                       + (f"; {remedy}" if remedy else ""), "self-conflict",
                                     generation=snap.generation, reserved=reserved)
            return _FlavorResult(flavor, "wait", f"{own}, on every placement the room free now allows (an empty flavor has one "
                                                 f"where they cannot); no other Workload is waited on; waiting for room"
                                                 + (f" ({remedy})" if remedy else "") + f"; retry in {delay}s", "no-domain", delay,
                                 generation=snap.generation, reserved=reserved)
        searched = snap
        decision, levels, set_aside, snap = found
        turn_note, weighed = "", list[dict[str, object]]()
        if self.queue is not None and decision.outcome == "wait":  # in line for a domain on this flavor: the waits behind count it
            join_line(self.queue, key, flavor, specs, obj, wait, now)
        if self.queue is not None and decision.outcome == "wait" and not set_aside:
            def span_search() -> tuple[Decision, dict[str, int], int, Snapshot] | None:
                relax = dataclasses.replace(wait, first_waited_at=now - (profile.relax_after_seconds or 0))
                got = self._search_robust(shared, searched, lambda on: decide(on, specs, profile_name=profile_name, profile=profile, now=now,
                                          wait=relax, workload_class=cls, links=links, explain=False), view, specs, profile, held)
                return None if isinstance(got, _Conflict) or got[0].outcome != "admit" else got
            def stamp() -> tuple[object, ...] | None:  # what span_search reads; owed claims in play: not kept
                return None if held.claims.any_live() else span_stamp(
                    view.uid, profile, tuple(specs), searched.node_names, searched.free, searched.eligible,
                    searched.perf, tuple(sorted((k, tuple(v)) for k, v in searched.taint_blocked.items())), held.free_gpu)
            def floor_search() -> tuple[Decision, dict[str, int], int, Snapshot] | None:
                lower = profile.queueing.perf_floor_by_cost
                if cls is None or lower is None or cls.perf_floor <= lower:
                    return None
                slower = cls.model_copy(update={"perf_floor": lower})
                got = self._search_robust(shared, searched, lambda on: decide(on, specs, profile_name=profile_name, profile=profile, now=now,
                                          wait=wait, workload_class=slower, links=links, explain=False), view, specs, profile, held)
                return None if isinstance(got, _Conflict) or got[0].outcome != "admit" else got
            turn, span = queue_turn(self.queue, key, searched, specs, profile, wait, now, decision, blocked, obj, span_search,
                                    lambda f: f[0] if f is not None else decision, self.span_cost, stamp, floor_search,
                                    cls.perf_floor if cls is not None else 0.0)
            turn_note, weighed = turn.note, weighing_records(self.queue, turn, searched, obj, specs, now)
            if span is not None:
                decision, levels, set_aside, snap = span
                self.queue.reservations.release(key)
        elif self.queue is not None and decision.outcome == "admit":
            self.queue.reservations.release(key)
        message = decision.message + (f" ({turn_note})" if turn_note else "") + suspended_note(self.queue, flavor, key, decision, shared, obj, now)
        if set_aside and decision.outcome != "admit":
            message += (f" ({set_aside} nodes set aside: pods other admitted Workloads still owe may bind there; "
                        "they free up as those pods bind)")
        result = _FlavorResult(flavor, decision.outcome, message, relaxed=decision.relaxed, decision=decision,
                               generation=snap.generation, reserved=reserved, after=snap, weighed=weighed)
        result.notes.extend(decision.notes)  # Kueue annotations read but not honoured: said in the message, record and Event
        if spread is not None:
            result.notes.extend(spread.ignored)
            if spread.note and decision.outcome == "wait":
                result.message += f" ({spread.note})"
            elif spread.note:
                result.notes.append(spread.note)
        placement = decision.placement
        domains = DomainLedger(shared, owed, lambda: self.ledger.reservations(flavor), self.cache.pods_on_node) if self.explain else None
        if placement is not None:
            result.why_not = [WhyNotRecord(v.podset, v.level, list(v.path), v.capacity_pods, v.need_pods, v.reason,
                                           domains.view(v.level, v.path) if domains is not None else None)
                              for v in placement.why_not[:6]]
        if decision.outcome == "wait":
            result.retry_after = decision.retry_after_seconds
            result.reason = ("owed-pods" if set_aside else
                             "relax-pending" if (profile.preferred_level and not decision.relaxed and profile.relax_after_seconds) else "no-domain")
            if not set_aside:
                result.need = _need(flavor, decision, profile, wait, now, shared.level_labels, max_execution_seconds(obj))
                result.need = reserve_deadline(result.need, self.queue, key, profile, wait, now, specs, created_at(obj))
        elif decision.outcome == "admit" and placement is not None:
            per_pod = {s.name: s.per_pod for s in specs}
            for ps in placement.podsets:
                update, notes, selector = self._podset_update(ps, view.templates.get(ps.name, PodSetTemplate()), snap, decision_id,
                                                              exact=self._enforcement(flavor) == "exact", level=levels.get(ps.name))
                result.updates.append(update)
                result.notes.extend(notes)
                slices = slice_records(ps.slices, selector, snap.level_labels, exact=self._enforcement(flavor) == "exact")
                if domains is not None:
                    slices = [{**sl, "ledger": domains.view(sl["level"], sl["domain"])} for sl in slices]
                result.placements.append(PodSetRecord(
                    ps.name, ps.pods, per_pod[ps.name].gpu, dict(zip(ps.nodes, ps.pods_per_node)), ps.domain_level, list(ps.domain_path),
                    ps.islands, ps.island_level, round(ps.min_perf, 4), round(ps.max_perf, 4), ps.bottleneck_gbps, selector, slices,
                    domains.view(ps.domain_level, ps.domain_path) if domains is not None else None))
        return result

    def _spread_members(self, flavor: str, group: Any, uid: str) -> list[list[str]]:
        """The planned nodes of each admitted replica of ``group`` on ``flavor`` (the ledger's
        reservations of Workloads the group's selector matches), the Workload deciding left out."""
        workloads = self.cache.objects[WORKLOADS]
        nodes: dict[str, list[str]] = {}
        for r in self.ledger.reservations(flavor):
            if r.uid == uid:
                continue
            obj = workloads.get(r.workload)
            if obj is not None and group.matches(obj):
                nodes.setdefault(r.uid, []).extend(n for n, _ in r.planned)
        return [nodes[k] for k in sorted(nodes)]

    def _enforcement(self, flavor: str) -> str:
        settings = self.cache.profiles.flavors.get(flavor) if self.cache.profiles else None
        return settings.enforcement if settings is not None else "domain"

    def _podset_update(self, ps: PodSetPlacement, template: PodSetTemplate, snap: Snapshot,
                       decision_id: str, *, exact: bool = False, level: int | None = None) -> tuple[dict[str, Any], list[str], dict[str, str]]:
        """nodeSelector of the lowest domain holding the PodSet (or of ``level``, a wider one the
        robustness check chose), plus decision id and planned nodes; keys that would conflict with
        the pod template are left out (and said so)."""
        notes: list[str] = []
        selector: dict[str, str] = {}
        if ps.domain_level in snap.level_labels:
            own = snap.level_index(ps.domain_level)
            selector = self._selector_at(snap, ps, own if level is None else level)
            if level is not None and level != own:
                notes.append(f"podSets[{ps.name}]: nodeSelector at {snap.level_labels[level]}, not {ps.domain_level}: pods other "
                             "admitted Workloads (or this Workload's other PodSets) still owe may bind on its planned nodes")
        annotations = {ANN_DECISION_ID: decision_id}
        if exact:
            annotations[ANN_ENFORCEMENT] = "exact"
        budget = self.settings.decisions.planned_nodes_max_chars
        planned = encode_planned(list(zip(ps.nodes, ps.pods_per_node)), budget)
        if planned is None:
            notes.append(f"podSets[{ps.name}]: planned nodes exceed {budget} characters even compressed and are not recorded")
        else:
            annotations[ANN_PLANNED_NODES] = planned
        for where, mine, theirs in (("nodeSelector", selector, template.node_selector), ("annotation", annotations, template.annotations)):
            for key in list(mine):
                have = theirs.get(key)
                if have is None:
                    continue
                if have != mine[key]:
                    notes.append(f"podSets[{ps.name}]: not writing {where} {key}={truncate(mine[key], 80)}: the pod template already "
                                 f"sets {key}={truncate(have, 80)}")
                del mine[key]
        unheld = [s["index"] for s in slice_records(ps.slices, selector, snap.level_labels, exact=exact) if not s["held"]]
        if unheld:  # one nodeSelector per PodSet: Kueue's podSetUpdates cannot give each slice its own domain
            notes.append(f"podSets[{ps.name}]: {len(unheld)} slices share the nodeSelector of one wider domain, so the kube-scheduler "
                         f"may split a slice across {ps.slices[0].level} domains; slices are held exactly only under exact "
                         f"enforcement (flavors.{snap.flavor}.enforcement: exact pins each pod, in slice order, to its planned node)")
        labels = {LABEL_DECISION_ID: decision_id}
        if exact:  # the webhook's objectSelector: pods of domain flavors never reach it, so an outage cannot block them
            labels[ANN_ENFORCEMENT] = "exact"
        update: dict[str, Any] = {"name": ps.name, "labels": labels}
        if selector:
            update["nodeSelector"] = selector
        if annotations:
            update["annotations"] = annotations
        return update, notes, selector

    def _search_robust(self, shared: Snapshot, snap: Snapshot, search: Callable[[Snapshot], Decision], view: WorkloadView,
                       specs: Sequence[PodSetSpec], profile: Profile, held: _Holding) -> tuple[Decision, dict[str, int], int, Snapshot] | _Conflict:
        """``_search_owed``, and with nodes held for another gang (``held.away``), kept to
        nodeSelector domains that do not reach them: a placement whose selector's domain holds
        some sets aside every domain of that level that does, and is searched again (its own
        domain is the narrowest selector it can have). ``_HeldAway`` (naming the first selector
        that reached them) when no placement clear of them is left."""
        found = self._search_owed(shared, snap, search, view, specs, profile, held)
        if held.away is None:
            return found
        aside = np.zeros(shared.num_nodes, dtype=bool)
        first = ""
        for _ in range(shared.node_level + 1):  # each round sets aside the domains of one more level, at most
            if isinstance(found, _Conflict) or found[0].outcome != "admit" or found[0].placement is None:
                return found if not first else _HeldAway((), (), False, first)  # it found room only where the hold is reached
            reach = self._into_hold(shared, found[0], found[1], view, specs, held.away, held.cleared)
            if reach is None:
                return found
            more, where = reach
            first = first or where
            if not (more & ~aside).any():  # a selector of the whole flavor, or nothing new to set aside
                break
            aside |= more
            fork = snap.fork()
            for i in np.flatnonzero(aside & (fork.eligible != 0)).tolist():
                fork.exclude(i)
            found = self._search_owed(shared, fork, search, view, specs, profile, held)
        return _HeldAway((), (), False, first)

    def _into_hold(self, snap: Snapshot, decision: Decision, levels: Mapping[str, int], view: WorkloadView,
                   specs: Sequence[PodSetSpec], away: npt.NDArray[np.bool_],
                   cleared: npt.NDArray[np.bool_] | None = None) -> tuple[npt.NDArray[np.bool_], str] | None:
        """None when no PodSet's nodeSelector (at its chosen level) reaches ``away``; else the nodes
        of every domain of that level holding some of ``away`` (none for a selector of the whole
        flavor), and the first such selector, said as ``label=value``. A PodSet with no GPU is held
        only to ``cleared`` (nodes cleared whole for a preempting gang, whose CPU, memory and pod
        slots the gang needs too; GPUs reserved for a gang are not what such a pod takes)."""
        assert decision.placement is not None
        by_name = {s.name: s for s in specs}
        out = np.zeros(snap.num_nodes, dtype=bool)
        said = ""
        for ps in decision.placement.podsets:
            spec = by_name.get(ps.name)
            if spec is None:
                continue
            reached = away if spec.per_pod.gpu > 0 else cleared
            if reached is None:
                continue
            own = snap.level_index(ps.domain_level) if ps.domain_level in snap.level_labels else -1
            level = levels.get(ps.name, own)
            if level >= snap.node_level:  # a one-node selector: its pods take the planned node's room, which was counted
                continue
            selector = dict(view.templates[ps.name].node_selector) if ps.name in view.templates else {}
            if level >= 0:
                selector.update(self._selector_at(snap, ps, level))
            touched = self.ledger.domain_mask(snap, selector.items(), spec.tolerations) & reached
            if not touched.any():
                continue
            said = said or (",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "the whole flavor")
            if level >= 0 and level < snap.node_level:
                out |= np.isin(snap.node_dom[level], np.unique(snap.node_dom[level][touched]))
        return None if not said else (out, said)

    def _search_owed(self, shared: Snapshot, snap: Snapshot, search: Callable[[Snapshot], Decision], view: WorkloadView,
                     specs: Sequence[PodSetSpec], profile: Profile, held: _Holding) -> tuple[Decision, dict[str, int], int, Snapshot] | _Conflict:
        """The placement search, kept away from owed pods the scheduler could trade with the new ones.

        Without owed pods around, one search. Otherwise the first search runs with the domains
        set aside where a new PodSet would share a nodeSelector domain with a narrower or wider
        owed claim, or find too little room once owed pods are counted in whole pods of its size
        (one-node PodSets keep to nodes no multi-node claim reaches; gangs keep to islands with no
        one-node claim): owed work and new work keep to separate domains, which also keeps islands
        whole. A placement that still conflicts sets its domains aside and searches again; the
        last resort is the plain search with selectors widened up to the profile's level. A
        ``_Conflict`` when every placement found conflicts: with whom (``_conflict``)."""
        decision = search(snap)
        if decision.outcome != "admit" or decision.placement is None or (not held.claims.any_live() and len(decision.placement.podsets) < 2):
            return decision, {}, 0, snap
        levels = self._robust_levels(shared, decision, view, specs, profile, held, widen=False)[0]
        if levels is not None:
            return decision, levels, 0, snap
        plain, first = snap, decision
        wants = []
        for spec in specs:
            strict = decision.widened_to if decision.widened_to is not None else profile.required_level  # a gang no island holds
            label = spec.required_topology or strict or profile.preferred_level
            level = shared.node_level if spec.count == 1 else shared.level_index(label) if label in shared.level_labels else None
            if level is not None and spec.per_pod.gpu > 0:
                wants.append((level, spec.count, spec.per_pod.gpu))
        aside = self._set_aside(shared, held, (), np.zeros(shared.num_nodes, dtype=bool), wants)
        for _ in range(_MAX_SET_ASIDE):
            snap = plain.fork()
            fresh = np.flatnonzero(aside & (snap.eligible != 0)).tolist()
            for i in fresh:
                snap.exclude(i)
            decision = search(snap)
            if decision.outcome != "admit" or decision.placement is None:
                break
            levels, more = self._robust_levels(shared, decision, view, specs, profile, held, widen=False)
            if levels is not None:
                return decision, levels, len(fresh), snap
            aside = aside | more
        levels = self._robust_levels(shared, first, view, specs, profile, held, widen=True)[0]  # last resort: widen
        if levels is not None:
            return first, levels, 0, plain
        return self._conflict(shared, first, search, view, specs, profile, held)

    def _conflict(self, shared: Snapshot, first: Decision, search: Callable[[Snapshot], Decision], view: WorkloadView,
                  specs: Sequence[PodSetSpec], profile: Profile, held: _Holding) -> _Conflict:
        """Who a placement that conflicts on every try conflicts with. With nothing other Workloads
        owe counted, does it still conflict? No: those Workloads are waited on (named: they bind,
        and the room is settled). Yes: the Workload's own PodSets can trade room with each other,
        and waiting on owed pods would wait on nothing; then is there a placement without the
        conflict on the flavor with every node empty (``on_empty`` False: more room may come)?"""
        alone = _Holding(ClaimSet.empty(shared.num_nodes), held.free_gpu, held.may_free)
        assert first.placement is not None
        podsets = tuple(sorted(ps.name for ps in first.placement.podsets))
        if self._robust_levels(shared, first, view, specs, profile, alone, widen=True)[0] is not None:
            return _Conflict(_owed_by(held.claims, self._reach(shared, first, view, specs)), podsets, False)
        empty = shared.fork()
        empty.free[:] = empty.alloc
        decision = search(empty)
        if decision.outcome == "admit" and decision.placement is not None:
            free = _Holding(ClaimSet.empty(shared.num_nodes), np.asarray(empty.free[:, 0]))
            if self._robust_levels(empty, decision, view, specs, profile, free, widen=True)[0] is not None:
                return _Conflict((), podsets, False)
        return _Conflict((), podsets, True)

    def _reach(self, snap: Snapshot, decision: Decision, view: WorkloadView, specs: Sequence[PodSetSpec]) -> npt.NDArray[np.bool_]:
        """The nodes a placement's PodSets may bind on with their own domains' selectors."""
        assert decision.placement is not None
        by_name = {s.name: s for s in specs}
        out = np.zeros(snap.num_nodes, dtype=bool)
        for ps in decision.placement.podsets:
            if ps.name not in by_name:
                continue
            selector = dict(view.templates[ps.name].node_selector) if ps.name in view.templates else {}
            if ps.domain_level in snap.level_labels:  # else the whole flavor: no domain selector narrows it
                selector.update(self._selector_at(snap, ps, snap.level_index(ps.domain_level)))
            out |= self.ledger.domain_mask(snap, selector.items(), by_name[ps.name].tolerations)
        return out

    def _selector_at(self, snap: Snapshot, ps: PodSetPlacement, level: int) -> dict[str, str]:
        """The nodeSelector naming the PodSet's domain at ``level`` (at or above its own)."""
        if level == snap.node_level:
            info = self.cache.nodes.get(ps.nodes[0])
            return {HOSTNAME_LABEL: info.labels.get(HOSTNAME_LABEL, ps.nodes[0]) if info else ps.nodes[0]}
        path = snap.paths[snap.node_index[ps.nodes[0]]]
        value = path[level]
        selector = {snap.level_labels[level]: value}
        if value in _ambiguous_values(snap, level):  # the same value under two parents: pin the ancestors too
            for i in range(level):
                selector[snap.level_labels[i]] = path[i]
        return selector

    def _robust_levels(self, snap: Snapshot, decision: Decision, view: WorkloadView, specs: Sequence[PodSetSpec], profile: Profile,
                       held: _Holding, *, widen: bool) -> tuple[dict[str, int] | None, npt.NDArray[np.bool_]]:
        """The selector level per PodSet at which no owed pod (theirs or the new ones) can be
        starved by the scheduler's choices (``exposed_claims``): the PodSet's own domain first,
        then wider ones up to the level the profile promises (required, else preferred, else the
        relaxed span limit). None and the nodes involved when no such levels exist."""
        assert decision.placement is not None
        by_name = {s.name: s for s in specs}
        # a PodSet placed across the whole flavor (its pods spread over top-level domains) gets no
        # domain selector: its pods may bind anywhere in the flavor, so its claim is the flavor's
        # nodes (-1: nothing to widen to), and it must not be able to starve what others owe
        podsets = [ps for ps in decision.placement.podsets if by_name[ps.name].per_pod.gpu > 0]
        options: list[list[int]] = []
        for ps in podsets:
            if ps.domain_level not in snap.level_labels:
                options.append([-1])
                continue
            own = snap.level_index(ps.domain_level)
            top = own
            # one pod is on one node whatever its selector: its own required level is no bound on it
            own_required = by_name[ps.name].required_topology if ps.pods > 1 else None
            for label in (own_required, profile.required_level,
                          profile.max_span_level if decision.relaxed else profile.preferred_level):
                if label and label in snap.level_labels:
                    top = min(own, snap.level_index(label))
                    break
            options.append(list(range(own, top - 1, -1)) if widen else [own])
        exact = self._enforcement(snap.flavor) == "exact"
        if exact:  # the webhook pins each pod to its planned node: nothing to widen, the claim is those nodes
            options = [[o[0]] for o in options]
        pick = [0] * len(podsets)
        while True:
            new: list[Claim] = []
            owner: list[int] = []  # the PodSet of each new claim
            for j, (ps, opts, k) in enumerate(zip(podsets, options, pick)):
                spec = by_name[ps.name]
                if exact:  # each pod is pinned to its planned node: one claim per node, no pod can move
                    for node, pods in zip(ps.nodes, ps.pods_per_node):
                        mask = np.zeros(snap.num_nodes, dtype=bool)
                        mask[snap.node_index[node]] = True
                        new.append(Claim(view.key, ps.name, pods, spec.per_pod.gpu, mask))
                        owner.append(j)
                else:
                    selector = dict(view.templates[ps.name].node_selector) if ps.name in view.templates else {}
                    if opts[k] >= 0:
                        selector.update(self._selector_at(snap, ps, opts[k]))
                    mask = self.ledger.domain_mask(snap, selector.items(), spec.tolerations)
                    new.append(Claim(view.key, ps.name, ps.pods, spec.per_pod.gpu, mask))
                    owner.append(j)
            near = np.logical_or.reduce([c.mask for c in new]) if new else np.zeros(snap.num_nodes, dtype=bool)
            exposed = exposed_claims(held.free_gpu, held.claims.extend(new), near, may_free=held.may_free)
            if not exposed:
                return {ps.name: opts[k] for ps, opts, k in zip(podsets, options, pick) if opts[k] >= 0}, near
            widened = False
            first = len(held.claims)
            for i in sorted({owner[e - first] for e in exposed if e >= first}):
                if pick[i] + 1 < len(options[i]):
                    pick[i] += 1
                    widened = True
            if not widened:
                return None, self._set_aside(snap, held, [e for e in exposed if e < first], near,
                                             [(opts[-1], ps.pods, by_name[ps.name].per_pod.gpu) for ps, opts in zip(podsets, options)])

    @staticmethod
    def _set_aside(snap: Snapshot, held: _Holding, exposed: Sequence[int], near: npt.NDArray[np.bool_],
                   podsets: Sequence[tuple[int, int, int]]) -> npt.NDArray[np.bool_]:
        """Nodes the next search leaves out after a conflict: the new PodSets' domains, the owed
        domains they endangered, and, per new PodSet (selector level, pods, GPUs a pod), every
        domain of that level that holds a narrower owed claim or has too little room left for it
        once what is owed there is counted in whole pods of its size (``exposed_claims``'s
        measure, per domain at once), so the next search does not walk into them one by one."""
        out = near.copy()
        cs = held.claims
        for e in exposed:
            out |= cs.mask(e)
        if not len(cs):
            return out
        single = cs.node >= 0
        sizes_u = cs.sizes
        if any(level >= snap.node_level for level, _, _ in podsets):  # a one-node selector: away from wider claims' reach
            wide_u = np.zeros(len(sizes_u), dtype=bool)
            wide_u[cs.dom[~single]] = True
            out |= cs.masks[wide_u & (sizes_u > 1)].any(axis=0)
        for level, want, g in sorted(set(podsets)):
            if level < 0 or level >= snap.node_level or g <= 0:  # -1: across the whole flavor, no domain of a level to leave out
                continue
            starts = np.asarray([snap.domain_range(level, d)[0] for d in range(snap.num_domains(level))], dtype=np.int64)
            sizes = np.diff(np.append(starts, snap.num_nodes))
            slots = held.free_gpu // g
            room = np.add.reduceat(slots, starts)
            cost = cs.pods * -(-cs.gpu // g)
            # one-node claims: inside exactly one domain of the level, never spanning
            at = snap.node_dom[level][cs.node[single]]
            need = np.bincount(at, weights=cost[single], minlength=starts.size).astype(np.int64)
            narrower = np.zeros(starts.size, dtype=bool)
            narrower[at[sizes[at] > 1]] = True
            if (~single).any():
                touch_u = np.add.reduceat(cs.masks.astype(np.int64), starts, axis=1)   # distinct domains × level domains: nodes inside
                share_u = np.add.reduceat(cs.masks * slots, starts, axis=1)           # their slots there
                spans_u = (touch_u > 0).sum(axis=1) > 1
                dom = cs.dom[~single]
                touch, share, spans = touch_u[dom], share_u[dom], spans_u[dom][:, None]
                c = cost[~single][:, None]
                need = need + np.where(touch > 0, np.where(spans, np.minimum(c, share), c), 0).sum(axis=0)
                narrower |= ((touch > 0) & (touch < sizes[None, :]) & ~spans).any(axis=0)
            bad = narrower | (room - need < want)
            if bad.any():
                out |= bad[snap.node_dom[level]]
        return out

    def _validate_kueue_tas(self, obj: Obj, flavor: str, specs: Sequence[PodSetSpec], profile_name: str, profile: Profile,
                            wait: WaitState, why: str) -> _FlavorResult:
        """Kueue's TAS assigned this flavor before any check: accept it, or Retry when it breaks a
        required level of the profile (or of the PodSet's own Kueue annotation)."""
        assignments = {p.get("name"): p for p in ((obj.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []}
        notes: list[str] = []
        for spec in specs:
            required = spec.required_topology or profile.required_level
            ta = (assignments.get(spec.name) or {}).get("topologyAssignment")
            if not required:
                continue
            if not ta:
                notes.append(f"podSets[{spec.name}]: no Kueue topologyAssignment to check")
                continue
            levels = list(ta.get("levels") or [])
            if required not in levels:
                notes.append(f"podSets[{spec.name}]: Kueue's assignment names levels {levels}, not {required}; not checked")
                continue
            cut = levels.index(required) + 1
            domains = {d[:cut] for d in _tas_domains(ta)}
            if len(domains) > 1:
                delay = profile.retry.delay(wait.attempts)
                return _FlavorResult(flavor, "wait", f"{why}: Kueue's TAS placed podSets[{spec.name}] across {len(domains)} {required} "
                                                     f"domains; profile {profile_name} requires one; retry in {delay}s", "no-domain", delay)
        message = f"{why}; Kueue's TAS assignment meets profile {profile_name}"
        return _FlavorResult(flavor, "admit", message + (f" ({'; '.join(notes)})" if notes else ""))


@dataclass(frozen=True, slots=True)
class _Conflict:
    """Why every placement found conflicts: the Workloads whose owed pods are in the way
    (``waited_on``), else the Workload's own PodSets (``podsets``) trade room with each other,
    now (``on_empty`` False) or even on the flavor with every node empty (True)."""

    waited_on: tuple[str, ...]
    podsets: tuple[str, ...]
    on_empty: bool


def _owed_by(claims: ClaimSet, reach: npt.NDArray[np.bool_]) -> tuple[str, ...]:
    """The Workloads owing pods with GPUs on a domain that meets ``reach`` (sorted); all of them
    when none meets it (they are what the decision waited on)."""
    live = np.flatnonzero((claims.pods > 0) & (claims.gpu > 0))
    meets = [i for i in live.tolist() if (claims.mask(i) & reach).any()]
    return tuple(sorted({claims.who[i][0] for i in (meets or live.tolist())}))


def _out_of_reach(snap: Snapshot, held_away: Sequence[int], blocked: Mapping[str, int]
                  ) -> tuple[npt.NDArray[np.bool_] | None, npt.NDArray[np.bool_] | None]:
    """Under ``domain`` enforcement (exact pins each pod), the nodes no nodeSelector may reach, as
    ``_Holding.away`` and ``_Holding.cleared``: the kube-scheduler could bind pods there. ``away``:
    nodes cleared for a preempting gang (``held_away``), and nodes with free GPUs (on ``snap``,
    before reservations are taken out) other gangs reserved (``blocked``); ``cleared``: the former
    only, whole nodes that a pod with no GPU must not be bound on either."""
    rows = ((snap.node_index.get(n), g) for n, g in blocked.items())
    reserved_free = [row for row, g in rows if row is not None and min(g, int(snap.free[row, 0])) > 0]
    if not held_away and not reserved_free:
        return None, None
    away = np.zeros(snap.num_nodes, dtype=bool)
    away[list(held_away) + reserved_free] = True
    if not held_away:
        return away, None
    cleared = np.zeros(snap.num_nodes, dtype=bool)
    cleared[list(held_away)] = True
    return away, cleared


@dataclass(frozen=True, slots=True)
class _Holding:
    """What admitted Workloads still owe on a flavor, for the robustness check."""

    claims: ClaimSet
    free_gpu: npt.NDArray[np.int64]
    may_free: npt.NDArray[np.int64] | None = None
    """GPUs each node would have free were every bound pod on it to end (its allocatable GPUs):
    what a wider claim's pod could one day take there (``exposed_claims``)."""
    away: npt.NDArray[np.bool_] | None = None
    """Under ``domain`` enforcement, nodes held for another gang while its victims go, and nodes
    with free GPUs another gang reserved: no nodeSelector of this Workload's GPU PodSets may reach
    them (the scheduler could bind its pods there)."""
    cleared: npt.NDArray[np.bool_] | None = None
    """Of ``away``, the nodes held whole for a preempting gang: no PodSet's nodeSelector may reach
    them, one with no GPU included."""


@dataclass(frozen=True, slots=True)
class _HeldAway(_Conflict):
    """Every placement found has a nodeSelector domain holding nodes held for another gang: the
    first such selector, said as ``label=value``."""

    selector: str = ""


_MAX_SET_ASIDE = 3
"""Times a placement is searched again with the domains it shared with owed pods set aside."""


def unplaced_podsets(view: WorkloadView, gpu_resource: str | tuple[str, ...]) -> list[str]:
    """Why each PodSet Atoll does not place is left alone, one note per PodSet: count 0, no GPUs
    requested, or GPUs requested while Kueue assigned no flavor for the GPU resource."""
    every = gpu_resource if isinstance(gpu_resource, str) else " or ".join(gpu_resource)
    notes = [f"podSets[{name}]: count 0, nothing to place" for name in view.empty_podsets]
    for spec in view.podsets:
        own = view.accelerators.get(spec.name, every)
        if spec.per_pod.gpu <= 0:
            notes.append(f"podSets[{spec.name}]: requests no {every}; needs no placement")
        elif spec.name not in view.flavors:
            notes.append(f"podSets[{spec.name}]: requests {spec.per_pod.gpu} {own} per pod but Kueue assigned no flavor "
                         f"for {own} (status.admission.podSetAssignments); not placed by Atoll")
    return notes


def _need(flavor: str, decision: Decision, profile: Profile, wait: WaitState, now: float, level_labels: Sequence[str],
          limit: float | None = None) -> Need | None:
    """What a Workload that found no domain waits for (``WaitingRoom``): the widest level any of
    its PodSets needs one domain of (None: anywhere), the pods of the smallest PodSet and its GPUs a pod,
    and the moment an elastic profile may span. A bound: more free GPUs is necessary, not enough.
    ``limit``: its ``maximumExecutionTimeSeconds``, which decides whether a reservation's window
    that moves later lets it backfill (``wake_released``)."""
    request = decision.request
    if request is None or not request.podsets:
        return None
    levels: list[str | None] = []
    for ps in request.podsets:
        if ps.slices or ps.spread is not None or ps.unconstrained:
            levels.append(None)
        else:
            levels.append(ps.required_level or (ps.max_span_level if ps.preferred_level else None))
    known = [lb for lb in levels if lb is not None and lb in level_labels]
    level = min(known, key=level_labels.index) if len(known) == len(levels) else None
    smallest = min(request.podsets, key=lambda ps: (ps.pods * ps.per_pod.gpu, ps.per_pod.gpu))
    if smallest.per_pod.gpu <= 0:  # free GPUs say nothing of room for a PodSet with none: a timer, not the room
        return None
    deadline = None
    if profile.preferred_level and not decision.relaxed and profile.relax_after_seconds is not None:
        deadline = (wait.first_waited_at if wait.first_waited_at is not None else now) + profile.relax_after_seconds
    return Need(flavor, level, smallest.pods, smallest.per_pod.gpu, deadline, request=request, limit=limit)


def _reserve(snap: Snapshot, decision: Decision) -> None:
    assert decision.placement is not None and decision.request is not None
    per_pod = {p.name: p.per_pod for p in decision.request.podsets}
    for ps in decision.placement.podsets:
        for node, pods in zip(ps.nodes, ps.pods_per_node):
            snap.reserve(node, per_pod[ps.name].scaled(pods))


def _island_level(snap: Snapshot, profile: Profile) -> int:
    """The level the fragmentation index is measured at: the profile's island level, else the lowest above nodes."""
    for label in (profile.required_level, profile.preferred_level):
        if label and label in snap.level_labels:
            return snap.level_index(label)
    return max(snap.node_level - 1, 0)


def _ambiguous_values(snap: Snapshot, level: int) -> set[str]:
    key = ("ambiguous-values", level)
    cached = snap.static_cache.get(key)
    if cached is None:
        counts = Counter(path[-1] for path in snap.domain_values[level])
        cached = {v for v, c in counts.items() if c > 1}
        snap.static_cache[key] = cached
    assert isinstance(cached, set)
    return cached


def _tas_domains(ta: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Domains (values per level) of a Kueue v1beta2 topologyAssignment."""
    out: list[tuple[str, ...]] = []
    for s in ta.get("slices") or []:
        n = int(s.get("domainCount") or 0)
        columns = []
        for lv in s.get("valuesPerLevel") or []:
            if "universal" in lv and lv["universal"] is not None:
                columns.append([str(lv["universal"])] * n)
            else:
                ind = lv.get("individual") or {}
                columns.append([f"{ind.get('prefix', '')}{r}{ind.get('suffix', '')}" for r in ind.get("roots") or []])
        out.extend(zip(*columns))
    return out


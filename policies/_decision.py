"""The decision policy: turn a Workload's PodSets and its profile into admit, wait or reject.

Pure: time comes in as ``now`` and the wait history as ``WaitState`` (the controller keeps
both on the Workload so they survive restarts); no clock is read here.

- strict: one domain of ``requiredLevel`` or wait (backoff from the profile).
- elastic: one domain of ``preferredLevel`` while the Workload has waited less than
  ``relaxAfterSeconds``; then the fewest such domains under the lowest common parent, never
  above ``maxSpanLevel``. If one domain can never hold it, it relaxes at once (waiting is futile).
- reject: only when the request cannot fit even on an empty, healthy flavor under the most
  relaxed form the profile allows; the message carries the numbers.

Why this module is longer than the others (just): the three answers share one preparation of the
request (levels checked, annotations read, classes applied), and the messages that explain them
quote its numbers; the profiles' schema lives in ``_profiles``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from policies._annotations import (
    GROUP_NAME,
    PREFERRED_TOPOLOGY,
    REQUIRED_TOPOLOGY,
    SLICE_CONSTRAINTS,
    SLICE_REQUIRED_TOPOLOGY,
    SLICE_SIZE,
    TopologyHints,
    group_problems,
    read_topology_annotations,
)
from policies._profiles import Profile, WorkloadClass
from topology import (
    DEFAULT_PERF_BAND,
    GraphLink,
    NodeConstraint,
    Placement,
    PlacementError,
    PlacementRequest,
    PodSetRequest,
    ResourceVector,
    SliceLayer,
    Snapshot,
    Spread,
    Toleration,
    find_placement,
    never_fits,
)

__all__ = ["Decision", "Outcome", "PodSetSpec", "ProfileLevelError", "WaitState", "annotation_problems", "decide", "podset_spec"]

Outcome = Literal["admit", "wait", "reject"]


class ProfileLevelError(ValueError):
    """A profile names a level the flavor's Topology does not have (a config error, not the Workload's).

    ``typo`` is ``(flavor's label, profile's label)`` when one is a near match of the other (a
    misspelt label), and ``typo_in`` says which side looks misspelt: ``"flavor"`` when the
    profile's label is a well-known one (``nvidia.com/gpu.clique``, ``kubernetes.io/hostname``…),
    ``"profile"`` when the flavor's is, else ``"either"``. The message then suggests the match.
    """

    WELL_KNOWN = frozenset({"nvidia.com/gpu.clique", "kubernetes.io/hostname", "topology.kubernetes.io/zone",
                            "topology.kubernetes.io/region", "cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
                            "cloud.google.com/gce-topology-host"})

    def __init__(self, message: str, *, wanted: Sequence[str] = (), levels: Sequence[str] = ()) -> None:
        self.typo: tuple[str, str] | None = None
        self.typo_in = ""
        for want in wanted:
            near = [lv for lv in levels if lv != want and _edits(lv, want) <= max(1, len(want.rsplit("/", 1)[-1]) // 3)]
            if near:
                self.typo = (near[0], want)
                break
        if self.typo:
            have, want = self.typo
            self.typo_in = "flavor" if want in self.WELL_KNOWN else "profile" if have in self.WELL_KNOWN else "either"
            fix = {"flavor": f"the flavor's level label {have!r} looks misspelt: did you mean {want!r}? Fix the label in the flavor's "
                             "Topology (or cluster model); it is a configuration error there, not in the profiles",
                   "profile": f"did you mean the flavor's level {have!r}? Fix the profiles document",
                   "either": f"the flavor's level {have!r} and the profile's {want!r} differ by a few characters: did you mean one "
                             "for the other? Fix the misspelt one (the flavor's Topology or the profiles document)"}[self.typo_in]
            message = f"{message}; {fix}"
        super().__init__(message)


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: a misspelt label is a few edits from the right one, where two real
    labels under one prefix (``…/leaf``, ``…/su``) are as many edits apart as their names are long."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


@dataclass(frozen=True, slots=True)
class PodSetSpec:
    """One PodSet as Kueue admitted it: count, per-pod resources, Kueue's own topology hints,
    and the pod template's tolerations, nodeSelector and required node affinity.

    The rest of Kueue's TAS vocabulary (``podset_spec`` reads it from the annotations):
    ``slices`` (outermost first), ``unconstrained``, ``group`` (PodSets sharing one domain),
    ``balanced`` (Atoll's even spans); ``annotation_errors`` make the Workload invalid (Rejected
    with them), ``annotation_notes`` are annotations read but not honoured (in ``Decision.notes``)."""

    name: str
    count: int
    per_pod: ResourceVector
    required_topology: str | None = None
    preferred_topology: str | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_constraint: NodeConstraint | None = None
    slices: tuple[SliceLayer, ...] = ()
    unconstrained: bool = False
    group: str | None = None
    balanced: bool = False
    annotation_errors: tuple[str, ...] = ()
    annotation_notes: tuple[str, ...] = ()


def podset_spec(name: str, count: int, per_pod: ResourceVector, annotations: Mapping[str, str], *,
                tolerations: tuple[Toleration, ...] = (), node_constraint: NodeConstraint | None = None) -> PodSetSpec:
    """A PodSet from its pod template: every ``kueue.x-k8s.io/podset-*`` annotation is read
    (``read_topology_annotations``), honoured or named in the errors/notes."""
    hints = read_topology_annotations(annotations, podset=name, count=count)
    return _with_hints(PodSetSpec(name, count, per_pod, tolerations=tolerations, node_constraint=node_constraint), hints)


def _with_hints(spec: PodSetSpec, hints: TopologyHints) -> PodSetSpec:
    return dataclasses.replace(spec, required_topology=hints.required_topology, preferred_topology=hints.preferred_topology,
                               slices=hints.slices, unconstrained=hints.unconstrained, group=hints.group, balanced=hints.balanced,
                               annotation_errors=hints.errors, annotation_notes=hints.notes)


@dataclass(frozen=True, slots=True)
class WaitState:
    """When the Workload first waited for placement (epoch seconds) and how many Retries so far."""

    first_waited_at: float | None = None
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    profile: str
    message: str
    placement: Placement | None = None
    retry_after_seconds: int = 0
    relaxed: bool = False
    request: PlacementRequest | None = None
    notes: tuple[str, ...] = ()
    """Annotations read but not honoured, each naming the annotation (for the record and an Event)."""
    widened_to: str | None = None
    """A strict profile's gang larger than every domain of its ``requiredLevel``: the level whose
    smallest domain that holds it the Workload waits for instead ("" for the whole flavor)."""


def _podset_request(spec: PodSetSpec, level_mode: tuple[str | None, str | None, str | None], cls: WorkloadClass | None,
                    snapshot: Snapshot, *, tight: bool, balanced: bool, perf_first: str = "all") -> PodSetRequest:
    required, preferred, span = (None, None, None) if cls and cls.spread else level_mode  # replicas spread; island levels are for gangs
    spread = Spread(cls.spread.level, cls.spread.max_per_domain) if cls and cls.spread else None
    if spec.required_topology:
        required, preferred, span = spec.required_topology, None, None
    elif spec.preferred_topology:
        required, preferred = None, spec.preferred_topology
    elif spec.unconstrained:
        required, preferred, span, spread = None, None, None, None
    elif spec.slices and (required or preferred):
        # Slices and the profile's island level: before an elastic profile relaxes (``tight``) the
        # whole PodSet waits for one domain, at least one of the slice level. Otherwise a profile
        # level at or below the slice level makes each slice the unit that must sit in one island,
        # and the PodSet takes the fewest slice-level domains (one if it can).
        below = snapshot.level_index(required or preferred or "") - snapshot.level_index(spec.slices[0].level)
        if tight and below > 0:
            required = spec.slices[0].level
        elif not tight and below >= 0:
            required, preferred = None, spec.slices[0].level
    if spec.slices:
        spread = None
    return PodSetRequest(
        name=spec.name,
        pods=spec.count,
        per_pod=spec.per_pod,
        required_level=required,
        preferred_level=preferred,
        max_span_level=span if preferred else None,
        perf_floor=cls.perf_floor if cls else 0.0,
        uniform_perf=bool(cls and cls.uniform_perf and (perf_first == "all" or spec.count > 1)),  # fragmentation.perfFirst
        perf_band=cls.perf_band if cls else DEFAULT_PERF_BAND,
        perf_rank=cls.perf_rank if cls else "min",
        spread=spread,
        tolerations=spec.tolerations,
        node_constraint=spec.node_constraint,
        slices=spec.slices,
        unconstrained=spec.unconstrained and not (spec.required_topology or spec.preferred_topology),
        balanced=spec.balanced or balanced,
        group=spec.group,
    )


def _check_levels(snapshot: Snapshot, profile_name: str, profile: Profile, podsets: Sequence[PodSetSpec]) -> str | None:
    """Raise for a profile level the flavor lacks; return a message for a bad Kueue hint."""
    for key, label in (("requiredLevel", profile.required_level), ("preferredLevel", profile.preferred_level), ("maxSpanLevel", profile.max_span_level)):
        if label and label not in snapshot.level_labels:
            raise ProfileLevelError(f"profiles.{profile_name}.{key}: flavor {snapshot.flavor} has no level {label!r} (levels: {list(snapshot.level_labels)})",
                                    wanted=(label,), levels=snapshot.level_labels)
    for spec in podsets:
        slice_key = SLICE_CONSTRAINTS if len(spec.slices) > 1 else SLICE_REQUIRED_TOPOLOGY
        hints = [(REQUIRED_TOPOLOGY, spec.required_topology), (PREFERRED_TOPOLOGY, spec.preferred_topology)]
        hints += [(slice_key, layer.level) for layer in spec.slices]
        for ann, label in hints:
            if label and label not in snapshot.level_labels:
                return f"podSets[{spec.name}] annotation {ann}: flavor {snapshot.flavor} has no level {label!r} (levels: {list(snapshot.level_labels)})"
    return None


def annotation_problems(snapshot: Snapshot, podsets: Sequence[PodSetSpec]) -> str | None:
    """Why the PodSets' annotations make the Workload invalid, or None: Kueue's rules, a slice
    size that does not divide the admitted count, and slice layers out of level order. A decision
    rejects such a Workload; ``atoll place`` asks first, to call it bad input."""
    problems = [e for spec in podsets for e in spec.annotation_errors]
    problems += group_problems([(s.name, s.count, TopologyHints(s.required_topology, s.preferred_topology, group=s.group)) for s in podsets])
    for spec in podsets:
        if not spec.slices:
            continue
        key = SLICE_CONSTRAINTS if len(spec.slices) > 1 else SLICE_SIZE
        size = spec.slices[0].size
        if spec.count % size:
            problems.append(f"podSets[{spec.name}] annotation {key}: count {spec.count} is not a multiple of the slice size {size}")
        own = spec.required_topology or spec.preferred_topology
        levels = snapshot.level_labels
        if own in levels and spec.slices[0].level in levels and levels.index(own) > levels.index(spec.slices[0].level):
            problems.append(f"podSets[{spec.name}] annotation {SLICE_REQUIRED_TOPOLOGY if key == SLICE_SIZE else key}: slice level "
                            f"{spec.slices[0].level} is above the PodSet's level {own}")
    if any(s.group for s in podsets) and any(s.slices for s in podsets if s.group):
        problems.append(f"annotation {GROUP_NAME}: a PodSet group cannot be combined with slices")
    return "; ".join(problems) if problems else None


def _build(podsets: Sequence[PodSetSpec], mode: tuple[str | None, str | None, str | None], cls: WorkloadClass | None,
           links: Sequence[GraphLink], profile: Profile, snapshot: Snapshot, *, tight: bool = False, balanced: bool = False) -> PlacementRequest:
    frag = profile.fragmentation
    # Keyed by identity (the memo holds the inputs): the specs are frozen, and hashing them field
    # by field cost more than building the request.
    key = (tuple(map(id, podsets)), mode, id(cls), tuple(map(id, links)), frag.protect_empty_domains, frag.best_fit, frag.perf_first, tight,
           balanced)
    return snapshot.remember(_REQUESTS, key, (tuple(podsets), cls, tuple(links)), lambda: PlacementRequest(
        tuple(_podset_request(p, mode, cls, snapshot, tight=tight, balanced=balanced, perf_first=frag.perf_first) for p in podsets),
        tuple(links), frag.protect_empty_domains, frag.best_fit))


_REQUESTS = ("policies.decide", "requests")
"""``Snapshot.remember``'s memo of ``_build``: a pure function of its inputs and the fabric's
levels, asked again on every decision of a waiting Workload."""


def _describe_admit(placement: Placement) -> str:
    parts = []
    for ps in placement.podsets:
        where = "/".join(ps.domain_path) or "the whole flavor"
        text = (f"{ps.name}: {ps.pods} pods on {len(ps.nodes)} nodes in {ps.domain_level} {where} "
                f"({ps.islands} {ps.island_level} domain{'s' if ps.islands != 1 else ''}, min perf {ps.min_perf:.2f})")
        if ps.slices:
            each = ", ".join(f"{sl.index} in {'/'.join(sl.path)}" for sl in ps.slices)
            text += f", {len(ps.slices)} slices of {ps.slices[0].pods} pods, each in one {ps.slices[0].level} domain (slice {each})"
        parts.append(text)
    parts.extend(link.describe() for link in placement.links)
    return "; ".join(parts)


def decide(
    snapshot: Snapshot,
    podsets: Sequence[PodSetSpec],
    *,
    profile_name: str,
    profile: Profile,
    now: float,
    wait: WaitState = WaitState(),
    workload_class: WorkloadClass | None = None,
    links: Sequence[GraphLink] = (),
    explain: bool = True,
    balanced: bool = False,
) -> Decision:
    """Admit with a placement, wait with a delay, or reject with the reason. Deterministic.

    The profile is first resolved for the snapshot's flavor (``Profile.for_flavor``: its
    per-flavor level overrides; a level the flavor lacks raises ``ProfileLevelError``).
    ``explain=False`` leaves out the losing domains' verdicts (``placement.why_not``); outcome,
    placement and message are the same. The simulator's replay needs no explanations.
    ``balanced``: spans share each gang evenly over its islands (as ``atoll.dev/balanced-placement``
    does for one PodSet, and the profile's ``balancedPlacement`` for all). Annotations read but not
    honoured come back in ``Decision.notes``."""
    profile = profile.for_flavor(snapshot.flavor, snapshot.level_labels, name=profile_name)
    balanced = balanced or profile.balanced_placement
    decision = _decide(snapshot, podsets, profile_name, profile, now, wait, workload_class, links, explain, balanced)
    if not any(spec.annotation_notes for spec in podsets):
        return decision
    return dataclasses.replace(decision, notes=tuple(n for spec in podsets for n in spec.annotation_notes))


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What ``_decide`` works out before the search, the same for every decision of a Workload
    on one fabric: a reject for the request itself, or the tight and loose requests and whether
    one domain can never hold it."""

    early: Decision | None
    tight: PlacementRequest | None = None
    loose: PlacementRequest | None = None
    tight_never_fits: bool = False
    tight_error: str | None = None
    """Why asking whether one domain can ever hold it failed (a reject, once that is asked)."""
    relaxes: bool = False
    """True: relaxed from the start (a profile with neither a required nor a preferred level)."""
    widened_to: str | None = None
    """See ``Decision.widened_to``."""


def _prepare(snapshot: Snapshot, podsets: Sequence[PodSetSpec], profile_name: str, profile: Profile,
             workload_class: WorkloadClass | None, links: Sequence[GraphLink], balanced: bool) -> _Prepared:
    """``_prepare_now``, remembered per fabric (``static_cache``: cleared when allocatable or
    structure changes) and per set of inputs by identity: a waiting Workload is decided again and
    again with the same frozen specs, profile and class."""
    key = (tuple(map(id, podsets)), id(profile), profile_name, id(workload_class), tuple(map(id, links)), balanced)
    return snapshot.remember(_PREPARED, key, (tuple(podsets), profile, workload_class, tuple(links)),
                             lambda: _prepare_now(snapshot, podsets, profile_name, profile, workload_class, links, balanced))


_PREPARED = ("policies.decide", "prepared")
"""``Snapshot.remember``'s memo of ``_prepare``."""


def _prepare_now(snapshot: Snapshot, podsets: Sequence[PodSetSpec], profile_name: str, profile: Profile,
                 workload_class: WorkloadClass | None, links: Sequence[GraphLink], balanced: bool) -> _Prepared:
    bad_hint = _check_levels(snapshot, profile_name, profile, podsets)
    if bad_hint:
        return _Prepared(Decision("reject", profile_name, bad_hint))
    problem = annotation_problems(snapshot, podsets)
    if problem:
        return _Prepared(Decision("reject", profile_name, f"invalid topology annotations: {problem}"))

    def build(mode: tuple[str | None, str | None, str | None], tight: bool = False) -> PlacementRequest:
        return _build(podsets, mode, workload_class, links, profile, snapshot, tight=tight, balanced=balanced)

    widened: str | None = None
    try:
        if profile.required_level:
            tight = loose = build((profile.required_level, None, None))
            relaxes = False
            if never_fits(snapshot, loose) is not None:
                tight, widened = _widen(snapshot, profile.required_level, tight, build)
                loose = tight
        elif profile.preferred_level:
            tight = build((profile.preferred_level, None, None), tight=True)
            loose = build((None, profile.preferred_level, profile.max_span_level))
            relaxes = False
        else:
            tight = loose = build((None, None, profile.max_span_level))
            relaxes = True
        impossible = never_fits(snapshot, loose)
        if impossible is not None:
            return _Prepared(Decision("reject", profile_name, f"never fits under profile {profile_name}: {impossible.reason}", impossible,
                                      request=loose))
    except (PlacementError, ValueError) as exc:
        return _Prepared(Decision("reject", profile_name, f"invalid request: {exc}"))
    try:
        tight_never = tight is not loose and never_fits(snapshot, tight) is not None
    except (PlacementError, ValueError) as exc:
        return _Prepared(None, tight, loose, False, str(exc), relaxes, widened)
    return _Prepared(None, tight, loose, tight_never, None, relaxes, widened)


def _widen(snapshot: Snapshot, required: str, request: PlacementRequest,
           build: Callable[[tuple[str | None, str | None, str | None]], PlacementRequest]) -> tuple[PlacementRequest, str | None]:
    """A strict gang no domain of ``required`` can ever hold waits for the smallest domain that
    can: the lowest level above ``required`` with a domain that holds it on an empty flavor (the
    finder then takes the best-fitting domain of that level), else the whole flavor (""). The
    request unchanged when even the whole flavor never holds it (a reject, with that reason)."""
    for index in range(snapshot.level_index(required) - 1, -1, -1):
        label = snapshot.level_labels[index]
        wider = build((label, None, None))
        if never_fits(snapshot, wider) is None:
            return wider, label
    whole = build((None, None, None))
    return (whole, "") if never_fits(snapshot, whole) is None else (request, None)


def _decide(snapshot: Snapshot, podsets: Sequence[PodSetSpec], profile_name: str, profile: Profile, now: float, wait: WaitState,
            workload_class: WorkloadClass | None, links: Sequence[GraphLink], explain: bool, balanced: bool) -> Decision:
    prepared = _prepare(snapshot, podsets, profile_name, profile, workload_class, links, balanced)
    if prepared.early is not None:
        return prepared.early
    assert prepared.tight is not None and prepared.loose is not None
    if prepared.relaxes:
        relaxed = True
    elif profile.preferred_level and not profile.required_level:
        waited = now - wait.first_waited_at if wait.first_waited_at is not None else 0.0
        relax_after = profile.relax_after_seconds
        relaxed = relax_after is None or waited >= relax_after
    else:
        relaxed = False
    if not relaxed and prepared.tight_error is not None:
        return Decision("reject", profile_name, f"invalid request: {prepared.tight_error}")
    if not relaxed and prepared.tight_never_fits:
        relaxed = True  # one domain can never hold it: waiting for one is futile
    request = prepared.loose if relaxed else prepared.tight
    try:
        placement = find_placement(snapshot, request, explain=explain)
    except (PlacementError, ValueError) as exc:
        return Decision("reject", profile_name, f"invalid request: {exc}")
    widened = prepared.widened_to
    if widened is not None:
        where = f"the smallest {widened} domain that holds it" if widened else "room anywhere in the flavor (no smaller domain holds it)"
        head = f"larger than every {profile.required_level} domain: placed in {where}; "
    else:
        head = ""
    if placement.fits:
        return Decision("admit", profile_name, head + _describe_admit(placement), placement, relaxed=relaxed, request=request,
                        widened_to=widened)
    delay = profile.retry.delay(wait.attempts)
    if not relaxed and profile.relax_after_seconds is not None:
        waited = now - wait.first_waited_at if wait.first_waited_at is not None else 0.0
        delay = max(1, min(delay, math.ceil(profile.relax_after_seconds - waited)))
        note = f"; spans allowed after {profile.relax_after_seconds}s of waiting"
    else:
        note = ""
    return Decision("wait", profile_name, f"{head}{placement.reason}{note}; retry in {delay}s", placement, delay, relaxed, request,
                    widened_to=widened)

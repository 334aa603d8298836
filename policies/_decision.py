"""The decision policy: turn a Workload's PodSets and its profile into admit, wait or reject.

Pure: time comes in as ``now`` and the wait history as ``WaitState`` (the controller keeps
both on the Workload so they survive restarts); no clock is read here.

- strict: one domain of ``requiredLevel`` or wait (backoff from the profile).
- elastic: one domain of ``preferredLevel`` while the Workload has waited less than
  ``relaxAfterSeconds``; then the fewest such domains under the lowest common parent, never
  above ``maxSpanLevel``. If one domain can never hold it, it relaxes at once (waiting is futile).
- reject: only when the request cannot fit even on an empty, healthy flavor under the most
  relaxed form the profile allows; the message carries the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from policies._profiles import Profile, WorkloadClass
from topology import (
    GraphLink,
    NodeConstraint,
    Placement,
    PlacementError,
    PlacementRequest,
    PodSetRequest,
    ResourceVector,
    Snapshot,
    Spread,
    Toleration,
    find_placement,
    never_fits,
)

__all__ = ["Decision", "Outcome", "PodSetSpec", "ProfileLevelError", "WaitState", "decide"]

Outcome = Literal["admit", "wait", "reject"]

REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"


class ProfileLevelError(ValueError):
    """A profile names a level the flavor's Topology does not have (a config error, not the Workload's)."""


@dataclass(frozen=True, slots=True)
class PodSetSpec:
    """One PodSet as Kueue admitted it: count, per-pod resources, Kueue's own topology hints,
    and the pod template's tolerations, nodeSelector and required node affinity."""

    name: str
    count: int
    per_pod: ResourceVector
    required_topology: str | None = None
    preferred_topology: str | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_constraint: NodeConstraint | None = None


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


def _podset_request(spec: PodSetSpec, level_mode: tuple[str | None, str | None, str | None], cls: WorkloadClass | None) -> PodSetRequest:
    required, preferred, span = (None, None, None) if cls and cls.spread else level_mode  # replicas spread; island levels are for gangs
    if spec.required_topology:
        required, preferred, span = spec.required_topology, None, None
    elif spec.preferred_topology:
        required, preferred = None, spec.preferred_topology
    spread = Spread(cls.spread.level, cls.spread.max_per_domain) if cls and cls.spread else None
    return PodSetRequest(
        name=spec.name,
        pods=spec.count,
        per_pod=spec.per_pod,
        required_level=required,
        preferred_level=preferred,
        max_span_level=span if preferred else None,
        perf_floor=cls.perf_floor if cls else 0.0,
        uniform_perf=cls.uniform_perf if cls else False,
        spread=spread,
        tolerations=spec.tolerations,
        node_constraint=spec.node_constraint,
    )


def _check_levels(snapshot: Snapshot, profile_name: str, profile: Profile, podsets: Sequence[PodSetSpec]) -> str | None:
    """Raise for a profile level the flavor lacks; return a message for a bad Kueue hint."""
    for key, label in (("requiredLevel", profile.required_level), ("preferredLevel", profile.preferred_level), ("maxSpanLevel", profile.max_span_level)):
        if label and label not in snapshot.level_labels:
            raise ProfileLevelError(f"profiles.{profile_name}.{key}: flavor {snapshot.flavor} has no level {label!r} (levels: {list(snapshot.level_labels)})")
    for spec in podsets:
        for ann, label in ((REQUIRED_TOPOLOGY, spec.required_topology), (PREFERRED_TOPOLOGY, spec.preferred_topology)):
            if label and label not in snapshot.level_labels:
                return f"podSets[{spec.name}] annotation {ann}: flavor {snapshot.flavor} has no level {label!r} (levels: {list(snapshot.level_labels)})"
    return None


def _build(podsets: Sequence[PodSetSpec], mode: tuple[str | None, str | None, str | None], cls: WorkloadClass | None,
           links: Sequence[GraphLink], profile: Profile) -> PlacementRequest:
    frag = profile.fragmentation
    return PlacementRequest(tuple(_podset_request(p, mode, cls) for p in podsets), tuple(links), frag.protect_empty_domains, frag.best_fit)


def _describe_admit(placement: Placement) -> str:
    parts = []
    for ps in placement.podsets:
        where = "/".join(ps.domain_path) or "the whole flavor"
        parts.append(f"{ps.name}: {ps.pods} pods on {len(ps.nodes)} nodes in {ps.domain_level} {where} "
                     f"({ps.islands} {ps.island_level} domain{'s' if ps.islands != 1 else ''}, min perf {ps.min_perf:.2f})")
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
) -> Decision:
    """Admit with a placement, wait with a delay, or reject with the reason. Deterministic.

    ``explain=False`` leaves out the losing domains' verdicts (``placement.why_not``); outcome,
    placement and message are the same. The simulator's replay needs no explanations."""
    bad_hint = _check_levels(snapshot, profile_name, profile, podsets)
    if bad_hint:
        return Decision("reject", profile_name, bad_hint)
    if profile.required_level:
        tight = loose = _build(podsets, (profile.required_level, None, None), workload_class, links, profile)
        relaxed = False
    elif profile.preferred_level:
        tight = _build(podsets, (profile.preferred_level, None, None), workload_class, links, profile)
        loose = _build(podsets, (None, profile.preferred_level, profile.max_span_level), workload_class, links, profile)
        waited = now - wait.first_waited_at if wait.first_waited_at is not None else 0.0
        relax_after = profile.relax_after_seconds
        relaxed = relax_after is None or waited >= relax_after
    else:
        tight = loose = _build(podsets, (None, None, profile.max_span_level), workload_class, links, profile)
        relaxed = True
    try:
        impossible = never_fits(snapshot, loose)
        if impossible is not None:
            return Decision("reject", profile_name, f"never fits under profile {profile_name}: {impossible.reason}", impossible, request=loose)
        if not relaxed and never_fits(snapshot, tight) is not None:
            relaxed = True  # one domain can never hold it: waiting for one is futile
        request = loose if relaxed else tight
        placement = find_placement(snapshot, request, explain=explain)
    except (PlacementError, ValueError) as exc:
        return Decision("reject", profile_name, f"invalid request: {exc}")
    if placement.fits:
        return Decision("admit", profile_name, _describe_admit(placement), placement, relaxed=relaxed, request=request)
    delay = profile.retry.delay(wait.attempts)
    if not relaxed and profile.relax_after_seconds is not None:
        waited = now - wait.first_waited_at if wait.first_waited_at is not None else 0.0
        delay = max(1, min(delay, math.ceil(profile.relax_after_seconds - waited)))
        note = f"; spans allowed after {profile.relax_after_seconds}s of waiting"
    else:
        note = ""
    return Decision("wait", profile_name, f"{placement.reason}{note}; retry in {delay}s", placement, delay, relaxed, request)



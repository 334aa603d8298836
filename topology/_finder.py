"""The finder's checking API: request in, ``Placement`` out.

It validates the request against the snapshot's levels, builds the fixed-dtype arrays, runs
the kernel (``_kernels``, or its twin ``_reference`` for tests and the speed yardstick) per
PodSet in order, and turns the chosen nodes into a ``Placement`` with why-not verdicts. It
never mutates the snapshot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from topology import _kernels, _reference
from topology._placement import DomainVerdict, Placement, PodSetPlacement
from topology._request import GraphLink, PlacementRequest, PodSetRequest
from topology._snapshot import Snapshot

__all__ = ["ROOT_LEVEL", "Backend", "PlacementError", "find_placement", "never_fits"]

ROOT_LEVEL = "(flavor)"
"""``domain_level`` of a placement whose nodes share no domain at any level (spans the top level)."""

Backend = Literal["numba", "reference"]

_KERNELS: dict[str, Callable[..., Any]] = {
    "numba": _kernels.place_podset,
    "reference": _reference.place_podset,
}


class PlacementError(ValueError):
    """The request cannot be evaluated on this snapshot (unknown level, bad link); names the field."""


def _levels_for(snapshot: Snapshot, ps: PodSetRequest) -> tuple[int, int, int, int, int, int]:
    """(mode, target, span, spread_level, spread_max, island_level) for one PodSet."""

    def idx(label: str, field: str) -> int:
        try:
            return snapshot.level_index(label)
        except KeyError as exc:
            raise PlacementError(f"podSets[{ps.name}].{field}: {exc.args[0]}") from None

    span = idx(ps.max_span_level, "maxSpanLevel") if ps.max_span_level else -1
    if ps.spread is not None:
        level = idx(ps.spread.level, "spread.level")
        if ps.required_level:
            scope = idx(ps.required_level, "requiredLevel")
        else:
            scope = span
        if scope >= level:
            raise PlacementError(f"podSets[{ps.name}].spread.level: {ps.spread.level} must be below the scope level")
        return _kernels.MODE_SPREAD, scope, 0, level, ps.spread.max_per_domain, level
    if ps.required_level:
        target = idx(ps.required_level, "requiredLevel")
        return _kernels.MODE_REQUIRED, target, target, 0, 0, target
    target = idx(ps.preferred_level, "preferredLevel") if ps.preferred_level else snapshot.node_level
    if span > target:
        raise PlacementError(f"podSets[{ps.name}].maxSpanLevel: {ps.max_span_level} is below the preferred level")
    return _kernels.MODE_PREFERRED, target, span, 0, 0, target


def _link_level(snapshot: Snapshot, link: GraphLink) -> int:
    """The highest level whose links, and every link below it, meet the link's bound."""
    if link.max_level is not None:
        try:
            return snapshot.level_index(link.max_level)
        except KeyError as exc:
            raise PlacementError(f"links[{link.a}->{link.b}].maxLevel: {exc.args[0]}") from None
    assert link.min_bandwidth_gbps is not None
    level = snapshot.node_level + 1
    for lv in range(snapshot.node_level, -1, -1):
        if snapshot.bandwidth_gbps[lv] < link.min_bandwidth_gbps:
            break
        level = lv
    return level


def _per_pod(ps: PodSetRequest) -> np.ndarray:
    return np.array([ps.per_pod.gpu, ps.per_pod.cpu_milli, ps.per_pod.memory_mib, 1], dtype=np.int64)


def find_placement(snapshot: Snapshot, request: PlacementRequest, *, backend: Backend = "numba", explain: bool = True) -> Placement:
    """Place every PodSet of ``request`` on ``snapshot``, or explain why not. Deterministic.

    ``explain=False`` skips the why-not verdicts (hot loops that only need the placement)."""
    kernel = _KERNELS[backend]
    n = snapshot.num_nodes
    free = snapshot.free.copy() if len(request.podsets) > 1 else snapshot.free
    take = np.zeros(n, dtype=np.int64)
    cap = np.zeros(n, dtype=np.int64)
    placed: dict[str, PodSetPlacement] = {}
    order = {p.name: i for i, p in enumerate(request.podsets)}
    flags = (1 if request.protect_empty_domains else 0) | (0 if request.best_fit else 2)
    out: list[PodSetPlacement] = []
    why: list[DomainVerdict] = []
    for i, ps in enumerate(request.podsets):
        mode, target, span, spread_level, spread_max, island = _levels_for(snapshot, ps)
        lo, hi = 0, n
        for link in request.links:
            if ps.name not in (link.a, link.b):
                continue
            other = link.b if link.a == ps.name else link.a
            if order[other] > i:
                continue
            lvl = _link_level(snapshot, link)
            first = placed[other]
            if lvl > snapshot.node_level:
                return Placement(False, reason=f"links[{link.a}->{link.b}]: no link in flavor {snapshot.flavor} gives {link.min_bandwidth_gbps} GB/s", why_not=tuple(why))
            a_first = snapshot.node_index[first.nodes[0]]
            a_last = snapshot.node_index[first.nodes[-1]]
            dom = snapshot.domain_of(lvl, a_first)
            if snapshot.domain_of(lvl, a_last) != dom:
                return Placement(False, reason=f"links[{link.a}->{link.b}]: {other} spans more than one {snapshot.level_labels[lvl]} domain", why_not=tuple(why))
            s, e = snapshot.domain_range(lvl, dom)
            lo, hi = max(lo, s), min(hi, e)
        req = _per_pod(ps)
        ok, lvl, dom = kernel(
            free, snapshot.alloc, req, _eligible(snapshot, ps), snapshot.perf, float(ps.perf_floor),
            snapshot.bounds, snapshot.bptr, snapshot.node_dom, lo, hi, ps.pods,
            mode, target, span, spread_level, spread_max, flags | (4 if ps.uniform_perf else 0), take, cap,
        )
        if not ok:
            if explain:
                why.extend(_why_not(snapshot, cap, ps, target if target >= 0 else 0, -1, lo, hi))
            reason = _no_fit_reason(snapshot, cap, ps, target, span, mode, lo, hi)
            return Placement(False, reason=reason, why_not=tuple(why))
        result = _describe(snapshot, ps, take, island)
        placed[ps.name] = result
        out.append(result)
        if explain:
            why.extend(_why_not(snapshot, cap, ps, island if mode == _kernels.MODE_SPREAD else target, int(dom) if int(lvl) == target else -1, lo, hi))
        if i + 1 < len(request.podsets):
            free -= take[:, None] * req[None, :]
    return Placement(True, podsets=tuple(out), why_not=tuple(why))


def _eligible(snapshot: Snapshot, ps: PodSetRequest) -> np.ndarray:
    """The nodes this PodSet may use: healthy, its taints tolerated, and allowed by its own template."""
    eligible = snapshot.eligible_for(ps.tolerations)
    if ps.node_constraint is None or ps.node_constraint.empty:
        return eligible
    out: np.ndarray = eligible & snapshot.allowed_by(ps.node_constraint)
    return out


def _describe(snapshot: Snapshot, ps: PodSetRequest, take: np.ndarray, island: int) -> PodSetPlacement:
    idx = np.flatnonzero(take)
    first, last = int(idx[0]), int(idx[-1])
    level = -1
    for lv in range(snapshot.node_level, -1, -1):
        if snapshot.node_dom[lv, first] == snapshot.node_dom[lv, last]:
            level = lv
            break
    perf = snapshot.perf[idx]
    return PodSetPlacement(
        name=ps.name,
        nodes=tuple(snapshot.node_names[int(k)] for k in idx),
        pods_per_node=tuple(int(v) for v in take[idx]),
        domain_level=snapshot.level_labels[level] if level >= 0 else ROOT_LEVEL,
        domain_path=snapshot.domain_path(level, snapshot.domain_of(level, first)) if level >= 0 else (),
        islands=int(np.unique(snapshot.node_dom[island, idx]).size),
        island_level=snapshot.level_labels[island],
        min_perf=float(perf.min()),
        max_perf=float(perf.max()),
        bottleneck_gbps=float(snapshot.bandwidth_gbps[max(level, 0)]),
    )


def _domain_caps(snapshot: Snapshot, cap: np.ndarray, level: int) -> np.ndarray:
    starts = snapshot.bounds[snapshot.bptr[level]: snapshot.bptr[level + 1] - 1]
    if cap.size == 0:
        return np.zeros(starts.size, dtype=np.int64)
    out: np.ndarray = np.add.reduceat(cap, starts)
    return out


def _why_not(snapshot: Snapshot, cap: np.ndarray, ps: PodSetRequest, level: int, chosen: int, lo: int, hi: int,
             limit: int = 3) -> list[DomainVerdict]:
    """The strongest losing domains at ``level`` with their capacity vs the PodSet's need; domains
    outside ``[lo, hi)`` (the range a link confines the PodSet to) were never candidates."""
    caps = _domain_caps(snapshot, cap, level)
    if chosen >= 0 or (lo, hi) != (0, snapshot.num_nodes):
        caps = caps.copy()
    if (lo, hi) != (0, snapshot.num_nodes):
        starts = snapshot.bounds[snapshot.bptr[level]: snapshot.bptr[level + 1]]
        caps[(starts[1:] <= lo) | (starts[:-1] >= hi)] = -1
    if chosen >= 0:
        chosen_cap = int(caps[chosen])
        caps[chosen] = -1
    order = np.argsort(-caps, kind="stable")[:limit]
    out = []
    for d in order:
        c = int(caps[d])
        if c < 0:
            continue
        if c < ps.pods:
            reason = f"fits {c} of {ps.pods} pods"
        elif chosen >= 0 and c > chosen_cap:
            reason = f"fits {c} ≥ {ps.pods} pods but leaves more free than the best fit ({chosen_cap})"
        else:
            reason = f"fits {c} ≥ {ps.pods} pods; lost the tie-break (perf, then path)"
        out.append(DomainVerdict(ps.name, snapshot.level_labels[level], snapshot.domain_path(level, int(d)), c, ps.pods, reason))
    return out


def _no_fit_reason(snapshot: Snapshot, cap: np.ndarray, ps: PodSetRequest, target: int, span: int, mode: int, lo: int, hi: int) -> str:
    total = int(cap.sum())
    shape = f"{ps.pods} pods × {ps.per_pod.gpu} GPU"
    if total < ps.pods:
        where = "" if (lo, hi) == (0, snapshot.num_nodes) else " inside the linked domain"
        if ps.node_constraint is not None and not ps.node_constraint.empty:
            allowed = int(snapshot.allowed_by(ps.node_constraint).sum())
            where += f" on the {allowed} of {snapshot.num_nodes} nodes its pod template allows ({ps.node_constraint.describe()})"
        return f"podSets[{ps.name}]: {shape} needed, only {total} pods fit in flavor {snapshot.flavor}{where}"
    if mode == _kernels.MODE_SPREAD:
        return f"podSets[{ps.name}]: {shape} cannot be spread at most {ps.spread.max_per_domain if ps.spread else 0} per {ps.spread.level if ps.spread else ''} domain"
    caps = _domain_caps(snapshot, cap, target)
    best = int(caps.max()) if caps.size else 0
    label = snapshot.level_labels[target]
    if mode == _kernels.MODE_REQUIRED:
        return f"podSets[{ps.name}]: {shape} needed in one {label} domain; the largest fits {best} ({caps.size} domains)"
    top = f"one {snapshot.level_labels[span]} domain" if span >= 0 else f"flavor {snapshot.flavor}"
    return f"podSets[{ps.name}]: {shape} fit neither one {label} domain (largest {best}) nor a span inside {top}"


def never_fits(snapshot: Snapshot, request: PlacementRequest, *, backend: Backend = "numba") -> Placement | None:
    """None if the request fits the flavor when every node is empty and healthy; else the
    placement failure that proves it never can (its reason carries the numbers).

    The answer depends only on the fabric and allocatable, so it is memoized on the snapshot's
    shared structure (bounded; cleared when allocatable changes)."""
    # Node labels change (an admin labels a new pool), so a template's nodeSelector or affinity
    # that matches nothing today is a reason to wait, not to reject: never_fits ignores it.
    request = dataclasses.replace(request, podsets=tuple(dataclasses.replace(ps, node_constraint=None) if ps.node_constraint else ps
                                                         for ps in request.podsets))
    key = ("never_fits", backend, request)
    cache = snapshot.static_cache
    if key in cache:
        return cache[key]  # type: ignore[return-value]
    empty = snapshot.fork()
    empty.free = empty.alloc.copy()
    empty.eligible = np.ones_like(empty.eligible)
    empty.perf = np.maximum(empty.perf, 10.0)
    result = find_placement(empty, request, backend=backend)
    answer = None if result.fits else result
    if len(cache) >= _STATIC_CACHE_LIMIT:
        cache.clear()
    cache[key] = answer
    return answer


_STATIC_CACHE_LIMIT = 4096

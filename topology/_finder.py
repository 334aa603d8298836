"""The finder's checking API: request in, ``Placement`` out.

It validates the request against the snapshot's levels, builds the fixed-dtype arrays, runs
the kernel (``_kernels``, or its twin ``_reference`` for tests and the speed yardstick) per
PodSet in order, and turns the chosen nodes into a ``Placement`` with why-not verdicts. It
never mutates the snapshot.

Why this module is over 400 lines: the request checks, the per-PodSet pass, graph edges, groups
and the why-not verdicts all read the same fixed-dtype arrays and level indices; split, each part
would rebuild them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from topology import _kernels, _reference
from topology._placement import DomainVerdict, LinkPlacement, Placement, PodSetPlacement, SlicePlacement
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


@dataclasses.dataclass(frozen=True, slots=True)
class _Shape:
    """One PodSet's request as the kernel takes it (level indices, -1 = the whole flavor)."""

    mode: int
    target: int
    span: int
    spread_level: int
    spread_max: int
    island: int
    slice_levels: np.ndarray
    slice_sizes: np.ndarray


_NO_SLICES = np.zeros(0, dtype=np.int64)


def _levels_for(snapshot: Snapshot, ps: PodSetRequest) -> _Shape:
    """The kernel's view of one PodSet; a level the flavor lacks or a slice level above the
    PodSet's own level is a PlacementError naming the field. Remembered per fabric structure
    (``static_cache``) by the request's identity: requests are frozen, and a waiting Workload's
    is asked again on every decision."""
    return snapshot.remember(_SHAPES, id(ps), ps, lambda: _levels_now(snapshot, ps))


_SHAPES = ("topology.finder", "shapes")
"""``Snapshot.remember``'s memo of ``_levels_for``."""


def _levels_now(snapshot: Snapshot, ps: PodSetRequest) -> _Shape:

    def idx(label: str, field: str) -> int:
        try:
            return snapshot.level_index(label)
        except KeyError as exc:
            raise PlacementError(f"podSets[{ps.name}].{field}: {exc.args[0]}") from None

    slice_levels, slice_sizes = _NO_SLICES, _NO_SLICES
    if ps.slices:
        found = [idx(layer.level, f"slices[{i}].level") for i, layer in enumerate(ps.slices)]
        for i in range(1, len(found)):
            if found[i] <= found[i - 1]:
                raise PlacementError(f"podSets[{ps.name}].slices[{i}].level: {ps.slices[i].level} must be below "
                                     f"{ps.slices[i - 1].level} (layers go from the widest level down)")
        slice_levels = np.asarray(found, dtype=np.int64)
        slice_sizes = np.asarray([layer.size for layer in ps.slices], dtype=np.int64)

    span = idx(ps.max_span_level, "maxSpanLevel") if ps.max_span_level else -1
    if ps.spread is not None:
        level = idx(ps.spread.level, "spread.level")
        if ps.required_level:
            scope = idx(ps.required_level, "requiredLevel")
        else:
            scope = span
        if scope >= level:
            raise PlacementError(f"podSets[{ps.name}].spread.level: {ps.spread.level} must be below the scope level")
        return _Shape(_kernels.MODE_SPREAD, scope, 0, level, ps.spread.max_per_domain, level, slice_levels, slice_sizes)
    if ps.unconstrained:
        island = int(slice_levels[0]) if ps.slices else snapshot.node_level
        return _Shape(_kernels.MODE_UNCONSTRAINED, snapshot.node_level, -1, 0, 0, island, slice_levels, slice_sizes)
    if ps.required_level:
        target = idx(ps.required_level, "requiredLevel")
        mode = _kernels.MODE_REQUIRED
        span = target
    else:
        if ps.preferred_level:
            target = idx(ps.preferred_level, "preferredLevel")
        else:
            target = int(slice_levels[0]) if ps.slices else snapshot.node_level
        if span > target:
            raise PlacementError(f"podSets[{ps.name}].maxSpanLevel: {ps.max_span_level} is below the preferred level")
        mode = _kernels.MODE_PREFERRED
    if ps.slices and target > slice_levels[0]:
        raise PlacementError(f"podSets[{ps.name}].slices[0].level: slice level {ps.slices[0].level} is above the PodSet's level "
                             f"{snapshot.level_labels[target]}")
    return _Shape(mode, target, span, 0, 0, target, slice_levels, slice_sizes)


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

    PodSets are placed in order; the PodSets of a group are placed together, at the first
    member's turn. ``explain=False`` skips the why-not verdicts (hot loops that only need the
    placement).

    Graph edges make it one joint choice: when the first PodSet's best domain leaves no room for
    a PodSet linked to it, the whole request is tried again inside each domain of the deepest
    level the edges allow (best fit first: least free GPUs that still hold the request's GPUs),
    and the first that holds every PodSet wins; the first attempt's reasons are kept when none does.
    At most ``_MAX_LINK_DOMAINS`` domains are tried (a bound on a waiting Workload's cost when the
    edge allows only a node, on a flavor of many thousand nodes)."""
    first = _find(kernel=_KERNELS[backend], snapshot=snapshot, request=request, explain=explain, bound=(0, snapshot.num_nodes))
    if first.fits or not request.links:
        return first
    level = max(_link_level(snapshot, link) for link in request.links)
    if level > snapshot.node_level:
        return first
    need = request.gpus
    free_gpu = snapshot.free[:, 0]
    candidates = []
    for dom in range(snapshot.num_domains(level)):
        s, e = snapshot.domain_range(level, dom)
        room = int(free_gpu[s:e].sum())
        if room >= need:
            candidates.append((room, dom, (s, e)))
    for _, _, bound in sorted(candidates)[:_MAX_LINK_DOMAINS]:
        got = _find(kernel=_KERNELS[backend], snapshot=snapshot, request=request, explain=explain, bound=bound)
        if got.fits:
            return got
    return first


_MAX_LINK_DOMAINS = 256
"""Domains a linked request is retried in, best fit first, after its first pass fails."""


def _find(*, kernel: Callable[..., Any], snapshot: Snapshot, request: PlacementRequest, explain: bool, bound: tuple[int, int]) -> Placement:
    """One pass of ``find_placement`` with every PodSet confined to nodes ``bound``."""
    n = snapshot.num_nodes
    free = snapshot.free.copy() if len(request.podsets) > 1 else snapshot.free
    take = np.empty(n, dtype=np.int64)  # the kernel writes every entry of both
    cap = np.empty(n, dtype=np.int64)
    placed: dict[str, PodSetPlacement] = {}
    flags = (1 if request.protect_empty_domains else 0) | (0 if request.best_fit else 2)
    why: list[DomainVerdict] = []
    groups = request.groups()
    for i, ps in enumerate(request.podsets):
        if ps.name in placed:
            continue
        if ps.group is not None:
            members = groups[ps.group]
            ranges = []
            for m in members:
                rng = _link_range(snapshot, request, m, placed, bound)
                if isinstance(rng, str):
                    return Placement(False, reason=rng, why_not=tuple(why))
                ranges.append(rng)
            got = _place_group(kernel, snapshot, free, members, ranges, flags)
            if isinstance(got, str):
                return Placement(False, reason=got, why_not=tuple(why))
            for m, (m_take, island) in zip(members, got):
                placed[m.name] = _describe(snapshot, m, m_take, island)
                free -= m_take[:, None] * _per_pod(m)[None, :]
            continue
        shape = _levels_for(snapshot, ps)
        rng = _link_range(snapshot, request, ps, placed, bound)
        if isinstance(rng, str):
            return Placement(False, reason=rng, why_not=tuple(why))
        lo, hi = rng
        ok, lvl, dom = _run(kernel, snapshot, free, ps, shape, lo, hi, flags, take, cap)
        target = shape.target
        if not ok:
            if explain and shape.mode != _kernels.MODE_UNCONSTRAINED:
                why.extend(_why_not(snapshot, cap, ps, target if target >= 0 else 0, -1, lo, hi))
            reason = _no_fit_reason(snapshot, cap, ps, shape, lo, hi)
            return Placement(False, reason=reason, why_not=tuple(why))
        placed[ps.name] = _describe(snapshot, ps, take, shape.island, within=snapshot.domain_range(int(lvl), int(dom)) if lvl >= 0 else (lo, hi))
        if explain and shape.mode != _kernels.MODE_UNCONSTRAINED:
            why.extend(_why_not(snapshot, cap, ps, shape.island if shape.mode == _kernels.MODE_SPREAD else target,
                                int(dom) if int(lvl) == target else -1, lo, hi))
        if i + 1 < len(request.podsets):
            free -= take[:, None] * _per_pod(ps)[None, :]
    links = tuple(_placed_link(snapshot, link, placed[link.a], placed[link.b]) for link in request.links)
    return Placement(True, podsets=tuple(placed[p.name] for p in request.podsets), why_not=tuple(why), links=links)


def _placed_link(snapshot: Snapshot, link: GraphLink, a: PodSetPlacement, b: PodSetPlacement) -> LinkPlacement:
    """The edge as placed: the lowest level whose one domain holds both ends' nodes."""
    idx = [snapshot.node_index[name] for name in (*a.nodes, *b.nodes)]
    lo, hi = min(idx), max(idx)  # nodes are in path order: the first and last decide the common domain
    level = -1
    for lv in range(snapshot.node_level, -1, -1):
        if snapshot.node_dom[lv, lo] == snapshot.node_dom[lv, hi]:
            level = lv
            break
    at = max(level, 0)
    asked = f"≥ {link.min_bandwidth_gbps:g} GB/s" if link.min_bandwidth_gbps is not None else f"within {link.max_level}"
    return LinkPlacement(link.a, link.b, snapshot.level_labels[level] if level >= 0 else ROOT_LEVEL,
                         float(snapshot.bandwidth_gbps[at]), float(snapshot.latency_us[at]), asked)


def _run(kernel: Callable[..., Any], snapshot: Snapshot, free: np.ndarray, ps: PodSetRequest, shape: _Shape, lo: int, hi: int,
         flags: int, take: np.ndarray, cap: np.ndarray, *, mode: int | None = None, span: int | None = None) -> tuple[int, int, int]:
    """One kernel call for one PodSet on ``free``, confined to nodes ``[lo, hi)``."""
    flags |= (4 if ps.uniform_perf else 0) | (8 if ps.balanced else 0) | (16 if shape.mode == _kernels.MODE_UNCONSTRAINED else 0)
    if ps.uniform_perf and ps.perf_rank == "reach":
        flags |= _kernels.PERF_REACH | (round(ps.perf_band * 1000) << _kernels.PERF_BAND_SHIFT)
    ok, lvl, dom = kernel(
        free, snapshot.alloc, _per_pod(ps), _eligible(snapshot, ps), snapshot.perf, float(ps.perf_floor),
        snapshot.bounds, snapshot.bptr, snapshot.node_dom, lo, hi, ps.pods,
        shape.mode if mode is None else mode, shape.target, shape.span if span is None else span,
        shape.spread_level, shape.spread_max, flags, take, cap, shape.slice_levels, shape.slice_sizes,
    )
    return int(ok), int(lvl), int(dom)


def _link_range(snapshot: Snapshot, request: PlacementRequest, ps: PodSetRequest, placed: dict[str, PodSetPlacement],
                bound: tuple[int, int]) -> tuple[int, int] | str:
    """The node range ``[lo, hi)`` (inside ``bound``) the links to already placed PodSets confine ``ps`` to, or why none."""
    lo, hi = bound
    for link in request.links:
        if ps.name not in (link.a, link.b):
            continue
        other = link.b if link.a == ps.name else link.a
        if other not in placed:
            continue
        lvl = _link_level(snapshot, link)
        first = placed[other]
        if lvl > snapshot.node_level:
            return f"links[{link.a}->{link.b}]: no link in flavor {snapshot.flavor} gives {link.min_bandwidth_gbps} GB/s"
        a_first = snapshot.node_index[first.nodes[0]]
        a_last = snapshot.node_index[first.nodes[-1]]
        dom = snapshot.domain_of(lvl, a_first)
        if snapshot.domain_of(lvl, a_last) != dom:
            return f"links[{link.a}->{link.b}]: {other} spans more than one {snapshot.level_labels[lvl]} domain"
        s, e = snapshot.domain_range(lvl, dom)
        lo, hi = max(lo, s), min(hi, e)
    return lo, hi


def _node_caps(snapshot: Snapshot, free: np.ndarray, ps: PodSetRequest) -> np.ndarray:
    """Pods of ``ps`` each node fits now (0 where it may not go)."""
    req = _per_pod(ps)
    cols = np.flatnonzero(req)
    out: np.ndarray = np.min(free[:, cols] // req[cols], axis=1)
    out = np.maximum(out, 0)
    out[(_eligible(snapshot, ps) == 0) | (snapshot.perf < ps.perf_floor)] = 0
    return out


def _place_group(kernel: Callable[..., Any], snapshot: Snapshot, free: np.ndarray, members: list[PodSetRequest],
                 ranges: list[tuple[int, int]], flags: int) -> list[tuple[np.ndarray, int]] | str:
    """Place a PodSet group together: the domains of the group's level that can hold every
    member are tried best fit first (the largest member's capacity, then path order), each
    member placed inside in order; a preferred group climbs one level at a time up to its
    span bound. Returns each member's pods per node and island level, or why not."""
    shapes = [_levels_for(snapshot, m) for m in members]
    first = shapes[0]
    target = first.target
    required = first.mode == _kernels.MODE_REQUIRED
    lowest_parent = target if required else min(s.span for s in shapes)
    main = max(range(len(members)), key=lambda j: (members[j].pods, -j))
    caps = []
    for m, (lo, hi) in zip(members, ranges):
        c = _node_caps(snapshot, free, m)
        c[:lo] = 0
        c[hi:] = 0
        caps.append(c)
    untouched = ((free[:, 0] == snapshot.alloc[:, 0]) & (free[:, 3] == snapshot.alloc[:, 3])).astype(np.int64)
    n = snapshot.num_nodes
    for k in range(target, lowest_parent - 1, -1):
        ends = snapshot.bounds[snapshot.bptr[k]: snapshot.bptr[k + 1]] if k >= 0 else np.asarray([0, n])
        if n == 0:
            continue
        fits = np.ones(ends.size - 1, dtype=bool)
        for c, m in zip(caps, members):
            fits &= np.add.reduceat(c, ends[:-1]) >= m.pods
        size = np.add.reduceat(caps[main], ends[:-1]) if not flags & 2 else np.zeros(ends.size - 1, dtype=np.int64)
        empty = (np.add.reduceat(untouched, ends[:-1]) == np.diff(ends)) if flags & 1 else np.zeros(ends.size - 1, dtype=bool)
        doms = np.flatnonzero(fits)
        doms = doms[np.lexsort((doms, size[doms], empty[doms]))]
        for d in doms.tolist():
            spans = [(max(int(ends[d]), lo), min(int(ends[d + 1]), hi)) for lo, hi in ranges]
            work = free.copy()
            out: list[tuple[np.ndarray, int]] = []
            for m, shape, (a, b) in zip(members, shapes, spans):
                take = np.empty(n, dtype=np.int64)  # the kernel writes every entry of both
                cap = np.empty(n, dtype=np.int64)
                mode = shape.mode if k == target else _kernels.MODE_PREFERRED
                ok, _, _ = _run(kernel, snapshot, work, m, shape, a, b, flags, take, cap, mode=mode, span=k)
                if not ok:
                    break
                work -= take[:, None] * _per_pod(m)[None, :]
                out.append((take, shape.island))
            if len(out) == len(members):
                return out
    names = ", ".join(f"{m.name} ({m.pods} pods)" for m in members)
    label = snapshot.level_labels[target]
    if required:
        return f"group {members[0].group}: no {label} domain holds {names} together"
    top = f"one {snapshot.level_labels[lowest_parent]} domain" if lowest_parent >= 0 else f"flavor {snapshot.flavor}"
    return f"group {members[0].group}: {names} fit neither one {label} domain together nor a span inside {top}"


def _eligible(snapshot: Snapshot, ps: PodSetRequest) -> np.ndarray:
    """The nodes this PodSet may use: healthy, its taints tolerated, and allowed by its own template."""
    eligible = snapshot.eligible_for(ps.tolerations)
    if ps.node_constraint is None or ps.node_constraint.empty:
        return eligible
    out: np.ndarray = eligible & snapshot.allowed_by(ps.node_constraint)
    return out


def _describe(snapshot: Snapshot, ps: PodSetRequest, take: np.ndarray, island: int, *, within: tuple[int, int] | None = None) -> PodSetPlacement:
    """The placement ``take`` holds; ``within``: the node range the kernel says holds it (read
    there alone when it holds every pod)."""
    idx = None
    if within is not None:
        idx = within[0] + np.flatnonzero(take[within[0]:within[1]] != 0)  # a bool scan is several times faster
        if int(take[idx].sum()) != ps.pods:
            idx = None
    if idx is None:
        idx = np.flatnonzero(take != 0)
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
        islands=snapshot.count_domains(island, idx),
        island_level=snapshot.level_labels[island],
        min_perf=float(perf.min()),
        max_perf=float(perf.max()),
        bottleneck_gbps=float(snapshot.bandwidth_gbps[max(level, 0)]),
        slices=_slices(snapshot, ps, take, idx),
    )


def _slices(snapshot: Snapshot, ps: PodSetRequest, take: np.ndarray, idx: np.ndarray) -> tuple[SlicePlacement, ...]:
    """The outermost layer's slices: each domain of the slice level holds whole slices; its
    pods are cut into slices of ``size`` in path order."""
    if not ps.slices:
        return ()
    level = snapshot.level_index(ps.slices[0].level)
    size = ps.slices[0].size
    label = snapshot.level_labels[level]
    out: list[SlicePlacement] = []
    nodes: list[str] = []
    counts: list[int] = []
    fill = 0
    for k in idx:
        i = int(k)
        left = int(take[i])
        while left > 0:
            put = min(size - fill, left)
            nodes.append(snapshot.node_names[i])
            counts.append(put)
            fill += put
            left -= put
            if fill == size:
                dom = snapshot.domain_of(level, i)
                out.append(SlicePlacement(len(out), label, snapshot.domain_path(level, dom), tuple(nodes), tuple(counts)))
                nodes, counts, fill = [], [], 0
    return tuple(out)


def _domain_caps(snapshot: Snapshot, cap: np.ndarray, level: int, ps: PodSetRequest | None = None) -> np.ndarray:
    """Pods each domain of ``level`` can take; for a sliced PodSet (``level`` at or above its
    slice level) only pods that make whole slices count."""
    starts = snapshot.bounds[snapshot.bptr[level]: snapshot.bptr[level + 1] - 1]
    if cap.size == 0:
        return np.zeros(starts.size, dtype=np.int64)
    if ps is not None and ps.slices:
        shape = _levels_for(snapshot, ps)
        pc = np.zeros(cap.size + 1, dtype=np.int64)
        np.cumsum(cap, out=pc[1:])
        upc = _kernels._layer_prefix(pc, snapshot.bounds, snapshot.bptr, shape.slice_levels, shape.slice_sizes)
        ends = snapshot.bounds[snapshot.bptr[level]: snapshot.bptr[level + 1]]
        units: np.ndarray = np.diff(upc[0][ends]) * int(shape.slice_sizes[0])
        return units
    out: np.ndarray = np.add.reduceat(cap, starts)
    return out


def _why_not(snapshot: Snapshot, cap: np.ndarray, ps: PodSetRequest, level: int, chosen: int, lo: int, hi: int,
             limit: int = 3) -> list[DomainVerdict]:
    """The strongest losing domains at ``level`` with their capacity vs the PodSet's need; domains
    outside ``[lo, hi)`` (the range a link confines the PodSet to) were never candidates."""
    caps = _domain_caps(snapshot, cap, level, ps)
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
            reason = f"fits {c} of {ps.pods} pods" + (f" in whole slices of {ps.slices[0].size}" if ps.slices else "")
        elif chosen >= 0 and c > chosen_cap:
            reason = f"fits {c} ≥ {ps.pods} pods but leaves more free than the best fit ({chosen_cap})"
        else:
            reason = f"fits {c} ≥ {ps.pods} pods; lost the tie-break (perf, then path)"
        out.append(DomainVerdict(ps.name, snapshot.level_labels[level], snapshot.domain_path(level, int(d)), c, ps.pods, reason))
    return out


def _no_fit_reason(snapshot: Snapshot, cap: np.ndarray, ps: PodSetRequest, shape: _Shape, lo: int, hi: int) -> str:
    mode, target, span = shape.mode, shape.target, shape.span
    summary = None
    if not ps.slices and mode in (_kernels.MODE_REQUIRED, _kernels.MODE_PREFERRED) and target >= 0 and cap.size:
        summary = _kernels.capacity_summary(cap, snapshot.bounds, snapshot.bptr, target)  # the domains partition the nodes
    total = int(summary[0]) if summary is not None else int(cap.sum())
    shape_text = f"{ps.pods} pods × {ps.per_pod.gpu} GPU"
    if total < ps.pods:
        where = "" if (lo, hi) == (0, snapshot.num_nodes) else " inside the linked domain"
        if ps.node_constraint is not None and not ps.node_constraint.empty:
            allowed = int(snapshot.allowed_by(ps.node_constraint).sum())
            where += f" on the {allowed} of {snapshot.num_nodes} nodes its pod template allows ({ps.node_constraint.describe()})"
        return f"podSets[{ps.name}]: {shape_text} needed, only {total} pods fit in flavor {snapshot.flavor}{where}"
    if mode == _kernels.MODE_SPREAD:
        return f"podSets[{ps.name}]: {shape_text} cannot be spread at most {ps.spread.max_per_domain if ps.spread else 0} per {ps.spread.level if ps.spread else ''} domain"
    if ps.slices:
        layer = ps.slices[0]
        shape_text += f" in slices of {layer.size} (each inside one {layer.level} domain)"
        whole = int(_domain_caps(snapshot, cap, int(shape.slice_levels[0]), ps).sum())
        if whole < ps.pods:
            return (f"podSets[{ps.name}]: {shape_text}: only {whole // layer.size} of {ps.pods // layer.size} slices fit "
                    f"in flavor {snapshot.flavor}")
    if mode == _kernels.MODE_UNCONSTRAINED:
        return f"podSets[{ps.name}]: {shape_text} do not fit in flavor {snapshot.flavor}"
    if summary is not None:
        best, domains = int(summary[1]), int(summary[2])
    else:
        caps = _domain_caps(snapshot, cap, target, ps)
        best, domains = (int(caps.max()) if caps.size else 0), int(caps.size)
    label = snapshot.level_labels[target]
    if mode == _kernels.MODE_REQUIRED:
        return f"podSets[{ps.name}]: {shape_text} needed in one {label} domain; the largest fits {best} ({domains} domains)"
    top = f"one {snapshot.level_labels[span]} domain" if span >= 0 else f"flavor {snapshot.flavor}"
    return f"podSets[{ps.name}]: {shape_text} fit neither one {label} domain (largest {best}) nor a span inside {top}"


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
    empty.set_eligible(np.ones_like(empty.eligible))
    empty.perf = np.maximum(empty.perf, 10.0)
    result = find_placement(empty, request, backend=backend)
    answer = None if result.fits else result
    if len(cache) >= _STATIC_CACHE_LIMIT:
        cache.clear()
    cache[key] = answer
    return answer


_STATIC_CACHE_LIMIT = 4096

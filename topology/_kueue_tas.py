"""Kueue's Topology-Aware Scheduling placement, rebuilt as the ``kueue-bestfit`` baseline.

The simulator claims "better than Kueue" only if this baseline places exactly as Kueue's TAS does
(Kueue main ff69552, v0.19.x defaults: ``TASProfileMixed`` on, balanced placement and preferred
node affinity off). The rules, in short:

- Leaves: with ``kubernetes.io/hostname`` as the lowest level a leaf is one node; otherwise a leaf
  is every node sharing one full path, capacities summed. Nodes outside the flavor's
  ``nodeLabels``, missing a level label, NotReady or ``spec.unschedulable`` never enter the
  snapshot; they are counted in :attr:`KueueLeaves.excluded` and named in failure messages next
  to Kueue's own exclusions (untolerated taint, a leaf where not one pod fits: ``resource "r"``,
  the resource with the fewest pods, ties by name). Kueue's "Total nodes" counts leaves; pass
  ``excluded={}`` for its message to the letter. Untolerated NoSchedule/NoExecute taints exclude
  a leaf only when the leaf is a node (hostname lowest), as in Kueue.
- A leaf holds ``min over requested resources of floor(free / per-pod)`` pods; every pod also takes
  one ``pods`` unit. Domains above sum their children. Slices (optional): at the slice level a
  domain holds ``floor(pods / slice size)`` slices, summed above it, zero below it.
- Sort order at a level: slices descending (ascending for LeastFreeCapacity), then pods
  ascending, then the domain's values lexicographically.
- ``required``: the fitting domain with the fewest slices (ties: fewest pods, then values); none →
  ``topology "<name>" allows to fit only X out of N pod(s)`` with X the largest domain.
- ``preferred``: the same, else one level up, ...; at the top level greedy over several domains in
  sort order, the last one by best fit.
- ``unconstrained``: at the lowest level, LeastFreeCapacity: the first domain in ascending order
  that holds everything, else every domain from the least free upward until the count is met.
- Walk down: above the slice level the whole count is redistributed over all children of the
  chosen domains together (sort order, greedy, best fit for the last); at and below it each
  parent's pods go into its own children the same way (there the children count 0 slices, so
  the smallest go first).
- Several PodSets: in order, each seeing the pods (requests and pod slots) of the earlier ones.
- Output: the leaves that received pods, in path order; with hostname lowest only the hostname
  level and value are reported (Kueue's ``topologyAssignment``).

Units are whatever the caller chooses, as long as allocatable, usage and per-pod requests agree:
the scenario command uses milli-cores for ``cpu``, bytes for memory-like resources and plain
counts for everything else (GPUs, ``pods``). Arrays are int64; one evaluation is a handful of
numpy passes over the leaves plus sorts over the domains it actually looks at.

Not modelled (Kueue features off by default or outside the baseline): leader/worker PodSet
groups, multi-layer slice constraints, slice-only requests, balanced placement, the PodSet's own
nodeSelector/affinity and preferred node affinity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from topology._model import HOSTNAME_LABEL, Taint, Toleration
from topology._resources import PODS as PODS_COLUMN
from topology._resources import RESOURCE_NAMES, ResourceVector
from topology._snapshot import Snapshot

__all__ = [
    "EXCLUDED_MISSING_LABEL",
    "EXCLUDED_NODE_LABELS",
    "EXCLUDED_NOT_READY",
    "EXCLUDED_UNSCHEDULABLE",
    "MODES",
    "PODS",
    "KueueLeaves",
    "KueueNode",
    "KueuePodSet",
    "KueueResult",
    "KueueWorkloadResult",
    "Mode",
    "build_kueue_leaves",
    "kueue_leaves_from_snapshot",
    "kueue_place",
    "kueue_place_workload",
    "per_pod_of",
    "taint_string",
]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Mode = Literal["required", "preferred", "unconstrained"]
MODES: tuple[Mode, ...] = ("required", "preferred", "unconstrained")

PODS = "pods"
"""The node's pod-slot resource; every pod takes one unit of it on top of its requests."""

# Why a node never entered the snapshot (keys of ``KueueLeaves.excluded``, as printed in messages).
EXCLUDED_NODE_LABELS = "nodeLabels"
EXCLUDED_MISSING_LABEL = "missingTopologyLabel"
EXCLUDED_NOT_READY = "notReady"
EXCLUDED_UNSCHEDULABLE = "unschedulable"

_SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
_INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class KueueNode:
    """One node as Kueue's TAS cache sees it. ``usage`` is everything already running or assumed
    there (non-TAS pods, admitted TAS workloads), in the same units as ``allocatable``."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    usage: Mapping[str, int] = field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


def taint_string(taint: Taint) -> str:
    """A taint as Kubernetes prints it (``key=value:Effect``), the form Kueue's messages use."""
    if not taint.effect:
        return f"{taint.key}={taint.value}:" if taint.value else taint.key
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"


def _untolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    for taint in taints:
        if taint.effect in _SCHEDULING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


class KueueLeaves:
    """The leaves of one flavor's topology as arrays, with the domain structure of every level.

    Leaves are sorted by path, so each domain at each level is a contiguous run of leaves and the
    value order of domains is their index order. ``free`` (leaves × resources) is the only mutable
    state: :meth:`add_usage` / :meth:`remove_usage` change a few rows in place between evaluations;
    :meth:`copy` shares the structure and copies ``free``.
    """

    def __init__(
        self,
        levels: Sequence[str],
        paths: Sequence[tuple[str, ...]],
        resources: Sequence[str],
        allocatable: IntArray,
        usage: IntArray | None = None,
        *,
        blocked_by: Sequence[str] | None = None,
        excluded: Mapping[str, int] | None = None,
        node_leaf: Mapping[str, int] | None = None,
    ) -> None:
        levels = tuple(levels)
        _check_levels(levels)
        paths = [tuple(p) for p in paths]
        for i, path in enumerate(paths):
            if len(path) != len(levels):
                raise ValueError(f"leaf {i}: path {path} has {len(path)} values for {len(levels)} levels")
            if i and paths[i - 1] >= path:
                raise ValueError(f"leaf {i}: paths must be sorted and unique ({paths[i - 1]} ≥ {path})")
        resources = tuple(resources)
        if len(set(resources)) != len(resources):
            raise ValueError(f"resource names must be unique, got {resources}")
        alloc = np.asarray(allocatable, dtype=np.int64).reshape(len(paths), len(resources))
        used = np.zeros_like(alloc) if usage is None else np.asarray(usage, dtype=np.int64).reshape(alloc.shape)
        if PODS not in resources:  # a node without pod slots holds no pod
            resources += (PODS,)
            alloc = np.hstack([alloc, np.zeros((len(paths), 1), dtype=np.int64)])
            used = np.hstack([used, np.zeros((len(paths), 1), dtype=np.int64)])

        self.levels: tuple[str, ...] = levels
        self.paths: tuple[tuple[str, ...], ...] = tuple(paths)
        self.resources: tuple[str, ...] = resources
        self.column: dict[str, int] = {r: j for j, r in enumerate(resources)}
        self.allocatable: IntArray = alloc
        self.free: IntArray = alloc - used
        self.excluded: dict[str, int] = dict(excluded or {})
        self.node_leaf: dict[str, int] = dict(node_leaf or {})
        blocked = tuple(blocked_by) if blocked_by is not None else ("",) * len(paths)
        if len(blocked) != len(paths):
            raise ValueError(f"blocked_by has {len(blocked)} entries for {len(paths)} leaves")
        self.blocked_by: tuple[str, ...] = blocked
        self.blocked: BoolArray = np.fromiter((bool(b) for b in blocked), dtype=np.bool_, count=len(blocked))
        self._any_blocked = bool(self.blocked.any())
        self._snapshot_starts: IntArray | None = None
        self._build_structure()

    def _build_structure(self) -> None:
        n, num_levels = len(self.paths), len(self.levels)
        # dom[l][i]: index of leaf i's domain at level l; starts[l][d]: first leaf of domain d.
        dom: list[IntArray] = []
        starts: list[IntArray] = []
        values: list[tuple[tuple[str, ...], ...]] = []
        changed = [False] * n  # leaf i opened a domain at the level above
        for lv in range(num_levels):
            ids = np.empty(n, dtype=np.int64)
            firsts: list[int] = []
            vals: list[tuple[str, ...]] = []
            d = -1
            for i, path in enumerate(self.paths):
                if i == 0 or changed[i] or path[lv] != self.paths[i - 1][lv]:
                    changed[i] = True
                    d += 1
                    firsts.append(i)
                    vals.append(path[: lv + 1])
                ids[i] = d
            dom.append(ids)
            starts.append(np.asarray(firsts, dtype=np.int64))
            values.append(tuple(vals))
        self._dom = dom
        self._starts = starts
        self.values: tuple[tuple[tuple[str, ...], ...], ...] = tuple(values)
        # child_bounds[l][d] .. child_bounds[l][d+1]: domain d's children at level l+1.
        self._child_bounds: list[IntArray] = []
        for lv in range(num_levels - 1):
            first = dom[lv + 1][starts[lv]] if n else np.zeros(0, dtype=np.int64)
            self._child_bounds.append(np.append(first, len(values[lv + 1])).astype(np.int64))
        self.hostname_lowest = self.levels[-1] == HOSTNAME_LABEL

    # ------------------------------------------------------------------ queries

    @property
    def num_leaves(self) -> int:
        return len(self.paths)

    def num_domains(self, level: int) -> int:
        return len(self.values[level])

    def leaf_of(self, node: str) -> int:
        """The leaf a node belongs to (its own leaf when hostname is the lowest level)."""
        try:
            return self.node_leaf[node]
        except KeyError:
            raise KeyError(f"node {node!r} is not in this snapshot (excluded or unknown)") from None

    def request_vector(self, per_pod: Mapping[str, int]) -> tuple[IntArray, str | None]:
        """One pod's requests in column order, plus its ``pods`` unit; and the first requested
        resource no leaf offers (then nothing fits anywhere), or None."""
        req = np.zeros(len(self.resources), dtype=np.int64)
        missing: str | None = None
        for name, amount in per_pod.items():
            if amount < 0:
                raise ValueError(f"per_pod.{name}: {amount} must not be negative")
            if amount == 0:
                continue
            j = self.column.get(name)
            if j is None:
                missing = name if missing is None else min(missing, name)
            else:
                req[j] += int(amount)
        req[self.column[PODS]] += 1
        return req, missing

    def capacity_for(self, per_pod: Mapping[str, int]) -> IntArray:
        """Pods of ``per_pod`` each leaf holds now (taint-blocked leaves hold none)."""
        req, missing = self.request_vector(per_pod)
        return self._capacity(req, missing)

    def _capacity(self, req: IntArray, missing: str | None) -> IntArray:
        n = self.num_leaves
        if missing is not None:
            return np.zeros(n, dtype=np.int64)
        cols = np.flatnonzero(req)
        cap: IntArray = self.free[:, cols[0]] // req[cols[0]]
        for j in cols[1:]:
            np.minimum(cap, self.free[:, j] // req[j], out=cap)
        np.maximum(cap, 0, out=cap)  # an over-committed leaf holds nothing, never a negative count
        if self._any_blocked:
            cap[self.blocked] = 0
        return cap

    # ------------------------------------------------------------------ state

    def _as_vector(self, amount: IntArray | Mapping[str, int]) -> IntArray:
        if isinstance(amount, Mapping):
            vec = np.zeros(len(self.resources), dtype=np.int64)
            for name, q in amount.items():
                if name not in self.column:
                    raise KeyError(f"resource {name!r} is not a column of this snapshot ({list(self.resources)})")
                vec[self.column[name]] += int(q)
            return vec
        return np.asarray(amount, dtype=np.int64)

    def add_usage(self, leaf: int | IntArray, amount: IntArray | Mapping[str, int]) -> None:
        """Count ``amount`` (a resource vector, or one row per leaf) as used on ``leaf``."""
        np.subtract.at(self.free, leaf, self._as_vector(amount))

    def remove_usage(self, leaf: int | IntArray, amount: IntArray | Mapping[str, int]) -> None:
        np.add.at(self.free, leaf, self._as_vector(amount))

    def add_placement(self, result: KueueResult, per_pod: Mapping[str, int]) -> None:
        """Take a fitting result's pods (their requests and pod slots) from the free capacity."""
        req, _ = self.request_vector(per_pod)
        np.subtract.at(self.free, result.leaf_indices, result.leaf_counts[:, None] * req[None, :])

    def remove_placement(self, result: KueueResult, per_pod: Mapping[str, int]) -> None:
        req, _ = self.request_vector(per_pod)
        np.add.at(self.free, result.leaf_indices, result.leaf_counts[:, None] * req[None, :])

    def sync_from_snapshot(self, snapshot: Snapshot) -> None:
        """Take free capacity from the Atoll snapshot these leaves were made from (O(nodes));
        an ineligible node (NotReady, cordoned, untolerated taint) holds nothing."""
        if self._snapshot_starts is None:
            raise ValueError("these leaves were not made by kueue_leaves_from_snapshot")
        eligible = snapshot.eligible[:, None]
        if len(self._snapshot_starts) == len(snapshot.free):  # one leaf per node
            np.multiply(snapshot.free, eligible, out=self.free)
        elif len(snapshot.free):
            self.free[:] = np.add.reduceat(snapshot.free * eligible, self._snapshot_starts, axis=0)

    def copy(self) -> KueueLeaves:
        """A twin with its own ``free``; structure shared (it never changes)."""
        twin = object.__new__(KueueLeaves)
        for name in _SHARED:
            setattr(twin, name, getattr(self, name))
        twin.free = self.free.copy()
        twin.excluded = dict(self.excluded)
        return twin


_SHARED = (
    "levels", "paths", "resources", "column", "allocatable", "node_leaf", "blocked_by", "blocked", "_any_blocked",
    "_dom", "_starts", "values", "_child_bounds", "hostname_lowest", "_snapshot_starts",
)


def _check_levels(levels: tuple[str, ...]) -> None:
    if not levels:
        raise ValueError("a topology needs at least one level")
    if len(set(levels)) != len(levels):
        raise ValueError(f"topology levels must be unique, got {list(levels)}")
    if HOSTNAME_LABEL in levels[:-1]:
        raise ValueError(f"{HOSTNAME_LABEL} may only be the lowest topology level, got {list(levels)}")


def build_kueue_leaves(
    levels: Sequence[str],
    nodes: Iterable[KueueNode],
    *,
    node_labels: Mapping[str, str] | None = None,
    tolerations: Sequence[Toleration] = (),
) -> KueueLeaves:
    """Filter a flavor's nodes as Kueue does and group them into leaves.

    ``node_labels`` are the ResourceFlavor's ``spec.nodeLabels``; ``tolerations`` the flavor's
    (and the PodSet's) tolerations, checked against node taints when hostname is the lowest level.
    """
    levels = tuple(levels)
    _check_levels(levels)
    wanted = dict(node_labels or {})
    hostname_lowest = levels[-1] == HOSTNAME_LABEL
    excluded: dict[str, int] = {}
    kept: list[tuple[tuple[str, ...], KueueNode]] = []
    names: set[str] = set()
    resources: set[str] = {PODS}
    for node in nodes:
        if node.name in names:
            raise ValueError(f"node {node.name!r} is listed twice")
        names.add(node.name)
        reason = None
        if any(node.labels.get(k) != v for k, v in wanted.items()):
            reason = EXCLUDED_NODE_LABELS
        elif any(lb not in node.labels for lb in levels):
            reason = EXCLUDED_MISSING_LABEL
        elif not node.ready:
            reason = EXCLUDED_NOT_READY
        elif node.unschedulable:
            reason = EXCLUDED_UNSCHEDULABLE
        if reason is not None:
            excluded[reason] = excluded.get(reason, 0) + 1
            continue
        kept.append((tuple(node.labels[lb] for lb in levels), node))
        resources.update(node.allocatable)
        resources.update(node.usage)

    columns = tuple(sorted(resources))
    col = {r: j for j, r in enumerate(columns)}
    kept.sort(key=lambda item: item[0])
    paths: list[tuple[str, ...]] = []
    alloc_rows: list[list[int]] = []
    used_rows: list[list[int]] = []
    blocked_by: list[str] = []
    node_leaf: dict[str, int] = {}
    for path, node in kept:
        if not paths or paths[-1] != path:
            paths.append(path)
            alloc_rows.append([0] * len(columns))
            used_rows.append([0] * len(columns))
            taint = _untolerated(node.taints, tolerations) if hostname_lowest else None
            blocked_by.append(taint_string(taint) if taint is not None else "")
        leaf = len(paths) - 1
        node_leaf[node.name] = leaf
        for name, q in node.allocatable.items():
            alloc_rows[leaf][col[name]] += int(q)
        for name, q in node.usage.items():
            used_rows[leaf][col[name]] += int(q)
    shape = (len(paths), len(columns))
    return KueueLeaves(
        levels, paths, columns,
        np.asarray(alloc_rows, dtype=np.int64).reshape(shape),
        np.asarray(used_rows, dtype=np.int64).reshape(shape),
        blocked_by=blocked_by, excluded=excluded, node_leaf=node_leaf,
    )


def kueue_leaves_from_snapshot(snapshot: Snapshot, levels: Sequence[str]) -> KueueLeaves:
    """Kueue's leaves over an Atoll snapshot, for the simulator: ``levels`` are the flavor's Kueue
    Topology levels (the snapshot's, with or without its trailing hostname level). Columns are the
    snapshot's (``gpu``, ``cpu_milli``, ``memory_mib``, ``pods``); see :func:`per_pod_of`.
    Call :meth:`KueueLeaves.sync_from_snapshot` after the snapshot's usage changes."""
    levels = tuple(levels)
    labels = snapshot.level_labels
    if levels == labels:
        starts = np.arange(snapshot.num_nodes, dtype=np.int64)
        paths: Sequence[tuple[str, ...]] = snapshot.paths
    elif levels == labels[:-1]:
        lv = len(levels) - 1
        starts = snapshot.bounds[snapshot.bptr[lv]: snapshot.bptr[lv + 1] - 1].astype(np.int64)
        paths = snapshot.domain_values[lv]
    else:
        raise ValueError(f"flavor {snapshot.flavor}: Kueue levels {list(levels)} are not the snapshot's {list(labels)}")
    alloc = np.add.reduceat(snapshot.alloc, starts, axis=0) if len(starts) else snapshot.alloc.copy()
    leaf_of_node = np.searchsorted(starts, np.arange(snapshot.num_nodes), side="right") - 1
    leaves = KueueLeaves(levels, paths, RESOURCE_NAMES, alloc, excluded=snapshot.excluded,
                         node_leaf={name: int(leaf_of_node[i]) for i, name in enumerate(snapshot.node_names)})
    leaves._snapshot_starts = starts
    leaves.sync_from_snapshot(snapshot)
    return leaves


def per_pod_of(vector: ResourceVector) -> dict[str, int]:
    """A pod's requests in snapshot columns, without its pod slot (Kueue adds that itself)."""
    return {name: amount for j, (name, amount) in enumerate(zip(RESOURCE_NAMES, vector.as_tuple())) if j != PODS_COLUMN}


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True, eq=False)
class KueueResult:
    """One PodSet's answer. When it fits: ``domains`` are (values, pods) in path order, with
    ``assignment_levels`` naming the values (just hostname when it is the lowest level), and
    ``leaf_indices``/``leaf_counts`` the same placement as leaf rows. Otherwise ``reason`` is
    Kueue's message."""

    fits: bool
    assignment_levels: tuple[str, ...] = ()
    domains: tuple[tuple[tuple[str, ...], int], ...] = ()
    reason: str = ""
    fit_level: str | None = None
    """The level at which the chosen domain(s) were picked (preferred may climb above its level)."""
    leaf_indices: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    leaf_counts: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class KueuePodSet:
    """One PodSet's TAS request: ``count`` pods of ``per_pod`` (``pods`` is added per pod)."""

    name: str
    count: int
    per_pod: Mapping[str, int]
    mode: Mode
    level: str | None = None
    slice_level: str | None = None
    slice_size: int = 1


@dataclass(frozen=True, eq=False)
class KueueWorkloadResult:
    """All PodSets of one Workload in order; Kueue stops at the first PodSet that does not fit."""

    fits: bool
    podsets: tuple[tuple[str, KueueResult], ...]
    reason: str = ""
    failed_podset: str | None = None


def _fail(reason: str) -> KueueResult:
    return KueueResult(False, reason=reason)


# ----------------------------------------------------------------------------- the algorithm


def _sorted_domains(candidates: IntArray, slices: IntArray, pods: IntArray, least_free: bool) -> IntArray:
    """Kueue's domain order: slices descending (ascending for LeastFreeCapacity), then pods
    ascending, then values (= index, leaves being in path order)."""
    s = slices[candidates]
    keys = (candidates, pods[candidates], s if least_free else -s)
    out: IntArray = candidates[np.lexsort(keys)]
    return out


def _smallest_fitting(slices: IntArray, pods: IntArray, need: int) -> int:
    """The first fitting domain in sort order with the fewest slices: BestFit's pick of one domain,
    and LeastFreeCapacity's first fitting domain in ascending order (the same rule)."""
    fits = np.flatnonzero(slices >= need)
    s = slices[fits]
    fits = fits[s == s.min()]
    if fits.size > 1:
        p = pods[fits]
        fits = fits[p == p.min()]
    return int(fits[0])


def _fill(order: IntArray, capacity: IntArray, need: int, best_fit: bool) -> tuple[IntArray, IntArray] | None:
    """Walk ``order`` taking each domain whole until one can hold the rest; with best fit that last
    one is the smallest in the rest of the order that can. (domains, amounts), or None if short."""
    c = capacity[order]
    cum = np.cumsum(c)
    if cum.size == 0 or int(cum[-1]) < need:
        return None
    k = int(np.searchsorted(cum, need, side="left"))
    rest = need - (int(cum[k - 1]) if k else 0)
    last = k
    if best_fit:
        tail = c[k:]
        last = k + int(np.argmin(np.where(tail >= rest, tail, _INT64_MAX)))
    doms = np.empty(k + 1, dtype=np.int64)
    doms[:k] = order[:k]
    doms[k] = order[last]
    amounts = np.empty(k + 1, dtype=np.int64)
    amounts[:k] = c[:k]
    amounts[k] = rest
    return doms, amounts


def _children(bounds: IntArray, parents: IntArray) -> IntArray:
    """All children (indices one level down) of ``parents``, concatenated."""
    lo, hi = bounds[parents], bounds[parents + 1]
    sizes = hi - lo
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    # arange per parent without a Python loop: offsets restart at each parent's first child
    idx = np.arange(total, dtype=np.int64)
    shift = np.repeat(lo - (np.cumsum(sizes) - sizes), sizes)
    out: IntArray = idx + shift
    return out


def _not_fit_message(
    topology_name: str,
    fit: int,
    total: int,
    slice_size: int,
    leaves: KueueLeaves,
    cap: IntArray,
    req: IntArray,
    missing: str | None,
    excluded: Mapping[str, int],
) -> str:
    unit = "pod" if slice_size == 1 else "slice"
    if fit == 0:
        text = f'topology "{topology_name}" doesn\'t allow to fit any of {total} {unit}(s)'
    else:
        text = f'topology "{topology_name}" allows to fit only {fit} out of {total} {unit}(s)'
    reasons = [f"{name}: {n}" for name, n in excluded.items() if n > 0]
    if leaves._any_blocked:
        taints: dict[str, int] = {}
        for leaf in np.flatnonzero(leaves.blocked):
            taints[leaves.blocked_by[leaf]] = taints.get(leaves.blocked_by[leaf], 0) + 1
        reasons += [f'taint "{t}": {n}' for t, n in taints.items()]
    empty = np.flatnonzero((cap == 0) & ~leaves.blocked)
    if empty.size:
        # the limiting resource of a leaf that holds no pod: fewest pods; ties by resource name
        names = [leaves.resources[j] for j in np.flatnonzero(req)]
        cols = np.asarray([leaves.column[r] for r in names], dtype=np.int64)
        counts = leaves.free[np.ix_(empty, cols)] // req[cols]
        if missing is not None:
            names.append(missing)
            counts = np.hstack([counts, np.zeros((empty.size, 1), dtype=np.int64)])
        rank = np.argsort(np.asarray(names))
        names = [names[j] for j in rank]
        limiting = np.argmin(counts[:, rank], axis=1)
        per_resource = np.bincount(limiting, minlength=len(names))
        reasons += [f'resource "{names[j]}": {int(n)}' for j, n in enumerate(per_resource) if n > 0]
    if reasons:
        nodes = leaves.num_leaves + sum(n for n in excluded.values() if n > 0)
        text += f". Total nodes: {nodes}; excluded: {', '.join(sorted(reasons))}"
    return text


def kueue_place(
    leaves: KueueLeaves,
    count: int,
    per_pod: Mapping[str, int],
    *,
    mode: Mode,
    level: str | None = None,
    topology_name: str,
    slice_level: str | None = None,
    slice_size: int = 1,
    excluded: Mapping[str, int] | None = None,
) -> KueueResult:
    """Place one PodSet of ``count`` pods as Kueue's TAS would; ``leaves`` is not changed.

    ``mode``: ``required``/``preferred`` at ``level``, or ``unconstrained`` (no level: Kueue uses
    the lowest). ``slice_level``/``slice_size``: ``podset-slice-required-topology`` and
    ``podset-slice-size``. ``excluded``: nodes dropped before the snapshot, by reason (default:
    the ones :func:`build_kueue_leaves` counted); pass ``{}`` for Kueue's message to the letter.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if count < 0:
        raise ValueError(f"count must be ≥ 0, got {count}")
    if slice_size < 1:
        raise ValueError(f"slice_size must be ≥ 1, got {slice_size}")
    if slice_level is None and slice_size != 1:
        raise ValueError("slice_size needs slice_level (podset-slice-required-topology)")
    if count % slice_size:
        raise ValueError(f"count {count} is not a multiple of slice_size {slice_size}")
    levels = leaves.levels
    last = len(levels) - 1
    unconstrained = mode == "unconstrained"
    if unconstrained:
        if level is not None:
            raise ValueError("unconstrained placement takes no level (Kueue uses the lowest one)")
        level_idx = last
    else:
        if level is None:
            raise ValueError(f"{mode} placement needs a level")
        if level not in levels:
            return _fail(f"no requested topology level: {level}")
        level_idx = levels.index(level)
    if slice_level is None:
        slice_idx = last
    elif slice_level in levels:
        slice_idx = levels.index(slice_level)
    else:
        return _fail(f"no requested topology level for slices: {slice_level}")
    if level_idx > slice_idx:
        return _fail(f"podset slice topology {levels[slice_idx]} is above the podset topology {levels[level_idx]}")
    if leaves.num_leaves == 0:
        return _fail(f"no topology domains at level: {levels[level_idx]}")
    excluded = leaves.excluded if excluded is None else excluded

    # phase 1: pods and slices per domain, leaves up
    req, missing = leaves.request_vector(per_pod)
    cap = leaves._capacity(req, missing)
    bounds = leaves._child_bounds
    pods: list[IntArray] = [cap] * (last + 1)
    for lv in range(last - 1, -1, -1):
        pods[lv] = np.add.reduceat(pods[lv + 1], bounds[lv][:-1])
    slices: list[IntArray] = list(pods)
    for lv in range(slice_idx + 1, last + 1):
        slices[lv] = np.zeros_like(pods[lv])
    if slice_size > 1:
        slices[slice_idx] = pods[slice_idx] // slice_size
        for lv in range(slice_idx - 1, -1, -1):
            slices[lv] = np.add.reduceat(slices[lv + 1], bounds[lv][:-1])
    need = count // slice_size
    best_fit = not unconstrained  # TASProfileMixed: unconstrained uses LeastFreeCapacity

    def not_fit(fit: int) -> KueueResult:
        return _fail(_not_fit_message(topology_name, fit, need, slice_size, leaves, cap, req, missing, excluded))

    # phase 2a: the level and domain(s) that hold every slice
    search = level_idx
    while True:
        s, p = slices[search], pods[search]
        top = int(s.max())
        if top >= need:
            chosen = np.asarray([_smallest_fitting(s, p, need)], dtype=np.int64)
            break
        if mode == "required":
            return not_fit(top)
        if search > 0 and not unconstrained:
            search -= 1  # preferred: one level up
            continue
        order = _sorted_domains(np.arange(s.size, dtype=np.int64), s, p, least_free=unconstrained)
        picked = _fill(order, s, need, best_fit)
        if picked is None:
            return not_fit(int(s.sum()))
        chosen = picked[0]
        break
    fit_level = search

    # phase 2b: down level by level; above the slice level the whole count is spread over all
    # children of the chosen domains together
    filled = _fill(chosen, slices[fit_level], need, best_fit)
    assert filled is not None  # the chosen domains hold the count by construction
    doms, amounts = filled
    lv = fit_level
    while lv < min(last, slice_idx):
        kids = _sorted_domains(_children(bounds[lv], doms), slices[lv + 1], pods[lv + 1], unconstrained)
        filled = _fill(kids, slices[lv + 1], need, best_fit)
        assert filled is not None
        doms, amounts = filled
        lv += 1
    amounts = amounts * slice_size
    while lv < last:
        next_doms: list[IntArray] = []
        next_amounts: list[IntArray] = []
        for d, a in zip(doms.tolist(), amounts.tolist()):
            kids = np.arange(bounds[lv][d], bounds[lv][d + 1], dtype=np.int64)
            kids = _sorted_domains(kids, slices[lv + 1], pods[lv + 1], unconstrained)
            filled = _fill(kids, pods[lv + 1], a, best_fit)
            assert filled is not None
            next_doms.append(filled[0])
            next_amounts.append(filled[1])
        doms, amounts = np.concatenate(next_doms), np.concatenate(next_amounts)
        lv += 1

    # phase 3: the leaves that got pods, in path order
    keep = amounts > 0
    doms, amounts = doms[keep], amounts[keep]
    order = np.argsort(doms, kind="stable")
    doms, amounts = doms[order], amounts[order]
    start = last if leaves.hostname_lowest else 0
    domains = tuple((leaves.paths[d][start:], int(a)) for d, a in zip(doms.tolist(), amounts.tolist()))
    return KueueResult(True, levels[start:], domains, fit_level=levels[fit_level], leaf_indices=doms, leaf_counts=amounts)


def kueue_place_workload(
    leaves: KueueLeaves,
    podsets: Sequence[KueuePodSet],
    *,
    topology_name: str,
    excluded: Mapping[str, int] | None = None,
    commit: bool = False,
) -> KueueWorkloadResult:
    """Place a Workload's PodSets in order, each seeing the earlier ones' pods as used.

    ``commit``: keep the whole Workload's usage in ``leaves`` when every PodSet fits (the
    simulator admits it); otherwise ``leaves`` is left as it was.
    """
    done: list[tuple[str, KueueResult]] = []
    applied: list[tuple[KueueResult, Mapping[str, int]]] = []
    failure: tuple[str, str] | None = None
    try:
        for ps in podsets:
            result = kueue_place(leaves, ps.count, ps.per_pod, mode=ps.mode, level=ps.level, topology_name=topology_name,
                                 slice_level=ps.slice_level, slice_size=ps.slice_size, excluded=excluded)
            done.append((ps.name, result))
            if not result.fits:
                failure = (ps.name, result.reason)
                break
            leaves.add_placement(result, ps.per_pod)
            applied.append((result, ps.per_pod))
    finally:
        if failure is not None or not commit or len(applied) != len(podsets):
            for result, per_pod in applied:
                leaves.remove_placement(result, per_pod)
    if failure is not None:
        return KueueWorkloadResult(False, tuple(done), reason=failure[1], failed_podset=failure[0])
    return KueueWorkloadResult(True, tuple(done))

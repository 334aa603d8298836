"""A flavor's fabric compiled to flat arrays for the finder.

Nodes are sorted by their topology path, so every domain at every level is one contiguous
index range ``[start, end)``. The structure (levels, order, domain bounds) is rebuilt only when
the node set or a node's path changes; usage, health and perf updates touch one row
(``update_node``). ``fork()`` copies the mutable arrays so a scheduling cycle can apply
in-flight reservations without touching the shared state, as Kueue's TAS snapshot does.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from topology._affinity import NodeConstraint
from topology._model import HOSTNAME_LABEL, Level, NodeInfo, Taint, Toleration
from topology._resources import NUM_RESOURCES, ResourceVector

__all__ = ["Snapshot", "node_is_healthy", "untolerated_taints"]

IntArray = npt.NDArray[np.int64]
T = TypeVar("T")


def node_is_healthy(node: NodeInfo, tolerations: Sequence[Toleration] = ()) -> bool:
    """Ready, not cordoned, and every NoSchedule/NoExecute taint tolerated."""
    return node.ready and not node.unschedulable and not untolerated_taints(node, tolerations)


def untolerated_taints(node: NodeInfo, tolerations: Sequence[Toleration] = ()) -> tuple[Taint, ...]:
    """The NoSchedule/NoExecute taints of ``node`` that none of ``tolerations`` tolerates."""
    return tuple(t for t in node.taints if t.effect in ("NoSchedule", "NoExecute") and not any(x.tolerates(t) for x in tolerations))


class Snapshot:
    """One flavor's nodes as arrays, plus the domain structure of its topology levels.

    Levels are the flavor's Topology levels top → bottom; a node level (hostname) is always
    last, added when the Topology does not end with it (its link defaults to the lowest
    level's: GPUs inside one node are at least as close as inside one island).
    """

    def __init__(
        self,
        flavor: str,
        levels: Sequence[Level],
        nodes: Iterable[NodeInfo],
        *,
        tolerations: Sequence[Toleration] = (),
        node_level: Level | None = None,
        generation: int = 1,
    ) -> None:
        if not levels:
            raise ValueError(f"flavor {flavor}: a topology needs at least one level")
        levels = tuple(levels)
        if levels[-1].label != HOSTNAME_LABEL:
            levels = levels + (node_level or Level(HOSTNAME_LABEL, levels[-1].bandwidth_gbps, levels[-1].latency_us),)
        self.flavor = flavor
        self.levels: tuple[Level, ...] = levels
        self.level_labels: tuple[str, ...] = tuple(lv.label for lv in levels)
        self.tolerations = tuple(tolerations)
        self.generation = generation
        self.excluded: dict[str, int] = {}
        self.static_cache: dict[object, object] = {}
        """Answers that depend only on structure and allocatable (e.g. ``never_fits``); shared by
        forks, cleared when a node's allocatable changes."""

        kept: list[tuple[tuple[str, ...], NodeInfo]] = []
        for node in nodes:
            path = []
            for label in self.level_labels[:-1]:
                value = node.labels.get(label)
                if value is None:
                    break
                path.append(value)
            if len(path) != len(self.level_labels) - 1:
                self.excluded["missing level label"] = self.excluded.get("missing level label", 0) + 1
                continue
            path.append(node.name)
            kept.append((tuple(path), node))
        kept.sort(key=lambda item: item[0])
        names = [n.name for _, n in kept]
        if len(set(names)) != len(names):
            raise ValueError(f"flavor {flavor}: duplicate node names")

        n = len(kept)
        num_levels = len(levels)
        self.node_names: tuple[str, ...] = tuple(names)
        self.node_index: dict[str, int] = {name: i for i, name in enumerate(names)}
        self.paths: tuple[tuple[str, ...], ...] = tuple(p for p, _ in kept)
        self.alloc: IntArray = np.zeros((n, NUM_RESOURCES), dtype=np.int64)
        self.free: IntArray = np.zeros((n, NUM_RESOURCES), dtype=np.int64)
        self.perf = np.ones(n, dtype=np.float64)
        self.eligible = np.zeros(n, dtype=np.uint8)
        self.eligible_token: object = object()
        """Replaced whenever ``eligible`` changes: answers computed from eligibility can be kept
        against it (it is held, never compared by id)."""
        self._borrowed: set[str] = set()
        """Arrays shared with a fork or its parent (``perf``, ``eligible``): copied before the first write."""
        self.taint_blocked: dict[int, tuple[Taint, ...]] = {}
        """Nodes healthy but for taints the flavor does not tolerate; pods that tolerate them may use them."""
        self.labels: list[Mapping[str, str]] = [{} for _ in range(n)]
        """Each node's labels, for the pod templates' nodeSelector and node affinity (``allowed_by``)."""
        for i, (_, node) in enumerate(kept):
            self._write_row(i, node)

        # Domain structure: per level the start offsets of its domains (plus a final n),
        # concatenated into ``bounds`` with ``bptr`` pointing at each level's slice.
        node_dom = np.zeros((num_levels, n), dtype=np.int32)
        bounds: list[int] = []
        bptr = [0]
        self.domain_values: list[list[tuple[str, ...]]] = []
        for lv in range(num_levels):
            values: list[tuple[str, ...]] = []
            d = -1
            prev: tuple[str, ...] | None = None
            for i, (node_path, _) in enumerate(kept):
                key = node_path[: lv + 1]
                if key != prev:
                    d += 1
                    bounds.append(i)
                    values.append(key)
                    prev = key
                node_dom[lv, i] = d
            bounds.append(n)
            bptr.append(len(bounds))
            self.domain_values.append(values)
        self.node_dom = node_dom
        self.bounds = np.asarray(bounds, dtype=np.int32)
        self.bptr = np.asarray(bptr, dtype=np.int32)
        self.bandwidth_gbps = np.asarray([lv.bandwidth_gbps for lv in levels], dtype=np.float64)
        self.latency_us = np.asarray([lv.latency_us for lv in levels], dtype=np.float64)

    # ------------------------------------------------------------------ structure queries

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def node_level(self) -> int:
        return len(self.levels) - 1

    def level_index(self, label: str) -> int:
        try:
            return self.level_labels.index(label)
        except ValueError:
            raise KeyError(f"flavor {self.flavor}: no topology level {label!r}; levels: {list(self.level_labels)}") from None

    def num_domains(self, level: int) -> int:
        return int(self.bptr[level + 1] - self.bptr[level] - 1)

    def domain_range(self, level: int, domain: int) -> tuple[int, int]:
        base = int(self.bptr[level])
        return int(self.bounds[base + domain]), int(self.bounds[base + domain + 1])

    def domain_of(self, level: int, node: int) -> int:
        return int(self.node_dom[level, node])

    def count_domains(self, level: int, nodes: npt.NDArray[np.int64]) -> int:
        """Distinct domains of ``level`` among ``nodes`` (ascending): nodes are in path order, so
        each domain's nodes are contiguous and its index never falls along them."""
        if len(nodes) < 2:
            return len(nodes)
        return 1 + int(np.count_nonzero(np.diff(self.node_dom[level, nodes])))

    def domain_path(self, level: int, domain: int) -> tuple[str, ...]:
        return self.domain_values[level][domain]

    def remember(self, name: object, key: Hashable, held: object, compute: Callable[[], T]) -> T:
        """``compute()``, kept in the memo ``name`` beside ``static_cache``'s other answers (cleared
        with them when allocatable or structure changes; at most 4,096 per memo). For answers keyed
        by the identity of frozen inputs: ``held`` keeps those inputs alive, so no id is reused
        while its answer is here."""
        memo = self.static_cache.get(name)
        if not isinstance(memo, dict):
            memo = self.static_cache[name] = {}
        hit = memo.get(key)
        if hit is not None:
            return hit[1]  # type: ignore[no-any-return]
        value = compute()
        if len(memo) >= 4096:
            memo.clear()
        memo[key] = (held, value)
        return value

    # ------------------------------------------------------------------ state

    def update_usage(self, name: str, used: ResourceVector) -> bool:
        """``update_node`` for a node whose pods alone changed: its free row is allocatable less
        ``used``. False if the node is not in the snapshot."""
        i = self.node_index.get(name)
        if i is None:
            return False
        a = self.alloc[i].tolist()
        self.free[i] = [max(0, a[0] - used.gpu), max(0, a[1] - used.cpu_milli), max(0, a[2] - used.memory_mib), max(0, a[3] - used.pods)]
        self.generation += 1
        return True

    def _write_row(self, i: int, node: NodeInfo) -> None:
        alloc = node.allocatable.as_tuple()
        used = node.used.as_tuple()
        self.alloc[i] = alloc
        self.free[i] = [max(0, a - u) for a, u in zip(alloc, used)]
        if self.perf[i] != node.perf:
            self._own("perf")[i] = node.perf
        self.labels[i] = node.labels
        blocking = untolerated_taints(node, self.tolerations)
        healthy = node.ready and not node.unschedulable and not node.draining  # draining: no new placement, whatever pods tolerate
        self._set_eligible(i, 1 if healthy and not blocking else 0)
        if healthy and blocking:
            self.taint_blocked[i] = blocking
        else:
            self.taint_blocked.pop(i, None)

    def exclude(self, node: int) -> None:
        """Rule a node out for every pod of this (forked) snapshot, whatever the pods tolerate."""
        self._set_eligible(node, 0)
        self.taint_blocked.pop(node, None)

    def set_eligible(self, eligible: npt.NDArray[Any]) -> None:
        """Replace eligibility at once (a fork's view for one search: every node open, say); the
        token is renewed when it differs, so an answer kept against the other side's
        ``eligible_token`` (the ledger's masks, the owed book) is never read for this one."""
        if np.array_equal(eligible, self.eligible):
            return
        self.eligible = np.array(eligible, dtype=self.eligible.dtype)
        self._borrowed.discard("eligible")
        self.eligible_token = object()

    def restrict(self, keep: npt.NDArray[np.bool_]) -> None:
        """Rule out the nodes ``keep`` leaves out for every pod of this (forked) snapshot, whatever
        the pods tolerate (as ``exclude``; e.g. those under a class's speed floor)."""
        self.set_eligible(np.where(keep, self.eligible, 0))
        for i in [i for i in self.taint_blocked if not keep[i]]:
            del self.taint_blocked[i]

    def _set_eligible(self, i: int, value: int) -> None:
        if self.eligible[i] != value:
            self._own("eligible")[i] = value
            self.eligible_token = object()

    def _own(self, name: str) -> npt.NDArray[Any]:
        """The array ``name``, copied first if a fork shares it."""
        if name in self._borrowed:
            setattr(self, name, getattr(self, name).copy())
            self._borrowed.discard(name)
        out: npt.NDArray[Any] = getattr(self, name)
        return out

    def eligible_for(self, tolerations: Sequence[Toleration]) -> npt.NDArray[np.uint8]:
        """Eligibility for pods that carry ``tolerations`` on top of the flavor's own."""
        if not tolerations or not self.taint_blocked:
            return self.eligible
        lifted = [i for i, taints in self.taint_blocked.items() if all(any(x.tolerates(t) for x in tolerations) for t in taints)]
        if not lifted:
            return self.eligible
        out = self.eligible.copy()
        out[lifted] = 1
        return out

    def allowed_by(self, constraint: NodeConstraint) -> npt.NDArray[np.uint8]:
        """1 for each node whose name and labels satisfy a pod template's ``constraint``. Depends on
        labels only, so it is memoized with the structure (cleared when a node's labels change)."""
        key = ("allowed-by", constraint)
        mask = self.static_cache.get(key)
        if mask is None:
            mask = np.fromiter((constraint.matches(name, labels) for name, labels in zip(self.node_names, self.labels)),
                               dtype=np.uint8, count=self.num_nodes)
            self.static_cache[key] = mask
        assert isinstance(mask, np.ndarray)
        return mask

    def update_node(self, node: NodeInfo) -> bool:
        """Refresh one node's usage/health/perf in place; False if the structure must be rebuilt.

        O(1): only the node's rows change. A new node, a removed node or a changed path needs a
        new Snapshot (the caller rebuilds and the generation moves on).
        """
        i = self.node_index.get(node.name)
        if i is None:
            return False
        path = tuple(node.labels.get(label, "") for label in self.level_labels[:-1]) + (node.name,)
        if path != self.paths[i]:
            return False
        if tuple(self.alloc[i]) != node.allocatable.as_tuple() or self.labels[i] != node.labels:
            self.static_cache.clear()
        self._write_row(i, node)
        self.generation += 1
        return True

    def fork(self) -> Snapshot:
        """A copy whose mutable state (free, perf, eligibility) is private; structure shared.
        ``perf`` and ``eligible`` are shared until either side writes them (a decision's fork
        rarely does), so a fork costs one copy of ``free``."""
        twin = object.__new__(Snapshot)
        for name in _SHARED:
            setattr(twin, name, getattr(self, name))
        twin.free = self.free.copy()
        twin.perf = self.perf
        twin.eligible = self.eligible
        twin.eligible_token = self.eligible_token
        self._borrowed = {"perf", "eligible"}
        twin._borrowed = {"perf", "eligible"}
        twin.taint_blocked = dict(self.taint_blocked)
        twin.excluded = dict(self.excluded)
        return twin

    def reserve(self, node: str | int, amount: ResourceVector) -> None:
        """Count ``amount`` as used on a node (an admitted placement not yet running)."""
        i = self.node_index[node] if isinstance(node, str) else node
        self.free[i] = np.maximum(self.free[i] - np.asarray(amount.as_tuple(), dtype=np.int64), 0)

    def release(self, node: str | int, amount: ResourceVector) -> None:
        i = self.node_index[node] if isinstance(node, str) else node
        self.free[i] = np.minimum(self.free[i] + np.asarray(amount.as_tuple(), dtype=np.int64), self.alloc[i])

    def free_gpus(self) -> int:
        return int(self.free[self.eligible.astype(bool), 0].sum())

    def total_gpus(self) -> int:
        return int(self.alloc[:, 0].sum())


_SHARED = (
    "flavor", "levels", "level_labels", "tolerations", "generation", "node_names", "node_index",
    "paths", "alloc", "labels", "node_dom", "bounds", "bptr", "domain_values", "bandwidth_gbps", "latency_us", "static_cache",
)

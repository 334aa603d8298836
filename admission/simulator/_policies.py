"""The placement policies the simulator compares, all behind one small interface.

- ``count-only``: what plain Kubernetes does with a GPU count: first fit in node order (nodes
  listed by name, which on these models is topology path order), each node taking as many pods
  as it has room for. Kueue quota still gates admission, as for every policy.
- ``random``: the same count check, nodes taken in a seeded random order.
- ``kueue-bestfit``: Kueue's own Topology-Aware Scheduling (``topology._kueue_tas``). Training
  jobs carry ``podset-preferred-topology: <island level>`` on their pod template, as Kueue TAS
  users annotate training Jobs; other classes carry no annotation and run unconstrained.
- ``kueue-required``: the same, for a user who writes ``podset-required-topology: <island
  level>`` on training jobs: Kueue admits only inside one island and otherwise keeps the job
  queued. A job bigger than any island gets the lowest level one of whose domains can hold it on
  the empty flavor (a user does not write a constraint that can never be met).
- ``atoll-<profile>``: any profile of the profiles document, run as deployed: the controller's
  ``Decider`` and ``Ledger`` (``_deployed``), with its wait state, backoff and relaxation.

Baselines answer ``admit`` or ``nofit`` (Kueue keeps the workload queued as inadmissible);
Atoll answers ``admit``, ``wait`` (an admission-check Retry with its delay) or ``reject``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from admission.queue import Need
from policies import Profile, ProfilesDocument, WaitState, WorkloadClass
from topology import HOSTNAME_LABEL, PlacementRequest, PodSetRequest, ResourceVector, SliceLayer, Snapshot, never_fits

__all__ = [
    "BASELINES",
    "DEFAULT_POLICIES",
    "AtollPolicy",
    "Attempt",
    "CountOnlyPolicy",
    "JobShape",
    "KueueBestFitPolicy",
    "Policy",
    "PolicyError",
    "RandomPolicy",
    "fits_one_domain",
    "fits_one_island",
    "island_level_of",
    "make_policies",
]

BASELINES = ("count-only", "random", "kueue-bestfit", "kueue-required")
DEFAULT_POLICIES = ("count-only", "random", "kueue-bestfit", "atoll-strict", "atoll-elastic")
ATOLL_PREFIX = "atoll-"
PODSET = "main"
"""Every simulated job is one PodSet with this name, so identical shapes share cached answers."""

IntArray = npt.NDArray[np.int64]
Outcome = Literal["admit", "wait", "nofit", "reject"]


class PolicyError(ValueError):
    """A policy name or its profile cannot be used on this cluster model; the message says which."""


@dataclass(frozen=True, slots=True)
class JobShape:
    """What placement sees of a job: ``pods`` identical pods of ``per_pod``, and its class.

    Hashable: jobs of one shape get identical requests, so the simulator keys its queues by it.
    ``per_pod.pods`` is 1 (each pod takes one pod slot of its node).
    """

    pods: int
    per_pod: ResourceVector
    kind: str = "training"
    slices: tuple[SliceLayer, ...] = ()
    """Kueue's slice request (``podset-slice-required-topology`` and ``podset-slice-size``), if any
    (``_slicing``)."""

    @property
    def gpus(self) -> int:
        return self.pods * self.per_pod.gpu


@dataclass(frozen=True, slots=True)
class Attempt:
    """One placement attempt. ``nodes``/``pods`` (snapshot indices, pods per node) when admitted."""

    outcome: Outcome
    nodes: IntArray | None = None
    pods: IntArray | None = None
    retry_after: float = 0.0
    relaxed: bool = False
    message: str = ""
    needs: tuple[Need, ...] = ()
    """A wait for a domain: what could change the answer (the queue manager parks it until then)."""
    parks: bool = False
    """The wait parks its Workload (``Verdict.waits_parked``: its profile's ``queueing.parkWaiting``,
    or the run's override); False: a Retry on its delay."""


class Policy(Protocol):
    name: str
    admission_check: bool
    """True: a failed attempt is an admission-check Retry (the job leaves the queue for its delay)."""

    def attempt(self, snapshot: Snapshot, shape: JobShape, *, now: float, wait: WaitState) -> Attempt: ...


def island_level_of(snapshot: Snapshot, preferred: str | None = None) -> str:
    """The island level: ``preferred`` when the flavor has it, else the level just above the node."""
    if preferred and preferred in snapshot.level_labels:
        return preferred
    labels = [lb for lb in snapshot.level_labels if lb != HOSTNAME_LABEL]
    return labels[-1] if labels else snapshot.level_labels[-1]


def _pod_capacity(snapshot: Snapshot, per_pod: ResourceVector) -> IntArray:
    """Pods of ``per_pod`` each healthy node can take now (GPU, CPU, memory and pod slots)."""
    free = snapshot.free
    cap: IntArray = free[:, 3].copy()
    for r, q in enumerate(per_pod.as_tuple()[:3]):
        if q > 0:
            np.minimum(cap, free[:, r] // q, out=cap)
    cap[snapshot.eligible == 0] = 0
    return cap


def _fill(order: IntArray, cap: IntArray, pods: int) -> tuple[IntArray, IntArray]:
    """Take nodes in ``order``, each as full as it can be, until ``pods`` are placed."""
    caps = cap[order]
    cum = np.cumsum(caps)
    last = int(np.searchsorted(cum, pods))
    nodes = order[: last + 1]
    take = caps[: last + 1].copy()
    take[-1] -= int(cum[last]) - pods
    keep = take > 0
    return nodes[keep], take[keep]


class _CountPolicy:
    admission_check = False

    def __init__(self, name: str) -> None:
        self.name = name

    def _order(self, cap: IntArray, pods: int) -> IntArray:
        raise NotImplementedError

    def attempt(self, snapshot: Snapshot, shape: JobShape, *, now: float, wait: WaitState) -> Attempt:
        cap = _pod_capacity(snapshot, shape.per_pod)
        if int(cap.sum()) < shape.pods:
            return Attempt("nofit", message=f"only {int(cap.sum())} of {shape.pods} pods fit")
        nodes, take = _fill(self._order(cap, shape.pods), cap, shape.pods)
        return Attempt("admit", nodes, take)


class CountOnlyPolicy(_CountPolicy):
    """First fit by count in node order: no notion of islands, racks or links."""

    def __init__(self) -> None:
        super().__init__("count-only")

    def _order(self, cap: IntArray, pods: int) -> IntArray:
        return np.flatnonzero(cap)


class RandomPolicy(_CountPolicy):
    """Nodes with room, in a random order drawn from the run's seed."""

    def __init__(self, seed: int) -> None:
        super().__init__("random")
        self.rng = np.random.default_rng(seed)

    def _order(self, cap: IntArray, pods: int) -> IntArray:
        cand = np.flatnonzero(cap)
        # every candidate holds ≥ 1 pod, so a random ordered sample of ``pods`` nodes suffices
        out: IntArray = self.rng.choice(cand, size=min(cand.size, pods), replace=False)
        return out


class _KueueView:
    """One flavor as Kueue's TAS cache sees it: leaves built once from the flavor's nodes, their
    free capacity refreshed from the simulator's snapshot before each evaluation."""

    def __init__(self, snapshot: Snapshot, topology_name: str) -> None:
        from topology import KueueNode, build_kueue_leaves

        # The snapshot's levels are the flavor's Topology levels (hostname lowest, added if absent).
        nodes = []
        for i, name in enumerate(snapshot.node_names):
            labels = dict(zip(snapshot.level_labels, snapshot.paths[i]))
            alloc = dict(zip(_KUEUE_COLUMNS, (int(v) for v in snapshot.alloc[i])))
            nodes.append(KueueNode(name, labels, alloc, ready=bool(snapshot.eligible[i])))
        self.leaves = build_kueue_leaves(snapshot.level_labels, nodes)
        self.topology_name = topology_name
        self.leaf_node = np.asarray([snapshot.node_index[n] for n in _leaf_names(self.leaves)], dtype=np.int64)
        self.columns = np.asarray([_KUEUE_COLUMNS.index(r) for r in self.leaves.resources], dtype=np.int64)

        self.identity = bool(np.array_equal(self.leaf_node, np.arange(snapshot.num_nodes)))
        self.leaf_of = np.full(snapshot.num_nodes, -1, dtype=np.int64)
        self.leaf_of[self.leaf_node] = np.arange(self.leaf_node.size)
        self.source: IntArray | None = None
        """The free array ``leaves.free`` mirrors, but for the rows in ``dirty``."""
        self.dirty: list[IntArray] = []

    def sync(self, snapshot: Snapshot, tracked: bool) -> None:
        """Copy the snapshot's free capacity in Kueue's column order (column-major: Kueue reads
        one resource column at a time). ``tracked``: every change since the last copy is in
        ``dirty``, so only those rows are copied."""
        if tracked and self.source is snapshot.free:
            if self.dirty:
                nodes = np.concatenate(self.dirty)
                self.dirty.clear()
                leaf = self.leaf_of[nodes]
                keep = leaf >= 0
                self.leaves.free[leaf[keep]] = snapshot.free[nodes[keep]][:, self.columns]
            return
        free = snapshot.free if self.identity else snapshot.free[self.leaf_node]
        self.leaves.free = np.asfortranarray(free[:, self.columns])
        self.source = snapshot.free
        self.dirty.clear()


_KUEUE_COLUMNS = ("nvidia.com/gpu", "cpu", "memory", "pods")
"""Snapshot resource columns (GPU, CPU milli-cores, memory MiB, pod slots) under Kueue names."""


def _leaf_names(leaves: Any) -> list[str]:
    by_leaf = sorted(leaves.node_leaf.items(), key=lambda kv: kv[1])
    return [name for name, _ in by_leaf]


class KueueBestFitPolicy:
    """Kueue TAS as Kueue computes it (``topology._kueue_tas``), with the annotation a user sets.

    Training jobs: ``podset-preferred-topology: <island level>`` (one island if one fits, else the
    next level up, ..., else greedy across the flavor: Kueue never waits for a better place), and
    a sliced job its slice annotations (``_slicing``: each slice inside one domain of the slice level).
    Other classes: no annotation, so Kueue's unconstrained mode (LeastFreeCapacity). Kueue knows
    nothing of perf or link speeds. Leaves are nodes (hostname is every bundled Topology's lowest
    level), so Kueue's leaf counts are the pods per node the simulator reserves.
    """

    admission_check = False

    def __init__(self, island_level: str | None, *, required: bool = False) -> None:
        self.name = "kueue-required" if required else "kueue-bestfit"
        self.island_level = island_level
        self.required = required
        self._views: dict[int, _KueueView] = {}
        self._levels: dict[tuple[int, JobShape], str] = {}
        self._tracked = False

    def _view(self, snapshot: Snapshot) -> _KueueView:
        key = id(snapshot.node_names)  # structure shared by forks; one view per flavor snapshot
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = _KueueView(snapshot, snapshot.flavor)
        return view

    def _level(self, snapshot: Snapshot, shape: JobShape) -> str:
        """The annotated level: the island level; under ``required``, the lowest level at or above
        it one of whose domains holds the job on the empty flavor."""
        island = island_level_of(snapshot, self.island_level)
        if not self.required:
            return island
        key = (id(snapshot.node_names), shape)
        level = self._levels.get(key)
        if level is None:
            labels = snapshot.level_labels
            level = island
            for lb in reversed(labels[: labels.index(island) + 1]):
                level = lb
                if fits_one_domain(snapshot, shape, lb):
                    break
            self._levels[key] = level
        return level

    def capacity_changed(self, snapshot: Snapshot, nodes: IntArray) -> None:
        """The caller changed ``snapshot.free`` on ``nodes``. After the first such call the caller
        must report every change: an attempt then copies only the changed rows into Kueue's view
        instead of the whole flavor (a full copy per attempt was a tenth of a replay)."""
        self._tracked = True
        view = self._views.get(id(snapshot.node_names))
        if view is not None:
            view.dirty.append(nodes)

    def attempt(self, snapshot: Snapshot, shape: JobShape, *, now: float, wait: WaitState) -> Attempt:
        from topology import kueue_place

        view = self._view(snapshot)
        view.sync(snapshot, self._tracked)
        per_pod = {name: q for name, q in zip(_KUEUE_COLUMNS[:3], shape.per_pod.as_tuple()[:3]) if q > 0}
        if shape.kind == "training":
            sliced: dict[str, Any] = {"slice_level": shape.slices[0].level, "slice_size": shape.slices[0].size} if shape.slices else {}
            result = kueue_place(view.leaves, shape.pods, per_pod, mode="required" if self.required else "preferred",
                                 level=self._level(snapshot, shape), topology_name=view.topology_name, **sliced)
        else:
            result = kueue_place(view.leaves, shape.pods, per_pod, mode="unconstrained", topology_name=view.topology_name)
        if not result.fits:
            return Attempt("nofit", message=result.reason)
        nodes = view.leaf_node[result.leaf_indices]
        return Attempt("admit", nodes, np.asarray(result.leaf_counts, dtype=np.int64), message=f"fit at {result.fit_level}")


@dataclass
class AtollPolicy:
    """One Atoll profile of the profiles document. ``simulate`` runs it as deployed
    (``_deployed.DeployedAtoll``: the controller's decision and ledger on the simulated cluster),
    so there is no second implementation of Atoll's admission here."""

    name: str
    profile_name: str
    profile: Profile
    classes: dict[str, WorkloadClass] = field(default_factory=dict)
    admission_check: bool = True
    doc: ProfilesDocument | None = None
    """The whole profiles document (flavors, classes, queues) the controller would be given."""

    def document(self) -> ProfilesDocument:
        if self.doc is not None:
            return self.doc
        return ProfilesDocument.model_validate({"defaultProfile": self.profile_name, "profiles": {self.profile_name: self.profile},
                                                "classes": self.classes})


def fits_one_domain(snapshot: Snapshot, shape: JobShape, level: str) -> bool:
    """Whether the job (in its slices, if any) fits one domain of ``level`` of the empty, healthy
    flavor (memoized by the finder)."""
    req = PlacementRequest((PodSetRequest(PODSET, shape.pods, shape.per_pod, required_level=level, slices=shape.slices),))
    return never_fits(snapshot, req) is None


def fits_one_island(snapshot: Snapshot, shape: JobShape, island_level: str) -> bool:
    """Whether the job fits one island of the empty, healthy flavor."""
    return fits_one_domain(snapshot, shape, island_level)


def make_policies(names: Sequence[str], doc: ProfilesDocument, *, seed: int, island_level: str | None = None) -> list[Policy]:
    """Policy objects for ``names``; ``atoll-<profile>`` names any profile of ``doc``."""
    out: list[Policy] = []
    seen: set[str] = set()
    for raw in names:
        name = raw.strip()
        if not name or name in seen:
            continue
        seen.add(name)
        if name == "count-only":
            out.append(CountOnlyPolicy())
        elif name == "random":
            out.append(RandomPolicy(seed))
        elif name in ("kueue-bestfit", "kueue-required"):
            out.append(KueueBestFitPolicy(island_level, required=name == "kueue-required"))
        elif name.startswith(ATOLL_PREFIX) and name[len(ATOLL_PREFIX):] in doc.profiles:
            pname = name[len(ATOLL_PREFIX):]
            # no attempt(): simulate() runs an Atoll policy as deployed (the controller's decision), not through the protocol
            out.append(AtollPolicy(name, pname, doc.profiles[pname], dict(doc.classes), doc=doc))  # type: ignore[arg-type]
        else:
            known = list(BASELINES) + [ATOLL_PREFIX + p for p in sorted(doc.profiles)]
            raise PolicyError(f"--policies: unknown policy {name!r}; choose from {', '.join(known)}")
    if not out:
        raise PolicyError("--policies: no policy given")
    return out

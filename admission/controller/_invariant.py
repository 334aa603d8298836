"""What admitted Workloads still owe, and the check that it can all still be honoured.

Under ``domain`` enforcement a PodSet's pods may bind on any node its written nodeSelector
allows; the planned nodes are only a preference. So the promise Atoll makes at admission is
not "these nodes are yours" but "every pod you still owe has room somewhere in your domain".
That promise holds while a *witness* exists: an assignment of every owed pod (whole pods,
per-pod shape) to a node of its domain such that, on every node, the bound pods plus the
witness pods fit the node's allocatable.

``place_owed`` builds that witness (planned nodes first, then the rest of the domain in path
order); the ledger subtracts it from a snapshot before a decision, and ``check_invariant``
verifies it from the outside (the simulator and fault-injection runs call it after every event).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from topology import ResourceVector

__all__ = ["Claim", "ClaimSet", "Demand", "OwedPods", "Violation", "check_invariant", "exposed_claims", "place_owed", "pod_shape", "whole_pods"]

IntArray = npt.NDArray[np.int64]


def pod_shape(per_pod: ResourceVector) -> IntArray:
    """One pod's footprint as the finder counts it: its requests plus one pod slot."""
    return np.array([per_pod.gpu, per_pod.cpu_milli, per_pod.memory_mib, 1], dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Demand:
    """Owed pods of one PodSet in node-index terms: ``planned`` (node, pods) is tried first,
    then ``domain`` (node indices, path order)."""

    pods: int
    shape: IntArray
    planned: tuple[tuple[int, int], ...]
    domain: IntArray


def whole_pods(free_rows: IntArray, shape: IntArray) -> IntArray:
    """Whole pods of ``shape`` that fit on each row (min over the resources it requests)."""
    need = shape > 0
    return np.asarray(np.min(free_rows[:, need] // shape[need], axis=1), dtype=np.int64)


def place_owed(free: IntArray, demands: Sequence[Demand]) -> tuple[list[list[tuple[int, int]]], list[int], IntArray]:
    """A witness for ``demands`` on ``free`` (rows = nodes): per demand its (node, pods), the pods
    that found no room, and the resources the witness uses per node.

    Deterministic: first every demand takes its planned nodes (where they still fit), then the
    remaining pods go first-fit in path order over the domain, demands with the smaller domain
    first (they have fewer alternatives). Greedy, so a shortfall may be reported where a cleverer
    assignment exists; callers treat a shortfall conservatively (the domain counts as full)."""
    placed: list[list[tuple[int, int]]] = [[] for _ in demands]
    missing = [d.pods for d in demands]
    rows: dict[int, list[int]] = {}  # planned nodes in plain ints: a few per demand, cheaper than array rows
    for j, d in enumerate(demands):
        if not d.planned:
            continue
        need = [(r, int(q)) for r, q in enumerate(d.shape.tolist()) if q > 0]
        for node, want in d.planned:
            if missing[j] == 0:
                break
            row = rows.get(node)
            if row is None:
                row = rows[node] = [int(v) for v in free[node].tolist()]
            take = min(want, missing[j], min(row[r] // q for r, q in need))
            if take > 0:
                for r, q in need:
                    row[r] -= q * take
                placed[j].append((node, take))
                missing[j] -= take
    left = free.copy()
    if rows:
        touched = np.fromiter(rows, dtype=np.int64, count=len(rows))
        left[touched] = np.array(list(rows.values()), dtype=np.int64)
    for j in sorted(range(len(demands)), key=lambda k: (demands[k].domain.size, k)):
        d = demands[j]
        if missing[j] == 0 or d.domain.size == 0:
            continue
        caps = whole_pods(left[d.domain], d.shape)
        for pos in np.flatnonzero(caps > 0):
            node = int(d.domain[pos])
            take = min(int(caps[pos]), missing[j])
            left[node] -= d.shape * take
            placed[j].append((node, take))
            missing[j] -= take
            if missing[j] == 0:
                break
    return placed, missing, free - left


# ----------------------------------------------------------------------------- robustness


@dataclass(frozen=True, slots=True)
class Claim:
    """Pods owed (or about to be) on a nodeSelector domain: how many, GPUs each, the domain as
    a boolean mask over the snapshot's nodes, and who owes them."""

    workload: str
    podset: str
    pods: int
    gpu: int
    mask: npt.NDArray[np.bool_]


class ClaimSet:
    """Claims as arrays, for ``exposed_claims`` at the scale of a busy fabric.

    Most owed domains repeat (every Workload placed in one clique shares its mask) or are one
    node (a one-node Workload's hostname selector), so a claim names its domain instead of
    carrying it: ``node[i]`` ≥ 0 for a one-node domain, else ``dom[i]``, a row of ``masks``
    (distinct domains only). The arithmetic over claims then costs a gather, not a mask each.
    A set extended with new domains keeps its rows in blocks (the owed ones, then the new ones)
    and joins them only when the whole matrix is read: a decision reads a few columns."""

    __slots__ = ("who", "pods", "gpu", "node", "dom", "_masks", "_blocks", "_mask_rows", "_sizes")

    def __init__(self, who: Sequence[tuple[str, str]], pods: IntArray, gpu: IntArray, node: IntArray, dom: IntArray,
                 masks: npt.NDArray[np.bool_] | Sequence[npt.NDArray[np.bool_]], *, mask_rows: Mapping[bytes, int] | None = None,
                 sizes: IntArray | None = None) -> None:
        self.who = tuple(who)
        self.pods, self.gpu, self.node, self.dom = pods, gpu, node, dom
        blocks = (masks,) if isinstance(masks, np.ndarray) else tuple(masks)
        self._blocks: tuple[npt.NDArray[np.bool_], ...] = blocks
        self._masks: npt.NDArray[np.bool_] | None = blocks[0] if len(blocks) == 1 else None
        self._mask_rows = mask_rows
        """Mask bytes → row, when the caller keeps it (else built on the first ``extend``)."""
        self._sizes: IntArray | None = sizes
        """Nodes in each mask row, when the caller keeps them (else counted on first use)."""

    @property
    def masks(self) -> npt.NDArray[np.bool_]:
        """Every distinct domain as a row (a boolean mask over the nodes)."""
        if self._masks is None:
            self._masks = np.concatenate(self._blocks)
        return self._masks

    @property
    def num_rows(self) -> int:
        return sum(int(b.shape[0]) for b in self._blocks)

    def mask_row(self, row: int) -> npt.NDArray[np.bool_]:
        """One distinct domain's mask."""
        for b in self._blocks:
            if row < b.shape[0]:
                out: npt.NDArray[np.bool_] = b[row]
                return out
            row -= int(b.shape[0])
        raise IndexError(row)

    def mask_columns(self, nodes: IntArray) -> npt.NDArray[np.bool_]:
        """Every distinct domain restricted to ``nodes`` (rows × nodes)."""
        if self._masks is not None:
            return self._masks[:, nodes]
        return np.concatenate([b[:, nodes] for b in self._blocks])

    @property
    def sizes(self) -> IntArray:
        """Nodes in each mask row."""
        if self._sizes is None:
            self._sizes = self.masks.sum(axis=1)
        return self._sizes

    @classmethod
    def of(cls, claims: Sequence[Claim], num_nodes: int | None = None) -> ClaimSet:
        """From plain claims (their masks interned)."""
        n = num_nodes if num_nodes is not None else (claims[0].mask.size if claims else 0)
        return cls.empty(n).extend(claims)

    @classmethod
    def empty(cls, num_nodes: int) -> ClaimSet:
        """No claims; mask row 0 is the empty domain (every set has it, so no row lookup can miss)."""
        z = np.zeros(0, dtype=np.int64)
        return cls((), z, z, z, z, np.zeros((1, num_nodes), dtype=bool))

    def __len__(self) -> int:
        return len(self.who)

    def any_live(self) -> bool:
        """Does any claim still owe pods with GPUs? (A kept set has inert slots: no pods, no domain.)"""
        return bool(((self.pods > 0) & (self.gpu > 0)).any())

    @property
    def num_nodes(self) -> int:
        return int(self._blocks[0].shape[1])

    def mask(self, i: int) -> npt.NDArray[np.bool_]:
        """Claim ``i``'s domain as a boolean mask over the nodes."""
        if self.node[i] >= 0:
            out = np.zeros(self.num_nodes, dtype=bool)
            out[self.node[i]] = True
            return out
        return np.asarray(self.mask_row(int(self.dom[i])))

    def extend(self, claims: Sequence[Claim]) -> ClaimSet:
        """A new set: these claims after the present ones (which keep their indices)."""
        if not claims:
            return self
        known = self._rows()
        rows: dict[bytes, int] = {}
        base = self.num_rows
        fresh: list[npt.NDArray[np.bool_]] = []
        node, dom = [], []
        for c in claims:
            hits = np.flatnonzero(c.mask)
            if hits.size == 1:
                node.append(int(hits[0]))
                dom.append(-1)
                continue
            key = c.mask.tobytes()
            row = known.get(key, rows.get(key))
            if row is None:
                row = rows[key] = base + len(fresh)
                fresh.append(np.asarray(c.mask, dtype=bool))
            node.append(-1)
            dom.append(row)
        added = np.stack(fresh) if fresh else None
        out = ClaimSet(self.who + tuple((c.workload, c.podset) for c in claims),
                       np.concatenate([self.pods, np.array([c.pods for c in claims], dtype=np.int64)]),
                       np.concatenate([self.gpu, np.array([c.gpu for c in claims], dtype=np.int64)]),
                       np.concatenate([self.node, np.array(node, dtype=np.int64)]),
                       np.concatenate([self.dom, np.array(dom, dtype=np.int64)]),
                       self._blocks + (added,) if added is not None else self._blocks)
        if self._masks is not None and added is None:
            out._masks = self._masks
        out._mask_rows = {**known, **rows} if rows else known
        if self._sizes is not None:
            out._sizes = np.concatenate([self._sizes, added.sum(axis=1)]) if added is not None else self._sizes
        return out

    def _rows(self) -> Mapping[bytes, int]:
        if self._mask_rows is None:
            self._mask_rows = {m.tobytes(): i for i, m in enumerate(self.masks)}
        return self._mask_rows


def exposed_claims(free_gpu: IntArray, claims: ClaimSet | Sequence[Claim], near: npt.NDArray[np.bool_] | None = None, *,
                   may_free: IntArray | None = None) -> list[int]:
    """Claims the kube-scheduler could starve by binding *other* claims' pods inside their domain.

    A witness shows the owed pods fit *now*; it does not survive the scheduler's freedom: a pod
    whose nodeSelector domain reaches into a narrower domain may bind there and take the room the
    narrower claim needs (a one-node Workload inside a clique where a clique-wide Workload still
    owes pods). For claim ``d`` (domain D, ``g`` GPUs a pod), counted in whole pods of size ``g``
    on ``free`` (free GPUs after bound pods):

        slots(D) = Σ_{n ∈ D} ⌊free_n / g⌋
        need(D)  = pods_d
                 + the slots one-node claims on D's nodes take (exactly: they cannot move)
                 + Σ_{wider-than-one-node e ⊆ D} pods_e·⌈g_e / g⌉
                 + Σ_{e ⊄ D, e ∩ D ≠ ∅} min(pods_e, pods of e that fit in D ∩ e)·⌈g_e / g⌉, at most slots(D ∩ e)

    and ``d`` is exposed when ``need(D) > slots(D)``. When no claim is exposed, no order of
    bindings the nodeSelectors allow starves a claim: a bound pod lowers both sides alike, or
    only the right side (a property test plays an adversarial scheduler against it).

    A bound pod that ends frees room on its node, and that room can let a wider claim's pod take
    a node a one-node claim still owes (free 2 of 4 GPUs: a 4-GPU pod cannot take it; free 4: it
    can), while nothing tests the claims again when a pod ends. ``may_free`` closes that: the
    GPUs each node would have free were every bound pod on it to end (its allocatable GPUs).
    The last term, what a wider claim could take from ``D``, is then counted on ``may_free``
    (both the pods of ``e`` that fit and the slots of ``D ∩ e``), while ``slots(D)`` stays on
    ``free``: room that frees later adds to ``slots(D)`` and no thief's reach grows with it, so
    no order of bindings and ends starves a claim that is not exposed (a second property test
    lets the adversary end bound pods). None: ``free_gpu`` (no bound pod ends). GPUs only: CPU
    and memory are not part of Atoll's promise. ``near``: test only the claims whose domain meets
    these nodes (all when None; claims elsewhere are unchanged by a new one); every claim still
    counts as a possible thief."""
    cs = claims if isinstance(claims, ClaimSet) else ClaimSet.of(claims, free_gpu.size)
    if not len(cs):
        return []
    pods, gpu, node, dom = cs.pods, cs.gpu, cs.node, cs.dom
    live = (pods > 0) & (gpu > 0)
    single = node >= 0
    multi = ~single
    # GPUs one-node claims pin, per node: kept as sorted nodes and sums (a few claims, read at a
    # few nodes) rather than an array over the whole fabric
    pinning = single & live
    order = np.argsort(node[pinning], kind="stable")
    pin_nodes = node[pinning][order]
    pin_gpu = np.concatenate(([0], np.cumsum((pods * gpu)[pinning][order])))  # running sums along the sorted nodes
    dom_m = np.where(multi, dom, 0)
    sizes = np.where(multi, cs.sizes[dom_m], 1)
    if near is None:
        focus = np.arange(len(cs))
    else:
        meets = np.where(single, near[np.maximum(node, 0)], np.asarray(cs.mask_columns(np.flatnonzero(near)).any(axis=1))[dom_m])
        focus = np.flatnonzero(meets)
    out: list[int] = []
    for d in focus.tolist():
        g = int(gpu[d])
        if not live[d]:
            continue
        here_idx = np.array([node[d]], dtype=np.int64) if single[d] else np.flatnonzero(cs.mask_row(int(dom[d])))
        if here_idx.size == 0:
            continue
        free = free_gpu[here_idx]
        slots = free // g
        others = _pinned(pin_nodes, pin_gpu, here_idx)
        if single[d]:
            others[0] -= pods[d] * g
        need = int(pods[d]) + int((slots - np.maximum(free - others, 0) // g).sum())
        cols_u = cs.mask_columns(here_idx)                           # every distinct domain restricted to D
        inside = np.where(multi, cols_u.sum(axis=1)[dom_m], 0)
        wide = live & multi & (inside > 0)
        wide[d] = False
        if wide.any():
            per_pod = -(-gpu // g)                                   # ⌈g_e / g⌉ slots of d a pod of e can cost
            reach = pods * per_pod
            thief = wide & (sizes > inside)
            if thief.any():
                cols_i = cols_u.astype(np.int64)
                reachable = free if may_free is None else np.maximum(may_free[here_idx], free)
                fit = np.zeros(len(cs), dtype=np.int64)
                for size in sorted({int(x) for x in gpu[thief]}):
                    rows = thief & (gpu == size)
                    fit[rows] = (cols_i @ (reachable // size))[dom[rows]]
                room = (cols_i @ (reachable // g))[dom[thief]]
                reach[thief] = np.minimum(np.minimum(pods[thief], fit[thief]) * per_pod[thief], room)
            need += int(reach[wide].sum())
        if need > int(slots.sum()):
            out.append(int(d))
    return out


def _pinned(nodes: IntArray, running: IntArray, at: IntArray) -> IntArray:
    """GPUs pinned on each node of ``at``: ``nodes`` sorted (one per claim), ``running`` the
    running sum of their GPUs (one longer)."""
    out: IntArray = running[np.searchsorted(nodes, at, side="right")] - running[np.searchsorted(nodes, at, side="left")]
    return out


# ----------------------------------------------------------------------------- the invariant


@dataclass(frozen=True, slots=True)
class OwedPods:
    """Pods one admitted PodSet still owes: how many, their shape, the nodes its nodeSelector
    allows (``domain``), the planned nodes (a preference), and where the ledger counts them
    (``witness``, node → pods; empty when the caller has none to check)."""

    workload: str
    podset: str
    pods: int
    per_pod: ResourceVector
    domain: tuple[str, ...]
    planned: tuple[tuple[str, int], ...] = ()
    witness: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Violation:
    """``overbooked``: bound pods plus witness pods exceed a node; ``outside-domain``: the witness
    puts pods where the PodSet's nodeSelector does not allow them; ``uncounted``: the witness
    holds fewer pods than are owed; ``unplaceable``: no witness places every owed pod."""

    kind: str
    workloads: tuple[str, ...]
    nodes: tuple[str, ...]
    message: str


def check_invariant(allocatable: Mapping[str, ResourceVector], bound: Mapping[str, ResourceVector],
                    owed: Sequence[OwedPods], *, check_witness: bool = True) -> list[Violation]:
    """Every node: bound + witness-owed ≤ allocatable; every owed pod has room in its domain.

    ``bound`` is the usage of bound pods per node (pod slots included). With ``check_witness``
    the ledger's own witness (``OwedPods.witness``) is verified as given; independently of it, a
    witness is built from scratch and any pod it cannot place is reported."""
    names = sorted(allocatable)
    index = {n: i for i, n in enumerate(names)}
    alloc = np.array([allocatable[n].as_tuple() for n in names], dtype=np.int64).reshape(len(names), 4)
    used = np.array([bound.get(n, ResourceVector()).as_tuple() for n in names], dtype=np.int64).reshape(len(names), 4)
    out: list[Violation] = []
    for n in sorted(set(bound) - set(index)):
        if any(bound[n].as_tuple()):
            out.append(Violation("overbooked", (), (n,), f"node {n}: bound pods on a node with no allocatable"))

    if check_witness:
        load = used.copy()
        on_node: dict[int, list[str]] = {}
        for o in owed:
            shape = pod_shape(o.per_pod)
            allowed = set(o.domain)
            outside = sorted(n for n, _ in o.witness if n not in allowed or n not in index)
            if outside:
                out.append(Violation("outside-domain", (o.workload,), tuple(outside),
                                     f"{o.workload} podSets[{o.podset}]: witness on {', '.join(outside)}, outside its nodeSelector domain"))
            counted = sum(k for _, k in o.witness)
            if counted < o.pods:
                out.append(Violation("uncounted", (o.workload,), (),
                                     f"{o.workload} podSets[{o.podset}]: {o.pods} pods owed, the witness counts {counted}"))
            for n, k in o.witness:
                if n in index:
                    load[index[n]] += shape * k
                    on_node.setdefault(index[n], []).append(o.workload)
        for i in np.flatnonzero((load > alloc).any(axis=1)):
            who = tuple(sorted(set(on_node.get(int(i), []))))
            out.append(Violation("overbooked", who, (names[int(i)],),
                                 f"node {names[int(i)]}: bound {tuple(used[i])} + owed by {', '.join(who) or 'nobody'} "
                                 f"{tuple(load[i] - used[i])} > allocatable {tuple(alloc[i])} (gpu, cpu m, memory MiB, pods)"))

    free = np.maximum(alloc - used, 0)
    demands = []
    for o in owed:
        dom = np.array(sorted(index[n] for n in set(o.domain) if n in index), dtype=np.int64)
        planned = tuple((index[n], k) for n, k in o.planned if n in index and n in set(o.domain))
        demands.append(Demand(o.pods, pod_shape(o.per_pod), planned, dom))
    _, missing, _ = place_owed(free, demands)
    short = [(o, m) for o, m in zip(owed, missing) if m > 0]
    if short:
        nodes = tuple(sorted({n for o, _ in short for n in o.domain}))
        crowded = set(nodes)  # everyone owing pods there shares the blame: the greedy order picked who came up short
        who = tuple(sorted({o.workload for o in owed if crowded.intersection(o.domain)}))
        detail = "; ".join(f"{o.workload} podSets[{o.podset}] {m} of {o.pods} pods" for o, m in short)
        out.append(Violation("unplaceable", who, nodes, f"owed pods with no room in their domain: {detail}"))
    return out

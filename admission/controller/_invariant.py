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

__all__ = ["Claim", "Demand", "OwedPods", "Violation", "check_invariant", "exposed_claims", "place_owed", "pod_shape"]

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


def _fit(free_rows: IntArray, shape: IntArray) -> IntArray:
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
        caps = _fit(left[d.domain], d.shape)
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


def exposed_claims(free_gpu: IntArray, claims: Sequence[Claim], near: npt.NDArray[np.bool_] | None = None) -> list[int]:
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
    only the right side (a property test plays an adversarial scheduler against it). GPUs only:
    CPU and memory are not part of Atoll's promise. ``near``: test only the claims whose domain
    meets these nodes (all when None; claims elsewhere are unchanged by a new one); every claim
    still counts as a possible thief."""
    if not claims:
        return []
    masks = np.stack([c.mask for c in claims])
    pods = np.array([c.pods for c in claims], dtype=np.int64)
    gpu = np.array([c.gpu for c in claims], dtype=np.int64)
    live = (pods > 0) & (gpu > 0)
    sizes = masks.sum(axis=1)
    single = live & (sizes == 1)
    pinned = np.bincount(np.argmax(masks[single], axis=1), weights=(pods * gpu)[single],
                         minlength=free_gpu.size).astype(np.int64) if single.any() else np.zeros(free_gpu.size, dtype=np.int64)
    sizes_g = sorted({int(x) for x in gpu[live & ~single]})
    out: list[int] = []
    focus = range(len(claims)) if near is None else np.flatnonzero(masks[:, near].any(axis=1)).tolist()
    for d in focus:
        g = int(gpu[d])
        if not live[d] or not masks[d].any():
            continue
        here = masks[d]
        free = free_gpu[here]
        slots = free // g
        others = pinned[here] - (np.where(np.flatnonzero(here) == np.argmax(here), pods[d] * g, 0) if single[d] else 0)
        need = int(pods[d]) + int((slots - np.maximum(free - others, 0) // g).sum())
        cols = masks[:, here]                                    # every claim restricted to D
        inside = cols.sum(axis=1)
        wide = live & ~single & (inside > 0)
        wide[d] = False
        if wide.any():
            per_pod = -(-gpu // g)                               # ⌈g_e / g⌉ slots of d a pod of e can cost
            reach = pods * per_pod
            thief = wide & (sizes > inside)
            if thief.any():
                cols_i = cols.astype(np.int64)
                fit = np.zeros(len(claims), dtype=np.int64)
                for size in sizes_g:
                    rows = thief & (gpu == size)
                    if rows.any():
                        fit[rows] = cols_i[rows] @ (free // size)
                room = cols_i[thief] @ slots
                reach[thief] = np.minimum(np.minimum(pods[thief], fit[thief]) * per_pod[thief], room)
            need += int(reach[wide].sum())
        if need > int(slots.sum()):
            out.append(int(d))
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

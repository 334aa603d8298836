"""The reservation ledger: what admitted Workloads still owe counts as used.

Between Atoll's Ready and the scheduler binding the pods, the chosen GPUs look free in the
node/pod view; without the ledger a second Workload would be given the same GPUs. The ledger
is derived from API state only, so a restarted controller rebuilds it from its first list:

- a Workload owes pods while its Atoll check entry is ``Ready``, it holds quota, and it is
  neither finished, evicted nor deactivated;
- per PodSet it owes the admitted count (``status.admission.podSetAssignments[].count``, else
  the PodSet's count) minus its pods (carrying its ``atoll.dev/decision-id``) that are bound and
  not finished, minus those that succeeded, never below 0; each owed pod has the PodSet's
  per-pod requests. A pod that failed or was deleted frees its node, and its workload's
  controller creates a replacement (Kubernetes' Job controller does, while the Job has retries
  left; that is its behaviour, not Atoll's), so its slot is owed again until the replacement
  binds. A pod that succeeded has done its part and is not replaced, so it stays counted as
  done, even once it is deleted, for as long as the Workload holds its reservation (a restarted
  controller counts only the succeeded pods still in the API: it owes more, never less). A Job
  with more completions than parallelism starts further pods as others succeed; those are not
  owed;
- an owed pod may bind on any node its nodeSelector allows (``podSetUpdates[].nodeSelector``
  plus the pod template's own): under ``domain`` enforcement the kube-scheduler picks, so the
  planned nodes (``atoll.dev/planned-nodes``) are only a preference. A running or succeeded pod
  takes its own node's planned slot; so the replacement of a failed pod prefers that pod's
  planned node, which the failure freed.

``apply`` counts the owed pods as a witness assignment on the snapshot's current free capacity
(``_invariant.place_owed``): planned nodes first, then the rest of the domain. Pods with no room
(the scheduler bound another Workload's pods where these were planned, and the domain is short)
make their whole domain count as full, so nothing new is admitted there until it clears.

Why this module is longer than the others: what a Workload owes (read from its status and its
pods) and where it may still bind on a snapshot (its domain by nodeSelector and tolerations)
share the reservations kept here; the witness itself is kept up to date in ``_book`` and placed
by ``_invariant``.
"""

from __future__ import annotations

import base64
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import structlog

from admission import vocabulary
from admission.controller._book import Book, Entry, Witness
from admission.controller._invariant import ClaimSet, Demand, OwedPods, pod_shape
from admission.controller._workloads import WorkloadError, WorkloadView, check_entry, holds_quota, parse_workload
from admission.kube import Obj
from topology import HOSTNAME_LABEL, ResourceVector, Snapshot, Toleration

__all__ = ["ANN_DECISION_ID", "ANN_ENFORCEMENT", "ANN_PLANNED_NODES", "Ledger", "Reservation", "Shortfall", "Witness", "decode_planned", "encode_planned",
           "holds_reservation"]

ANN_DECISION_ID = vocabulary.DECISION_ID
ANN_PLANNED_NODES = vocabulary.PLANNED_NODES
ANN_ENFORCEMENT = vocabulary.ENFORCEMENT
"""Pod annotation, and label, ``exact`` when the flavor's enforcement pins each pod to a planned
node (the webhook does it at pod creation; the label is its objectSelector); absent under
``domain`` enforcement."""
_ZIP = "zlib+b64:"
_log = structlog.get_logger("atoll.ledger")


def encode_planned(nodes: Sequence[tuple[str, int]], budget: int) -> str | None:
    """``node=pods,…`` in path order; compressed (``zlib+b64:``) when longer than ``budget``
    characters; None when even that does not fit."""
    plain = ",".join(f"{n}={k}" for n, k in nodes)
    if len(plain) <= budget:
        return plain
    packed = _ZIP + base64.b64encode(zlib.compress(plain.encode(), 9)).decode()
    return packed if len(packed) <= budget else None


def decode_planned(text: str) -> dict[str, int]:
    """The inverse of ``encode_planned``; ValueError names what is wrong."""
    if text.startswith(_ZIP):
        try:
            text = zlib.decompress(base64.b64decode(text[len(_ZIP):])).decode()
        except (ValueError, zlib.error) as exc:
            raise ValueError(f"{ANN_PLANNED_NODES}: compressed value unreadable: {exc}") from None
    out: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        node, sep, count = part.partition("=")
        if not sep or not node or not (count.isascii() and count.isdigit()) or len(count) > 7:  # ASCII digits, < 10^7 pods
            raise ValueError(f"{ANN_PLANNED_NODES}: {part!r} is not node=pods")
        out[node] = out.get(node, 0) + int(count)
    return out


@dataclass(frozen=True, slots=True)
class Reservation:
    """One admitted PodSet as the ledger reads it from its Workload."""

    uid: str
    workload: str
    decision_id: str
    flavor: str
    podset: str
    planned: tuple[tuple[str, int], ...]
    per_pod: ResourceVector
    count: int = 0
    """Pods admitted (``podSetAssignments[].count``); 0 means the planned total."""
    selector: tuple[tuple[str, str], ...] = ()
    """The nodeSelector its pods carry (Atoll's podSetUpdate plus the template's), sorted."""
    tolerations: tuple[Toleration, ...] = ()
    exact: bool = False
    """Pinned to the planned nodes at pod creation (``exact`` enforcement): the scheduler has no
    choice, so the owed pods claim those nodes only."""

    @property
    def pods(self) -> int:
        return self.count or sum(k for _, k in self.planned)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Owed pods of one PodSet that found no room in their domain on the last ``apply``."""

    workload: str
    podset: str
    flavor: str
    missing: int
    owed: int
    domain_nodes: int


def holds_reservation(obj: Obj, check_names: Iterable[str]) -> bool:
    """Does this Workload's state say its Atoll placement is still to be honoured?"""
    entry = check_entry(obj, check_names)
    if entry is None or entry.get("state") != "Ready":
        return False
    return holds_quota(obj)


Bound = Callable[[str], Mapping[str, Counter[str]]]
"""decision id → PodSet → node → pods bound and running (not finished)."""

Succeeded = Callable[[str], Mapping[str, Mapping[str, str]]]
"""decision id → PodSet → pod uid → node, for its pods that succeeded."""

NodeLabels = Callable[[str], Mapping[str, str] | None]
"""node name → its labels (None: unknown node)."""

_Key = tuple[str, str]  # (Workload uid, PodSet)


class Ledger:
    """Owed pods by Workload and PodSet, kept up to date as Workloads and pods change; ``apply``
    turns them into a witness assignment on one flavor's snapshot."""

    def __init__(self, gpu_resource: str | tuple[str, ...] = "nvidia.com/gpu", bound: Bound | None = None,
                 node_labels: NodeLabels | None = None, succeeded: Succeeded | None = None) -> None:
        self.gpu_resource = gpu_resource
        self.bound: Bound = bound or (lambda _decision: {})
        self.succeeded: Succeeded = succeeded or (lambda _decision: {})
        self.node_labels = node_labels
        """Reads selector keys that are not topology levels; without it such keys are not checked."""
        self._by_uid: dict[str, tuple[Reservation, ...]] = {}
        self._by_decision: dict[str, set[str]] = {}
        self._by_flavor: dict[str, dict[_Key, Reservation]] = {}
        self._done: dict[tuple[str, str], dict[str, str]] = {}
        """(decision id, PodSet) → uid → node of its pods seen succeeded, kept while the Workload
        holds its reservation (a succeeded pod that is deleted is not replaced: still done)."""
        self._owed: dict[_Key, tuple[int, tuple[tuple[str, int], ...]]] = {}
        self._books: dict[str, Book] = {}
        """Per flavor, the owed pods resolved on its snapshot (``_book``): a decision costs the changes, not the backlog."""
        self.shortfalls: tuple[Shortfall, ...] = ()
        """Owed pods the last ``apply`` could not place (their domains were counted as full)."""
        self.shortfalls_by_flavor: dict[str, tuple[Shortfall, ...]] = {}
        """The last count's shortfalls of each flavor (a decision over several flavors counts each)."""
        self.shortfall_applies = 0
        """How many ``apply`` calls found owed pods with no room: double booking the scheduler made."""
        self._reported: dict[str, frozenset[tuple[str, str, int]]] = {}
        self.booked_as: Callable[[Obj], Obj] = lambda obj: obj
        """The state a Workload is booked as (the controller's decisions made before quota book
        it as reserved on the flavor assumed, ``_before_quota``)."""

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_uid.values())

    def observe(self, obj: Obj, check_names: Iterable[str], *, view: WorkloadView | None = None) -> None:
        """Recompute one Workload's reservations from its current state (``view``: the Workload
        already read, as ``Decider.evaluate`` takes it)."""
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        names = set(check_names)
        if view is None:
            obj = self.booked_as(obj)
        if not holds_reservation(obj, names):
            self.forget(uid)
            return
        entry = check_entry(obj, names) or {}
        try:
            if view is None:
                view = parse_workload(obj, gpu_resource=self.gpu_resource)
        except WorkloadError as exc:
            _log.warning("admitted workload unreadable; its reservation is not counted", workload=_key(obj), error=str(exc))
            self.forget(uid)
            return
        specs = {p.name: p for p in view.podsets}
        out = []
        for update in entry.get("podSetUpdates") or []:
            ann = update.get("annotations") or {}
            name = str(update.get("name"))
            flavor = view.flavors.get(name) or view.other_flavors.get(name)  # a PodSet with no GPUs Atoll placed counts too
            spec = specs.get(name)
            if (ANN_PLANNED_NODES not in ann and ANN_DECISION_ID not in ann) or flavor is None or spec is None:
                continue
            planned: dict[str, int] = {}
            if ANN_PLANNED_NODES in ann:
                try:
                    planned = decode_planned(str(ann[ANN_PLANNED_NODES]))
                except ValueError as exc:  # the pods are still owed; only the preference is lost
                    _log.warning("planned nodes unreadable; the PodSet's pods are owed anywhere in its domain",
                                 workload=_key(obj), podset=name, error=str(exc))
            template = view.templates.get(name)
            selector = dict(template.node_selector) if template is not None else {}
            selector.update({str(k): str(v) for k, v in (update.get("nodeSelector") or {}).items()})
            out.append(Reservation(uid, view.key, str(ann.get(ANN_DECISION_ID, "")), flavor, name, tuple(planned.items()),
                                   spec.per_pod, spec.count, tuple(sorted(selector.items())), tuple(spec.tolerations),
                                   ann.get(ANN_ENFORCEMENT) == "exact" and bool(planned)))
        if tuple(out) == self._by_uid.get(uid):
            return
        self.forget(uid)
        if out:
            self._by_uid[uid] = tuple(out)
            for r in out:
                self._by_decision.setdefault(r.decision_id, set()).add(uid)
                self._by_flavor.setdefault(r.flavor, {})[(r.uid, r.podset)] = r
                self._hold(r)

    def forget(self, uid: str) -> None:
        for r in self._by_uid.pop(uid, ()):
            self._owed.pop((r.uid, r.podset), None)
            self._book(r.flavor).gone([(r.uid, r.podset)])
            self._done.pop((r.decision_id, r.podset), None)
            flavor = self._by_flavor.get(r.flavor)
            if flavor is not None:
                flavor.pop((r.uid, r.podset), None)
                if not flavor:
                    del self._by_flavor[r.flavor]
            users = self._by_decision.get(r.decision_id)
            if users is not None:
                users.discard(uid)
                if not users:
                    del self._by_decision[r.decision_id]

    def pods_changed(self, decision_id: str) -> None:
        """Pods carrying this decision id were bound, succeeded, failed or deleted: re-count what it still owes."""
        for uid in list(self._by_decision.get(decision_id, ())):
            for r in self._by_uid.get(uid, ()):
                self._hold(r)

    def reservations(self, flavor: str | None = None) -> list[Reservation]:
        return [r for rs in self._by_uid.values() for r in rs if flavor is None or r.flavor == flavor]

    def owed_pods(self, r: Reservation) -> int:
        """Pods of this PodSet neither running on a node nor succeeded."""
        return self._owed.get((r.uid, r.podset), (0, ()))[0]

    @staticmethod
    def outstanding(r: Reservation, bound: Mapping[str, Counter[str]], done: Mapping[str, str] | None = None) -> list[tuple[str, int]]:
        """Planned pods neither running nor succeeded, per node (the witness's first choice). A pod
        running or succeeded on a planned node takes that node's slot; pods on other nodes (the
        scheduler may pick another node of the domain) are taken off the last planned nodes. A pod
        that failed or went is in neither, so its node's slot is planned again. ``done``: uid →
        node of the PodSet's succeeded pods."""
        now = Counter(bound.get(r.podset, Counter()))
        now.update((done or {}).values())
        accounted = sum(now.values())
        if accounted >= r.pods:
            return []
        left = [(n, k - min(k, now.get(n, 0))) for n, k in r.planned]
        extra = accounted - sum(min(k, now.get(n, 0)) for n, k in r.planned)
        out: list[tuple[str, int]] = []
        for n, k in reversed(left):
            take = min(k, max(extra, 0))
            extra -= take
            if k - take > 0:
                out.append((n, k - take))
        return list(reversed(out))

    def _hold(self, r: Reservation) -> None:
        bound = self.bound(r.decision_id) if r.decision_id else {}
        done = self._done_pods(r)
        planned = self.outstanding(r, bound, done)
        owed = max(r.pods - sum(bound.get(r.podset, Counter()).values()) - len(done), 0)
        key = (r.uid, r.podset)
        if self._owed.get(key) != (owed, tuple(planned)):
            self._owed[key] = (owed, tuple(planned))
            self._book(r.flavor).touch([key])

    def _done_pods(self, r: Reservation) -> Mapping[str, str]:
        """The PodSet's pods seen succeeded so far (uid → node): those the cache holds now, plus
        those seen before and deleted since."""
        if not r.decision_id:
            return {}
        now = self.succeeded(r.decision_id).get(r.podset)
        key = (r.decision_id, r.podset)
        if now:
            self._done.setdefault(key, {}).update(now)
        return self._done.get(key, {})

    def _book(self, flavor: str) -> Book:
        book = self._books.get(flavor)
        if book is None:
            book = self._books[flavor] = Book(self._resolve)
        return book

    def _resolve(self, key: _Key, snapshot: Snapshot) -> Entry | None:
        """One reservation's owed pods on the snapshot: its domain, its planned nodes there, its shape."""
        r = self._by_flavor.get(snapshot.flavor, {}).get(key)
        if r is None:
            return None
        owed, planned = self._owed.get(key, (0, ()))
        if owed <= 0:
            return None
        domain = self._domain(snapshot, r)
        idx = snapshot.node_index
        prefer: tuple[tuple[int, int], ...] = ()
        if planned and domain.size:  # the domain is ascending: membership by binary search
            nodes = np.array([idx.get(n, -1) for n, _ in planned], dtype=np.int64)
            at = np.minimum(np.searchsorted(domain, nodes), domain.size - 1)
            inside = (domain[at] == nodes).tolist()
            prefer = tuple((int(i), k) for (_, k), i, ok in zip(planned, nodes.tolist(), inside) if ok)
        return Entry(key, (r.workload, r.podset, r.uid), r, owed, Demand(owed, pod_shape(r.per_pod), prefer, domain),
                     r.per_pod.gpu, r.exact, sum(k for _, k in prefer))

    # ------------------------------------------------------------------ on a snapshot

    def witness(self, snapshot: Snapshot, *, exclude_uid: str | None = None) -> Witness:
        """Where the owed pods of the snapshot's flavor fit now (whole pods, inside their domains):
        ``place_owed``'s witness, kept up to date by the flavor's book."""
        return self._book(snapshot.flavor).witness(snapshot, exclude_uid)

    def warm(self, snapshot: Snapshot) -> Witness:
        """What the first decision on the snapshot's flavor would read first: the owed pods
        resolved on it (``witness``), and the index of its nodes by hostname that a one-node
        nodeSelector is resolved by (built once per node structure), so a controller builds
        both when everything is listed rather than in its first decisions."""
        _hostnames(snapshot, self.node_labels)
        return self.witness(snapshot)

    def apply(self, snapshot: Snapshot, *, exclude_uid: str | None = None, witness: Witness | None = None,
              report: bool = True) -> int:
        """Count every owed pod of the snapshot's flavor as used (in place: pass a fork): the
        witness's pods come off their nodes; a domain with pods that found no room counts as
        full. Returns the GPUs owed. ``witness``: one already built on this snapshot.
        ``report=False``: a reading for a gauge, not a decision, so the shortfalls found are
        neither logged nor counted."""
        w = witness or self.witness(snapshot, exclude_uid=exclude_uid)
        nodes, rows = w.used_rows()
        if nodes.size:
            snapshot.free[nodes] -= rows
        short: list[Shortfall] = []
        owed_short = 0
        for r, owed, d, m in w.short():
            assert isinstance(r, Reservation)
            snapshot.free[d.domain] = 0
            short.append(Shortfall(r.workload, r.podset, r.flavor, m, owed, int(d.domain.size)))
            owed_short += m * int(d.shape[0])
        if report:
            self._report(snapshot.flavor, tuple(short))
        return (int(rows[:, 0].sum()) if nodes.size else 0) + owed_short

    def claims(self, snapshot: Snapshot, *, exclude_uid: str | None = None) -> ClaimSet:
        """The snapshot flavor's owed pods with GPUs as claims on their domains, for
        ``exposed_claims`` (pinned pods under ``exact`` claim their planned nodes only)."""
        return self._book(snapshot.flavor).claims(snapshot, exclude_uid)

    def domain_mask(self, snapshot: Snapshot, selector: Iterable[tuple[str, str]], tolerations: Sequence[Toleration] = ()) -> npt.NDArray[np.bool_]:
        """Nodes of the snapshot a pod with this nodeSelector and these tolerations may bind on now
        (read-only; memoized per node structure and eligibility, since every decision asks again)."""
        sel, tol = tuple(sorted(selector)), tuple(tolerations)
        usable = snapshot.eligible_for(tol)
        stamp = snapshot.eligible_token if usable is snapshot.eligible else hash(usable.tobytes())
        key = ("ledger-mask", sel, tol)
        hit = snapshot.static_cache.get(key)  # cleared with the node structure and labels
        if isinstance(hit, tuple) and hit[0] == stamp:
            mask: npt.NDArray[np.bool_] = hit[1]
            return mask
        mask = np.zeros(snapshot.num_nodes, dtype=bool)
        mask[self._nodes(snapshot, sel, tol)] = True
        mask.flags.writeable = False
        snapshot.static_cache[key] = (stamp, mask)
        return mask

    def owed(self, snapshot: Snapshot) -> list[OwedPods]:
        """The owed pods of the snapshot's flavor with their domains and witness, by node name
        (what ``check_invariant`` reads)."""
        w = self.witness(snapshot)
        names = snapshot.node_names
        out = []
        for (r, owed), d, placed in zip(w.rows, w.demands, w.placed):
            assert isinstance(r, Reservation)
            out.append(OwedPods(r.workload, r.podset, owed, r.per_pod, tuple(names[i] for i in d.domain.tolist()),
                                tuple((names[i], k) for i, k in d.planned), tuple((names[i], k) for i, k in placed)))
        return out

    def _domain(self, snapshot: Snapshot, r: Reservation) -> npt.NDArray[np.int64]:
        """Snapshot nodes the PodSet's nodeSelector allows and its pods may use now, in path order."""
        return self._nodes(snapshot, r.selector, r.tolerations)

    def _nodes(self, snapshot: Snapshot, selector: tuple[tuple[str, str], ...], tolerations: Sequence[Toleration]) -> npt.NDArray[np.int64]:
        key = ("ledger-domain", selector)
        cached = snapshot.static_cache.get(key)
        if not isinstance(cached, np.ndarray):
            cached = _selector_nodes(snapshot, selector, self.node_labels)
            snapshot.static_cache[key] = cached
        usable = snapshot.eligible_for(tolerations)
        return np.asarray(cached[usable[cached] != 0], dtype=np.int64)

    def _report(self, flavor: str, short: tuple[Shortfall, ...]) -> None:
        self.shortfalls = short
        self.shortfalls_by_flavor[flavor] = short
        if not short and not self._reported.get(flavor):
            return  # nothing short now or at the last report (most decisions)
        if short:
            self.shortfall_applies += 1
        seen = frozenset((s.workload, s.podset, s.missing) for s in short)
        if self._reported.get(flavor, frozenset()) == seen:
            return
        self._reported[flavor] = seen
        for s in short:
            why = ("have no usable node left in their domain (its nodes are tainted, cordoned or gone)" if s.domain_nodes == 0
                   else "have no room left in their domain (the scheduler bound other pods there)")
            _log.warning(f"admitted pods {why}; the domain counts as full until they bind", workload=s.workload,
                         podset=s.podset, flavor=s.flavor, missing_pods=s.missing, owed_pods=s.owed, domain_nodes=s.domain_nodes)


def _selector_nodes(snapshot: Snapshot, selector: tuple[tuple[str, str], ...], node_labels: NodeLabels | None) -> npt.NDArray[np.int64]:
    """Indices of the snapshot nodes a nodeSelector matches: topology levels are read from the
    snapshot's paths, the hostname from the node name, other keys from ``node_labels`` (when
    given; the flavor's own ``nodeLabels`` hold on every node of its snapshot)."""
    mask = np.ones(snapshot.num_nodes, dtype=bool)
    levels = snapshot.level_labels
    other = []
    for label, value in selector:
        if label in levels[:-1]:
            lv = levels.index(label)
            hits = [d for d, path in enumerate(snapshot.domain_values[lv]) if path[-1] == value]
            mask &= np.isin(snapshot.node_dom[lv], hits)
        elif label == HOSTNAME_LABEL:
            only = np.zeros_like(mask)
            only[_hostnames(snapshot, node_labels).get(value, [])] = True
            mask &= only
        else:
            other.append((label, value))
    if other and node_labels is not None:
        for i in np.flatnonzero(mask).tolist():
            labels = node_labels(snapshot.node_names[i])
            if labels is None or any(labels.get(k) != v for k, v in other):
                mask[i] = False
    return np.flatnonzero(mask).astype(np.int64)


def _hostnames(snapshot: Snapshot, node_labels: NodeLabels | None) -> dict[str, list[int]]:
    """Hostname label → snapshot nodes carrying it (the node's name where its labels are not
    known), built once per node structure: a one-node selector is a lookup, not a scan."""
    key = ("ledger-hostnames", node_labels is None)
    cached = snapshot.static_cache.get(key)
    if isinstance(cached, dict):
        return cached
    out: dict[str, list[int]] = {}
    for i, name in enumerate(snapshot.node_names):
        labels = node_labels(name) if node_labels is not None else None
        host = name if labels is None and node_labels is None else (labels or {}).get(HOSTNAME_LABEL)
        if host is not None:
            out.setdefault(host, []).append(i)
    snapshot.static_cache[key] = out
    return out


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"

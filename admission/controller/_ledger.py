"""The reservation ledger: admitted placements whose pods are not bound yet count as used.

Between Atoll's Ready and the scheduler binding the pods, the chosen GPUs look free in the
node/pod view; without the ledger a second Workload would be given the same GPUs. The ledger
is derived from API state only, so a restarted controller rebuilds it from its first list:

- a Workload reserves while its Atoll check entry is ``Ready``, it holds quota, and it is
  neither finished, evicted nor deactivated;
- what it reserves is in that entry's ``podSetUpdates[].annotations[atoll.dev/planned-nodes]``
  (node=pods), times the PodSet's per-pod requests;
- pods carrying its ``atoll.dev/decision-id`` that are bound count against it (they are now in
  the node usage), so a running Workload reserves nothing.
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

from admission.controller._workloads import WorkloadError, check_entry, condition_true, parse_workload
from admission.kube import Obj
from topology import ResourceVector, Snapshot

__all__ = ["ANN_DECISION_ID", "ANN_PLANNED_NODES", "Ledger", "Reservation", "decode_planned", "encode_planned", "holds_reservation"]

ANN_DECISION_ID = "atoll.dev/decision-id"
ANN_PLANNED_NODES = "atoll.dev/planned-nodes"
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
        if not sep or not node or not count.isdigit():
            raise ValueError(f"{ANN_PLANNED_NODES}: {part!r} is not node=pods")
        out[node] = out.get(node, 0) + int(count)
    return out


@dataclass(frozen=True, slots=True)
class Reservation:
    uid: str
    workload: str
    decision_id: str
    flavor: str
    podset: str
    planned: tuple[tuple[str, int], ...]
    per_pod: ResourceVector

    @property
    def pods(self) -> int:
        return sum(k for _, k in self.planned)


def holds_reservation(obj: Obj, check_names: Iterable[str]) -> bool:
    """Does this Workload's state say its Atoll placement is still to be honoured?"""
    entry = check_entry(obj, check_names)
    if entry is None or entry.get("state") != "Ready":
        return False
    if not condition_true(obj, "QuotaReserved") or condition_true(obj, "Finished") or condition_true(obj, "Evicted"):
        return False
    return (obj.get("spec") or {}).get("active", True) is not False


Bound = Callable[[str], Mapping[str, Counter[str]]]
"""decision id → PodSet → node → pods bound so far."""


class Ledger:
    """Reservations by Workload, with per-flavor totals kept up to date as Workloads and pods
    change, so applying them to a snapshot costs one array operation, not a walk over every
    admitted Workload."""

    def __init__(self, gpu_resource: str = "nvidia.com/gpu", bound: Bound | None = None) -> None:
        self.gpu_resource = gpu_resource
        self.bound: Bound = bound or (lambda _decision: {})
        self._by_uid: dict[str, tuple[Reservation, ...]] = {}
        self._by_decision: dict[str, set[str]] = {}
        self._seen_bound: dict[tuple[str, str], int] = {}
        self._held: dict[tuple[str, str], list[tuple[str, int]]] = {}
        self._totals: dict[str, dict[str, npt.NDArray[np.int64]]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_uid.values())

    def observe(self, obj: Obj, check_names: Iterable[str]) -> None:
        """Recompute one Workload's reservations from its current state."""
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        names = set(check_names)
        if not holds_reservation(obj, names):
            self.forget(uid)
            return
        entry = check_entry(obj, names) or {}
        try:
            view = parse_workload(obj, gpu_resource=self.gpu_resource)
        except WorkloadError as exc:
            _log.warning("admitted workload unreadable; its reservation is not counted", workload=_key(obj), error=str(exc))
            self.forget(uid)
            return
        per_pod = {p.name: p.per_pod for p in view.podsets}
        out = []
        for update in entry.get("podSetUpdates") or []:
            ann = update.get("annotations") or {}
            name = str(update.get("name"))
            flavor = view.flavors.get(name)
            if ANN_PLANNED_NODES not in ann or flavor is None or name not in per_pod:
                continue
            try:
                planned = decode_planned(str(ann[ANN_PLANNED_NODES]))
            except ValueError as exc:
                _log.warning("planned nodes unreadable; reservation not counted", workload=_key(obj), podset=name, error=str(exc))
                continue
            out.append(Reservation(uid, view.key, str(ann.get(ANN_DECISION_ID, "")), flavor, name, tuple(planned.items()), per_pod[name]))
        if tuple(out) == self._by_uid.get(uid):
            return
        self.forget(uid)
        if out:
            self._by_uid[uid] = tuple(out)
            for r in out:
                self._by_decision.setdefault(r.decision_id, set()).add(uid)
                self._hold(r)

    def forget(self, uid: str) -> None:
        for r in self._by_uid.pop(uid, ()):
            self._release(r)
            self._seen_bound.pop((r.decision_id, r.podset), None)
            users = self._by_decision.get(r.decision_id)
            if users is not None:
                users.discard(uid)
                if not users:
                    del self._by_decision[r.decision_id]

    def pods_changed(self, decision_id: str) -> None:
        """Pods carrying this decision id were bound, finished or deleted: re-count what it still holds."""
        for uid in list(self._by_decision.get(decision_id, ())):
            for r in self._by_uid.get(uid, ()):
                self._release(r)
                self._hold(r)

    def reservations(self, flavor: str | None = None) -> list[Reservation]:
        return [r for rs in self._by_uid.values() for r in rs if flavor is None or r.flavor == flavor]

    def outstanding(self, r: Reservation, bound: Mapping[str, Counter[str]]) -> list[tuple[str, int]]:
        """Planned pods not yet bound, per node. Pods bound elsewhere (the scheduler may pick
        another node of the domain) are taken off the last planned nodes."""
        now = bound.get(r.podset, Counter())
        seen = max(self._seen_bound.get((r.decision_id, r.podset), 0), sum(now.values()))
        self._seen_bound[(r.decision_id, r.podset)] = seen  # finished pods leave the bound view; they still ran
        if seen >= r.pods:
            return []
        left = [(n, k - min(k, now.get(n, 0))) for n, k in r.planned]
        extra = seen - sum(min(k, now.get(n, 0)) for n, k in r.planned)
        out: list[tuple[str, int]] = []
        for n, k in reversed(left):
            take = min(k, max(extra, 0))
            extra -= take
            if k - take > 0:
                out.append((n, k - take))
        return list(reversed(out))

    def _hold(self, r: Reservation) -> None:
        held = self.outstanding(r, self.bound(r.decision_id) if r.decision_id else {})
        self._held[(r.uid, r.podset)] = held
        totals = self._totals.setdefault(r.flavor, {})
        per = np.asarray(r.per_pod.as_tuple(), dtype=np.int64)
        for node, pods in held:
            totals[node] = totals.get(node, _ZERO) + per * pods

    def _release(self, r: Reservation) -> None:
        held = self._held.pop((r.uid, r.podset), [])
        totals = self._totals.get(r.flavor, {})
        per = np.asarray(r.per_pod.as_tuple(), dtype=np.int64)
        for node, pods in held:
            left = totals.get(node, _ZERO) - per * pods
            if left.any():
                totals[node] = left
            else:
                totals.pop(node, None)

    def apply(self, snapshot: Snapshot, *, exclude_uid: str | None = None) -> int:
        """Count every outstanding reservation of the snapshot's flavor as used (in place: pass a
        fork). Returns the GPUs reserved."""
        totals = dict(self._totals.get(snapshot.flavor, {}))
        if exclude_uid in self._by_uid:
            for r in self._by_uid[exclude_uid]:
                per = np.asarray(r.per_pod.as_tuple(), dtype=np.int64)
                for node, pods in self._held.get((r.uid, r.podset), []):
                    totals[node] = totals.get(node, _ZERO) - per * pods
        names = [n for n in totals if n in snapshot.node_index]
        if not names:
            return 0
        idx = np.fromiter((snapshot.node_index[n] for n in names), dtype=np.int64, count=len(names))
        amount = np.maximum(np.stack([totals[n] for n in names]), 0)
        snapshot.free[idx] = np.maximum(snapshot.free[idx] - amount, 0)
        return int(amount[:, 0].sum())


_ZERO = np.zeros(4, dtype=np.int64)


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"

"""What a decision record says beyond the verdict: the ledger's view of each domain (what holds
it, and who), the inputs' resourceVersions and the wait so far; and the record itself
(``build_record``, for the controller and for offline runs alike).

A record names, for the chosen domain and each losing one, the pods admitted Workloads still owe
there (the ledger's witness counts them on nodes), the GPUs those owed pods reserve, the GPUs
bound pods hold, and the Workloads behind both. An auditor reads from it why a Workload waited,
and on whom. Built only for decisions that keep records, after the search: it reads the witness,
the ledger's reservations and the cache's bound pods, and writes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from admission.controller._book import Witness
from admission.controller._cache import BoundPod, ClusterCache
from admission.controller._ledger import Reservation
from admission.controller._queue_names import queue_name_of
from admission.controller._records import DecisionRecord, iso_time
from admission.controller._wait import read_wait_state
from topology import Snapshot

__all__ = ["NOT_ATOLL", "DomainLedger", "build_record", "decision_inputs"]

NOT_ATOLL = "(pods not placed by Atoll)"
"""The holder named for bound GPU pods that carry no Atoll decision id."""
MAX_HOLDERS = 8
"""Holders listed per domain (the most GPUs first); ``holders`` counts them all."""


class DomainLedger:
    """Owed and bound GPUs per domain of one flavor's snapshot, by the Workload that holds them.

    Cheap when asked nothing, and then per domain asked: owed pods come from the witness's sparse
    per-node use (its per-reservation lists are built only when a domain asked has owed pods),
    bound pods from the cache's pods by node, over the domain's own nodes."""

    def __init__(self, snap: Snapshot, witness: Witness, reservations: Callable[[], Sequence[Reservation]],
                 pods_on_node: Mapping[str, Mapping[str, BoundPod]]) -> None:
        self.snap = snap
        self._witness = witness
        self._reservations = reservations
        self._pods_on_node = pods_on_node
        self._owed_nodes: dict[int, tuple[int, int]] | None = None
        self._owed_by: dict[int, list[tuple[str, int, int]]] | None = None
        self._short_rows: list[tuple[str, Any, int, int]] | None = None
        self._workload_of: dict[str, str] | None = None
        self._paths: dict[tuple[str, tuple[str, ...]], range | None] = {}

    def _owed(self) -> dict[int, tuple[int, int]]:
        """Node → (owed pods, owed GPUs) the witness counts there."""
        if self._owed_nodes is None:
            nodes, rows = self._witness.used_rows()
            self._owed_nodes = {int(n): (int(r[3]), int(r[0])) for n, r in zip(nodes.tolist(), rows.tolist())}
        return self._owed_nodes

    def _owed_holders(self) -> dict[int, list[tuple[str, int, int]]]:
        """Node → (Workload, owed pods, owed GPUs) the witness counts there."""
        if self._owed_by is None:
            owed: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
            for (r, _), placed in zip(self._witness.rows, self._witness.placed):
                assert isinstance(r, Reservation)
                for node, pods in placed:
                    owed[int(node)].append((r.workload, int(pods), int(pods) * r.per_pod.gpu))
            self._owed_by = owed
        return self._owed_by

    def _short(self) -> list[tuple[str, Any, int, int]]:
        """(Workload, domain nodes, pods, GPUs) of owed pods that found no room."""
        if self._short_rows is None:
            self._short_rows = []
            for r, _, demand, missing in self._witness.short():
                assert isinstance(r, Reservation)
                self._short_rows.append((r.workload, demand.domain, int(missing), int(missing) * r.per_pod.gpu))
        return self._short_rows

    def _workload(self, decision_id: str) -> str:
        if self._workload_of is None:
            self._workload_of = {r.decision_id: r.workload for r in self._reservations()}
        return self._workload_of.get(decision_id, NOT_ATOLL) if decision_id else NOT_ATOLL

    def nodes(self, level_label: str, path: Sequence[str]) -> range | None:
        """Node indices of the domain at ``level_label`` with this path; None when it has none."""
        key = (level_label, tuple(path))
        if key in self._paths:
            return self._paths[key]
        found = None
        if level_label in self.snap.level_labels:
            level = self.snap.level_index(level_label)
            index = self.snap.static_cache.get(("record-domain-paths", level))  # cleared with the node structure
            if not isinstance(index, dict):
                index = {tuple(self.snap.domain_path(level, d)): d for d in range(self.snap.num_domains(level))}
                self.snap.static_cache[("record-domain-paths", level)] = index
            d = index.get(key[1])
            if d is not None:
                a, b = self.snap.domain_range(level, d)
                found = range(a, b)
        self._paths[key] = found
        return found

    def view(self, level_label: str, path: Sequence[str]) -> dict[str, Any] | None:
        """``owed_pods`` and ``reserved_gpus`` (the ledger), ``bound_gpus`` (running pods), and
        ``workloads``: who holds the domain, the most GPUs first; None for an unknown domain."""
        span = self.nodes(level_label, path)
        if span is None:
            return None
        who: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        owed_nodes = self._owed()
        if len(span) <= len(owed_nodes):
            has_owed = any(i in owed_nodes for i in span)
        else:
            has_owed = any(span.start <= i < span.stop for i in owed_nodes)
        if has_owed:
            owed = self._owed_holders()
            for i in span:
                for workload, pods, gpus in owed.get(i, ()):
                    who[workload][0] += pods
                    who[workload][1] += gpus
        for workload, domain, pods, gpus in self._short():  # owed pods with no room: their whole domain counts as full
            if np.any((domain >= span.start) & (domain < span.stop)):
                who[workload][0] += pods
                who[workload][1] += gpus
        names = self.snap.node_names
        for i in span:
            for pod in (self._pods_on_node.get(names[i]) or {}).values():
                if pod.usage.gpu > 0:
                    who[self._workload(pod.decision_id)][2] += pod.usage.gpu
        holders = sorted(who.items(), key=lambda kv: (-(kv[1][1] + kv[1][2]), kv[0]))
        return {"owed_pods": sum(v[0] for v in who.values()), "reserved_gpus": sum(v[1] for v in who.values()),
                "bound_gpus": sum(v[2] for v in who.values()), "holders": len(holders),
                "workloads": [{"workload": w, "owed_pods": v[0], "reserved_gpus": v[1], "bound_gpus": v[2]}
                              for w, v in holders[:MAX_HOLDERS]]}


def decision_inputs(objects: Mapping[Any, Mapping[str, Any]], workload: Mapping[str, Any], flavors: Sequence[str],
                    profiles_rv: str | None, topology_of: Mapping[str, str]) -> dict[str, Any]:
    """The resourceVersions a decision read: the Workload, the profiles ConfigMap, and per flavor
    its ResourceFlavor and Topology (``objects``: the cache's, by resource; ``topology_of``: flavor →
    Topology name from the profiles document). Missing objects are left out."""
    from admission.kube import RESOURCE_FLAVORS, TOPOLOGIES

    def rv(obj: Mapping[str, Any] | None) -> str | None:
        return str((obj.get("metadata") or {}).get("resourceVersion") or "") or None if obj is not None else None

    out: dict[str, Any] = {"workload": rv(workload), "profiles": profiles_rv}
    rfs = {f: rv(objects[RESOURCE_FLAVORS].get(f)) for f in flavors}
    topos = {t: rv(objects[TOPOLOGIES].get(t)) for t in sorted({topology_of[f] for f in flavors if f in topology_of})}
    out["resource_flavors"] = {k: v for k, v in rfs.items() if v}
    out["topologies"] = {k: v for k, v in topos.items() if v}
    return out


def build_record(obj: dict[str, Any], verdict: Any, cache: ClusterCache, check_names: frozenset[str], *, now: float, latency: float,
                 attempts: int, controller: str, term: int | None, profiles_rv: str | None) -> DecisionRecord:
    """The decision record of ``verdict`` on ``obj`` as it was read for the decision (its wait
    began at its ``atoll.dev/TopologyWaiting`` condition, else now when it waits now). The
    schema wants ``local_queue`` a string: a Workload naming no LocalQueue gets ``namespace/``."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    before = read_wait_state(obj, check_names)
    began = before.first_waited_at if before.first_waited_at is not None else (now if verdict.outcome == "wait" else None)
    flavors = [f for f in verdict.flavor.split(",") if f]
    topology_of = {f: s.topology for f, s in cache.profiles.flavors.items()} if cache.profiles is not None else {}
    return DecisionRecord(
        decision_id=verdict.decision_id, time=iso_time(now), workload=str(meta.get("name")), namespace=str(meta.get("namespace")),
        uid=str(meta.get("uid")), local_queue=queue_name_of(obj) or f"{meta.get('namespace')}/",
        cluster_queue=str((status.get("admission") or {}).get("clusterQueue", "")), flavor=verdict.flavor, profile=verdict.profile,
        workload_class=verdict.workload_class, outcome=verdict.outcome, check_state=verdict.state, message=verdict.message,
        placement=verdict.placements, why_not=verdict.why_not, retry_after_seconds=verdict.retry_after, attempts=attempts,
        relaxed=verdict.relaxed, latency_ms=round(latency * 1000, 3), snapshot_generation=verdict.generation,
        reserved_gpus=verdict.reserved_gpus, links=list(verdict.links), notes=list(verdict.notes), controller=controller, lease_term=term,
        reason=verdict.reason if verdict.outcome == "wait" else "", first_waited_at=iso_time(began) if began is not None else None,
        waited_seconds=round(max(now - began, 0.0), 3) if began is not None else 0.0,
        inputs=decision_inputs(cache.objects, obj, flavors, profiles_rv, topology_of), wait_or_span=list(verdict.wait_or_span),
    )

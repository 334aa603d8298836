"""Answers to "why does this Workload wait, or why was it placed there?" from the controller's state.

Reads the cache, the ledger and the decision Atoll would make now; writes nothing. ``atoll
explain`` prints it.
"""

from __future__ import annotations

from typing import Any

import structlog

from admission.controller._cache import ClusterCache, FlavorProblem
from admission.controller._decide import Decider
from admission.controller._ledger import ANN_DECISION_ID, ANN_PLANNED_NODES, Ledger, decode_planned
from admission.controller._records import iso_time
from admission.controller._settings import Settings
from admission.controller._wait import read_wait_state
from admission.controller._workloads import WorkloadError, check_entry, condition_true, parse_workload
from admission.kube import WORKLOADS
from admission.vocabulary import DRAINING
from topology import HOSTNAME_LABEL, untolerated_taints

__all__ = ["Explainer"]

_log = structlog.get_logger("atoll.explain")


class Explainer:
    """Reports on Workloads and flavors, built on the controller's cache, ledger and decider."""

    def __init__(self, cache: ClusterCache, ledger: Ledger, decider: Decider, settings: Settings) -> None:
        self.cache = cache
        self.ledger = ledger
        self.decider = decider
        self.settings = settings

    def flavor_report(self, flavor: str) -> dict[str, Any]:
        """Nodes of a flavor and why any of them are not candidates."""
        report: dict[str, Any] = {"flavor": flavor}
        try:
            topology, levels = self.cache.flavor_topology(flavor)
            snap = self.cache.snapshot(flavor).fork()
        except FlavorProblem as exc:
            report["problem"] = str(exc)
            return report
        reserved = self.ledger.apply(snap)
        excluded: dict[str, list[str]] = {}
        tol = snap.tolerations
        for name in self.cache.flavor_nodes(flavor):
            info = self.cache.nodes.get(name)
            reasons = []
            if name in self.cache.node_problems or info is None:
                reasons.append(self.cache.node_problems.get(name, "unreadable"))
            if info is not None:
                if not info.ready and name not in self.cache.node_problems:
                    reasons.append("NotReady")
                if info.unschedulable:
                    reasons.append("cordoned")
                if info.draining:
                    reasons.append(f"draining ({DRAINING}=true): no new placement; running Workloads finish")
                for t in untolerated_taints(info, tol):
                    reasons.append(f"taint {t.key}={t.value}:{t.effect} not tolerated by the flavor (only pods that tolerate it)")
                missing = [lb for lb in levels if lb != HOSTNAME_LABEL and lb not in info.labels]
                if missing:
                    reasons.append(f"missing level label {', '.join(missing)}")
            for r in reasons:
                excluded.setdefault(r, []).append(name)
        report.update({"topology": topology, "levels": list(snap.level_labels), "nodes": snap.num_nodes,
                       "healthy_nodes": int(snap.eligible.sum()), "free_gpus": snap.free_gpus(), "total_gpus": snap.total_gpus(),
                       "reserved_gpus": reserved, "reservations": len(self.ledger.reservations(flavor)),
                       "excluded": {k: sorted(v) for k, v in sorted(excluded.items())}})
        return report

    def explain(self, key: str, *, check_names: frozenset[str], config_error: str | None, now: float) -> dict[str, Any]:
        """Why this Workload waits, or where and why it was placed (from the current cache)."""
        obj = self.cache.objects[WORKLOADS].get(key)
        if obj is None:
            raise KeyError(f"Workload {key} not found")
        out: dict[str, Any] = {"workload": key}
        status = obj.get("status") or {}
        out["cluster_queue"] = (status.get("admission") or {}).get("clusterQueue")
        out["quota_reserved"] = condition_true(obj, "QuotaReserved")
        out["evicted"] = condition_true(obj, "Evicted")
        entry = check_entry(obj, check_names)
        out["check"] = {k: entry.get(k) for k in ("name", "state", "message", "requeueAfterSeconds", "lastTransitionTime")} if entry else None
        wait = read_wait_state(obj, check_names)
        # Retries so far: Kueue's retryCount, plus the Retry on the entry that Kueue has not evicted for yet
        retrying = 1 if entry is not None and entry.get("state") == "Retry" and not out["evicted"] else 0
        out["wait_state"] = {"attempts": wait.attempts + retrying, "first_waited_at": iso_time(wait.first_waited_at) if wait.first_waited_at is not None else None}
        if entry and entry.get("state") == "Ready":
            placed = []
            for update in entry.get("podSetUpdates") or []:
                ann = update.get("annotations") or {}
                try:
                    nodes = decode_planned(str(ann.get(ANN_PLANNED_NODES, "")))
                except ValueError as exc:
                    nodes = {"(unreadable)": 0}
                    _log.warning("planned nodes unreadable", workload=key, error=str(exc))
                placed.append({"podset": update.get("name"), "decision_id": ann.get(ANN_DECISION_ID), "node_selector": update.get("nodeSelector") or {},
                               "planned_nodes": nodes})
            out["placement"] = placed
        if entry:  # what the Workload itself keeps of the last decision: the check entry written then
            ids = sorted({p["decision_id"] for p in out.get("placement") or [] if p.get("decision_id")})
            out["recorded"] = {"source": "the Workload's check entry", "state": entry.get("state"), "message": entry.get("message") or "",
                               "time": entry.get("lastTransitionTime"), "decision_id": ids[0] if ids else None}
        try:
            view = parse_workload(obj, gpu_resource=self.cache.gpu_resource)
            flavors = sorted(set(view.flavors.values()))
        except WorkloadError as exc:
            out["error"] = str(exc)
            flavors = []
        out["flavors"] = [self.flavor_report(f) for f in flavors]
        if self.cache.profiles is None:
            out["now"] = {"outcome": "none", "message": config_error or "no valid profiles document"}
        elif out["evicted"]:
            out["now"] = {"outcome": "none", "message": "Kueue is evicting this Workload; Atoll decides again after its next quota reservation"}
        elif status and condition_true(obj, "QuotaReserved"):
            v = self.decider.evaluate(obj, "dry-run", now)
            out["now"] = {"outcome": v.outcome, "message": v.message, "profile": v.profile, "class": v.workload_class,
                          "retry_after": v.retry_after, "why_not": [_slots(w) for w in v.why_not],
                          "placement": [_slots(p) for p in v.placements], "links": list(v.links), "reserved_gpus": v.reserved_gpus,
                          "wait_or_span": list(v.wait_or_span), "span_cost": self.settings.cost.model_dump()}  # what a span is priced with now (the decision then: its record)
        else:
            out["now"] = {"outcome": "none", "message": "Kueue has not reserved quota yet; Atoll decides after QuotaReserved"}
        return out


def _slots(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in getattr(obj, "__slots__", ())}

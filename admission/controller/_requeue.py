"""The webhook's request to requeue a Workload whose pod lost its node, as the controller reads it.

Under exact enforcement the webhook re-homes a recreated pod inside its domain; when no healthy
node there has room, it sets the condition ``atoll.dev/RequeueRequested`` on the pod's Workload,
its message starting ``decision <id>:``. The controller answers by setting its check entry to
``Retry``: Kueue's workload controller evicts a Workload holding quota whose check is Retry
(``reconcileCheckBasedEviction`` in kubernetes-sigs/kueue pkg/controller/core/workload_controller.go:
``PrepareForEviction`` with reason ``AdmissionCheck``) and requeues it, so the next reservation
gets a new decision on the cluster as it is now. This is Kueue's own answer to a node failure it
cannot replace (it evicts with ``NodeFailures``).

A request counts only for the decision in force: the Workload holds its reservation (check
``Ready``, quota reserved, not evicted, finished or deactivated) and the condition names the
decision id of that ``Ready`` entry. After the Retry the entry is no longer ``Ready``, and the
next admission carries a new id, so one request is answered once; the condition stays on the
Workload as the webhook wrote it (the webhook's field manager owns it), a record of why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from admission import vocabulary
from admission.controller._ledger import ANN_DECISION_ID, holds_reservation
from admission.controller._workloads import check_entry
from admission.kube import Obj

__all__ = ["REQUEUE_CONDITION", "RequeueRequest", "requeue_request"]

REQUEUE_CONDITION = vocabulary.REQUEUE_CONDITION
"""Workload condition the webhook sets True when a pod lost its node and its domain has no
replacement with room; its message starts ``decision <id>:`` so a stale one is recognised."""


@dataclass(frozen=True, slots=True)
class RequeueRequest:
    decision_id: str
    detail: str
    """The condition's message after ``decision <id>:``: the pod, PodSet, slot and why."""

    @property
    def message(self) -> str:
        """The Retry message: which pod could not be re-homed, and what happens next."""
        return (f"Retry: decision {self.decision_id} cannot keep its placement: {self.detail}; "
                "Atoll asks Kueue to evict and requeue the Workload, and places it again at its next quota reservation")


def requeue_request(obj: Obj, check_names: Iterable[str]) -> RequeueRequest | None:
    """The webhook's request on this Workload when it is one to act on now (module docstring)."""
    names = frozenset(check_names)
    if not holds_reservation(obj, names):
        return None
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    mark = next((c for c in conditions if isinstance(c, dict) and c.get("type") == REQUEUE_CONDITION), None) \
        if isinstance(conditions, list) else None
    if mark is None or mark.get("status") != "True":
        return None
    head, sep, detail = str(mark.get("message") or "").partition(": ")
    decision = head.removeprefix("decision ") if head.startswith("decision ") else ""
    if not sep or not decision:
        return None
    entry = check_entry(obj, names) or {}
    ids = {str((u.get("annotations") or {}).get(ANN_DECISION_ID, "")) for u in entry.get("podSetUpdates") or [] if isinstance(u, dict)}
    if decision not in ids:
        return None  # an older decision's request: that placement is gone already
    return RequeueRequest(decision, detail.strip() or "a pod lost its node and no node of its domain can take it")

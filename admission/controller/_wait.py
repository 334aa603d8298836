"""How long a Workload has waited for a placement, and how often: the input to backoff and relax.

Both numbers come from ``status``, which a Workload's owner cannot write (only controllers
granted ``workloads/status`` can), so nobody can forge a relax now or block it forever:

- attempts: Kueue's own ``retryCount`` on Atoll's check entry. Kueue increments it when its
  eviction resets a ``Retry`` entry to ``Pending`` and drops it when it resets any other state
  (``resetChecksOnEviction`` in Kueue's pkg/workload/evict/evict.go). So it counts the Retries
  since the Workload was last placed, once per reservation, whatever Atoll's controller saw.
- first wait: the ``lastTransitionTime`` of Atoll's own condition ``atoll.dev/TopologyWaiting``
  while it is ``True``. Atoll sets it ``True`` with a Retry, keeps its time on later Retries, and
  sets it ``False`` with Ready or Rejected (the next wait starts afresh). It travels in the same
  server-side apply as the check entry, so it costs no extra write. Kueue leaves it alone: its
  status writes carry only the condition types it manages (``admissionManagedConditions`` in
  Kueue's pkg/workload/patching/patching.go) and ``status.conditions`` is a map keyed by type.

The annotations older releases wrote on the Workload (``atoll.dev/first-waited-at``,
``atoll.dev/attempts``) are ignored: the owner can write them. Unreadable values count as no state.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from admission import vocabulary
from admission.controller._records import parse_time, rfc3339
from admission.controller._settings import KueueSettings
from admission.kube import Obj
from policies import WaitState

__all__ = ["ANN_ATTEMPTS", "ANN_FIRST_WAITED", "WAITING_CONDITION", "atoll_check_names", "read_wait_state", "waiting_condition"]

WAITING_CONDITION = vocabulary.WAITING_CONDITION
"""Atoll's condition on ``Workload.status.conditions``: True since the first Retry of the current wait."""
ANN_FIRST_WAITED = vocabulary.FIRST_WAITED_AT
"""Written by older releases; ignored (the Workload's owner can write annotations)."""
ANN_ATTEMPTS = vocabulary.ATTEMPTS
"""Written by older releases; ignored (the Workload's owner can write annotations)."""


def atoll_check_names(admission_checks: Mapping[str, Obj], kueue: KueueSettings) -> frozenset[str]:
    """The AdmissionChecks Atoll serves: its controllerName and, if one is configured, that name."""
    return frozenset(name for name, ac in admission_checks.items()
                     if (ac.get("spec") or {}).get("controllerName") == kueue.controller_name
                     and (kueue.admission_check is None or name == kueue.admission_check))


def _first(obj: Obj, key: str, field: str, values: frozenset[str]) -> Mapping[str, Any] | None:
    """The first mapping of the list ``status.<key>`` whose ``field`` is one of ``values``; anything
    unreadable is passed over. (A scan, not a list: read on every decision.)"""
    status = obj.get("status") if isinstance(obj, Mapping) else None
    items = status.get(key) if isinstance(status, Mapping) else None
    if not isinstance(items, list):
        return None
    for item in items:
        if type(item) is dict or isinstance(item, Mapping):
            value = item.get(field)
            if isinstance(value, str) and value in values:
                return item
    return None


_WAITING = frozenset({WAITING_CONDITION})


def _condition(obj: Obj) -> Mapping[str, Any] | None:
    found = _first(obj, "conditions", "type", _WAITING)
    return dict(found) if found is not None else None


def read_wait_state(obj: Obj, check_names: Iterable[str]) -> WaitState:
    """Attempts and first-wait time from the Workload's status (see the module docstring)."""
    names = check_names if isinstance(check_names, frozenset) else frozenset(check_names)
    entry = _first(obj, "admissionChecks", "name", names) or {}
    raw = entry.get("retryCount")
    attempts = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 0
    cond = _first(obj, "conditions", "type", _WAITING)
    first = None
    if cond is not None and cond.get("status") == "True" and cond.get("lastTransitionTime"):
        first = _parse_time(str(cond["lastTransitionTime"]))
    return WaitState(first, attempts)


@functools.lru_cache(maxsize=4096)
def _parse_time(text: str) -> float | None:
    """``parse_time``, remembered: a waiting Workload carries the same time on every decision."""
    return parse_time(text)


def waiting_condition(obj: Obj, outcome: str, now: float, generation: int | None = None) -> dict[str, Any] | None:
    """Atoll's condition to apply with a decision of ``outcome``; None when there is none to keep
    (no wait yet and not waiting now). A wait keeps the time of the wait already under way."""
    cond = _condition(obj)
    waiting = outcome == "wait"
    if cond is None and not waiting:
        return None
    status = "True" if waiting else "False"
    reason = {"wait": "NoPlacementYet", "admit": "Placed", "reject": "Rejected"}.get(outcome, "Decided")
    message = {"wait": "Atoll has found no placement for this Workload yet; waiting since lastTransitionTime",
               "admit": "Atoll placed this Workload; the next wait starts afresh",
               "reject": "Atoll rejected this Workload; the next wait starts afresh"}.get(outcome, outcome)
    since = cond.get("lastTransitionTime") if cond is not None and cond.get("status") == status else None
    out: dict[str, Any] = {"type": WAITING_CONDITION, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": since or rfc3339(now)}
    if generation is not None:
        out["observedGeneration"] = generation
    return out

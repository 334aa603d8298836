"""How long a Workload has waited for a placement, and how often: the input to backoff and relax.

The state lives on the Workload (annotations written under Atoll's field manager), so it
survives a controller restart; unreadable values count as no state.
"""

from __future__ import annotations

from admission.controller._records import parse_time, rfc3339
from admission.kube import Obj
from policies import WaitState

__all__ = ["ANN_ATTEMPTS", "ANN_FIRST_WAITED", "read_wait_state", "wait_annotations"]

ANN_FIRST_WAITED = "atoll.dev/first-waited-at"
ANN_ATTEMPTS = "atoll.dev/attempts"


def read_wait_state(obj: Obj) -> WaitState:
    """The backoff state Atoll keeps on the Workload (so it survives restarts); unreadable = none."""
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    first = parse_time(str(ann.get(ANN_FIRST_WAITED) or "")) if ann.get(ANN_FIRST_WAITED) else None
    raw = str(ann.get(ANN_ATTEMPTS) or "0")
    attempts = int(raw) if raw.isdigit() else 0
    return WaitState(first, attempts)


def wait_annotations(obj: Obj, outcome: str, now: float) -> dict[str, str]:
    """The annotations to apply with a decision of ``outcome`` (empty when nothing changes):
    a wait counts one more attempt and keeps the first wait's time; anything else resets."""
    wait = read_wait_state(obj)
    have = (obj.get("metadata") or {}).get("annotations") or {}
    if outcome == "wait":
        want = {ANN_FIRST_WAITED: have.get(ANN_FIRST_WAITED) if wait.first_waited_at is not None else rfc3339(now),
                ANN_ATTEMPTS: str(wait.attempts + 1)}
    elif wait.first_waited_at is not None or wait.attempts:
        want = {ANN_FIRST_WAITED: "", ANN_ATTEMPTS: "0"}  # done waiting: the next wait starts afresh
    else:
        return {}
    return want if any(have.get(k) != v for k, v in want.items()) else {}

"""The wait-or-span weighing of one decision as data, for the decision record's ``wait_or_span``.

``queue_turn`` weighs waiting for one domain against the best span (and, with
``queueing.perfFloorByCost``, against GPUs under the class's speed floor) and says both in the
message; this turns the same ``WaitOrSpan`` values into record entries, adding where each side's
numbers came from: the wait from Kueue's limits or runtimes learned from finished Workloads, and
from the Workloads queued ahead when they made it later (``wait_basis``); the runtime the span's
price is counted on likewise. Pure: no API I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from admission.controller._queue_names import queue_name_of
from admission.controller._queueing import QueueTurn, max_execution_seconds
from admission.queue import Outlook, wait_basis
from policies import PodSetSpec
from topology import Snapshot

__all__ = ["weighing_records"]


def weighing_records(outlook: Outlook, turn: QueueTurn, snap: Snapshot, obj: Mapping[str, Any], specs: Sequence[PodSetSpec],
                     now: float) -> list[dict[str, object]]:
    """The record entries of ``turn``'s weighings on ``snap``'s flavor (none when nothing was weighed)."""
    weighed = [w for w in (turn.weighed, turn.floor) if w is not None]
    if not weighed:
        return []
    gpus = sum(s.count * s.per_pod.gpu for s in specs)
    est = outlook.estimator.estimate(queue_name_of(obj), gpus, max_execution_seconds(obj))
    runtime = None if est is None else "limit" if est.source == "limit" else "learned"
    running = outlook.running_on(snap.flavor)
    return [w.as_record(snap.flavor, wait_basis(snap, w.domain, w.wait_s, running, outlook.estimator, now, w.queue_delays), runtime)
            for w in weighed]

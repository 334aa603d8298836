"""What a span now costs the other Workloads in line (``queueing.spanCountsQueue``): the line
run out twice as ``queued_start`` runs it (``run_out``), once with the Workload waiting its turn
and once with its span's GPUs held for its slowed runtime; the others' start delays, summed.

Pure: plain lists and arrays, no clock, no API.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from admission.queue._ahead import MAX_AHEAD, Entry, Room, Waiter, entry, frees, run_out
from admission.queue._estimate import Running, RuntimeEstimator
from topology import Snapshot

__all__ = ["QueueCost", "span_queue_cost"]


@dataclass(frozen=True, slots=True)
class QueueCost:
    """What a span now costs the Workloads in line on its flavor (``queueing.spanCountsQueue``):
    the sum of their expected starts' delays against the Workload waiting its turn in line
    instead (seconds; negative: the span lets them start sooner on balance), how many start
    later and how many sooner, the waiters counted, and whether a bound was reached."""

    seconds: float
    later: int
    sooner: int
    counted: int
    capped: bool = False

    @property
    def price_s(self) -> float:
        """What the span is charged for the line: the delays, never a credit."""
        return max(self.seconds, 0.0)


def span_queue_cost(snapshot: Snapshot, level: str | None, line: Sequence[Waiter], me: int, span: Mapping[str, int], span_s: float,
                    runtime_s: float, running: Iterable[Running], estimator: RuntimeEstimator, now: float,
                    blocked: Mapping[str, int] | None = None) -> QueueCost | None:
    """What spanning now costs the other waiters in ``line`` (front first, the Workload itself at
    ``me``): the line is run out twice on ``snapshot`` for one domain of ``level`` each, as
    ``queued_start`` runs it. Once with the Workload waiting its turn at ``me`` and holding its
    domain ``runtime_s`` once started; once without it in line, its span's GPUs (``span``: node
    name → GPUs, free now) held for ``span_s`` (its slowed runtime) from ``now``. The cost is the
    sum over the other waiters of their start with the span minus their start with it waiting; a
    waiter started in one run only is counted as starting at the later of the two runs' last
    moments in the other. At most ``MAX_AHEAD`` waiters from the front (the Workload kept at the
    end when further back) and ``MAX_EVENTS`` moments a run. None when the Workload is not in
    ``line`` or no domain of the level holds it even empty."""
    if not 0 <= me < len(line):
        return None
    mine = line[me]
    others = [w for i, w in enumerate(line) if i != me]
    capped = len(others) > MAX_AHEAD
    at = min(me, MAX_AHEAD)
    others = others[:MAX_AHEAD]
    flavor = snapshot.flavor
    sizes = {max(int(w.per_pod), 1) for w in others} | {max(int(mine.per_pod), 1)}
    room = Room(snapshot, level, sizes, blocked)
    if not room.holds(mine.gpus, mine.per_pod):
        return None
    line_s: list[Entry] = []
    k = 0  # the others kept ahead of the Workload
    for i, w in enumerate(others):
        e = entry(room, w, estimator)
        if e is not None:
            line_s.append(e)
            k += i < at
    line_w = line_s[:k] + [(mine.gpus, max(int(mine.per_pod), 1), (float(runtime_s), 0.0))] + line_s[k:]
    running = list(running)
    waited = run_out(room.copy(), line_w, frees(room, flavor, running, estimator, now), now, None)
    spanned_room = room.copy()
    events = frees(room, flavor, running, estimator, now)
    for name, g in span.items():
        n = snapshot.node_index.get(name)
        if n is not None and spanned_room.cap[n] > 0 and g > 0:
            spanned_room.change(n, -int(g))
            heapq.heappush(events, (now + float(span_s), 0.0, n, int(g)))
    spanned = run_out(spanned_room, line_s, events, now, None)
    horizon = max(waited.last, spanned.last)
    total, later, sooner = 0.0, 0, 0
    for j in range(len(line_s)):
        a = waited.starts[j + (1 if j >= k else 0)]
        b = spanned.starts[j]
        if a is None and b is None:
            continue
        ta = a[0] if a is not None else horizon
        tb = b[0] if b is not None else horizon
        if not (math.isfinite(ta) and math.isfinite(tb)):
            continue
        total += tb - ta
        later += tb > ta
        sooner += tb < ta
    return QueueCost(total, later, sooner, len(line_s), capped or waited.capped or spanned.capped)

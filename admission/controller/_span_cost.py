"""The controller's price of a span: the simulator's cost model, on the cluster's own link figures.

Wait-or-span (``_queueing``) weighs the expected wait for one domain against what the best span
costs: the Workload's expected runtime × (slowdown − 1). The slowdown is ``topology.CostModel``'s,
the arithmetic ``atoll simulate`` charges, on the flavor's snapshot, whose per-level bandwidth and
latency come from the profiles document (``flavors.X.links``) or Atoll's documented defaults
(``policies.DEFAULT_LINKS``; any other level an InfiniBand NDR hop). The assumptions are the
simulator's defaults unless ``atoll run`` changes them (``CostSettings``): the calibrated link
model, every multi-GPU Workload a training gang whose all-reduce is a tenth of its ideal step,
its gradient ``topology.default_model_gb``, nothing of it hidden behind compute.

A span this cannot price (PodSets of different pod shapes, no GPUs) is None: not priced, and
``relaxAfterSeconds`` decides, as the decision's message says.

``line_priced`` adds, with ``queueing.spanCountsQueue``, what a span that won costs the other
Workloads in line for a domain on the flavor (``admission.queue.span_queue_cost``), and weighs
again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from admission.controller._settings import CostSettings
from admission.queue import MAX_AHEAD, Outlook, Running, Waiter, WaitOrSpan, span_queue_cost, weigh
from policies import Decision
from topology import CostModel, ResourceVector, Snapshot, default_model_gb

__all__ = ["SpanPricer", "holds_blocked", "line_priced", "span_gpus", "with_quota_waiters"]


@dataclass(frozen=True, slots=True)
class _Gang:
    """A Workload as the cost model reads it (``topology.CommJob`` and ``topology.GangShape``)."""

    id: str
    pods: int
    per_pod: ResourceVector
    comm_fraction: float
    overlap: float
    model_gb: float
    kind: str = "training"

    @property
    def gpus(self) -> int:
        return self.pods * self.per_pod.gpu


class SpanPricer:
    """``Decider.span_cost``: the slowdown a span placement costs, by ``settings``' assumptions."""

    def __init__(self, settings: CostSettings) -> None:
        self.settings = settings

    def __call__(self, snap: Snapshot, decision: Decision) -> float | None:
        placement, request = decision.placement, decision.request
        if placement is None or request is None or not placement.fits:
            return None
        shapes = {ps.per_pod for ps in request.podsets if ps.per_pod.gpu > 0}
        if len(shapes) != 1:
            return None  # no GPUs, or PodSets of different shapes: not one gang the model knows
        per_pod = shapes.pop()
        gpu_podsets = {ps.name for ps in request.podsets if ps.per_pod.gpu > 0}
        count: Counter[int] = Counter()
        for ps in placement.podsets:
            if ps.name not in gpu_podsets:
                continue
            for name, k in zip(ps.nodes, ps.pods_per_node):
                i = snap.node_index.get(name)
                if i is None:
                    return None
                count[i] += k
        if not count:
            return None
        nodes = np.array(sorted(count), dtype=np.int64)
        pods = np.array([count[int(i)] for i in nodes], dtype=np.int64)
        gpus = int(pods.sum()) * per_pod.gpu
        gang = _Gang(decision.profile, int(pods.sum()), per_pod, self.settings.comm_fraction if gpus > 1 else 0.0,
                     self.settings.overlap, default_model_gb(gpus))
        # A fresh model per price: its caches are keyed by the snapshot's identity, and the
        # controller's snapshots are rebuilt (a span is priced once per change of what it reads).
        return float(CostModel(self.settings.link_model)(snap, nodes, gang, gang, pods))


def span_gpus(decision: Decision) -> dict[str, int]:
    """The GPUs ``decision`` admits on, by node (every PodSet's pods × its pod's GPUs)."""
    placement, request = decision.placement, decision.request
    if placement is None or request is None:
        return {}
    per_pod = {ps.name: ps.per_pod.gpu for ps in request.podsets}
    out: dict[str, int] = {}
    for ps in placement.podsets:
        g = per_pod.get(ps.name, 0)
        for name, k in zip(ps.nodes, ps.pods_per_node):
            if g * k > 0:
                out[name] = out.get(name, 0) + g * k
    return out


def holds_blocked(outlook: Outlook, key: str, blocked: Mapping[str, int]) -> bool:
    """Whether ``key`` holds a reservation whose room is ``blocked`` for the Workload deciding: the
    gang takes that room when it frees, not another domain, so it is no competitor in the line."""
    held = outlook.reservations.held_by(key)
    return held is not None and any(name in blocked for name, _ in held.nodes)


def with_quota_waiters(outlook: Outlook, key: str, flavor: str, cluster_queue: str | None = None,
                       blocked: Mapping[str, int] | None = None) -> tuple[list[Waiter], int]:
    """The line ``key`` waits in on ``flavor`` (``Queued.line``) with the Workloads waiting for
    quota there (``Outlook.quota_waiters``; ``cluster_queue``: the one ``key`` holds quota in; None:
    none of them) merged in Kueue's order (priority, then ``since``; a
    tie keeps the domain waiter first): they take free GPUs as soon as they hold quota, so a span
    that takes those GPUs delays them too. A gang holding a reservation whose room is ``blocked``
    is left out (``holds_blocked``). At most ``MAX_AHEAD + 1`` waiters from the front, ``key``
    kept last when further back; and ``key``'s index."""
    line, me = outlook.queued.line(key, skip=lambda k: holds_blocked(outlook, k, blocked or {}))
    feed = outlook.quota_waiters
    if me < 0 or feed is None or cluster_queue is None:
        return line, me
    quota = [w for w in feed(flavor, cluster_queue) if w.gpus > 0]
    if not quota:
        return line, me
    tagged = sorted([((-w.priority, w.since, 0, i), w) for i, w in enumerate(line)] +
                    [((-w.priority, w.since, 1, i), w) for i, w in enumerate(quota)], key=lambda t: t[0])
    order = [t for t, _ in tagged]
    at = order.index((-line[me].priority, line[me].since, 0, me))
    merged = [w for _, w in tagged]
    if at > MAX_AHEAD:
        merged = merged[:MAX_AHEAD] + [merged[at]]
        at = MAX_AHEAD
    return merged[:MAX_AHEAD + 1], at


def line_priced(weighed: WaitOrSpan, outlook: Outlook, key: str, snap: Snapshot, level: str | None, span: Decision,
                running: Sequence[Running], now: float, blocked: Mapping[str, int], cluster_queue: str | None = None) -> WaitOrSpan:
    """``weighed`` (a span that won) charged also what ``span`` costs the others in line on the
    flavor, those waiting for quota in ``cluster_queue`` too (None: not them; ``with_quota_waiters``,
    ``span_queue_cost``; the span held for its slowed runtime), and weighed again;
    ``weighed`` itself when that cannot be priced (no runtime or slowdown known, ``key`` not in
    line, nothing admitted)."""
    if weighed.runtime_s is None or weighed.span_slowdown is None or weighed.wait_s is None:
        return weighed
    gpus = span_gpus(span)
    line, me = with_quota_waiters(outlook, key, snap.flavor, cluster_queue, blocked)
    if not gpus or me < 0:
        return weighed
    cost = span_queue_cost(snap, level, line, me, gpus, weighed.runtime_s * max(weighed.span_slowdown, 1.0), weighed.runtime_s,
                           running, outlook.estimator, now, blocked)
    if cost is None:
        return weighed
    w = weighed
    return weigh(w.wait_s, w.wait_error_s, w.domain, w.span_slowdown, w.runtime_s, w.runtime_error_s, w.kind, w.ahead, w.wait_alone_s,
                 cost.seconds, cost.later, cost.counted, w.wait_weight)

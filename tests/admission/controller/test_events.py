"""Events cost bounded memory however many are posted: the repeats remembered are capped, nothing
else is kept per Event sent, and while the API is slow at most ``max_queued`` wait."""

from __future__ import annotations

import gc
import threading
import types
from typing import Any

from admission.controller import EventPoster
from admission.kube import ManualClock, Resource


class Sink:
    """Takes every Event at once (the poster's own memory is what is measured, not a server's)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate
        self.created = 0

    def create(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        if self.gate is not None:
            self.gate.wait(10)
        self.created += 1
        return obj

    def patch(self, *args: Any, **kw: Any) -> dict[str, Any]:
        return {}


_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def reachable(root: object, skip: object) -> int:
    """Objects reachable from ``root`` (classes, modules, functions and ``skip`` not followed)."""
    seen: set[int] = {id(skip)}
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SHARED):
            continue
        seen.add(id(obj))
        stack.extend(gc.get_referents(obj))
    return len(seen)


def workload(i: int) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": f"w{i}", "namespace": "ns", "uid": f"u{i}"}}


def test_posting_many_events_keeps_the_poster_the_same_size() -> None:
    port = Sink()
    poster = EventPoster(port, clock=ManualClock(), instance="test")  # type: ignore[arg-type]
    for i in range(3000):  # past the repeats remembered
        poster.post(workload(i), "Normal", "TopologyPlaced", f"placed {i}")
    size = reachable(poster, port)
    for i in range(3000, 9000):
        poster.post(workload(i), "Normal", "TopologyPlaced", f"placed {i}")
    assert port.created == 9000
    assert reachable(poster, port) <= size


def test_a_slow_api_drops_events_beyond_the_queue_bound() -> None:
    gate = threading.Event()
    port = Sink(gate)
    poster = EventPoster(port, clock=ManualClock(), instance="test", max_queued=50)  # type: ignore[arg-type]
    poster.start()
    try:
        for i in range(500):
            poster.post(workload(i), "Normal", "TopologyPlaced", f"placed {i}")
        assert poster._queue.qsize() <= 50 and poster.dropped >= 449
    finally:
        gate.set()
        poster.flush()
        poster.stop()
    assert port.created + poster.dropped == 500

"""Two Workloads racing for the last free island: one is admitted, one waits, no GPU is given twice."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.admission.fabric import Fabric, planned, run

pytestmark = pytest.mark.apiserver


def one_island_free(fabric: Fabric) -> tuple[int, int]:
    """Fill three of the four islands with bound pods; return the free one."""
    for b, c in ((0, 0), (0, 1), (1, 0)):
        for i in range(2):
            fabric.bind_pod(f"busy-b{b}c{c}n{i}", fabric.node_name(b, c, i), 4)
    return 1, 1


def assert_no_double_booking(fabric: Fabric, names: list[str]) -> None:
    used: dict[str, int] = {}
    for pod in fabric.core.list_namespaced_pod(fabric.ns).items:
        used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + int(pod.spec.containers[0].resources.requests["nvidia.com/gpu"])
    for name in names:
        entry = fabric.entry(name)
        if entry["state"] == "Ready":
            for node, pods in planned(entry).items():
                used[node] = used.get(node, 0) + 4 * pods
    assert all(gpus <= 4 for gpus in used.values()), used


def test_one_admitted_one_waits(fabric: Fabric) -> None:
    fabric.install()
    b, c = one_island_free(fabric)
    fabric.submit("a", [("main", 2, 4)])
    fabric.submit("b", [("main", 2, 4)])
    verdicts = run(fabric.controller())
    assert sorted(v.outcome for v in verdicts) == ["admit", "wait"]
    states = sorted(fabric.entry(n)["state"] for n in ("a", "b"))
    assert states == ["Ready", "Retry"]
    winner = next(n for n in ("a", "b") if fabric.entry(n)["state"] == "Ready")
    assert fabric.entry(winner)["podSetUpdates"][0]["nodeSelector"] == {"nvidia.com/gpu.clique": fabric.clique(b, c)}
    loser = next(v for v in verdicts if v.outcome == "wait")
    assert loser.reserved_gpus == 8  # it saw the winner's reservation
    assert_no_double_booking(fabric, ["a", "b"])


def wait_until(predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_racing_through_the_watch_loop(fabric: Fabric) -> None:
    fabric.install()
    one_island_free(fabric)
    ctrl = fabric.controller()
    ctrl.start()
    try:
        assert ctrl.wait_synced(30)
        submitters = [threading.Thread(target=fabric.submit, args=(n, [("main", 2, 4)])) for n in ("a", "b")]
        for t in submitters:
            t.start()
        for t in submitters:
            t.join(30)
        assert wait_until(lambda: all(fabric.entry(n)["state"] != "Pending" for n in ("a", "b")))
    finally:
        ctrl.stop()
    assert sorted(fabric.entry(n)["state"] for n in ("a", "b")) == ["Ready", "Retry"]
    assert_no_double_booking(fabric, ["a", "b"])
    ctrl.events.flush()
    assert {e.reason for n in ("a", "b") for e in fabric.events_for(n)} == {"TopologyPlaced", "TopologyWaiting"}

"""The waiting line on the real apiserver: who waits on Atoll's check and why in plain words,
draining domains told apart, the held domain read through the queue hints, and the queue gauges."""

from __future__ import annotations

import pytest

from admission.controller import Controller
from admission.queue import Held
from admission.vocabulary import DRAINING
from tests.admission.fabric import BLOCK, CLIQUE, Fabric, run

pytestmark = pytest.mark.apiserver


class Hints:
    """A reservation book holding one domain for one Workload."""

    def __init__(self, uid: str, held: Held, start: float) -> None:
        self.uid, self._held, self.start = uid, held, start

    def held(self, uid: str) -> Held | None:
        return self._held if uid == self.uid else None

    def expected_start(self, uid: str) -> float | None:
        return self.start if uid == self.uid else None

    def held_domains(self, flavor: str) -> int:
        return 1 if flavor == self._held.flavor else 0

    def reservations(self, flavor: str) -> tuple[int, int]:
        return (1, 0) if flavor == self._held.flavor else (0, 0)

    def idle_held_gpus(self, flavor: str) -> int:
        return 4 if flavor == self._held.flavor else 0


def drain_all_but_one_clique(fabric: Fabric) -> list[str]:
    """Every node of b0c0, b0c1 and b1c0 draining; b1c1 open with one node busy."""
    drained = [fabric.node_name(b, c, i) for b, c in ((0, 0), (0, 1), (1, 0)) for i in range(2)]
    for name in drained:
        fabric.core.patch_node(name, {"metadata": {"labels": {DRAINING: "true"}}})
    fabric.bind_pod("busy", fabric.node_name(1, 1, 0), 4)
    return drained


def sample(fabric: Fabric, name: str, labels: dict[str, str]) -> float | None:
    return fabric.metrics.registry.get_sample_value(name, labels)


def test_waiting_line_names_the_drain_in_the_way_and_the_gauges_count_it(fabric: Fabric) -> None:
    fabric.install()
    drain_all_but_one_clique(fabric)
    ctrl = fabric.controller()
    fabric.submit("gang", [("main", 2, 4)])
    fabric.submit("one", [("main", 1, 4)])
    verdicts = run(ctrl)
    assert sorted(v.outcome for v in verdicts) == ["admit", "wait"]
    rows = ctrl.waiting_line()
    assert [r["workload"] for r in rows] == [f"{fabric.ns}/gang"]  # the placed one no longer waits
    (row,) = rows
    assert (row["gpus"], row["band"], row["profile"], row["state"], row["reason"]) == (8, "8-15", "strict", "Retry", "draining")
    assert row["words"] == ["needs 8 GPUs (2 pods of 4) in one gpu.clique; the largest free block is 0 "
                            f"({fabric.ns}-b0/{fabric.ns}-b0c0); it would fit if the 3 draining gpu.clique(s) were open"]
    assert row["held"] is None and row["expected_start"] is None and row["cluster_queue"] == fabric.cq
    assert sample(fabric, "atoll_waiting_workloads_by_band", {"reason": "no-domain", "band": "8-15"}) == 1
    assert sample(fabric, "atoll_draining_nodes", {"flavor": fabric.flavor}) == 6
    assert sample(fabric, "atoll_draining_domains", {"flavor": fabric.flavor, "level": CLIQUE}) == 3
    assert sample(fabric, "atoll_draining_domains", {"flavor": fabric.flavor, "level": BLOCK}) == 1
    assert ctrl.waiting_line(queue="elsewhere") == [] and len(ctrl.waiting_line(queue="lq")) == 1
    assert ctrl.waiting_line(flavor="other-flavor") == [] and len(ctrl.waiting_line(flavor=fabric.flavor)) == 1


def test_waiting_line_without_a_drain_and_with_a_held_domain(fabric: Fabric) -> None:
    fabric.install()
    for b in range(2):
        for c in range(2):
            fabric.bind_pod(f"busy-{b}{c}", fabric.node_name(b, c, 0), 4)
    ctrl: Controller = fabric.controller()
    fabric.submit("gang", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"
    uid = fabric.workload("gang")["metadata"]["uid"]
    now = ctrl.clock.now()
    ctrl.queue_hints = Hints(uid, Held(fabric.flavor, CLIQUE, fabric.clique(1, 1), expected_free_at=now + 35 * 60), now + 40 * 60)
    (row,) = ctrl.waiting_line()
    assert row["reason"] == "no-domain"
    assert row["words"][0].endswith(f"; gpu.clique {fabric.clique(1, 1)} is reserved for it and expected free in ~35 min; "
                                    "expected start in ~40 min")
    assert "largest free block is 4" in row["words"][0] and "draining" not in row["words"][0]
    assert row["held"]["domain"] == fabric.clique(1, 1) and row["expected_start"] is not None
    fabric.finish_pod("busy-11")  # room frees: the decision now would place it
    ctrl.sync()
    (row,) = ctrl.waiting_line()
    assert row["reason"] == "placeable"
    fabric.clock.advance(ctrl.GAUGE_SECONDS)  # the gauges are measured at most this often per flavor
    fabric.submit("one", [("main", 1, 4)])  # a decision after the hints are set measures the held gauges
    run(ctrl)
    assert sample(fabric, "atoll_held_domains", {"flavor": fabric.flavor}) == 1
    assert sample(fabric, "atoll_idle_held_gpus", {"flavor": fabric.flavor}) == 4

"""Pipelined decision writes (``DecisionSettings.write_workers``): the ledger counts a decision
when it is made, so the next decision, made while the write is in flight, sees it; a write that
does not land gives its booking back."""

from __future__ import annotations

import pytest

from admission.controller import DecisionSettings
from tests.admission.controller.test_racing_workloads import assert_no_double_booking, one_island_free
from tests.admission.fabric import Fabric, run

pytestmark = pytest.mark.apiserver


def pipelined(fabric: Fabric, workers: int = 2):  # type: ignore[no-untyped-def]
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(write_workers=workers)})
    return fabric.controller(settings=settings)


def test_two_workloads_decided_back_to_back_both_land(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("a", [("main", 1, 4)])
    fabric.submit("b", [("main", 1, 4)])
    ctrl = pipelined(fabric)
    verdicts = run(ctrl)
    assert [v.outcome for v in verdicts] == ["admit", "admit"]
    assert all(v.written for v in verdicts)
    assert fabric.entry("a")["state"] == fabric.entry("b")["state"] == "Ready"
    assert [r["workload"] for r in fabric.decision_records()] == ["a", "b"]
    assert_no_double_booking(fabric, ["a", "b"])
    assert not ctrl._in_flight


def test_the_next_decision_sees_a_booking_whose_write_is_in_flight(fabric: Fabric) -> None:
    """b is decided before a's write is answered (answers are taken once the queue is empty),
    and still sees a's reservation on the last free island."""
    fabric.install()
    one_island_free(fabric)
    fabric.submit("a", [("main", 2, 4)])
    fabric.submit("b", [("main", 2, 4)])
    verdicts = run(pipelined(fabric))
    assert [v.outcome for v in verdicts] == ["admit", "wait"]
    assert verdicts[1].reserved_gpus == 8
    assert (fabric.entry("a")["state"], fabric.entry("b")["state"]) == ("Ready", "Retry")
    assert_no_double_booking(fabric, ["a", "b"])


def test_a_refused_write_gives_its_booking_back(fabric: Fabric) -> None:
    """a is deleted after the controller read it: its write is refused (NotFound), and the
    island it booked is free again for the next Workload."""
    fabric.install()
    one_island_free(fabric)
    fabric.submit("a", [("main", 2, 4)])
    ctrl = pipelined(fabric)
    ctrl.sync()
    uid = fabric.workload("a")["metadata"]["uid"]
    fabric.custom.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", fabric.ns, "workloads", "a")
    verdicts = ctrl.process()
    assert [v.outcome for v in verdicts] == ["admit"] and not verdicts[0].written
    assert uid not in {r.uid for r in ctrl.ledger.reservations()}
    fabric.submit("c", [("main", 2, 4)])
    verdicts = run(ctrl)
    assert [(v.outcome, v.reserved_gpus) for v in verdicts] == [("admit", 0)]
    assert fabric.entry("c")["state"] == "Ready"


def test_a_write_refused_with_409_is_decided_again_and_lands(fabric: Fabric) -> None:
    """a changed after it was read: its pipelined write conflicts, its booking is given back,
    and it is decided again on its current state; b, decided meanwhile, waited for a's island."""
    fabric.install()
    one_island_free(fabric)
    fabric.submit("a", [("main", 2, 4)])
    fabric.submit("b", [("main", 2, 4)])
    ctrl = pipelined(fabric)
    ctrl.sync()
    fabric.custom.patch_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", fabric.ns, "workloads", "a",
                                                 {"metadata": {"labels": {"touched": "yes"}}})  # the cached copy is stale now
    ctrl.process()
    assert (fabric.entry("a")["state"], fabric.entry("b")["state"]) == ("Ready", "Retry")
    assert ctrl.metrics.registry.get_sample_value("atoll_api_write_failures_total", {"error": "Conflict"}) == 1
    assert_no_double_booking(fabric, ["a", "b"])

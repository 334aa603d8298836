"""On the real apiserver: Kueue's TAS pod-template annotations reach the decision. A slice size
that does not divide the count is Rejected naming both numbers; slices are placed whole; an
annotation Atoll reads but does not honour is said in the check message, the record and a
Warning Event on the Workload."""

from __future__ import annotations

import pytest

from tests.admission.fabric import CLIQUE, Fabric, planned, run

pytestmark = pytest.mark.apiserver

SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"


def test_a_slice_size_that_does_not_divide_the_count_is_rejected_with_both_numbers(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("sliced", [("main", 3, 4)], podset_annotations={"main": {SLICE_LEVEL: CLIQUE, SLICE_SIZE: "2"}})
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "reject"
    assert "3" in verdict.message and "2" in verdict.message and fabric.entry("sliced")["state"] == "Rejected"


def test_slices_of_a_clique_are_placed_whole(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("sliced", [("main", 2, 4)], podset_annotations={"main": {SLICE_LEVEL: CLIQUE, SLICE_SIZE: "2"}})
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit", verdict.message
    nodes = planned(fabric.entry("sliced"))
    assert len({n.rsplit("n", 1)[0] for n in nodes}) == 1  # both pods of the slice in one clique
    (record,) = fabric.decision_records()
    (sl,) = record["placement"][0]["slices"]  # the record names the slice, its domain and nodes
    assert sl["index"] == 0 and sl["level"] == CLIQUE and sl["pods"] == 2 and set(sl["nodes"]) == set(nodes)
    assert sl["held"]  # one slice: the PodSet's nodeSelector is the slice's own clique


def test_an_annotation_read_but_not_honoured_is_said(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("spread", [("main", 1, 4)], podset_annotations={"main": {"kueue.x-k8s.io/podset-topology-spreading": "true"}})
    (verdict,) = run(fabric.controller())
    assert any("podset-topology-spreading" in n for n in verdict.notes), verdict.notes
    assert "podset-topology-spreading" in fabric.entry("spread")["message"]


def test_an_annotation_not_honoured_raises_a_warning_event_naming_it_once_per_decision(fabric: Fabric) -> None:
    fabric.install()
    unknown = "kueue.x-k8s.io/podset-future-knob"
    fabric.submit("spread", [("main", 1, 4), ("sidecar", 1, 0)],
                  podset_annotations={"main": {"kueue.x-k8s.io/podset-topology-spreading": "true", unknown: "on"}})
    ctrl = fabric.controller()
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit"
    assert any("podSets[sidecar]: requests no" in n for n in verdict.notes)
    warnings = [e for e in fabric.events_for("spread") if e.reason == "AnnotationNotHonoured"]
    assert len(warnings) == 1 and warnings[0].type == "Warning" and warnings[0].count == 1
    assert "kueue.x-k8s.io/podset-topology-spreading" in warnings[0].message and unknown in warnings[0].message
    assert "sidecar" not in warnings[0].message  # only annotation notes, not the decision's other notes
    (record,) = fabric.decision_records()
    assert any(unknown in n for n in record["notes"])
    assert run(ctrl) == []  # decided and written: nothing new to say
    assert len([e for e in fabric.events_for("spread") if e.reason == "AnnotationNotHonoured"]) == 1


def test_a_rejected_workload_still_names_the_annotations_it_would_not_have_honoured(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("bad", [("main", 3, 4)], podset_annotations={"main": {SLICE_LEVEL: CLIQUE, SLICE_SIZE: "2",
                                                                         "kueue.x-k8s.io/podset-topology-spreading": "true"}})
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "reject"
    reasons = {e.reason: e for e in fabric.events_for("bad")}
    assert set(reasons) == {"TopologyRejected", "AnnotationNotHonoured"}
    assert "kueue.x-k8s.io/podset-topology-spreading" in reasons["AnnotationNotHonoured"].message


def test_a_long_list_of_annotations_not_honoured_is_cut_to_the_event_limit(fabric: Fabric) -> None:
    fabric.install()
    many = {f"kueue.x-k8s.io/podset-knob-{i:02d}": "x" for i in range(40)}
    fabric.submit("knobs", [("main", 1, 4)], podset_annotations={"main": many})
    ctrl = fabric.controller()
    run(ctrl)
    (warning,) = [e for e in fabric.events_for("knobs") if e.reason == "AnnotationNotHonoured"]
    limit = ctrl.settings.decisions.event_message_max_chars
    assert len(warning.message) == limit and warning.message.endswith("…")
    assert "kueue.x-k8s.io/podset-knob-00" in warning.message

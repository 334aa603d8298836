"""On the real apiserver: Kueue's TAS pod-template annotations reach the decision. A slice size
that does not divide the count is Rejected naming both numbers; slices are placed whole; an
annotation Atoll reads but does not honour is said in the check message and the record."""

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


def test_an_annotation_read_but_not_honoured_is_said(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("spread", [("main", 1, 4)], podset_annotations={"main": {"kueue.x-k8s.io/podset-topology-spreading": "true"}})
    (verdict,) = run(fabric.controller())
    assert any("podset-topology-spreading" in n for n in verdict.notes), verdict.notes
    assert "podset-topology-spreading" in fabric.entry("spread")["message"]

"""Slices in the decision record: whether the enforcement written holds each one in its domain."""

from __future__ import annotations

from admission.controller._records import slice_records
from topology import SlicePlacement

LEVELS = ["network.example.com/su", "nvidia.com/gpu.clique", "kubernetes.io/hostname"]
CLIQUE = LEVELS[1]
TWO = [SlicePlacement(0, CLIQUE, ("u0", "r0"), ("r0-n0", "r0-n1"), (1, 1)), SlicePlacement(1, CLIQUE, ("u0", "r1"), ("r1-n0", "r1-n1"), (1, 1))]


def test_a_selector_above_the_slice_level_holds_no_slice_under_domain_enforcement() -> None:
    recs = slice_records(TWO, {"network.example.com/su": "u0"}, LEVELS, exact=False)
    assert [(r["index"], r["domain"], r["pods"], r["nodes"], r["held"]) for r in recs] == [
        (0, ["u0", "r0"], 2, {"r0-n0": 1, "r0-n1": 1}, False), (1, ["u0", "r1"], 2, {"r1-n0": 1, "r1-n1": 1}, False)]
    assert "network.example.com/su=u0 spans several slices' domains" in recs[0]["held_by"]


def test_a_selector_at_or_below_the_slice_level_holds_the_slice() -> None:
    for selector in ({CLIQUE: "r0"}, {"kubernetes.io/hostname": "r0-n0"}):
        (rec,) = slice_records(TWO[:1], selector, LEVELS, exact=False)
        assert rec["held"] and rec["held_by"].startswith("nodeSelector ")


def test_exact_enforcement_holds_every_slice_whatever_the_selector() -> None:
    recs = slice_records(TWO, {}, LEVELS, exact=True)
    assert all(r["held"] and r["held_by"] == "planned nodes (exact)" for r in recs)
    assert not any(r["held"] for r in slice_records(TWO, {}, LEVELS, exact=False))


def test_a_record_renders_as_dataclasses_asdict_would() -> None:
    """The record's own conversion skips asdict's deep copies; the JSON an auditor reads is the same."""
    import dataclasses
    import json

    from admission.controller._records import DecisionRecord, PodSetRecord, WhyNotRecord

    placement = PodSetRecord("workers", 2, 4, {"r0-n0": 1, "r0-n1": 1}, CLIQUE, ["u0", "r0"], 1, CLIQUE, 0.98, 1.0, 1800.0,
                             {CLIQUE: "r0"}, slice_records(TWO[:1], {CLIQUE: "r0"}, LEVELS, exact=False))
    rec = DecisionRecord("d1", "2026-11-24T00:00:00Z", "w", "ns", "uid", "lq", "cq", "gb200", "strict", "", "admit", "Ready", "placed",
                         placement=(placement,), why_not=(WhyNotRecord("workers", CLIQUE, ["u0", "r1"], 1, 2, "too small"),),
                         notes=("a note",), controller="replica-a", lease_term=3)
    assert json.dumps(rec.as_dict(), sort_keys=True) == json.dumps(dataclasses.asdict(rec), sort_keys=True)
    assert rec.as_dict()["placement"][0]["slices"][0]["domain"] == ["u0", "r0"]

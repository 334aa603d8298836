"""Kueue's TAS pod-template annotations read into engine hints: what is honoured, what Kueue
forbids (an error naming the annotation) and what is only noted."""

from __future__ import annotations

import pytest

from policies import TopologyHints, group_problems, read_topology_annotations
from topology import SliceLayer

K = "kueue.x-k8s.io/podset-"
CLIQUE = "nvidia.com/gpu.clique"


def read(ann: dict[str, str], count: int | None = 32) -> TopologyHints:
    return read_topology_annotations(ann, podset="workers", count=count)


def test_slice_annotations_become_one_layer() -> None:
    h = read({K + "slice-required-topology": CLIQUE, K + "slice-size": "16", K + "preferred-topology": "network.example.com/su"})
    assert h.slices == (SliceLayer(CLIQUE, 16),) and h.preferred_topology == "network.example.com/su" and not h.errors


def test_multi_layer_constraints_parse_in_order() -> None:
    h = read({K + "slice-required-topology-constraints": '[{"topology": "su", "size": 32}, {"topology": "rack", "size": 8}]'})
    assert h.slices == (SliceLayer("su", 32), SliceLayer("rack", 8)) and not h.errors


@pytest.mark.parametrize(("ann", "message"), [
    ({K + "required-topology": CLIQUE, K + "preferred-topology": CLIQUE}, "must not contain more than one topology annotation"),
    ({K + "unconstrained-topology": "yes"}, "podset-unconstrained-topology]: must be a boolean value, got 'yes'"),
    ({K + "slice-required-topology": CLIQUE}, "podset-slice-size]: must be set when"),
    ({K + "slice-size": "4"}, "podset-slice-size]: may not be set when"),
    ({K + "slice-required-topology": CLIQUE, K + "slice-size": "four"}, "must be a numeric value, got 'four'"),
    ({K + "slice-required-topology": CLIQUE, K + "slice-size": "0"}, "must be greater than or equal to 1"),
    ({K + "slice-required-topology": CLIQUE, K + "slice-size": "64"}, "64 must not be greater than the PodSet's count 32"),
    ({K + "slice-required-topology-constraints": "[{"}, "must be a valid JSON array"),
    ({K + "slice-required-topology-constraints": "[]"}, "between 1 and 3 entries, got 0"),
    ({K + "slice-required-topology-constraints": '[{"topology": "a", "size": 0}]'}, "constraints][0].size: expected a number ≥ 1, got 0"),
    ({K + "slice-required-topology-constraints": '[{"topology": "a", "size": "many"}]'}, "constraints][0].size: expected a whole number, got 'many'"),
    ({K + "slice-required-topology-constraints": '[{"topology": "a", "size": 8}, {"topology": "b", "size": 3}]'},
     "[1].size: 3 must evenly divide the parent layer size 8"),
    ({K + "slice-required-topology-constraints": '[{"topology": "a", "size": 8}, {"topology": "a", "size": 4}]'},
     "[1].topology: a is also at index 0"),
    ({K + "slice-required-topology-constraints": '[{"topology": "a", "size": 8}]', K + "slice-size": "8"},
     "may not be set when kueue.x-k8s.io/podset-slice-size is specified"),
    ({K + "group-name": "lws"}, "may not be set when neither"),
    ({K + "group-name": "42", K + "required-topology": CLIQUE}, "must not be a number, got '42'"),
    ({K + "group-name": "g", K + "required-topology": CLIQUE, K + "slice-required-topology": CLIQUE, K + "slice-size": "4"},
     "group-name]: may not be set when kueue.x-k8s.io/podset-slice-size"),
    ({"atoll.dev/balanced-placement": "maybe"}, "balanced-placement]: must be a boolean value"),
])
def test_what_kueue_forbids_is_an_error_naming_the_annotation(ann: dict[str, str], message: str) -> None:
    h = read(ann)
    assert any(message in e for e in h.errors), h.errors
    assert all(e.startswith("podSets[workers] annotation") for e in h.errors)


def test_unconstrained_false_asks_for_nothing_and_true_for_any_nodes() -> None:
    assert not read({K + "unconstrained-topology": "false"}).unconstrained
    assert read({K + "unconstrained-topology": "True"}).unconstrained


def test_unsupported_annotations_are_noted_never_dropped() -> None:
    h = read({K + "topology-spreading": "serving", K + "brand-new": "1", "kueue.x-k8s.io/queue-name": "q"})
    assert not h.errors
    assert len(h.notes) == 2
    assert "podset-topology-spreading]: not honoured" in h.notes[0]
    assert "podset-brand-new]: not a topology annotation Atoll knows; ignored" in h.notes[1]


def test_groups_follow_kueues_rules_across_podsets() -> None:
    ann = {K + "required-topology": CLIQUE, K + "group-name": "lws"}
    leader, workers = read(ann, 1), read(ann, 8)
    assert group_problems([("leader", 1, leader), ("workers", 8, workers)]) == []
    assert "at least one PodSet of a group must have 1 pod, got 2 and 8" in group_problems([("a", 2, leader), ("b", 8, workers)])[0]
    other = read({K + "preferred-topology": CLIQUE, K + "group-name": "lws"}, 8)
    assert "must ask for the same" in group_problems([("leader", 1, leader), ("workers", 8, other)])[0]
    assert "exactly 2 PodSets, got 3" in group_problems([("a", 1, leader), ("b", 8, workers), ("c", 8, workers)])[0]


def test_annotation_notes_picks_the_kueue_annotation_notes_out_of_a_decisions_notes() -> None:
    from policies import annotation_notes

    hints = read_topology_annotations({"kueue.x-k8s.io/podset-topology-spreading": "true", "kueue.x-k8s.io/podset-knob": "1",
                                       "example.com/other": "x"}, podset="main")
    others = ["podSets[main]: planned nodes exceed 4096 characters even compressed and are not recorded",
              "podSets[side]: requests no nvidia.com/gpu; needs no placement"]
    assert len(hints.notes) == 2
    assert annotation_notes([others[0], *hints.notes, others[1]]) == list(hints.notes)

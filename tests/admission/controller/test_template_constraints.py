"""Each PodSet's own nodeSelector and required node affinity restrict that PodSet's candidates
only: parsing (errors name the field), Kubernetes' matching rules, the engine on hand-built
snapshots, and the controller on the real apiserver."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admission.controller import WorkloadError, parse_workload
from policies import PodSetSpec, Profile, decide
from topology import (
    Level,
    NodeConstraint,
    NodeInfo,
    NodeRequirement,
    PlacementRequest,
    PodSetRequest,
    ResourceVector,
    Snapshot,
    find_placement,
)

AFF = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _podset(name: str, **spec: Any) -> dict[str, Any]:
    return {"name": name, "count": 2, "template": {"spec": {
        "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": 4}}}], **spec}}}


def _workload(*podsets: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "w", "namespace": "ns"}, "spec": {"queueName": "lq", "podSets": list(podsets)}}


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}}


# ---------------------------------------------------------------------- parsing


def test_selector_and_affinity_become_the_podsets_own_constraint() -> None:
    view = parse_workload(_workload(
        _podset("a", nodeSelector={"pool": "x"}),
        _podset("b", **_affinity({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["y", "z"]},
                                                        {"key": "gen", "operator": "Gt", "values": ["3"]}]},
                                 {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]})),
        _podset("c")))
    a, b, c = view.podsets
    assert a.node_constraint == NodeConstraint((("pool", "x"),), None)
    assert b.node_constraint == NodeConstraint((), ((NodeRequirement("pool", "In", ("y", "z")), NodeRequirement("gen", "Gt", ("3",))),
                                                    (NodeRequirement("metadata.name", "In", ("n9",), field=True),)))
    assert c.node_constraint is None


@pytest.mark.parametrize(
    ("term", "message"),
    [
        ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}, {"key": "pool", "operator": "Near"}]},
         f"spec.podSets[0].template.spec.{AFF}.nodeSelectorTerms[0].matchExpressions[1].operator: 'Near' is not one of In, NotIn"),
        ({"matchExpressions": [{"key": "pool", "operator": "In"}]},
         "nodeSelectorTerms[0].matchExpressions[0].values: must be non-empty when operator is In"),
        ({"matchExpressions": [{"key": "pool", "operator": "Exists", "values": ["x"]}]},
         "matchExpressions[0].values: must be empty when operator is Exists"),
        ({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["1", "2"]}]},
         "matchExpressions[0].values: must have exactly one value when operator is Gt"),
        ({"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["²"]}]},
         "matchExpressions[0].values[0]: '²' is not an integer (operator Lt)"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "matchExpressions[0].key: required"),
        ({"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["x"]}]},
         "nodeSelectorTerms[0].matchFields[0].key: 'metadata.labels' is not a supported field"),
        ({"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}, "matchFields[0].operator: 'Exists' is not In or NotIn"),
        ({"matchExpressions": {"key": "pool"}}, "nodeSelectorTerms[0].matchExpressions: expected a list, got a mapping"),
    ],
)
def test_bad_affinity_names_the_field(term: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError) as err:
        parse_workload(_workload(_podset("a", **_affinity(term))))
    assert message in str(err.value)


def test_affinity_without_terms_and_bad_selector_values_name_the_field() -> None:
    with pytest.raises(WorkloadError, match=r"requiredDuringSchedulingIgnoredDuringExecution\.nodeSelectorTerms: must have at least one term"):
        parse_workload(_workload(_podset("a", **_affinity())))
    with pytest.raises(WorkloadError, match=r"spec\.podSets\[0\]\.template\.spec\.nodeSelector\[pool\]: expected a string, got 3"):
        parse_workload(_workload(_podset("a", nodeSelector={"pool": 3})))


# ---------------------------------------------------------------------- Kubernetes' matching rules


@pytest.mark.parametrize(
    ("req", "labels", "want"),
    [
        (NodeRequirement("pool", "In", ("x", "y")), {"pool": "y"}, True),
        (NodeRequirement("pool", "In", ("x",)), {}, False),
        (NodeRequirement("pool", "NotIn", ("x",)), {}, True),  # an absent label is "not in"
        (NodeRequirement("pool", "NotIn", ("x",)), {"pool": "x"}, False),
        (NodeRequirement("pool", "Exists"), {"pool": ""}, True),
        (NodeRequirement("pool", "DoesNotExist"), {"pool": ""}, False),
        (NodeRequirement("gen", "Gt", ("3",)), {"gen": "4"}, True),
        (NodeRequirement("gen", "Gt", ("3",)), {"gen": "3"}, False),
        (NodeRequirement("gen", "Lt", ("3",)), {"gen": "-1"}, True),
        (NodeRequirement("gen", "Gt", ("3",)), {"gen": "h100"}, False),  # not an integer: no match
        (NodeRequirement("gen", "Gt", ("3",)), {"gen": "٤"}, False),  # non-ASCII digit: not an integer
        (NodeRequirement("gen", "Lt", ("3",)), {}, False),
    ],
)
def test_requirement_operators(req: NodeRequirement, labels: dict[str, str], want: bool) -> None:
    assert req.matches("n1", labels) is want


def test_terms_are_ored_requirements_anded_and_an_empty_term_matches_nothing() -> None:
    pool_x = NodeRequirement("pool", "In", ("x",))
    gen = NodeRequirement("gen", "Gt", ("2",))
    c = NodeConstraint((), ((pool_x, gen), (NodeRequirement("metadata.name", "In", ("special",), field=True),)))
    assert c.matches("n", {"pool": "x", "gen": "3"}) and not c.matches("n", {"pool": "x", "gen": "2"})
    assert c.matches("special", {}) and not c.matches("other", {})
    assert not NodeConstraint((), ((),)).matches("n", {"pool": "x"})
    both = NodeConstraint((("zone", "a"),), ((pool_x,),))  # nodeSelector and affinity must both hold
    assert both.matches("n", {"zone": "a", "pool": "x"}) and not both.matches("n", {"zone": "b", "pool": "x"})


# ---------------------------------------------------------------------- the engine


def _snapshot() -> Snapshot:
    """Two islands of 2 nodes × 4 GPUs; island i0 is pool x, island i1 pool y; node gens 1..4."""
    nodes = [NodeInfo(f"n{i}", {"island": f"i{i // 2}", "pool": "xy"[i // 2], "gen": str(i + 1)}, ResourceVector(4, 64000, 512000, 110))
             for i in range(4)]
    return Snapshot("gpu", [Level("island", 900.0)], nodes)


def _pools(placement: Any) -> dict[str, set[str]]:
    return {ps.name: set(ps.nodes) for ps in placement.podsets}


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_two_podsets_with_different_pools_each_land_only_in_their_pool(backend: str) -> None:
    # Listed so that without the per-PodSet mask the first PodSet would take pool x's island
    # (best fit by path), and the second the other island: "y" first proves the mask is applied.
    req = PlacementRequest((
        PodSetRequest("wants-y", 2, ResourceVector(gpu=4), node_constraint=NodeConstraint((("pool", "y"),))),
        PodSetRequest("wants-x", 2, ResourceVector(gpu=4), node_constraint=NodeConstraint((("pool", "x"),))),
    ))
    placement = find_placement(_snapshot(), req, backend=backend)  # type: ignore[arg-type]
    assert placement.fits and _pools(placement) == {"wants-y": {"n2", "n3"}, "wants-x": {"n0", "n1"}}


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_affinity_mask_is_per_podset(backend: str) -> None:
    newest = NodeConstraint((), ((NodeRequirement("gen", "Gt", ("2",)),),))  # n2, n3
    req = PlacementRequest((
        PodSetRequest("picky", 1, ResourceVector(gpu=4), node_constraint=newest),
        PodSetRequest("any", 3, ResourceVector(gpu=4)),
    ))
    placement = find_placement(_snapshot(), req, backend=backend)  # type: ignore[arg-type]
    assert placement.fits
    assert _pools(placement)["picky"] <= {"n2", "n3"} and len(_pools(placement)["any"]) == 3


def test_a_constraint_nothing_matches_waits_with_the_reason_and_is_not_rejected() -> None:
    nowhere = PodSetSpec("main", 1, ResourceVector(gpu=4), node_constraint=NodeConstraint((("pool", "z"),)))
    d = decide(_snapshot(), [nowhere], profile_name="strict", profile=Profile(requiredLevel="island"), now=0.0)
    assert d.outcome == "wait"  # an admin may label a pool z tomorrow: never_fits ignores labels
    assert "on the 0 of 4 nodes its pod template allows (pool=z)" in d.message


def test_shared_snapshot_masks_follow_label_changes() -> None:
    snap = _snapshot()
    only_z = NodeConstraint((("pool", "z"),))
    assert int(snap.allowed_by(only_z).sum()) == 0
    relabelled = NodeInfo("n0", {"island": "i0", "pool": "z", "gen": "1"}, ResourceVector(4, 64000, 512000, 110))
    assert snap.update_node(relabelled)
    assert snap.allowed_by(only_z).tolist() == [1, 0, 0, 0]


def test_decide_applies_each_podsets_template() -> None:
    view = parse_workload(_workload(_podset("a", nodeSelector={"pool": "y"}), _podset("b", nodeSelector={"pool": "x"})))
    d = decide(_snapshot(), view.podsets, profile_name="strict", profile=Profile(requiredLevel="island"), now=0.0)
    assert d.outcome == "admit" and d.placement is not None
    assert _pools(d.placement) == {"a": {"n2", "n3"}, "b": {"n0", "n1"}}


# ---------------------------------------------------------------------- the controller, on the real apiserver


@pytest.mark.apiserver
def test_controller_places_each_podset_in_its_own_pool(fabric: Any) -> None:
    from tests.admission.fabric import CLIQUE, planned, run
    from tests.kube_objects import workload

    fabric.install(nodes=False)
    nodes = fabric.add_nodes()
    for name in nodes:  # block 0 is pool x, block 1 pool y
        pool = "x" if "-b0c" in name else "y"
        fabric.core.patch_node(name, {"metadata": {"labels": {"example.com/pool": pool}}})
    body = workload(fabric.ns, "pools", [("on-y", 2, 4), ("on-x", 2, 4)])
    sets = body["spec"]["podSets"]
    sets[0]["template"]["spec"]["nodeSelector"] = {"example.com/pool": "y"}
    sets[1]["template"]["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "example.com/pool", "operator": "In", "values": ["x"]}]}]}}}
    fabric.kueue.create(copy.deepcopy(body))
    fabric.kueue.reserve_quota(fabric.ns, "pools", fabric.cq, fabric.flavor)
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("pools")
    assert verdict.outcome == "admit", entry["message"]
    on_y, on_x = planned(entry, "on-y"), planned(entry, "on-x")
    assert on_y and all("-b1c" in n for n in on_y)
    assert on_x and all("-b0c" in n for n in on_x)
    selectors = {u["name"]: u["nodeSelector"][CLIQUE] for u in entry["podSetUpdates"]}
    assert "-b1c" in selectors["on-y"] and "-b0c" in selectors["on-x"]

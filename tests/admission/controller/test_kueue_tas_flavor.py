"""On a flavor that uses Kueue's own TAS (``spec.topologyName``), Kueue assigns before any check:
Atoll only validates that assignment against the profile (accept or Retry), never rewrites it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.admission.fabric import BLOCK, CLIQUE, GROUP, VERSION, Fabric, run
from tests.kube_objects import GPU, now_rfc3339, workload

pytestmark = pytest.mark.apiserver


def use_kueue_tas(fabric: Fabric) -> None:
    rf = fabric.custom.get_cluster_custom_object(GROUP, VERSION, "resourceflavors", fabric.flavor)
    rf["spec"]["topologyName"] = fabric.topology
    fabric.custom.replace_cluster_custom_object(GROUP, VERSION, "resourceflavors", fabric.flavor, rf)


def reserve_with_assignment(fabric: Fabric, name: str, cliques: list[str]) -> None:
    """Kueue's TAS result: one pod in each of ``cliques`` (all in block 0)."""
    t = now_rfc3339()
    assignment: dict[str, Any] = {"levels": [BLOCK, CLIQUE], "slices": [{
        "domainCount": len(cliques), "podCounts": {"universal": 1},
        "valuesPerLevel": [{"universal": f"{fabric.ns}-b0"}, {"individual": {"roots": cliques}}]}]}
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": name, "namespace": fabric.ns}, "status": {
        "admission": {"clusterQueue": fabric.cq, "podSetAssignments": [{
            "name": "main", "flavors": {GPU: fabric.flavor}, "count": len(cliques), "resourceUsage": {GPU: str(4 * len(cliques))},
            "topologyAssignment": assignment}]},
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "reserved", "lastTransitionTime": t}],
        "admissionChecks": [{"name": fabric.check, "state": "Pending", "message": "pending", "lastTransitionTime": t}]}}
    fabric.custom.patch_namespaced_custom_object_status(GROUP, VERSION, fabric.ns, "workloads", name, body, field_manager="kueue",
                                                        force=True, _content_type="application/apply-patch+yaml")


def test_assignment_inside_one_island_is_accepted_as_is(fabric: Fabric) -> None:
    fabric.install()
    use_kueue_tas(fabric)
    fabric.kueue.create(workload(fabric.ns, "one", [("main", 2, 4)]))
    reserve_with_assignment(fabric, "one", [fabric.clique(0, 0), fabric.clique(0, 0)])
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("one")
    assert verdict.outcome == "admit" and entry["state"] == "Ready" and "podSetUpdates" not in entry
    assert "Kueue's TAS assignment meets profile strict" in entry["message"]


def test_assignment_across_islands_breaks_a_strict_profile(fabric: Fabric) -> None:
    fabric.install()
    use_kueue_tas(fabric)
    fabric.kueue.create(workload(fabric.ns, "two", [("main", 2, 4)]))
    reserve_with_assignment(fabric, "two", [fabric.clique(0, 0), fabric.clique(0, 1)])
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("two")
    assert verdict.outcome == "wait" and entry["state"] == "Retry" and entry["requeueAfterSeconds"] == 30
    assert f"across 2 {CLIQUE} domains; profile strict requires one" in entry["message"]

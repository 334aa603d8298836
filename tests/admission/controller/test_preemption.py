"""Preemption that clears a domain, on the real apiserver: a higher-priority gang that fits
nowhere gets one clique cleared of lower-priority Workloads (Atoll's check to Retry on each victim,
admitted as it is), the clique is held for it while they leave, and the record names them; a dry
run only records; the ClusterQueue's policy (Kueue's default: Never) is respected, and a profile
that does not turn preemption on evicts nobody."""

from __future__ import annotations

from typing import Any

import pytest

from tests.admission.fabric import BLOCK, GROUP, VERSION, Fabric, planned, profiles_doc, run
from tests.kube_objects import cluster_queue, workload

pytestmark = pytest.mark.apiserver


def setup(fabric: Fabric, mode: str | None, within: str | None = "LowerPriority") -> Any:
    doc = profiles_doc(fabric.flavor, fabric.topology)
    if mode is not None:  # None: the profile does not say, so preemption is off
        doc["profiles"]["strict"]["preemptDomain"] = mode
    fabric.install(doc)
    if within is not None:
        fabric.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", fabric.cq, {"spec": {"preemption": {"withinClusterQueue": within}}})
    ctrl = fabric.controller()
    for i in range(4):  # every clique full of priority-0 work
        submit(fabric, f"low-{i}", 2, 0)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 4
    return ctrl


def submit(fabric: Fabric, name: str, pods: int, priority: int) -> None:
    manifest = workload(fabric.ns, name, [("main", pods, 4)])
    manifest["spec"]["priority"] = priority
    fabric.kueue.create(manifest)
    fabric.kueue.reserve_quota(fabric.ns, name, fabric.cq, fabric.flavor)


def notes(fabric: Fabric, name: str) -> list[str]:
    return [n for r in fabric.decision_records() if r["workload"] == name for n in r.get("notes") or []]


def test_a_gang_clears_one_clique_its_victims_are_retried_and_the_clique_waits_for_it(fabric: Fabric) -> None:
    ctrl = setup(fabric, "on")
    where = {f"low-{i}": set(planned(fabric.entry(f"low-{i}"))) for i in range(4)}
    submit(fabric, "gang", 2, 100)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"
    (note,) = [n for n in notes(fabric, "gang") if n.startswith("preemption")]
    states = {f"low-{i}": fabric.entry(f"low-{i}")["state"] for i in range(4)}
    (victim,) = [k for k, s in states.items() if s == "Retry"]  # one clique's worth, admitted Workload, check to Retry
    assert f"by evicting {fabric.ns}/{victim} (8 GPUs" in note and "highest priority 0" in note
    assert fabric.entry(victim)["message"].startswith("Preempted by Atoll to clear gpu.clique ") and f"for Workload {fabric.ns}/gang" in fabric.entry(victim)["message"]
    cleared = where[victim]
    (held,) = ctrl.decider.holds[fabric.flavor].values()
    assert cleared <= set(held)
    fabric.requeue(victim)  # Kueue evicts it, releases its quota and reserves again
    (again,) = run(ctrl)
    assert again.outcome == "wait"  # its old clique is free but held for the gang
    fabric.requeue("gang")
    placed = run(ctrl)
    assert [v.outcome for v in placed] == ["admit"] and set(planned(fabric.entry("gang"))) == cleared
    assert not any(ctrl.decider.holds.values())  # placed: the hold is over
    assert sum(1 for n in notes(fabric, "gang") if n.startswith("preemption")) == 1  # one plan, not one per retry


def test_a_dry_run_records_the_plan_and_evicts_nobody(fabric: Fabric) -> None:
    ctrl = setup(fabric, "dry-run")
    submit(fabric, "gang", 2, 100)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait"
    (note,) = [n for n in notes(fabric, "gang") if n.startswith("preemption")]
    assert note.startswith("preemption (dry run, nothing evicted): clears gpu.clique ")
    assert all(fabric.entry(f"low-{i}")["state"] == "Ready" for i in range(4)) and not any(ctrl.decider.holds.values())


@pytest.mark.parametrize(("mode", "within"), [("on", None), ("on", "Never"), (None, "LowerPriority"), ("off", "LowerPriority")])
def test_the_cluster_queues_policy_is_respected_and_a_profile_that_does_not_turn_preemption_on_evicts_nobody(
        fabric: Fabric, mode: str | None, within: str | None) -> None:
    ctrl = setup(fabric, mode, within)  # Kueue's default, Never said outright; a queue that allows it, under a profile that does not
    submit(fabric, "gang", 2, 100)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait" and not [n for n in notes(fabric, "gang") if n.startswith("preemption")]
    assert all(fabric.entry(f"low-{i}")["state"] == "Ready" for i in range(4))


def test_under_domain_enforcement_no_selector_written_while_a_clique_is_held_reaches_it(fabric: Fabric) -> None:
    # 2 blocks × 3 cliques × 2 nodes, every node running a priority-0 one-pod Workload; a gang
    # clears one clique. A span over the other two cliques of its block would get that block's
    # selector, and kube-scheduler could bind its pods in the cleared clique as the victims go
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["preemptDomain"] = "on"
    doc["profiles"]["elastic"]["relaxAfterSeconds"] = 0  # it may span at once
    fabric.install(doc, nodes=False)
    fabric.add_nodes(blocks=2, cliques=3, per_clique=2)
    fabric.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", fabric.cq, {"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}})
    ctrl = fabric.controller()
    for i in range(12):
        submit(fabric, f"low-{i}", 1, 0)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 12
    on = {f"low-{i}": next(iter(planned(fabric.entry(f"low-{i}")))) for i in range(12)}
    for name, node in on.items():  # their pods bound where planned: nothing owed
        fabric.bind_pod(f"{name}-0", node, 4, decision_id=fabric.entry(name)["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])
    submit(fabric, "gang", 2, 100)
    assert [v.outcome for v in run(ctrl)] == ["wait"]
    (held,) = ctrl.decider.holds[fabric.flavor].values()
    ((block, clique),) = {(b, fabric.clique(b, c)) for b in range(2) for c in range(3) for n in held if n.startswith(f"{fabric.clique(b, c)}n")}

    def finish_one_in(prefix: str) -> None:
        name = next(w for w, n in sorted(on.items()) if n.startswith(prefix) and fabric.entry(w)["state"] == "Ready")
        fabric.finish(name)
        fabric.finish_pod(f"{name}-0")
        on.pop(name)

    others = [fabric.clique(block, c) for c in range(3) if fabric.clique(block, c) != clique]
    for other in others:  # one node free in each other clique of the held block: only a span there fits
        finish_one_in(other)
    manifest = workload(fabric.ns, "wide", [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}})
    fabric.kueue.create(manifest)
    fabric.kueue.reserve_quota(fabric.ns, "wide", fabric.cq, fabric.flavor)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait", verdict.message
    assert f"nodeSelector domain ({BLOCK}={fabric.ns}-b{block}) that holds nodes cleared for another gang" in verdict.message
    far = 1 - block
    for c in range(2):  # and one in two cliques of the other block: the span is taken there
        finish_one_in(fabric.clique(far, c))
    fabric.requeue("wide")
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit", verdict.message
    (update,) = fabric.entry("wide")["podSetUpdates"]
    assert update["nodeSelector"] == {BLOCK: f"{fabric.ns}-b{far}"}
    assert all(n.startswith(f"{fabric.ns}-b{far}c") for n in planned(fabric.entry("wide")))
    fabric.custom.delete_namespaced_custom_object(GROUP, VERSION, fabric.ns, "workloads", "gang")  # its hold ends with it (the apiserver is shared)


def test_a_gang_reclaims_from_another_cluster_queue_of_its_cohort_only_while_that_one_borrows(fabric: Fabric) -> None:
    """Kueue's ``cqIsBorrowing``: the four Workloads filling every clique hold quota in another
    ClusterQueue of the gang's cohort. With 32 GPUs of nominal quota it uses no more than its own
    (32): none is a victim under ``reclaimWithinCohort: Any``. With 24 nominal it borrows 8: one
    clique's Workload is."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["preemptDomain"] = "on"
    fabric.install(doc)
    cohort = f"{fabric.ns}-pool"
    other = f"{fabric.cq}-other"
    gpu = {"coveredResources": ["nvidia.com/gpu"]}

    def quota(cq: str, gpus: int) -> None:
        fabric.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq, {"spec": {"cohortName": cohort, "resourceGroups": [
            {**gpu, "flavors": [{"name": fabric.flavor, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}],
            "preemption": {"reclaimWithinCohort": "Any"}}}, _content_type="application/merge-patch+json")

    fabric.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue(other, fabric.flavor, 32, fabric.check))
    try:
        quota(fabric.cq, 32)
        quota(other, 32)
        ctrl = fabric.controller()
        for i in range(4):
            manifest = workload(fabric.ns, f"low-{i}", [("main", 2, 4)])
            manifest["spec"]["priority"] = 0
            fabric.kueue.create(manifest)
            fabric.kueue.reserve_quota(fabric.ns, f"low-{i}", other, fabric.flavor)
        assert [v.outcome for v in run(ctrl)] == ["admit"] * 4
        submit(fabric, "gang", 2, 0)  # Any: whatever its priority
        (verdict,) = run(ctrl)
        assert verdict.outcome == "wait" and not [n for n in notes(fabric, "gang") if n.startswith("preemption")]
        assert all(fabric.entry(f"low-{i}")["state"] == "Ready" for i in range(4))
        quota(other, 24)  # 32 reserved: 8 borrowed
        fabric.requeue("gang")
        (verdict,) = run(ctrl)
        assert verdict.outcome == "wait"
        (note,) = [n for n in notes(fabric, "gang") if n.startswith("preemption")]
        assert "(8 GPUs" in note and sum(fabric.entry(f"low-{i}")["state"] == "Retry" for i in range(4)) == 1
    finally:
        fabric.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", other)

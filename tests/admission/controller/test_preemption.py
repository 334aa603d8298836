"""Preemption that clears a domain, on the real apiserver: a higher-priority gang that fits
nowhere gets one clique cleared of lower-priority Workloads (Atoll's check to Retry on each victim,
admitted as it is), the clique is held for it while they leave, and the record names them; a dry
run only records; the ClusterQueue's policy (Kueue's default: Never) is respected."""

from __future__ import annotations

from typing import Any

import pytest

from tests.admission.fabric import GROUP, VERSION, Fabric, planned, profiles_doc, run
from tests.kube_objects import workload

pytestmark = pytest.mark.apiserver


def setup(fabric: Fabric, mode: str, within: str | None = "LowerPriority") -> Any:
    doc = profiles_doc(fabric.flavor, fabric.topology)
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


@pytest.mark.parametrize("within", [None, "Never"])
def test_the_cluster_queues_policy_is_respected(fabric: Fabric, within: str | None) -> None:
    ctrl = setup(fabric, "on", within)  # Kueue's default, and Never said outright
    submit(fabric, "gang", 2, 100)
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait" and not [n for n in notes(fabric, "gang") if n.startswith("preemption")]
    assert all(fabric.entry(f"low-{i}")["state"] == "Ready" for i in range(4))

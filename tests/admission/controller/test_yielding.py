"""Parked Workloads give their quota back (``_yielding``), on the real apiserver: a Workload
waiting for quota in the parked one's ClusterQueue gets it (Atoll's check to Retry, so Kueue
evicts the parked one), the parked one keeps its need on file and parks again on its next quota
without a decision, gives its quota back at most once per decision, and a waiter of another
ClusterQueue outside its cohort takes nothing."""

from __future__ import annotations

import pytest

from admission.controller import Controller
from tests.admission.controller.test_parking import busy, parking
from tests.admission.fabric import Fabric, run
from tests.kube_objects import GROUP, VERSION, cluster_queue, local_queue, workload

pytestmark = pytest.mark.apiserver


def waiter(fabric: Fabric, name: str, queue: str = "lq", gpus: int = 4) -> None:
    """A Workload Kueue has not reserved quota for: it waits for quota."""
    fabric.kueue.create(workload(fabric.ns, name, [("main", 1, gpus)], queue=queue))


def records_of(fabric: Fabric, name: str) -> int:
    return sum(1 for r in fabric.decision_records() if r["workload"] == name)


def parked_gang(fabric: Fabric) -> Controller:
    fabric.install()
    busy(fabric)
    ctrl = parking(fabric)
    fabric.submit("gang", [("main", 2, 4)])  # 8 GPUs in one island: none has room, it parks
    (first,) = run(ctrl)
    assert first.parked and fabric.entry("gang")["state"] == "Pending"
    return ctrl


def test_a_parked_gang_gives_its_quota_to_a_waiter_and_parks_again_without_a_decision(fabric: Fabric) -> None:
    ctrl = parked_gang(fabric)
    assert run(ctrl) == [] and fabric.entry("gang")["state"] == "Pending"  # nobody waits for quota: it keeps it
    waiter(fabric, "late")
    assert run(ctrl) == []  # giving quota back is no decision
    entry = fabric.entry("gang")
    assert entry["state"] == "Retry" and f"gives its quota back to Workload {fabric.ns}/late" in entry["message"]
    assert entry["requeueAfterSeconds"] == ctrl.parking.backoff[f"{fabric.ns}/gang"] > 0  # kept out for its backoff: the waiter first
    assert ctrl.quota_yields == 1 and ctrl.parking.is_aside(f"{fabric.ns}/gang")
    fabric.requeue("gang")  # Kueue: evicts (quota released), requeues, reserves quota again with the check Pending
    assert run(ctrl) == []  # nothing it waits for changed: parked again on its need, not decided
    assert ctrl.reparked == 1 and f"{fabric.ns}/gang" in ctrl.parking and records_of(fabric, "gang") == 1
    assert fabric.entry("gang")["state"] == "Pending"
    waiter(fabric, "late-again")  # another waiter: the gang gave its quota back once since its decision, and keeps it now
    assert run(ctrl) == []
    assert ctrl.quota_yields == 1 and fabric.entry("gang")["state"] == "Pending"
    fabric.core.patch_node(fabric.node_name(0, 0, 1), {"metadata": {"labels": {"touched": "yes"}}})  # a node change wakes it
    (decided,) = run(ctrl)
    assert decided.outcome == "wait" and decided.parked and records_of(fabric, "gang") == 2
    assert ctrl.quota_yields == 2 and fabric.entry("gang")["state"] == "Retry"  # decided afresh: it may give it back once more


def test_a_waiter_of_another_cluster_queue_outside_the_cohort_takes_nothing(fabric: Fabric) -> None:
    ctrl = parked_gang(fabric)
    other = f"{fabric.cq}-other"
    fabric.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue(other, fabric.flavor, 1000, fabric.check))
    try:
        fabric.custom.create_namespaced_custom_object(GROUP, VERSION, fabric.ns, "localqueues", local_queue(fabric.ns, "lq-other", other))
        waiter(fabric, "elsewhere", queue="lq-other")
        assert run(ctrl) == []
        assert ctrl.quota_yields == 0 and fabric.entry("gang")["state"] == "Pending"
        for cq in (fabric.cq, other):  # the two ClusterQueues join one cohort: now it is owed
            fabric.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq, {"spec": {"cohortName": "shared"}},
                                                      _content_type="application/merge-patch+json")
        waiter(fabric, "elsewhere-2", queue="lq-other")
        assert run(ctrl) == []
        assert ctrl.quota_yields == 1 and fabric.entry("gang")["state"] == "Retry"
    finally:
        fabric.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", other)


def test_the_running_controller_gives_parked_quota_back(fabric: Fabric) -> None:
    """The watch-driven worker loop, not only ``process``: the waiter's watch event leads to the Retry."""
    import time

    from admission.controller import DecisionSettings

    fabric.install()
    busy(fabric)
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(park_waiting=True)})

    def state_becomes(want: str) -> str:
        deadline = time.monotonic() + 30
        while (state := (fabric.entry("gang") or {}).get("state")) != want and time.monotonic() < deadline:
            time.sleep(0.1)
        return str(state)

    with fabric.running(settings=settings) as ctrl:
        fabric.submit("gang", [("main", 2, 4)])
        deadline = time.monotonic() + 30
        while f"{fabric.ns}/gang" not in ctrl.parking and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"{fabric.ns}/gang" in ctrl.parking
        waiter(fabric, "late")
        assert state_becomes("Retry") == "Retry"
        assert f"{fabric.ns}/late" in fabric.entry("gang")["message"]


def test_a_waiter_takes_no_more_than_it_asks_for_newest_parked_first(fabric: Fabric) -> None:
    ctrl = parked_gang(fabric)
    fabric.submit("gang-2", [("main", 2, 4)])  # parked after the first
    (second,) = run(ctrl)
    assert second.parked
    waiter(fabric, "late")  # 4 GPUs: one gang's 8 cover it
    assert run(ctrl) == []
    assert (fabric.entry("gang")["state"], fabric.entry("gang-2")["state"]) == ("Pending", "Retry")  # the newest gives way
    fabric.submit("gang-3", [("main", 2, 4)])  # a new park is a new pass: the waiter, still waiting, was served already
    (third,) = run(ctrl)
    assert third.parked and ctrl.quota_yields == 1
    assert (fabric.entry("gang")["state"], fabric.entry("gang-3")["state"]) == ("Pending", "Pending")

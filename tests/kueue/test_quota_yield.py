"""A parked gang gives its quota back, through real Kueue (``atoll run --park-waiting``): a 64-GPU
gang that no rack has room for is parked holding most of its ClusterQueue's quota; a 16-GPU Job of
the same ClusterQueue waits for quota alone. Atoll deactivates the gang, Kueue evicts it and
releases its quota, the small Job is admitted and runs, and Atoll reactivates the gang, which now
waits for quota behind it. When the ClusterQueue gets more quota, the gang holds quota again and Atoll parks it
again without a decision; when a rack gets room, it is decided and admitted there. (A Retry
instead, as before, held the quota through its delay and then lost the requeue race to the gang
itself: ``admission/controller/_yielding.py`` says why.)"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from admission.controller import DecisionSettings, Recorder
from admission.controller._yielding import YIELD_ANNOTATION
from tests.kueue.conftest import (
    CLIQUE,
    GROUP,
    VERSION,
    Live,
    check_entry,
    condition,
    is_true,
    model_documents,
    model_job,
    model_profiles,
    wait_for,
)

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

NS = "team-a"
QUEUE, CQ = "yield", "gb200-yield"
GANG_PODS, SMALL_PODS = 16, 4  # 4 GPUs a pod: 64 and 16 GPUs
QUOTA = 72  # the gang's 64 and 8 more: the small Job's 16 do not fit beside the gang
CORDONED = 3  # trays cordoned in every rack: 15 schedulable, so no rack holds the gang


def _create(create: Any, *args: Any) -> None:
    """Create once per session: another test of the tier may have made it already."""
    try:
        create(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise


def _setup(live: Live) -> None:
    """A ClusterQueue like config/kueue's, with only ``QUOTA`` GPUs of quota, and its LocalQueue."""
    cq = copy.deepcopy(next(d for d in model_documents("kueue.yaml") if d["kind"] == "ClusterQueue"))
    cq["metadata"] = {"name": CQ}
    for resource in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
        if resource["name"] == "nvidia.com/gpu":
            resource["nominalQuota"] = QUOTA
    _create(live.custom.create_cluster_custom_object, GROUP, VERSION, "clusterqueues", cq)
    _create(live.custom.create_namespaced_custom_object, GROUP, VERSION, NS, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": NS},
        "spec": {"clusterQueue": CQ}})
    wait_for(f"ClusterQueue {CQ} active", lambda: is_true(live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ), "Active"))


def _set_quota(live: Live, gpus: int) -> None:
    cq = live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ)
    group = cq["spec"]["resourceGroups"][0]
    for resource in group["flavors"][0]["resources"]:
        if resource["name"] == "nvidia.com/gpu":
            resource["nominalQuota"] = gpus
    live.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ, {"spec": {"resourceGroups": [group]}},
                                            _content_type="application/merge-patch+json")


def _job(name: str, pods: int) -> dict[str, Any]:
    job = model_job("llm-pretrain", name, parallelism=pods, completions=pods)  # strict: one NVL72 rack or wait
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    return job


def _cordon(live: Live, on: bool) -> list[str]:
    """Cordon (or uncordon) ``CORDONED`` trays of every rack. Cordoning waits for the node
    lifecycle controller's ``node.kubernetes.io/unschedulable`` taint on each: a later Node change
    is an event that has a parked gang decided afresh, and the test needs none while it yields."""
    names = sorted(n for n, labels in live.node_labels().items() if int(n[-2:]) < CORDONED)
    for name in names:
        live.core.patch_node(name, {"spec": {"unschedulable": on}})
    if on:
        wait_for("the unschedulable taint on every cordoned tray", lambda: all(
            any(t.key == "node.kubernetes.io/unschedulable" for t in (n.spec.taints or []))
            for n in live.core.list_node(label_selector="type=kwok").items if n.metadata.name in names))
    return names


def _records(sink: io.StringIO, workload: str) -> list[dict[str, Any]]:
    return [r for r in (json.loads(line) for line in sink.getvalue().splitlines() if line.startswith("{")) if r["workload"] == workload]


def test_a_parked_gang_gives_its_quota_to_a_smaller_job_through_kueues_eviction_and_parks_again_without_a_decision(live: Live) -> None:
    _setup(live)
    sink = io.StringIO()
    doc = model_profiles()
    doc["queues"][f"{NS}/{QUEUE}"] = "strict"
    live.set_profiles(doc)
    submitted: list[dict[str, Any]] = []
    cordoned = _cordon(live, True)
    try:
        with live.history(NS) as history, live.controller(Recorder(sink), DecisionSettings(park_waiting=True)) as ctrl:
            gang = live.submit(_job("yield-gang", GANG_PODS))
            submitted.append(gang)
            parked, i = history.wait(gang, "parked holding quota (check Pending, TopologyWaiting)", lambda wl: is_true(wl, "QuotaReserved")
                                     and is_true(wl, "atoll.dev/TopologyWaiting") and (check_entry(wl) or {}).get("state") == "Pending")
            gang_wl = parked["metadata"]["name"]
            wait_for("the gang's first decision record", lambda: _records(sink, gang_wl))

            small = live.submit(_job("yield-small", SMALL_PODS))
            submitted.append(small)
            blocked, _ = history.wait(small, "waiting for quota", lambda wl: (c := condition(wl, "QuotaReserved")) is not None
                                      and c["status"] == "False")
            small_wl = blocked["metadata"]["name"]

            yielded, i = history.wait(gang, "deactivated by Atoll for the small Job", lambda wl: (wl.get("spec") or {}).get("active") is False, after=i)
            assert yielded["metadata"]["annotations"][YIELD_ANNOTATION] == f"{NS}/{small_wl}"
            evicted, i = history.wait(gang, "evicted by Kueue", lambda wl: is_true(wl, "Evicted"), after=i)
            assert condition(evicted, "Evicted")["reason"] == "Deactivated"
            assert (check_entry(evicted) or {}).get("state") == "Pending"  # Kueue resets only other states: Atoll's wait stands
            history.wait(gang, "its quota released", lambda wl: not is_true(wl, "QuotaReserved"), after=i)
            admitted, _ = history.wait(small, "admitted with the gang's quota", lambda wl: is_true(wl, "Admitted"))
            assert admitted["status"]["admission"]["clusterQueue"] == CQ
            back, i = history.wait(gang, "reactivated by Atoll once the small Job holds quota", lambda wl: (wl.get("spec") or {}).get("active")
                                   is True, after=i)
            assert YIELD_ANNOTATION not in (back["metadata"].get("annotations") or {})
            nodes = live.node_labels()
            bound = live.wait_bound(small, SMALL_PODS)
            assert len({nodes[p.spec.node_name][CLIQUE] for p in bound}) == 1
            assert ctrl.quota_yields == 1
            gang_now = live.workload(gang)
            assert gang_now is not None and not is_true(gang_now, "QuotaReserved")  # 72 - 16 < 64: it waits for quota now

            # the ClusterQueue gets 16 GPUs more: the gang holds quota again, and nothing it waits for changed (no
            # pod stopped, no node changed): parked again, not decided. (The small Job's end would free its rack's
            # trays, an event that has the gang decided afresh.)
            decisions = len(_records(sink, gang_wl))
            _set_quota(live, QUOTA + SMALL_PODS * 4)
            history.wait(gang, "quota again", lambda wl: is_true(wl, "QuotaReserved"), after=i)
            wait_for("the gang parked again without a decision", lambda: ctrl.reparked == 1)
            assert len(_records(sink, gang_wl)) == decisions
            gang_now = live.workload(gang)
            assert gang_now is not None and is_true(gang_now, "QuotaReserved") and not is_true(gang_now, "Admitted")
            assert (check_entry(gang_now) or {}).get("state") == "Pending" and (gang_now.get("spec") or {}).get("active") is True
            sample = ctrl.metrics.registry.get_sample_value
            assert sample("atoll_quota_yields_total", {"flavor": "gb200-nvl72"}) == 1
            assert sample("atoll_quota_reparks_total", {"flavor": "gb200-nvl72"}) == 1

            # a rack gets room: the gang is decided and admitted there
            _cordon(live, False)
            cordoned = []
            admitted, _ = history.wait(gang, "admitted once a rack has room", lambda wl: is_true(wl, "Admitted"), after=i)
            assert _records(sink, gang_wl)[-1]["outcome"] == "admit"  # decided afresh (each uncordoned node is an event)
            bound = live.wait_bound(gang, GANG_PODS)
            assert len({nodes[p.spec.node_name][CLIQUE] for p in bound}) == 1
            assert ctrl.quota_yields == 1 and live.gpus_booked_beyond_allocatable() == {}
    finally:
        if cordoned:
            _cordon(live, False)
        _set_quota(live, QUOTA)
        live.set_profiles(model_profiles())
        for job in submitted:
            live.delete(job)

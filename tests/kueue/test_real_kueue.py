"""Atoll against the programs it plugs into: real Kueue reserves quota, Atoll decides, Kueue
admits and unsuspends the Job, the Job controller creates the pods with Atoll's podSetUpdates,
kube-scheduler binds them to KWOK nodes."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from tests.kueue.conftest import (
    BLOCKS,
    CLIQUE,
    GROUP,
    RACKS,
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


def test_kueue_admits_on_atolls_decision_and_every_pod_binds_in_its_domain(live: Live) -> None:
    job = model_job("llm-pretrain", "pretrain-flow")  # 16 pods x 4 GPUs, strict: one NVL72 rack
    with live.history("team-a") as history, live.controller():
        job = live.submit(job)
        try:
            wl, _ = history.wait(job, "admitted", lambda wl: is_true(wl, "Admitted"))
            entry = check_entry(wl)
            assert entry is not None and entry["state"] == "Ready", entry
            (update,) = entry["podSetUpdates"]
            rack = update["nodeSelector"][CLIQUE]
            decision = update["annotations"]["atoll.dev/decision-id"]
            pods = live.wait_bound(job, 16)
            nodes = live.node_labels()
            assert {nodes[p.spec.node_name][CLIQUE] for p in pods} == {rack}
            assert len({p.spec.node_name for p in pods}) == 16  # one 4-GPU pod per tray
            for pod in pods:  # the pods carry Atoll's podSetUpdate, merged in by Kueue
                assert pod.metadata.annotations["atoll.dev/decision-id"] == decision
                assert pod.metadata.labels["atoll.dev/decision-id"] == decision
                assert pod.spec.node_selector[CLIQUE] == rack
            assert live.batch.read_namespaced_job(job["metadata"]["name"], job["metadata"]["namespace"]).spec.suspend is False
            assert live.gpus_booked_beyond_allocatable() == {}
        finally:
            live.delete(job)


def _epoch(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()


def test_a_retry_makes_kueue_requeue_after_the_delay_atoll_asked_for(live: Live) -> None:
    live.set_profiles(model_profiles(strict={"retry": {"initialSeconds": 5, "maxSeconds": 5}}))  # waits on Retries
    cordoned = [f"gb-b{b}r{r}n{n:02d}" for b in range(BLOCKS) for r in range(RACKS) for n in range(3)]  # 15 trays left per rack
    for name in cordoned:
        live.core.patch_node(name, {"spec": {"unschedulable": True}})
    job = model_job("llm-pretrain", "pretrain-retry")  # 16 trays in one rack: not now, but once a rack has room
    try:
        with live.history("team-a") as history, live.controller():
            job = live.submit(job)
            retried, i = history.wait(job, "Atoll's Retry", lambda wl: (check_entry(wl) or {}).get("state") == "Retry")
            entry = check_entry(retried)
            assert entry is not None and entry["requeueAfterSeconds"] == 5
            marked, i = history.wait(job, "Kueue's requeueAt", lambda wl: bool((wl["status"].get("requeueState") or {}).get("requeueAt")),
                                     after=i)
            requeue_at = _epoch(marked["status"]["requeueState"]["requeueAt"])
            assert requeue_at == _epoch(entry["lastTransitionTime"]) + 5  # Kueue's requeueAt is exactly what Atoll asked for
            evicted, i = history.wait(job, "Kueue's eviction for the check", lambda wl: is_true(wl, "Evicted"), after=i)
            assert condition(evicted, "Evicted")["reason"] == "AdmissionCheck"
            # Kueue holds the eviction, and so the quota, until requeueAt (its backoff check comes first in Reconcile)
            assert _epoch(condition(evicted, "Evicted")["lastTransitionTime"]) >= requeue_at
            _, i = history.wait(job, "quota released", lambda wl: not is_true(wl, "QuotaReserved"), after=i)
            again, i = history.wait(job, "quota reserved again", lambda wl: is_true(wl, "QuotaReserved"), after=i)
            assert _epoch(condition(again, "QuotaReserved")["lastTransitionTime"]) >= requeue_at  # not before Atoll's delay
            assert not live.pods(job)  # never admitted so far: no pod was made
            for name in cordoned[:3]:  # rack b0r0 whole again
                live.core.patch_node(name, {"spec": {"unschedulable": False}})
            wl, _ = history.wait(job, "admitted once a rack has room", lambda wl: is_true(wl, "Admitted"), after=i)
            assert check_entry(wl)["podSetUpdates"][0]["nodeSelector"][CLIQUE] == "b0r0"
            nodes = live.node_labels()
            assert {nodes[p.spec.node_name][CLIQUE] for p in live.wait_bound(job, 16)} == {"b0r0"}
    finally:
        for name in cordoned:
            live.core.patch_node(name, {"spec": {"unschedulable": False}})
        live.set_profiles(model_profiles())
        if "uid" in job["metadata"]:
            live.delete(job)


def _atoll_writes(wl: dict[str, Any]) -> list[str]:
    return sorted(m["time"] for m in wl["metadata"].get("managedFields") or [] if m["manager"] == "atoll")


def test_preemption_by_a_higher_priority_job_evicts_and_atoll_writes_nothing_while_evicted(live: Live) -> None:
    ns = "team-a"
    for name, value in (("atoll-low", 100), ("atoll-high", 1000)):
        live.custom.create_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value})
    cq = copy.deepcopy(next(d for d in model_documents("kueue.yaml") if d["kind"] == "ClusterQueue"))
    cq["metadata"] = {"name": "gb200-preempt"}
    for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:  # room for one 4-tray job
        r["nominalQuota"] = {"nvidia.com/gpu": 16, "cpu": 128, "memory": "1024Gi"}[r["name"]]
    cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    live.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq)
    live.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": "preempt", "namespace": ns},
        "spec": {"clusterQueue": "gb200-preempt"}})

    def job(name: str, priority: str) -> dict[str, Any]:
        j = model_job("llm-pretrain", name, parallelism=4, completions=4)
        j["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "preempt", "kueue.x-k8s.io/priority-class": priority}
        return j

    low, high = job("low", "atoll-low"), job("high", "atoll-high")
    try:
        with live.history(ns) as history, live.controller():
            low = live.submit(low)
            _, i = history.wait(low, "admitted", lambda wl: is_true(wl, "Admitted"))
            live.wait_bound(low, 4)
            high = live.submit(high)
            evicted, _ = history.wait(low, "preempted by the higher priority", lambda wl: is_true(wl, "Evicted"), after=i)
            assert condition(evicted, "Evicted")["reason"] == "Preempted"
            since = _epoch(condition(evicted, "Evicted")["lastTransitionTime"])
            admitted, _ = history.wait(high, "admitted in the preempted job's place", lambda wl: is_true(wl, "Admitted"))
            (update,) = check_entry(admitted)["podSetUpdates"]
            nodes = live.node_labels()
            assert {nodes[p.spec.node_name][CLIQUE] for p in live.wait_bound(high, 4)} == {update["nodeSelector"][CLIQUE]}
            wait_for("the preempted job's pods gone (Kueue suspended it)", lambda: not live.pods(low))
            wl = live.workload(low)
            assert wl is not None and not is_true(wl, "QuotaReserved")
            assert all(_epoch(t) <= since for t in _atoll_writes(wl)), (since, _atoll_writes(wl))
            assert live.gpus_booked_beyond_allocatable() == {}
    finally:
        for j in (low, high):
            if "uid" in j["metadata"]:
                live.delete(j)

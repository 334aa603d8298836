"""An admission check answered before quota is reserved, against real Kueue (v0.19.2).

Kueue's Workload controller lists a check on a Workload that has no reservation yet when the
check applies to every flavor of its ClusterQueue (``AdmissionChecksForWorkload``,
pkg/workload/workload.go); nothing resets the entry before a reservation (``resetChecksOnEviction``
in pkg/workload/evict/evict.go runs only on eviction) and its Workload webhook checks only the
podSetUpdates' names and, Ready to Ready, that they do not change (``validateAdmissionChecks``,
``validateImmutablePodSetUpdates``, pkg/webhooks/workload_webhook.go). The scheduler's ``admit``
then sets ``Admitted`` in the reservation's own write when every check is already Ready
(``prepareWorkload``, pkg/scheduler/scheduler.go). This test shows it on the live programs.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from admission.controller import DecisionSettings
from tests.kueue.conftest import CHECK, CLIQUE, GROUP, VERSION, Live, check_entry, condition, is_true, model_job

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]


def _write_check(live: Live, wl: dict[str, Any], state: str, updates: list[dict[str, Any]]) -> None:
    """Atoll's check entry set to ``state`` with ``updates``, as a check controller writes it: a
    merge patch of the status against the version read, read again and made again when Kueue
    wrote in between (409), as long as the Workload still has no quota."""
    ns, name = wl["metadata"]["namespace"], wl["metadata"]["name"]
    for _ in range(20):
        assert not is_true(wl, "QuotaReserved"), "quota was reserved before the check could be written"
        entries = [dict(e) for e in wl["status"]["admissionChecks"]]
        for e in entries:
            if e["name"] == CHECK:
                e.update(state=state, message=f"{state} before quota", podSetUpdates=updates,
                         lastTransitionTime=wl["metadata"]["creationTimestamp"])
        body = {"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]}, "status": {"admissionChecks": entries}}
        try:
            live.custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "workloads", name, body)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        wl = live.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "workloads", name)
    pytest.fail(f"workload {ns}/{name} kept changing: check not written")


def test_a_check_ready_before_quota_is_admitted_in_the_reservations_own_write(live: Live) -> None:
    """No Atoll controller runs: the test plays the check's controller. A blocker takes the
    ClusterQueue's whole GPU quota (2,304) and never gets its check answered, so the Workload
    under test waits for quota with Atoll's entry Pending; its entry is set Ready with a
    podSetUpdate pinning one rack; the blocker is deleted. Kueue's first write that reserves
    quota already says Admitted, the entry stays Ready with the podSetUpdate, and the pods
    land in that rack."""
    blocker = model_job("llm-pretrain", "pre-quota-blocker", parallelism=576, completions=576)
    job = model_job("llm-pretrain", "pre-quota-decided")  # 16 pods x 4 GPUs
    rack = "b1r1"
    update = {"name": "main", "nodeSelector": {CLIQUE: rack},
              "annotations": {"atoll.dev/decision-id": "pre-quota-1"}, "labels": {"atoll.dev/decision-id": "pre-quota-1"}}
    with live.history("team-a") as history:
        blocker = live.submit(blocker)
        try:
            history.wait(blocker, "quota for the blocker", lambda wl: is_true(wl, "QuotaReserved"))
            job = live.submit(job)
            try:
                wl, _ = history.wait(job, "Atoll's entry listed without quota",
                                     lambda wl: check_entry(wl) is not None and not is_true(wl, "QuotaReserved"))
                assert check_entry(wl)["state"] == "Pending"  # type: ignore[index]
                update["name"] = wl["spec"]["podSets"][0]["name"]
                _write_check(live, wl, "Ready", [update])
                ready, at = history.wait(job, "Ready written", lambda wl: (check_entry(wl) or {}).get("state") == "Ready")
                assert not is_true(ready, "QuotaReserved") and not is_true(ready, "Admitted")
                live.delete(blocker)
                reserved, _ = history.wait(job, "quota reserved", lambda wl: is_true(wl, "QuotaReserved"), after=at)
                # the first version that holds quota is already admitted: one write, not two
                assert is_true(reserved, "Admitted"), condition(reserved, "Admitted")
                assert condition(reserved, "Admitted")["lastTransitionTime"] == condition(reserved, "QuotaReserved")["lastTransitionTime"]  # type: ignore[index]
                entry = check_entry(reserved)
                assert entry is not None and entry["state"] == "Ready" and entry["podSetUpdates"] == [update]
                between = [v for v in history.versions[at:] if v["metadata"]["uid"] == wl["metadata"]["uid"]]
                assert all((check_entry(v) or {}).get("state") == "Ready" for v in between)  # never reset to Pending
                pods = live.wait_bound(job, 16)
                nodes = live.node_labels()
                assert {nodes[p.spec.node_name][CLIQUE] for p in pods} == {rack}
                assert all(p.metadata.annotations["atoll.dev/decision-id"] == "pre-quota-1" for p in pods)
            finally:
                live.delete(job)
        finally:
            live.delete(blocker)


def test_atoll_decides_before_quota_and_kueue_admits_in_one_write_where_atoll_placed(live: Live) -> None:
    """Atoll runs with ``decide_before_quota``. A ClusterQueue of its own has 64 GPUs of quota on
    the one GB200 flavor: the first job takes it (and a rack); the second waits for quota, and
    Atoll places it before quota, in another rack. Once the first is deleted, Kueue's first
    write that reserves the second's quota already admits it, with Atoll's podSetUpdate, and its
    pods land in the rack Atoll chose."""
    ns, cq = "pre-quota", "pre-quota-cq"
    live.core.create_namespace({"metadata": {"name": ns}})
    live.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                 "resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "cpu", "memory"], "flavors": [
                     {"name": "gb200-nvl72", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 64},
                                                           {"name": "cpu", "nominalQuota": 4096},
                                                           {"name": "memory", "nominalQuota": "65536Gi"}]}]}],
                 "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK, "onFlavors": ["gb200-nvl72"]}]}}})
    live.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}})
    first = model_job("llm-pretrain", "quota-holder")
    second = model_job("llm-pretrain", "decided-early")
    for job in (first, second):
        job["metadata"]["namespace"] = ns
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq"
    decisions = DecisionSettings(decide_before_quota=True, before_quota_hold_seconds=600)
    try:
        with live.history(ns) as history, live.controller(decisions=decisions):
            first = live.submit(first)
            try:
                history.wait(first, "admitted", lambda wl: is_true(wl, "Admitted"))
                held = live.wait_bound(first, 16)
                second = live.submit(second)
                try:
                    early, at = history.wait(second, "placed by Atoll before quota",
                                             lambda wl: (check_entry(wl) or {}).get("state") == "Ready" and not is_true(wl, "QuotaReserved"))
                    (update,) = check_entry(early)["podSetUpdates"]  # type: ignore[index]
                    rack = update["nodeSelector"][CLIQUE]
                    nodes = live.node_labels()
                    assert rack not in {nodes[p.spec.node_name][CLIQUE] for p in held}  # the first job's rack is taken
                    assert "decided before quota" in check_entry(early)["message"]  # type: ignore[index]
                    live.delete(first)
                    reserved, _ = history.wait(second, "quota reserved", lambda wl: is_true(wl, "QuotaReserved"), after=at)
                    assert is_true(reserved, "Admitted"), condition(reserved, "Admitted")  # one write
                    entry = check_entry(reserved)
                    assert entry is not None and entry["state"] == "Ready" and entry["podSetUpdates"] == [update]
                    pods = live.wait_bound(second, 16)
                    nodes = live.node_labels()
                    assert {nodes[p.spec.node_name][CLIQUE] for p in pods} == {rack}
                    decision = update["annotations"]["atoll.dev/decision-id"]
                    assert all(p.metadata.annotations["atoll.dev/decision-id"] == decision for p in pods)
                    assert live.gpus_booked_beyond_allocatable() == {}
                finally:
                    live.delete(second)
            finally:
                live.delete(first)
    finally:
        live.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq)
        live.core.delete_namespace(ns)

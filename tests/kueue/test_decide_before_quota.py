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

from tests.kueue.conftest import CHECK, CLIQUE, GROUP, VERSION, Live, check_entry, condition, is_true, model_job

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]


def _write_check(live: Live, wl: dict[str, Any], state: str, updates: list[dict[str, Any]]) -> None:
    """Atoll's check entry set to ``state`` with ``updates``, as a check controller writes it
    (a merge patch of the status, against the version read: a 409 fails the test)."""
    entries = [dict(e) for e in wl["status"]["admissionChecks"]]
    for e in entries:
        if e["name"] == CHECK:
            e.update(state=state, message=f"{state} before quota", podSetUpdates=updates,
                     lastTransitionTime=wl["metadata"]["creationTimestamp"])
    body = {"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]}, "status": {"admissionChecks": entries}}
    live.custom.patch_namespaced_custom_object_status(GROUP, VERSION, wl["metadata"]["namespace"], "workloads",
                                                      wl["metadata"]["name"], body)


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

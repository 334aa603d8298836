"""A parked gang gives its quota back to a waiter of another ClusterQueue of its cohort, through
real Kueue, only when the cohort's rules let the waiter use it (``admission/controller/_quota.py``,
``CohortQuota``: Kueue v0.19.2's ``available``, ``lendingLimit``, ``borrowingLimit``).

Two ClusterQueues of one cohort on the GB200 flavor: the lender holds 64 GPUs of quota, all taken
by a 64-GPU gang that no rack has room for (trays cordoned), parked by ``--park-waiting``; the
borrower has 8 GPUs of its own and may borrow 16. A 16-GPU Job of the borrower waits for quota.

- While the lender's ``lendingLimit`` is 0, its quota never reaches the cohort: giving it back
  would not let the Job in, so Atoll gives nothing, and Kueue leaves the Job waiting.
- With no ``lendingLimit`` the gang's 64 GPUs would be the cohort's: a second 16-GPU Job waits,
  Atoll deactivates the gang, Kueue evicts it and admits the Job on 8 GPUs of its own and 8
  borrowed, and Atoll reactivates the gang, which then waits for quota (56 left to its queue)."""

from __future__ import annotations

import copy
import io
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from admission.controller import DecisionSettings, Recorder
from admission.controller._yielding import YIELD_ANNOTATION
from tests.kueue.conftest import GROUP, VERSION, Live, check_entry, condition, is_true, model_documents, model_job, model_profiles, wait_for
from tests.kueue.test_quota_yield import _cordon

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

NS = "team-a"
COHORT = "atoll-yield-cohort"
LENDER, BORROWER = "gb200-lender", "gb200-borrower"
LENDER_LQ, BORROWER_LQ = "lender", "borrower"
GANG_PODS, SMALL_PODS = 16, 4  # 4 GPUs a pod: 64 and 16 GPUs
LENDER_GPUS, BORROWER_GPUS, BORROWING = 64, 8, 16


def _cluster_queue(name: str, gpus: int, *, lending: int | None = None, borrowing: int | None = None) -> dict[str, Any]:
    """config/kueue's ClusterQueue, in ``COHORT``, with ``gpus`` of GPU quota and the limits given."""
    cq = copy.deepcopy(next(d for d in model_documents("kueue.yaml") if d["kind"] == "ClusterQueue"))
    cq["metadata"] = {"name": name}
    cq["spec"]["cohortName"] = COHORT
    for resource in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
        if resource["name"] == "nvidia.com/gpu":
            resource["nominalQuota"] = gpus
            if lending is not None:
                resource["lendingLimit"] = lending
            if borrowing is not None:
                resource["borrowingLimit"] = borrowing
    return cq


def _apply(live: Live, cq: dict[str, Any]) -> None:
    """Create the ClusterQueue, or give an existing one (an earlier run's) this spec."""
    name = cq["metadata"]["name"]
    try:
        live.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
        current["spec"] = cq["spec"]
        live.custom.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", name, current)
    wait_for(f"ClusterQueue {name} active", lambda: is_true(live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name), "Active"))


def _local_queue(live: Live, name: str, cq: str) -> None:
    try:
        live.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "localqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterQueue": cq}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def _lending_limit(live: Live, gpus: int | None) -> None:
    _apply(live, _cluster_queue(LENDER, LENDER_GPUS, lending=gpus))


def _job(name: str, pods: int, queue: str) -> dict[str, Any]:
    job = model_job("llm-pretrain", name, parallelism=pods, completions=pods)  # strict: one NVL72 rack or wait
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return job


def _refused(wl: dict[str, Any]) -> bool:
    c = condition(wl, "QuotaReserved")
    return c is not None and c["status"] == "False"


def test_a_parked_gang_gives_its_quota_to_another_queue_of_its_cohort_only_when_its_lending_limit_lets_the_waiter_in(live: Live) -> None:
    _lending_limit(live, 0)
    _apply(live, _cluster_queue(BORROWER, BORROWER_GPUS, borrowing=BORROWING))
    _local_queue(live, LENDER_LQ, LENDER)
    _local_queue(live, BORROWER_LQ, BORROWER)
    doc = model_profiles()
    doc["queues"].update({f"{NS}/{LENDER_LQ}": "strict", f"{NS}/{BORROWER_LQ}": "strict"})
    live.set_profiles(doc)
    submitted: list[dict[str, Any]] = []
    cordoned = _cordon(live, True)
    started = time.monotonic()
    try:
        with live.history(NS) as history, live.controller(Recorder(io.StringIO()), DecisionSettings(park_waiting=True)) as ctrl:
            gang = live.submit(_job("cohort-gang", GANG_PODS, LENDER_LQ))
            submitted.append(gang)
            history.wait(gang, "parked holding the lender's quota", lambda wl: is_true(wl, "QuotaReserved")
                         and is_true(wl, "atoll.dev/TopologyWaiting") and (check_entry(wl) or {}).get("state") == "Pending")

            # lendingLimit 0: the gang's quota stays with its queue, so giving it back would not let the Job in
            kept = live.submit(_job("cohort-kept", SMALL_PODS, BORROWER_LQ))
            submitted.append(kept)
            history.wait(kept, "refused by Kueue: 8 GPUs of its own, nothing the cohort could lend", _refused)
            time.sleep(5.0)  # the controller's passes over this waiter (each Workload event is one): nothing may be given
            assert ctrl.quota_yields == 0
            gang_now, kept_now = live.workload(gang), live.workload(kept)
            assert gang_now is not None and kept_now is not None
            assert (gang_now.get("spec") or {}).get("active", True) is True and is_true(gang_now, "QuotaReserved")
            assert not is_true(kept_now, "QuotaReserved")
            live.delete(kept)
            submitted.remove(kept)

            # no lendingLimit: the gang's 64 GPUs would be the cohort's, and the borrower may take 16 (8 its own, 8 borrowed)
            _lending_limit(live, None)
            small = live.submit(_job("cohort-small", SMALL_PODS, BORROWER_LQ))
            submitted.append(small)
            blocked, _ = history.wait(small, "refused by Kueue while the gang holds the cohort's quota", _refused)
            small_wl = blocked["metadata"]["name"]
            yielded, i = history.wait(gang, "deactivated by Atoll for the borrower's Job", lambda wl: (wl.get("spec") or {}).get("active") is False)
            assert yielded["metadata"]["annotations"][YIELD_ANNOTATION] == f"{NS}/{small_wl}"
            evicted, i = history.wait(gang, "evicted by Kueue", lambda wl: is_true(wl, "Evicted"), after=i)
            assert condition(evicted, "Evicted")["reason"] == "Deactivated"
            admitted, _ = history.wait(small, "admitted in the borrower, borrowing the gang's quota", lambda wl: is_true(wl, "Admitted"))
            assert admitted["status"]["admission"]["clusterQueue"] == BORROWER
            back, i = history.wait(gang, "reactivated by Atoll once the Job holds quota", lambda wl: (wl.get("spec") or {}).get("active")
                                   is True, after=i)
            assert YIELD_ANNOTATION not in (back["metadata"].get("annotations") or {})
            assert ctrl.quota_yields == 1  # one in all: none went to the first Job, however late a pass over it came
            live.wait_bound(small, SMALL_PODS)

            def reserved() -> tuple[str, str] | None:  # the borrower's status: 16 GPUs reserved, 8 of them borrowed
                cq: dict[str, Any] = live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", BORROWER)
                status = cq.get("status") or {}
                got = [(str(r.get("total")), str(r.get("borrowed"))) for f in status.get("flavorsReservation") or []
                       for r in f.get("resources") or [] if r.get("name") == "nvidia.com/gpu"]
                return got[0] if got and got[0] == (str(SMALL_PODS * 4), str(SMALL_PODS * 4 - BORROWER_GPUS)) else None
            wait_for("the borrower's status to show 8 GPUs borrowed", reserved)
            gang_now = live.workload(gang)
            assert gang_now is not None and not is_true(gang_now, "QuotaReserved")  # 72 - 16 = 56 < 64 for its queue: it waits for quota
            assert live.gpus_booked_beyond_allocatable() == {}
    finally:
        if cordoned:
            _cordon(live, False)
        for job in submitted:
            live.delete(job)
        live.set_profiles(model_profiles())
        print(f"cohort give-back test: {time.monotonic() - started:.1f} s")

"""A JobSet through real Kueue and JobSet's controller: Kueue makes one Workload with a PodSet per
replicated Job, reserves quota, Atoll decides, Kueue admits and resumes the JobSet with Atoll's
podSetUpdates merged into each replicated Job's template, JobSet's controller passes them on to
its child Jobs and unsuspends them, the Job controller makes the pods, and kube-scheduler binds
them to KWOK nodes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.kueue.conftest import CLIQUE, Live, check_entry, is_true, model_job, wait_for

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

NS = "team-a"
JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"


def jobset(name: str, replicated: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """A JobSet on the research queue (strict: one NVL72 rack): replicated Job name -> (replicas,
    pods per Job), each pod one 4-GPU tray of config/kueue/gb200-nvl72/jobs.yaml's trainer, as a
    user writes it: not suspended (Kueue's JobSet webhook suspends it; JobSet's own webhooks set
    its defaults)."""
    pod = copy.deepcopy(model_job("llm-pretrain", "template")["spec"]["template"])
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}", "kind": "JobSet",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "research"}},
        "spec": {
            "replicatedJobs": [
                {"name": rj, "replicas": replicas,
                 "template": {"spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 0,
                                       "template": copy.deepcopy(pod)}}}
                for rj, (replicas, pods) in replicated.items()
            ],
        },
    }


def test_a_jobset_of_two_replicated_jobs_is_admitted_through_atolls_check_and_every_pod_lands_in_its_domain(live: Live) -> None:
    shape = {"driver": (1, 2), "workers": (2, 4)}  # 2 + 8 pods: ten trays, one rack
    created: Any = {}
    try:
        with live.history(NS) as history, live.controller():
            created = live.custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, "jobsets", jobset("train-set", shape))
            spec = created["spec"]  # JobSet's defaulting webhook and Kueue's JobSet webhook answered the create
            assert spec["suspend"] is True
            assert (spec["successPolicy"]["operator"], spec["startupPolicy"]["startupPolicyOrder"]) == ("All", "AnyOrder")
            assert spec["network"]["enableDNSHostnames"] is True
            wl, _ = history.wait(created, "admitted", lambda wl: is_true(wl, "Admitted"))
            assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("driver", 2), ("workers", 8)]
            entry = check_entry(wl)
            assert entry is not None and entry["state"] == "Ready", entry
            updates = {u["name"]: u for u in entry["podSetUpdates"]}
            assert set(updates) == {"driver", "workers"}
            wait_for("Kueue resumes the JobSet", lambda: live.custom.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, NS, "jobsets", "train-set")["spec"]["suspend"] is False)

            def running() -> list[Any] | None:
                pods: list[Any] = [p for p in live.core.list_namespaced_pod(NS, label_selector=f"{JOBSET_NAME}=train-set").items
                        if p.metadata.deletion_timestamp is None]
                ok = len(pods) == 10 and all(p.spec.node_name and p.status.phase == "Running" for p in pods)
                return pods if ok else None
            pods = wait_for("ten running pods of the JobSet", running)
            nodes = live.node_labels()
            by_job: dict[str, list[Any]] = {}
            for pod in pods:
                by_job.setdefault(pod.metadata.labels[REPLICATED_JOB], []).append(pod)
            assert {rj: len(ps) for rj, ps in by_job.items()} == {"driver": 2, "workers": 8}
            for rj, ps in by_job.items():  # each replicated Job's pods: in its PodSet's decided domain, with its decision
                update = updates[rj]
                assert {nodes[p.spec.node_name][CLIQUE] for p in ps} == {update["nodeSelector"][CLIQUE]}, rj
                assert {p.metadata.labels["atoll.dev/decision-id"] for p in ps} == {update["labels"]["atoll.dev/decision-id"]}, rj
                assert {p.spec.node_selector[CLIQUE] for p in ps} == {update["nodeSelector"][CLIQUE]}, rj
            assert len({p.spec.node_name for p in pods}) == 10  # one 4-GPU pod per tray
            assert {u["nodeSelector"][CLIQUE] for u in updates.values()} == {nodes[pods[0].spec.node_name][CLIQUE]}  # strict: one rack
            assert live.gpus_booked_beyond_allocatable() == {}
    finally:
        if created:
            try:
                live.custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, "jobsets", "train-set",
                                                            propagation_policy="Background")
            except ApiException as exc:
                if exc.status != 404:
                    raise
            wait_for("the JobSet's Workload and pods gone", lambda: live.workload(created) is None and not live.core.list_namespaced_pod(
                NS, label_selector=f"{JOBSET_NAME}=train-set").items)

"""On a real cluster (kind, real Kueue, Atoll installed by its chart from its image): a training Job
and an indexed Job on a flavor under exact enforcement are admitted by Kueue after Atoll's check,
and every pod runs on a node Atoll planned, the indexed Job's pod ``i`` on planned slot ``i``.

Gated: skipped, naming what is missing, unless E2E=1 with kind, kubectl, a Docker engine, Kueue's
manifest and the images on this machine (tests/e2e/conftest.py; docs/install.md says how)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from admission.controller import decode_planned
from tests.e2e.conftest import CHECK, TEAM, E2eCluster, eventually, job
from tests.kube_objects import GROUP, VERSION

pytestmark = pytest.mark.e2e

INDEX = "batch.kubernetes.io/job-completion-index"


def admitted_workload(e2e: E2eCluster, job_name: str) -> dict[str, Any]:
    """The Workload Kueue made for the Job, once Atoll's check is Ready and Kueue has admitted it."""
    def probe() -> dict[str, Any] | None:
        for wl in e2e.custom.list_namespaced_custom_object(GROUP, VERSION, TEAM, "workloads")["items"]:
            if not any(o.get("name") == job_name for o in wl["metadata"].get("ownerReferences") or []):
                continue
            status = wl.get("status") or {}
            ready = any(c["name"] == CHECK and c["state"] == "Ready" for c in status.get("admissionChecks") or [])
            admitted = any(c["type"] == "Admitted" and c["status"] == "True" for c in status.get("conditions") or [])
            return wl if ready and admitted else None
        return None
    return eventually(f"Workload of Job {job_name} admitted after Atoll's check", probe)


def slots(workload: dict[str, Any]) -> list[str]:
    [entry] = [c for c in workload["status"]["admissionChecks"] if c["name"] == CHECK]
    [update] = entry["podSetUpdates"]
    assert update["annotations"]["atoll.dev/enforcement"] == "exact"
    return [node for node, count in decode_planned(update["annotations"]["atoll.dev/planned-nodes"]).items() for _ in range(count)]


def bound_pods(e2e: E2eCluster, job_name: str, count: int) -> list[Any]:
    def probe() -> list[Any] | None:
        pods = [p for p in e2e.core.list_namespaced_pod(TEAM, label_selector=f"job-name={job_name}").items if p.spec.node_name]
        return pods if len(pods) == count else None
    return eventually(f"{count} pods of Job {job_name} bound", probe)


def test_a_training_job_runs_on_its_planned_nodes(e2e: E2eCluster) -> None:
    e2e.batch.create_namespaced_job(TEAM, job("train", e2e.settings.image))
    planned = slots(admitted_workload(e2e, "train"))
    pods = bound_pods(e2e, "train", 2)
    for pod in pods:
        assert pod.metadata.annotations["atoll.dev/node"] == pod.spec.node_name, pod.metadata.name  # pinned, and the scheduler obeyed
    assert Counter(p.spec.node_name for p in pods) == Counter(planned)
    assert sorted(p.metadata.annotations["atoll.dev/slot"] for p in pods) == ["0", "1"]


def test_an_indexed_job_puts_each_index_on_its_planned_slot(e2e: E2eCluster) -> None:
    e2e.batch.create_namespaced_job(TEAM, job("ranks", e2e.settings.image, indexed=True))
    planned = slots(admitted_workload(e2e, "ranks"))
    for pod in bound_pods(e2e, "ranks", 2):
        index = int((pod.metadata.labels or {}).get(INDEX) or pod.metadata.annotations[INDEX])
        assert pod.spec.node_name == planned[index], (pod.metadata.name, index, planned)
        assert pod.metadata.annotations["atoll.dev/slot"] == str(index)

"""The real kube-apiserver calls the webhook at pod CREATE (MutatingWebhookConfiguration with a
CA bundle): pods of a Workload admitted under exact enforcement come back pinned to planned
nodes; a recreated pod goes back to its node, or to a replacement when the node is cordoned."""

from __future__ import annotations

from collections import Counter

import pytest
from kubernetes import client

from admission.webhook import ANN_NODE, ANN_PREVIOUS, ANN_REPLACED, ANN_SLOT, REQUEUE_CONDITION
from tests.admission.fabric import Fabric, planned, run
from tests.admission.webhook.conftest import Served, admit, bind, create, exact_fabric, fail, kueue_pod, pinned_node, stored

pytestmark = pytest.mark.apiserver

INDEX = "batch.kubernetes.io/job-completion-index"


def slots_of(fabric: Fabric, workload: str) -> list[str]:
    return [node for node, count in planned(fabric.entry(workload)).items() for _ in range(count)]


def test_an_indexed_job_gets_each_pod_on_the_planned_node_of_its_index(fabric: Fabric, served: Served, register) -> None:
    exact_fabric(fabric)
    admit(fabric, "train", [("main", 4, 2)])
    register(served.url)
    slots = slots_of(fabric, "train")
    assert len(set(slots)) == 2, slots  # 2 GPUs per pod, 4-GPU nodes: two nodes, two pods each
    for index in (3, 0, 2, 1):  # the Job controller creates pods in any order
        pod = create(fabric, kueue_pod(fabric, "train", f"train-{index}", labels={INDEX: str(index)}))
        assert pinned_node(pod) == slots[index]
        assert pod["metadata"]["annotations"][ANN_SLOT] == str(index)
        assert pod["metadata"]["annotations"][ANN_NODE] == slots[index]
        assert pod["spec"]["nodeSelector"] == fabric.entry("train")["podSetUpdates"][0]["nodeSelector"]  # the domain stays


def test_an_unindexed_gang_fills_every_planned_slot_once_across_a_webhook_restart(fabric: Fabric, served: Served, register) -> None:
    exact_fabric(fabric)
    admit(fabric, "gang", [("main", 4, 2)])
    register(served.url)
    pods = [create(fabric, kueue_pod(fabric, "gang", f"gang-{i}")) for i in range(2)]
    served.restart()  # a new process: the slots taken so far come from the pods in the apiserver
    pods += [create(fabric, kueue_pod(fabric, "gang", f"gang-{i}")) for i in range(2, 4)]
    assert sorted(p["metadata"]["annotations"][ANN_SLOT] for p in pods) == ["0", "1", "2", "3"]
    assert Counter(pinned_node(p) for p in pods) == Counter(slots_of(fabric, "gang"))
    extra = create(fabric, kueue_pod(fabric, "gang", "gang-extra"))  # beyond the planned count: no slot is given twice
    assert pinned_node(extra) is None and ANN_SLOT not in extra["metadata"]["annotations"]
    assert extra["spec"]["nodeSelector"] == fabric.entry("gang")["podSetUpdates"][0]["nodeSelector"]  # it stays in its domain


def test_a_pod_recreated_after_a_failure_returns_to_its_healthy_node(fabric: Fabric, served: Served, register) -> None:
    exact_fabric(fabric)
    admit(fabric, "train", [("main", 2, 4)])
    register(served.url)
    slots = slots_of(fabric, "train")
    first = create(fabric, kueue_pod(fabric, "train", "train-0-a", labels={INDEX: "0"}))
    bind(fabric, "train-0-a", pinned_node(first) or "")
    fail(fabric, "train-0-a")
    served.settle()  # the webhook reads a watch-fed cache
    again = create(fabric, kueue_pod(fabric, "train", "train-0-b", labels={INDEX: "0"}))
    assert pinned_node(again) == slots[0] == pinned_node(first)
    assert ANN_REPLACED not in again["metadata"]["annotations"]
    assert again["metadata"]["annotations"][ANN_PREVIOUS] == "train-0-a"


def test_a_pod_recreated_after_its_node_was_cordoned_goes_to_a_replacement_in_its_domain(fabric: Fabric, served: Served,
                                                                                         register) -> None:
    exact_fabric(fabric, cliques=2, per_clique=3)
    admit(fabric, "train", [("main", 2, 4)])
    register(served.url)
    slots = slots_of(fabric, "train")
    domain = fabric.entry("train")["podSetUpdates"][0]["nodeSelector"]
    pods = [create(fabric, kueue_pod(fabric, "train", f"train-{i}-a", labels={INDEX: str(i)})) for i in range(2)]
    for i, pod in enumerate(pods):
        bind(fabric, f"train-{i}-a", pinned_node(pod) or "")
    fail(fabric, "train-0-a")
    fabric.core.patch_node(slots[0], {"spec": {"unschedulable": True}})  # the node is drained after the failure
    served.settle()  # the webhook reads a watch-fed cache
    again = create(fabric, kueue_pod(fabric, "train", "train-0-b", labels={INDEX: "0"}))
    spare = pinned_node(again)
    assert spare not in (None, *slots)  # the other planned node is full with pod 1
    labels = fabric.core.read_node(spare).metadata.labels
    assert all(labels.get(k) == v for k, v in domain.items())  # same clique
    assert again["metadata"]["annotations"][ANN_REPLACED] == slots[0]
    assert again["metadata"]["annotations"][ANN_NODE] == spare

    # it fails again and the replacement is cordoned too: the clique has no healthy node with room left
    bind(fabric, "train-0-b", spare)
    fail(fabric, "train-0-b")
    fabric.core.patch_node(spare, {"spec": {"unschedulable": True}})
    served.settle()
    last = create(fabric, kueue_pod(fabric, "train", "train-0-c", labels={INDEX: "0"}))
    assert pinned_node(last) == spare  # it waits on its node; runs if the node comes back
    conditions = {c["type"]: c for c in fabric.workload("train")["status"].get("conditions") or []}
    mark = conditions[REQUEUE_CONDITION]
    assert mark["status"] == "True" and mark["reason"] == "NoReplacementNode"
    assert mark["message"].startswith(f"decision {fabric.entry('train')['podSetUpdates'][0]['labels']['atoll.dev/decision-id']}:")
    assert "is cordoned" in mark["message"] and "train-0-c" in mark["message"]
    assert fabric.entry("train")["state"] == "Ready"  # the controller's entry is untouched: it decides the Retry

    # the controller answers: its check goes to Retry, naming the pod, so Kueue evicts and requeues
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("train")
    assert verdict.written and entry["state"] == "Retry"
    assert f"pod {fabric.ns}/train-0-c (podset main, slot 0)" in entry["message"] and "is cordoned" in entry["message"]
    assert fabric.kueue.react(fabric.ns, "train") == "retry"


def test_pods_without_exact_enforcement_are_created_unchanged(fabric: Fabric, served: Served, register) -> None:
    fabric.install()  # domain enforcement: Atoll labels the pods but pins nothing
    admit(fabric, "train", [("main", 2, 4)])
    register(served.url)
    pod = create(fabric, kueue_pod(fabric, "train", "train-0"))
    assert pod["metadata"]["labels"]["atoll.dev/decision-id"]
    assert pinned_node(pod) is None and ANN_SLOT not in pod["metadata"]["annotations"]


def test_with_the_webhook_down_unlabelled_pods_are_created_and_exact_pods_wait(fabric: Fabric, served: Served, register) -> None:
    exact_fabric(fabric)
    admit(fabric, "train", [("main", 2, 4)])
    register(served.url)
    served.stop()  # Atoll is down
    plain = {"metadata": {"name": "unrelated", "namespace": fabric.ns, "labels": {"app": "web"}},
             "spec": {"containers": [{"name": "c", "image": "registry.example.com/web:1"}]}}
    assert stored(fabric, create(fabric, plain)["metadata"]["name"])["metadata"]["name"] == "unrelated"
    with pytest.raises(client.ApiException) as refused:  # failurePolicy Fail: no exact pod runs unpinned
        fabric.core.create_namespaced_pod(fabric.ns, kueue_pod(fabric, "train", "train-0", labels={INDEX: "0"}))
    assert refused.value.status == 500 and "pods.exact.atoll.dev" in str(refused.value.body)
    served.start()  # back on the same port: the Job controller's retry goes through, pinned
    assert pinned_node(create(fabric, kueue_pod(fabric, "train", "train-0", labels={INDEX: "0"}))) == slots_of(fabric, "train")[0]


def test_with_the_webhook_down_domain_placed_pods_are_still_created(fabric: Fabric, served: Served, register) -> None:
    """An Atoll outage never blocks pods placed under domain enforcement: the chart's objectSelector
    does not match them (they carry the decision id, not the exact-enforcement label)."""
    fabric.install()  # domain enforcement
    admit(fabric, "train", [("main", 2, 4)])
    register(served.url)
    served.stop()  # Atoll is down; failurePolicy Fail
    update = fabric.entry("train")["podSetUpdates"][0]
    assert "atoll.dev/enforcement" not in update["labels"]
    pods = [create(fabric, kueue_pod(fabric, "train", f"train-{i}", labels={INDEX: str(i)})) for i in range(2)]
    assert [p["metadata"]["labels"]["atoll.dev/decision-id"] for p in pods] == [update["labels"]["atoll.dev/decision-id"]] * 2
    assert all(p["spec"]["nodeSelector"] == update["nodeSelector"] and pinned_node(p) is None for p in pods)


def test_a_taint_the_pod_tolerates_keeps_it_on_its_node_and_one_it_does_not_moves_it(fabric: Fabric, served: Served,
                                                                                       register) -> None:
    exact_fabric(fabric, per_clique=4)
    admit(fabric, "train", [("main", 2, 4)])
    register(served.url)
    slots = slots_of(fabric, "train")
    toleration = {"key": "maintenance", "operator": "Equal", "value": "soon", "effect": "NoSchedule"}
    for i in range(2):
        pod = create(fabric, kueue_pod(fabric, "train", f"train-{i}-a", labels={INDEX: str(i)}))
        bind(fabric, f"train-{i}-a", pinned_node(pod) or "")
        fail(fabric, f"train-{i}-a")
    for node in slots:
        fabric.core.patch_node(node, {"spec": {"taints": [{"key": "maintenance", "value": "soon", "effect": "NoSchedule"}]}})
    served.settle()  # the webhook reads a watch-fed cache
    tolerant = kueue_pod(fabric, "train", "train-0-b", labels={INDEX: "0"})
    tolerant["spec"]["tolerations"] = [toleration]
    assert pinned_node(create(fabric, tolerant)) == slots[0]
    moved = create(fabric, kueue_pod(fabric, "train", "train-1-b", labels={INDEX: "1"}))
    assert pinned_node(moved) not in (None, *slots)
    assert moved["metadata"]["annotations"][ANN_REPLACED] == slots[1]


def test_a_jobset_pod_takes_the_slot_of_its_job_and_completion_index(fabric: Fabric, served: Served, register) -> None:
    exact_fabric(fabric)
    admit(fabric, "js", [("workers", 4, 2)])  # a replicatedJob of 2 Jobs × 2 pods
    register(served.url)
    slots = [node for node, count in planned(fabric.entry("js"), "workers").items() for _ in range(count)]
    for job, completion in ((1, 1), (0, 0), (1, 0), (0, 1)):
        labels = {"jobset.sigs.k8s.io/job-index": str(job), INDEX: str(completion), "jobset.sigs.k8s.io/replicatedjob-replicas": "2"}
        pod = create(fabric, kueue_pod(fabric, "js", f"js-workers-{job}-{completion}", podset="workers", labels=labels))
        assert pod["metadata"]["annotations"][ANN_SLOT] == str(job * 2 + completion)
        assert pinned_node(pod) == slots[job * 2 + completion]

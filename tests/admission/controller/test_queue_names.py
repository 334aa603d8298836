"""Which queues a Workload is in: its LocalQueue is ``namespace/spec.queueName`` and its
ClusterQueue the one that LocalQueue points at; a part the Workload or the LocalQueue does not
say gives None, never a made-up name."""

from __future__ import annotations

from admission.controller._queue_names import cluster_queue_of, queue_name_of
from tests.kube_objects import local_queue, workload

LOCAL_QUEUES = {"team-a/train": local_queue("team-a", "train", "cq-train"), "team-b/train": local_queue("team-b", "train", "cq-other"),
                "team-a/bare": {"metadata": {"name": "bare", "namespace": "team-a"}, "spec": {}},
                "team-a/empty": local_queue("team-a", "empty", "")}


def test_a_workloads_queue_for_learned_runtimes_is_its_namespace_and_local_queue() -> None:
    assert queue_name_of({"metadata": {"namespace": "team-a"}, "spec": {"queueName": "train"}}) == "team-a/train"
    assert queue_name_of({"metadata": {"namespace": "team-b"}, "spec": {"queueName": "train"}}) == "team-b/train"  # same name, other queue
    assert queue_name_of({"metadata": {"namespace": "team-a"}, "spec": {}}) is None  # no LocalQueue named
    assert queue_name_of({"metadata": {"namespace": "team-a"}, "spec": {"queueName": None}}) is None  # not "team-a/None"
    assert queue_name_of({"metadata": {}, "spec": {"queueName": "train"}}) is None  # no namespace
    assert queue_name_of({"metadata": None, "spec": None}) is None  # unreadable


def test_a_workloads_cluster_queue_is_the_one_its_local_queue_points_at_and_none_when_either_is_unknown() -> None:
    assert cluster_queue_of(workload("team-a", "w", [("main", 1, 4)], queue="train"), LOCAL_QUEUES) == "cq-train"
    assert cluster_queue_of(workload("team-b", "w", [("main", 1, 4)], queue="train"), LOCAL_QUEUES) == "cq-other"  # by namespace too
    unnamed = workload("team-a", "w", [("main", 1, 4)])
    del unnamed["spec"]["queueName"]
    assert cluster_queue_of(unnamed, LOCAL_QUEUES) is None  # names no LocalQueue
    assert cluster_queue_of(workload("team-a", "w", [("main", 1, 4)], queue="missing"), LOCAL_QUEUES) is None  # not known (yet)
    assert cluster_queue_of(workload("team-a", "w", [("main", 1, 4)], queue="bare"), LOCAL_QUEUES) is None  # no spec.clusterQueue
    assert cluster_queue_of(workload("team-a", "w", [("main", 1, 4)], queue="empty"), LOCAL_QUEUES) is None  # an empty one
    assert cluster_queue_of(workload("team-c", "w", [("main", 1, 4)], queue="train"), LOCAL_QUEUES) is None  # same name, other namespace

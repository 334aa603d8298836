"""The Workloads waiting for quota, read from the cache as the line a span is priced by: those of
the deciding Workload's ClusterQueue, in Kueue's order (priority, then creation), GPU-less and
quota-holding ones left out, at most the bound from the front."""

from __future__ import annotations

from typing import Any

from admission.controller._quota_line import quota_line
from admission.controller._workloads import parse_workload
from tests.kube_objects import GPU, workload

QUEUES = {"lq-a": "cq-a", "lq-b": "cq-b"}


def waiting(name: str, gpus: int, created: str, *, queue: str = "lq-a", priority: int | None = None, pods: int = 1) -> dict[str, Any]:
    obj = workload("team", name, [("main", pods, gpus)], queue=queue)
    obj["metadata"]["creationTimestamp"] = created
    if priority is not None:
        obj["spec"]["priority"] = priority
    return obj


def read(obj: dict[str, Any]) -> Any:
    return parse_workload(obj, gpu_resource=GPU)


def cq_of(obj: dict[str, Any]) -> str | None:
    return QUEUES.get(obj["spec"]["queueName"])


def test_the_waiters_of_the_clusterqueue_come_in_kueues_order() -> None:
    objs = {f"team/{o['metadata']['name']}": o for o in [
        waiting("late", 1, "2026-01-01T00:10:00Z"),
        waiting("early", 4, "2026-01-01T00:01:00Z", pods=2),
        waiting("urgent", 2, "2026-01-01T00:20:00Z", priority=10),
        waiting("other-queue", 1, "2026-01-01T00:00:00Z", queue="lq-b"),
        waiting("cpu-only", 0, "2026-01-01T00:00:30Z"),
    ]}
    held = waiting("holding", 1, "2026-01-01T00:00:10Z")
    held["status"] = {"conditions": [{"type": "QuotaReserved", "status": "True"}]}
    objs["team/holding"] = held
    line = quota_line(objs, [*objs, "team/gone"], read, cq_of, "gb200", "cq-a")
    assert [(w.gpus, w.per_pod, w.priority) for w in line] == [(2, 2, 10), (8, 4, 0), (1, 1, 0)]
    assert {w.flavor for w in line} == {"gb200"} and line[1].queue == "team/lq-a" and line[1].since < line[2].since
    assert len(quota_line(objs, list(objs), read, cq_of, "gb200", "cq-a", limit=2)) == 2
    assert quota_line(objs, list(objs), read, cq_of, "gb200", None) == []  # the deciding Workload's queue unknown: none


def test_a_waiter_of_another_cluster_queue_counts_only_where_it_shares_the_quota() -> None:
    objs = {f"team/{o['metadata']['name']}": o for o in [
        waiting("mine", 1, "2026-01-01T00:10:00Z"),
        waiting("cohort", 2, "2026-01-01T00:01:00Z", queue="lq-b"),
    ]}
    asked: list[tuple[str, str]] = []

    def shares(key: str, theirs: str) -> bool:
        asked.append((key, theirs))
        return theirs == "cq-b"

    line = quota_line(objs, list(objs), read, cq_of, "gb200", "cq-a", shares=shares)
    assert [(w.gpus, w.queue) for w in line] == [(2, "team/lq-b"), (1, "team/lq-a")]  # Kueue's order across the two
    assert asked == [("team/cohort", "cq-b")]  # asked for the other ClusterQueue's waiter alone
    assert [w.gpus for w in quota_line(objs, list(objs), read, cq_of, "gb200", "cq-a", shares=lambda k, q: False)] == [1]


def test_a_waiter_is_in_the_local_queue_it_names_and_one_naming_none_is_in_no_queue() -> None:
    named = waiting("named", 2, "2026-01-01T00:01:00Z")
    unnamed = waiting("unnamed", 1, "2026-01-01T00:02:00Z")
    del unnamed["spec"]["queueName"]  # waits for no quota: Kueue queues only a Workload naming a LocalQueue
    homeless = waiting("homeless", 1, "2026-01-01T00:03:00Z")
    del homeless["metadata"]["namespace"]  # no namespace: no LocalQueue it can be in (the lookup here still says cq-a)
    objs = {"team/named": named, "team/unnamed": unnamed, "team/homeless": homeless}
    line = quota_line(objs, list(objs), read, lambda obj: "cq-a", "gb200", "cq-a")
    assert [(w.gpus, w.queue) for w in line] == [(2, "team/lq-a"), (1, None)]  # learned runtimes: all queues, not a queue "None/lq-a"

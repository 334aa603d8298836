"""The quota yield's reads kept between passes (``_yield_index``): a long-lived ``QuotaYield``
chooses what one reading every Workload afresh and weighing every waiter chooses, through
Workloads that come, change and go (the quota reserved kept too); and a pass stops once no
waiter left could be served."""

from __future__ import annotations

import random
from typing import Any

from admission.controller._records import rfc3339
from admission.controller._yield_index import ReservedIndex, WaiterIndex
from admission.controller._yielding import QuotaYield, waits_for_quota
from admission.kube import Obj
from admission.simulator import workload_object

GPU = "nvidia.com/gpu"
T0 = 1_800_000_000.0


def queues(quota: int) -> dict[str, Obj]:
    """The ClusterQueues the controller watches."""
    return {"cq": {"metadata": {"name": "cq"}, "spec": {"resourceGroups": [{"coveredResources": [GPU], "flavors": [
        {"name": "f", "resources": [{"name": GPU, "nominalQuota": str(quota)}]}]}]}}}


LOCAL = {"ns/lq": {"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}}
"""The LocalQueues the controller watches."""


def _podsets(gpus: int) -> list[dict[str, Any]]:
    return [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: str(gpus)}}}]}}}]


def parked(name: str, gpus: int) -> Obj:
    obj = workload_object(name, _podsets(gpus), flavor="f", namespace="ns", queue="lq", cluster_queue="cq")
    obj["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] = {GPU: str(gpus)}
    return obj


def waiting(name: str, gpus: int, created: float, priority: int = 0) -> Obj:
    obj = workload_object(name, _podsets(gpus), flavor="f", namespace="ns", queue="lq", cluster_queue="cq")
    obj["metadata"]["creationTimestamp"] = rfc3339(created)
    obj["spec"]["priority"] = priority
    obj["status"] = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]}
    return obj


def test_a_quota_yield_keeping_its_reads_chooses_what_one_reading_and_weighing_everything_afresh_chooses() -> None:
    rng = random.Random(3)
    objects: dict[str, Obj] = {}
    kept = QuotaYield(objects, LOCAL, queues(64), lambda: GPU, lambda flavor: 40)
    fresh = QuotaYield(objects, LOCAL, queues(64), lambda: GPU, lambda flavor: 40)
    kept.reserved = ReservedIndex()  # told of every change below; ``fresh`` adds the quota up over every Workload each pass
    givers: list[str] = []
    pairs = 0
    for step in range(300):
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(40)
            key, move = f"ns/w{k}", rng.random()
            kept.reserved.touch(key)
            if move < 0.45:  # it waits for quota (new, or a new version: its priority may change)
                objects[key] = waiting(f"w{k}", rng.choice([1, 2, 4, 8, 16, 32]), T0 + rng.randrange(100), rng.choice([0, 0, 3]))
            elif move < 0.7:  # it holds quota and parks
                objects[key] = parked(f"w{k}", rng.choice([4, 8, 16]))
                if key not in givers:
                    givers.append(key)
            elif move < 0.8 and key in givers:
                givers.remove(key)
            elif move < 0.9:
                objects.pop(key, None)
                kept.forget(key)
                fresh.forget(key)
                if key in givers:
                    givers.remove(key)
            if key in objects:
                kept.saw(objects[key])
                fresh.saw(objects[key])
        fresh._index = WaiterIndex(fresh.cluster_queue_of, waits_for_quota)  # nothing kept: every Workload read afresh, every waiter weighed
        fresh._index.stop_early = False
        live = [g for g in givers if g in objects]
        got = kept.choose(live, lambda key: False, lambda key: False)
        assert got == fresh.choose(live, lambda key: False, lambda key: False), step
        assert kept._served == fresh._served and kept._claims == fresh._claims
        pairs += len(got)
    assert pairs > 20  # the two chose something, often


def test_a_pass_stops_once_no_waiter_left_could_be_served_and_still_serves_one_that_asks_for_less() -> None:
    objects: dict[str, Obj] = {"ns/giver": parked("giver", 4)}
    quota = QuotaYield(objects, LOCAL, queues(4), lambda: GPU, lambda flavor: 100)
    for i in range(2000):  # the first asks for 8 GPUs: the giver's 4 would not let it in; those after it ask for 16
        objects[f"ns/w{i}"] = waiting(f"w{i}", 8 if i == 0 else 16, T0 + i)
        quota.saw(objects[f"ns/w{i}"])
    weighed: list[str] = []

    def aside(key: str) -> bool:
        weighed.append(key)
        return False

    assert quota.choose(["ns/giver"], aside, lambda key: False) == []
    assert len(weighed) == 1  # after the first, every waiter needs more than one that found nothing: the pass stops
    quota._index.stop_early = False
    weighed.clear()
    assert quota.choose(["ns/giver"], aside, lambda key: False) == [] and len(weighed) == 2000
    quota._index.stop_early = True
    objects["ns/small"] = waiting("small", 4, T0 + 5000)  # last in Kueue's order, and asks for what the giver has
    quota.saw(objects["ns/small"])
    weighed.clear()
    assert quota.choose(["ns/giver"], aside, lambda key: False) == [("ns/giver", "ns/small")]
    assert len(weighed) == 2001  # one that asks for less was still ahead: none could be skipped by the stop

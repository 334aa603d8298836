"""``OwedIndex``: the owed gangs kept between looks give what reading every Workload afresh gives
(``owed_gangs``), through versions, time, Workloads that come and go, parked ones and a new
profiles document, and a look reads only what changed."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping

from admission.controller._owed_index import OwedIndex
from admission.controller._owing import _read_gang
from admission.controller._queueing import is_owed
from admission.controller._records import rfc3339
from admission.controller._workloads import WorkloadView, parse_workload
from admission.kube import Obj
from admission.queue import OwedGang
from admission.simulator import workload_object
from policies import ProfilesDocument, load_profiles
from tests.admission.controller.test_owing import HELD, NOW


def owed_gangs(objects: Mapping[str, Obj], waiting: Iterable[str], parked: Iterable[str], doc: ProfilesDocument,
               read: Callable[[Obj], WorkloadView], cluster_queue_of: Callable[[Obj], str | None], flavor_of: Callable[[str], str],
               now: float) -> dict[tuple[str, str | None], list[OwedGang]]:
    """The reference ``OwedIndex`` must agree with: (ClusterQueue, flavor or None) → the gangs owed
    there now, from the Workloads ``waiting`` for quota and ``parked`` (each looked at once; gone
    or unreadable ones are left out), each read afresh at every look."""
    out: dict[tuple[str, str | None], list[OwedGang]] = {}
    seen: set[str] = set()
    for key in [*waiting, *parked]:
        obj = objects.get(key)
        if obj is None or key in seen:
            continue
        seen.add(key)
        r = _read_gang(obj, doc, read)
        if r.profile is None or not is_owed(r.profile, r.pods, r.gpus, r.created, now):
            continue
        queue = r.cluster_queue if r.quota else cluster_queue_of(obj)
        if not queue:
            continue
        flavor = (flavor_of(key) or None) if r.quota else None
        assert r.created is not None
        out.setdefault((queue, flavor), []).append(OwedGang(-r.priority, r.created, key, queue, r.gpus, flavor))
    return out


def waiting_for_quota(name: str, pods: int, created: float, priority: int = 0) -> Obj:
    obj = workload_object(name, [{"name": "main", "count": pods, "template": {"spec": {"containers": [{"name": "c", "resources": {
        "requests": {"nvidia.com/gpu": "4"}}}]}}}], flavor="f", namespace="ns")
    obj["metadata"]["creationTimestamp"] = rfc3339(created)
    obj["spec"]["priority"] = priority
    obj["status"] = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]}
    return obj


def holding_quota(obj: Obj) -> Obj:
    return {**obj, "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                              "admission": {"clusterQueue": "cq", "podSetAssignments": []}}}


START = load_profiles("""
defaultProfile: held
profiles:
  held: {queueing: {reserveAfterSeconds: 600, holdBehindGangs: start, holdBehindGangsMinGPUs: 8}}
""")


def test_the_owed_lists_kept_between_looks_are_those_read_afresh_and_a_look_reads_only_what_changed() -> None:
    rng = random.Random(7)
    objects: dict[str, Obj] = {}
    waiting: dict[str, None] = {}
    parked: list[str] = []
    index = OwedIndex()
    reads: list[str] = []
    owed: dict[tuple[str, str | None], list[str]] = {}

    def read(obj: Obj) -> WorkloadView:
        reads.append(obj["metadata"]["name"])
        return parse_workload(obj)

    def put(key: str, obj: Obj | None) -> None:
        if obj is None:
            objects.pop(key, None)
        else:
            objects[key] = obj
        index.touch(key)

    now, doc = NOW, HELD
    for step in range(400):
        now += rng.choice([0.0, 30.0, 120.0])
        for _ in range(rng.randint(0, 3)):
            k = rng.randrange(60)
            key = f"ns/w{k}"
            move = rng.random()
            if move < 0.5:  # a new Workload waiting for quota, or a new version of one
                put(key, waiting_for_quota(f"w{k}", rng.choice([1, 2, 3]), now - rng.choice([0, 300, 700]), rng.choice([0, 0, 5])))
                waiting[key] = None
            elif move < 0.65 and key in objects:  # it holds quota: no longer waiting, and parked (checked under start)
                put(key, holding_quota(objects[key]))
                waiting.pop(key, None)
                if key not in parked:
                    parked.append(key)
            elif move < 0.75 and key in parked:  # it leaves the room without a change of its own
                parked.remove(key)
            elif move < 0.9:  # gone
                put(key, None)
                waiting.pop(key, None)
                if key in parked:
                    parked.remove(key)
        if step == 200:
            doc = START  # a new document: parked gangs are owed too now
        before = len(reads)
        changed = index.look(objects, waiting, parked if doc is START else [], doc, read, lambda obj: "cq", lambda key: "f", now)
        fresh = owed_gangs(objects, waiting, parked if doc is START else [], doc, parse_workload, lambda obj: "cq", lambda key: "f", now)
        for where, gangs in changed.items():
            assert [(g.neg_priority, g.created, g.key) for g in gangs] == sorted((g.neg_priority, g.created, g.key) for g in gangs)
            if gangs:
                owed[where] = [g.key for g in gangs]
            else:
                owed.pop(where, None)
        assert owed == {where: sorted((g.key for g in gangs), key=lambda k: next((g.neg_priority, g.created, g.key)
                                                                                  for g in gangs if g.key == k))
                        for where, gangs in fresh.items()}, step
        if step != 200:
            assert len(reads) - before <= 3 + (len(parked) if doc is START else 0)  # only what changed is read again
    assert any(owed.values()) and ("cq", "f") in owed  # parked gangs were owed too once the document said start


def test_a_gang_becomes_owed_when_its_wait_reaches_reserve_after_seconds_without_a_change_of_its_own() -> None:
    objects = {"ns/gang": waiting_for_quota("gang", 2, NOW - 100), "ns/one": waiting_for_quota("one", 1, NOW - 800)}
    index = OwedIndex()
    for key in objects:
        index.touch(key)
    look = lambda now: index.look(objects, list(objects), [], HELD, parse_workload, lambda obj: "cq", lambda key: "f", now)  # noqa: E731
    assert look(NOW) == {}  # 100 s of 600: not owed yet; one pod is no gang
    assert look(NOW + 499) == {}
    assert {w: [g.key for g in gangs] for w, gangs in look(NOW + 500).items()} == {("cq", None): ["ns/gang"]}
    assert look(NOW + 900) == {}  # nothing changed since
    del objects["ns/gang"]
    index.touch("ns/gang")
    assert look(NOW + 900) == {("cq", None): []}  # gone: its list is empty now

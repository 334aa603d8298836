"""Gangs owed their turn: what is behind one in Kueue's order is held, what is ahead is not, and
a gang owed no longer is said so (what it held is woken)."""

from __future__ import annotations

from admission.queue import OwedGang, OwedGangs, Running, RuntimeEstimator, ends_before_gang, gang_start


def gang(key: str, created: float, priority: int = 0, flavor: str | None = "f", queue: str = "cq") -> OwedGang:
    return OwedGang(-priority, created, key, queue, 32, flavor)


def test_only_a_workload_behind_the_first_owed_gang_in_kueues_order_is_held() -> None:
    owed = OwedGangs()
    assert owed.set("cq", "f", [gang("ns/late", 200.0), gang("ns/early", 100.0)]) == []
    assert [g.key for g in owed.on("cq", "f")] == ["ns/early", "ns/late"]
    held = owed.ahead("cq", "f", "ns/small", 0, 150.0)
    assert held is not None and held.key == "ns/early"  # created after the first owed gang
    assert owed.ahead("cq", "f", "ns/older", 0, 50.0) is None  # created before it: ahead in Kueue's order
    assert owed.ahead("cq", "f", "ns/urgent", 5, 150.0) is None  # a higher priority comes first whatever its age
    assert owed.ahead("cq", "f", "ns/early", 0, 100.0) is None  # the first owed gang itself
    assert owed.ahead("cq", "f", "ns/small", 0, None) is None  # no creation time: no order to hold it by
    assert owed.ahead("other", "f", "ns/small", 0, 150.0) is None  # another ClusterQueue
    assert owed.ahead("cq", "g", "ns/small", 0, 150.0) is None  # the gang's quota is on another flavor


def test_a_gang_whose_flavor_is_not_known_yet_holds_every_flavor_of_its_queue() -> None:
    owed = OwedGangs()
    owed.set("cq", None, [gang("ns/pending", 100.0, flavor=None)])
    held = owed.ahead("cq", "g", "ns/small", 0, 150.0)
    assert held is not None and held.key == "ns/pending"


def test_set_says_when_a_gang_is_owed_no_longer_and_keeps_other_queues_and_flavors() -> None:
    owed = OwedGangs()
    owed.set("cq", "f", [gang("ns/a", 100.0), gang("ns/b", 110.0)])
    owed.set("cq", "g", [gang("ns/c", 120.0, flavor="g")])
    assert owed.set("cq", "f", [gang("ns/a", 100.0), gang("ns/b", 110.0), gang("ns/d", 130.0)]) == []  # one more: nothing to wake
    assert owed.set("cq", "f", [gang("ns/b", 110.0), gang("ns/d", 130.0)]) == ["ns/a"]  # ns/a left: what it held may go
    assert len(owed) == 3 and [g.key for g in owed.on("cq", "g")] == ["ns/c"]
    assert owed.set("cq", "f", []) == ["ns/b", "ns/d"]
    assert owed.ahead("cq", "f", "ns/small", 0, 150.0) is None and len(owed) == 1


def running(flavor: str, gpus: int, ends: float) -> Running:
    return Running(flavor, (("n", gpus),), 0.0, limit=ends)


def test_a_gang_is_expected_to_start_when_the_running_workloads_free_its_gpus_in_the_order_they_end() -> None:
    est = RuntimeEstimator()
    jobs = [running("f", 8, 900.0), running("f", 4, 300.0), running("f", 4, 600.0)]
    assert gang_start(8, 8, jobs, est, 100.0) == 100.0  # free already
    assert gang_start(8, 0, jobs, est, 100.0) == 600.0  # the 4 ending at 300, then the 4 at 600
    assert gang_start(12, 2, jobs, est, 100.0) == 900.0
    assert gang_start(32, 2, jobs, est, 100.0) is None  # never, as far as is known
    unknown = Running("f", (("n", 8),), 0.0)  # no limit, nothing learned: left out
    assert gang_start(8, 0, [unknown, running("f", 8, 700.0)], est, 100.0) == 700.0


def test_a_workload_goes_before_the_gang_only_when_it_is_known_to_end_by_the_gangs_start() -> None:
    assert ends_before_gang(500.0, 700.0, 100.0)
    assert ends_before_gang(600.0, 700.0, 100.0)
    assert not ends_before_gang(601.0, 700.0, 100.0)
    assert not ends_before_gang(None, 700.0, 100.0)
    assert not ends_before_gang(10.0, None, 100.0)

"""Expected ends and domain outlooks: Kueue's limit where set, else runtimes learned per queue and
size band with their error; a domain's expected free time is when enough GPUs come back."""

from __future__ import annotations

import math

import pytest

from admission.queue import Running, RuntimeEstimator, domain_outlook, soonest
from topology import Level, NodeInfo, ResourceVector, Snapshot

SU, CLIQUE = "network.example.com/su", "nvidia.com/gpu.clique"


def cluster() -> Snapshot:
    """1 SU × 2 islands × 4 nodes × 4 GPUs, all free."""
    nodes = [NodeInfo(f"c{c}n{n}", {SU: "u0", CLIQUE: f"c{c}"}, ResourceVector(4, 1000, 1000, 10)) for c in range(2) for n in range(4)]
    return Snapshot("f", [Level(SU, 50), Level(CLIQUE, 1800)], nodes)


def use(snap: Snapshot, *names: str) -> None:
    for name in names:
        snap.reserve(name, ResourceVector(gpu=4))


def test_estimates_come_from_the_most_specific_learned_figure_with_its_error() -> None:
    est = RuntimeEstimator(min_samples=3)
    assert est.estimate("team/a", 4) is None  # nothing learned: no answer
    for s in (100.0, 200.0, 300.0):
        est.learn("team/a", 4, s)
    got = est.estimate("team/a", 4)
    assert got is not None and got.seconds == pytest.approx(200.0) and got.error == pytest.approx(100.0) and got.samples == 3
    assert "queue team/a, 1-7 GPUs" in got.describe()
    other = est.estimate("team/b", 2)  # another queue, same band: all queues of the band
    assert other is not None and other.source.startswith("all queues, 1-7") and other.seconds == pytest.approx(200.0)
    big = est.estimate("team/a", 64)  # another band of the same queue: the queue as a whole
    assert big is not None and big.source == "queue team/a"
    limit = est.estimate("team/a", 4, limit=50.0)
    assert limit is not None and (limit.seconds, limit.error, limit.source) == (50.0, 0.0, "limit")


def test_an_overdue_workload_ends_now_under_a_limit_and_runs_one_more_estimate_otherwise() -> None:
    est = RuntimeEstimator(min_samples=1)
    est.learn(None, 8, 600.0)
    learned = Running("f", (("c0n0", 4), ("c0n1", 4)), started=0.0)
    assert learned.expected_end(est, now=100.0) == (600.0, 0.0)
    assert learned.expected_end(est, now=1000.0) == (1600.0, 0.0)
    limited = Running("f", (("c0n0", 8),), started=0.0, limit=300.0)
    assert limited.expected_end(est, now=100.0) == (300.0, 0.0)
    assert limited.expected_end(est, now=1000.0) == (1000.0, 0.0)
    assert Running("f", (("c0n0", 8),), started=0.0, queue="q").expected_end(RuntimeEstimator(), now=0.0) is None


def test_a_domain_is_expected_free_when_enough_of_its_gpus_come_back() -> None:
    snap = cluster()
    use(snap, "c0n0", "c0n1", "c0n2", "c1n0", "c1n1", "c1n2", "c1n3")  # c0: 4 free GPUs; c1: 0
    est = RuntimeEstimator(min_samples=1)
    running = [Running("f", (("c0n0", 4), ("c0n1", 4)), 0.0, limit=1000.0), Running("f", (("c0n2", 4),), 0.0, limit=200.0),
               Running("f", (("c1n0", 4), ("c1n1", 4)), 0.0, limit=100.0), Running("f", (("c1n2", 4), ("c1n3", 4)), 0.0, limit=150.0)]
    out = domain_outlook(snap, CLIQUE, 12, running, est, now=50.0)
    by = {o.path[-1]: o for o in out}
    assert (by["c0"].free, by["c0"].to_drain, by["c0"].free_at) == (4, 8, 1000.0)  # 200 s frees only 4 of the 8 it lacks
    assert (by["c1"].free, by["c1"].to_drain, by["c1"].free_at) == (0, 12, 150.0)
    best = soonest(out)
    assert best is not None and best.path[-1] == "c1"
    assert domain_outlook(snap, CLIQUE, 20, running, est, now=50.0) == []  # no island holds 20 GPUs
    whole = domain_outlook(snap, None, 20, running, est, now=50.0)
    assert len(whole) == 1 and whole[0].free_at == 150.0  # 4 free + 16 back at 150 s
    blocked = domain_outlook(snap, CLIQUE, 12, running, est, now=50.0, blocked={"c1n0": 4, "c1n1": 4})
    assert [o.path[-1] for o in blocked] == ["c0"]  # reserved for another gang: c1 no longer holds 12


def test_an_unknown_runtime_leaves_the_free_time_unknown() -> None:
    snap = cluster()
    use(snap, *(f"c0n{n}" for n in range(4)))
    out = domain_outlook(snap, CLIQUE, 16, [Running("f", tuple((f"c0n{n}", 4) for n in range(4)), 0.0, queue="q")], RuntimeEstimator(), 0.0)
    c0 = next(o for o in out if o.path[-1] == "c0")
    assert c0.free_at is None and c0.to_drain == 16
    c1 = next(o for o in out if o.path[-1] == "c1")
    assert c1.free_at == 0.0 and not math.isnan(c1.error)


def test_gpus_running_workloads_hold_on_a_node_it_may_not_use_never_come_back_to_it() -> None:
    snap = cluster()
    use(snap, "c0n0", "c0n1", "c0n2", "c0n3")  # c0 full
    est = RuntimeEstimator(min_samples=1)
    running = [Running("f", (("c0n0", 4),), 0.0, limit=100.0), Running("f", (("c0n1", 4), ("c0n2", 4), ("c0n3", 4)), 0.0, limit=900.0)]
    assert domain_outlook(snap, CLIQUE, 4, running, est, now=0.0)[0].free_at == 100.0
    snap.eligible = snap.eligible.copy()
    snap.eligible[snap.node_index["c0n0"]] = 0  # e.g. under the Workload's speed floor: c0n0 freeing at 100 s is not its room
    c0 = domain_outlook(snap, CLIQUE, 4, running, est, now=0.0)[0]
    assert (c0.capacity, c0.to_drain, c0.free_at) == (12, 4, 900.0)


def test_free_gpus_count_in_whole_pods_when_asked_scraps_are_no_room() -> None:
    snap = cluster()
    for name in ("c0n0", "c0n1", "c0n2", "c0n3"):
        snap.reserve(name, ResourceVector(gpu=2))  # c0: 8 GPUs free, 2 per node
    use(snap, *(f"c1n{n}" for n in range(4)))
    est = RuntimeEstimator(min_samples=1)
    running = [Running("f", ((f"c0n{n}", 2),), 0.0, limit=100.0 * (n + 1)) for n in range(4)]
    running.append(Running("f", tuple((f"c1n{n}", 4) for n in range(4)), 0.0, limit=1000.0))
    gpus = domain_outlook(snap, CLIQUE, 8, running, est, now=0.0)[0]
    assert (gpus.free, gpus.to_drain, gpus.free_at) == (8, 0, 0.0)  # as GPUs: room now
    pods = domain_outlook(snap, CLIQUE, 8, running, est, now=0.0, per_pod=4)
    c0 = next(o for o in pods if o.path[-1] == "c0")
    assert (c0.free, c0.to_drain, c0.free_at) == (0, 8, 200.0)  # two whole nodes: c0n0 at 100 s, c0n1 at 200 s
    c1 = next(o for o in pods if o.path[-1] == "c1")
    assert (c1.free, c1.to_drain, c1.free_at) == (0, 8, 1000.0)
    assert soonest(pods) is c0
    assert domain_outlook(snap, CLIQUE, 8, running, est, now=0.0, per_pod=1) == domain_outlook(snap, CLIQUE, 8, running, est, now=0.0)

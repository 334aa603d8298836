"""Expected ends and domain outlooks: Kueue's limit where set, else runtimes learned per queue and
size band with their error; a domain's expected free time is when enough GPUs come back."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.queue import DomainOutlook, Outlook, Running, RuntimeEstimator, domain_outlook, soonest
from admission.queue._estimate import latest_ends
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


def walked_outlook(snapshot: Snapshot, level: str | None, gpus: int, running: Iterable[Running], estimator: RuntimeEstimator,
                   now: float, blocked: Mapping[str, int] | None = None, per_pod: int = 1) -> list[DomainOutlook]:
    """``domain_outlook``'s slow twin: every running Workload walked and its expected end asked
    at each call, no index and nothing kept (the outlook as first written)."""
    lv = snapshot.level_index(level) if level is not None and level in snapshot.level_labels else 0
    alloc = np.where(snapshot.eligible.astype(bool), snapshot.alloc[:, 0], 0)
    free = np.minimum(snapshot.free[:, 0], alloc)
    ends: dict[int, list[tuple[float, float, int, int]]] = {}
    for r in running:
        if r.flavor != snapshot.flavor:
            continue
        got = r.expected_end(estimator, now)
        for name, g in r.nodes:
            i = snapshot.node_index.get(name)
            if i is None or not alloc[i]:
                continue
            d = int(snapshot.node_dom[lv, i]) if level is not None else 0
            ends.setdefault(d, []).append((got[0], got[1], g, i) if got is not None else (math.inf, math.inf, g, i))
    pod = max(per_pod, 1)
    out = []
    for d in range(snapshot.num_domains(lv)) if level is not None else range(1):
        members = range(*snapshot.domain_range(lv, d)) if level is not None else range(snapshot.num_nodes)
        cap = sum(int(alloc[i]) for i in members)
        taken = sum(g for n, g in (blocked or {}).items() if snapshot.node_index.get(n, -1) in members)
        if cap < gpus or cap - taken < gpus:
            continue
        cap -= taken
        now_free = sum(int(free[i]) // pod * pod for i in members)
        to_drain = max(0, gpus - now_free)
        free_at: float | None = now
        error = 0.0
        if to_drain:
            got_back, free_at, node_free = 0, None, {}
            for end, err, g, i in sorted(ends.get(d, [])):
                if pod == 1:
                    got_back += g
                else:
                    was = node_free.get(i, int(free[i]))
                    node_free[i] = min(was + g, int(alloc[i]))
                    got_back += node_free[i] // pod * pod - was // pod * pod
                if got_back >= to_drain:
                    free_at, error = (end, err) if math.isfinite(end) else (None, 0.0)
                    break
        out.append(DomainOutlook(d, snapshot.domain_path(lv, d) if level is not None else (), cap, now_free, to_drain, free_at, error))
    return out


def wide_cluster() -> Snapshot:
    """2 SUs × 2 islands × 3 nodes × 4 GPUs, and a node of another flavor's name nowhere in it."""
    nodes = [NodeInfo(f"u{u}c{c}n{n}", {SU: f"u{u}", CLIQUE: f"u{u}c{c}"}, ResourceVector(4, 1000, 1000, 10))
             for u in range(2) for c in range(2) for n in range(3)]
    return Snapshot("f", [Level(SU, 50), Level(CLIQUE, 1800)], nodes)


NAMES = [f"u{u}c{c}n{n}" for u in range(2) for c in range(2) for n in range(3)] + ["elsewhere"]
steps = st.one_of(
    st.tuples(st.just("start"), st.integers(0, 7), st.lists(st.tuples(st.sampled_from(NAMES), st.integers(1, 4)), min_size=1, max_size=4),
              st.sampled_from(["f", "g"]), st.sampled_from([None, 100.0, 700.0]), st.sampled_from([None, "q1", "q2"])),
    st.tuples(st.just("finish"), st.integers(0, 7)),
    st.tuples(st.just("forget"), st.integers(0, 7)),
    st.tuples(st.just("later"), st.sampled_from([0.0, 50.0, 400.0])),
    st.tuples(st.just("learn"), st.sampled_from(["q1", "q2"]), st.sampled_from([50.0, 2000.0])),
)
questions = st.tuples(st.sampled_from([CLIQUE, SU, None, "no/such-level"]), st.integers(1, 24), st.sampled_from([1, 2, 4]),
                      st.lists(st.integers(0, 4), min_size=12, max_size=12), st.lists(st.booleans(), min_size=12, max_size=12),
                      st.dictionaries(st.sampled_from(NAMES), st.integers(1, 4), max_size=2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(st.tuples(steps, questions), min_size=1, max_size=25))
def test_the_outlook_read_from_the_kept_index_equals_the_one_walked_afresh(history: list[tuple[tuple[object, ...], tuple[object, ...]]]) -> None:
    """Workloads start, finish (a runtime learned), go, runtimes are learned, and time passes; after each step a question
    asked of the outlook's index (its ends kept between questions) answers as the walk over
    every running Workload does, asked afresh, for each level, size, pod size, free room,
    eligibility and reservation; and so do the latest ends per node a reservation's nodes are chosen by."""
    outlook, now = Outlook(min_samples=1), 1000.0
    outlook.estimator.learn("q1", 4, 300.0)
    for step, (level, gpus, per_pod, used, eligible, blocked) in history:
        if step[0] == "start":
            _, key, nodes, flavor, limit, queue = step
            outlook.started(f"w{key}", Running(str(flavor), tuple(nodes), now - 50.0 * key, queue, limit))  # type: ignore[arg-type,operator]
        elif step[0] == "finish":
            outlook.finished(f"w{step[1]}", now)
        elif step[0] == "forget":
            outlook.forget(f"w{step[1]}")
        elif step[0] == "learn":  # a runtime learned from a Workload seen only finished: nothing running changes
            outlook.estimator.learn(str(step[1]), 4, float(step[2]))  # type: ignore[arg-type]
        else:
            now += float(step[1])  # type: ignore[arg-type]
        snap = wide_cluster().fork()
        for i, u in enumerate(used):  # type: ignore[arg-type]
            snap.free[i, 0] = 4 - u
        snap.eligible = np.asarray(eligible, dtype=snap.eligible.dtype)
        ask = (snap, level, gpus, outlook.estimator, now, blocked, per_pod)
        fresh = walked_outlook(snap, level, gpus, outlook.on("f"), outlook.estimator, now, blocked, per_pod)  # type: ignore[arg-type]
        assert domain_outlook(snap, level, gpus, outlook.running_on("f"), *ask[3:]) == fresh  # type: ignore[arg-type]
        assert domain_outlook(snap, level, gpus, outlook.on("f"), *ask[3:]) == fresh  # type: ignore[arg-type]
        lv = snap.level_index(level) if level in snap.level_labels else None  # type: ignore[arg-type]
        for d in range(snap.num_domains(lv) if lv is not None else 1):
            members = range(*snap.domain_range(lv, d)) if lv is not None else range(snap.num_nodes)
            walked: dict[int, float] = {}
            for r in outlook.on("f"):
                got = r.expected_end(outlook.estimator, now)
                for name, _ in r.nodes:
                    if snap.node_index.get(name, -1) in members:
                        i = snap.node_index[name]
                        walked[i] = max(walked.get(i, now), got[0] if got is not None else math.inf)
            assert latest_ends(snap, lv, d, outlook.running_on("f"), outlook.estimator, now) == walked


def test_a_workload_that_ended_no_longer_counts_and_a_learned_runtime_moves_the_kept_ends() -> None:
    snap = cluster()
    use(snap, *(f"c0n{n}" for n in range(4)), *(f"c1n{n}" for n in range(4)))
    outlook = Outlook(min_samples=1)
    outlook.estimator.learn("q", 16, 1000.0)
    outlook.started("a", Running("f", tuple((f"c0n{n}", 4) for n in range(4)), 0.0, "q"))
    outlook.started("b", Running("f", tuple((f"c1n{n}", 4) for n in range(4)), 0.0, "q", limit=500.0))
    index = outlook.running_on("f")

    def free_at() -> list[float | None]:
        return [o.free_at for o in domain_outlook(snap, CLIQUE, 16, index, outlook.estimator, 100.0)]

    assert free_at() == [1000.0, 500.0]
    outlook.finished("b", 100.0)  # b ended (its GPUs free now, as the feeder's snapshot says), and 100 s is learned
    for n in range(4):
        snap.release(f"c1n{n}", ResourceVector(gpu=4))
    assert free_at() == [550.0, 100.0]  # a's learned runtime moved with what b taught: (1000 + 100) / 2 after its start
    outlook.forget("a")
    assert free_at() == [None, 100.0]  # nobody runs on c0 any more: when it frees is not known


def test_the_kept_ends_move_when_a_workload_starts_again_a_runtime_is_learned_or_time_passes() -> None:
    snap = cluster()
    use(snap, *(f"c0n{n}" for n in range(4)))
    outlook = Outlook(min_samples=1)
    outlook.estimator.learn("q", 16, 1000.0)
    index = outlook.running_on("f")

    def free_at(now: float) -> float | None:
        return domain_outlook(snap, CLIQUE, 16, index, outlook.estimator, now)[0].free_at

    outlook.started("a", Running("f", tuple((f"c0n{n}", 4) for n in range(4)), 0.0, limit=300.0))
    assert free_at(100.0) == 300.0
    outlook.started("a", Running("f", tuple((f"c0n{n}", 4) for n in range(4)), 0.0, limit=600.0))  # started again, same moment
    assert free_at(100.0) == 600.0
    assert free_at(700.0) == 700.0  # overdue under its limit: it ends now, and now moved
    outlook.started("a", Running("f", tuple((f"c0n{n}", 4) for n in range(4)), 0.0, "q"))
    assert free_at(700.0) == 1000.0
    outlook.estimator.learn("q", 16, 3000.0)  # learned from a Workload seen only finished: nothing running changed
    assert free_at(700.0) == 2000.0

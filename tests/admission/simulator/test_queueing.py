"""The queue manager in the simulator, through the deployed decision path: a large gang behind a
stream of small jobs is admitted within a bounded time once it reserves, where without a
reservation the stream starves it; the GPUs reservations idle are reported."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from admission.simulator._jobs import Job, make_job
from admission.simulator._metrics import summarize
from admission.simulator._policies import make_policies
from admission.simulator._sim import STATUS_DONE, SimResult, SimSettings, prepare_workload, simulate
from policies import load_profiles
from topology import ClusterModel

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
RESERVE_AFTER = 600
DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}}}}
  reserving: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}},
               queueing: {{reserveAfterSeconds: {RESERVE_AFTER}}}}}
  drain300: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}}, queueing: {{reserveAfterSeconds: 300}}}}
  soonest300: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}},
                queueing: {{reserveAfterSeconds: 300, reserveTarget: soonestFree}}}}
""")
_ids = itertools.count()


def job(arrival: float, duration: float, gpus: int) -> Job:
    return make_job(f"j{next(_ids)}", arrival, duration, gpus, 4, "training")


def cluster(islands: int = 2) -> ClusterModel:
    """1 SU × ``islands`` islands × 4 nodes × 4 GPUs."""
    return ClusterModel.model_validate({"name": "test", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "generate": [{"level": SU, "count": 1, "prefix": "u"}, {"level": CLIQUE, "count": islands, "prefix": "r"},
                     {"level": "kubernetes.io/hostname", "count": 4, "prefix": "n"}]}]})


def stream(seed: int = 3) -> list[Job]:
    """A 16-GPU gang (one whole island) at t=1500 behind 2-GPU jobs that keep both islands partly used."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for _ in range(160):
        t += rng.uniform(20, 40)
        jobs.append(job(t, rng.uniform(200, 400), 2))
    jobs.append(job(1500.0, 300.0, 16))
    return sorted(jobs, key=lambda j: j.submit_s)


def run(policy: str, parking: bool, declared: float | None = None) -> tuple[SimResult, int]:
    """Quota is twice capacity: a gang holding its quota through its Retries (as Kueue does) keeps
    no small job out, so only a reservation stops the stream from taking its island."""
    jobs = stream()
    gang = next(i for i, j in enumerate(jobs) if j.gpus == 16)
    (pol,) = make_policies([policy], DOC, seed=1)
    settings = SimSettings(parking=parking, declared_runtime_factor=declared, quota_factor=2.0)
    return simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=settings), gang


def test_a_gang_behind_a_stream_of_small_jobs_starts_within_a_bounded_time_once_it_reserves() -> None:
    res, gang = run("atoll-reserving", parking=False)
    assert (res.status == STATUS_DONE).all()
    wait = res.start[gang] - res.arrival[gang]
    # it reserves at its first decision after 600 s of waiting (Retries ≤ 120 s apart), then what runs on its nodes ends (≤ 400 s)
    assert wait <= RESERVE_AFTER + 120 + 400
    starved, g = run("atoll-strict", parking=False)
    assert starved.start[g] - starved.arrival[g] > 2 * wait  # the same stream without a reservation keeps it waiting
    assert summarize(res)["reserved_idle_gpu_hours"] > 0  # reserved GPUs sat free while the gang's nodes drained
    assert summarize(starved)["reserved_idle_gpu_hours"] == 0


def test_a_parked_gang_keeps_its_quota_and_is_bounded_too() -> None:
    res, gang = run("atoll-reserving", parking=True)
    assert (res.status == STATUS_DONE).all()
    assert res.start[gang] - res.arrival[gang] <= RESERVE_AFTER + 400


def backfill_run(factor: float | None) -> SimResult:
    """12 + 12 + 8 GPUs leave no island whole, so the 16-GPU gang (t=3) waits and reserves the
    8-GPU island (fewest to drain; it drains at t=1000). Two 4-GPU jobs fill the other islands'
    free nodes at t=700, so only the reserved island has free GPUs when a 100 s job (t=800) and a
    1,000 s job (t=801) arrive. Quota is twice capacity, so the gang's quota, held through its
    Retries, keeps none of them out."""
    plan = [(0, 1000, 12), (1, 3000, 12), (2, 1000, 8), (3, 300, 16), (700, 3000, 4), (701, 3000, 4), (800, 100, 4), (801, 1000, 4)]
    jobs = [job(a, d, g) for a, d, g in plan]
    (pol,) = make_policies(["atoll-reserving"], DOC, seed=1)
    return simulate(cluster(3), prepare_workload(cluster(3), jobs), pol,
                    settings=SimSettings(declared_runtime_factor=factor, quota_factor=2.0))


def test_declared_limits_let_a_job_that_ends_before_the_expected_free_time_backfill_and_keep_a_longer_one_out() -> None:
    gang, short, long_ = 3, 6, 7
    res = backfill_run(1.5)  # limits 1.5 × runtime: the reservation is expected free at 1,500; the 100 s job declares 150 s
    assert (res.status == STATUS_DONE).all()
    assert res.start[short] == res.arrival[short]  # it ends (950) before the expected free time: it enters the reserved nodes
    assert res.start[long_] >= 1000  # its limit (1,500 s from 801) ends after it: it stays out until capacity frees
    without = backfill_run(None)  # no declared limit: nothing backfills by time
    assert without.start[short] >= 1000
    assert res.start[gang] == without.start[gang]  # the backfilled job was gone before the gang could start: no delay
    assert summarize(res)["reserved_idle_gpu_hours"] < summarize(without)["reserved_idle_gpu_hours"]


def target_run(profile: str) -> SimResult:
    """Three 4-GPU jobs fill r0 until 900, 950 and 1,000 s; an 8-GPU job holds half of r1 and a
    16-GPU job all of r2 until 20,000 s. The 12-GPU gang (t=3) lacks 12 GPUs in r0 (free at
    1,000 s) and 4 in r1 (free at 20,000 s): fewest-to-drain reserves r1, soonest-free r0. 4-GPU
    jobs of 3,000 s arrive from t=500 and take whatever frees outside a reservation."""
    plan = [(0, 900, 4), (0.1, 950, 4), (0.2, 1000, 4), (1, 20000, 8), (2, 20000, 16), (3, 300, 12)]
    plan += [(500 + 30 * k, 3000, 4) for k in range(40)]
    jobs = [job(a, d, g) for a, d, g in plan]
    (pol,) = make_policies([f"atoll-{profile}"], DOC, seed=1)
    return simulate(cluster(3), prepare_workload(cluster(3), jobs), pol,
                    settings=SimSettings(parking=False, declared_runtime_factor=1.0))


def test_a_soonest_free_target_starts_the_gang_when_its_domain_drains_where_fewest_to_drain_waits_for_the_longest_job() -> None:
    gang = 5
    soon, drain = target_run("soonest300"), target_run("drain300")
    assert (soon.status == STATUS_DONE).all() and (drain.status == STATUS_DONE).all()
    assert soon.start[gang] <= 1000 + 120  # r0's nodes are held from the reservation on: it starts at its first retry after 1,000 s
    assert drain.start[gang] >= 20000  # r1 drains only when the 8-GPU job ends; r0's nodes went to the small jobs
    assert summarize(soon)["reserved_idle_gpu_hours"] < summarize(drain)["reserved_idle_gpu_hours"]


SPAN_DOC = load_profiles(f"""
defaultProfile: none
profiles:
  none: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 600, retry: {{initialSeconds: 30, maxSeconds: 120}}}}
  island: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 600, retry: {{initialSeconds: 30, maxSeconds: 120}},
            queueing: {{reserveAfterSeconds: 300}}}}
  span: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 600, retry: {{initialSeconds: 30, maxSeconds: 120}},
          queueing: {{reserveAfterSeconds: 300, reserveAt: span}}}}
""")


def pinned_islands() -> ClusterModel:
    """1 SU × 3 islands × 4 nodes × 4 GPUs; node n0 of every island is taken for good, so no island
    ever holds a 16-GPU gang: it can only start as a span."""
    return ClusterModel.model_validate({"name": "test", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "nodes": [{"name": f"r{r}n{n}", "labels": {SU: "u0", CLIQUE: f"r{r}"}, "used": {"nvidia.com/gpu": 4 if n == 0 else 0}}
                  for r in range(3) for n in range(4)]}]})


def span_run(profile: str) -> tuple[SimResult, int]:
    """A 16-GPU gang (4 pods) at t=1500 behind 3-GPU jobs of 200-400 s arriving every ~40 s: they
    leave GPUs free (so the gang has quota) but seldom four whole nodes at once."""
    rng = random.Random(3)
    plan, t = [], 0.0
    for _ in range(300):
        t += rng.uniform(20, 60)
        plan.append((t, rng.uniform(200, 400), 3))
    plan.append((1500.0, 300.0, 16))
    plan.sort()
    gang = next(i for i, p in enumerate(plan) if p[2] == 16)
    (pol,) = make_policies([f"atoll-{profile}"], SPAN_DOC, seed=1)
    jobs = [job(a, d, g) for a, d, g in plan]
    return simulate(pinned_islands(), prepare_workload(pinned_islands(), jobs), pol, settings=SimSettings(parking=False)), gang


def test_a_gang_that_reserves_at_the_span_level_starts_within_a_bounded_time_where_an_island_reservation_waits_longer() -> None:
    span, gang = span_run("span")
    island, _ = span_run("island")
    none, _ = span_run("none")
    assert all((r.status == STATUS_DONE).all() for r in (span, island, none))
    wait = span.start[gang] - span.arrival[gang]
    # it reserves the SU at its first decision after 300 s (Retries ≤ 120 s apart), holds every GPU that frees there, and
    # starts once the 3-GPU jobs on four nodes have ended (≤ 400 s)
    assert wait <= 300 + 120 + 400
    assert island.start[gang] - island.arrival[gang] > 2 * wait  # its island never drains; small jobs keep taking the other nodes
    assert none.start[gang] - none.arrival[gang] > 4 * wait
    assert summarize(span)["reserved_idle_gpu_hours"] > 0


def order_run(policy: str) -> SimResult:
    """Two islands of 4 nodes. A (12 GPUs, to 5,000 s) and B (12, to 6,000 s) fill three nodes of
    each; C and D (4 each) the last node of each until t=3.2/3.3. X (8 GPUs, t=1) and Y (12, t=2)
    queue on quota. At 3.3 X holds quota (32 of 32 used) and waits: no island has 2 free nodes.
    Z (4 GPUs, t=4) fits a free node but needs quota. At 5,000 s A's island frees 12 GPUs."""
    plan = [(0, 5000, 12), (0.1, 6000, 12), (0.2, 3, 4), (0.3, 3, 4), (1, 100, 8), (2, 100, 12), (4, 100000, 4)]
    jobs = [job(a, d, g) for a, d, g in plan]
    (pol,) = make_policies([policy], DOC, seed=1)
    return simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=SimSettings(parking=False))


def test_a_workload_waiting_on_retries_keeps_its_quota_through_each_delay_and_is_decided_again_at_once() -> None:
    x, z = 4, 6
    res = order_run("atoll-strict")
    # X is evicted at each timer and takes its quota straight back (Kueue queues it before the Workloads its quota kept
    # out): decided at every Retry (≤ 120 s apart) from 3.3 s until it starts
    assert res.start[x] > 5000 and res.attempts[x] >= (5000 - 3.3) / 120
    assert res.start[z] >= 5000  # Z had a free node from t=4, but no quota while X held it
    base = order_run("kueue-required")  # no admission check: X never holds quota while it cannot be placed
    assert base.start[z] == 4


def test_a_gang_waiting_on_retries_leaves_the_stream_only_the_quota_it_does_not_hold() -> None:
    """Quota equals capacity (48 GPUs). The 12-GPU gang waits on Retries from 3 s to 20,000 s
    holding its 12 GPUs of quota, so the 4-GPU jobs behind it never use more than the other 36."""
    gang = 5
    res = target_run("drain300")
    assert res.start[gang] >= 20000 and res.attempts[gang] >= (20000 - 3) / 120  # decided at each Retry
    others = [j for j in range(len(res.start)) if j != gang]
    for t in sorted({float(res.start[j]) for j in others if 3 < res.start[j] < res.start[gang]}):
        running = sum(int(res.gpus[j]) for j in others if res.start[j] <= t < res.end[j])
        assert running <= 48 - 12, t


def test_a_declared_runtime_factor_below_1_is_refused_naming_the_field() -> None:
    for bad in (0, 0.5):
        with pytest.raises(ValueError, match="declared_runtime_factor"):
            SimSettings(declared_runtime_factor=bad)


HOLD_DOC = load_profiles(f"""
defaultProfile: reserving
profiles:
  reserving: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}},
               queueing: {{reserveAfterSeconds: {RESERVE_AFTER}, parkWaiting: true}}}}
  quota: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}},
           queueing: {{reserveAfterSeconds: {RESERVE_AFTER}, parkWaiting: true, holdBehindGangs: quota}}}}
  start: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}},
           queueing: {{reserveAfterSeconds: {RESERVE_AFTER}, parkWaiting: true, holdBehindGangs: start}}}}
""")


def full_run(profile: str, queues: tuple[str, str] | None = None) -> tuple[SimResult, int]:
    """Quota equals capacity (32 GPUs) and 2-GPU jobs of 200-400 s arrive every ~15 s (about 40
    GPUs' worth): the queue grows, and every 2 GPUs that free go to the next small job, which
    Kueue lets pass a 16-GPU gang (t=1500) that does not fit the free quota. ``queues``: the small
    jobs' and the gang's ClusterQueues, of a cohort of two (``cq-0``, ``cq-1``) sharing the quota."""
    rng = random.Random(5)
    plan, t = [], 0.0
    for _ in range(400):
        t += rng.uniform(10, 20)
        plan.append((t, rng.uniform(200, 400), 2))
    plan.append((1500.0, 300.0, 16))
    plan.sort()
    gang = next(i for i, p in enumerate(plan) if p[2] == 16)
    (pol,) = make_policies([f"atoll-{profile}"], HOLD_DOC, seed=1)
    if queues is None:
        jobs = [job(a, d, g) for a, d, g in plan]
        return simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=SimSettings(parking=True)), gang
    from admission.simulator._cohort import CohortShape

    jobs = [make_job(f"j{next(_ids)}", a, d, g, 4, "training", queue=queues[g == 16]) for a, d, g in plan]
    settings = SimSettings(parking=True, cohort=CohortShape.equal(2))
    return simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=settings), gang


def test_a_gang_that_waits_for_quota_is_owed_its_turn_and_starts_within_a_bounded_time_where_a_reservation_alone_waits() -> None:
    plain, gang = full_run("reserving")
    quota, _ = full_run("quota")
    start, _ = full_run("start")
    assert all((r.status == STATUS_DONE).all() for r in (plain, quota, start))
    # owed from 600 s after it was created: what Kueue admits behind it parks with its quota, which goes back to the gang once
    # its 16 GPUs are free (the jobs running then end within 400 s); it reserves at once, and its island drains (≤ 400 s)
    for r in (quota, start):
        assert r.start[gang] - r.arrival[gang] <= RESERVE_AFTER + 400 + 400 + 120
    assert plain.start[gang] - plain.arrival[gang] > 2 * (quota.start[gang] - quota.arrival[gang])  # quota never comes in time

    def passed(r: SimResult) -> int:
        """Jobs created after the gang that started while it was owed and had not started."""
        owed = r.arrival[gang] + RESERVE_AFTER
        return sum(1 for j in range(len(r.start)) if r.arrival[j] > r.arrival[gang] and owed <= r.start[j] < r.start[gang])

    assert passed(start) == 0  # under start nothing behind it starts until it does
    assert 0 < passed(quota) < passed(plain)  # under quota, those behind it start outside its reserved island once it holds quota


def test_in_a_cohort_a_gang_is_owed_its_turn_in_its_own_cluster_queue_and_holds_only_that_one() -> None:
    """As the controller files an owed gang under its own ClusterQueue: with the small jobs in the
    gang's ClusterQueue of a cohort of two, they wait behind it as with one ClusterQueue; in the
    other ClusterQueue nothing holds them (Kueue's order is per ClusterQueue), as without the rule."""
    plain, gang = full_run("reserving", ("cq-0", "cq-0"))
    same, _ = full_run("quota", ("cq-0", "cq-0"))
    other, _ = full_run("quota", ("cq-1", "cq-0"))
    apart, _ = full_run("reserving", ("cq-1", "cq-0"))
    assert all((r.status == STATUS_DONE).all() for r in (plain, same, other, apart))
    waited = {name: r.start[gang] - r.arrival[gang] for name, r in (("plain", plain), ("same", same), ("other", other), ("apart", apart))}
    assert waited["same"] <= RESERVE_AFTER + 400 + 400 + 120 < waited["plain"], waited
    assert waited["other"] == waited["apart"], waited  # held by nobody: the run is the one without the rule


def test_a_parked_gang_owed_its_turn_keeps_its_quota_from_a_waiter() -> None:
    """Three 12-GPU jobs leave one free node per island (12 GPUs) until 5,000 s; quota is 72 GPUs.
    Two 16-GPU gangs (t=1, 2) hold quota and park: no island is whole. Past 600 s both are owed;
    the first reserves, the second waits for the one reservation. An 8-GPU job at t=700 finds 4
    GPUs of quota free and 12 GPUs free: without the rule, the second gang (parked, no reservation)
    gives it its quota, is owed again without quota, and holds the job it gave it to. It keeps it."""
    plan = [(0, 5000, 12), (0.1, 5000, 12), (0.2, 5000, 12), (1, 300, 16), (2, 300, 16), (700, 100, 8)]
    jobs = [job(a, d, g) for a, d, g in plan]
    (pol,) = make_policies(["atoll-quota"], HOLD_DOC, seed=1)
    res = simulate(cluster(3), prepare_workload(cluster(3), jobs), pol, settings=SimSettings(parking=True, quota_factor=1.5))
    assert (res.status == STATUS_DONE).all()
    assert res.quota_yields == 0
    assert res.start[5] >= 5000  # it waits for quota until the 12-GPU jobs end


def test_a_parked_gang_woken_by_freed_room_keeps_its_quota_from_a_job_created_before_it() -> None:
    """Quota equals capacity (32 GPUs). Two 12-GPU jobs leave one free node per island; a 16-GPU
    job (t=0.2) waits for quota; an 8-GPU gang (t=1) takes the 8 GPUs of quota left and parks (no
    island has two free nodes). At 1,000 s the job on r0 ends: its 12 GPUs of quota do not let the
    16-GPU job in, and island r0 wakes the gang. The gang held its quota while parked, as the
    controller's parked Workload does, so it is decided again and placed; the older job does not
    take its quota and leave it waiting for quota behind itself."""
    plan = [(0, 1000, 12), (0.1, 5000, 12), (0.2, 2000, 16), (1, 300, 8)]
    jobs = [job(a, d, g) for a, d, g in plan]
    (pol,) = make_policies(["atoll-reserving"], HOLD_DOC, seed=1)
    res = simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=SimSettings(parking=True))
    assert (res.status == STATUS_DONE).all()
    assert res.start[3] == 1000  # woken with its quota, placed on r0
    assert res.start[2] >= res.end[3]  # the older job gets quota and r0 once the gang is done
    assert res.attempts[2] == 0 and res.quota_yields == 0  # it is never decided short of room, nor given parked quota



def test_a_parked_gang_woken_by_freed_room_keeps_its_quota_from_a_job_of_higher_priority() -> None:
    """As above, with the 16-GPU job of priority 10 and Kueue preempting nothing. Kueue orders its
    queue by priority, but the woken gang never left Kueue's admitted set: the higher-priority job
    is still short of quota (12 of 32 free) when the gang is decided again, so the gang is placed on
    r0 at 1,000 s and the job waits for quota, as with the controller."""
    plan = [(0, 1000, 12, 0), (0.1, 5000, 12, 0), (0.2, 2000, 16, 10), (1, 300, 8, 0)]
    jobs = [make_job(f"q{i}", a, d, g, 4, "training", priority=p) for i, (a, d, g, p) in enumerate(plan)]
    (pol,) = make_policies(["atoll-reserving"], HOLD_DOC, seed=1)
    res = simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=SimSettings(parking=True))
    assert (res.status == STATUS_DONE).all()
    assert res.start[3] == 1000  # woken with its quota, placed on r0
    assert res.start[2] >= res.end[3]  # the job of higher priority gets quota once the gang is done

HQ16_DOC = load_profiles(f"""
defaultProfile: hq16
profiles:
  hq16: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}},
          queueing: {{reserveAfterSeconds: 600, parkWaiting: true, holdBehindGangs: quota, holdBehindGangsMinGPUs: 16}}}}
""")


@pytest.mark.parametrize(("seed", "longest"), [(1, 1200.0), (3, 3600.0)])
def test_a_held_stream_of_small_jobs_and_gangs_finishes(seed: int, longest: float) -> None:
    """3 islands of 16 GPUs, 120 jobs of 2-16 GPUs arriving 10-40 s apart, quota equal to capacity,
    waits parked, gangs of 16 GPUs owed their turn after 600 s. A gang parked with a reservation
    was woken by freed room and, as if it gave its quota back, queued behind older jobs that took
    it; those waited on Retries, holding that quota, for its reservation to end: nothing moved again
    (99 and 10 jobs never started on these seeds). Woken, it keeps its quota: every job runs."""
    rng = random.Random(seed)
    plan, t = [], 0.0
    for _ in range(120):
        t += rng.uniform(10, 40)
        plan.append((t, rng.uniform(longest / 6, longest), rng.randint(2, 16)))
    jobs = [job(a, d, g) for a, d, g in plan]
    (pol,) = make_policies(["atoll-hq16"], HQ16_DOC, seed=1)
    res = simulate(cluster(3), prepare_workload(cluster(3), jobs), pol, settings=SimSettings(parking=True, stall_seconds=86400.0))
    assert int((res.status != STATUS_DONE).sum()) == 0


def _drain300_with_records(plan: list[tuple[int, int, int, int]], tmp_path: Path, *, parking: bool,
                           quota_factor: float, islands: int = 2) -> tuple[SimResult, Path]:
    """Jobs (arrival, duration, GPUs, priority) of 4-GPU pods under ``atoll-drain300``, Kueue
    preempting lower priorities; the run and its decision records."""
    jobs = [make_job(f"p{i}", a, d, g, 4, "training", priority=p) for i, (a, d, g, p) in enumerate(plan)]
    (pol,) = make_policies(["atoll-drain300"], DOC, seed=1)
    records = tmp_path / "records.jsonl"
    settings = SimSettings(parking=parking, quota_factor=quota_factor, kueue_preemption="LowerPriority", records=str(records))
    return simulate(cluster(islands), prepare_workload(cluster(islands), jobs), pol, settings=settings), records


def test_a_gang_preempted_by_kueue_holds_its_reservation_suspended_and_a_job_with_quota_takes_the_reserved_node(tmp_path) -> None:  # noqa: ANN001
    """Quota 40 on 32 GPUs, Kueue preempting lower priorities. A 16-GPU job fills one island for
    long, a 12-GPU one leaves one free node on the other until 3,000 s; an 8-GPU gang (priority 0)
    waits holding quota and after 300 s reserves that island (its free node among them). At 400 s
    an 8-GPU job of priority 10 takes the gang's quota (Kueue preempts it; the job waits, no island
    has two free nodes), and at 410 s a 4-GPU job of priority 10 gets the last quota. The gang
    holds no quota now, so its reservation is suspended: the 4-GPU job starts at once on the
    reserved node (it waited until 4,100 s when the reservation blocked it), the decision record
    says why, and every job finishes."""
    plan = [(0, 20000, 16, 0), (0, 3000, 12, 0), (1, 1000, 8, 0), (400, 1000, 8, 10), (410, 1000, 4, 10)]
    res, records = _drain300_with_records(plan, tmp_path, parking=False, quota_factor=1.25)
    assert (res.status == STATUS_DONE).all()
    assert res.start[4] == 410
    said = [r for r in map(json.loads, records.read_text().splitlines()) if r["workload"].endswith("job-4")]
    assert said and said[-1]["outcome"] == "admit"
    assert "reservations suspended, their holders hold no quota, so they block nobody: sim/job-2" in said[-1]["message"]


def test_a_suspension_wakes_only_the_parked_jobs_the_reserved_gpus_can_hold(tmp_path) -> None:  # noqa: ANN001
    """Quota 48 on 32 GPUs, parking, Kueue preempting lower priorities. A 16-GPU job fills one
    island for long, a 12-GPU one leaves one free node on the other until 3,000 s; an 8-GPU gang
    (priority 0) parks and after 300 s reserves that island. A 4-GPU job (priority 5) parks
    behind the reservation, an 8-GPU one (priority 5) for want of an island. At 400 s an 8-GPU
    job of priority 10 takes the gang's quota: the gang's reservation is suspended, its free node
    can hold the 4-GPU job, which is woken and starts on it, and nothing else: the 8-GPU jobs
    are not decided again for room that cannot hold them (all of the flavor's parked jobs were,
    before). Every job finishes."""
    plan = [(0, 20000, 16, 0), (0, 3000, 12, 0), (1, 1000, 8, 0), (350, 1000, 4, 5), (360, 1000, 8, 5), (400, 1000, 8, 10)]
    res, records = _drain300_with_records(plan, tmp_path, parking=True, quota_factor=1.5)
    assert (res.status == STATUS_DONE).all()
    said = [json.loads(line) for line in records.read_text().splitlines()]
    by_job = {i: [r for r in said if r["workload"] == f"job-{i}"] for i in range(len(plan))}
    assert res.start[3] == 400 and by_job[3][-1]["outcome"] == "admit"
    assert "reservations suspended, their holders hold no quota, so they block nobody: sim/job-2" in by_job[3][-1]["message"]
    at_400 = {i: [r["outcome"] for r in by_job[i] if r["time"] == "1970-01-01T00:06:40.000Z"] for i in (4, 5)}
    assert at_400 == {4: [], 5: ["wait"]}  # the job that took the gang's quota decided once; the parked 8-GPU job not at all
    assert res.start[2] > res.start[5]  # the gang, without quota, waits behind the job of higher priority


def test_an_ended_reservation_wakes_only_the_parked_jobs_the_reserved_gpus_can_hold(tmp_path) -> None:  # noqa: ANN001
    """Three islands, quota 72 on 48 GPUs, parking. One island is full for long, one has a free
    node (12 GPUs busy for long), the third is half busy for long and half until 2,000 s. An
    8-GPU gang parks and after 300 s reserves the island with the free node. A 4-GPU job parks
    behind the reservation, an 8-GPU one for want of an island. At 2,000 s the third island's
    half frees: the gang takes it, and its reservation ends. Its free node holds the 4-GPU job,
    which is woken and starts on it at once. The 8-GPU job, refused a reservation at 660 s (the
    flavor held its one), is woken for the slot the ended reservation leaves, not for room (it
    cannot use the free node), and reserves (``wake_released``, the controller's rule)."""
    plan = [(0, 20000, 16, 0), (0, 20000, 12, 0), (0, 20000, 8, 0), (0, 2000, 8, 0), (1, 1000, 8, 0), (350, 1000, 4, 0), (360, 1000, 8, 0)]
    res, records = _drain300_with_records(plan, tmp_path, parking=True, quota_factor=1.5, islands=3)
    assert (res.status == STATUS_DONE).all()
    said = [json.loads(line) for line in records.read_text().splitlines()]
    assert any(r["workload"] == "job-4" and "reserves 8 GPUs" in r["message"] for r in said)
    assert res.start[4] == 2000 and res.start[5] == 2000
    at_2000 = [(r["workload"], r["outcome"]) for r in said if r["time"] == "1970-01-01T00:33:20.000Z"]
    assert at_2000 == [("job-4", "admit"), ("job-5", "admit"), ("job-6", "wait")]
    assert any(r["workload"] == "job-6" and "holds its 1 already" in r["message"] for r in said)
    assert any(r["workload"] == "job-6" and r["time"] == "1970-01-01T00:33:20.000Z" and "reserves 8 GPUs" in r["message"] for r in said)


MOVING_DOC = load_profiles(f"""
defaultProfile: moving
profiles:
  moving: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 800, retry: {{initialSeconds: 30, maxSeconds: 120}},
           queueing: {{reserveAfterSeconds: 300, reserveTarget: soonestFree, retargetMarginSeconds: 600}}}}
""")


def test_a_reservation_that_moves_to_other_nodes_lets_the_job_parked_on_the_room_it_left_start_at_once(tmp_path: Path) -> None:
    """Three islands, parking, limits 4 × runtime. Island r0 is full for long; r1 holds an 8-GPU
    job ending at 1,801 s (its limit at 7,201 s) and one ending at 2,000 s (limit 5,000 s); r2 a
    12-GPU job ending at 2,200.5 s (limit 5,800.5 s) beside one free node. The 16-GPU gang
    (t=1,100) reserves r2 at 1,400 s, expected free first; an 8-GPU gang (t=1,150) is refused one
    (the flavor holds its one) and parks; a 4-GPU job of 2,000 s (t=1,460) parks behind the
    reservation (its limit ends after 5,800.5 s, so it may not backfill r2's free node). At
    1,801 s r1's first job ends and the 8-GPU gang, parked first, takes its room. At the big
    gang's relax deadline (1,900 s) no span holds it, and r1 (expected free at 5,000 s) is
    sooner than r2 by more than the margin: the reservation moves there. r2's free node blocks
    nobody now, and the 4-GPU job starts on it at once, 360 s before its own relax deadline.
    Without the move's wake it waited until the next room freed (2,000 s)."""
    plan = [(0, 20000, 16), (1, 1800, 8), (1000, 1000, 8), (1000.5, 1200, 12), (1100, 300, 16), (1150, 500, 8), (1460, 2000, 4)]
    jobs = [make_job(f"m{i}", a, d, g, 4, "training") for i, (a, d, g) in enumerate(plan)]
    (pol,) = make_policies(["atoll-moving"], MOVING_DOC, seed=1)
    records = tmp_path / "records.jsonl"
    settings = SimSettings(parking=True, declared_runtime_factor=4.0, quota_factor=2.0, records=str(records))
    res = simulate(cluster(3), prepare_workload(cluster(3), jobs), pol, settings=settings)
    assert (res.status == STATUS_DONE).all()
    said = [json.loads(line) for line in records.read_text().splitlines()]
    gang = [r["message"] for r in said if r["workload"] == "job-4"]
    assert any("reserves 16 GPUs on 4 nodes of nvidia.com/gpu.clique f-u0/f-u0-r2" in m for m in gang)
    assert any("moved from f-u0/f-u0-r2" in m and "f-u0/f-u0-r1, expected free at t=5000" in m for m in gang)
    assert res.start[5] == 1801.0
    assert res.start[6] == 1900.0 < res.arrival[6] + 800  # at the move, before its relax deadline
    (placed,) = [r["message"] for r in said if r["workload"] == "job-6" and r["outcome"] == "admit"]
    assert "f-u0/f-u0-r2/f-u0-r2-n3" in placed

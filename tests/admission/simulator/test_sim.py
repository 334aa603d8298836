"""The event loop: Kueue's BestEffortFIFO with quota, Atoll's Retry/backoff/relaxation through
``policies.decide``, one-island placement for strict, scattering for count-only, determinism."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from admission.simulator._jobs import Job, make_job
from admission.simulator._policies import make_policies
from admission.simulator._sim import STATUS_DONE, STATUS_REJECTED, STATUS_UNFINISHED, SimSettings, prepare_workload, simulate
from policies import load_profiles
from topology import ClusterModel

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
DOC = load_profiles(f"""
defaultProfile: elastic
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 600}}}}
  elastic: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 300, retry: {{initialSeconds: 15, maxSeconds: 300}}}}
""")


_ids = itertools.count()


def job(arrival: float, duration: float, gpus: int, kind: str = "training") -> Job:
    return make_job(f"j{next(_ids)}", arrival, duration, gpus, 4, kind)  # type: ignore[arg-type]


def cluster(sus: int = 2, racks: int = 2, nodes: int = 4, used: dict[str, int] | None = None) -> ClusterModel:
    """``sus`` × ``racks`` islands of ``nodes`` × 4 GPUs; ``used`` pre-occupies named nodes (GPUs)."""
    flavor: dict = {
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
    }
    if used is None:
        flavor["generate"] = [{"level": SU, "count": sus, "prefix": "u"}, {"level": CLIQUE, "count": racks, "prefix": "r"},
                              {"level": "kubernetes.io/hostname", "count": nodes, "prefix": "n"}]
    else:
        flavor["nodes"] = [
            {"name": f"u{u}r{r}n{n}", "labels": {SU: f"u{u}", CLIQUE: f"u{u}r{r}"},
             "used": {"nvidia.com/gpu": used.get(f"u{u}r{r}n{n}", 0)}}
            for u in range(sus) for r in range(racks) for n in range(nodes)
        ]
    return ClusterModel.model_validate({"name": "test", "flavors": [flavor]})


def run(model: ClusterModel, jobs: list[Job], policy: str, **settings: float | bool):
    work = prepare_workload(model, jobs)
    (pol,) = make_policies([policy], DOC, seed=11)
    return simulate(model, work, pol, settings=SimSettings(**settings))


def busy_workload(n: int = 300, seed: int = 5) -> list[Job]:
    """Gangs of 1-16 GPUs arriving fast enough to keep a 64-GPU cluster queued."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(n):
        t += rng.expovariate(1 / 40)
        out.append(job(t, rng.uniform(200, 2000), rng.choice([1, 2, 4, 8, 8, 12, 16, 16])))
    return out


def test_atoll_strict_puts_every_gang_that_fits_an_island_in_one() -> None:
    res = run(cluster(), busy_workload(), "atoll-strict")
    gangs = res.gang_fits_island & (res.status == STATUS_DONE)
    assert gangs.sum() > 50
    assert (res.islands[gangs] == 1).all()
    assert (res.status == STATUS_DONE).all()


def test_count_only_scatters_gangs_across_islands_under_load() -> None:
    res = run(cluster(), busy_workload(), "count-only")
    gangs = res.gang_fits_island & (res.status == STATUS_DONE)
    assert (res.islands[gangs] > 1).mean() > 0.1


def test_runs_are_deterministic_for_a_seed() -> None:
    a = run(cluster(), busy_workload(), "random")
    b = run(cluster(), busy_workload(), "random")
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.islands, b.islands)
    c = run(cluster(), busy_workload(seed=6), "random")
    assert not np.array_equal(a.start[: len(c.start)], c.start)


def test_a_run_collects_young_objects_less_often_and_puts_the_collector_back() -> None:
    import gc

    from admission.simulator._sim import CostModel

    seen: list[tuple[int, int, int]] = []

    class Watching(CostModel):
        def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(gc.get_threshold())
            return super().__call__(*args, **kwargs)

    before = gc.get_threshold()
    work = prepare_workload(cluster(), busy_workload())
    (policy,) = make_policies(["atoll-strict"], DOC, seed=0)
    simulate(cluster(), work, policy, slowdown=Watching())
    assert seen and all(t[0] > before[0] for t in seen)
    assert gc.get_threshold() == before


def test_every_job_completes_after_its_duration_and_gpus_never_overflow() -> None:
    jobs = busy_workload()
    for policy in ("count-only", "atoll-elastic"):
        res = run(cluster(), jobs, policy)
        assert (res.status == STATUS_DONE).all()
        np.testing.assert_allclose(res.end - res.start, np.array([j.duration_s for j in sorted(jobs, key=lambda j: j.submit_s)]) * res.slowdown)
        assert (res.start >= res.arrival).all()
        assert res.allocated.max() <= res.total_gpus == 64


def test_elastic_spans_exactly_at_the_relax_time_and_not_before() -> None:
    # each island keeps one node busy for good: a 16-GPU gang (4 nodes) fits no island
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    res = run(model, [job(0.0, 100.0, 16)], "atoll-elastic", parking=True)
    assert res.start[0] == pytest.approx(300.0)  # parked at 0, woken by its relax deadline
    assert res.relaxed[0] and res.islands[0] == 2
    assert res.attempts[0] == 1 and res.decisions == 2  # nothing else happened in between: no decision in between
    retries = run(model, [job(0.0, 100.0, 16)], "atoll-elastic")
    assert retries.start[0] == pytest.approx(300.0)  # retries at 15, 45, 105, 225, then capped to land on 300
    assert retries.attempts[0] == 5 and retries.decisions == 6


def test_strict_waits_forever_for_an_island_that_never_frees_and_is_reported_unfinished() -> None:
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    res = run(model, [job(0.0, 100.0, 16)], "atoll-strict", stall_seconds=3600.0)
    assert res.status[0] == STATUS_UNFINISHED and np.isnan(res.start[0])


def test_a_profile_that_parks_and_one_that_does_not_in_the_same_run() -> None:
    """``queueing.parkWaiting`` is the profile's, through the controller's decision
    (``Verdict.waits_parked``): with no override the parking profile's gang is decided again when
    an island frees, the other's on its Retries; ``parking`` True or False overrides both."""
    doc = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 600}}}}
  parked: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 600}}, queueing: {{parkWaiting: true}}}}
""")
    model = cluster(sus=1, racks=3, used={"u0r1n0": 4, "u0r2n0": 4})
    jobs = [job(0.0, 100.0, 16), job(1.0, 50.0, 16)]  # as below: the second gang has quota but no island until 100
    work = prepare_workload(model, jobs)

    def start(parking: bool | None) -> dict[str, float]:
        out = {}
        for pol in make_policies(["atoll-parked", "atoll-strict"], doc, seed=11):
            res = simulate(model, work, pol, settings=SimSettings(parking=parking))
            out[pol.name] = float(res.start[1])
        return out

    assert start(None) == {"atoll-parked": pytest.approx(100.0), "atoll-strict": pytest.approx(1.0 + 30 + 60 + 120)}
    assert start(True) == {"atoll-parked": pytest.approx(100.0), "atoll-strict": pytest.approx(100.0)}
    assert start(False) == {"atoll-parked": pytest.approx(211.0), "atoll-strict": pytest.approx(211.0)}


def test_strict_parked_is_decided_again_when_an_island_frees_and_retries_only_after_backoff() -> None:
    # a 16-GPU blocker fills island r0 until t=100; r1 and r2 each have a busy node, so the
    # 16-GPU gang arriving at t=1 has quota (24 GPUs free) but no island
    model = cluster(sus=1, racks=3, used={"u0r1n0": 4, "u0r2n0": 4})
    jobs = [job(0.0, 100.0, 16), job(1.0, 50.0, 16)]
    parked = run(model, jobs, "atoll-strict", parking=True)
    assert parked.start[1] == pytest.approx(100.0)  # parked at 1, woken when r0 frees
    assert parked.attempts[1] == 1 and parked.islands[1] == 1 and parked.decisions == 3
    strict = run(model, jobs, "atoll-strict")
    assert strict.start[1] == pytest.approx(1.0 + 30 + 60 + 120)  # Retries at 31 and 91 fail; 211 admits
    assert strict.attempts[1] == 3 and strict.islands[1] == 1


def test_a_parked_workload_is_decided_again_only_at_events_that_could_change_its_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from admission.simulator._deployed import DeployedAtoll

    seen: list[tuple[int, float]] = []
    decide = DeployedAtoll.decide

    def recording(self: DeployedAtoll, j: int, obj: dict, now: float):  # type: ignore[no-untyped-def]
        seen.append((j, now))
        return decide(self, j, obj, now)

    monkeypatch.setattr(DeployedAtoll, "decide", recording)
    jobs = busy_workload()
    res = run(cluster(), jobs, "atoll-strict", parking=True, yield_quota=False)  # a quota yield is a Retry: its own test below
    assert (res.status == STATUS_DONE).all()
    ends = set(res.end[res.status == STATUS_DONE].tolist())
    first: set[int] = set()
    again = 0
    for j, now in seen:
        if j in first:  # decided again: only when a job ended at that instant (capacity freed)
            assert now in ends, (j, now)
            again += 1
        first.add(j)
    assert again > 20  # the stream does queue
    monkeypatch.setattr(DeployedAtoll, "decide", decide)
    retries = run(cluster(), jobs, "atoll-strict")
    assert res.decisions < retries.decisions


def test_a_job_blocked_by_quota_is_retried_when_capacity_frees() -> None:
    model = cluster(sus=1, racks=2, used={"u0r1n0": 4})  # 28 GPUs of quota
    jobs = [job(0.0, 100.0, 16), job(1.0, 50.0, 16)]
    for policy in ("atoll-strict", "count-only"):
        res = run(model, jobs, policy)
        assert res.start[1] == pytest.approx(100.0)  # no Retry: Kueue never reserved quota for it
        assert res.attempts[1] == 0


def test_best_effort_fifo_lets_a_small_job_pass_a_big_one_that_does_not_fit() -> None:
    model = cluster(sus=1, racks=2)
    jobs = [job(0.0, 1000.0, 16), job(1.0, 1000.0, 32), job(2.0, 10.0, 4)]
    res = run(model, jobs, "count-only")
    assert res.start[0] == 0.0
    assert res.start[2] == 2.0  # the 4-GPU job goes while the 32-GPU one waits for quota
    assert res.start[1] == pytest.approx(1000.0)


def test_jobs_no_flavor_can_hold_are_rejected_at_arrival() -> None:
    res = run(cluster(sus=1, racks=1), [job(0.0, 10.0, 64), job(1.0, 10.0, 4)], "count-only")
    assert res.status.tolist() == [STATUS_REJECTED, STATUS_DONE]


def test_quota_is_the_flavor_capacity_kueue_can_use() -> None:
    model = cluster(sus=1, racks=1, used={"u0r0n0": 4})
    res = run(model, [job(0.0, 100.0, 8), job(0.0, 100.0, 8)], "count-only")
    assert res.total_gpus == 12
    assert res.start.tolist() == [0.0, 100.0]


def test_inference_replicas_spread_over_islands_only_under_exact_enforcement() -> None:
    # the sample profiles' inference class spreads replicas one per island; a strict profile's
    # island level is for gangs, so the replicas are admitted spread, not rejected
    doc = load_profiles(f"""
profiles:
  strict: {{requiredLevel: {CLIQUE}}}
classes:
  inference: {{spread: {{level: {CLIQUE}, maxPerDomain: 1}}}}
defaultProfile: strict
""")
    model = cluster()
    work = prepare_workload(model, [job(0.0, 100.0, 8, "inference"), job(0.0, 100.0, 8)])
    (pol,) = make_policies(["atoll-strict"], doc, seed=0)
    res = simulate(model, work, pol, settings=SimSettings(enforcement="exact"))
    assert res.status.tolist() == [STATUS_DONE, STATUS_DONE]
    assert res.islands.tolist() == [2, 1]  # replicas in two islands; the training gang in one
    # under domain enforcement the replicas' selector is their common SU, so the scheduler may
    # bind both in one island: the spread is a plan, not a promise (exact enforcement keeps it)
    packed = simulate(model, work, pol, settings=SimSettings(enforcement="domain", scheduler="least-allocated"))
    assert packed.status.tolist() == [STATUS_DONE, STATUS_DONE] and packed.islands.tolist() == [1, 1]
    assert res.gang_fits_island.tolist() == [False, True]  # replicas are not gangs


@pytest.mark.parametrize("link_model", ["calibrated", "flat-ring"])
def test_a_span_is_charged_by_the_cost_model_and_one_island_is_not(link_model: str) -> None:
    from topology import Island, allreduce

    model = cluster(sus=2, racks=1, nodes=4, used={"u0r0n0": 4, "u1r0n0": 4})  # no island holds 4 nodes
    gang = job(0.0, 1000.0, 16)
    res = run(model, [gang, job(0.0, 1000.0, 8), job(0.0, 1000.0, 1)], "count-only", link_model=link_model)
    assert res.islands.tolist() == [2, 1, 1]
    if link_model == "flat-ring":
        assert res.slowdown[0] > 1.5  # every GPU on one 50 GB/s rail instead of NVLink
    else:  # 12 + 4 GPUs: four channels of 50 GB/s across the SU, against NVLS in one island
        nvlink = Island(nvlink_gbps=900.0, nvlink_latency_us=5.0, nic_gbps=50.0, cross_latency_us=5.0)
        ratio = allreduce(gang.model_gb, [12, 4], nvlink).time_s / allreduce(gang.model_gb, [16], nvlink).time_s
        assert res.slowdown[0] == pytest.approx(1.0 + gang.comm_fraction * (ratio - 1.0))
        assert 1.1 < res.slowdown[0] < 1.5
    assert res.slowdown[1] == 1.0 and res.slowdown[2] == 1.0
    assert res.end[0] - res.start[0] == pytest.approx(1000.0 * res.slowdown[0])


def test_bulk_reservations_match_the_snapshot_api_node_by_node() -> None:
    from admission.simulator._sim import _release, _reserve, build_snapshots
    from topology import ResourceVector

    a, b = build_snapshots(cluster())[0], build_snapshots(cluster())[0]
    nodes, pods = np.array([0, 3, 9]), np.array([1, 2, 4])
    per_pod = ResourceVector(1, 500, 1024, 1)
    _reserve(a, nodes, pods, per_pod)
    for n, k in zip(nodes.tolist(), pods.tolist()):
        b.reserve(n, per_pod.scaled(k))
    np.testing.assert_array_equal(a.free, b.free)
    _release(a, nodes, pods, per_pod)
    for n, k in zip(nodes.tolist(), pods.tolist()):
        b.release(n, per_pod.scaled(k))
    np.testing.assert_array_equal(a.free, b.free)
    np.testing.assert_array_equal(a.free, a.alloc)


def test_kueue_view_told_of_each_change_replays_like_a_full_copy_per_attempt() -> None:
    class FullCopy:  # the same policy without ``capacity_changed``: Kueue's view is copied whole each attempt
        def __init__(self, inner: object) -> None:
            self.inner = inner
            self.name, self.admission_check = inner.name, inner.admission_check  # type: ignore[attr-defined]

        def attempt(self, *args: object, **kw: object) -> object:
            return self.inner.attempt(*args, **kw)  # type: ignore[attr-defined]

    model = cluster(used={"u0r0n0": 3, "u1r1n2": 4})
    work = prepare_workload(model, busy_workload())
    (tracked,), (full,) = make_policies(["kueue-bestfit"], DOC, seed=11), make_policies(["kueue-bestfit"], DOC, seed=11)
    a = simulate(model, work, tracked)
    b = simulate(model, work, FullCopy(full))  # type: ignore[arg-type]
    assert a.decisions == b.decisions and (a.start > a.arrival).any()
    for field in ("start", "end", "status", "islands", "slowdown"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_settings_name_the_field_of_an_unknown_scheduler_or_enforcement() -> None:
    with pytest.raises(ValueError, match="scheduler: 'fastest'.*least-allocated"):
        SimSettings(scheduler="fastest")
    with pytest.raises(ValueError, match="enforcement: 'pinned'.*exact"):
        SimSettings(enforcement="pinned")


def test_a_gang_waiting_for_one_island_while_the_gpus_sit_free_in_two_is_counted_as_stranded() -> None:
    from admission.simulator._metrics import summarize

    # each island keeps one node busy for good: 12 + 12 GPUs free, a 16-GPU gang fits neither
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 100.0, 16), job(600.0, 10.0, 1)]
    elastic = summarize(run(model, jobs, "atoll-elastic"))  # waits 300 s for one island, then spans
    bestfit = summarize(run(model, jobs, "kueue-bestfit"))  # spans at once
    assert elastic["stranded_gpu_hours"] == pytest.approx(16 * 300 / 3600)
    assert bestfit["stranded_gpu_hours"] == 0.0
    assert elastic["island_block_16"] == 0.0  # no island ever had 16 GPUs free
    assert elastic["island_block_72"] is None and elastic["island_block_32"] is None  # no island holds that many
    assert elastic["p95_gang_slowdown"] > 1.0  # the span is charged


def test_island_blocks_are_sampled_while_whole_islands_sit_free() -> None:
    from admission.simulator._metrics import summarize

    jobs = [job(float(t), 50.0, 4) for t in range(0, 1000, 100)]  # one node at a time: an island always stays empty
    s = summarize(run(cluster(sus=1, racks=2), jobs, "kueue-bestfit"))
    assert s["island_block_16"] == 1.0 and s["stranded_gpu_hours"] == 0.0


def test_a_parked_workload_gives_its_quota_back_to_a_job_blocked_on_quota_alone() -> None:
    # one node per island is busy for good: the 16-GPU strict gang (quota 24) never finds an island
    # and parks, holding 16 GPUs of quota; the 12-GPU job after it fits island r0 but not the 8 GPUs
    # of quota left
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 100.0, 16), job(10.0, 100.0, 12)]
    kept = run(model, jobs, "atoll-strict", parking=True, yield_quota=False, stall_seconds=3600.0)
    assert np.isnan(kept.start[1])  # the parked gang kept its quota: the job that fits never starts
    given = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0)
    assert given.start[1] == pytest.approx(10.0)  # the gang was deactivated and its quota went to the job
    assert given.attempts[0] == 1 and np.isnan(given.start[0])  # a deactivation is no Retry; the gang still finds no island


def test_a_workload_that_gave_its_quota_back_is_not_decided_again_while_nothing_it_waits_for_changed() -> None:
    # as above: the gang parks, gives its quota to the 12-GPU job and waits for quota; when that job
    # ends its island has 12 GPUs free again, still no island of 16, so the gang parks again undecided
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 100.0, 16), job(10.0, 100.0, 12)]
    res = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0)
    assert res.start[1] == pytest.approx(10.0) and np.isnan(res.start[0])
    assert (res.quota_yields, res.reparked) == (1, 1)
    assert res.decisions == 2  # the gang once, the job once: the gang's quota back at 110 asks nothing again


def test_a_workload_that_gave_its_quota_back_is_reactivated_once_no_job_queued_before_the_give_waits() -> None:
    # as above, but the 12-GPU job J1 ends at 15: the gang, deactivated for it at 10, was reactivated
    # the moment J1 held quota (nothing else queued before the give), not after its wait's delay, so
    # it takes its quota back at 15 and parks again undecided; J2 (12 GPUs, t=20) then waits for
    # quota behind it
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 100.0, 16), job(10.0, 5.0, 12), job(20.0, 100.0, 12)]
    res = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0)
    assert res.start[1] == pytest.approx(10.0)
    assert (res.quota_yields, res.reparked) == (1, 1) and res.decisions == 2
    assert np.isnan(res.start[2])  # out for its whole delay, the gang would have left J2 the quota at 20


def test_a_workload_that_gave_its_quota_back_stays_out_while_a_job_queued_before_the_give_waits() -> None:
    # the 16-GPU gang G parks (no island of 16) holding 16 of the 24 GPUs of quota; X (8 GPUs) takes
    # the rest; B (20 GPUs, t=2) waits for quota and for GPUs the flavor does not have free, so
    # nobody gives it anything; W (12 GPUs, t=5) gets G's quota. Reactivated when W held quota, G
    # would be queued at its creation time, ahead of B, take its quota back when W ends (105) and
    # park again undecided, and B would never start; kept out while B, queued before the give,
    # waits, G leaves B the quota at 105 and comes back once B holds it
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 100.0, 16), job(1.0, 30.0, 8), job(2.0, 50.0, 20), job(5.0, 100.0, 12)]
    res = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0)
    assert res.start[3] == pytest.approx(5.0) and res.quota_yields == 1  # W got G's quota
    assert res.start[2] == pytest.approx(105.0)  # B, queued before the give, starts when W's quota frees
    assert np.isnan(res.start[0]) and res.reparked == 1  # G back behind B: its quota again after B's end, parked undecided


def test_a_job_that_gave_its_quota_back_takes_parked_quota_once_an_event_reached_it() -> None:
    # islands of 12 free GPUs, quota 24; elastic gangs wait 300 s for one island, then span. G (16
    # GPUs) parks, deadline 300; P (16, t=100) is blocked on quota, so G gives it its quota; P parks
    # (deadline 400) and G, reactivated, waits for quota with its need on file, taking none of P's.
    # G's deadline passes at 300 while it is out: its need is dropped, it may span now, so at the
    # next pass (S arrives at 310) it takes P's quota as any waiter would, and spans before P's
    # deadline. The controller's twin: test_yielding.py::test_a_giver_takes_parked_quota_only_once_an_event_reached_it
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 1000.0, 16), job(100.0, 1000.0, 16), job(310.0, 10.0, 4)]
    res = run(model, jobs, "atoll-elastic", parking=True, stall_seconds=3600.0)
    assert res.start[2] == pytest.approx(310.0) and res.quota_yields == 2  # G gave to P, then P to G
    assert res.start[0] < 400.0  # kept out until it held quota again, G would have waited for P's deadline to free it
    assert res.start[1] > res.start[0] + 1000.0  # P, out of its quota, starts only once G's span ends


def cpu_starved() -> ClusterModel:
    """Two islands of 4 nodes × 4 GPUs; node u0r1n0 has its GPUs free but 4 of its 64 cores: the
    room's GPU count says island u0r1 has room for 4 pods, a placement asking CPU finds none."""
    flavor: dict = {
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "nodes": [{"name": f"u0r{r}n{n}", "labels": {SU: "u0", CLIQUE: f"u0r{r}"}, "used": {"cpu": "60"} if (r, n) == (1, 0) else {}}
                  for r in range(2) for n in range(4)],
    }
    return ClusterModel.model_validate({"name": "test", "flavors": [flavor]})


@pytest.mark.parametrize("first_end", ["W", "A"])
def test_a_giver_an_event_reached_comes_back_only_when_its_placement_fits_now(first_end: str) -> None:
    # under SimSettings.yield_back_when_fits (the controller's decisions.quota_yield_back_when_fits):
    # A (16 GPUs, 8 cores a pod) takes island u0r0, the only one its CPU fits; the gang G (the same
    # shape, t=1) parks; W (16 GPUs, no CPU, t=2) is blocked on quota and takes G's, in u0r1. G,
    # reactivated, waits for quota with its need on file. When W ends first, its island's 16 free
    # GPUs reach G's need, but G's placement does not fit there (u0r1n0 lacks the cores): its need
    # stays on file, and holding W's quota it parks again undecided (decided afresh, it would only
    # park again). When A ends first, G's placement fits u0r0: it is decided afresh and starts.
    # The controller's twin: test_yielding.py::test_a_giver_an_event_reached_takes_quota_only_when_its_placement_fits_now
    a_ends, w_ends = (1000.0, 100.0) if first_end == "W" else (80.0, 1000.0)
    jobs = [make_job("a", 0.0, a_ends, 16, 4, cpu_milli=32000), make_job("g", 1.0, 500.0, 16, 4, cpu_milli=32000),
            make_job("w", 2.0, w_ends - 2.0, 16, 4)]
    res = run(cpu_starved(), jobs, "atoll-strict", parking=True, stall_seconds=3600.0, yield_back_when_fits=True)
    assert res.start[2] == pytest.approx(2.0) and res.quota_yields == 1  # W got G's quota
    if first_end == "W":
        assert res.reparked == 1  # back on W's quota at 100, parked again as it was: no decision
        assert res.start[1] == pytest.approx(1000.0) and res.decisions == 4  # A, G, W, and G once A's island frees
        dropped = run(cpu_starved(), jobs, "atoll-strict", parking=True, stall_seconds=3600.0)  # the default: any event drops the need
        assert dropped.reparked == 0 and dropped.decisions == 5 and dropped.start[1] == pytest.approx(1000.0)
    else:
        assert res.reparked == 0 and res.start[1] == pytest.approx(80.0)  # its placement fits: decided afresh, starts
        assert res.decisions == 4


LEND_DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 600}}}}
  strict-fits: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 600}}, queueing: {{lendParked: fits}}}}
  strict-starts: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 600}}, queueing: {{lendParked: starts}}}}
""")


def test_a_giver_whose_placement_fits_now_comes_back_while_a_larger_job_queued_before_it_waits() -> None:
    # islands of 12 free GPUs, quota 24. G (16 GPUs) never finds an island and parks; B's 8 take G's
    # quota; G waits for quota again with its need on file. C (8, t=6) gets quota, finds no island
    # with 8 (A and B hold 8 of each) and parks; D (4, t=10) takes C's quota, and C is deactivated.
    # G, queued before that give, waits for 16 GPUs of quota: without lending it keeps C out until
    # it holds them (A's and B's ends), parks again undecided on them, and C gets quota only when
    # D ends (1,010). With lendParked C comes back at A's end (52), when its own placement fits
    # island r0 and, under ``starts``, the 12 GPUs of quota free cover it: Kueue passes G (16).
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 1000.0, 16), job(2.0, 50.0, 8), job(4.0, 50.0, 8), job(6.0, 200.0, 8), job(10.0, 1000.0, 4)]

    def run_with(policy: str):
        work = prepare_workload(model, jobs)
        (pol,) = make_policies([policy], LEND_DOC, seed=11)
        return simulate(model, work, pol, settings=SimSettings(parking=True, stall_seconds=3600.0))

    kept, fits, starts = run_with("atoll-strict"), run_with("atoll-strict-fits"), run_with("atoll-strict-starts")
    assert kept.start[3] == pytest.approx(1010.0) and kept.quota_lends == 0
    for lent in (fits, starts):
        assert lent.start[3] == pytest.approx(52.0) and lent.quota_lends == 1
        np.testing.assert_array_equal(lent.start[[1, 2, 4]], kept.start[[1, 2, 4]])  # nobody else moves
        assert np.isnan(lent.start[0])  # G never finds an island either way


def test_a_yield_ends_at_its_time_bound_while_a_job_queued_before_the_give_still_waits() -> None:
    # G (16 GPUs) parks with no island of 16; L (8 GPUs) runs until 100,001; B (20 GPUs, t=2) waits
    # for quota and GPUs the flavor lacks, so nobody gives it anything; W (4 GPUs, t=5) gets G's
    # quota. B, queued before the give, waits until L ends: without a bound G stays out that long
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 100.0, 16), job(1.0, 100_000.0, 8), job(2.0, 50.0, 20), job(5.0, 100.0, 4)]
    unbounded = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0, quota_yield_max_seconds=math.inf)
    assert unbounded.start[3] == pytest.approx(5.0) and unbounded.quota_yields == 1
    assert unbounded.quota_yields_timed_out == 0 and unbounded.reparked == 1
    assert unbounded.longest_quota_yield_hours == pytest.approx((100_001.0 - 5.0) / 3600)  # back once B held quota, at L's end
    assert unbounded.start[2] == pytest.approx(100_001.0)
    bounded = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0, quota_yield_max_seconds=3600.0)
    assert bounded.start[3] == pytest.approx(5.0) and bounded.quota_yields_timed_out == 1
    assert bounded.longest_quota_yield_hours == pytest.approx(1.0)  # the second give, to B, ends the moment B holds quota
    # back at 3,605 ahead of B it holds quota again, is decided afresh (not parked again undecided),
    # and so gives its quota to B once L's end frees the GPUs B needs: B starts when it would have
    assert bounded.decisions == unbounded.decisions + 1 and bounded.quota_yields == 2
    assert bounded.start[2] == pytest.approx(100_001.0)


def test_a_yield_bound_no_yield_reaches_changes_nothing() -> None:
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 100.0, 16), job(1.0, 30.0, 8), job(2.0, 50.0, 20), job(5.0, 100.0, 12)]
    a = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0, quota_yield_max_seconds=math.inf)
    b = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0, quota_yield_max_seconds=1000.0)
    assert a.quota_yields == b.quota_yields == 1 and b.quota_yields_timed_out == 0
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.times, b.times)  # the bound's timer adds no instant to the run


def test_a_workload_parked_again_undecided_keeps_its_quota_until_it_is_decided_again() -> None:
    # as above, then K (12 GPUs, t=200) is blocked on quota while the gang, parked again undecided at
    # 110, holds 16 of it: the gang gave its quota back once since its decision and keeps it now
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 100.0, 16), job(10.0, 100.0, 12), job(200.0, 100.0, 12)]
    res = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0)
    assert res.start[1] == pytest.approx(10.0) and np.isnan(res.start[0])
    assert (res.quota_yields, res.reparked) == (1, 1)  # a second yield would need a second decision
    assert np.isnan(res.start[2])  # K waits for quota behind the parked gang
    assert res.decisions == 2


def test_in_turn_a_workload_parked_again_undecided_gives_its_quota_back_again() -> None:
    # as above, under ``yield_in_turn``: the gang, parked again undecided at 110, gives its quota to K
    # at 200 without a decision, and K starts
    model = cluster(sus=1, racks=2, used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0.0, 100.0, 16), job(10.0, 100.0, 12), job(200.0, 100.0, 12)]
    res = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0, yield_in_turn=True)
    assert res.start[1] == pytest.approx(10.0) and res.start[2] == pytest.approx(200.0) and np.isnan(res.start[0])
    assert res.quota_yields == 2 and res.decisions == 3  # the second give took no decision of the gang's


def test_a_workload_that_gave_its_quota_back_is_decided_again_when_room_it_could_use_frees() -> None:
    # islands u0r0, u1r0, u1r1 keep one node busy (12 GPUs free each), u0r1 is empty; quota 52.
    # A takes u0r1 until 80; the gang G parks (no island of 16); J1 takes u0r0; J2 is blocked on quota,
    # so G gives its quota back. A's end frees u0r1: G is decided again and starts there.
    model = cluster(sus=2, racks=2, used={"u0r0n0": 4, "u1r0n0": 4, "u1r1n0": 4})
    jobs = [job(0.0, 80.0, 16), job(1.0, 100.0, 16), job(10.0, 200.0, 12), job(11.0, 200.0, 12)]
    res = run(model, jobs, "atoll-strict", parking=True, stall_seconds=3600.0)
    assert res.start[3] == pytest.approx(11.0)  # J2 got G's quota
    assert res.quota_yields == 1 and res.reparked == 0
    assert res.start[1] == pytest.approx(80.0)  # decided again the moment A's island freed
    assert res.decisions == 5  # A, G, J1, J2, and G once more


def test_a_freed_node_wakes_only_the_parked_jobs_it_can_hold_and_every_job_starts_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    # one island of 4 nodes, each held by a 4-GPU job ending at 100, 200, 300, 400; at twice the
    # quota six 4-GPU jobs arriving at 1..6 hold quota and park. Each freed node has room for one
    # of them: that one, oldest first, is woken, not every parked job the node fits.
    import admission.queue._room as room_module

    model = cluster(sus=1, racks=1)
    jobs = [job(0.0, 100.0 * (i + 1), 4) for i in range(4)] + [job(1.0 + i, 1000.0, 4) for i in range(6)]
    res = run(model, jobs, "atoll-strict", parking=True, quota_factor=2.0, yield_quota=False)
    monkeypatch.setattr(room_module, "_take", lambda free, per_pod, pods: [])  # the room counts nothing: every job it fits is woken
    every = run(model, jobs, "atoll-strict", parking=True, quota_factor=2.0, yield_quota=False)
    assert (res.status == STATUS_DONE).all() and (every.status == STATUS_DONE).all()
    assert res.start.tolist() == every.start.tolist()  # the same job at the same instant
    assert res.start[4:8].tolist() == [100.0, 200.0, 300.0, 400.0]  # oldest parked first
    assert res.decisions == 4 + 6 + 6  # each blocker once; each parked job twice (it parks, then it is woken and placed)
    assert every.decisions > res.decisions

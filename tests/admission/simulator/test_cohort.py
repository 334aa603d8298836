"""ClusterQueues of one cohort in the simulator (``_cohort``): the shape and its errors, which
ClusterQueue a job queues in, Kueue's quota check with borrowing and lending limits, Kueue's
order across the cohort, and the quota yield across ClusterQueues."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from admission.controller import CohortQuota
from admission.simulator import CohortError, CohortShape, load_cohort
from admission.simulator._cohort import HELD, CohortHeads, FlavorQuota, QueueShare, parse_cohort, split_shapes
from admission.simulator._jobs import Job, make_job
from admission.simulator._policies import make_policies
from admission.simulator._sim import SimResult, SimSettings, prepare_workload, simulate
from policies import load_profiles
from topology import ClusterModel

CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 600}}}}
""")
_ids = itertools.count()


def job(arrival: float, duration: float, gpus: int, queue: str) -> Job:
    return make_job(f"c{next(_ids)}", arrival, duration, gpus, 4, queue=queue)


def cluster(racks: int = 2, used: dict[str, int] | None = None) -> ClusterModel:
    """One SU of ``racks`` islands of 4 nodes × 4 GPUs; ``used`` pre-occupies named nodes."""
    flavor = {
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "nodes": [{"name": f"u0r{r}n{n}", "labels": {SU: "u0", CLIQUE: f"u0r{r}"}, "used": {"nvidia.com/gpu": (used or {}).get(f"u0r{r}n{n}", 0)}}
                  for r in range(racks) for n in range(4)],
    }
    return ClusterModel.model_validate({"name": "test", "flavors": [flavor]})


def run(model: ClusterModel, jobs: list[Job], policy: str, cohort: CohortShape | None, **settings: float | bool) -> SimResult:
    work = prepare_workload(model, jobs)
    (pol,) = make_policies([policy], DOC, seed=11)
    return simulate(model, work, pol, settings=SimSettings(cohort=cohort, **settings))  # type: ignore[arg-type]


def shape(*queues: tuple[float, float | None, float | None], reclaim: str = "Never") -> CohortShape:
    return CohortShape(tuple(QueueShare(f"cq-{i}", n, b, lend) for i, (n, b, lend) in enumerate(queues)), reclaim)


# ------------------------------------------------------------------ the shape


def test_shares_become_whole_gpus_that_add_up_to_the_flavors_quota() -> None:
    assert CohortShape.equal(4).split(32) == [8, 8, 8, 8]
    assert CohortShape.equal(3).split(32) == [11, 11, 10]
    assert shape((0.5, None, None), (0.25, None, None), (0.25, None, None)).split(30) == [15, 8, 7]


def test_a_bad_shape_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(CohortError, match=r"nominalQuota shares add up to 0.9"):
        shape((0.5, None, None), (0.4, None, None))
    with pytest.raises(CohortError, match=r"clusterQueues\[1\].lendingLimit"):
        shape((0.5, None, None), (0.5, None, 0.6))
    with pytest.raises(CohortError, match=r"^cohort file: clusterQueues\[a\].borrowingLimit: expected a number, got 'lots'$"):
        parse_cohort({"clusterQueues": [{"name": "a", "nominalQuota": 1, "borrowingLimit": "lots"}]})
    with pytest.raises(CohortError, match=r"clusterQueues\[0\].lendingLimit: expected a number, got True"):
        parse_cohort({"clusterQueues": [{"nominalQuota": 1, "lendingLimit": True}]})
    with pytest.raises(CohortError) as both:  # every problem, one line each
        parse_cohort({"clusterQueues": [{"name": "a", "nominal": 1}]})
    assert str(both.value).splitlines() == ["cohort file: clusterQueues[a].nominalQuota: missing: a required key",
                                            "cohort file: clusterQueues[a].nominal: unknown key"]
    with pytest.raises(CohortError, match=r"reclaimWithinCohort: expected 'Never', 'LowerPriority' or 'Any', got 'Sometimes'"):
        parse_cohort({"clusterQueues": [{"name": "a", "nominalQuota": 1}], "reclaimWithinCohort": "Sometimes"})
    with pytest.raises(CohortError, match=r"^cohort file: clusterQueues: List should have at least 1 item"):
        parse_cohort({"clusterQueues": []})
    (tmp_path / "typo.yaml").write_text("clusterQueues:\n- {name: a, nominalQuota: 1}\nreclaimWithinCohrt: Any\n")
    with pytest.raises(CohortError, match=r"typo.yaml: reclaimWithinCohrt: unknown key$"):
        load_cohort(str(tmp_path / "typo.yaml"))
    (tmp_path / "broken.yaml").write_text("clusterQueues: [\n")
    with pytest.raises(CohortError, match=r"broken.yaml: not valid YAML"):
        load_cohort(str(tmp_path / "broken.yaml"))
    with pytest.raises(CohortError, match="at least 1"):
        load_cohort("0")
    with pytest.raises(CohortError, match="neither a number of ClusterQueues nor a readable YAML file"):
        load_cohort(str(tmp_path / "missing.yaml"))
    path = tmp_path / "teams.yaml"
    path.write_text("clusterQueues:\n- {name: a, nominalQuota: 0.75, lendingLimit: 0.25}\n- {name: b, nominalQuota: 0.25, borrowingLimit: 0.5}\n"
                    "reclaimWithinCohort: Any\n")
    got = load_cohort(str(path))
    assert got.queues == (QueueShare("a", 0.75, None, 0.25), QueueShare("b", 0.25, 0.5, None)) and got.reclaim_within_cohort == "Any"
    assert len(load_cohort("4")) == 4


def test_jobs_split_by_a_seeded_hash_of_their_id_in_proportion_to_the_shares_unless_they_name_a_cluster_queue() -> None:
    ids = [f"job-{i}" for i in range(4000)]
    one = CohortShape.equal(4).assign(ids, seed=0)
    assert np.array_equal(one, CohortShape.equal(4).assign(ids, seed=0))  # deterministic
    assert np.array_equal(one[::-1], CohortShape.equal(4).assign(ids[::-1], seed=0))  # not by reading order
    assert not np.array_equal(one, CohortShape.equal(4).assign(ids, seed=1))  # seeded
    counts = np.bincount(one, minlength=4) / len(ids)
    assert np.all(np.abs(counts - 0.25) < 0.03)
    skewed = np.bincount(shape((0.75, None, None), (0.25, None, None)).assign(ids, seed=0), minlength=2) / len(ids)
    assert abs(skewed[0] - 0.75) < 0.03
    jobs = [job(0, 1, 4, "cq-1"), job(0, 1, 4, "cq-1"), job(0, 1, 4, "default")]
    work = prepare_workload(cluster(), jobs)
    shape_of, shapes, cq_of = split_shapes(work.shape, work.shapes, work.jobs, CohortShape.equal(2), seed=0)
    assert [cq_of[s] for s in shape_of[:2]] == [1, 1]  # named: there
    assert len(shapes) == 2 * len(work.shapes) and all(shapes[s] == work.shapes[s // 2] for s in range(len(shapes)))


# ------------------------------------------------------------------ Kueue's quota check


def test_available_is_kueues_with_borrowing_and_lending_limits_and_the_controllers_arithmetic() -> None:
    q = FlavorQuota(shape((0.5, None, None), (0.5, None, None)), 32)
    assert (q.available(0), q.available(1)) == (32, 32)  # unlimited borrowing: the cohort's unused quota
    q.hold(1, 24)
    assert (q.available(0), q.available(1)) == (8, 8) and q.borrowing(1) and not q.borrowing(0)
    limited = FlavorQuota(shape((0.5, 0.25, None), (0.5, None, 0.25)), 32)  # cq-0 borrows at most 8; cq-1 lends at most 8
    assert limited.available(0) == 24  # its 16 and the 8 cq-1 may lend
    assert limited.available(1) == 32
    limited.hold(0, 20)
    assert limited.borrows(0, 0) and limited.available(0) == 4 and limited.available(1) == 12
    same = CohortQuota("cohort")  # the controller's own: one rule on both sides
    same.add("cq-0", 16, 8, None, 20)
    same.add("cq-1", 16, None, 8, 0)
    assert (same.available("cq-0"), same.available("cq-1")) == (limited.available(0), limited.available(1))
    assert limited.ceiling == [24, 32]  # with nothing reserved: a Workload larger than that is never admitted there


def test_a_workload_borrows_beyond_its_nominal_quota_while_the_cohort_has_unused_quota_and_not_beyond() -> None:
    # 32 GPUs, two ClusterQueues of 16. cq-0's 16-GPU job runs; its second 16-GPU job borrows cq-1's
    # unused 16 at once. cq-0's third job (8) finds no unused quota left in the cohort and waits
    model = cluster()
    jobs = [job(0, 1000, 16, "cq-0"), job(1, 1000, 16, "cq-0"), job(2, 100, 8, "cq-0")]
    res = run(model, jobs, "count-only", CohortShape.equal(2))
    assert res.start[:2].tolist() == [0.0, 1.0]
    assert res.start[2] == pytest.approx(1000.0)
    capped = run(model, jobs, "count-only", shape((0.5, 0.25, None), (0.5, None, None)))  # borrowing up to 8 GPUs
    assert capped.start[0] == 0.0 and capped.start[1] == pytest.approx(1000.0)  # 16 + 16 is past 16 + 8
    assert capped.start[2] == pytest.approx(2.0)  # 16 + 8 is within it
    lent = run(model, jobs, "count-only", shape((0.5, None, None), (0.5, None, 0.25)))  # cq-1 lends at most 8
    assert lent.start[1] == pytest.approx(1000.0) and lent.start[2] == pytest.approx(2.0)


def test_kueue_admits_a_cluster_queues_head_within_its_nominal_quota_before_a_borrowing_one_queued_earlier() -> None:
    quota = FlavorQuota(CohortShape.equal(2), 32)
    quota.hold(0, 16)  # cq-0 is at its nominal quota: its head would borrow
    heads = CohortHeads([((0, 5.0), 7, 0), ((0, 9.0), 8, 1)], [0, 1], [8, 8], quota)
    assert [heads.pop()[1], heads.pop()[1]] == [8, 7]  # cq-1's head (under nominal) first, though queued later
    quota.hold(0, -16)
    heads = CohortHeads([((0, 5.0), 7, 0), ((0, 9.0), 8, 1)], [0, 1], [8, 8], quota)
    assert [heads.pop()[1], heads.pop()[1]] == [7, 8]  # neither borrows: queue-order time
    # in a run: A (cq-0, 16) and B (cq-0, 8, borrowing) run; C (cq-0, 16, t=2) and D (cq-1, 16, t=3)
    # wait. When A ends at 100, 16 GPUs free: C would borrow (cq-0 holds B's 8), D would not. Kueue
    # admits D first, and C waits for D's end; one ClusterQueue admits the earlier C, and D waits for it
    model = cluster()
    jobs = [job(0, 100, 16, "cq-0"), job(0, 1000, 8, "cq-0"), job(2, 50, 16, "cq-0"), job(3, 50, 16, "cq-1")]
    res = run(model, jobs, "count-only", CohortShape.equal(2))
    assert res.start[1] == 0.0 and res.start[3] == pytest.approx(100.0) and res.start[2] == pytest.approx(150.0)
    single = run(model, jobs, "count-only", None)
    assert single.start[2] == pytest.approx(100.0) and single.start[3] == pytest.approx(150.0)


def test_a_head_that_holds_its_quota_comes_first_in_the_cycle_even_where_its_cluster_queue_would_borrow() -> None:
    """A parked Workload woken by freed room keeps ``QuotaReserved`` in Kueue; the simulator gives
    its quota back while it is decided again, so the cycle must not let a head of another
    ClusterQueue (within its nominal quota, or of higher priority) take that quota first."""
    quota = FlavorQuota(CohortShape.equal(2), 32)
    quota.hold(0, 16)  # cq-0 at its nominal quota: a head of it that asked for quota would borrow
    heads = CohortHeads([(HELD, 7, 0), ((-10, 9.0), 8, 1)], [0, 1], [8, 8], quota)
    assert [heads.pop()[1], heads.pop()[1]] == [7, 8]
    heads = CohortHeads([((0, 5.0), 7, 0), ((-10, 9.0), 8, 1)], [0, 1], [8, 8], quota)
    assert [heads.pop()[1], heads.pop()[1]] == [8, 7]  # the same head asking for quota: borrowing comes last

def test_the_default_is_one_cluster_queue_per_flavor_and_a_cohort_of_one_changes_nothing() -> None:
    model = cluster(racks=2, used={"u0r0n0": 4})
    jobs = [job(t * 37.0, 300 + 91 * (t % 7), [1, 2, 4, 8, 12, 16][t % 6], "default") for t in range(120)]
    for policy in ("count-only", "atoll-strict"):
        base = run(model, jobs, policy, None, parking=True)
        one = run(model, jobs, policy, CohortShape.equal(1), parking=True)
        assert np.array_equal(base.start, one.start, equal_nan=True) and base.decisions == one.decisions
        assert base.quota_yields == one.quota_yields


# ------------------------------------------------------------------ the quota yield over the cohort


def test_a_parked_workload_gives_its_quota_to_a_waiter_of_another_cluster_queue_of_the_cohort() -> None:
    # 24 GPUs of quota (one node per island busy), two ClusterQueues of 12. cq-0's 16-GPU strict gang
    # finds no island of 16 and parks, borrowing 4 of cq-1's quota; cq-1's 12-GPU job fits island r0
    # but only 8 GPUs of quota are unused in the cohort: the gang gives its quota back across the
    # ClusterQueues and the job starts at once
    model = cluster(used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0, 100, 16, "cq-0"), job(10, 100, 12, "cq-1")]
    kept = run(model, jobs, "atoll-strict", CohortShape.equal(2), parking=True, yield_quota=False, stall_seconds=3600.0)
    assert np.isnan(kept.start[1])
    given = run(model, jobs, "atoll-strict", CohortShape.equal(2), parking=True, stall_seconds=3600.0)
    assert given.start[1] == pytest.approx(10.0) and given.quota_yields == 1


def test_a_giver_whose_quota_its_cluster_queue_keeps_gives_nothing_a_waiter_of_another_could_not_use() -> None:
    # cq-0 (16 of 24 GPUs) lends at most 2; cq-1 has 8. cq-0's 16-GPU gang parks: 14 of its quota is
    # local, 2 in the cohort. cq-1 runs a 4-GPU job; its 8-GPU job (t=10) sees 10 - 2 - 4 = 4 GPUs of
    # quota. The gang's give would raise that by 2 only, not enough: nobody gives (counted as GPUs,
    # 16 would have), and the job starts when cq-1's own job ends. Without the limits the gang gives.
    model = cluster(used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0, 100, 16, "cq-0"), job(1, 1000, 4, "cq-1"), job(10, 100, 8, "cq-1")]
    kept = run(model, jobs, "atoll-strict", shape((2 / 3, None, 1 / 12), (1 / 3, None, None)), parking=True, stall_seconds=3600.0)
    assert kept.quota_yields == 0 and kept.start[1] == pytest.approx(1.0) and kept.start[2] == pytest.approx(1001.0)
    given = run(model, jobs, "atoll-strict", CohortShape.equal(2), parking=True, stall_seconds=3600.0)
    assert given.quota_yields == 1 and given.start[2] == pytest.approx(10.0)


PIN_DOC = load_profiles(f"""
defaultProfile: parked
profiles:
  parked: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 600}}, queueing: {{parkWaiting: true}}}}
  costed: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 3600, retry: {{initialSeconds: 15, maxSeconds: 300}},
            queueing: {{waitOrSpan: true, reserveAfterSeconds: 1800, maxReservationsPerFlavor: 1, parkWaiting: true}}}}
""")


@pytest.mark.parametrize(("policy", "kueue_preemption", "pinned"), [
    ("atoll-parked", "Never", (18049025.92034165, 1097, 653, 0)),
    ("atoll-costed", "Never", (17238910.887074936, 740, 299, 0)),
    ("kueue-required", "LowerPriority", (18411652.918242387, 521, 0, 39)),
    ("atoll-parked", "LowerPriority", (22636893.71284182, 1358, 759, 167)),
])
def test_a_default_run_is_the_run_before_cohorts_were_modelled_to_the_digit(policy: str, kueue_preemption: str,
                                                                           pinned: tuple[float, int, int, int]) -> None:
    # 400 jobs of 1-32 GPUs (some of priority 10) on 64 GPUs: parked Workloads give their quota back
    # hundreds of times and Kueue preempts for quota. The pinned figures (sum of start times,
    # decisions, quota yields, Kueue's victims) are those of the simulator before the cohort model
    # (with a woken parked job keeping its quota, since before a job of higher priority too; and freed
    # room waking only the parked jobs it holds, oldest parked first, since; and a reservation's end
    # offered as freed room, since: the same starts, 13 fewer decisions; and, with Kueue's preemption, freed room counted
    # after what admitted Workloads still owe, since: a tie over twelve such streams, this one later), run on the same
    # stream: with no cohort the quota arithmetic and queue order are the same
    import random

    rng = random.Random(7)
    t = 0.0
    jobs = []
    for i in range(400):
        t += rng.expovariate(1 / 35)
        jobs.append(make_job(f"p{i}", t, rng.uniform(200, 3000), rng.choice([1, 2, 4, 8, 8, 12, 16, 16, 24, 32]), 4,
                             priority=rng.choice([0, 0, 0, 10])))
    model = ClusterModel.model_validate({"name": "test", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "generate": [{"level": SU, "count": 2, "prefix": "u"}, {"level": CLIQUE, "count": 2, "prefix": "r"},
                     {"level": "kubernetes.io/hostname", "count": 4, "prefix": "n"}]}]})
    (pol,) = make_policies([policy], PIN_DOC, seed=3)
    r = simulate(model, prepare_workload(model, jobs), pol, settings=SimSettings(kueue_preemption=kueue_preemption))
    assert (float(np.nansum(r.start)), r.decisions, r.quota_yields, r.kueue_preempted) == pinned
    assert not np.isnan(r.start).any()


def test_a_waiter_its_cluster_queue_could_never_admit_keeps_no_giver_out() -> None:
    # cq-0 may not borrow (12 of 24 GPUs at most); its 16-GPU job X (t=1) is never admitted. cq-1's
    # gang parks on 16 of quota and gives it to cq-1's 12-GPU job W (t=10). X, queued before the
    # give, is no waiter the quota could let in, so it does not keep the gang deactivated until the
    # yield's time bound (the controller's QuotaYield.due counts only waiters Kueue could admit)
    model = cluster(used={"u0r0n0": 4, "u0r1n0": 4})
    jobs = [job(0, 100, 16, "cq-1"), job(1, 100, 16, "cq-0"), job(10, 100, 12, "cq-1")]
    res = run(model, jobs, "atoll-strict", shape((0.5, 0.0, None), (0.5, None, None)), parking=True, stall_seconds=3600.0)
    assert res.start[2] == pytest.approx(10.0) and res.quota_yields == 1
    assert res.quota_yields_timed_out == 0 and np.isnan(res.start[1])

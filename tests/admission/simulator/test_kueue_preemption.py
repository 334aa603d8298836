"""Kueue's own preemption for quota in the simulator (``SimSettings.kueue_preemption``), as Kueue
v0.19.2's classical preemptor does it: the candidates its ClusterQueue's ``withinClusterQueue``
allows, lower priority first and the quota reserved most recently first, a minimal set by
fill-back; victims restart from scratch. Off (``Never``) by default: nobody is preempted for quota."""

from __future__ import annotations

import itertools

import pytest

from admission.simulator._jobs import Job, make_job
from admission.simulator._kueue_preemption import Holder, candidates, minimal_targets, satisfies
from admission.simulator._metrics import summarize
from admission.simulator._policies import make_policies
from admission.simulator._sim import STATUS_DONE, SimResult, SimSettings, prepare_workload, simulate
from policies import load_profiles
from tests.admission.simulator.test_queueing import CLIQUE, cluster

DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, retry: {{initialSeconds: 30, maxSeconds: 120}}}}
""")
_ids = itertools.count()


def job(arrival: float, duration: float, gpus: int, priority: int = 0) -> Job:
    return make_job(f"j{next(_ids)}", arrival, duration, gpus, 4, "training", priority=priority)


def run(policy: str, jobs: list[Job], **settings: object) -> SimResult:
    (pol,) = make_policies([policy], DOC, seed=1)
    return simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=SimSettings(**settings))  # type: ignore[arg-type]


# ------------------------------------------------------------------ the preemptor's rules


def h(job: int, priority: int = 0, order: float = 0.0, reserved: float = 0.0, gpus: int = 4) -> Holder:
    return Holder(job, priority, order, reserved, gpus)


def test_the_policy_decides_who_may_be_preempted() -> None:
    low, equal_newer, equal_older = h(1, priority=0, order=5), h(2, priority=5, order=20), h(3, priority=5, order=1)
    assert [satisfies("LowerPriority", 5, 10, c) for c in (low, equal_newer, equal_older)] == [True, False, False]
    assert [satisfies("LowerOrNewerEqualPriority", 5, 10, c) for c in (low, equal_newer, equal_older)] == [True, True, False]
    assert [satisfies("Never", 5, 10, c) for c in (low, equal_newer, equal_older)] == [False, False, False]


def test_candidates_go_lower_priority_first_then_the_quota_reserved_most_recently() -> None:
    holders = [h(1, priority=1, reserved=50), h(2, priority=0, reserved=10), h(3, priority=0, reserved=30), h(4, priority=9, reserved=99)]
    assert [c.job for c in candidates("LowerPriority", 5, 0.0, holders)] == [3, 2, 1]  # 4 is not lower than 5


def test_the_targets_are_a_minimal_set_put_back_last_taken_first() -> None:
    """8 GPUs short: taking 4 then 8 frees 12, enough; putting the 4 back still leaves 8 free, so only the 8 go."""
    free = [0]
    ordered = [h(1, gpus=4), h(2, gpus=8), h(3, gpus=4)]

    def remove(c: Holder) -> None:
        free[0] += c.gpus

    def add(c: Holder) -> None:
        free[0] -= c.gpus

    assert [t.job for t in minimal_targets(ordered, remove, add, lambda: free[0] >= 8) or []] == [2]
    assert free[0] == 0  # everything put back
    assert minimal_targets(ordered, remove, add, lambda: free[0] >= 17) is None and free[0] == 0


# ------------------------------------------------------------------ in the simulator

A, B, GANG = 0, 1, 2


def quota_run(policy: str, kueue_preemption: str = "Never") -> SimResult:
    """Two 16-GPU jobs of priority 0 take both islands and all the quota for 20,000 s (the first
    from t=0, the second from t=100). A 16-GPU gang of priority 100 arrives at t=1000: short of quota."""
    jobs = [job(0, 20000, 16), job(100, 20000, 16), job(1000, 300, 16, priority=100)]
    return run(policy, jobs, kueue_preemption=kueue_preemption)


@pytest.mark.parametrize("policy", ["atoll-strict", "kueue-required"])
def test_without_kueues_preemption_the_gang_waits_for_quota_until_a_job_ends(policy: str) -> None:
    res = quota_run(policy)
    assert (res.status == STATUS_DONE).all() and res.start[GANG] >= 20000
    assert (res.kueue_preemption, res.kueue_preemptions, res.kueue_preempted, res.kueue_preempted_gpu_hours) == ("Never", 0, 0, 0.0)


@pytest.mark.parametrize("policy", ["atoll-strict", "kueue-required"])
def test_kueue_preempts_the_job_that_took_quota_last_and_the_gang_starts_at_once(policy: str) -> None:
    res = quota_run(policy, "LowerPriority")
    assert (res.status == STATUS_DONE).all()
    assert res.start[GANG] == 1000  # admitted in the instant its victim left
    assert (res.kueue_preemptions, res.kueue_preempted) == (1, 1)
    assert res.kueue_preempted_gpu_hours == pytest.approx(16 * 900 / 3600)  # the second job had run 900 s
    assert res.start[A] == 0 and res.end[A] == pytest.approx(20000 * res.slowdown[A])  # the older reservation is left alone
    assert res.start[B] >= res.end[GANG]  # the victim restarts from scratch once quota frees
    assert res.end[B] - res.start[B] == pytest.approx(20000 * res.slowdown[B])
    s = summarize(res)
    assert (s["kueue_preemption"], s["kueue_preemptions"], s["kueue_preempted"]) == ("LowerPriority", 1, 1)
    assert res.preempted == 0  # Atoll's own domain-clearing preemption is not involved


@pytest.mark.parametrize("policy", ["atoll-strict", "kueue-required"])
def test_a_gang_of_the_same_priority_preempts_nothing(policy: str) -> None:
    jobs = [job(0, 20000, 16), job(100, 20000, 16), job(1000, 300, 16)]
    for within in ("LowerPriority", "LowerOrNewerEqualPriority"):  # the running jobs are older: not newer-equal either
        res = run(policy, jobs, kueue_preemption=within, within_cluster_queue=within)
        assert res.kueue_preempted == 0 and res.start[2] >= 20000


@pytest.mark.parametrize("policy", ["atoll-strict", "kueue-required"])
def test_under_lower_or_newer_equal_priority_a_waiting_job_preempts_a_newer_one_of_its_priority(policy: str) -> None:
    """All priority 0. A 16-GPU job fills island r0 for good; a 4-GPU job takes r1 until t=30. A
    16-GPU job arrives at t=10, short of quota (12 free); a newer 8-GPU job at t=20 fits the 12 and
    passes it (BestEffortFIFO). At t=30 the 4-GPU job ends: 8 GPUs of quota free. Under
    ``LowerOrNewerEqualPriority`` the older 16-GPU job preempts the newer 8-GPU one and starts in
    r1 at once; under ``LowerPriority`` it waits for that job's end."""
    jobs = [job(0, 20000, 16), job(1, 29, 4), job(10, 300, 16), job(20, 5000, 8)]
    newer = run(policy, jobs, kueue_preemption="LowerOrNewerEqualPriority", within_cluster_queue="LowerOrNewerEqualPriority")
    assert (newer.status == STATUS_DONE).all()
    assert newer.start[2] == 30 and (newer.kueue_preemptions, newer.kueue_preempted) == (1, 1)
    assert newer.kueue_preempted_gpu_hours == pytest.approx(8 * 10 / 3600) and newer.start[3] >= newer.end[2]
    lower = run(policy, jobs, kueue_preemption="LowerPriority")
    assert lower.kueue_preempted == 0 and lower.start[3] == 20 and lower.start[2] >= lower.end[3]


def test_on_a_kueue_tas_flavor_kueue_preempts_for_a_placement_but_for_atoll_it_sees_only_quota() -> None:
    """Quota twice capacity: the gang is short of one free island only. Kueue TAS (kueue-required)
    preempts the newer 12-GPU job to empty its island; Atoll's flavor is quota alone to Kueue,
    so atoll-strict waits (its own ``preemptDomain`` is what clears a domain)."""
    jobs = [job(0, 20000, 12), job(100, 20000, 12), job(1000, 300, 16, priority=100)]
    tas = run("kueue-required", jobs, kueue_preemption="LowerPriority", quota_factor=2.0)
    assert tas.start[2] == 1000 and tas.kueue_preempted == 1 and tas.kueue_preempted_gpu_hours == pytest.approx(12 * 900 / 3600)
    assert tas.start[0] == 0 and tas.start[1] >= tas.end[2]
    atoll = run("atoll-strict", jobs, kueue_preemption="LowerPriority", quota_factor=2.0)
    assert atoll.kueue_preempted == 0 and atoll.start[2] >= 20000


@pytest.mark.parametrize("parking", [False, True])
def test_a_workload_holding_quota_undecided_is_preempted_first_and_loses_no_work(parking: bool) -> None:
    """Two 12-GPU jobs (t=0, t=10) leave 4 GPUs per island; an 8-GPU job of priority 0 at t=20 gets
    the last 8 GPUs of quota but no island: it waits holding them (on a Retry's delay, or parked).
    A 4-GPU job of priority 100 at t=100 is short of quota: the waiting job took quota last, so it
    alone is preempted; it had run nothing. The 4-GPU job starts at once in a 4-GPU gap."""
    jobs = [job(0, 20000, 12), job(10, 20000, 12), job(20, 500, 8), job(100, 300, 4, priority=100)]
    res = run("atoll-strict", jobs, kueue_preemption="LowerPriority", parking=parking)
    assert (res.status == STATUS_DONE).all()
    assert res.start[3] == 100 and (res.kueue_preemptions, res.kueue_preempted, res.kueue_preempted_gpu_hours) == (1, 1, 0.0)
    assert res.start[0] == 0 and res.start[1] == 10  # the running jobs were left alone
    assert res.start[2] >= res.end[3]  # the 8-GPU job gets quota again only when the 4-GPU job gives it back


def test_kueues_policy_is_the_cluster_queues_one_and_bad_values_are_refused() -> None:
    with pytest.raises(ValueError, match="kueue_preemption: 'Always' is not one of Never, LowerPriority, LowerOrNewerEqualPriority"):
        SimSettings(kueue_preemption="Always")
    with pytest.raises(ValueError, match="kueue_preemption: 'LowerOrNewerEqualPriority' differs from within_cluster_queue 'LowerPriority'"):
        SimSettings(kueue_preemption="LowerOrNewerEqualPriority")
    assert SimSettings().kueue_preemption == "Never"


# ------------------------------------------------------------------ over a cohort


def test_other_cluster_queues_candidates_come_first_and_only_while_they_borrow_under_reclaim_within_cohort() -> None:
    holders = [Holder(1, 0, 0.0, 5.0, 4, queue=0), Holder(2, 0, 0.0, 1.0, 4, queue=1), Holder(3, 5, 0.0, 9.0, 4, queue=2)]
    assert [c.job for c in candidates("LowerPriority", 1, 0.0, holders, queue=0)] == [1]  # Never: its own alone
    got = candidates("LowerPriority", 1, 0.0, holders, queue=0, reclaim="LowerPriority", borrowing=lambda q: True)
    assert [c.job for c in got] == [2, 1]  # the other ClusterQueue's first; job 3 is of a higher priority
    assert [c.job for c in candidates("LowerPriority", 1, 0.0, holders, queue=0, reclaim="Any", borrowing=lambda q: True)] == [2, 3, 1]
    assert [c.job for c in candidates("LowerPriority", 1, 0.0, holders, queue=0, reclaim="Any", borrowing=lambda q: q == 2)] == [3, 1]


def cohort_run(reclaim: str, borrower_gpus: int = 24, borrower_priority: int = 0) -> SimResult:
    """Two ClusterQueues of 16 GPUs (of 32). cq-1's job takes ``borrower_gpus`` from t=0 for
    20,000 s; at t=1000 a 16-GPU job of priority 100 in cq-0 (nothing of its own running) is short of quota."""
    from admission.simulator._cohort import CohortShape

    jobs = [make_job(f"j{next(_ids)}", 0, 20000, borrower_gpus, 4, queue="cq-1", priority=borrower_priority),
            make_job(f"j{next(_ids)}", 1000, 300, 16, 4, queue="cq-0", priority=100)]
    return run("kueue-required", jobs, cohort=CohortShape.equal(2, reclaim_within_cohort=reclaim))


def test_a_reclaim_evicts_a_borrower_of_another_cluster_queue_when_the_policy_allows() -> None:
    res = cohort_run("LowerPriority")
    assert res.start[1] == 1000 and (res.kueue_preemptions, res.kueue_preempted) == (1, 1)
    assert res.start[0] >= res.end[1]  # the borrower restarts once quota frees for it
    kept = cohort_run("Never")  # Kueue's default: no reclaim, the job waits for the borrower's end
    assert kept.start[1] >= 20000 and kept.kueue_preemptions == 0
    assert cohort_run("LowerPriority", borrower_priority=100).kueue_preemptions == 0  # not of a lower priority
    assert cohort_run("Any", borrower_priority=100).start[1] == 1000  # Any: whatever its priority
    within = cohort_run("Any", borrower_gpus=16)  # cq-1 within its nominal quota borrows nothing: nothing to reclaim
    assert within.kueue_preemptions == 0 and within.start[1] == 1000  # and the job's own 16 are free anyway


def test_a_reclaim_that_leaves_the_preemptor_borrowing_needs_borrow_within_cohort() -> None:
    # cq-0 runs a 12-GPU job of its own (under its nominal 16); cq-1's 20-GPU job borrows 4. cq-0's
    # 16-GPU job of priority 100 (t=1000) fits only by borrowing once the borrower is gone (12 + 16 > 16):
    # under borrowWithinCohort Never Kueue preempts nobody for it then; under LowerPriority the borrower goes at once
    from admission.simulator._cohort import CohortShape

    def go(borrow: str) -> SimResult:
        jobs = [make_job(f"j{next(_ids)}", 0, 20000, 12, 4, queue="cq-0"), make_job(f"j{next(_ids)}", 1, 20000, 20, 4, queue="cq-1"),
                make_job(f"j{next(_ids)}", 1000, 300, 16, 4, queue="cq-0", priority=100)]
        return run("count-only", jobs, cohort=CohortShape.equal(2, reclaim_within_cohort="LowerPriority", borrow_within_cohort=borrow))

    never = go("Never")  # reclaimed only at 20,000, when cq-0's own job ends and 16 is within its nominal quota
    assert never.start[2] == 20000 and never.kueue_preempted == 1 and never.start[1] == never.end[2]
    lower = go("LowerPriority")
    assert lower.start[2] == 1000 and lower.kueue_preempted == 1 and lower.start[1] >= lower.end[2]

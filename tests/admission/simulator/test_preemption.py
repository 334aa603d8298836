"""Priorities and domain-clearing preemption in the simulator, through the deployed decision path:
Kueue's queue takes higher priorities first; a high-priority gang behind low-priority long jobs
waits for their ends without ``preemptDomain``, and with ``on`` starts once the cheapest domain's
victims are evicted, in that domain, the work they had run reported lost; ``dry-run`` only records
the plan; the ClusterQueue's ``withinClusterQueue: Never`` allows no victim."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from admission.simulator._jobs import Job, make_job
from admission.simulator._metrics import summarize
from admission.simulator._policies import make_policies
from admission.simulator._sim import STATUS_DONE, SimResult, SimSettings, prepare_workload, simulate
from policies import load_profiles
from tests.admission.simulator.test_queueing import CLIQUE, SU, cluster
from topology import ClusterModel

RETRY = "retry: {initialSeconds: 30, maxSeconds: 120}"
DOC = load_profiles(f"""
defaultProfile: strict
profiles:
  strict: {{requiredLevel: {CLIQUE}, {RETRY}}}
  preempting: {{requiredLevel: {CLIQUE}, {RETRY}, preemptDomain: on}}
  dryrun: {{requiredLevel: {CLIQUE}, {RETRY}, preemptDomain: dry-run}}
""")
_ids = itertools.count()


def job(arrival: float, duration: float, gpus: int, priority: int = 0) -> Job:
    return make_job(f"j{next(_ids)}", arrival, duration, gpus, 4, "training", priority=priority)


LONG, LATE, GANG = 0, 1, 2


def gang_run(profile: str, *, records: Path | None = None, within: str = "LowerPriority", late_priority: int = 0) -> SimResult:
    """Two low-priority 12-GPU jobs, one per island, for 20,000 s: the first from t=0, the second
    from t=500. A priority-100 gang of 16 GPUs (one whole island) arrives at t=1000: it fits no
    island until one of them leaves. Clearing the second's island loses 12 × 500 s of work, the
    first's 12 × 1000 s. Quota is twice capacity, so the gang is decided at once."""
    jobs = [job(0, 20000, 12), job(500, 20000, 12, priority=late_priority), job(1000, 300, 16, priority=100)]
    (pol,) = make_policies([f"atoll-{profile}"], DOC, seed=1)
    settings = SimSettings(quota_factor=2.0, within_cluster_queue=within, records=str(records) if records else None)
    return simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=settings)


def test_without_preemption_a_high_priority_gang_waits_for_the_low_priority_jobs_to_end() -> None:
    res = gang_run("strict")
    assert (res.status == STATUS_DONE).all()
    assert res.start[GANG] >= res.end[LONG] == 20000  # the first island to free is the first job's, at its end
    assert (res.preemption_plans, res.preempted, res.preempted_gpu_hours) == (0, 0, 0.0)


def test_with_preempt_domain_on_the_gang_starts_in_the_cheapest_domain_once_its_victim_is_evicted(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    res = gang_run("preempting", records=out)
    assert (res.status == STATUS_DONE).all()
    assert res.preemption_plans == 1 and res.preempted == 1
    assert res.preempted_gpu_hours == pytest.approx(12 * 500 / 3600)  # what the victim had run when evicted
    s = summarize(res)  # what atoll simulate reports
    assert (s["preempt_domain"], s["preemption_plans"], s["preempted"]) == ("on", 1, 1)
    assert s["preempted_gpu_hours"] == pytest.approx(12 * 500 / 3600) and s["mean_jct_by_size_band"]["16-63"] == pytest.approx(330)
    assert res.start[LONG] == 0 and res.end[LONG] == 20000  # the dearer job is left alone
    # the gang starts at its first decision after the eviction (its Retry, ≤ 30 s), far before any job ends
    assert 1000 < res.start[GANG] <= 1000 + 30
    # the victim restarts from scratch once the gang's island frees: it runs its whole 20,000 s again
    assert res.start[LATE] >= res.end[GANG]
    assert res.end[LATE] - res.start[LATE] == pytest.approx(20000 * res.slowdown[LATE])
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    admitted = {r["workload"]: r["placement"][0]["domain_path"] for r in lines if r["outcome"] == "admit"}  # each one's last admission
    first = next(r["placement"][0]["domain_path"] for r in lines if r["workload"] == f"job-{LATE}" and r["outcome"] == "admit")
    assert admitted[f"job-{GANG}"] == first != admitted[f"job-{LONG}"]  # the gang runs where the cheaper victim ran
    note = next(n for r in lines if r["workload"] == f"job-{GANG}" for n in r["notes"] if n.startswith("preemption"))
    assert note.startswith(f"preemption: clears gpu.clique {'/'.join(first)} by evicting sim/job-{LATE} (12 GPUs, 1.7 GPU-hours")


def test_a_parked_gang_is_decided_again_as_soon_as_its_victim_has_left() -> None:
    """With parking (the controller's park_waiting) the gang is not on a Retry's timer: the
    victim's eviction frees its domain, which wakes the gang at once."""
    jobs = [job(0, 20000, 12), job(500, 20000, 12), job(1000, 300, 16, priority=100)]
    (pol,) = make_policies(["atoll-preempting"], DOC, seed=1)
    res = simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=SimSettings(quota_factor=2.0, parking=True))
    assert res.preempted == 1 and res.preempted_gpu_hours == pytest.approx(12 * 500 / 3600)
    assert res.start[GANG] == 1000 and res.start[LATE] >= res.end[GANG]


def test_a_victim_is_counted_on_the_nodes_it_runs_on_not_those_planned_for_it() -> None:
    """With the second job at the gang's priority only the first may leave. Under ``domain``
    enforcement the scheduler model (least-allocated, seed 0) binds the first job's 3 pods on nodes
    1-3 of its island, where Atoll planned nodes 0-2: counted where planned, its leaving would free
    only 3 whole nodes and no plan would be made; counted where it runs, it frees the island."""
    res = gang_run("preempting", late_priority=100)
    assert res.preempted == 1 and res.preempted_gpu_hours == pytest.approx(12 * 1000 / 3600)
    assert 1000 < res.start[GANG] <= 1030 and res.start[LONG] >= res.end[GANG]


def test_with_dry_run_the_plan_is_recorded_and_nobody_is_evicted(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    res = gang_run("dryrun", records=out)
    off = gang_run("strict")
    assert res.preemption_plans >= 1 and res.preempted == 0 and res.preempted_gpu_hours == 0.0
    assert np.array_equal(res.start, off.start)  # the plan changes nothing
    notes = [n for line in out.read_text().splitlines() for n in json.loads(line).get("notes", []) if n.startswith("preemption")]
    assert notes and all("dry run, nothing evicted" in n and f"job-{LATE}" in n for n in notes)


def test_a_cluster_queue_that_never_preempts_within_itself_gives_the_plan_no_victim() -> None:
    res = gang_run("preempting", within="Never")
    assert (res.preemption_plans, res.preempted) == (0, 0)
    assert res.start[GANG] >= 20000


def test_a_gang_of_the_same_priority_as_the_running_jobs_preempts_nothing() -> None:
    jobs = [job(0, 20000, 12), job(500, 20000, 12), job(1000, 300, 16, priority=0)]
    (pol,) = make_policies(["atoll-preempting"], DOC, seed=1)
    res = simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=SimSettings(quota_factor=2.0))
    assert res.preempted == 0 and res.start[GANG] >= 20000


def test_the_plan_leaves_out_nodes_slower_than_the_gangs_class_allows() -> None:
    """Island r0: 4 nodes; r1: 4 nodes, one at half speed, which the training class's perfFloor
    0.9 rules out for every job here. A 16-GPU job fills r0 from t=0; a 12-GPU job takes r1's 3
    fast nodes from t=500. Clearing r1 costs less, but the gang could not use it (3 fast nodes for
    4 pods): the plan clears r0, and the gang starts there."""
    nodes = [{"name": f"n{i}", "labels": {SU: "u0", CLIQUE: f"r{i // 4}"}, **({"perf": 0.5} if i == 7 else {})} for i in range(8)]
    slow = ClusterModel.model_validate({"name": "slow", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110}, "nodes": nodes}]})
    doc = load_profiles(f"""
defaultProfile: preempting
profiles:
  preempting: {{requiredLevel: {CLIQUE}, {RETRY}, preemptDomain: on}}
classes:
  training: {{perfFloor: 0.9}}
""")
    jobs = [job(0, 20000, 16), job(500, 20000, 12), job(1000, 300, 16, priority=100)]
    (pol,) = make_policies(["atoll-preempting"], doc, seed=1)
    res = simulate(slow, prepare_workload(slow, jobs), pol, settings=SimSettings(quota_factor=2.0))
    assert res.preempted == 1 and res.preempted_gpu_hours == pytest.approx(16 * 1000 / 3600)  # the 16-GPU job left
    assert 1000 < res.start[GANG] <= 1030 and res.start[LATE] == 500 and res.end[LATE] == pytest.approx(20500)


@pytest.mark.parametrize("policy", ["count-only", "atoll-strict"])
def test_kueues_queue_takes_the_higher_priority_first_and_only_then_the_older(policy: str) -> None:
    """A 32-GPU job holds the cluster until t=1000. Queued behind it: a 16-GPU job (t=1) and a
    32-GPU job (t=2). By age the 16-GPU job goes first and the 32-GPU one waits for it; when the
    32-GPU job has the higher priority it goes first and the 16-GPU one waits."""
    def run(priority: int) -> SimResult:
        jobs = [job(0, 1000, 32), job(1, 500, 16), job(2, 500, 32, priority=priority)]
        (pol,) = make_policies([policy], DOC, seed=1)
        return simulate(cluster(), prepare_workload(cluster(), jobs), pol)

    fifo, ranked = run(0), run(10)
    assert fifo.start[1] == 1000 and fifo.start[2] >= 1500
    assert ranked.start[2] == 1000 and ranked.start[1] >= 1500


def test_in_a_cohort_the_plan_takes_victims_of_another_cluster_queue_only_as_its_reclaim_within_cohort_allows() -> None:
    # as gang_run, but the two 12-GPU jobs queue in cq-1 (a quarter of the quota, so borrowing) and
    # the gang in cq-0: Atoll's plan reads each Workload's ClusterQueue and the cohort's rules from
    # the ClusterQueue objects, as the controller does
    from admission.simulator._cohort import CohortShape, QueueShare

    def go(reclaim: str, share: float = 0.25) -> SimResult:
        jobs = [make_job(f"j{next(_ids)}", 0, 20000, 12, 4, queue="cq-1"), make_job(f"j{next(_ids)}", 500, 20000, 12, 4, queue="cq-1"),
                make_job(f"j{next(_ids)}", 1000, 300, 16, 4, queue="cq-0", priority=100)]
        (pol,) = make_policies(["atoll-preempting"], DOC, seed=1)
        cohort = CohortShape((QueueShare("cq-0", 1.0 - share), QueueShare("cq-1", share)), reclaim_within_cohort=reclaim)
        return simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=SimSettings(quota_factor=2.0, cohort=cohort))

    kept = go("Never")  # another ClusterQueue's Workloads are no victims: the gang waits for an island to free
    assert kept.preempted == 0 and kept.start[GANG] >= 20000
    took = go("LowerPriority")
    assert took.preempted == 1 and 1000 < took.start[GANG] <= 1030 and took.start[LATE] >= took.end[GANG]


@pytest.mark.parametrize("reclaim", ["LowerPriority", "Any"])
def test_in_a_cohort_the_plan_reclaims_only_from_a_cluster_queue_that_borrows(reclaim: str) -> None:
    """As Kueue's ``cqIsBorrowing``: cq-1's two 12-GPU jobs use 24 GPUs of quota. With a nominal
    quota of 32 (half of 64) cq-1 borrows nothing and none of its Workloads is a victim: the gang
    waits for an island to free; with 16 (a quarter) it borrows 8 and one of them is evicted."""
    from admission.simulator._cohort import CohortShape, QueueShare

    def go(share: float) -> SimResult:
        jobs = [make_job(f"j{next(_ids)}", 0, 20000, 12, 4, queue="cq-1"), make_job(f"j{next(_ids)}", 500, 20000, 12, 4, queue="cq-1"),
                make_job(f"j{next(_ids)}", 1000, 300, 16, 4, queue="cq-0", priority=100)]
        (pol,) = make_policies(["atoll-preempting"], DOC, seed=1)
        cohort = CohortShape((QueueShare("cq-0", 1.0 - share), QueueShare("cq-1", share)), reclaim_within_cohort=reclaim)
        return simulate(cluster(), prepare_workload(cluster(), jobs), pol, settings=SimSettings(quota_factor=2.0, cohort=cohort))

    within = go(0.5)
    assert (within.preemption_plans, within.preempted) == (0, 0) and within.start[GANG] >= 20000
    borrowing = go(0.25)
    assert borrowing.preempted == 1 and 1000 < borrowing.start[GANG] <= 1030 and borrowing.start[LATE] >= borrowing.end[GANG]

"""Same-job means, intervals over seeds, ties, and the concentration of a win."""

from __future__ import annotations

import math

import numpy as np
import pytest

from admission.simulator._compare import compare, policy_verdict, summary_lines, verdict
from admission.simulator._sim import STATUS_DONE, STATUS_REJECTED
from admission.simulator._stats import Estimate, RunRecord, common_mask, concentration, estimate, paired, per_seed_figures


def record(policy: str, jct: list[float], *, seed: int = 0, rejected: tuple[int, ...] = (), gpus: int = 8) -> RunRecord:
    n = len(jct)
    arrival = np.arange(n, dtype=np.float64) * 100.0
    status = np.full(n, STATUS_DONE, dtype=np.int64)
    start = arrival.copy()
    end = arrival + np.asarray(jct, dtype=np.float64)
    for i in rejected:
        status[i] = STATUS_REJECTED
        start[i] = end[i] = math.nan
    return RunRecord(policy, seed, None, status, arrival, start, end, np.full(n, gpus, dtype=np.int64), np.asarray(jct, dtype=np.float64),
                     {"gpu_allocation": 0.8, "mean_wait_s": 0.0})


def test_rejecting_the_long_jobs_does_not_lower_the_common_set_mean() -> None:
    jct = [100.0, 200.0, 300.0, 10_000.0, 20_000.0]
    base = record("kueue-bestfit", jct)
    dropper = record("atoll-strict", jct, rejected=(3, 4))  # the same on every job it ran; it drops the two long ones
    done_only = float(np.nanmean(dropper.end - dropper.arrival))
    assert done_only < float(np.mean(base.end - base.arrival))  # the old, completed-only mean: a fake win
    common = common_mask([base, dropper])
    assert common.tolist() == [True, True, True, False, False]
    fb, fd = per_seed_figures(base, common), per_seed_figures(dropper, common)
    assert fd["mean_jct_s"] == fb["mean_jct_s"] == 200.0
    assert fd["jobs_rejected"] == 2 and fd["gpu_hours_rejected"] == pytest.approx(8 * 30_000 / 3600)
    cmp = compare({(None, s, p): record(p, jct, seed=s, rejected=(3, 4) if p == "atoll-strict" else ())
                   for s in range(3) for p in ("kueue-bestfit", "atoll-strict")},
                  load=None, seeds=range(3), policies=["kueue-bestfit", "atoll-strict"])
    assert verdict(cmp.diffs["atoll-strict"]["mean_jct_s"]) == "tie"
    (line,) = summary_lines(cmp)
    assert "no verdict" in line and "rejected 2 jobs" in line


def test_a_policy_that_ran_less_work_gets_no_verdict_even_when_the_rest_queued_less() -> None:
    jct = [100.0, 200.0, 300.0, 10_000.0, 20_000.0]
    faster = [50.0, 100.0, 150.0, 10_000.0, 20_000.0]  # the jobs it ran waited less: the dropped ones left the cluster
    runs = {(None, s, p): record(p, jct if p == "kueue-bestfit" else faster, seed=s, rejected=(3, 4) if p == "atoll-strict" else ())
            for s in range(3) for p in ("kueue-bestfit", "atoll-strict")}
    cmp = compare(runs, load=None, seeds=range(3), policies=["kueue-bestfit", "atoll-strict"])
    assert verdict(cmp.diffs["atoll-strict"]["mean_jct_s"]) == "no verdict (seeds identical: no interval)"  # every seed is the same run
    assert policy_verdict(cmp, "atoll-strict") == "dropped work"  # what the table and the summary say
    (line,) = summary_lines(cmp)
    assert "(a win)" not in line and "no verdict" in line


def test_a_difference_inside_its_interval_is_a_tie_and_outside_is_not() -> None:
    noisy = paired([101.0, 95.0, 104.0, 99.0], [100.0, 100.0, 100.0, 100.0])  # −0.25 ± ~6
    assert noisy.holds_zero() and verdict(noisy) == "tie"
    steady = paired([90.0, 91.0, 89.0, 90.5], [100.0, 100.0, 100.0, 100.0])
    assert not steady.holds_zero() and verdict(steady) == "win"
    assert verdict(paired([110.0, 111.0, 109.0], [100.0, 100.0, 100.0])) == "loss"
    assert verdict(Estimate(-3.0, math.nan, 1)) == "no verdict (1 seed: no interval)" and verdict(Estimate(0.0, math.nan, 1)) == "tie"


def test_seeds_that_all_gave_the_same_difference_get_no_verdict() -> None:
    same = paired([99.8, 99.8, 99.8], [100.0, 100.0, 100.0])  # -0.2 % on every seed: the interval reads ± 0.0
    assert same.half == 0.0 and verdict(same) == "no verdict (seeds identical: no interval)"
    assert verdict(paired([99.8, 99.7, 99.8], [100.0, 100.0, 100.0])) == "win"  # a real, if tiny, spread


def test_interval_is_students_t_over_seeds() -> None:
    e = estimate([1.0, 2.0, 3.0])
    assert e.mean == 2.0 and e.n == 3
    assert e.half == pytest.approx(4.303 * 1.0 / math.sqrt(3))
    assert math.isnan(estimate([5.0]).half) and estimate([]).n == 0


def test_one_job_driving_the_whole_win_is_named() -> None:
    base_jct = [1000.0] * 199 + [200_000.0]
    pol_jct = [1000.0] * 199 + [20_000.0]
    base, pol = record("kueue-bestfit", base_jct), record("atoll-elastic", pol_jct)
    c = concentration(pol, base, common_mask([base, pol]))
    assert (c.better, c.worse, c.equal, c.driven_by) == (1, 0, 199, 1)
    assert c.top1_share == pytest.approx(1.0) and c.net_s == pytest.approx(180_000.0)
    noisy = [j + (-5.0 if i % 2 else 5.0) for i, j in enumerate(pol_jct)]  # the others move a little either way
    seeded = [[j + 10.0 * s if i == 199 else j for i, j in enumerate(noisy)] for s in range(3)]  # seeds differ a little
    cmp = compare({(None, s, p): record(p, base_jct if p == "kueue-bestfit" else seeded[s], seed=s)
                   for s in range(3) for p in ("kueue-bestfit", "atoll-elastic")},
                  load=None, seeds=range(3), policies=["kueue-bestfit", "atoll-elastic"])
    (line,) = summary_lines(cmp)
    assert "lower (a win)" in line and "driven by 1 job " in line


def test_a_loss_is_measured_from_the_losing_jobs() -> None:
    base, pol = record("b", [100.0, 100.0, 100.0, 100.0]), record("p", [100.0, 400.0, 100.0, 100.0])
    c = concentration(pol, base, common_mask([base, pol]))
    assert c.net_s == -300.0 and c.worse == 1 and c.top1_share == pytest.approx(1.0) and c.driven_by == 1


def test_the_top_shares_are_of_the_gains_and_never_pass_100_percent_when_others_give_back() -> None:
    """A small run whose gains and losses nearly cancel: the top job's gain is 13 times the net,
    yet it carries a share of the gains, at most 100 %, and the top 10 % carry at least as much."""
    gains = [600.0, 200.0, 100.0, 100.0]
    losses = [-250.0, -250.0, -250.0, -150.0]  # the others give back 900 of the 1,000 s gained
    d = gains + losses + [0.0] * 12
    base = record("b", [1000.0] * len(d))
    pol = record("p", [1000.0 - x for x in d])
    c = concentration(pol, base, common_mask([base, pol]))
    assert c.net_s == pytest.approx(100.0) and (c.better, c.worse, c.equal) == (4, 4, 12)
    assert c.top1_share == pytest.approx(0.6)  # 600 of the 1,000 s gained (6x the net, as it read before)
    assert c.top10_share == pytest.approx(0.8) and c.top1_share <= c.top10_share <= 1.0  # the top 2 of 20 jobs
    flipped = concentration(base, pol, common_mask([base, pol]))  # the same run from the other side: a loss
    assert flipped.net_s == pytest.approx(-100.0) and flipped.top1_share == pytest.approx(0.6)

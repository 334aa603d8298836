"""Metrics: time-weighted means over the arrival window, the single-island share of gangs that
fit one island, slowdown and JCT percentiles, and the table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from admission.simulator._metrics import JSON_KEYS, format_table, summarize, time_weighted_mean
from admission.simulator._sim import STATUS_DONE, STATUS_REJECTED, STATUS_UNFINISHED, SimResult


def result(**over: object) -> SimResult:
    """Four jobs on a 16-GPU cluster: three done, one rejected; hand-computed numbers below."""
    base: dict = dict(
        policy="p",
        arrival=np.array([0.0, 10.0, 20.0, 30.0]),
        start=np.array([0.0, 30.0, 20.0, np.nan]),
        end=np.array([100.0, 230.0, 60.0, np.nan]),
        gpus=np.array([8, 8, 4, 64]),
        status=np.array([STATUS_DONE, STATUS_DONE, STATUS_DONE, STATUS_REJECTED]),
        slowdown=np.array([1.0, 2.0, 1.0, np.nan]),
        islands=np.array([1, 2, 1, 0]),
        gang_fits_island=np.array([True, True, False, False]),
        relaxed=np.zeros(4, dtype=bool),
        attempts=np.zeros(4, dtype=np.int64),
        total_gpus=16,
        times=np.array([0.0, 20.0, 30.0]),
        allocated=np.array([8.0, 12.0, 16.0]),
        useful=np.array([8.0, 12.0, 12.0]),
        pending=np.array([0.0, 1.0, 0.0]),
        frag_times=np.array([0.0, 10.0, 20.0]),
        frag_values=np.array([0.0, 0.5, 1.0]),
        decisions=10,
        decision_seconds=0.5,
        wall_seconds=1.0,
        window=(0.0, 30.0),
    )
    base.update(over)
    return SimResult(**base)


def test_time_weighted_mean_integrates_the_step_function_inside_the_window() -> None:
    t = np.array([0.0, 10.0, 30.0])
    v = np.array([2.0, 4.0, 0.0])
    assert time_weighted_mean(t, v, 0.0, 40.0) == pytest.approx((2 * 10 + 4 * 20 + 0 * 10) / 40)
    assert time_weighted_mean(t, v, 5.0, 15.0) == pytest.approx((2 * 5 + 4 * 5) / 10)
    assert time_weighted_mean(t, v, 12.0, 12.0) == 4.0
    assert time_weighted_mean(np.array([]), np.array([]), 0.0, 1.0) == 0.0


def test_summary_numbers_match_a_hand_computation() -> None:
    s = summarize(result())
    assert s["mean_jct_s"] == pytest.approx((100 + 220 + 40) / 3)
    assert s["mean_wait_s"] == pytest.approx((0 + 20 + 0) / 3)
    assert s["gpu_allocation"] == pytest.approx((8 * 20 + 12 * 10) / 30 / 16)
    assert s["gpu_goodput"] == pytest.approx((8 * 20 + 12 * 10) / 30 / 16)
    assert s["single_island_share"] == pytest.approx(0.5)  # of the two gangs that fit an island, one spans
    assert s["mean_slowdown"] == pytest.approx(4 / 3)
    assert s["fragmentation_mean"] == pytest.approx((0 * 10 + 0.5 * 10 + 1.0 * 10) / 30)
    assert s["decisions_per_s"] == pytest.approx(20.0)
    assert (s["jobs_done"], s["jobs_rejected"], s["jobs_unfinished"]) == (3, 1, 0)
    assert s["makespan_s"] == pytest.approx(230.0)
    assert s["decisions_per_job"] == pytest.approx(10 / 4)
    assert set(JSON_KEYS) == set(s)


def test_wait_is_reported_by_size_band_with_the_jobs_that_never_started() -> None:
    bands = summarize(result(gpus=np.array([8, 12, 4, 64]), start=np.array([5.0, 30.0, 20.0, np.nan])))["wait_by_size_band"]
    assert list(bands) == ["1-7", "8-15", "16-63", "64+"]
    assert bands["1-7"] == {"jobs": 1, "p95_wait_s": 0.0, "max_wait_s": 0.0, "never_started": 0}
    assert bands["8-15"]["jobs"] == 2 and bands["8-15"]["max_wait_s"] == 20.0
    assert bands["8-15"]["p95_wait_s"] == pytest.approx(np.percentile([5.0, 20.0], 95))
    assert bands["16-63"] == {"jobs": 0, "p95_wait_s": None, "max_wait_s": None, "never_started": 0}
    assert bands["64+"] == {"jobs": 1, "p95_wait_s": None, "max_wait_s": None, "never_started": 1}


def test_no_gang_that_fits_an_island_gives_no_share_rather_than_a_fake_100() -> None:
    s = summarize(result(gang_fits_island=np.zeros(4, dtype=bool)))
    assert s["single_island_share"] is None


def test_percentiles_cover_only_completed_jobs() -> None:
    status = np.array([STATUS_DONE, STATUS_UNFINISHED, STATUS_DONE, STATUS_REJECTED])
    s = summarize(result(status=status, start=np.array([0.0, np.nan, 20.0, np.nan])))
    assert s["p95_jct_s"] == pytest.approx(np.percentile([100.0, 40.0], 95))
    assert s["jobs_unfinished"] == 1
    assert s["p95_slowdown"] == pytest.approx(1.0)


def test_table_has_a_row_per_policy_and_a_readable_time_unit() -> None:
    rows = {"count-only": summarize(result()), "atoll-strict": summarize(result(policy="atoll-strict"))}
    text = format_table(rows, title="demo")
    lines = text.splitlines()
    assert lines[0] == "demo"
    assert "mean JCT s" in lines[1] and "1-island %" in lines[1]
    assert lines[3].startswith("count-only") and lines[4].startswith("atoll-strict")
    assert "50.0" in lines[3]  # the single-island share in percent
    hours = {"x": dict(summarize(result()), mean_jct_s=5 * 3600.0)}
    assert "mean JCT h" in format_table(hours)
    none = {"x": dict(summarize(result()), single_island_share=None)}
    assert "–" in format_table(none)
    assert not any(math.isnan(v) for v in summarize(result()).values() if isinstance(v, float))

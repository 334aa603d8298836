"""``atoll bench decide`` on a small fleet: the controller's reconcile decides the pending
Workloads as deployed, the row says how, and a missed goal exits 1."""

from __future__ import annotations

import json

import pytest

from admission.cli._bench_decide import main


def test_bench_decides_and_reports_the_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "144", "--pending", "40", "--decisions", "25", "--format", "json", "--goal-p99-ms", "1e9"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["nodes"] == 144 and row["gpus"] == 576 and row["pending"] == 40
    assert row["decisions"] == 25 and row["admit"] + row["wait"] + row["reject"] == 25 and row["admit"] > 0
    assert row["events"] >= row["admit"]  # a change of state posts an Event
    assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert row["peak_rss_mb"] >= row["rss_synced_mb"] > 0
    assert row["goal"] == {"p99_ms": 1e9, "peak_rss_mb": 4096.0, "met": True}


def test_a_missed_goal_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "72", "--pending", "5", "--decisions", "5", "--goal-rss-mb", "1"]) == 1
    assert "FAIL decide:" in capsys.readouterr().out


def test_json_output_is_one_json_document_with_no_log_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """The controller's start-up logs go to stderr: ``--format json`` stdout parses whole."""
    assert main(["--nodes", "72", "--pending", "5", "--decisions", "5", "--format", "json", "--goal-p99-ms", "1e9"]) == 0
    assert json.loads(capsys.readouterr().out)["decisions"] == 5


def test_with_workloads_waiting_for_quota_the_owed_gangs_are_read_before_each_decision(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "144", "--pending", "20", "--decisions", "10", "--waiting", "60", "--hold-behind-gangs", "quota",
                 "--format", "json", "--goal-p99-ms", "1e9"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["waiting"] == 60 and row["hold_behind_gangs"] == "quota"
    assert row["owed"] > 0  # gangs among the waiting, created a day before the clock: owed
    assert 0 < row["feed_owed_p50_ms"] <= row["feed_owed_p99_ms"]
    assert main(["--nodes", "144", "--pending", "20", "--decisions", "10", "--waiting", "60", "--format", "json",
                 "--goal-p99-ms", "1e9"]) == 0
    off = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert off["owed"] == 0  # no profile holds anything behind gangs: none is looked for


def test_with_parking_a_quota_yield_pass_is_timed_and_the_look_compared_at_two_queue_lengths(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--nodes", "144", "--pending", "30", "--decisions", "12", "--waiting", "80", "--hold-behind-gangs", "quota",
            "--park-waiting", "--scale-from", "20", "--format", "json", "--goal-p99-ms", "1e9"]
    assert main([*args, "--goal-scale", "1e9"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["park_waiting"] and row["parked"] > 0  # waits park: the pass has parked Workloads to weigh
    assert 0 < row["yield_p50_ms"] <= row["yield_p99_ms"] and row["look_p50_ms"] >= row["yield_p50_ms"]
    scale = row["scale"]
    assert scale["from_waiting"] == 20 and scale["from"]["waiting"] == 20 and scale["met"]
    assert scale["look_ratio"]["p50"] == round(row["look_p50_ms"] / scale["from"]["look_p50_ms"], 2)
    assert main([*args[:-4], "--goal-p99-ms", "1e9", "--goal-scale", "0"]) == 1  # no look is free: a goal of 0x is missed
    assert "FAIL scale: the look per decision at 80 waiting" in capsys.readouterr().out


def test_scale_from_must_be_below_waiting_and_time_a_look(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "72", "--waiting", "10", "--scale-from", "10", "--park-waiting"]) == 2
    assert "--scale-from must be below --waiting" in capsys.readouterr().err

"""The goal of ``atoll bench quality --goal``: one profile, both Kueue modes, no dropped work, one
point of allocation (or of goodput), on runs made up here so every clause can fail alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from admission.cli._quality_goal import GOAL_POINTS, GoalRow, format_goal, goal_json, goal_judgeable, goal_met, goal_not_run, goal_rows
from admission.simulator import compare
from admission.simulator._sim import STATUS_DONE, STATUS_REJECTED
from admission.simulator._stats import RunRecord

SEEDS = (0, 1, 2, 3, 4)
JOBS = 50


def _run(policy: str, seed: int, load: float, jct_s: float, alloc: float, goodput: float, rejected: int = 0) -> RunRecord:
    arrival = np.arange(JOBS, dtype=np.float64) * 100.0
    wobble = 20.0 if policy.startswith("atoll-") else 0.0  # seconds per seed off its mean: paired differences with an interval
    jct = np.full(JOBS, jct_s + wobble * (seed - 2))
    status = np.full(JOBS, STATUS_DONE, dtype=np.int64)
    status[:rejected] = STATUS_REJECTED
    end = np.where(status == STATUS_DONE, arrival + jct, np.nan)
    return RunRecord(policy, seed, load, status, arrival, arrival + 1.0, end, np.full(JOBS, 8, dtype=np.int64), np.full(JOBS, 900.0),
                     {"gpu_allocation": alloc + 0.001 * seed, "gpu_goodput": goodput + 0.001 * seed})


def _rows(spec: dict[str, tuple[float, float, float, int]], loads: Sequence[float] = (1.0,), cluster: str = "c") -> list[GoalRow]:
    records: dict[tuple[float | None, int, str], RunRecord] = {(load, seed, p): _run(p, seed, load, *v[:3], rejected=v[3]) for load in loads for seed in SEEDS for p, v in spec.items()}
    names = tuple(spec)
    by = {b: [compare(records, load=load, seeds=SEEDS, policies=names, baseline=b) for load in loads]
          for b in ("kueue-bestfit", "kueue-required")}
    return goal_rows(cluster, by)


BASE = {"kueue-bestfit": (1000.0, 0.80, 0.70, 0), "kueue-required": (950.0, 0.795, 0.72, 0)}


def test_a_profile_faster_than_both_at_the_same_allocation_meets_the_goal() -> None:
    rows = _rows(BASE | {"atoll-a": (900.0, 0.795, 0.73, 0)})
    (row,) = rows
    assert row.policy == "atoll-a" and [v for _, _, v in row.jct] == ["win", "win"]
    assert row.met and row.met_on_goodput and goal_met(rows) == ["atoll-a"]
    assert "met by atoll-a" in format_goal(rows) and goal_json(rows)["met_by"] == ["atoll-a"]


def test_a_tie_with_kueue_required_misses_it() -> None:
    rows = _rows(BASE | {"atoll-a": (950.0, 0.80, 0.72, 0)})
    assert rows[0].jct[0][2] == "win" and rows[0].jct[1][2] != "win"
    assert not rows[0].met and goal_met(rows) == [] and "MISSED" in format_goal(rows)


def test_dropped_work_misses_it_however_fast() -> None:
    rows = _rows(BASE | {"atoll-a": (800.0, 0.80, 0.72, 3)})
    assert rows[0].dropped == 3 and not rows[0].met and not rows[0].met_on_goodput


def test_allocation_more_than_one_point_below_either_mode_misses_the_goal_as_written_but_goodput_may_hold() -> None:
    # 1.6 points below kueue-bestfit's allocation, yet more work done per GPU-hour than both (less stretched jobs)
    rows = _rows(BASE | {"atoll-a": (900.0, 0.784, 0.725, 0)})
    (row,) = rows
    assert row.alloc[0] < -1.0 and row.wins
    assert not row.met and row.met_on_goodput
    assert goal_met(rows) == [] and goal_met(rows, on_goodput=True) == ["atoll-a"]
    assert goal_json(rows)["met_on_goodput_by"] == ["atoll-a"]


def test_one_profile_must_meet_every_load_loads_outside_the_range_are_left_out() -> None:
    spec = BASE | {"atoll-a": (900.0, 0.795, 0.73, 0), "atoll-b": (950.0, 0.80, 0.72, 0)}
    rows = _rows(spec, loads=(0.85, 1.0, 1.3))
    assert sorted({r.load for r in rows}) == [1.0, 1.3]
    assert goal_met(rows) == ["atoll-a"]  # atoll-b ties kueue-required
    # a profile missing one point of the range does not meet it
    assert goal_met([r for r in rows if not (r.policy == "atoll-a" and r.load == 1.3)] +
                    [r for r in rows if r.policy == "atoll-b" and r.load == 1.3]) == []


def test_a_run_of_some_of_the_goals_points_is_judged_on_those_and_names_the_rest() -> None:
    from admission.cli._bench_quality import QUALITY_CLUSTERS

    assert sorted({c for c, _ in GOAL_POINTS}) == sorted(QUALITY_CLUSTERS)
    rows = _rows(BASE | {"atoll-a": (900.0, 0.795, 0.73, 0)}, loads=(1.0, 1.3), cluster="gb200-nvl72-superpod")
    left = goal_not_run(rows)
    assert ("gb200-nvl72-superpod", 1.15) in left and ("dgx-h100-superpod", 1.0) in left and len(left) == len(GOAL_POINTS) - 2
    text = format_goal(rows)
    assert "met by atoll-a on the points run" in text and "not run, so not judged: gb200-nvl72-superpod load 1.15" in text
    assert {"cluster": "dgx-h100-superpod", "load": 1.3} in goal_json(rows)["not_run"]
    every = [r for x in (1.0, 1.15, 1.3) for c in QUALITY_CLUSTERS
             for r in _rows(BASE | {"atoll-a": (900.0, 0.795, 0.73, 0)}, loads=(x,), cluster=c)]
    assert goal_not_run(every) == [] and "not run" not in format_goal(every) and "on the points run" not in format_goal(every)


def test_no_verdict_without_both_kueue_modes() -> None:
    records: dict[tuple[float | None, int, str], RunRecord] = {(1.0, s, p): _run(p, s, 1.0, 900.0, 0.8, 0.7) for s in SEEDS for p in ("kueue-bestfit", "atoll-a")}
    cmps = [compare(records, load=1.0, seeds=SEEDS, policies=("kueue-bestfit", "atoll-a"))]
    assert goal_rows("c", {"kueue-bestfit": cmps}) == []


def test_the_goal_is_judgeable_only_with_both_kueue_modes_a_profile_and_a_load_in_range() -> None:
    both = ["kueue-bestfit", "kueue-required", "atoll-costed"]
    assert goal_judgeable(both, "1.0")
    assert goal_judgeable(both, "0.85,1.3")
    assert not goal_judgeable(both, "0.7,0.85")
    assert not goal_judgeable(["kueue-bestfit", "atoll-costed"], "1.0")
    assert not goal_judgeable(["kueue-bestfit", "kueue-required"], "1.0")


def test_bench_quality_goal_with_nothing_to_judge_is_one_line_before_any_run(capsys: pytest.CaptureFixture[str]) -> None:
    from admission.cli._bench_quality import main

    assert main(["--goal", "--policies", "kueue-bestfit,atoll-strict", "--loads", "1.0", "--skip-scale", "--skip-binding"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("atoll bench quality: --goal: nothing to judge") and "\n" not in err


def test_bench_quality_goal_judges_the_sweep_and_its_exit_code_says_whether_a_profile_met_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from admission.cli import _bench_quality as bq

    rows = ["job_id,submission_time,duration,num_gpu"] + [f"j{i},{600 * i},{7200 + 300 * (i % 7)},{(1, 4, 8, 16)[i % 4]}" for i in range(40)]
    (tmp_path / bq.ITP_FILE).write_text("\n".join(rows) + "\n")
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    code = bq.main(["--goal", "--skip-scale", "--skip-binding", "--skip-sensitivity", "--clusters", "gb200-nvl72-superpod",
                    "--loads", "0.85,1.0", "--seeds", "2", "--workers", "1", "--policies", "kueue-bestfit,kueue-required,atoll-strict",
                    "--format", "json"])
    out = json.loads(capsys.readouterr().out)["quality"]
    assert out["profiles"] == "config/profiles.yaml"
    goal = out["goal"]
    assert [(r["cluster"], r["load"], r["policy"]) for r in goal["rows"]] == [("gb200-nvl72-superpod", 1.0, "atoll-strict")]  # 0.85 is outside
    assert set(goal["rows"][0]["jct_pct"]) == {"kueue-bestfit", "kueue-required"}
    assert code == (0 if goal["met_by"] else 1)

"""``atoll bench failover``'s verdict on a finished run: the exit code judges the warm standby's
worst time from takeover to its first decision against ``--goal-seconds`` (the run's summary is
given here; the run itself starts a control plane and is not repeated per case)."""

from __future__ import annotations

from typing import Any

import pytest

from admission.cli import _bench_failover
from admission.cli._bench_failover import main


def finished(worst_warm: float) -> dict[str, Any]:
    modes = {mode: {"takeover_s": 15.0, "first_decision_s": 15.5, "after_takeover_s": 0.5, "worst_after_takeover_s": worst}
             for mode, worst in (("warm", worst_warm), ("cold", 9.0))}
    return {"runs": [], **modes, "logs": "failover-logs"}


@pytest.mark.parametrize(("worst", "code"), [(2.5, 1), (2.0, 0), (1.2, 0)])
def test_the_exit_code_judges_the_warm_standbys_worst_time_against_the_goal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], worst: float, code: int) -> None:
    monkeypatch.setattr(_bench_failover, "run_failover", lambda **_kw: finished(worst))
    assert main(["--goal-seconds=2", "--format=json"]) == code
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert verdict == f"{'PASS' if code == 0 else 'FAIL'} failover: a warm standby decides {worst} s after taking over (goal ≤ 2 s)"


def test_without_a_goal_the_run_passes_whatever_it_measured(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_bench_failover, "run_failover", lambda **_kw: finished(60.0))
    assert main(["--format=json"]) == 0
    assert "PASS" not in capsys.readouterr().out


def test_the_cold_standby_is_not_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bench_failover, "run_failover", lambda **_kw: finished(1.0))  # cold's worst is 9 s
    assert main(["--goal-seconds=2", "--format=json"]) == 0

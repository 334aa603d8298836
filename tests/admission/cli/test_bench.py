"""``atoll bench collectives``: every published point with its prediction, and a non-zero exit on a miss; and
the README's Commands table against the commands and benchmarks there are."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from admission.cli import main as atoll
from admission.cli._bench import BENCHMARKS, COLLECTIVES_TOLERANCE


def test_collectives_json_prints_each_published_point_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert atoll(["bench", "collectives", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pass"] is True and report["tolerance"] == COLLECTIVES_TOLERANCE == 0.20
    assert len(report["points"]) == 12
    for point in report["points"]:
        assert {"source", "setup", "measured_gbps", "predicted_gbps"} <= point.keys()
        assert abs(point["predicted_gbps"] / point["measured_gbps"] - 1) <= 0.20
    assert set(report["constants"]) == {"eta_nvls", "eta_ring_nvl", "eta_ring_net", "eta_tree_net", "max_channels", "alpha_s",
                                        "tree_tuner_share"}


def test_collectives_fails_when_a_prediction_misses_its_measurement(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace

    from topology import _collectives

    off = replace(_collectives.MEASURED[1], measured_gbps=2000.0)  # a point the model cannot reach
    monkeypatch.setattr(_collectives, "MEASURED", (_collectives.MEASURED[0], off))
    assert atoll(["bench", "collectives"]) == 1
    out = capsys.readouterr().out
    assert "FAIL collectives: 1 of 2 published points within ±20 %" in out


def test_every_published_point_is_within_the_readmes_eleven_percent(capsys: pytest.CaptureFixture[str]) -> None:
    """README, "Cost model": all 12 points within ±11 %."""
    assert atoll(["bench", "collectives", "--format", "json"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    assert len(points) == 12 and max(abs(p["predicted_gbps"] / p["measured_gbps"] - 1) for p in points) <= 0.11


def test_the_readme_commands_table_has_a_row_for_every_command_and_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert atoll(["--help"]) == 0
    commands = re.findall(r"^  ([a-z]+) ", capsys.readouterr().out, flags=re.M)
    assert atoll(["bench", "--help"]) == 0
    benches = re.findall(r"^  ([a-z]+) ", capsys.readouterr().out, flags=re.M)
    assert "quality" in benches and "simulate" in commands
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Commands", 1)[1].split("\n\n", 2)[1]
    rows = {tuple(m.group(1).split()[:2]) for m in re.finditer(r"^\| `atoll ([a-z -]+)", table, flags=re.M)}
    missing = [f"atoll bench {b}" for b in benches if ("bench", b) not in rows]
    missing += [f"atoll {c}" for c in commands if c != "bench" and not any(r[0] == c for r in rows)]
    assert not missing, f"README's Commands table lacks {missing}"


def test_bench_help_says_what_each_benchmark_measures_and_a_typo_gets_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    assert atoll(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"^  ([a-z]+) +\S", out, flags=re.M) == list(BENCHMARKS)
    assert "atoll bench <benchmark> --help shows a benchmark's options." in out
    for name in BENCHMARKS:  # each one listed is one that runs: its own --help answers
        with pytest.raises(SystemExit) as done:
            atoll(["bench", name, "--help"])
        assert done.value.code == 0 and f"usage: atoll bench {name}" in capsys.readouterr().out
    assert atoll(["bench", "fnder"]) == 2
    assert capsys.readouterr().err == "atoll bench: unknown benchmark 'fnder'; did you mean finder? (atoll bench --help lists them)\n"
    assert atoll(["bench"]) == 2 and capsys.readouterr().err.startswith("usage: atoll bench <benchmark> [options]\n")

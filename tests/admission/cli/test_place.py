"""``atoll place`` and ``atoll bench finder`` through the real command entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admission.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "config" / "workloads"


def test_place_admits_a_gang_in_one_island(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--workload", str(EXAMPLES / "training-job.yaml"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "admit" and out["profile"] == "strict"  # queue team-a/research → strict
    ps = out["podsets"][0]
    assert ps["islands"] == 1 and ps["domain_level"] == "nvidia.com/gpu.clique" and sum(ps["nodes"].values()) == 16


def test_place_table_and_profile_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--workload", str(EXAMPLES / "training-job.yaml"), "--cluster", "dgx-h100-superpod", "--profile", "elastic"]) == 0
    out = capsys.readouterr().out
    assert "ADMIT" in out and "profile elastic" in out and "network.example.com/su" in out


def test_place_strict_waits_on_a_busy_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--workload", str(EXAMPLES / "training-job.yaml"), "--occupancy", "0.5", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "wait" and out["retry_after_seconds"] == 30 and out["why_not"][0]["need_pods"] == 16


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--cluster", "no-such-cluster"], "cannot read"),
        (["--profile", "gold"], "profile 'gold' does not exist"),
        (["--flavor", "tpu"], "no flavor 'tpu'"),
    ],
)
def test_place_bad_input_exits_2_with_a_named_error(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--workload", str(EXAMPLES / "training-job.yaml"), *args]) == 2
    assert needle in capsys.readouterr().err


def test_place_bad_workload_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("kind: Job\nmetadata: {name: j}\nspec:\n  parallelism: 2\n  template:\n    spec:\n      containers: []\n")
    assert main(["place", "--workload", str(bad)]) == 2
    assert "spec.podSets[0].template.spec.containers: at least one container" in capsys.readouterr().err


def test_bench_finder_reports_identical_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "finder", "--nodes", "200", "--requests", "60", "--reference-sample", "30", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["identical"] is True and row["nodes"] == 200 and row["requests"] == 60
    assert {"p50_ms", "p99_ms", "reference_p99_ms", "speedup_vs_reference"} <= set(row)


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fly"]) == 2
    assert "unknown command" in capsys.readouterr().err

"""``atoll bench controller`` end to end on a small fabric: its own apiserver, every Workload decided."""

from __future__ import annotations

import json
from typing import Any

import pytest

from admission.cli._bench_controller import main


@pytest.mark.apiserver
def test_bench_decides_every_workload_and_reports_rates(apiserver: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # ``apiserver`` only gates on the binaries and CRDs being there: the bench starts its own
    assert main(["--workloads", "12", "--islands", "2", "--nodes-per-island", "2", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["decided"] == row["workloads"] == 12 and row["admitted"] + row["waited"] + row["rejected"] == 12
    assert row["decisions_per_s"] > 0 and row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert row["nodes"] == 4 and row["gpus"] == 16
    noop = row["noop"]
    assert noop["controller"] == "no-op" and noop["decided"] == noop["admitted"] == 12  # the baseline admits everything
    assert row["ratio_vs_noop"] == pytest.approx(row["admissions_per_s"] / noop["admissions_per_s"], abs=1e-3)
    assert row["peak_rss_mb"] > 0


@pytest.mark.apiserver
def test_bench_table_prints_both_controllers_and_the_ratio(apiserver: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workloads", "4", "--islands", "1", "--nodes-per-island", "2", "--mode", "backlog"]) == 0
    out = capsys.readouterr().out.splitlines()
    table = out[out.index(next(line for line in out if line.startswith("controller | mode"))):]
    assert table[1].startswith("no-op | backlog | 4 | 4") and table[2].startswith("atoll | backlog | 4 | 4")
    assert table[3].startswith("atoll / no-op admissions/s: ")

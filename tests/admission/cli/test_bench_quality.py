"""``atoll bench quality``: where the traces come from, the verdicts it prints, the scale model."""

from __future__ import annotations

from pathlib import Path

import pytest

from admission.cli import _bench_quality as bq


def test_traces_dir_is_beside_the_repository_unless_overridden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ATOLL_TRACES_DIR", raising=False)
    repo = Path(bq.__file__).resolve().parents[2]
    assert bq.traces_dir() == repo.parent / "shared" / "traces"
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    assert bq.traces_dir() == tmp_path


def test_scale_cluster_is_a_gb200_fabric_of_the_asked_size() -> None:
    model = bq.scale_cluster(spines=1, sus=2, racks=3)
    nodes = model.flavors[0].build_nodes()
    assert len(nodes) == 1 * 2 * 3 * 18
    assert sum(n.allocatable.gpu for n in nodes) == 432
    assert bq.scale_cluster().name == "gb200-scale-1408-racks"  # 1,408 racks × 72 = 101,376 GPUs


def test_missing_trace_is_exit_2_naming_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    assert bq.main(["--skip-scale"]) == 2
    err = capsys.readouterr().err
    assert bq.ITP_FILE in err and "ATOLL_TRACES_DIR" in err


def test_quality_run_prints_the_sweep_verdicts_and_sensitivity_per_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rows = "".join(f"j{i},{300 * i},{3000 + 101 * i},{[1, 8, 16, 32][i % 4]}\n" for i in range(60))
    (tmp_path / bq.ITP_FILE).write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    monkeypatch.setattr(bq, "SENSITIVITY_F", (0.02, 0.2))
    assert bq.main(["--skip-scale", "--policies", "kueue-bestfit,atoll-strict,atoll-elastic", "--loads", "0.8,1.2", "--seeds", "2",
                    "--workers", "1"]) == 0
    out = capsys.readouterr().out
    for name in bq.QUALITY_CLUSTERS:
        assert f"{name}: ITP cluster04 days 0-14, 60 jobs" in out
        assert f"{name} load 0.8: atoll-strict" in out and f"{name} load 1.2: atoll-strict" in out
        assert f"{name}: atoll-elastic mean JCT ÷ kueue-bestfit's" in out
    assert "top 1/10 % share" in out and "better/worse/equal" in out


def test_scale_run_reports_time_and_peak_memory_from_its_own_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert bq.main(["--skip-quality", "--scale-jobs", "300", "--format", "json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)["scale"]
    assert data["jobs"] == 300 and data["gpus"] == 101_376
    assert data["per_policy_s"].keys() == {"atoll-elastic"}
    assert data["peak_rss_mib"] >= data["rss_after_imports_mib"] > 0
    assert data["policies"]["atoll-elastic"]["jobs_done"] == 300

"""``atoll bench quality``: where the traces come from, the verdicts it prints, the scale model."""

from __future__ import annotations

from pathlib import Path

import pytest

from admission.cli import _bench_quality as bq


def summary(jct: float, slow: float, alloc: float, done: int = 100, rejected: int = 0, share: float | None = 1.0) -> dict:
    return {"mean_jct_s": jct, "mean_slowdown": slow, "gpu_allocation": alloc, "jobs_done": done, "jobs_rejected": rejected,
            "jobs_unfinished": 0, "single_island_share": share}


def test_traces_dir_is_beside_the_repository_unless_overridden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ATOLL_TRACES_DIR", raising=False)
    repo = Path(bq.__file__).resolve().parents[2]
    assert bq.traces_dir() == repo.parent / "shared" / "traces"
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    assert bq.traces_dir() == tmp_path


def test_verdicts_pick_the_better_profile_among_those_that_finish_every_job() -> None:
    lines = bq._verdicts("c", {
        "kueue-bestfit": summary(1000.0, 1.05, 0.800),
        "atoll-strict": summary(500.0, 1.0, 0.50, done=80, rejected=20),  # faster only because it dropped jobs
        "atoll-elastic": summary(990.0, 1.01, 0.795),
    })
    assert any(line.startswith("NOTE c: atoll-strict is not compared") for line in lines)
    assert "PASS c: atoll-elastic mean JCT 990 s vs kueue-bestfit 1000 s" in lines
    assert any(line.startswith("PASS c: atoll-elastic mean slowdown") for line in lines)
    assert any(line.startswith("PASS c: atoll-elastic GPU allocation 79.50%") for line in lines)
    assert "PASS c: atoll-strict puts 100.0% of one-island gangs in one island" in lines


def test_verdicts_say_fail_with_the_numbers_when_atoll_loses() -> None:
    lines = bq._verdicts("c", {
        "kueue-bestfit": summary(1000.0, 1.0, 0.80),
        "atoll-strict": summary(1100.0, 1.0, 0.70, share=0.9),
    })
    assert "FAIL c: atoll-strict mean JCT 1100 s vs kueue-bestfit 1000 s" in lines
    assert any(line.startswith("FAIL c: atoll-strict mean slowdown 1.0000") for line in lines)
    assert any(line.startswith("FAIL c: atoll-strict GPU allocation 70.00%") for line in lines)
    assert "FAIL c: atoll-strict puts 90.0% of one-island gangs in one island" in lines


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


def test_quality_run_prints_a_table_and_verdicts_per_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    rows = "".join(f"j{i},{300 * i},{3000 + 101 * i},{[1, 8, 16, 32][i % 4]}\n" for i in range(60))
    (tmp_path / bq.ITP_FILE).write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    assert bq.main(["--skip-scale", "--policies", "kueue-bestfit,atoll-strict,atoll-elastic"]) == 0
    out = capsys.readouterr().out
    for name in bq.QUALITY_CLUSTERS:
        assert f"{name}: ITP cluster04 days 0-14, 60 jobs" in out
    assert "atoll-strict puts" in out or "atoll-strict single-island share" in out
    assert out.count("kueue-bestfit") >= 4


def test_scale_run_reports_time_and_peak_memory_from_its_own_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert bq.main(["--skip-quality", "--scale-jobs", "300", "--format", "json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)["scale"]
    assert data["jobs"] == 300 and data["gpus"] == 101_376
    assert data["per_policy_s"].keys() == {"atoll-elastic"}
    assert data["peak_rss_mib"] >= data["rss_after_imports_mib"] > 0
    assert data["policies"]["atoll-elastic"]["jobs_done"] == 300

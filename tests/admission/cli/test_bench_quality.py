"""``atoll bench quality``: where the traces come from, the verdicts it prints, the scale model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from admission.cli import _bench_quality as bq

SWEEP_ARGV = ["--skip-scale", "--skip-binding", "--skip-sensitivity", "--policies", "kueue-bestfit,atoll-strict", "--loads", "1.2",
              "--seeds", "1", "--workers", "1", "--clusters", "dgx-h100-superpod"]
"""A quality sweep of one small run per policy on a 40-job trace (``spied_sweeps``)."""


def spied_sweeps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jobs: int = 40) -> list[Any]:
    """Every ``SweepSpec`` ``atoll bench quality`` runs from now on, on a small ITP trace of ``jobs``
    rows put where the command looks for it; the sweeps still run."""
    import admission.simulator as sim

    rows = "".join(f"j{i},{300 * i},{3000 + 101 * i},{[1, 8, 16, 32][i % 4]}\n" for i in range(jobs))
    (tmp_path / bq.ITP_FILE).write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    specs: list[Any] = []
    real = sim.run_sweep

    def spy(spec: Any, **kw: Any) -> Any:
        specs.append(spec)
        return real(spec, **kw)

    monkeypatch.setattr(sim, "run_sweep", spy)
    return specs


def test_the_trace_ships_in_the_package_unless_overridden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ATOLL_TRACES_DIR", raising=False)
    package = Path(bq.__file__).resolve().parents[1] / "simulator" / "traces"
    assert bq.traces_dir() == package
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    assert bq.traces_dir() == tmp_path


def test_the_bundled_trace_is_the_public_window_with_its_source_and_licence() -> None:
    from admission.cli._bundled import TRACES_DIR, resolve_trace
    from admission.simulator import read_itp

    trace = TRACES_DIR / bq.ITP_FILE
    jobs = read_itp(str(trace))
    assert len(jobs) == 4567 and sum(j.gpus > 8 for j in jobs) == 120
    readme = (TRACES_DIR / "README.md").read_text()
    assert "microsoft/elasticflow-traces" in readme and "277ed24d0e908c31a1c98145819e2e3853d8ac00" in readme and "MIT" in readme
    assert (TRACES_DIR / "LICENSE-elasticflow-traces").read_text().startswith("MIT License")
    assert resolve_trace("itp-cluster04") == str(trace) == resolve_trace(bq.ITP_FILE)
    assert resolve_trace("no/such.csv") == "no/such.csv" and resolve_trace(None) is None


def test_the_package_data_includes_the_trace() -> None:
    import tomllib

    data = tomllib.loads((Path(bq.__file__).resolve().parents[2] / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"]["package-data"]["admission.simulator"]
    assert {"traces/*.csv", "traces/*.md", "traces/LICENSE-*"} <= set(globs)


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
    assert bq.main(["--skip-scale", "--skip-binding", "--policies", "kueue-bestfit,atoll-strict,atoll-elastic", "--loads", "0.8,1.2",
                    "--seeds", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    for name in bq.QUALITY_CLUSTERS:
        assert f"{name}: ITP cluster04 days 0-14, 60 jobs" in out
        assert f"{name} load 0.8: atoll-strict" in out and f"{name} load 1.2: atoll-strict" in out
        assert f"{name}: atoll-elastic mean JCT ÷ kueue-bestfit's" in out
        assert f"{name}: whole-island availability and the gang slowdown tail" in out
    assert "top 1/10 % share" in out and "better/worse/equal" in out
    assert "link model calibrated" in out and "stranded GPU-h" in out and "p95 gang slowdown" in out


def test_the_pessimistic_link_model_and_one_cluster_on_request(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rows = "".join(f"j{i},{300 * i},{3000 + 101 * i},{[1, 8, 16, 32][i % 4]}\n" for i in range(40))
    (tmp_path / bq.ITP_FILE).write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    assert bq.main(["--skip-scale", "--skip-binding", "--skip-sensitivity", "--policies", "kueue-bestfit,atoll-elastic", "--loads", "1.2",
                    "--seeds", "1", "--workers", "1", "--link-model", "flat-ring", "--clusters", "dgx-h100-superpod"]) == 0
    out = capsys.readouterr().out
    assert "dgx-h100-superpod: ITP cluster04" in out and "gb200-nvl72-superpod: ITP" not in out
    assert "link model flat-ring" in out
    assert bq.main(["--skip-scale", "--clusters", "tpu-pod"]) == 2
    assert "--clusters: choose from" in capsys.readouterr().err


def test_parking_on_runs_the_quality_sweep_with_atolls_waits_parked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    specs = spied_sweeps(monkeypatch, tmp_path)
    argv = SWEEP_ARGV
    assert bq.main([*argv, "--parking", "on"]) == 0
    assert [s.parking for s in specs] == [True] and "Atoll waits parked" in capsys.readouterr().out
    assert bq.main(argv) == 0  # by default each profile parks as its queueing.parkWaiting says
    assert [s.parking for s in specs] == [True, None] and "parked where the profile says" in capsys.readouterr().out
    assert bq.main([*argv, "--parking", "off"]) == 0
    assert [s.parking for s in specs] == [True, None, False] and "Atoll waits on Retries" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        bq.main([*argv, "--parking", "sometimes"])
    assert bad.value.code == 2 and "--parking" in capsys.readouterr().err


def test_the_yield_back_when_fits_flag_reaches_the_quality_sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    specs = spied_sweeps(monkeypatch, tmp_path, jobs=20)
    argv = ["--skip-scale", "--skip-binding", "--skip-sensitivity", "--policies", "atoll-strict", "--loads", "1.2",
            "--seeds", "1", "--workers", "1", "--clusters", "dgx-h100-superpod", "--format", "json"]
    assert bq.main([*argv, "--yield-back-when-fits"]) == 0
    assert bq.main(argv) == 0
    assert [s.yield_back_when_fits for s in specs] == [True, False]


def test_binding_table_runs_atoll_under_each_binding_on_the_same_jobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rows = "".join(f"j{i},{200 * i},{4000 + 97 * i},{[4, 8, 16, 32][i % 4]}\n" for i in range(60))
    (tmp_path / bq.ITP_FILE).write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    assert bq.main(["--skip-scale", "--skip-quality", "--bindings", "exact,adversarial", "--binding-loads", "1.2", "--seeds", "1",
                    "--workers", "1", "--format", "json"]) == 0
    import json

    report = json.loads(capsys.readouterr().out)["quality"]
    for name in bq.QUALITY_CLUSTERS:
        (cmp,) = report[name]["binding"]["comparisons"]
        assert cmp["load"] == 1.2 and cmp["baseline"] == "kueue-bestfit"
        assert set(cmp["policies"]) == {"kueue-bestfit", "atoll-strict exact", "atoll-strict adversarial",
                                        "atoll-elastic exact", "atoll-elastic adversarial"}
        assert len(report[name]["binding"]["kept"]) == 2  # one line per profile at the one load
        assert "jobs" not in report[name]  # --skip-quality: no load sweep


def test_unknown_binding_is_refused_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert bq.main(["--skip-scale", "--bindings", "exact,fastest"]) == 2
    err = capsys.readouterr().err
    assert "fastest" in err and "least-allocated" in err


@pytest.mark.parametrize(("argv", "line"), [
    (["--policies", "kueue-bestfit,atoll-costed-floor-q"], "--policies: unknown policy 'atoll-costed-floor-q'; choose from count-only, "
     "random, kueue-bestfit, kueue-required, atoll-costed, atoll-costed-floor, atoll-elastic, atoll-strict"),
    (["--profiles", "no-such-profiles.yaml"], "--profiles: no-such-profiles.yaml: cannot read: No such file or directory"),
    (["--records", "no-such-folder/records.jsonl"],
     "--records: the folder of no-such-folder/records.jsonl does not exist; make it or give a file in a folder that does"),
])
def test_an_unknown_policy_or_unreadable_profiles_is_one_line_before_any_run(argv: list[str], line: str,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Not a traceback after the runs of the policies before it: checked before the sweep starts."""
    assert bq.main(["--skip-scale", "--skip-binding", "--skip-sensitivity", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == [f"atoll bench quality: {line}"]


def test_kept_share_is_each_model_s_advantage_over_exact_s() -> None:
    from types import SimpleNamespace

    from admission.simulator._stats import Estimate

    diffs = {"atoll-strict exact": {"mean_jct_s": Estimate(-20.0, 1.0, 3)}, "atoll-strict random": {"mean_jct_s": Estimate(-15.0, 1.0, 3)},
             "atoll-elastic exact": {"mean_jct_s": Estimate(-4.0, 9.0, 3)}, "atoll-elastic random": {"mean_jct_s": Estimate(-1.0, 1.0, 3)}}
    lines = bq.kept_lines([SimpleNamespace(load=1.3, diffs=diffs)], ["exact", "random"])
    assert lines[0] == "load 1.3 atoll-strict: exact -20.0 % JCT vs kueue-bestfit; kept under domain: random 75 %"
    assert lines[1].startswith("load 1.3 atoll-elastic: exact enforcement has no JCT advantage to keep")  # -4 ± 9 %: a tie


def test_scale_run_reports_time_and_peak_memory_from_its_own_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert bq.main(["--skip-quality", "--skip-binding", "--scale-jobs", "300", "--format", "json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)["scale"]
    assert data["jobs"] == 300 and data["gpus"] == 101_376
    assert data["per_policy_s"].keys() == {"atoll-elastic"}
    assert data["peak_rss_mib"] >= data["rss_after_imports_mib"] > 0
    assert data["policies"]["atoll-elastic"]["jobs_done"] == 300


def test_reservations_run_the_profile_three_ways_and_judge_the_cut_of_the_largest_band(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rows = "".join(f"j{i},{200 * i},{4000 + 97 * i},{[4, 8, 16, 32][i % 4]}\n" for i in range(60))
    (tmp_path / bq.ITP_FILE).write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    code = bq.main(["--skip-scale", "--skip-quality", "--reservations", "costed", "--loads", "0.8,1.2", "--seeds", "2", "--workers", "1",
                    "--clusters", "gb200-nvl72-superpod", "--format", "json"])
    import json

    report = json.loads(capsys.readouterr().out)["quality"]
    cells = report["gb200-nvl72-superpod"]["reservations"]["cells"]
    assert [c["load"] for c in cells] == [0.8, 1.2]
    for c in cells:
        assert c["band"] == "16-63" and c["band_jobs"] == 30 and c["shipped"] == "island"
        assert set(c["variants"]) == {"costed-island", "costed-span", "costed-nores"}
        assert c["variants"]["costed-nores"]["reserved_idle_gpu_hours"]["mean"] == 0.0  # it reserves nothing
    goal = report["reservation_goal"]
    assert [c["load"] for c in goal["cells"]] == [1.2]  # the goal covers loads 1.0-1.3 only
    assert code == (0 if goal["met_as_shipped"] else 1)
    assert "jobs" not in report["gb200-nvl72-superpod"]  # --skip-quality: no load sweep


def test_reservations_of_a_profile_that_reserves_nothing_is_exit_2_naming_the_field(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / bq.ITP_FILE).write_text("job_id,submission_time,duration,num_gpu\nj0,0,100,8\n")
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    assert bq.main(["--skip-scale", "--skip-quality", "--reservations", "strict", "--seeds", "1"]) == 2
    assert "profiles.strict.queueing.reserveAfterSeconds is unset" in capsys.readouterr().err


def test_reservations_parked_write_each_atoll_runs_decision_records_per_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import json

    rows = "".join(f"j{i},{200 * i},{4000 + 97 * i},{[4, 8, 16, 32][i % 4]}\n" for i in range(40))
    (tmp_path / bq.ITP_FILE).write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    out = tmp_path / "records.jsonl"
    bq.main(["--skip-scale", "--skip-quality", "--reservations", "costed", "--loads", "1.2", "--seeds", "1", "--workers", "1",
             "--clusters", "gb200-nvl72-superpod", "--parking", "on", "--records", str(out), "--format", "json"])
    report = json.loads(capsys.readouterr().out)["quality"]
    assert report["parking"] == "on"
    runs = {json.loads(line)["run"] for line in out.read_text().splitlines()}
    assert runs == {f"atoll-costed-{v} seed 0 load 1.2" for v in ("island", "span", "nores")}  # every variant's decisions, one file
    assert not list(tmp_path.glob("records.jsonl.part-*"))  # the runs' parts are joined and gone
    assert bq.records_file(str(out), "dgx-h100-superpod", ["gb200-nvl72-superpod", "dgx-h100-superpod"]) == f"{out}.dgx-h100-superpod"
    assert bq.records_file(None, "gb200-nvl72-superpod", ["gb200-nvl72-superpod"]) is None


def test_a_cohort_runs_the_quality_sweep_over_its_cluster_queues_and_a_bad_one_is_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    specs = spied_sweeps(monkeypatch, tmp_path)
    argv = [*SWEEP_ARGV, "--format", "json"]
    assert bq.main([*argv, "--cohort", "3"]) == 0
    report = json.loads(capsys.readouterr().out)["quality"]
    assert len(specs[0].cohort) == 3 and report["cohort"].startswith("cohort of 3 ClusterQueues")
    per_seed = report["dgx-h100-superpod"]["comparisons"][0]["policies"]["atoll-strict"]["per_seed"][0]
    assert per_seed["decisions_per_job"] > 0
    assert bq.main([*argv, "--cohort", "two"]) == 2
    assert "--cohort: 'two' is neither a number of ClusterQueues" in capsys.readouterr().err


def test_the_quota_factor_reaches_the_sweep_and_its_header(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import json

    specs = spied_sweeps(monkeypatch, tmp_path)
    argv = SWEEP_ARGV
    assert bq.main([*argv, "--quota-factor", "1.25"]) == 0
    assert [s.quota_factor for s in specs] == [1.25] and "ClusterQueue quota 1.25 x GPUs" in capsys.readouterr().out
    assert bq.main([*argv, "--format", "json"]) == 0
    assert [s.quota_factor for s in specs] == [1.25, 1.0] and json.loads(capsys.readouterr().out)["quality"]["quota_factor"] == 1.0


def test_a_sweep_against_kueue_required_alone_reports_its_comparison_and_judges_no_goal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import json

    spied_sweeps(monkeypatch, tmp_path)
    argv = [a if a != "kueue-bestfit,atoll-strict" else "atoll-strict,kueue-required" for a in SWEEP_ARGV]
    assert bq.main([*argv, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)["quality"]
    assert any("kueue-required" in line for line in report["dgx-h100-superpod"]["verdicts"])
    assert not report.get("goal")


def test_the_first_seed_reaches_the_sweep_so_one_seed_of_a_larger_run_can_be_run_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import json

    specs = spied_sweeps(monkeypatch, tmp_path)
    assert bq.main([*SWEEP_ARGV, "--seed", "2", "--format", "json"]) == 0
    assert specs[0].seeds == (2,) and json.loads(capsys.readouterr().out)["quality"]["dgx-h100-superpod"]["seeds"] == [2]
    with pytest.raises(SystemExit) as bad:
        bq.main([*SWEEP_ARGV, "--seed", "-1"])
    assert bad.value.code == 2 and "--seed: -1 is below 0; seeds start at 0" in capsys.readouterr().err

"""``atoll simulate``: JSON shape, the table, plots on disk, clear errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from admission.cli import main as atoll
from admission.cli._simulate import DEFAULT_SIM_POLICIES, main

CLUSTER = """
name: tiny
flavors:
  - name: gb200
    topology: nvl72-fabric
    levels:
      - {label: network.example.com/spine, bandwidthGBps: 25}
      - {label: network.example.com/su, bandwidthGBps: 50}
      - {label: nvidia.com/gpu.clique, bandwidthGBps: 1800}
      - {label: kubernetes.io/hostname, bandwidthGBps: 1800}
    nodeAllocatable: {nvidia.com/gpu: 4, cpu: "144", memory: 1800Gi, pods: 110}
    generate:
      - {level: network.example.com/spine, count: 1}
      - {level: network.example.com/su, count: 2}
      - {level: nvidia.com/gpu.clique, count: 2}
      - {level: kubernetes.io/hostname, count: 4}
"""

ITP = "job_id,submission_time,duration,num_gpu\n" + "".join(
    f"j{i},{100 * i},{600 + 37 * i},{[1, 4, 8, 16][i % 4]}\n" for i in range(40)
)


@pytest.fixture
def cluster(tmp_path: Path) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(CLUSTER)
    return str(path)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["--format", "json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_every_policy_and_the_documented_keys(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    data = run_json(capsys, "--cluster", cluster, "--jobs", "120", "--seed", "3")
    assert data["jobs"] == 120
    assert list(data["policies"]) == list(DEFAULT_SIM_POLICIES)
    for numbers in data["policies"].values():
        for key in ("mean_jct_s", "p95_jct_s", "mean_wait_s", "gpu_allocation", "single_island_share", "mean_slowdown",
                    "p95_slowdown", "fragmentation_mean"):
            assert key in numbers
        assert numbers["jobs_done"] + numbers["jobs_rejected"] + numbers["jobs_unfinished"] == 120
        assert 0.0 <= numbers["gpu_allocation"] <= 1.0
    assert data["policies"]["atoll-strict"]["single_island_share"] in (None, 1.0)


def test_same_seed_same_numbers_other_seed_other_workload(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    args = ("--cluster", cluster, "--jobs", "80", "--policies", "random,atoll-elastic")
    a = run_json(capsys, *args, "--seed", "1")
    b = run_json(capsys, *args, "--seed", "1")
    c = run_json(capsys, *args, "--seed", "2")

    def strip(d: dict) -> dict:  # wall-clock numbers differ between runs; everything else must not
        return {p: {k: v for k, v in n.items() if k not in ("wall_s", "decisions_per_s")} for p, n in d["policies"].items()}

    assert strip(a) == strip(b)
    assert strip(a) != strip(c)


def test_itp_trace_with_load_scaling_and_a_table(capsys: pytest.CaptureFixture[str], cluster: str, tmp_path: Path) -> None:
    trace = tmp_path / "itp.csv"
    trace.write_text(ITP)
    assert main(["--cluster", cluster, "--trace", str(trace), "--trace-format", "itp", "--load", "0.9",
                 "--policies", "count-only,kueue-bestfit,atoll-strict"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tiny: 40 jobs (itp) on 64 GPUs, 3 seeds, 9 runs")
    assert "mean JCT" in out[1]
    assert [line.split()[0] for line in out[3:6]] == ["count-only", "kueue-bestfit", "atoll-strict"]
    assert any(line.startswith("atoll-strict: mean JCT") and "vs kueue-bestfit" in line for line in out)


def test_bad_trace_row_is_a_clear_error_with_exit_code_2(capsys: pytest.CaptureFixture[str], cluster: str, tmp_path: Path) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\nj1,0,60,2\nj2,10,60,two\n")
    assert main(["--cluster", cluster, "--trace", str(trace), "--trace-format", "itp"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("atoll simulate: ")
    assert f"{trace}:3: column num_gpu: 'two' is not an integer" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "count-only,best"], "unknown policy 'best'"),
        (["--trace-format", "openb", "--trace", "pods.csv"], "needs --nodes"),
        (["--trace-format", "itp"], "needs --trace FILE"),
        (["--load", "0"], "--load must be > 0"),
        (["--declared-runtime", "0.5"], "--declared-runtime must be at least 1"),
        (["--cluster", "/nonexistent/cluster.yaml"], "cannot read"),
        (["--gpu-perf", "gauss:0.1"], "--gpu-perf: 'gauss:0.1' is not identical, normal:STDDEV"),
        (["--gpu-perf", "normal:wide"], "the parameters must be numbers"),
        (["--gpu-perf", "normal:-0.1"], "--gpu-perf 'normal:-0.1': stddev: expected a number ≥ 0, got -0.1"),
        (["--gpu-perf", "uniform:1.1:0.9"], "uniform needs 0 < LOW ≤ HIGH"),
        (["--gpu-perf", "normal:inf"], "stddev: expected a finite number, got inf"),
        (["--cohort", "0"], "--cohort: 0 ClusterQueues; give at least 1"),
        (["--cohort", "/nonexistent/teams.yaml"], "--cohort: '/nonexistent/teams.yaml' is neither a number of ClusterQueues"),
    ],
)
def test_bad_arguments_exit_2_naming_the_fix(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_gpu_perf_draws_per_node_speed_and_the_cost_model_charges_the_slowest(
        capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    args = ("--cluster", cluster, "--jobs", "60", "--policies", "count-only,atoll-strict")
    same = run_json(capsys, *args)
    slow = run_json(capsys, *args, "--gpu-perf", "normal:0.8:0")  # every GPU at 0.8
    spread = run_json(capsys, *args, "--gpu-perf", "uniform:0.7:1.0")
    strict = [run["policies"]["atoll-strict"]["mean_slowdown"] for run in (same, slow, spread)]
    # one island each, so only compute stretches: (1 − f)/p + f with f ≤ 0.1 for gangs, 1/p for single GPUs
    assert strict[0] == pytest.approx(1.0)
    assert 0.9 / 0.8 + 0.1 - 1e-6 <= strict[1] <= 1 / 0.8 + 1e-6
    assert 1.0 < strict[2] < 1 / 0.7
    assert slow["policies"]["count-only"]["mean_slowdown"] > same["policies"]["count-only"]["mean_slowdown"]


def test_gpu_perf_keeps_explicit_nodes_and_seeds_the_draw(cluster: str) -> None:
    from admission.cli._simulate import with_gpu_perf
    from topology import load_cluster_model

    model = load_cluster_model(cluster)
    perf = lambda m: [n.perf for n in m.flavors[0].build_nodes()]  # noqa: E731
    drawn = with_gpu_perf(model, "normal:0.05", seed=4)
    assert perf(model) == [1.0] * 16 and len(set(perf(drawn))) > 10
    assert perf(drawn) == perf(with_gpu_perf(model, "normal:0.05", seed=4)) != perf(with_gpu_perf(model, "normal:0.05", seed=5))
    assert perf(with_gpu_perf(drawn, "identical")) == [1.0] * 16
    explicit = model.model_copy(update={"flavors": [model.flavors[0].model_copy(update={
        "generate": [], "nodes": [type(model.flavors[0]).model_validate({"name": "x", "topology": "t", "levels": [{"label": "r"}],
                                                                          "nodes": [{"name": "n", "perf": 0.7, "labels": {"r": "a"}}]}).nodes[0]]})]})
    assert perf(with_gpu_perf(explicit, "normal:0.05")) == [0.7]


def test_plots_are_written_and_not_empty(capsys: pytest.CaptureFixture[str], cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "plots"
    assert main(["--cluster", cluster, "--jobs", "60", "--policies", "count-only,atoll-elastic", "--plots", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["allocation.png", "islands.png", "jct_cdf.png", "queue.png"]
    for p in out.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    assert "plots:" in capsys.readouterr().err


def test_every_plot_says_which_run_it_shows_and_islands_wrap_into_rows(cluster: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen: dict[str, tuple[list[str], tuple[int, int]]] = {}
    real_savefig = matplotlib.figure.Figure.savefig

    def savefig(fig: object, path: object, *args: object, **kw: object) -> None:
        titles = [ax.get_title() for ax in fig.axes] + ([fig._suptitle.get_text()] if fig._suptitle else [])  # type: ignore[attr-defined]
        rows = {round(ax.get_position().y0, 3) for ax in fig.axes if ax.get_images()}  # type: ignore[attr-defined]
        seen[Path(str(path)).name] = (titles, (len(rows), len([a for a in fig.axes if a.get_images()])))  # type: ignore[attr-defined]
        real_savefig(fig, path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    out = tmp_path / "plots"
    assert main(["--cluster", cluster, "--jobs", "60", "--seed", "4", "--load", "0.8,1.1", "--seeds", "2", "--workers", "1", "--policies",
                 "count-only,random,kueue-bestfit,atoll-strict", "--plots", str(out)]) == 0
    for name in ("jct_cdf.png", "allocation.png", "queue.png", "islands.png"):
        assert any("seed 4, load 0.8" in t.replace("\n", " ") for t in seen[name][0]), (name, seen[name][0])
    rows, panels = seen["islands.png"][1]
    assert panels == 4 and rows == 2  # four heat maps: two rows of up to three, not one strip
    plt.close("all")


def test_no_progress_bar_when_stderr_is_not_a_terminal(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    assert main(["--cluster", cluster, "--jobs", "30", "--policies", "count-only"]) == 0
    assert capsys.readouterr().err == ""


def test_the_atoll_command_dispatches_simulate(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    assert atoll(["simulate", "--cluster", cluster, "--jobs", "20", "--policies", "atoll-strict", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == 20


def test_json_reports_the_invariant_checks_and_violations_of_every_run(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    assert main(["--cluster", cluster, "--jobs", "20", "--policies", "atoll-strict,kueue-bestfit", "--seeds", "2",
                 "--workers", "1", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    runs = {(r["seed"], r["policy"]): r for r in out["runs"]}
    assert set(runs) == {(s, p) for s in out["seeds"] for p in ("atoll-strict", "kueue-bestfit")}
    for seed in out["seeds"]:
        atoll_run, kueue_run = runs[(seed, "atoll-strict")], runs[(seed, "kueue-bestfit")]
        assert atoll_run["invariant_checks"] > 0 and atoll_run["invariant_violations"] == 0
        assert 0 <= atoll_run["invariant_full_checks"] <= atoll_run["invariant_checks"]
        assert kueue_run["invariant_checks"] == 0  # no Atoll ledger, no Atoll promise to check
        assert set(atoll_run["wait_by_size_band"]) == {"1-7", "8-15", "16-63", "64+"}  # each seed's own queue
        assert atoll_run["reserved_idle_gpu_hours"] == 0 and atoll_run["decisions_per_job"] >= 1
    assert out["policies"]["atoll-strict"]["invariant_checks"] == runs[(out["seeds"][0], "atoll-strict")]["invariant_checks"]
    assert out["policies"]["atoll-strict"]["wait_by_size_band"] == runs[(out["seeds"][0], "atoll-strict")]["wait_by_size_band"]


def test_progress_bar_draws_on_a_terminal_stream() -> None:
    import io

    from admission.cli._simulate import _Progress

    stream = io.StringIO()
    report = _Progress(stream, enabled=True).start("atoll-strict")
    assert report is not None
    report(500, 1000)
    report(1000, 1000)
    text = stream.getvalue()
    assert "\ratoll-strict" in text and "1,000/1,000 jobs" in text and text.endswith("\n")
    assert _Progress(stream, enabled=False).start("x") is None


def test_a_profile_level_the_cluster_lacks_fails_before_any_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "flat.yaml"
    path.write_text(CLUSTER.replace("network.example.com/su", "network.example.com/pod"))
    assert main(["--cluster", str(path), "--jobs", "10", "--policies", "count-only,atoll-elastic"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("profiles.elastic.maxSpanLevel: flavor gb200 has no level of ['network.example.com/su', 'network.example.com/leaf']"
            in captured.err and "pick --policies without atoll-elastic or a --profiles document for this cluster" in captured.err)


def test_the_mixed_cluster_runs_with_the_profiles_its_model_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--cluster", "config/clusters/mixed-a100-h100.yaml", "--jobs", "40", "--seeds", "1", "--policies",
                 "kueue-bestfit,atoll-strict,atoll-elastic", "--workers", "1", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profiles"] == "config/kueue/mixed-a100-h100/profiles.yaml" and set(out["policies"]) == {"kueue-bestfit", "atoll-strict",
                                                                                                          "atoll-elastic"}


def test_a_list_of_span_levels_resolves_per_flavor_with_the_sample_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    # the sample's elastic caps spans at [su, leaf]: the mixed cluster's flavors have leaf, which is enough
    assert main(["--cluster", "mixed-a100-h100", "--profiles", "config/profiles.yaml", "--jobs", "40", "--seeds", "1", "--policies",
                 "atoll-elastic", "--workers", "1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["profiles"] == "config/profiles.yaml"


def test_a_load_list_is_one_sweep_table_with_plots_against_load(capsys: pytest.CaptureFixture[str], cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "plots"
    assert main(["--cluster", cluster, "--jobs", "60", "--load", "0.8,1.2", "--seeds", "2", "--policies", "kueue-bestfit,atoll-elastic",
                 "--plots", str(out), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "load 0.8: atoll-elastic" in text and "load 1.2: atoll-elastic" in text
    assert {"jct_vs_load.png", "wait_vs_load.png"} <= {p.name for p in out.iterdir()}


def test_json_carries_common_set_and_all_jobs_figures_per_load(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    data = run_json(capsys, "--cluster", cluster, "--jobs", "60", "--seeds", "2", "--policies", "kueue-bestfit,atoll-strict", "--workers", "1")
    (cmp,) = data["comparisons"]
    strict = cmp["policies"]["atoll-strict"]
    assert {"common_set", "all_jobs", "dropped", "per_seed", "vs_baseline", "concentration"} <= strict.keys()
    assert strict["common_set"]["mean_jct_s"]["n"] == 2 and len(strict["per_seed"]) == 2
    assert strict["vs_baseline"]["mean_jct_s"]["verdict"] in ("win", "tie", "loss")
    assert cmp["summary"][0].startswith("atoll-strict: mean JCT")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cost-comm-fraction", "1.5"], "--cost-comm-fraction: '1.5' must be in [0, 1]"),
        (["--cost-comm-fraction", "64:0.1,8:0.05"], "the GPU counts must ascend"),
        (["--cost-overlap", "serving=0.5"], "--cost-overlap: unknown workload class 'serving'"),
        (["--cost-bandwidth", "rack"], "--cost-bandwidth: 'rack' is not LEVEL=GBps"),
        (["--seeds", "0"], "--seeds must be ≥ 1"),
        (["--load", "0.8,x"], "--load: 'x' is not a number"),
        (["--baseline", "kueue-bestfit", "--policies", "atoll-strict"], "--baseline: 'kueue-bestfit' is not among --policies"),
        (["--scheduler", "fastest"], "--scheduler: 'fastest' is not one of least-allocated"),
        (["--enforcement", "pinned"], "--enforcement: 'pinned' is not one of domain, exact"),
    ],
)
def test_bad_sweep_and_cost_flags_exit_2_naming_the_flag(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_bandwidth_level_names_the_levels(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    assert main(["--cluster", cluster, "--jobs", "10", "--cost-bandwidth", "rack=400"]) == 2
    err = capsys.readouterr().err
    assert "--cost-bandwidth: no level 'rack'" in err and "network.example.com/su" in err


def test_atoll_is_also_judged_against_kueues_required_topology(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    assert main(["--cluster", cluster, "--jobs", "60", "--seeds", "2", "--workers", "1",
                 "--policies", "kueue-bestfit,kueue-required,atoll-elastic"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("atoll-elastic: mean JCT") and "vs kueue-bestfit" in line for line in lines)
    assert any(line.startswith("atoll-elastic: mean JCT") and "vs kueue-required" in line for line in lines)


def test_sliced_jobs_are_counted_and_every_policy_completes_them(capsys: pytest.CaptureFixture[str], cluster: str,
                                                                 tmp_path: Path) -> None:
    # 32-GPU jobs are 8 pods on 4-GPU nodes: no island of 4 nodes holds them, 2 slices of 4 pods do
    trace = tmp_path / "itp.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\n" + "".join(f"j{i},{300 * i},{900 + 11 * i},{[4, 32][i % 2]}\n"
                                                                               for i in range(24)))
    data = run_json(capsys, "--cluster", cluster, "--trace", str(trace), "--policies", "kueue-bestfit,atoll-strict",
                    "--slice-level", "nvidia.com/gpu.clique", "--slice-size", "4", "--seeds", "1", "--workers", "1")
    assert data["slices"] == {"level": "nvidia.com/gpu.clique", "size": 4, "sliced_jobs": 12, "counted_on_seed": 0}
    assert all(p["jobs_done"] == 24 for p in data["policies"].values())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--slice-level", "nvidia.com/gpu.clique"], "--slice-level and --slice-size go together"),
        (["--slice-level", "nvidia.com/gpu.clique", "--slice-size", "0"], "--slice-size: must be ≥ 1 pod, got 0"),
        (["--slice-level", "example.com/rack", "--slice-size", "4"], "--slice-level: no flavor of tiny has level 'example.com/rack'"),
    ],
)
def test_bad_slice_flags_exit_2_naming_the_flag(capsys: pytest.CaptureFixture[str], cluster: str, argv: list[str], message: str) -> None:
    assert main(["--cluster", cluster, "--jobs", "10", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.splitlines()) == 1, err  # the error alone: no "too few jobs" warning before it


def test_a_profiles_document_given_as_a_stream_says_which_flag_takes_it(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """config/streams holds one profiles document beside the streams; given to --trace, the error names the
    file as the user wrote it (a bundled copy, outside a clone) and the flag it belongs to."""
    monkeypatch.chdir(tmp_path)
    assert main(["--trace", "config/streams/preempting-profiles.yaml", "--trace-format", "synthetic", "--jobs", "10"]) == 2
    assert capsys.readouterr().err.startswith("atoll simulate: config/streams/preempting-profiles.yaml: a profiles document "
                                              "(it has profiles:), not synthetic parameters; give it with --profiles")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--nodes", "nodes.csv"], "--nodes: only an openb trace has a node list (--trace-format openb); leave it out for synthetic"),
        (["--plots", "a-file"], "--plots: a-file is a file; give a folder for the PNG plots (made if missing)"),
        (["--records", "no-such-folder/records.jsonl"],
         "--records: the folder of no-such-folder/records.jsonl does not exist; make it or give a file in a folder that does"),
        (["--profiles", "no-such-profiles.yaml"], "--profiles: no-such-profiles.yaml: cannot read: No such file or directory"),
        (["--cluster", "no-such-cluster.yaml"], "--cluster: no-such-cluster.yaml: cannot read: No such file or directory"),
        (["--trace", "no-such-trace.csv"], "--trace: no-such-trace.csv: cannot read: No such file or directory"),
    ],
)
def test_a_bad_path_or_an_ignored_flag_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch, argv: list[str], line: str) -> None:
    """Before, --nodes without an openb trace was silently ignored, and a --plots file or a --records
    folder that does not exist ended the run in a traceback after the simulation."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    assert main(["--jobs", "10", "--seeds", "1", "--workers", "1", *argv]) == 2
    assert capsys.readouterr().err == f"atoll simulate: {line}\n"


def test_too_few_jobs_for_the_load_are_named_with_the_jobs_that_would_do() -> None:
    from admission.cli._simulate import too_few_jobs
    from admission.simulator._jobs import make_job

    def jobs(n: int, gap_s: float) -> list:
        return [make_job(f"j{i}", i * gap_s, 3600.0, 8, 8) for i in range(n)]

    warning = too_few_jobs(jobs(10, 100.0), [1.3])  # arrivals over 900 s, each job runs an hour
    assert warning is not None and warning.startswith("10 jobs at load 1.3 arrive over 0.2 h, less than twice the mean job's runtime (1.0 h)")
    assert "about --jobs 80 would give it room" in warning
    assert too_few_jobs(jobs(10, 1000.0), [1.3]) is None  # 9,000 s of arrivals: enough
    assert too_few_jobs(jobs(10, 1000.0), [0.5, 2.0]) is not None  # the sweep's highest load packs them 4x closer
    assert too_few_jobs(jobs(10, 100.0), [None]) is None  # a trace as recorded: no load was asked


def test_a_run_with_too_few_jobs_warns_on_stderr(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    assert main(["--cluster", cluster, "--jobs", "3", "--seeds", "1", "--policies", "count-only", "--workers", "1"]) == 0
    assert "atoll simulate: warning: 3 jobs at load 1.3 arrive over" in capsys.readouterr().err


def test_parking_decides_waiting_workloads_less_often_and_the_bands_are_reported(
        capsys: pytest.CaptureFixture[str], cluster: str, tmp_path: Path) -> None:
    trace = tmp_path / "itp.csv"
    trace.write_text(ITP)
    args = ("--cluster", cluster, "--trace", str(trace), "--trace-format", "itp", "--load", "1.3", "--seeds", "1",
            "--policies", "atoll-strict,atoll-elastic")
    parked = run_json(capsys, *args)["policies"]  # both sample profiles set queueing.parkWaiting
    on = run_json(capsys, *args, "--parking", "on")["policies"]
    retried = run_json(capsys, *args, "--parking", "off")["policies"]
    assert all(on[n][k] == parked[n][k] for n in parked for k in ("decisions_per_job", "wait_by_size_band"))
    for name in ("atoll-strict", "atoll-elastic"):
        assert 1.0 <= parked[name]["decisions_per_job"] < retried[name]["decisions_per_job"]
        assert list(parked[name]["wait_by_size_band"]) == ["1-7", "8-15", "16-63", "64+"]
        assert parked[name]["wait_by_size_band"]["16-63"]["jobs"] == 10  # every fourth job has 16 GPUs
    assert main(list(args)) == 0
    out = capsys.readouterr().out
    assert "wait by size band, all jobs of seed 0, load 1.3" in out and "16-63 GPUs p95/max wait h" in out


def spied_settings(monkeypatch: pytest.MonkeyPatch, field: str) -> list[Any]:
    """The ``field`` of the settings each simulated run is given, in order (the runs still run)."""
    import admission.simulator._sweep as sweep

    seen: list[Any] = []
    real = sweep.simulate

    def spy(*a: Any, **kw: Any) -> Any:
        seen.append(getattr(kw["settings"], field))
        return real(*a, **kw)

    monkeypatch.setattr(sweep, "simulate", spy)
    return seen


def test_the_quota_yield_bound_reaches_the_runs_which_report_their_yields(capsys: pytest.CaptureFixture[str], cluster: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from admission.controller import DecisionSettings

    seen: list[float] = spied_settings(monkeypatch, "quota_yield_max_seconds")
    args = ("--cluster", cluster, "--jobs", "40", "--seeds", "1", "--policies", "atoll-strict", "--parking", "on", "--workers", "1")
    run = run_json(capsys, *args, "--quota-yield-max-seconds", "60")["runs"][0]
    assert seen == [60.0]
    assert {"quota_yields", "reparked", "quota_yields_timed_out", "longest_quota_yield_hours"} <= set(run)
    run_json(capsys, *args)
    assert seen == [60.0, DecisionSettings().quota_yield_max_seconds]  # the controller's default
    assert main([*args, "--quota-yield-max-seconds", "0"]) == 2
    assert "--quota-yield-max-seconds must be above 0" in capsys.readouterr().err


def test_the_yield_back_when_fits_flag_reaches_the_runs(capsys: pytest.CaptureFixture[str], cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = spied_settings(monkeypatch, "yield_back_when_fits")
    args = ("--cluster", cluster, "--jobs", "40", "--seeds", "1", "--policies", "atoll-strict", "--parking", "on", "--workers", "1")
    run_json(capsys, *args, "--yield-back-when-fits")
    run_json(capsys, *args)
    assert seen == [True, False]  # off by default, as the controller's decisions.quota_yield_back_when_fits


def test_link_model_flag_picks_the_pessimistic_ring_and_refuses_unknown_models(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    args = ("--cluster", cluster, "--jobs", "60", "--policies", "count-only", "--seeds", "1")
    calibrated = run_json(capsys, *args)
    flat = run_json(capsys, *args, "--link-model", "flat-ring")
    assert calibrated["cost"].startswith("link model calibrated;") and flat["cost"].startswith("link model flat-ring;")
    # count-only scatters gangs over islands: one rail per GPU costs more than aggregated rails
    assert flat["policies"]["count-only"]["mean_slowdown"] > calibrated["policies"]["count-only"]["mean_slowdown"]
    assert main([*args, "--link-model", "mesh"]) == 2
    assert "--link-model: 'mesh' is not one of calibrated, flat-ring" in capsys.readouterr().err


def test_the_bundled_trace_runs_by_name_from_anywhere(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no ../shared, no repository around
    report = run_json(capsys, "--cluster", "dgx-h100-superpod", "--trace", "itp-cluster04", "--jobs", "40", "--policies",
                      "kueue-bestfit", "--seeds", "1", "--load", "1.0")
    assert report["jobs"] == 40 and report["trace_format"] == "itp"
    assert report["gpu_perf"] == "tail:0.015:0.01:1.5"  # a bundled cluster gets the measured speed spread by default
    assert "island_block_72" in report["comparisons"][0]["policies"]["kueue-bestfit"]["all_jobs"]


def test_the_docs_stream_path_runs_from_anywhere(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    # docs/queue.md writes the 14-day stream as config/streams/...: outside the repository it is the bundled copy
    monkeypatch.chdir(tmp_path)
    report = run_json(capsys, "--trace", "config/streams/small-jobs-with-gangs.yaml", "--trace-format", "synthetic",
                      "--jobs", "30", "--policies", "kueue-bestfit", "--seeds", "1")
    assert report["jobs"] == 30 and report["trace_format"] == "synthetic"


def test_records_are_the_controllers_own_one_file_for_every_atoll_run(capsys: pytest.CaptureFixture[str], cluster: str,
                                                                      tmp_path: Path) -> None:
    """``--records``: every decision of every Atoll run, each naming its run, each meeting the
    schema; the parts the runs wrote are joined and gone; other policies write none."""
    from admission.controller import record_problems

    path = tmp_path / "sim.jsonl"
    data = run_json(capsys, "--cluster", cluster, "--jobs", "80", "--load", "2", "--seeds", "2", "--workers", "1",
                    "--policies", "atoll-strict,kueue-bestfit", "--records", str(path))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim.jsonl", "tiny.yaml"]
    assert [problem for r in records for problem in record_problems(r)] == []
    runs = {r["run"] for r in records}
    assert runs == {"atoll-strict seed 0 load 2", "atoll-strict seed 1 load 2"}
    first = [r for r in records if r["run"] == "atoll-strict seed 0 load 2"]  # the run the JSON's numbers are of
    numbers = data["policies"]["atoll-strict"]
    assert len(first) == round(numbers["decisions_per_job"] * 80)  # one record per decision
    assert len({r["workload"] for r in first}) == 80 - numbers["jobs_rejected"]  # a job no flavor can ever hold is refused at arrival
    waits = [r for r in records if r["outcome"] == "wait"]
    assert waits and all(r["reason"] and r["why_not"] is not None for r in waits)
    assert any(h["workload"].startswith("sim/job-") for r in waits for w in r["why_not"] for h in (w["ledger"] or {}).get("workloads", []))


def test_records_need_an_atoll_policy(capsys: pytest.CaptureFixture[str], cluster: str, tmp_path: Path) -> None:
    assert main(["--cluster", cluster, "--jobs", "20", "--policies", "kueue-bestfit", "--records", str(tmp_path / "r.jsonl")]) == 2
    assert "--records: only Atoll's policies write decision records" in capsys.readouterr().err


def test_the_dgx_h100_profiles_document_runs_costed_floor(capsys: pytest.CaptureFixture[str]) -> None:
    """``atoll simulate`` runs the profiles document the cluster model names; DGX H100's has ``costed-floor``."""
    report = run_json(capsys, "--cluster", "dgx-h100-superpod", "--trace", "itp-cluster04", "--jobs", "40", "--policies",
                      "atoll-costed-floor", "--seeds", "1", "--load", "1.3")
    numbers = report["policies"]["atoll-costed-floor"]
    assert report["profiles"] == "config/kueue/dgx-h100/profiles.yaml"
    assert numbers["jobs_done"] == 40 and numbers["jobs_rejected"] == numbers["jobs_unfinished"] == 0


PREEMPTING = ["--trace", "config/streams/small-jobs-with-priority-gangs.yaml", "--trace-format", "synthetic", "--jobs", "60", "--seeds", "2",
              "--profiles", "config/streams/preempting-profiles.yaml", "--workers", "1"]


def test_a_policy_that_preempts_gets_its_preemptions_per_seed_in_the_text_and_the_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PREEMPTING, "--policies", "atoll-strict,atoll-strict-preempting"]) == 0
    text = capsys.readouterr().out
    head = "preemption that clears a domain (preemptDomain), every seed"
    assert head in text
    table = text.split(head, 1)[1].splitlines()
    assert "preempted GPU-h" in table[1] and "64+ GPUs p95/max wait h" in table[1] and "1-7 mean JCT h" in table[1]
    assert [row.split()[:3] for row in table[3:7]] == [["atoll-strict", "0", "off"], ["atoll-strict", "1", "off"],
                                                      ["atoll-strict-preempting", "0", "on"], ["atoll-strict-preempting", "1", "on"]]
    assert main([*PREEMPTING, "--policies", "atoll-strict,atoll-strict-preempting", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {(r["policy"], r["seed"]): r["preempt_domain"] for r in out["runs"]} == {
        ("atoll-strict", 0): "off", ("atoll-strict", 1): "off", ("atoll-strict-preempting", 0): "on", ("atoll-strict-preempting", 1): "on"}
    assert all(r["preempted_gpu_hours"] >= 0 and r["preempted"] >= 0 and set(r["mean_jct_by_size_band"]) == {"1-7", "8-15", "16-63", "64+"}
               for r in out["runs"])
    assert out["policies"]["atoll-strict"]["preemption_plans"] == 0


def test_without_a_policy_that_preempts_no_preemption_figures_are_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PREEMPTING, "--policies", "atoll-strict"]) == 0
    assert "preemption that clears a domain" not in capsys.readouterr().out
    assert main([*PREEMPTING, "--policies", "atoll-strict", "--format", "json"]) == 0
    assert all("preempted_gpu_hours" not in r for r in json.loads(capsys.readouterr().out)["runs"])


def test_kueues_own_preemption_runs_under_the_policy_given_and_is_reported_per_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PREEMPTING, "--policies", "kueue-required,atoll-strict", "--kueue-preemption", "LowerPriority"]) == 0
    text = capsys.readouterr().out
    head = "preemption that clears a domain (preemptDomain), and Kueue's own for quota (withinClusterQueue: LowerPriority), every seed"
    assert head in text
    table = text.split(head, 1)[1].splitlines()
    assert "Kueue victims" in table[1] and "Kueue preempted GPU-h" in table[1]
    assert [row.split()[:2] for row in table[3:7]] == [["kueue-required", "0"], ["kueue-required", "1"], ["atoll-strict", "0"], ["atoll-strict", "1"]]
    assert main([*PREEMPTING, "--policies", "atoll-strict", "--kueue-preemption", "LowerPriority", "--format", "json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["kueue_preemption"] for r in runs] == ["LowerPriority"] * 2 and all(r["kueue_preempted"] >= 0 for r in runs)
    assert main([*PREEMPTING, "--policies", "atoll-strict"]) == 0
    assert "Kueue's own for quota" not in capsys.readouterr().out  # Never, the default: no preemption table at all


def test_a_cohort_of_cluster_queues_runs_and_a_bad_cohort_file_names_its_field(capsys: pytest.CaptureFixture[str], cluster: str,
                                                                                tmp_path: Path) -> None:
    trace = tmp_path / "itp.csv"
    trace.write_text(ITP)
    args = ["--cluster", cluster, "--trace", str(trace), "--seeds", "1", "--policies", "kueue-required,atoll-strict"]
    single = run_json(capsys, *args)
    one = run_json(capsys, *args, "--cohort", "1")  # one ClusterQueue in a cohort: Kueue admits as with none
    timed = {"wall_s", "decisions_per_s", "decision_seconds"}  # how long it took, not what happened
    assert [{k: v for k, v in p.items() if k not in timed} for p in single["policies"].values()] == \
        [{k: v for k, v in p.items() if k not in timed} for p in one["policies"].values()]
    four = run_json(capsys, *args, "--cohort", "4")
    assert all(p["jobs_done"] == 40 for p in four["policies"].values())
    bad = tmp_path / "teams.yaml"
    bad.write_text("clusterQueues:\n- {name: a, nominalQuota: 0.5}\n- {name: b, nominalQuota: 0.5, borrowingLimit: -1}\n")
    assert main([*args, "--cohort", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["atoll simulate: --cohort: clusterQueues[1].borrowingLimit: -1.0 must be a share of at least 0, or left out for no limit"]


def test_the_quota_factor_reaches_every_run_and_the_report(capsys: pytest.CaptureFixture[str], cluster: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = spied_settings(monkeypatch, "quota_factor")
    args = ("--cluster", cluster, "--jobs", "40", "--seeds", "1", "--policies", "kueue-bestfit,atoll-strict", "--workers", "1")
    assert run_json(capsys, *args, "--quota-factor", "1.5")["quota_factor"] == 1.5
    assert seen == [1.5, 1.5]
    assert run_json(capsys, *args)["quota_factor"] == 1.0  # the default: quota is the flavor's GPUs
    assert seen[2:] == [1.0, 1.0]
    assert main(list(args)) == 0 and "ClusterQueue quota" not in capsys.readouterr().out
    assert main([*args, "--quota-factor", "2"]) == 0 and "ClusterQueue quota 2 x GPUs" in capsys.readouterr().out


@pytest.mark.parametrize(("value", "words"), [("0.5", "0.5 is below 1"), ("abc", "'abc' is not a number"), ("nan", "nan is below 1"),
                                              ("inf", "inf is below 1 or not finite")])
def test_a_quota_factor_below_1_or_not_a_number_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str], value: str,
                                                                            words: str) -> None:
    for command in (["simulate"], ["bench", "quality"]):
        with pytest.raises(SystemExit) as exc:
            atoll([*command, "--quota-factor", value])
        assert exc.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"atoll {' '.join(command)}: --quota-factor: {words}"), err


def per_seed(comparison: dict[str, Any]) -> dict[tuple[int, str], dict[str, Any]]:
    """A comparison's figures keyed by (seed, policy): JCT, wait, allocation, decisions per job, …"""
    return {(seed, p): figures for p, entry in comparison["policies"].items() for seed, figures in zip(comparison["seeds"], entry["per_seed"])}


def test_a_seed_run_alone_is_that_seed_of_a_larger_run(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    args = ("--cluster", cluster, "--jobs", "60", "--gpu-perf", "normal:0.1", "--policies", "kueue-bestfit,atoll-strict", "--workers", "1")
    three = run_json(capsys, *args, "--seed", "0", "--seeds", "3")
    alone = run_json(capsys, *args, "--seed", "2", "--seeds", "1")
    first = run_json(capsys, *args, "--seed", "0", "--seeds", "1")
    assert per_seed(alone["comparisons"][0]) == {k: v for k, v in per_seed(three["comparisons"][0]).items() if k[0] == 2}
    assert [r for r in three["runs"] if r["seed"] == 2] == alone["runs"]
    assert per_seed(first["comparisons"][0]) == {k: v for k, v in per_seed(three["comparisons"][0]).items() if k[0] == 0}
    # the seeds differ (so the equalities above compare runs that could differ): speeds and tie-breaks are the seed's own
    assert per_seed(three["comparisons"][0])[(2, "atoll-strict")] != per_seed(three["comparisons"][0])[(0, "atoll-strict")]


def test_simulate_draws_the_same_run_as_bench_quality_for_the_same_seed(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from admission.cli import _bench_quality as bq
    from admission.cli._bundled import CONFIG_DIR

    rows = "".join(f"j{i},{300 * i},{3000 + 101 * i},{[1, 8, 16, 32][i % 4]}\n" for i in range(40))
    (tmp_path / bq.ITP_FILE).write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    monkeypatch.setenv("ATOLL_TRACES_DIR", str(tmp_path))
    policies = "kueue-bestfit,atoll-costed-floor"
    assert bq.main(["--skip-scale", "--skip-binding", "--skip-sensitivity", "--clusters", "dgx-h100-superpod", "--loads", "1.2",
                    "--policies", policies, "--seed", "1", "--seeds", "2", "--workers", "1", "--format", "json"]) == 0
    bench = per_seed(json.loads(capsys.readouterr().out)["quality"]["dgx-h100-superpod"]["comparisons"][0])
    assert sorted({seed for seed, _ in bench}) == [1, 2] and bench[(1, "atoll-costed-floor")] != bench[(2, "atoll-costed-floor")]
    for seed in ("1", "2"):  # the bundled model, the bench's trace and profiles document; its GPU speed model is the default
        simulated = run_json(capsys, "--cluster", "dgx-h100-superpod", "--trace", str(tmp_path / bq.ITP_FILE), "--load", "1.2",
                             "--profiles", str(CONFIG_DIR / "profiles.yaml"), "--policies", policies, "--seed", seed, "--seeds", "1",
                             "--workers", "1")
        assert per_seed(simulated["comparisons"][0]) == {k: v for k, v in bench.items() if k[0] == int(seed)}


def test_a_negative_first_seed_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as bad:
        main(["--seed", "-1"])
    assert bad.value.code == 2 and "--seed: -1 is below 0; seeds start at 0" in capsys.readouterr().err


def test_a_profiles_document_without_the_default_policies_profiles_says_to_give_policies(capsys: pytest.CaptureFixture[str],
                                                                                           tmp_path: Path) -> None:
    doc = tmp_path / "profiles.yaml"
    doc.write_text("defaultProfile: strict\nprofiles:\n  strict: {requiredLevel: nvidia.com/gpu.clique}\n")
    assert atoll(["simulate", "--profiles", str(doc), "--jobs", "20", "--seeds", "1"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "compiling" not in line]
    assert len(err) == 1 and "unknown policy 'atoll-elastic'" in err[0]
    assert err[0].endswith(f"--policies was not given, and its default runs atoll-strict and atoll-elastic, which {doc} does not both define; "
                           "give --policies")
    assert atoll(["simulate", "--profiles", str(doc), "--jobs", "20", "--seeds", "1", "--policies", "atoll-elastic"]) == 2
    assert "give --policies" not in capsys.readouterr().err  # the user named the policy: the plain message


def test_the_table_of_one_seed_says_so_without_a_mean_of_1_seeds(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    assert main(["--cluster", cluster, "--jobs", "20", "--seeds", "1", "--workers", "1", "--policies", "kueue-bestfit,atoll-strict"]) == 0
    out = capsys.readouterr().out
    assert "every policy completed (one seed: no intervals)" in out and "1 seeds" not in out

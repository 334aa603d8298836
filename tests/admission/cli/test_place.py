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
        (["--cluster", "no-such-cluster"], "--cluster: 'no-such-cluster' is neither a file nor a bundled cluster model; give a model file or one of "
                                           "dgx-h100-superpod, gb200-nvl72-superpod, mixed-a100-h100, mixed-accelerators"),
        (["--cluster", "no-such-cluster.yaml"], "--cluster: no-such-cluster.yaml: cannot read: No such file or directory"),
        (["--profiles", "no-such-profiles.yaml"], "--profiles: no-such-profiles.yaml: cannot read: No such file or directory"),
        (["--profile", "gold"], "--profile: 'gold' is not a profile of config/profiles.yaml (have ['costed', 'costed-floor', 'elastic', 'strict']); "
                                "name one of them or add it to that document"),
        (["--flavor", "tpu"], "--flavor: gb200-nvl72-superpod has no flavor 'tpu'; give one of gb200"),
    ],
)
def test_place_bad_input_exits_2_with_a_named_error(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--workload", str(EXAMPLES / "training-job.yaml"), *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.splitlines()) == 1


def test_a_missing_workload_file_or_a_negative_seed_is_named_by_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--workload", "no-such-job.yaml"]) == 2
    assert capsys.readouterr().err == "atoll place: --workload: no-such-job.yaml: cannot read: No such file or directory\n"
    with pytest.raises(SystemExit) as exc:
        main(["place", "--workload", str(EXAMPLES / "training-job.yaml"), "--occupancy", "0.5", "--seed", "-1"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == "atoll place: --seed: expected a whole number ≥ 0, got -1 (atoll place --help lists the options)\n"


def test_an_unknown_profile_annotation_names_the_file_the_annotation_and_the_profiles_document(tmp_path: Path,
                                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    text = (EXAMPLES / "training-job.yaml").read_text()
    assert "atoll.dev/profile:" not in text and "atoll.dev/class: training" in text
    bad = tmp_path / "job.yaml"
    bad.write_text(text.replace("atoll.dev/class: training", "atoll.dev/class: training\n        atoll.dev/profile: gold"))
    assert main(["place", "--workload", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: annotation atoll.dev/profile: 'gold' is not a profile of config/profiles.yaml" in err


def test_an_unknown_class_annotation_reads_like_an_unknown_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (EXAMPLES / "training-job.yaml").read_text()
    bad = tmp_path / "job.yaml"
    bad.write_text(text.replace("atoll.dev/class: training", "atoll.dev/class: trainig"))
    assert main(["place", "--workload", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == (f"atoll place: {bad}: annotation atoll.dev/class: 'trainig' is not a class of config/profiles.yaml "
                   "(have ['inference', 'training']); name one of them or add it to that document\n")


def test_a_bad_spread_annotation_is_an_input_error_not_a_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The controller rejects such a Workload with a decision record; the what-if CLI says the input is wrong (exit 2)."""
    text = (EXAMPLES / "spread-service.yaml").read_text()
    assert 'atoll.dev/spread-max-per-domain: "1"' in text
    bad = tmp_path / "service.yaml"
    bad.write_text(text.replace('atoll.dev/spread-max-per-domain: "1"', 'atoll.dev/spread-max-per-domain: "-3"'))
    assert main(["place", "--workload", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert f"{bad} document 1: podSets[leader].template.metadata.annotations[atoll.dev/spread-max-per-domain]: a whole number" in captured.err


@pytest.mark.parametrize(("annotations", "needle"), [
    ('kueue.x-k8s.io/podset-slice-required-topology: nvidia.com/gpu.clique\n        kueue.x-k8s.io/podset-slice-size: "0"',
     "invalid topology annotations: podSets[main] annotation[kueue.x-k8s.io/podset-slice-size]: must be greater than or equal to 1, got 0"),
    ('kueue.x-k8s.io/podset-slice-required-topology: nvidia.com/gpu.clique\n        kueue.x-k8s.io/podset-slice-size: "5"',
     "is not a multiple of the slice size 5"),
])
def test_a_bad_topology_annotation_is_an_input_error_not_a_decision(tmp_path: Path, annotations: str, needle: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The decision's own check (the controller rejects with a record); the what-if CLI exits 2 on one line."""
    text = (EXAMPLES / "training-job.yaml").read_text()
    bad = tmp_path / "job.yaml"
    bad.write_text(text.replace("atoll.dev/class: training", "atoll.dev/class: training\n        " + annotations))
    assert main(["place", "--workload", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"atoll place: {bad}: invalid topology annotations: ") and needle in captured.err


@pytest.mark.parametrize(("old", "new", "line"), [
    ("parallelism: 16", "parallelism: sixteen", "spec.parallelism: expected a whole number, got 'sixteen'"),
    ("  template:", "  template: 5\n  unused:", "spec.template: expected a mapping, got 5"),
])
def test_a_wrong_typed_field_says_what_it_takes_and_what_was_written(tmp_path: Path, old: str, new: str, line: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """As the YAML documents' errors say it ("expected a whole number, got 'sixteen'"), not Python's type names."""
    bad = tmp_path / "job.yaml"
    bad.write_text((EXAMPLES / "training-job.yaml").read_text().replace(old, new))
    assert main(["place", "--workload", str(bad)]) == 2
    assert capsys.readouterr().err == f"atoll place: {bad}: {line}\n"


def test_place_bad_workload_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("kind: Job\nmetadata: {name: j}\nspec:\n  parallelism: 2\n  template:\n    spec:\n      containers: []\n")
    assert main(["place", "--workload", str(bad)]) == 2
    assert "spec.podSets[0].template.spec.containers: at least one container" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "text", "needle"),
    [
        ("--workload", "kind: Job\nspec:\n  parallelism: [16\n  completions: 16\n", "not valid YAML at line 4, column 14: expected ',' or ']'"),
        ("--workload", "kind: Job\n---\nkind: Job\nspec: {a: b: c}\n", "not valid YAML at line 4, column 12: "),
        ("--profiles", "profiles: [\n", "not valid YAML at line 2, column 1: expected the node content"),
    ],
)
def test_a_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path: Path, flag: str, text: str, needle: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    args = ["--workload", str(EXAMPLES / "training-job.yaml"), "--profiles", str(bad)] if flag == "--profiles" else ["--workload", str(bad)]
    assert main(["place", *args]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "compiling" not in line]
    assert len(err) == 1 and err[0].startswith(f"atoll place: {bad}: ") and needle in err[0]


def test_bench_finder_reports_identical_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "finder", "--nodes", "200", "--requests", "60", "--reference-sample", "30", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["identical"] is True and row["nodes"] == 200 and row["requests"] == 60
    assert {"p50_ms", "p99_ms", "reference_p99_ms", "speedup_vs_reference"} <= set(row)


def test_bench_finder_with_uniform_perf_requests_still_matches_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "finder", "--nodes", "200", "--requests", "60", "--reference-sample", "60", "--uniform-perf", "1",
                 "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["identical"] is True and row["uniform_perf_share"] == 1.0
    with pytest.raises(SystemExit) as exc:
        main(["bench", "finder", "--uniform-perf", "2"])
    assert exc.value.code == 2
    assert "--uniform-perf: expected a number from 0 to 1, got 2" in capsys.readouterr().err


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fly"]) == 2
    assert "unknown command" in capsys.readouterr().err


def _job(tmp_path: Path, spec_extra: str, parallelism: int = 4, gpus: str = "4") -> str:
    path = tmp_path / "job.yaml"
    path.write_text(f"""apiVersion: batch/v1
kind: Job
metadata: {{name: pinned, namespace: team-a}}
spec:
  parallelism: {parallelism}
  template:
    spec:
{spec_extra}
      containers:
        - name: c
          resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}
""")
    return str(path)


def test_place_honours_the_template_node_selector(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rack = "gb200-s1-u1-r5"  # not the rack best fit would pick first (gb200-s0-u0-r0)
    job = _job(tmp_path, f"      nodeSelector: {{nvidia.com/gpu.clique: {rack}}}")
    assert main(["place", "--workload", job, "--profile", "strict", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    nodes = out["podsets"][0]["nodes"]
    assert out["outcome"] == "admit" and nodes and all(n.startswith(rack + "-n") for n in nodes)


def test_place_honours_required_node_affinity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    affinity = """      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: network.example.com/spine, operator: NotIn, values: [gb200-s0]}"""
    assert main(["place", "--workload", _job(tmp_path, affinity), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "admit" and all(n.startswith("gb200-s1-") for n in out["podsets"][0]["nodes"])


def test_place_names_a_bad_affinity_operator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    affinity = """      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions: [{key: a, operator: In, values: [b]}, {key: a, operator: Near}]"""
    assert main(["place", "--workload", _job(tmp_path, affinity)]) == 2
    err = capsys.readouterr().err
    assert ("spec.podSets[0].template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[1].operator: 'Near' is not one of") in err


def test_place_rejects_an_absurd_gpu_count_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--workload", _job(tmp_path, "", gpus="1e30")]) == 2
    err = capsys.readouterr().err
    assert "containers[0].resources.requests.nvidia.com/gpu: '1e30' exceeds the limit of 4096" in err and "Traceback" not in err


def test_place_with_nothing_to_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--workload", _job(tmp_path, "", parallelism=0), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "admit" and "every PodSet has count 0 (main); nothing to place" in out["message"]


def test_bench_simulate_runs_the_deployed_path_at_scale(capsys: pytest.CaptureFixture[str]) -> None:
    # a goal no run misses: the speed itself is the benchmark's to judge (make bench), not a test's
    assert main(["bench", "simulate", "--jobs", "300", "--load", "1.3", "--scheduler", "adversarial", "--format", "json",
                 "--goal-seconds", "1e9"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["jobs"] == 300 and row["gpus"] == 101_376 and row["decisions"] >= 300 and row["scheduler"] == "adversarial"
    assert row["goal_met"] is True
    assert row["simulate_cpu_s"] > 0  # what compares runs on a shared machine, beside the wall time the goal reads


def test_bench_simulate_parks_as_the_profiles_say_unless_told(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import admission.simulator as sim

    seen: list[bool | None] = []
    real = sim.simulate

    def recording(*args: object, settings: sim.SimSettings, **kw: object) -> object:
        seen.append(settings.parking)
        return real(*args, settings=settings, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sim, "simulate", recording)
    rows = []
    for extra in ((), ("--parking", "on"), ("--parking", "off")):
        assert main(["bench", "simulate", "--jobs", "50", "--format", "json", "--goal-seconds", "1e9", *extra]) == 0
        rows.append(json.loads(capsys.readouterr().out)["parking"])
    assert rows == ["profile", "on", "off"] and seen == [None, True, False]  # None: each profile as it says


def test_bench_simulate_exits_non_zero_when_it_misses_its_goal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "simulate", "--jobs", "20", "--goal-seconds", "0"]) == 1  # no run takes 0 s
    out = capsys.readouterr().out
    assert "FAIL simulate: 20 jobs in" in out and " s of CPU (goal ≤ 0 s)" in out


def test_bench_simulate_names_a_bad_scheduler(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "simulate", "--jobs", "10", "--scheduler", "fastest"]) == 2
    assert "scheduler: 'fastest'" in capsys.readouterr().err


GB200 = Path(__file__).resolve().parents[3] / "config" / "clusters" / "gb200-nvl72-superpod.yaml"
CLIQUE = "nvidia.com/gpu.clique"


def _cliques() -> dict[str, str]:
    from topology import load_cluster_model

    flavor = load_cluster_model(str(GB200)).flavor(None)
    return {n.name: n.labels[CLIQUE] for n in flavor.build_nodes()}


def _place_sliced(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["place", "--cluster", str(GB200), "--workload", str(EXAMPLES / "sliced-training-jobset.yaml"), *args]) == 0
    return json.loads(capsys.readouterr().out) if "json" in args else {"table": capsys.readouterr().out}


def test_place_json_shows_each_slice_with_its_domain_pods_and_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    out = _place_sliced(capsys, "--format", "json")
    assert out["outcome"] == "admit"
    (ps,) = out["podsets"]
    cliques = _cliques()
    assert [(s["index"], s["level"], s["pods"]) for s in ps["slices"]] == [(0, CLIQUE, 16), (1, CLIQUE, 16)]
    for s in ps["slices"]:
        assert {cliques[n] for n in s["nodes"]} == {s["domain"][-1]}  # every node of a slice in the slice's island
        assert sum(s["nodes"].values()) == 16
    assert ps["slices"][0]["domain"] != ps["slices"][1]["domain"]
    merged: dict[str, int] = {}
    for s in ps["slices"]:
        for n, k in s["nodes"].items():
            merged[n] = merged.get(n, 0) + k
    assert merged == ps["nodes"]
    # domain enforcement: one nodeSelector for the PodSet (its SU), so the slices are not held, and the check message says so
    assert set(ps["node_selector"]) == {"network.example.com/su"} and not any(s["held"] for s in ps["slices"])
    assert any("slices are held exactly only under exact enforcement" in n for n in out["notes"])
    assert f"slice 0 in {'/'.join(ps['slices'][0]['domain'])}, 1 in {'/'.join(ps['slices'][1]['domain'])}" in out["message"]


def test_place_table_lists_each_slice(capsys: pytest.CaptureFixture[str]) -> None:
    table = _place_sliced(capsys)["table"]
    lines = [line.strip() for line in table.splitlines() if line.strip().startswith("slice ")]
    assert len(lines) == 2
    assert lines[0].startswith(f"slice 0: {CLIQUE} = ") and "16 pods on 16 nodes" in lines[0] and "not held:" in lines[0]


def test_under_exact_enforcement_each_slice_is_held_and_ranks_pin_in_slice_order(capsys: pytest.CaptureFixture[str],
                                                                                 tmp_path: Path) -> None:
    from admission.webhook._pin import read_exact_pod

    doc = tmp_path / "profiles.yaml"
    doc.write_text("defaultProfile: strict\nflavors:\n  gb200: {topology: nvl72-fabric, enforcement: exact}\n"
                   f"profiles:\n  strict: {{requiredLevel: {CLIQUE}}}\nclasses:\n  training: {{perfFloor: 0.9}}\n")
    out = _place_sliced(capsys, "--profiles", str(doc), "--format", "json")
    (ps,) = out["podsets"]
    assert all(s["held"] and s["held_by"] == "planned nodes (exact)" for s in ps["slices"])
    assert not any("exact enforcement" in n for n in out.get("notes", []))
    (update,) = out["podSetUpdates"]
    cliques = _cliques()
    for rank in range(32):  # the pod the JobSet controller creates with completion index ``rank``
        pod = {"metadata": {"name": f"w-{rank}", "namespace": "team-a", "labels": {**update["labels"],
               "batch.kubernetes.io/job-completion-index": str(rank), "jobset.sigs.k8s.io/job-index": "0",
               "jobset.sigs.k8s.io/replicatedjob-replicas": "1"}, "annotations": update["annotations"]}}
        exact = read_exact_pod(pod)
        assert exact is not None and exact.rank == rank
        assert cliques[exact.slots[rank]] == ps["slices"][rank // 16]["domain"][-1]


@pytest.mark.parametrize(("balanced", "per_island"), [(True, [16, 16, 16, 16]), (False, [10, 18, 18, 18])])
def test_a_profile_with_balanced_placement_shares_a_spanning_gang_evenly(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                         balanced: bool, per_island: list[int]) -> None:
    doc = tmp_path / "profiles.yaml"
    doc.write_text("defaultProfile: elastic\nflavors:\n  gb200: {topology: nvl72-fabric}\nprofiles:\n"
                   f"  elastic: {{preferredLevel: {CLIQUE}, maxSpanLevel: network.example.com/su, relaxAfterSeconds: 300, "
                   f"balancedPlacement: {str(balanced).lower()}}}\n")
    assert main(["place", "--cluster", str(GB200), "--workload", _job(tmp_path, "", parallelism=64), "--profiles", str(doc),
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "admit" and out["relaxed"]  # no island holds 64 pods: it spans at once
    cliques = _cliques()
    counts: dict[str, int] = {}
    for node, k in out["podsets"][0]["nodes"].items():
        counts[cliques[node]] = counts.get(cliques[node], 0) + k
    assert sorted(counts.values()) == per_island


CONFIG = Path(__file__).resolve().parents[3] / "config"
OWN_PROFILES = {"gb200-nvl72-superpod": "config/profiles.yaml", "dgx-h100-superpod": "config/kueue/dgx-h100/profiles.yaml",
                "mixed-a100-h100": "config/kueue/mixed-a100-h100/profiles.yaml",
                "mixed-accelerators": "config/kueue/mixed-accelerators/profiles.yaml"}
FLAVORS = [("gb200-nvl72-superpod", "gb200"), ("dgx-h100-superpod", "h100"), ("mixed-a100-h100", "a100"), ("mixed-a100-h100", "h100")]
EVERY_FLAVOR = [*FLAVORS, ("mixed-accelerators", "h100"), ("mixed-accelerators", "mi300x"), ("mixed-accelerators", "gaudi3")]
NVL72_ONLY = {"sliced-training-jobset.yaml"}  # slices of 16 trays × 4 GPUs: each slice needs a 64-GPU NVLink island
TOO_SMALL = {("mixed-accelerators", "h100", "training-job.yaml")}  # 64 GPUs; the largest span the profile allows, a leaf, has 32


@pytest.mark.parametrize(("cluster", "flavor"), EVERY_FLAVOR)
@pytest.mark.parametrize("example", sorted(p.name for p in (CONFIG / "workloads").glob("*.yaml")))
def test_every_bundled_example_on_every_bundled_cluster(cluster: str, flavor: str, example: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--cluster", cluster, "--flavor", flavor, "--workload", f"config/workloads/{example}", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    if "workloads" in out:  # a service of several Workloads: every one admitted, in file order
        assert len(out["workloads"]) > 1
        for answer in out["workloads"]:
            assert answer["profiles"] == OWN_PROFILES[cluster] and answer["outcome"] == "admit", answer["message"]
        return
    assert out["profiles"] == OWN_PROFILES[cluster]  # the profiles document the cluster model names, picked up without --profiles
    if (cluster, flavor, example) in TOO_SMALL:
        assert out["outcome"] == "reject" and "never fits" in out["message"] and "fit neither one nvidia.com/gpu.clique domain" in out["message"]
    elif example in NVL72_ONLY and cluster != "gb200-nvl72-superpod" and flavor not in ("mi300x", "gaudi3"):  # no nvidia.com/gpu there
        # the manifest's own Kueue annotation asks for more than an 8-GPU island: the answer says so, not "use another profile"
        assert out["outcome"] == "reject"
        assert any("kueue.x-k8s.io/podset-slice-required-topology: nvidia.com/gpu.clique" in n and "no profile relaxes them" in n
                   and f"nvidia.com/gpu.clique domain of flavor {flavor} holds 8 GPUs" in n for n in out["notes"])
    else:
        assert out["outcome"] == "admit", out["message"]


def test_the_table_names_the_profiles_document_it_used(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--cluster", "dgx-h100-superpod", "--workload", "config/workloads/training-job.yaml"]) == 0
    assert "profile strict from config/kueue/dgx-h100/profiles.yaml" in capsys.readouterr().out


def test_a_profiles_document_for_another_fabric_names_the_clusters_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "profiles.yaml"
    doc.write_text("defaultProfile: elastic\nprofiles:\n  elastic: {preferredLevel: nvidia.com/gpu.clique, maxSpanLevel: network.example.com/su}\n")
    assert main(["place", "--cluster", "mixed-a100-h100", "--profiles", str(doc), "--workload", "config/workloads/workload.yaml"]) == 2
    err = capsys.readouterr().err
    assert "profiles.elastic.maxSpanLevel: flavor a100 has no level 'network.example.com/su'" in err
    assert "cluster mixed-a100-h100 is set up with config/kueue/mixed-a100-h100/profiles.yaml: use --profiles" in err


def test_a_misspelt_level_label_in_the_cluster_model_is_its_configuration_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "typo.yaml"
    model.write_text((CONFIG / "clusters" / "gb200-nvl72-superpod.yaml").read_text()
                     .replace("nvidia.com/gpu.clique", "nvidia.com/gpu.cliqeu").replace("profiles: ../profiles.yaml", ""))
    assert main(["place", "--cluster", str(model), "--workload", "config/workloads/training-job.yaml"]) == 2
    err = capsys.readouterr().err
    assert f"{model}: flavors[gb200].levels: label 'nvidia.com/gpu.cliqeu' looks misspelt: did you mean 'nvidia.com/gpu.clique'?" in err
    assert "a configuration error in the cluster model" in err and "retry" not in err and "Waiting" not in err


@pytest.mark.parametrize(("args", "needle"), [
    (["--occupancy", "1.5"], "--occupancy: a share of GPUs from 0 to 1, got 1.5"),
    (["--occupancy", "-0.1"], "--occupancy: a share of GPUs from 0 to 1, got -0.1"),
    (["--waited", "-5"], "--waited: seconds already waited, 0 or more, got -5"),
])
def test_out_of_range_numbers_are_refused_naming_the_flag(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--workload", "config/workloads/training-job.yaml", *args]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"atoll place: {needle}"


@pytest.mark.parametrize(("cluster", "flavor"), FLAVORS)
def test_the_serving_graph_example_shows_its_edge_with_bandwidth_and_bottleneck(cluster: str, flavor: str,
                                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--cluster", cluster, "--flavor", flavor, "--workload", "config/workloads/serving-graph.yaml", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "admit", out["message"]
    (edge,) = out["links"]
    assert (edge["from"], edge["to"], edge["asked"]) == ("prefill", "decode", "≥ 400 GB/s")
    assert edge["bandwidth_gbps"] >= 400 and edge["bottleneck_level"] in ("nvidia.com/gpu.clique", "kubernetes.io/hostname")
    assert "edge prefill->decode:" in out["message"]
    nodes = {n for ps in out["podsets"] for n in ps["nodes"]}
    assert len(nodes) <= 2  # 8 GPUs: both pools inside one NVLink domain
    assert main(["place", "--cluster", cluster, "--flavor", flavor, "--workload", "config/workloads/serving-graph.yaml"]) == 0
    assert f"edge prefill->decode: {edge['bandwidth_gbps']:g} GB/s per GPU" in capsys.readouterr().out


def _islands(answer: dict) -> set[str]:
    return {n.rsplit("-", 1)[0] for ps in answer["podsets"] for n in ps["nodes"]}


@pytest.mark.parametrize(("cluster", "flavor"), FLAVORS)
def test_the_spread_service_example_puts_each_replica_in_its_own_island(cluster: str, flavor: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--cluster", cluster, "--flavor", flavor, "--workload", "config/workloads/spread-service.yaml", "--format", "json"]) == 0
    answers = json.loads(capsys.readouterr().out)["workloads"]
    assert [a["workload"] for a in answers] == [f"inference/llama-70b-{i}" for i in range(3)]
    islands = [_islands(a) for a in answers]
    assert all(len(i) == 1 for i in islands) and len(set.union(*islands)) == 3  # packed per replica, one replica per island
    assert not any("spread group" in n for n in answers[0].get("notes", []))
    assert any("spread group llama-70b, 2 replica(s) admitted: 2 nvidia.com/gpu.clique domain(s) left out" in n for n in answers[2]["notes"])
def test_the_bundled_amd_example_is_placed_on_its_own_flavor(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--cluster", "mixed-accelerators", "--workload", "config/workloads/amd-training-job.yaml", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["flavor"] == "mi300x" and out["outcome"] == "admit"  # the flavor whose accelerator its pods request
    (ps,) = out["podsets"]
    assert ps["nodes"] == {"mi300x-l0-c0-n0": 4} and ps["bottleneck_gbps"] == 448
    # the same manifest on the H100 flavor requests none of its accelerator: Kueue would not assign it there
    assert main(["place", "--cluster", "mixed-accelerators", "--flavor", "h100", "--workload", "config/workloads/amd-training-job.yaml",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "podsets" not in out and any("requests 2 amd.com/gpu per pod but Kueue assigned no flavor for amd.com/gpu" in n for n in out["notes"])


def test_a_gaudi_job_goes_to_the_gaudi_flavor_and_nvidia_jobs_stay_on_h100(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gaudi = (CONFIG / "workloads" / "amd-training-job.yaml").read_text().replace("amd.com/gpu", "habana.ai/gaudi")
    (tmp_path / "gaudi.yaml").write_text(gaudi)
    assert main(["place", "--cluster", "mixed-accelerators", "--workload", str(tmp_path / "gaudi.yaml"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["flavor"] == "gaudi3" and out["outcome"] == "admit" and out["podsets"][0]["bottleneck_gbps"] == 525
    assert main(["place", "--cluster", "mixed-accelerators", "--workload", _job(tmp_path, "", parallelism=2, gpus="8"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["flavor"] == "h100" and out["outcome"] == "admit"


def test_a_cluster_model_accelerator_that_is_not_a_resource_name_is_one_line_naming_the_field(tmp_path: Path,
                                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "cluster.yaml"
    model.write_text((CONFIG / "clusters" / "mixed-accelerators.yaml").read_text().replace("gpuResource: amd.com/gpu", "gpuResource: amd gpu")
                     .replace("profiles: ../", f"profiles: {CONFIG}/"))
    assert main(["place", "--cluster", str(model), "--workload", "config/workloads/amd-training-job.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "flavors[mi300x].gpuResource: 'amd gpu' is not an accelerator resource name" in err
    doc = tmp_path / "profiles.yaml"
    doc.write_text((CONFIG / "kueue" / "mixed-accelerators" / "profiles.yaml").read_text().replace("gpuResource: habana.ai/gaudi",
                                                                                                   "gpuResource: kubernetes.io/gaudi"))
    assert main(["place", "--cluster", "mixed-accelerators", "--profiles", str(doc), "--workload", "config/workloads/amd-training-job.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "flavors.gaudi3.gpuResource: 'kubernetes.io/gaudi' is not an accelerator resource name" in err
def test_place_record_appends_the_controllers_record_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from admission.controller import record_problems

    path = tmp_path / "what-if.jsonl"
    for extra in ([], ["--occupancy", "0.5"]):
        assert main(["place", "--workload", str(EXAMPLES / "training-job.yaml"), "--record", str(path), *extra]) == 0
    admitted, waiting = (json.loads(line) for line in path.read_text().splitlines())
    assert record_problems(admitted) == [] and record_problems(waiting) == []
    assert (admitted["outcome"], waiting["outcome"], waiting["reason"]) == ("admit", "wait", "no-domain")
    assert admitted["controller"] == "" and admitted["lease_term"] is None and admitted["workload"] == "llm-pretrain"
    assert sum(admitted["placement"][0]["nodes"].values()) == 16
    holders = {h["workload"] for w in waiting["why_not"] for h in w["ledger"]["workloads"]}
    assert holders == {"(pods not placed by Atoll)"}  # --occupancy's pods carry no Atoll decision
    assert main(["place", "--workload", str(EXAMPLES / "training-job.yaml"), "--record", str(tmp_path / "no" / "dir.jsonl")]) == 2
    assert "--record" in capsys.readouterr().err


def test_the_shipped_sample_records_meet_the_schema() -> None:
    from admission.cli._audit import read_records
    from admission.controller import record_problems

    sample = Path(__file__).resolve().parents[3] / "config" / "records" / "sample-decisions.jsonl"
    tally = [0, 0]
    records = list(read_records(sample.read_text().splitlines(), tally))
    assert len(records) >= 8 and tally == [len(records), 0]
    assert [p for r in records for p in record_problems(r)] == []
    assert {r["outcome"] for r in records} == {"admit", "wait"} and any(r.get("run") for r in records)

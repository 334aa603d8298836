"""``atoll bench kueue`` without a control plane: bad sizes get one line, the table's figures
come from the create and admission times, and the Workloads are what each arm asks of Kueue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from admission import vocabulary
from admission.cli._bench_kueue import (
    RACK,
    _eviction_finished,
    _retry,
    _workload,
    main,
)
from admission.kube.errors import ApiError


@pytest.mark.parametrize(("flag", "takes"), [
    ("--nodes=0", "--nodes: expected a whole number ≥ 1, got 0"),
    ("--workloads=0", "--workloads: expected a whole number ≥ 1, got 0"),
    ("--queues=0", "--queues: expected a whole number ≥ 1, got 0"),
    ("--rate=0", "--rate: expected a number > 0, got 0"),
    ("--write-workers=-1", "--write-workers: expected a whole number from 0 to 32, got -1"),
    ("--write-workers=33", "--write-workers: expected a whole number from 0 to 32, got 33"),
    ("--kueue-workload-concurrency=0", "--kueue-workload-concurrency: expected a whole number ≥ 1, got 0"),
    ("--before-quota-depth=0", "--before-quota-depth: expected a whole number from 1 to 64, got 0"),
    ("--before-quota-depth=65", "--before-quota-depth: expected a whole number from 1 to 64, got 65"),
    ("--before-quota-settle=-1", "--before-quota-settle: expected a number ≥ 0, got -1"),
    ("--timeout=nan", "--timeout: expected a number > 0, got nan"),
])
def test_a_bad_value_gets_one_line_naming_the_flag_and_what_it_takes(flag: str, takes: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([flag])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"atoll bench kueue: {takes} (atoll bench kueue --help lists the options)"]






def test_kueues_arm_asks_its_tas_and_atolls_arm_asks_a_profile() -> None:
    tas = _workload("tas", "w1", 2, 4, "1250m", required=True)["spec"]["podSets"][0]
    atoll = _workload("atoll", "w1", 2, 4, "1250m", required=False)["spec"]["podSets"][0]
    assert tas["topologyRequest"] == {"required": RACK} and "topologyRequest" not in atoll
    assert atoll["template"]["metadata"]["annotations"] == {vocabulary.PROFILE: "elastic"}
    assert tas["count"] == atoll["count"] == 4
    assert tas["template"]["spec"] == atoll["template"]["spec"]


def test_retry_survives_a_loaded_apiserver_and_counts_a_landed_create(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("admission.cli._bench_kueue.time.sleep", slept.append)
    answers: Iterator[Exception | str] = iter([ApiError("busy", status=429), ApiError("no answer", status=0), "ok"])

    def call() -> str:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    assert _retry(call) == "ok" and slept == [0.5, 1.0]
    landed = iter([ApiError("no answer", status=0), ApiError("exists", status=409)])
    assert _retry(lambda: (_ for _ in ()).throw(next(landed)), create=True) is None  # the first create had landed
    with pytest.raises(ApiError, match="invalid"):  # a bad body is not retried
        _retry(lambda: (_ for _ in ()).throw(ApiError("invalid", status=422)))
    with pytest.raises(ApiError, match="exists"):  # a 409 on the first try is a real conflict
        _retry(lambda: (_ for _ in ()).throw(ApiError("exists", status=409)), create=True)
    slept.clear()
    with pytest.raises(ApiError):
        _retry(lambda: (_ for _ in ()).throw(ApiError("down", status=503)))
    assert slept == [0.5, 1.0, 2.0, 4.0]  # RETRIES tries, then the error


def test_the_runner_finishes_the_eviction_of_a_preempted_workload_as_a_jobs_controller_would() -> None:
    now = "2026-01-01T00:00:10Z"
    evicted = {"metadata": {"name": "w1", "namespace": "bench-atoll", "generation": 1, "resourceVersion": "7"},
               "status": {"admission": {"clusterQueue": "atoll-cq-1"},
                          "admissionChecks": [{"name": "atoll-topology", "state": "Pending"}],
                          "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "lastTransitionTime": "t0"},
                                         {"type": "Evicted", "status": "True", "reason": "Preempted", "lastTransitionTime": "t1"},
                                         {"type": "Preempted", "status": "True", "reason": "InCohortReclamation", "lastTransitionTime": "t1"}]}}
    out = _eviction_finished(evicted, now)
    assert out is not None and "admission" not in out["status"]
    conds = {c["type"]: c for c in out["status"]["conditions"]}
    assert conds["QuotaReserved"]["status"] == "False" and conds["QuotaReserved"]["lastTransitionTime"] == now
    assert conds["Evicted"] == evicted["status"]["conditions"][1]  # Kueue's own conditions are kept
    assert out["metadata"]["resourceVersion"] == "7"  # a conditional write: a changed Workload is refused
    assert out["status"]["admissionChecks"] == evicted["status"]["admissionChecks"]
    admitted = {**evicted, "status": {**evicted["status"], "conditions": [*evicted["status"]["conditions"],
                                                                          {"type": "Admitted", "status": "True", "reason": "Admitted"}]}}
    assert {c["type"]: c["status"] for c in _eviction_finished(admitted, now)["status"]["conditions"]}["Admitted"] == "False"
    running = {**evicted, "status": {**evicted["status"], "conditions": evicted["status"]["conditions"][:1]}}
    assert _eviction_finished(running, now) is None  # not evicted: nothing to finish
    released = {**evicted, "status": {"conditions": [{**evicted["status"]["conditions"][0], "status": "False"},
                                                     *evicted["status"]["conditions"][1:]]}}
    assert _eviction_finished(released, now) is None  # its eviction is already finished
    finished = {**evicted, "status": {**evicted["status"], "conditions": [*evicted["status"]["conditions"],
                                                                          {"type": "Finished", "status": "True"}]}}
    assert _eviction_finished(finished, now) is None


def test_the_wait_for_kwok_nodes_grows_with_the_pool_beyond_kueues_640() -> None:
    from admission.cli._bench_kueue import nodes_ready_seconds

    assert nodes_ready_seconds(64) == nodes_ready_seconds(640) == 300.0
    assert nodes_ready_seconds(2000) == pytest.approx(300.0 + 0.15 * 1360 * 2)
    assert nodes_ready_seconds(2000) > 600  # the 4,000 nodes of a 2,000-node run were not all Ready at 300 s on a loaded machine


@pytest.mark.apiserver
def test_ready_nodes_lose_the_condition_taints_the_node_lifecycle_controller_is_late_to_lift(kube_client: Any) -> None:
    from admission.cli._bench_kueue import CONDITION_TAINTS, _wait_nodes_ready
    from admission.kube import NODES, KubePort

    port = KubePort(kube_client)
    keep = {"key": "bench.example.com/keep", "value": "yes", "effect": "NoSchedule"}
    for name, ready in (("bench-untaint-a", "True"), ("bench-untaint-b", "True")):
        port.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"bench-untaint": "yes"}},
                            "spec": {"taints": [{"key": CONDITION_TAINTS[0], "effect": "NoSchedule"},  # as the apiserver puts on a new node
                                              *([{"key": CONDITION_TAINTS[1], "effect": "NoExecute"}, keep] if name.endswith("b") else [])]}})
        node = port.get(NODES, name)
        node["status"] = {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "ready",
                                          "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        port.replace(NODES, node, subresource="status")
    with pytest.raises(TimeoutError, match=r"2 Ready, 1 untainted \(taints left: \{'bench.example.com/keep': 1\}\)"):
        _wait_nodes_ready(port, 1, seconds=8.0, selector="bench-untaint=yes")  # one taint is not the bench's to lift
    assert [t["key"] for t in port.get(NODES, "bench-untaint-b")["spec"]["taints"]] == [keep["key"]]
    assert not port.get(NODES, "bench-untaint-a")["spec"].get("taints")
    port.patch(NODES, "bench-untaint-b", {"spec": {"taints": None}})
    _wait_nodes_ready(port, 1, seconds=8.0, selector="bench-untaint=yes")  # both Ready, neither tainted: it returns


def test_the_bench_loads_no_test_infrastructure_until_it_runs() -> None:
    """Importing the command (and the whole CLI) leaves ``tests`` unloaded: only a run that
    starts the control plane reaches for a clone's tests/envtest."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, admission.cli, admission.cli._bench_kueue; "
            "print(sorted(m for m in sys.modules if m == 'tests' or m.startswith('tests.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]", out.stdout


def test_outside_a_clone_the_bench_says_where_to_run_it_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tests.envtest", None)  # what an installed package without tests/ finds: no module
    assert main(["--nodes=1", "--workloads=1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("atoll bench kueue: ") and "run it from the root of a clone" in err[0], err




def test_the_control_arm_asks_no_topology_and_no_profile() -> None:
    podset = _workload("instant", "w1", 0, 2, "500m", required=True)["spec"]["podSets"][0]
    assert "topologyRequest" not in podset and "annotations" not in podset["template"]["metadata"]
    assert podset["count"] == 2


def _listed(state: str, *conditions: str) -> dict[str, Any]:
    return {"metadata": {"name": "w1", "namespace": "bench-instant", "uid": "u1", "resourceVersion": "9"},
            "status": {"admissionChecks": [{"name": "bench-instant", "state": state}],
                       "conditions": [{"type": c, "status": "True"} for c in conditions]}}


def test_the_control_check_answers_a_pending_entry_ready_at_once_and_nothing_else() -> None:
    from admission.cli._bench_kueue_instant import INSTANT_CHECK, answer

    body = answer(_listed("Pending"), "listed", 0.0)
    assert body is not None and body["status"]["admissionChecks"] == [
        {"name": INSTANT_CHECK, "state": "Ready", "message": "answered at once", "lastTransitionTime": "1970-01-01T00:00:00Z"}]
    assert "resourceVersion" not in body["metadata"] and body["metadata"]["uid"] == "u1"  # it always lands
    assert answer(_listed("Pending"), "reserved", 0.0) is None  # no quota yet
    assert answer(_listed("Pending", "QuotaReserved"), "reserved", 0.0) is not None
    for done in (_listed("Ready"), _listed("Retry"), _listed("Pending", "Finished"), _listed("Pending", "QuotaReserved", "Evicted"),
                 {"metadata": {"name": "w1"}, "status": {"admissionChecks": [{"name": "atoll-topology", "state": "Pending"}]}}):
        assert answer(done, "listed", 0.0) is None


def test_a_bad_control_check_mode_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--control-check=soon"])
    assert exc.value.code == 2 and "--control-check" in capsys.readouterr().err


def test_kueue_feature_gates_are_read_as_named_booleans_and_a_bad_item_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    from admission.cli._bench_kueue import feature_gates

    assert feature_gates("WorkloadRequestUseMergePatch=true, TopologyAwareScheduling=False") == {
        "WorkloadRequestUseMergePatch": True, "TopologyAwareScheduling": False}
    assert feature_gates(None) == feature_gates("") == {}
    assert main(["--kueue-feature-gates=WorkloadRequestUseMergePatch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'WorkloadRequestUseMergePatch' is not Name=true or Name=false" in err[0]


def test_the_table_names_the_control_checks_ratio_and_atolls_over_it(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from admission.cli import _bench_kueue
    from admission.cli._bench_kueue import CLASSES
    from admission.cli._bench_kueue_figures import row

    seen: dict[str, Any] = {}

    def run(*_args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.update(kwargs)
        rows = []
        for arm, tta, versions in (("tas", 1.0, 2.0), ("atoll", 2.3, 5.2), ("instant", 2.2, 5.3)):
            key = f"bench-{arm}/w00000"
            rows.append({**row(arm, {key: 0.0}, {key: tta}, {key: "small"}, [c[0] for c in CLASSES], {key: 0.5}),
                         "versions_to_admission": versions})
        return {"rows": rows, "tta_ratio": 2.3, "control_ratio": 2.2, "atoll_over_control": 1.045, "control_check": "listed",
                "decide_before_quota": False, "not_created": 0, "nodes_per_arm": 64, "queues_per_arm": 3, "rate_per_s": 10.0,
                "creates_s": 4.0, "create_workers": 16, "write_workers": 4, "load_before": [1.0], "load_after": [2.0], "cores": 2,
                "kueue_workload_controller": {"workers": 10, "queue_wait_ms": 5.0, "reconcile_ms": 3.0}}

    monkeypatch.setattr(_bench_kueue, "run_bench", run)
    assert main(["--nodes=64", "--workloads=40", "--control-check=listed", "--kueue-feature-gates=WorkloadRequestUseMergePatch=true"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert seen["control_check"] == "listed"
    assert seen["kueue_config"] == {"featureGates": {"VisibilityOnDemand": False, "WorkloadRequestUseMergePatch": True}}
    assert [line.split(" | ")[0] for line in out[1:4]] == ["tas", "atoll", "instant"] and out[3].endswith(" | 5.3")
    assert "control check (listed) / kueue-tas mean time to admission: 2.2; atoll / control check: 1.045" in out


def test_control_only_without_a_control_check_gets_one_line_naming_both_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--control-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--control-only needs --control-check listed|reserved" in err[0]


@pytest.mark.parametrize(("ratio", "not_created", "admitted", "code"), [
    (1.2, 0, 40, 1),  # Atoll's mean time to admission over the goal
    (1.1, 0, 40, 0),  # at the goal
    (0.9, 0, 40, 0),
    (None, 0, 40, 1),  # an arm admitted nothing: no ratio
    (0.9, 1, 40, 1),  # a create failed
    (0.9, 0, 39, 1),  # an arm left a Workload unadmitted
])
def test_the_exit_code_judges_the_ratio_against_the_goal_and_every_workload_admitted(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ratio: float | None, not_created: int, admitted: int,
        code: int) -> None:
    """The judging of a finished run, without running Kueue: the run's summary is given."""
    import json

    from admission.cli import _bench_kueue

    def run(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        return {"tta_ratio": ratio, "not_created": not_created,
                "rows": [{"arm": "tas", "workloads": 40, "admitted": 40}, {"arm": "atoll", "workloads": 40, "admitted": admitted}]}

    monkeypatch.setattr(_bench_kueue, "run_bench", run)
    assert main(["--workloads=40", "--goal-ratio=1.1", "--format=json"]) == code
    out = json.loads(capsys.readouterr().out)
    assert out["goal_ratio"] == 1.1 and out["goal_met"] is (code == 0)

"""``atoll bench kueue`` without a control plane: bad sizes get one line, the table's figures
come from the create and admission times, and the Workloads are what each arm asks of Kueue."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from admission import vocabulary
from admission.cli._bench_kueue import RACK, _eviction_finished, _retry, _row, _workload, main
from admission.kube.errors import ApiError


@pytest.mark.parametrize("flag", ["--nodes=0", "--workloads=0", "--queues=0", "--rate=0"])
def test_bad_sizes_get_one_line_naming_the_flags(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nodes, --workloads and --queues must be ≥ 1 and --rate > 0" in err[0]



@pytest.mark.parametrize("flag", ["--write-workers=-1", "--write-workers=33"])
def test_a_bad_write_worker_count_gets_one_line_naming_the_flag(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--write-workers must be between 0 and 32" in err[0]

def test_the_row_counts_time_to_admission_from_create_and_leaves_the_unadmitted_out() -> None:
    created = {"bench-tas/w0": 10.0, "bench-tas/w1": 11.0, "bench-tas/w2": 12.0, "bench-atoll/w0": 10.0}
    admitted = {"bench-tas/w0": 10.5, "bench-tas/w1": 12.5, "bench-atoll/w0": 30.0}
    classes = {"bench-tas/w0": "small", "bench-tas/w1": "large", "bench-tas/w2": "small", "bench-atoll/w0": "small"}
    row = _row("tas", created, admitted, classes)
    assert (row["workloads"], row["admitted"]) == (3, 2)
    assert row["tta_mean_ms"] == 1000.0 and row["tta_max_ms"] == 1500.0
    assert row["tta_small_ms"] == 500.0 and row["tta_large_ms"] == 1500.0 and row["tta_medium_ms"] is None
    assert row["admissions_per_s"] == round(2 / 2.5, 2)  # first create 10.0 to last admission 12.5


def test_kueues_arm_asks_its_tas_and_atolls_arm_asks_a_profile() -> None:
    tas = _workload("tas", "w1", 2, 4, "1250m", required=True)["spec"]["podSets"][0]
    atoll = _workload("atoll", "w1", 2, 4, "1250m", required=False)["spec"]["podSets"][0]
    assert tas["topologyRequest"] == {"required": RACK} and "topologyRequest" not in atoll
    assert atoll["template"]["metadata"]["annotations"] == {vocabulary.PROFILE: "elastic"}
    assert tas["count"] == atoll["count"] == 4
    assert tas["template"]["spec"] == atoll["template"]["spec"]


def test_the_row_splits_time_to_admission_into_kueues_and_atolls_stages() -> None:
    created = {"bench-atoll/w0": 10.0, "bench-atoll/w1": 20.0}
    reserved = {"bench-atoll/w0": 10.1, "bench-atoll/w1": 20.3}
    ready = {"bench-atoll/w0": 10.4}  # w1's check never turned Ready: it is left out of the stages that need it
    admitted = {"bench-atoll/w0": 10.6}
    row = _row("atoll", created, admitted, {"bench-atoll/w0": "small", "bench-atoll/w1": "small"}, reserved, ready)
    assert row["create_to_reserved_ms"] == 200.0  # (100 + 300) / 2
    assert row["reserved_to_ready_ms"] == 300.0 and row["ready_to_admitted_ms"] == 200.0
    assert row["reserved_to_admitted_ms"] == 500.0
    assert _row("tas", {}, {}, {})["reserved_to_ready_ms"] is None


def test_p99_is_the_tail_of_time_to_admission() -> None:
    created = {f"bench-tas/w{i}": 0.0 for i in range(100)}
    admitted = {k: (10.0 if k == "bench-tas/w99" else 0.1) for k in created}
    row = _row("tas", created, admitted, dict.fromkeys(created, "small"))
    assert row["tta_p50_ms"] == 100.0 and row["tta_p99_ms"] > 100.0 and row["tta_max_ms"] == 10000.0


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

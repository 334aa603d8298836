"""``atoll run``: flags and environment become settings; the whole process (leader election,
watches, decisions, metrics) runs against the real apiserver and stops cleanly."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from admission.cli._run import build_settings, build_webhook_settings, configure_logging, main, parser
from admission.cli._yields import main as yields
from admission.controller import DecisionRecord, Recorder
from tests.admission.fabric import Fabric


def test_flags_win_over_environment() -> None:
    env = {"ATOLL_NAMESPACE": "gpu-system", "ATOLL_CONFIGMAP": "from-env", "ATOLL_METRICS_PORT": "9090", "ATOLL_LEADER_ELECT": "false"}
    s = build_settings(parser(env).parse_args(["--configmap", "from-flag"]))
    assert (s.config.namespace, s.config.configmap, s.serve.metrics_port, s.leader.enabled) == ("gpu-system", "from-flag", 9090, False)
    s = build_settings(parser({}).parse_args(["--admission-check", "*"]))
    assert s.kueue.admission_check is None and s.config.configmap == "atoll-policies" and s.leader.enabled


def test_ports_take_zero_for_any_free_port_and_off_for_none_and_bind_to_loopback_outside_a_pod(capsys: pytest.CaptureFixture[str]) -> None:
    s = build_settings(parser({}).parse_args(["--metrics-port", "0", "--health-port", "off"]))
    assert (s.serve.metrics_port, s.serve.health_port, s.serve.bind_address) == (0, None, "127.0.0.1")
    s = build_settings(parser({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "ATOLL_METRICS_PORT": "off"}).parse_args([]))
    assert (s.serve.metrics_port, s.serve.bind_address) == (None, "0.0.0.0")
    assert build_settings(parser({}).parse_args(["--bind-address", "0.0.0.0"])).serve.bind_address == "0.0.0.0"
    with pytest.raises(SystemExit):
        parser({}).parse_args(["--metrics-port", "70000"])
    assert "70000 is not a port: give 1-65535, 0 for any free port, or off" in capsys.readouterr().err


def test_credentials_that_do_not_load_are_one_line_naming_the_source_and_the_fix(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    assert main(["--kubeconfig", str(missing), "--metrics-port", "off", "--health-port", "off"]) == 2
    assert capsys.readouterr().err == (f"atoll run: cannot load cluster credentials ({missing}): no such file; "
                                       "give a kubeconfig file with --kubeconfig or $KUBECONFIG\n")
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    assert main(["--kubeconfig", str(broken), "--metrics-port", "off", "--health-port", "off"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"atoll run: cannot load cluster credentials ({broken}): not valid YAML at line 2, column 1: " in err
    assert yields(["--kubeconfig", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"atoll yields: cannot load cluster credentials ({missing}): no such file; give a kubeconfig")


@pytest.mark.parametrize("level", ["warning", "error"])
def test_decision_records_are_written_whatever_the_log_level(level: str, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(level)
    try:
        structlog.get_logger("atoll.test").info("filtered out")
        out = io.StringIO()
        Recorder(out).record(DecisionRecord(decision_id="d-1", time="2026-05-01T12:00:00Z", workload="train", namespace="team-a",
                                            uid="u-1", local_queue="team-a/research", cluster_queue="gpu-cq", flavor="gb200",
                                            profile="strict", workload_class="", outcome="admit", check_state="Ready", message="placed"))
    finally:
        structlog.reset_defaults()
    assert "filtered out" not in capsys.readouterr().err  # the level filter is on...
    record = json.loads(out.getvalue())
    assert (record["event"], record["workload"], record["outcome"]) == ("decision", "train", "admit")  # ...and records pass it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def atoll_run(fabric: Fabric, apiserver: Any, *flags: str) -> Iterator[None]:
    """``atoll run`` on the fabric's check in a thread for the block; it must then stop with 0."""
    stop = threading.Event()
    result: list[int] = []
    argv = ["--kubeconfig", str(apiserver.kubeconfig_path), "--namespace", fabric.ns, "--admission-check", fabric.check, *flags]
    runner = threading.Thread(target=lambda: result.append(main(argv, stop=stop)), daemon=True)
    runner.start()
    try:
        yield
    finally:
        stop.set()
        runner.join(30)
        structlog.reset_defaults()
    assert result == [0]


def submit_until_decided(fabric: Fabric, name: str) -> str:
    fabric.submit(name, [("main", 2, 4)])
    deadline = time.monotonic() + 60
    while fabric.entry(name)["state"] == "Pending" and time.monotonic() < deadline:
        time.sleep(0.1)
    return str(fabric.entry(name)["state"])


@pytest.mark.apiserver
@pytest.mark.parametrize("leader", [True, False])
def test_run_decides_and_serves_metrics(fabric: Fabric, apiserver: Any, leader: bool) -> None:
    fabric.install()
    metrics_port, health_port = free_port(), free_port()
    with atoll_run(fabric, apiserver, "--metrics-port", str(metrics_port), "--health-port", str(health_port),
                   "--identity", "test-replica", "--leader-elect" if leader else "--no-leader-elect"):
        assert submit_until_decided(fabric, "train") == "Ready"
        text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert 'atoll_decisions_total{outcome="admit"} 1.0' in text
        assert ("atoll_leader 1.0" in text) or not leader
        assert httpx.get(f"http://127.0.0.1:{health_port}/readyz", timeout=5).status_code == 200


@pytest.mark.apiserver
def test_run_at_log_level_error_still_writes_every_decision_record(fabric: Fabric, apiserver: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fabric.install()
    with atoll_run(fabric, apiserver, "--metrics-port", "0", "--health-port", "0", "--no-leader-elect", "--log-level", "error"):
        assert submit_until_decided(fabric, "train") == "Ready"
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    assert [(r["event"], r["workload"], r["check_state"]) for r in records] == [("decision", "train", "Ready")]
    assert '"starting"' not in captured.err  # info lines are filtered at this level


@pytest.mark.parametrize("seconds", [1, 5, 10, 30])
def test_one_webhook_api_call_with_its_retries_ends_before_the_webhook_timeout(seconds: int) -> None:
    s = build_webhook_settings(parser({"ATOLL_WEBHOOK_TIMEOUT_SECONDS": str(seconds)}).parse_args([]))
    retry = s.api_retry()
    assert s.timeout_seconds == seconds and len(retry.backoffs) == 2
    assert retry.worst_case_seconds <= 0.8 * seconds + 1e-9
    assert 3 * retry.request_timeout >= 0.75 * retry.worst_case_seconds  # most of it goes to the attempts, not to waiting


def test_the_span_cost_defaults_are_the_simulators_and_flags_change_them_or_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    cost = build_settings(parser({}).parse_args([])).cost
    assert (cost.link_model, cost.comm_fraction, cost.overlap) == ("calibrated", 0.1, 0.0)
    cost = build_settings(parser({"ATOLL_COST_OVERLAP": "0.5"}).parse_args(["--link-model", "flat-ring", "--cost-comm-fraction", "0.2"])).cost
    assert (cost.link_model, cost.comm_fraction, cost.overlap) == ("flat-ring", 0.2, 0.5)
    for flag, value in (("--cost-comm-fraction", "1.5"), ("--cost-overlap", "half"), ("--link-model", "mesh")):
        with pytest.raises(SystemExit):
            parser({}).parse_args([flag, value])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag in err[0] and repr(value) in err[0], err



def test_write_workers_default_to_serial_the_flag_and_variable_set_them_and_bad_counts_are_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert build_settings(parser({}).parse_args([])).decisions.write_workers == 0
    assert build_settings(parser({"ATOLL_WRITE_WORKERS": "4"}).parse_args([])).decisions.write_workers == 4
    assert build_settings(parser({"ATOLL_WRITE_WORKERS": "4"}).parse_args(["--write-workers", "8"])).decisions.write_workers == 8
    for value in ("-1", "33", "many"):
        with pytest.raises(SystemExit):
            parser({}).parse_args(["--write-workers", value])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--write-workers" in err[0] and repr(value) in err[0], err


def test_deciding_before_quota_is_off_by_default_the_flags_and_variables_set_it_and_bad_values_are_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    d = build_settings(parser({}).parse_args([])).decisions
    assert (d.decide_before_quota, d.before_quota_hold_seconds, d.before_quota_depth, d.before_quota_settle_seconds) == (False, 30.0, 2, 1.0)
    d = build_settings(parser({"ATOLL_DECIDE_BEFORE_QUOTA": "true", "ATOLL_BEFORE_QUOTA_HOLD": "12.5",
                               "ATOLL_BEFORE_QUOTA_SETTLE": "0.25"}).parse_args([])).decisions
    assert (d.decide_before_quota, d.before_quota_hold_seconds, d.before_quota_settle_seconds) == (True, 12.5, 0.25)
    assert build_settings(parser({}).parse_args(["--before-quota-settle", "0"])).decisions.before_quota_settle_seconds == 0.0
    d = build_settings(parser({"ATOLL_DECIDE_BEFORE_QUOTA": "true"}).parse_args(["--no-decide-before-quota", "--before-quota-depth", "4"])).decisions
    assert (d.decide_before_quota, d.before_quota_depth) == (False, 4)
    for flag, value in (("--before-quota-hold", "0"), ("--before-quota-hold", "soon"), ("--before-quota-depth", "0"),
                        ("--before-quota-depth", "65"), ("--before-quota-settle", "-1"), ("--before-quota-settle", "soon")):
        with pytest.raises(SystemExit):
            parser({}).parse_args([flag, value])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag in err[0] and repr(value) in err[0], err


def test_parking_follows_each_profile_unless_the_flag_or_variable_overrides_it_and_a_bad_variable_is_refused(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def park(env: dict[str, str], *argv: str) -> bool | None:
        return build_settings(parser(env).parse_args(list(argv))).decisions.park_waiting

    assert park({}) is None and park({"ATOLL_PARK_WAITING": "profile"}) is None
    assert park({"ATOLL_PARK_WAITING": "true"}) is True and park({"ATOLL_PARK_WAITING": "false"}) is False
    assert park({}, "--park-waiting") is True and park({"ATOLL_PARK_WAITING": "true"}, "--no-park-waiting") is False
    monkeypatch.setenv("ATOLL_PARK_WAITING", "yes")
    assert main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ATOLL_PARK_WAITING='yes'" in err[0] and "true, false or profile" in err[0], err


def test_a_giver_comes_back_on_any_event_unless_the_fit_flag_is_given() -> None:
    assert build_settings(parser({}).parse_args([])).decisions.quota_yield_back_when_fits is False
    assert build_settings(parser({}).parse_args(["--quota-yield-back-when-fits"])).decisions.quota_yield_back_when_fits is True


def test_givers_take_turns_only_when_the_in_turn_flag_is_given() -> None:
    def in_turn(*argv: str) -> bool:
        return build_settings(parser({}).parse_args(list(argv))).decisions.quota_yield_in_turn

    assert in_turn() is False
    assert in_turn("--quota-yield-in-turn") is True
    assert build_settings(parser({}).parse_args(["--quota-yield-in-turn"])).decisions.quota_yield_back_when_fits is False  # that flag alone


def test_the_quota_yield_bound_defaults_to_twelve_hours_and_bad_values_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_settings(parser({}).parse_args([])).decisions.quota_yield_max_seconds == 43200.0
    assert build_settings(parser({"ATOLL_QUOTA_YIELD_MAX_SECONDS": "900"}).parse_args([])).decisions.quota_yield_max_seconds == 900.0
    for value in ("0", "-5", "inf", "long"):
        with pytest.raises(SystemExit):
            parser({}).parse_args(["--quota-yield-max-seconds", value])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--quota-yield-max-seconds" in err[0] and repr(value) in err[0], err


def test_the_turn_lead_is_off_by_default_the_flag_and_variable_set_it_and_bad_values_are_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    def lead(env: dict[str, str], *argv: str) -> float | None:
        return build_settings(parser(env).parse_args(list(argv))).decisions.quota_yield_turn_lead_seconds

    assert lead({}) is None
    assert lead({}, "--quota-yield-turn-lead-seconds", "3600") == 3600.0 and lead({}, "--quota-yield-turn-lead-seconds", "0") == 0.0
    assert lead({"ATOLL_QUOTA_YIELD_TURN_LEAD_SECONDS": "900"}) == 900.0
    assert lead({"ATOLL_QUOTA_YIELD_TURN_LEAD_SECONDS": "900"}, "--quota-yield-turn-lead-seconds", "60") == 60.0
    for env, argv, value in (({}, ["--quota-yield-turn-lead-seconds", "-5"], "-5"), ({}, ["--quota-yield-turn-lead-seconds", "inf"], "inf"),
                             ({}, ["--quota-yield-turn-lead-seconds", "soon"], "soon"),
                             ({"ATOLL_QUOTA_YIELD_TURN_LEAD_SECONDS": "soon"}, [], "soon")):
        with pytest.raises(SystemExit):
            parser(env).parse_args(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--quota-yield-turn-lead-seconds" in err[0] and repr(value) in err[0], err


def test_the_webhook_timeout_flag_wins_and_out_of_range_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    args = parser({"ATOLL_WEBHOOK_TIMEOUT_SECONDS": "7"}).parse_args(["--webhook-timeout-seconds", "12"])
    assert build_webhook_settings(args).timeout_seconds == 12
    assert main(["--webhook-timeout-seconds", "31", "--kubeconfig", "/nonexistent"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["atoll run: --webhook-timeout-seconds: expected a number ≤ 30, got 31"], err  # plain words, not pydantic's
    assert main(["--webhook-port", "-3", "--kubeconfig", "/nonexistent"]) == 2
    assert capsys.readouterr().err == "atoll run: --webhook-port: expected a number ≥ 0, got -3\n"


def test_the_webhook_counts_the_accelerator_resources_it_is_given_and_refuses_a_bad_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_webhook_settings(parser({}).parse_args([])).resources() == "nvidia.com/gpu"
    args = parser({"ATOLL_ACCELERATOR_RESOURCES": "amd.com/gpu"}).parse_args(["--accelerator-resources", "amd.com/gpu, habana.ai/gaudi"])
    assert build_webhook_settings(args).resources() == ("nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi")
    env = parser({"ATOLL_ACCELERATOR_RESOURCES": "amd.com/gpu"}).parse_args([])
    assert build_webhook_settings(env).resources() == ("nvidia.com/gpu", "amd.com/gpu")
    assert main(["--accelerator-resources", "AMD/gpu", "--kubeconfig", "/nonexistent"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("atoll run: --accelerator-resources: 'AMD/gpu' is not an accelerator resource name")


def _health(port: int, path: str) -> tuple[int, str]:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)
    except httpx.TransportError as exc:
        return 0, str(exc)
    return r.status_code, r.text.strip()


def _until(check: Any, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.apiserver
def test_two_replicas_are_both_ready_and_only_the_leader_answers_leader(fabric: Fabric, apiserver: Any) -> None:
    """Two ``atoll run`` replicas on one Lease: ``/readyz`` is 200 on both once their caches sync
    (the standby's watches serve), ``/leader`` only on the one that holds the Lease; when it stops,
    the other takes over and answers ``/leader``."""
    fabric.install()
    ports = {name: free_port() for name in ("a", "b")}
    with contextlib.ExitStack() as both:
        a = contextlib.ExitStack()
        both.enter_context(a)
        a.enter_context(atoll_run(fabric, apiserver, "--metrics-port", "off", "--health-port", str(ports["a"]), "--identity", "replica-a",
                                  "--leader-elect"))
        assert _until(lambda: _health(ports["a"], "/leader")[0] == 200)
        both.enter_context(atoll_run(fabric, apiserver, "--metrics-port", "off", "--health-port", str(ports["b"]), "--identity", "replica-b",
                                     "--leader-elect"))
        assert _until(lambda: _health(ports["b"], "/readyz") == (200, "standby: caches synced"))
        assert _health(ports["a"], "/readyz") == (200, "leader: caches synced")
        assert _health(ports["b"], "/leader") == (503, "standby: another replica leads")
        assert _health(ports["a"], "/leader") == (200, "leader: deciding")
        assert submit_until_decided(fabric, "train") == "Ready"
        a.close()  # replica A stops (and must exit 0); B takes the Lease
        assert _health(ports["a"], "/readyz")[0] == 0  # A's endpoints went with it
        assert _until(lambda: _health(ports["b"], "/leader") == (200, "leader: deciding"), 90)
        assert _health(ports["b"], "/readyz") == (200, "leader: caches synced")

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
from typing import Any

import httpx
import pytest
import structlog

from admission.cli._run import build_settings, build_webhook_settings, configure_logging, main, parser
from admission.controller import DecisionRecord, Recorder
from tests.admission.fabric import Fabric


def test_flags_win_over_environment() -> None:
    env = {"ATOLL_NAMESPACE": "gpu-system", "ATOLL_CONFIGMAP": "from-env", "ATOLL_METRICS_PORT": "9090", "ATOLL_LEADER_ELECT": "false"}
    s = build_settings(parser(env).parse_args(["--configmap", "from-flag"]))
    assert (s.config.namespace, s.config.configmap, s.serve.metrics_port, s.leader.enabled) == ("gpu-system", "from-flag", 9090, False)
    s = build_settings(parser({}).parse_args(["--admission-check", "*"]))
    assert s.kueue.admission_check is None and s.config.configmap == "atoll-policies" and s.leader.enabled


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


def test_the_webhook_timeout_flag_wins_and_out_of_range_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    args = parser({"ATOLL_WEBHOOK_TIMEOUT_SECONDS": "7"}).parse_args(["--webhook-timeout-seconds", "12"])
    assert build_webhook_settings(args).timeout_seconds == 12
    assert main(["--webhook-timeout-seconds", "31", "--kubeconfig", "/nonexistent"]) == 2
    assert "timeout_seconds" in capsys.readouterr().err

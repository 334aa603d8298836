"""What ``atoll bench kueue``'s times turn into: each arm's row and stages, when Atoll began each
decision, and Kueue's Workload controller's figures."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from admission.cli._bench_kueue_figures import BEFORE_QUOTA_KINDS, before_quota_counts, decision_starts, row, workload_controller_figures
from admission.controller import DECISION_EVENT

CLASS_NAMES = ("small", "medium", "large")


def test_the_row_counts_time_to_admission_from_create_and_leaves_the_unadmitted_out() -> None:
    created = {"bench-tas/w0": 10.0, "bench-tas/w1": 11.0, "bench-tas/w2": 12.0, "bench-atoll/w0": 10.0}
    admitted = {"bench-tas/w0": 10.5, "bench-tas/w1": 12.5, "bench-atoll/w0": 30.0}
    classes = {"bench-tas/w0": "small", "bench-tas/w1": "large", "bench-tas/w2": "small", "bench-atoll/w0": "small"}
    out = row("tas", created, admitted, classes, CLASS_NAMES)
    assert (out["workloads"], out["admitted"]) == (3, 2)
    assert out["tta_mean_ms"] == 1000.0 and out["tta_max_ms"] == 1500.0
    assert out["tta_small_ms"] == 500.0 and out["tta_large_ms"] == 1500.0 and out["tta_medium_ms"] is None
    assert out["admissions_per_s"] == round(2 / 2.5, 2)  # first create 10.0 to last admission 12.5


def test_the_row_splits_time_to_admission_into_kueues_and_atolls_stages() -> None:
    created = {"bench-atoll/w0": 10.0, "bench-atoll/w1": 20.0}
    reserved = {"bench-atoll/w0": 10.1, "bench-atoll/w1": 20.3}
    ready = {"bench-atoll/w0": 10.4}  # w1's check never turned Ready: it is left out of the stages that need it
    admitted = {"bench-atoll/w0": 10.6}
    out = row("atoll", created, admitted, {"bench-atoll/w0": "small", "bench-atoll/w1": "small"}, CLASS_NAMES, reserved, ready)
    assert out["create_to_reserved_ms"] == 200.0  # (100 + 300) / 2
    assert out["reserved_to_ready_ms"] == 300.0 and out["ready_to_admitted_ms"] == 200.0
    assert out["reserved_to_admitted_ms"] == 500.0
    assert out["reserved_to_decided_ms"] is None  # no decision records given
    decided = {"bench-atoll/w0": 10.15}  # Atoll began its decision 50 ms after the reservation was seen
    out = row("atoll", created, admitted, {"bench-atoll/w0": "small", "bench-atoll/w1": "small"}, CLASS_NAMES, reserved, ready, decided)
    assert out["reserved_to_decided_ms"] == pytest.approx(50.0) and out["decided_to_ready_ms"] == pytest.approx(250.0)
    assert row("tas", {}, {}, {})["reserved_to_ready_ms"] is None


def test_the_wait_for_kueue_to_list_atolls_check_on_a_reserved_workload_is_split_from_atolls_own() -> None:
    created, reserved, admitted = {"bench-atoll/w0": 10.0}, {"bench-atoll/w0": 10.1}, {"bench-atoll/w0": 12.0}
    listed = {"bench-atoll/w0": 11.1}  # Kueue's Workload controller added the check entry 1 s after the reservation
    decided, ready = {"bench-atoll/w0": 11.12}, {"bench-atoll/w0": 11.3}
    out = row("atoll", created, admitted, {"bench-atoll/w0": "small"}, CLASS_NAMES, reserved, ready, decided, listed)
    assert out["reserved_to_listed_ms"] == pytest.approx(1000.0) and out["listed_to_decided_ms"] == pytest.approx(20.0)
    assert out["reserved_to_decided_ms"] == pytest.approx(1020.0)


def test_workloads_decided_before_quota_are_counted_apart_from_the_stages_after_the_reservation() -> None:
    created = {"bench-atoll/w0": 10.0, "bench-atoll/w1": 10.0}
    ready = {"bench-atoll/w0": 10.2, "bench-atoll/w1": 11.3}  # w0: Ready before its reservation
    reserved = {"bench-atoll/w0": 11.0, "bench-atoll/w1": 11.0}
    admitted = {"bench-atoll/w0": 11.0, "bench-atoll/w1": 11.5}  # w0: admitted in the reservation's own event
    out = row("atoll", created, admitted, dict.fromkeys(created, "small"), CLASS_NAMES, reserved, ready)
    assert (out["ready_before_reserved"], out["admitted_on_reservation"]) == (1, 1)
    assert out["reserved_to_ready_ms"] == pytest.approx(300.0) and out["ready_to_admitted_ms"] == pytest.approx(200.0)  # w1 alone
    assert out["reserved_to_admitted_ms"] == pytest.approx(250.0)  # both: (0 + 500) / 2


def test_p99_is_the_tail_of_time_to_admission() -> None:
    created = {f"bench-tas/w{i}": 0.0 for i in range(100)}
    admitted = {k: (10.0 if k == "bench-tas/w99" else 0.1) for k in created}
    out = row("tas", created, admitted, dict.fromkeys(created, "small"), CLASS_NAMES)
    assert out["tta_p50_ms"] == 100.0 and out["tta_p99_ms"] > 100.0 and out["tta_max_ms"] == 10000.0


def _record(name: str, time: str, latency_ms: float, state: str = "Ready") -> str:
    return json.dumps({"event": DECISION_EVENT, "namespace": "bench-atoll", "workload": name, "time": time,
                       "latency_ms": latency_ms, "check_state": state})


def test_a_decision_starts_at_its_records_time_less_its_latency_on_the_bench_clock() -> None:
    epoch = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp()
    wall = epoch - 100.0  # the bench's monotonic clock reads 100.0 at that wall time
    lines = [
        _record("w0", "2026-01-01T00:00:00.500Z", 200.0),  # began at 00:00:00.300: monotonic 100.3
        "not a record: a line cut short by the controller's exit {",
        json.dumps({"event": "something else", "namespace": "bench-atoll", "workload": "w0"}),
        _record("w1", "2026-01-01T00:00:01.000Z", 0.0, state="Retry"),  # a Retry does not make the check Ready
        _record("w2", "2026-01-01T00:00:01.000Z", 100.0),  # its first Ready, before it was evicted
        _record("w2", "2026-01-01T00:00:03.000Z", 100.0),  # its last Ready before admission: this one
        _record("w2", "2026-01-01T00:00:09.000Z", 100.0),  # after it was admitted: not what admitted it
    ]
    starts = decision_starts(lines, {"bench-atoll/w0": 101.0, "bench-atoll/w2": 103.5}, wall)
    assert set(starts) == {"bench-atoll/w0", "bench-atoll/w2"}
    assert starts["bench-atoll/w0"] == pytest.approx(100.3) and starts["bench-atoll/w2"] == pytest.approx(102.9)


def test_kueues_workload_controller_figures_come_from_its_metrics_and_leave_other_controllers_out() -> None:
    text = """# TYPE controller_runtime_max_concurrent_reconciles gauge
controller_runtime_max_concurrent_reconciles{controller="workload_controller"} 10
controller_runtime_max_concurrent_reconciles{controller="job"} 5
# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{controller="workload_controller",name="workload_controller",le="+Inf"} 4
workqueue_queue_duration_seconds_sum{controller="workload_controller",name="workload_controller"} 2.0
workqueue_queue_duration_seconds_count{controller="workload_controller",name="workload_controller"} 4
workqueue_queue_duration_seconds_sum{controller="job",name="job"} 99.0
workqueue_queue_duration_seconds_count{controller="job",name="job"} 1
# TYPE controller_runtime_reconcile_time_seconds histogram
controller_runtime_reconcile_time_seconds_sum{controller="workload_controller"} 0.3
controller_runtime_reconcile_time_seconds_count{controller="workload_controller"} 3
"""
    assert workload_controller_figures(text) == {"workers": 10, "queue_wait_ms": 500.0, "reconcile_ms": 100.0, "reconciles": 3}
    assert workload_controller_figures("")["queue_wait_ms"] is None


def test_the_entry_listed_before_the_reservation_is_counted_and_timed_from_the_create() -> None:
    created = {"bench-atoll/a": 0.0, "bench-atoll/b": 0.0}
    reserved = {"bench-atoll/a": 0.5, "bench-atoll/b": 0.2}
    first_listed = {"bench-atoll/a": 0.1, "bench-atoll/b": 0.3}  # a: listed before its reservation; b: after
    r = row("atoll", created, {"bench-atoll/a": 1.0, "bench-atoll/b": 1.0}, {"bench-atoll/a": "small", "bench-atoll/b": "small"},
            reserved=reserved, first_listed=first_listed)
    assert r["listed_before_reserved"] == 1 and r["create_to_first_listed_ms"] == pytest.approx(200.0)


def test_the_counts_of_decisions_before_quota_come_from_atoll_runs_counter_and_read_0_when_absent() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from admission.controller._metrics import Metrics

    m = Metrics(CollectorRegistry())
    m.before_quota.labels("decided").inc(3)
    m.before_quota.labels("retry-released").inc()
    counts = before_quota_counts(generate_latest(m.registry).decode())
    assert counts == {**dict.fromkeys(BEFORE_QUOTA_KINDS, 0.0), "decided": 3.0, "retry-released": 1.0}
    assert before_quota_counts("") == dict.fromkeys(BEFORE_QUOTA_KINDS, 0.0)

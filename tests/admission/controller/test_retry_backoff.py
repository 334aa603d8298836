"""Transient API failures are retried on the settings' backoff list (Retry-After obeyed, attempt
n/N logged, the last error re-raised); nothing sleeps for real. The controller's worker never
sleeps on a retry: failed writes and failed re-reads requeue the Workload on the decision
backoff, measured on the injected clock; a write refused with 409 is decided again at once."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from admission.controller import Controller, DecisionSettings, KueueSettings, Settings, Verdict
from admission.kube import NODES, WORKLOADS, ApiRetrySettings, KubePort, ManualClock, Obj, Resource, errors
from policies import ProfilesDocument
from tests.admission.fabric import Fabric


class Flaky:
    """Fails with the given errors, in order, then answers."""

    def __init__(self, *failures: errors.ApiError) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


def test_transient_errors_are_retried_on_the_backoff_list() -> None:
    slept: list[float] = []
    call = Flaky(errors.ServerError("boom", status=503), errors.NetworkError("reset"))
    with capture_logs() as logs:
        assert errors.retry(call, operation="get x", backoffs=(0.25, 0.5, 1.0), sleep=slept.append) == "ok"
    assert call.calls == 3 and slept == [0.25, 0.5]
    assert [entry["attempt"] for entry in logs] == ["1/4", "2/4"]


def test_retry_after_is_obeyed_and_capped() -> None:
    slept: list[float] = []
    call = Flaky(errors.TooManyRequests("slow down", status=429, retry_after=7.0),
                 errors.TooManyRequests("slow down", status=429, retry_after=500.0))
    errors.retry(call, operation="list", backoffs=(0.1, 0.1, 0.1), max_retry_after=30.0, sleep=slept.append)
    assert slept == [7.0, 30.0]


def test_the_last_error_is_re_raised() -> None:
    slept: list[float] = []
    last = errors.ServerError("still down", status=500)
    call = Flaky(errors.ServerError("down", status=500), errors.ServerError("down", status=500), last)
    with capture_logs() as logs, pytest.raises(errors.ServerError) as raised:
        errors.retry(call, operation="apply", backoffs=(1.0, 2.0), sleep=slept.append)
    assert raised.value is last and slept == [1.0, 2.0]
    assert logs[-1]["attempt"] == "3/3" and logs[-1]["log_level"] == "error"


@pytest.mark.parametrize("err", [errors.NotFound("x", status=404), errors.Conflict("x", status=409), errors.Invalid("x", status=422),
                                 errors.Forbidden("x", status=403)])
def test_permanent_errors_are_not_retried(err: errors.ApiError) -> None:
    slept: list[float] = []
    call = Flaky(err)
    with pytest.raises(type(err)):
        errors.retry(call, operation="x", backoffs=(1.0,), sleep=slept.append)
    assert call.calls == 1 and slept == []


def test_unreachable_apiserver_is_retried_then_reported() -> None:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:1"  # nothing listens on port 1
    cfg.verify_ssl = False
    slept: list[float] = []
    port = KubePort(client.ApiClient(cfg), ApiRetrySettings(backoffs=(0.1, 0.2), request_timeout=2), sleep=slept.append)
    with pytest.raises(errors.NetworkError) as raised:
        port.get(NODES, "n1")
    assert slept == [0.1, 0.2] and "get nodes n1" in str(raised.value) and raised.value.__cause__ is not None


class FailingPort:
    """Lists answer empty; every apply fails with a server error."""

    def __init__(self) -> None:
        self.applies = 0

    def apply(self, *args: Any, **kw: Any) -> Any:
        self.applies += 1
        raise errors.ServerError("etcd timeout", status=500)


def test_failed_write_requeues_on_the_decision_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    settings = Settings(kueue=KueueSettings(admission_check="c"), decisions=DecisionSettings(error_requeue_seconds=(5.0, 20.0)))
    ctrl = Controller(FailingPort(), settings=settings, clock=clock)  # type: ignore[arg-type]
    monkeypatch.setattr(ctrl, "_actionable", lambda obj: True)
    monkeypatch.setattr(ctrl, "evaluate", lambda obj, did: Verdict("admit", "ok", decision_id=did))
    ctrl.cache.profiles = ProfilesDocument()
    ctrl.cache.objects[WORKLOADS]["ns/w"] = {
        "metadata": {"name": "w", "namespace": "ns", "uid": "u"}, "status": {"admissionChecks": [{"name": "c", "state": "Pending"}]}}
    ctrl._check_names = frozenset({"c"})
    ctrl._queue["ns/w"] = None
    ctrl.process()
    assert ctrl.pending() == [] and ctrl.port.applies == 1  # type: ignore[attr-defined]
    clock.advance(4.9)
    assert ctrl.process() == [] and ctrl.port.applies == 1  # type: ignore[attr-defined]
    clock.advance(0.2)
    ctrl.process()
    assert ctrl.port.applies == 2  # type: ignore[attr-defined]
    clock.advance(19)
    ctrl.process()
    assert ctrl.port.applies == 2  # type: ignore[attr-defined]
    clock.advance(1.1)
    ctrl.process()
    assert ctrl.port.applies == 3  # type: ignore[attr-defined]
    assert ctrl.metrics.registry.get_sample_value("atoll_api_write_failures_total", {"error": "ServerError"}) == 3


def unreachable(slept: list[float]) -> KubePort:
    """A real adapter whose apiserver refuses every connection; retries would sleep into ``slept``."""
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:1"
    cfg.verify_ssl = False
    return KubePort(client.ApiClient(cfg), ApiRetrySettings(backoffs=(1.0, 2.0, 4.0), request_timeout=2), sleep=slept.append)


def queued_controller(port: Any, monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> Controller:
    settings = Settings(kueue=KueueSettings(admission_check="c"), decisions=DecisionSettings(error_requeue_seconds=(5.0, 20.0)))
    ctrl = Controller(port, settings=settings, clock=clock)
    monkeypatch.setattr(ctrl, "_actionable", lambda obj: True)
    monkeypatch.setattr(ctrl.decider, "evaluate", lambda obj, did, now: Verdict("admit", "ok", decision_id=did))
    ctrl.cache.profiles = ProfilesDocument()
    ctrl.cache.objects[WORKLOADS]["ns/w"] = {
        "metadata": {"name": "w", "namespace": "ns", "uid": "u", "resourceVersion": "1"},
        "status": {"admissionChecks": [{"name": "c", "state": "Pending"}]}}
    ctrl._check_names = frozenset({"c"})
    ctrl._queue["ns/w"] = None
    return ctrl


def test_a_failed_write_is_requeued_not_slept_on_in_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    clock = ManualClock()
    ctrl = queued_controller(unreachable(slept), monkeypatch, clock)
    ctrl.process()
    assert slept == []  # one attempt, no backoff inside the worker
    assert ctrl.pending() == [] and ctrl._delayed == [(clock.monotonic() + 5.0, "ns/w")]
    assert ctrl.metrics.registry.get_sample_value("atoll_api_write_failures_total", {"error": "NetworkError"}) == 1


class ConflictThenUnreachable(KubePort):
    """The apply is refused with 409 (the Workload changed); the re-read finds no apiserver."""

    def apply(self, resource: Resource, obj: Obj, **kw: Any) -> Obj:
        raise errors.Conflict("the object has been modified", status=409)


def test_a_failed_re_read_after_a_conflict_is_requeued_not_slept_on(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    clock = ManualClock()
    base = unreachable(slept)
    port = ConflictThenUnreachable(base.api, base.settings, sleep=slept.append)
    ctrl = queued_controller(port, monkeypatch, clock)
    ctrl.process()
    assert slept == []
    assert ctrl.pending() == [] and [key for _, key in ctrl._delayed] == ["ns/w"]


@pytest.mark.apiserver
def test_a_write_refused_with_409_is_decided_again_at_once_ahead_of_the_queue(fabric: Fabric) -> None:
    """A changed before its decision was written; it is decided again on its current state
    before B, which was queued behind it, as the controller's docstring says."""
    fabric.install()
    fabric.submit("a", [("main", 1, 4)])
    fabric.submit("b", [("main", 1, 4)])
    ctrl = fabric.controller()
    ctrl.sync()
    assert ctrl.pending() == [f"{fabric.ns}/a", f"{fabric.ns}/b"]
    fabric.custom.patch_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", fabric.ns, "workloads", "a",
                                                 {"metadata": {"labels": {"touched": "yes"}}})  # the cached copy is stale now
    ctrl.process()
    records = fabric.decision_records()
    assert [r["workload"] for r in records] == ["a", "b"]
    assert fabric.entry("a")["state"] == fabric.entry("b")["state"] == "Ready"
    assert ctrl.metrics.registry.get_sample_value("atoll_api_write_failures_total", {"error": "Conflict"}) == 1


def test_a_failed_admission_check_condition_is_retried_later_not_slept_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from admission.kube import ADMISSION_CHECKS, CONFIGMAPS

    slept: list[float] = []
    clock = ManualClock()
    ctrl = queued_controller(unreachable(slept), monkeypatch, clock)
    ctrl._synced.update({CONFIGMAPS, ADMISSION_CHECKS})
    ctrl._refresh_active()
    assert slept == [] and ctrl._active_retry_at == clock.monotonic() + 5.0
    ctrl._refresh_active()
    assert slept == [] and ctrl._active_retry_at == clock.monotonic() + 20.0  # the error backoff's next step

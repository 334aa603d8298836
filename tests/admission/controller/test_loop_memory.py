"""The worker's own bookkeeping stays bounded: failure and conflict counts leave with their
Workload, and a Workload waits on the error backoff with one delayed entry however often it fails."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import Controller, DecisionSettings, KueueSettings, Settings, Verdict
from admission.kube import WORKLOADS, ManualClock, WatchEvent, errors
from admission.queue import Need
from policies import ProfilesDocument


class FailingPort:
    """Every apply fails with a server error."""

    def __init__(self) -> None:
        self.applies = 0

    def apply(self, *args: Any, **kw: Any) -> Any:
        self.applies += 1
        raise errors.ServerError("etcd timeout", status=500)


def workload(name: str, rv: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": str(rv)},
            "status": {"admissionChecks": [{"name": "c", "state": "Pending"}]}}


def failing_controller(monkeypatch: pytest.MonkeyPatch, *names: str) -> Controller:
    settings = Settings(kueue=KueueSettings(admission_check="c"), decisions=DecisionSettings(error_requeue_seconds=(5.0, 20.0)))
    ctrl = Controller(FailingPort(), settings=settings, clock=ManualClock())  # type: ignore[arg-type]
    monkeypatch.setattr(ctrl, "_actionable", lambda obj: True)
    monkeypatch.setattr(ctrl.decider, "evaluate", lambda obj, did, now: Verdict("admit", "ok", decision_id=did))
    ctrl.cache.profiles = ProfilesDocument()
    ctrl._check_names = frozenset({"c"})
    for name in names:
        ctrl._apply_event(WORKLOADS, WatchEvent("ADDED", workload(name)))
    return ctrl


def test_failure_counts_leave_with_a_deleted_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    ctrl = failing_controller(monkeypatch, "a", "b")
    ctrl.process()
    assert set(ctrl._failures) == {"ns/a", "ns/b"}
    ctrl._apply_event(WORKLOADS, WatchEvent("DELETED", workload("a", 2)))
    assert set(ctrl._failures) == {"ns/b"}
    ctrl._apply_list(WORKLOADS, [])  # a relist that no longer has it
    assert not ctrl._failures and not ctrl._conflicts


def test_a_workload_a_relist_no_longer_has_leaves_every_book_as_if_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its delete event was missed (the watch was down): parked, waiting for quota, queued, it
    must not stay in the waiting room or the quota yield's waiters until something else happens."""
    ctrl = failing_controller(monkeypatch, "a", "b")
    ctrl.parking.room.park("ns/a", Need("f", None, 1, 8))
    ctrl.quota_yield.waiters["ns/a"] = None
    ctrl._apply_list(WORKLOADS, [workload("b")])
    assert "ns/a" not in ctrl.parking and "ns/a" not in ctrl.quota_yield.waiters and "ns/a" not in ctrl._queue
    assert "ns/b" in ctrl._queue


def test_a_workload_failing_again_and_again_keeps_one_delayed_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    ctrl = failing_controller(monkeypatch, "a")
    for rv in range(2, 40):  # each change queues it again before its delayed retry is due
        ctrl.process()
        ctrl._apply_event(WORKLOADS, WatchEvent("MODIFIED", workload("a", rv)))
    assert ctrl.port.applies >= 38  # type: ignore[attr-defined]
    assert [key for _, key in ctrl._delayed] == ["ns/a"]
    ctrl.clock.advance(5.1)  # type: ignore[attr-defined]
    ctrl.process()
    assert ctrl.port.applies >= 39 and len(ctrl._delayed) == 1  # type: ignore[attr-defined]

"""The worker's own bookkeeping stays bounded: failure and conflict counts leave with their
Workload, and a Workload waits on the error backoff with one delayed entry however often it fails;
on the real apiserver, once every Workload is gone no book of the leader or of a standby names one."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from admission.controller import Controller, DecisionSettings, KueueSettings, Settings, Verdict
from admission.kube import WORKLOADS, ManualClock, WatchEvent, errors
from admission.queue import Need
from policies import ProfilesDocument
from tests.admission.controller.test_queue_state import loses_quota, reserving, submit
from tests.admission.fabric import GROUP, VERSION, Fabric, run


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


def test_a_deleted_workload_leaves_its_span_price_and_its_lent_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Priced while it waited (wait or span), or reactivated because its placement fit
    (``lendParked``), then deleted before its next decision: neither book keeps it."""
    ctrl = failing_controller(monkeypatch, "a", "b")
    for key in ("ns/a", "ns/b"):
        ctrl.queue_state.outlook.spans.put(key, ("stamp",), 1.2)
        ctrl.decider.lent.add(key)
    ctrl._apply_event(WORKLOADS, WatchEvent("DELETED", workload("a", 2)))
    ctrl._apply_list(WORKLOADS, [])  # "b": a relist that no longer has it
    assert len(ctrl.queue_state.outlook.spans) == 0 and not ctrl.decider.lent


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


_SKIP = frozenset({"port", "writes", "informers", "_inbox", "clock", "recorder", "metrics", "events"})
"""What a controller holds that is not its books: the API, its threads, its outputs."""


def naming(root: Any, needles: set[str]) -> list[str]:
    """Where the books reachable from ``root`` (Atoll's own objects, and the containers they hold)
    still name one of ``needles`` (a Workload's key or uid) in a key, member or item."""
    seen: set[int] = set()
    out: list[str] = []

    def names(x: Any) -> bool:
        return isinstance(x, str) and any(n in x for n in needles)

    def walk(obj: Any, path: str) -> None:
        if obj is None or isinstance(obj, (str, bytes, int, float, np.ndarray)) or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            items: list[tuple[Any, Any]] = list(obj.items())
        elif isinstance(obj, (set, frozenset, list, tuple)):
            items = list(enumerate(obj))
        elif (type(obj).__module__ or "").split(".")[0] in ("admission", "topology", "policies"):
            attrs = getattr(obj, "__dict__", None)
            if attrs is None:
                attrs = {s: getattr(obj, s, None) for c in type(obj).__mro__ for s in getattr(c, "__slots__", ())}
            items = [(k, v) for k, v in attrs.items() if k not in _SKIP]
        else:
            return
        for k, v in items:
            if names(k) or names(v):
                out.append(f"{path}[{k!r}]")
            walk(v, f"{path}[{k!r}]")

    walk(root, "controller")
    return out


@pytest.mark.apiserver
def test_once_every_workload_is_gone_no_book_of_the_leader_or_a_standby_names_one(fabric: Fabric) -> None:
    """Admitted, waiting with a reservation, without quota, finished, then deleted: every map kept
    per Workload by the worker, the cache, the ledger, the queue manager and the indexes the cache
    tells of each change drops it, on the leader and on a standby that only followed."""
    leader = reserving(fabric)
    standby = fabric.controller()
    standby.start(leading=False)
    try:
        assert standby.wait_synced(30)
        loses_quota(fabric, "gang", "preempted")
        run(leader)
        fabric.finish("full-0")
        submit(fabric, "late", 1)
        run(leader)
        items = fabric.custom.list_namespaced_custom_object(GROUP, VERSION, fabric.ns, "workloads")["items"]
        needles = {f"{fabric.ns}/{o['metadata']['name']}" for o in items} | {o["metadata"]["uid"] for o in items}
        for o in items:
            fabric.custom.delete_namespaced_custom_object(GROUP, VERSION, fabric.ns, "workloads", o["metadata"]["name"])
        run(leader)
        deadline = time.monotonic() + 30
        while any(k.startswith(f"{fabric.ns}/") for k in standby.cache.objects[WORKLOADS]) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        standby.stop()
    assert len(needles) == 12  # six Workloads
    assert naming(leader, needles) == []
    assert naming(standby, needles) == []

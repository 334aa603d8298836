"""The controller's own loop on the real apiserver: list, then watch from the list's version;
list again after 410 Gone; back off after errors; changes reach decisions without a relist.
Every wait is bounded."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from admission.controller import Controller, WatchSettings
from admission.kube import NODES, WORKLOADS, KubePort, Resource, errors
from tests.admission.fabric import Fabric

pytestmark = pytest.mark.apiserver


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class ScriptedPort:
    """The real adapter, with failures injected into chosen list/watch calls."""

    def __init__(self, real: KubePort, *, fail_list: dict[Resource, list[errors.ApiError]] | None = None,
                 fail_watch: dict[Resource, list[errors.ApiError]] | None = None) -> None:
        self.real = real
        self.fail_list = fail_list or {}
        self.fail_watch = fail_watch or {}
        self.lists: Counter[Resource] = Counter()
        self.watches: Counter[Resource] = Counter()

    def list(self, resource: Resource, **kw: Any) -> Any:
        self.lists[resource] += 1
        if self.fail_list.get(resource):
            raise self.fail_list[resource].pop(0)
        return self.real.list(resource, **kw)

    def watch(self, resource: Resource, rv: str, **kw: Any) -> Any:
        self.watches[resource] += 1
        if self.fail_watch.get(resource):
            raise self.fail_watch[resource].pop(0)
        return self.real.watch(resource, rv, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def fast(fabric: Fabric) -> Any:
    return fabric.settings().model_copy(update={"watch": WatchSettings(timeout_seconds=30, error_backoffs=(0.05, 0.1))})


def test_changes_flow_through_watches_to_decisions(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    ctrl.start()
    try:
        assert ctrl.wait_synced(30)
        fabric.submit("late-arrival", [("main", 2, 4)])
        assert wait_until(lambda: fabric.entry("late-arrival")["state"] == "Ready")
        fabric.set_profiles("profiles: {strict: {requiredLevel: a, preferredLevel: b}}\n")
        assert wait_until(lambda: ctrl.config_error is not None and "not both" in ctrl.config_error)
        beat = ctrl.heartbeat  # set at construction: only a later beat shows the worker is alive
        fabric.clock.advance(1.0)
        assert wait_until(lambda: ctrl.heartbeat > beat)
        threads = list(ctrl._threads)  # stop() empties the list: keep the threads to check them after
        assert "atoll-worker" in {t.name for t in threads} and all(t.is_alive() for t in threads)
    finally:
        ctrl.stop()
    assert threads and not any(t.is_alive() for t in threads)


def test_gone_relists_and_errors_back_off(fabric: Fabric) -> None:
    fabric.install()
    port = ScriptedPort(fabric.port, fail_list={NODES: [errors.ServerError("etcd leader changed", status=503)]},
                        fail_watch={WORKLOADS: [errors.Gone("too old resource version", status=410)]})
    ctrl = Controller(port, settings=fast(fabric), clock=fabric.clock)  # type: ignore[arg-type]
    ctrl.start()
    try:
        assert ctrl.wait_synced(30)
        fabric.submit("after-gone", [("main", 1, 4)])
        assert wait_until(lambda: fabric.entry("after-gone")["state"] == "Ready")
    finally:
        ctrl.stop()
    assert port.lists[WORKLOADS] == 2  # the expired watch made it list again
    assert port.lists[NODES] == 2  # the failed list was retried after a backoff


def active_condition(fabric: Fabric) -> dict[str, Any] | None:
    ac = fabric.custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "admissionchecks", fabric.check)
    return next((c for c in (ac.get("status") or {}).get("conditions") or [] if c["type"] == "Active"), None)


def test_a_warm_standby_watches_but_writes_and_decides_only_once_it_leads(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    ctrl.start(leading=False)
    try:
        assert ctrl.wait_synced(30)  # listed and watching before it leads: a takeover needs no relist
        fabric.submit("waits-for-its-leader", [("main", 1, 4)])
        key = f"{fabric.ns}/waits-for-its-leader"
        assert wait_until(lambda: key in ctrl.pending())  # its watch saw the Workload
        time.sleep(0.5)
        assert fabric.entry("waits-for-its-leader")["state"] == "Pending" and fabric.decision_records() == []
        assert active_condition(fabric) is None  # a standby writes nothing, not even the check's condition
        ctrl.lead()
        assert wait_until(lambda: fabric.entry("waits-for-its-leader")["state"] == "Ready")
        assert wait_until(lambda: (active_condition(fabric) or {}).get("status") == "True")
    finally:
        ctrl.stop()


class Deaf(ScriptedPort):
    """The real adapter whose watches and lists fail once ``deaf`` is set (the writes still work)."""

    deaf = False

    def list(self, resource: Resource, **kw: Any) -> Any:
        if self.deaf:
            raise errors.ServerError("watch cache lagging", status=503)
        return super().list(resource, **kw)

    def watch(self, resource: Resource, rv: str, **kw: Any) -> Any:
        if self.deaf:
            raise errors.ServerError("watch cache lagging", status=503)
        return super().watch(resource, rv, **kw)


def test_a_standby_that_takes_over_reads_the_workloads_its_watch_has_not_delivered_yet(fabric: Fabric) -> None:
    """The previous leader's last decision may not have come down the standby's watch yet: at
    takeover the standby reads the Workloads once, so it never hands out that decision's node."""
    fabric.install(nodes=False)
    fabric.add_node(0, 0, 0)  # one 4-GPU node
    fabric.submit("a", [("main", 1, 4)])
    fabric.submit("b", [("main", 1, 4)])
    port = Deaf(fabric.port)
    ctrl = Controller(port, settings=fast(fabric), clock=fabric.clock)  # type: ignore[arg-type]
    ctrl.start(leading=False)
    try:
        assert ctrl.wait_synced(30) and wait_until(lambda: len(ctrl.pending()) == 2)
        port.deaf = True
        ctrl.informers.close()  # nothing more comes down its watches
        old = fabric.controller()
        old.sync()
        old.reconcile(f"{fabric.ns}/b")  # the old leader's last decision: b on the only node
        assert fabric.entry("b")["state"] == "Ready" and fabric.entry("a")["state"] == "Pending"
        ctrl.lead()
        assert wait_until(lambda: fabric.entry("a")["state"] != "Pending", timeout=15)
        assert fabric.entry("a")["state"] == "Retry"  # it knew b holds the node
    finally:
        ctrl.stop()

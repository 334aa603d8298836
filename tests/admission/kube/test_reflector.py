"""The list-then-watch loop every cache runs, on the real apiserver: events after the list's
version and no relist; a relist after 410 Gone; back-off along the given delays after failures,
reset by a clean event; ``stop`` ends it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from admission.kube import NODES, KubePort, ListResult, Resource, WatchEvent, errors, reflect
from tests.kube_objects import node

pytestmark = pytest.mark.apiserver


def _until(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


class _Port:
    """The real adapter, failing the next watch calls with the errors queued in ``fail_watch``."""

    def __init__(self, real: KubePort) -> None:
        self.real = real
        self.fail_watch: list[Exception] = []
        self.lists = 0
        self.watch_versions: list[str] = []

    def list(self, resource: Resource, **kw: Any) -> ListResult:
        self.lists += 1
        return self.real.list(resource, **kw)

    def watch(self, resource: Resource, rv: str, **kw: Any) -> Any:
        self.watch_versions.append(rv)
        if self.fail_watch:
            raise self.fail_watch.pop(0)
        return self.real.watch(resource, rv, **kw)


class _Run:
    def __init__(self, port: _Port, backoffs: tuple[float, ...] = (0.05, 0.1)) -> None:
        self.listed: list[ListResult] = []
        self.events: list[WatchEvent] = []
        self.gone = 0
        self.errors: list[tuple[str, int, float]] = []
        self.stop = threading.Event()
        self.streams: dict[Resource, Any] = {}
        lock = threading.Lock()

        def failed(exc: Exception, attempt: int, delay: float) -> None:
            self.errors.append((type(exc).__name__, attempt, delay))

        def gone() -> None:
            self.gone += 1

        self.thread = threading.Thread(target=reflect, args=(port, NODES), daemon=True, kwargs={
            "on_list": self.listed.append, "on_event": self.events.append, "stop": self.stop, "backoffs": backoffs,
            "timeout_seconds": 30, "streams": self.streams, "lock": lock, "on_gone": gone, "on_error": failed})
        self.thread.start()

    def end(self) -> None:
        self.stop.set()
        for stream in list(self.streams.values()):
            stream.close()
        self.thread.join(10)
        assert not self.thread.is_alive(), "stop did not end the reflector"

    def names(self) -> list[str]:
        return [e.object["metadata"]["name"] for e in self.events if e.type == "ADDED"]


def _add_node(kube_client: Any, name: str) -> None:
    client.CoreV1Api(kube_client).create_node(node(name, {}))


def test_it_lists_then_streams_from_the_lists_version(kube_client: Any) -> None:
    port = _Port(KubePort(kube_client))
    _add_node(kube_client, "reflect-a")
    run = _Run(port)
    try:
        assert _until(lambda: bool(run.listed))
        assert "reflect-a" in {o["metadata"]["name"] for o in run.listed[0].items}
        _add_node(kube_client, "reflect-b")
        assert _until(lambda: "reflect-b" in run.names())
        assert "reflect-a" not in run.names()  # what the list had is not replayed as events
        assert port.lists == 1 and port.watch_versions[0] == run.listed[0].resource_version
    finally:
        run.end()


def test_410_gone_lists_again_and_failures_back_off_then_reset(kube_client: Any) -> None:
    port = _Port(KubePort(kube_client))
    port.fail_watch = [errors.ServerError("boom", status=500), errors.ServerError("boom", status=500), errors.Gone("expired", status=410)]
    run = _Run(port, backoffs=(0.05, 0.1))
    try:
        assert _until(lambda: port.lists == 2 and len(port.watch_versions) >= 4)
        assert [(a, d) for _, a, d in run.errors] == [(1, 0.05), (2, 0.1)]
        assert run.gone == 1
        _add_node(kube_client, "reflect-c")
        assert _until(lambda: "reflect-c" in run.names())
        port.fail_watch = [errors.ServerError("boom", status=500)]
        for s in list(run.streams.values()):
            s.close()  # the stream ends; the next watch fails once more
        assert _until(lambda: len(run.errors) == 3)
        assert run.errors[-1][1:] == (1, 0.05)  # the clean event reset the count
    finally:
        run.end()


def test_stop_during_a_back_off_ends_it_without_another_call(kube_client: Any) -> None:
    port = _Port(KubePort(kube_client))
    port.fail_watch = [errors.ServerError("boom", status=500)]
    run = _Run(port, backoffs=(30.0,))
    assert _until(lambda: len(run.errors) == 1)
    calls = len(port.watch_versions)
    run.end()
    assert len(port.watch_versions) == calls

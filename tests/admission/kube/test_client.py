"""``KubePort``'s ``deadline``: one budget across every attempt and wait of a call (the webhook's
whole review), with nothing listening so every attempt fails fast; and a status replace on the
real apiserver; and an answer that stalls mid-body, which must fail like any transport fault."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from kubernetes import client

from admission.kube import CONFIGMAPS, NODES, WORKLOADS, ApiRetrySettings, KubePort, errors
from admission.kube._client import server_timeout


def dead_port(**kw: object) -> KubePort:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed when the block ends: nothing listens there
    cfg = client.Configuration()
    cfg.host = f"https://127.0.0.1:{dead}"
    return KubePort(client.ApiClient(cfg), ApiRetrySettings(backoffs=(0.5, 0.5, 0.5), request_timeout=2.0), **kw)  # type: ignore[arg-type]


@pytest.fixture
def stalling_host() -> Iterator[str]:
    """A listener that answers every request with a status line and the start of a body, then
    stalls: the read timeout fires while the body is read, after the request itself returned."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_an_answer_that_stalls_mid_body_is_a_retried_network_error(stalling_host: str) -> None:
    cfg = client.Configuration()
    cfg.host = stalling_host
    slept: list[float] = []
    port = KubePort(client.ApiClient(cfg), ApiRetrySettings(backoffs=(0.1,), request_timeout=0.5), sleep=slept.append)
    with pytest.raises(errors.NetworkError, match="get nodes n1: the answer broke off"):
        port.get(NODES, "n1")
    assert slept == [0.1]  # retried once, like a refused connection


def test_a_spent_budget_sends_nothing() -> None:
    with pytest.raises(errors.OutOfTime, match="get nodes n1: not sent"):
        dead_port(deadline=lambda: 0.0).get(NODES, "n1")


def test_no_wait_starts_that_would_end_past_the_budget() -> None:
    slept: list[float] = []
    left = [0.8]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        left[0] -= seconds

    with pytest.raises(errors.OutOfTime, match="no retry"):
        dead_port(deadline=lambda: left[0], sleep=sleep).get(NODES, "n1")
    assert slept == [0.5]  # the second 0.5 s wait would have ended past the 0.8 s budget


def test_without_a_deadline_every_retry_runs() -> None:
    slept: list[float] = []
    with pytest.raises(errors.NetworkError):
        dead_port(sleep=slept.append).get(NODES, "n1")
    assert slept == [0.5, 0.5, 0.5]


@pytest.mark.apiserver
def test_replace_of_the_status_subresource_writes_status_alone_and_only_on_the_version_read(kube_client: Any, namespace: str) -> None:
    port = KubePort(kube_client)
    port.create(WORKLOADS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w", "namespace": namespace},
                            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                                "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}]}})
    read = port.get(WORKLOADS, "w", namespace)
    cond = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    body = {**read, "spec": {**read["spec"], "queueName": "other"}, "status": {"conditions": [cond]}}
    out = port.replace(WORKLOADS, body, subresource="status")
    assert [c["type"] for c in out["status"]["conditions"]] == ["QuotaReserved"]
    assert port.get(WORKLOADS, "w", namespace)["spec"]["queueName"] == "lq"  # the status subresource leaves the spec alone
    with pytest.raises(errors.Conflict):  # the version read is gone
        port.replace(WORKLOADS, body, subresource="status")


def test_an_attempts_timeout_reaches_the_server_in_whole_milliseconds_never_as_none() -> None:
    """``0s`` would tell the apiserver the client sets no deadline: a window under a millisecond
    still sends one."""
    assert server_timeout(0.8129) == "812ms"
    assert server_timeout(30.0) == "30000ms"
    assert server_timeout(0.0004) == "1ms"


def test_lists_and_gets_tell_the_server_their_attempts_deadline_and_watches_their_own_timeout(kube_client: Any, namespace: str) -> None:
    """A list or get that outlives its attempt would hold a server goroutine and its memory: the
    server ends it at the attempt's deadline (the ``timeout`` parameter, as on writes). A watch
    is long-running: the server ends it at ``timeoutSeconds``, and takes no ``timeout``."""
    port = KubePort(client.ApiClient(kube_client.configuration), ApiRetrySettings(request_timeout=2.0))
    sent: list[str] = []
    request = port.api.rest_client.request

    def recorded(method: str, url: str, *args: Any, **kw: Any) -> Any:
        sent.append(url)
        return request(method, url, *args, **kw)  # type: ignore[no-untyped-call]

    port.api.rest_client.request = recorded  # type: ignore[method-assign]
    name = "deadline-probe"
    client.CoreV1Api(kube_client).create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {"k": "v"}})  # type: ignore[arg-type]
    listed = port.list(CONFIGMAPS, namespace=namespace)
    assert [o["metadata"]["name"] for o in listed.items] == [name]  # the server took the parameter and answered
    assert port.get(CONFIGMAPS, name, namespace=namespace)["data"] == {"k": "v"}
    with closing(port.watch(CONFIGMAPS, listed.resource_version, namespace=namespace, timeout_seconds=1)) as watch:
        assert [e for e in watch if e.type != "BOOKMARK"] == []  # nothing changed: the server ends it after a second
    list_url, get_url, watch_url = sent
    assert "timeout=2000ms" in list_url and "limit=500" in list_url
    assert get_url.endswith(f"/configmaps/{name}?timeout=2000ms")
    assert "timeoutSeconds=1" in watch_url and "timeout=" not in watch_url.replace("timeoutSeconds=", "")

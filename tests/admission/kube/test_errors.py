"""Every API status maps to the most specific Atoll error, with the Status body kept and the
client's exception chained; real answers from a real apiserver map the same way."""

from __future__ import annotations

import json
from typing import Any

import pytest

from admission.kube import CONFIGMAPS, NODES, WORKLOADS, KubePort, KubeWatch, errors

STATUS_BODY = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "it went wrong", "reason": "Whatever", "code": 0}


@pytest.mark.parametrize(("status", "cls", "retryable"), [
    (400, errors.BadRequest, False),
    (401, errors.Unauthorized, False),
    (403, errors.Forbidden, False),
    (404, errors.NotFound, False),
    (409, errors.Conflict, False),
    (410, errors.Gone, False),
    (422, errors.Invalid, False),
    (429, errors.TooManyRequests, True),
    (500, errors.ServerError, True),
    (502, errors.ServerError, True),
    (503, errors.ServerError, True),
    (504, errors.ServerError, True),
    (0, errors.NetworkError, True),
    (418, errors.ApiError, False),
])
def test_each_status_maps_to_one_error(status: int, cls: type[errors.ApiError], retryable: bool) -> None:
    body = json.dumps({**STATUS_BODY, "code": status}).encode()
    err = errors.error_for_status(status, body, {}, operation="get nodes n1")
    assert type(err) is cls
    assert isinstance(err, errors.Retryable) is retryable
    assert err.status == status and err.reason == "Whatever" and err.body["message"] == "it went wrong"
    assert str(err).startswith(f"get nodes n1: HTTP {status} Whatever: it went wrong")


def test_messages_say_what_to_do() -> None:
    assert "ClusterRole" in str(errors.error_for_status(403, b"{}"))
    assert "kubeconfig" in str(errors.error_for_status(401, b"{}"))


def test_non_json_body_is_kept_as_text() -> None:
    err = errors.error_for_status(502, b"<html>bad gateway</html>", {})
    assert isinstance(err, errors.ServerError) and err.body == {"message": "<html>bad gateway</html>"}


@pytest.mark.parametrize(("header", "expected"), [("7", 7.0), ("0.5", 0.5), ("-3", 0.0), ("soon", None), (None, None)])
def test_retry_after_seconds(header: str | None, expected: float | None) -> None:
    assert errors.parse_retry_after(header) == expected


def test_retry_after_http_date() -> None:
    assert errors.parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412500.0) == pytest.approx(10.0)


def test_retry_after_only_on_retryable_errors() -> None:
    assert errors.error_for_status(429, b"{}", {"Retry-After": "3"}).retry_after == 3.0
    assert errors.error_for_status(503, b"{}", {"Retry-After": "4"}).retry_after == 4.0
    assert errors.error_for_status(409, b"{}", {"Retry-After": "4"}).retry_after is None


@pytest.mark.apiserver
def test_real_answers_map_and_chain(kube_client: Any, namespace: str) -> None:
    port = KubePort(kube_client)
    with pytest.raises(errors.NotFound) as nf:
        port.get(NODES, "no-such-node")
    assert nf.value.status == 404 and nf.value.reason == "NotFound" and nf.value.__cause__ is not None
    assert type(nf.value.__cause__).__name__ == "ApiException"

    port.create(CONFIGMAPS, {"metadata": {"name": "cm", "namespace": namespace}})
    with pytest.raises(errors.Conflict) as conflict:
        port.create(CONFIGMAPS, {"metadata": {"name": "cm", "namespace": namespace}})
    assert conflict.value.reason == "AlreadyExists"

    stale = port.get(CONFIGMAPS, "cm", namespace)
    port.replace(CONFIGMAPS, {**stale, "data": {"a": "1"}})
    with pytest.raises(errors.Conflict):  # the resourceVersion moved on
        port.replace(CONFIGMAPS, {**stale, "data": {"a": "2"}})

    bad = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w", "namespace": namespace},
           "spec": {"podSets": [{"name": "Main", "count": 1, "template": {"spec": {"containers": []}}}]}}
    with pytest.raises(errors.Invalid) as invalid:
        port.create(WORKLOADS, bad)
    assert invalid.value.status == 422 and "spec.podSets" in str(invalid.value)


class _Stream:
    """A watch response as urllib3 streams it: byte chunks that split lines anywhere."""

    def __init__(self, lines: list[dict[str, Any]]) -> None:
        data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        self.chunks = [data[i:i + 7] for i in range(0, len(data), 7)]

    def stream(self, amt: Any = None, decode_content: Any = None) -> Any:
        return iter(self.chunks)

    def release_conn(self) -> None:
        pass


class _Resp:
    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.response = _Stream(lines)


def test_watch_error_event_410_is_gone_and_events_parse_across_chunks() -> None:
    added = {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}}
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 1 (900)"}}
    seen = []
    with pytest.raises(errors.Gone) as raised:
        for event in KubeWatch(_Resp([added, gone]), "watch configmaps"):
            seen.append((event.type, event.object["metadata"]["name"]))
    assert seen == [("ADDED", "a")] and "too old resource version" in str(raised.value)


@pytest.mark.apiserver
def test_real_gone_from_a_compacted_version(apiserver: Any, kube_client: Any, namespace: str) -> None:
    """PodTemplates are served from etcd (no watch cache), so compaction makes old versions 410."""
    from admission.kube import Resource

    templates = Resource("", "v1", "podtemplates", "PodTemplate", True)
    port = KubePort(kube_client)

    def create(name: str) -> str:
        body = {"metadata": {"name": name, "namespace": namespace},
                "template": {"spec": {"containers": [{"name": "c", "image": "registry.example.com/x:1"}]}}}
        return str(port.create(templates, body)["metadata"]["resourceVersion"])

    rv = create("a")
    create("b")
    create("c")
    apiserver.compact_etcd()
    with pytest.raises(errors.Gone) as gone:
        list(port.watch(templates, rv, namespace=namespace, timeout_seconds=2))
    assert gone.value.status == 410 and "watch podtemplates" in str(gone.value)

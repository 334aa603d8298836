"""The real cluster port: the only module that imports the ``kubernetes`` client.

It uses the client for what it is good at (kubeconfig and in-cluster auth, TLS, connection
pooling) and speaks plain JSON over it, so every resource, built-in or Kueue's, goes through
one path: one error mapping, one retry loop, dicts in and out.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from admission.kube import errors
from admission.kube._port import ListResult, Obj, Resource, WatchEvent
from admission.kube._settings import ApiRetrySettings

__all__ = ["KubePort", "KubeWatch", "api_client_from_kubeconfig"]

_APPLY = "application/apply-patch+yaml"
_MERGE = "application/merge-patch+json"
_JSON = "application/json"


def api_client_from_kubeconfig(path: str | None) -> client.ApiClient:
    """A client from a kubeconfig file; without one, the in-cluster ServiceAccount, and outside a
    cluster the default kubeconfig (~/.kube/config), as kubectl would."""
    if path:
        api: client.ApiClient = config.new_client_from_config(config_file=path)  # type: ignore[no-untyped-call]
        return api
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        fallback: client.ApiClient = config.new_client_from_config()  # type: ignore[no-untyped-call]
        return fallback
    return client.ApiClient()


def _path(resource: Resource, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    if resource.namespaced and namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{resource.plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    if subresource:
        base += f"/{subresource}"
    return base


def _read(resp: Any, operation: str) -> bytes:
    """The answer's body. It is read after the status line, so a connection that breaks or stalls
    here (a read timeout mid-body) raises from urllib3, not from the request: it becomes a
    ``NetworkError`` like any other transport failure, retried and caught where those are, instead
    of escaping every ``except ApiError`` and ending the caller's thread."""
    try:
        data: bytes = resp.response.data
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise errors.NetworkError(f"{operation}: the answer broke off: {exc}") from exc
    return data


class KubeWatch:
    """One watch request; iterate for events, ``close()`` from any thread to end it."""

    def __init__(self, resp: Any, operation: str) -> None:
        self._resp = resp
        self._operation = operation
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        try:
            self._resp.response.shutdown()
        except Exception:  # noqa: BLE001 - closing a dead connection has nothing to report
            pass
        self._resp.response.release_conn()

    def __iter__(self) -> Iterator[WatchEvent]:
        buffer = bytearray()
        try:
            for chunk in self._resp.response.stream(amt=None, decode_content=False):
                buffer.extend(chunk)
                while (cut := buffer.find(b"\n")) >= 0:
                    line, buffer = bytes(buffer[:cut]), buffer[cut + 1:]
                    if line.strip():
                        yield self._event(line)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if self._closed.is_set():
                return
            raise errors.NetworkError(f"{self._operation}: stream broke: {exc}") from exc
        finally:
            self._resp.response.release_conn()

    def _event(self, line: bytes) -> WatchEvent:
        raw = json.loads(line)
        kind, obj = raw.get("type"), raw.get("object") or {}
        if kind == "ERROR":
            raise errors.error_for_status(int(obj.get("code") or 500), obj, operation=self._operation)
        return WatchEvent(kind, obj)


def server_timeout(seconds: float) -> str:
    """An attempt's timeout as the apiserver's ``timeout`` query parameter, as client-go sends its
    own: the server sets that deadline on the request from when it received it, and a write
    that has not reached storage by then (still in an admission webhook, say) ends there
    unapplied, instead of being applied for a client that gave up. Whole milliseconds, at least
    1 (``0s`` means none)."""
    return f"{max(int(seconds * 1000), 1)}ms"


class KubePort:
    """``ClusterPort`` over a ``kubernetes.client.ApiClient``; transient failures are retried on
    the settings' backoff list (watches are retried by their caller, which relists)."""

    def __init__(self, api: client.ApiClient, settings: ApiRetrySettings | None = None,
                 sleep: Callable[[float], None] | None = None, fence: Callable[[], float] | None = None,
                 budget: Callable[[], float] | None = None, deadline: Callable[[], float | None] | None = None) -> None:
        self.api = api
        self.settings = settings or ApiRetrySettings()
        self._sleep = sleep
        self.fence = fence
        """Asked before every attempt of a write: the seconds this replica may still write (its
        lease term's end, less a margin). The attempt's timeout is at most that; 0 or less refuses
        it with ``errors.Fenced``. So no attempt, retries included, is waited on past the term.
        Every attempt also tells the server its timeout (``server_timeout``), so the server ends
        a write it has not applied by then, even when the client's hang-up never reaches it."""
        self.budget = budget
        """Asked before every attempt of any non-watch call: the seconds left for it (the lease's
        renew deadline, for the elector's port); the attempt's timeout is at most that, and none
        is sent once it is spent (``errors.NetworkError``)."""
        self.deadline = deadline
        """Seconds left for the caller's whole operation (None: no bound), asked before every
        attempt and, unlike ``budget``, every wait between attempts: an attempt's timeout is at
        most that, and none starts, nor a wait past it, once it is spent (``errors.OutOfTime``).
        The webhook bounds a whole admission review this way, whatever calls it makes."""
        _no_silent_resend(api)

    def single_attempt(self) -> KubePort:
        """This port (same client, fence and budget) making one attempt per call: for a caller
        that retries on its own schedule instead of sleeping (the controller's worker)."""
        view = copy.copy(self)
        view.settings = self.settings.model_copy(update={"backoffs": ()})
        return view

    # ------------------------------------------------------------------ transport

    def _send(self, method: str, path: str, *, query: list[tuple[str, Any]] | None = None, body: Any = None,
              content_type: str | None = None, timeout: Any = None, operation: str) -> Any:
        headers = {"Accept": _JSON}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            m, url, hdrs, payload, _ = self.api.param_serialize(
                method=method, resource_path=path, query_params=query or [], header_params=headers, body=body,
                auth_settings=["BearerToken"])
            resp = self.api.rest_client.request(  # type: ignore[no-untyped-call]
                m, url, headers=hdrs, body=payload, _request_timeout=timeout or self.settings.request_timeout)
        except ApiException as exc:  # the client's own failures (TLS, bad config) arrive as status 0
            raise errors.error_for_status(exc.status or 0, exc.body or exc.reason, exc.headers, operation=operation) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise errors.NetworkError(f"{operation}: {exc}") from exc
        if not 200 <= resp.status < 300:
            body_bytes = _read(resp, operation)
            cause = ApiException(status=resp.status, reason=resp.reason)
            cause.body = body_bytes.decode("utf-8", "replace")
            cause.headers = dict(resp.headers or {})
            raise errors.error_for_status(resp.status, body_bytes, dict(resp.headers or {}), operation=operation) from cause
        return resp

    def _json(self, method: str, path: str, operation: str, **kwargs: Any) -> Obj:
        fence = self.fence if method != "GET" else None

        deadline = self.deadline

        def call() -> Obj:
            timeout = self.settings.request_timeout
            if fence is not None:
                window = fence()
                if window <= 0:
                    raise errors.Fenced(f"{operation}: not sent: this replica is not the leader (its lease term has lapsed)")
                timeout = min(timeout, window)
            if self.budget is not None:
                left = self.budget()
                if left <= 0:
                    raise errors.NetworkError(f"{operation}: not sent: its deadline has passed")
                timeout = min(timeout, left)
            whole = deadline() if deadline is not None else None
            if whole is not None:
                if whole <= 0:
                    raise errors.OutOfTime(f"{operation}: not sent: the time budget is spent")
                timeout = min(timeout, whole)
            query = [*(kwargs.get("query") or []), ("timeout", server_timeout(timeout))]
            resp = self._send(method, path, operation=operation, timeout=timeout, **{**kwargs, "query": query})
            out: Obj = json.loads(_read(resp, operation))
            return out

        sleep = self._sleep
        if deadline is not None:
            plain = sleep or time.sleep

            def sleep(seconds: float) -> None:
                left = deadline()
                if left is not None and left <= seconds:
                    raise errors.OutOfTime(f"{operation}: no retry: the time budget ends before the next attempt")
                plain(seconds)
        return errors.retry(call, operation=operation, backoffs=self.settings.backoffs,
                            max_retry_after=self.settings.max_retry_after,
                            **({"sleep": sleep} if sleep is not None else {}))

    # ------------------------------------------------------------------ ClusterPort

    def list(self, resource: Resource, *, namespace: str | None = None, field_selector: str | None = None,
             label_selector: str | None = None) -> ListResult:
        query: list[tuple[str, Any]] = [("fieldSelector", field_selector)] if field_selector else []
        if label_selector:
            query.append(("labelSelector", label_selector))
        path = _path(resource, namespace)
        items: list[Obj] = []
        cont = ""
        while True:
            page = self._json("GET", path, f"list {resource}", query=query + [("limit", 500)] + ([("continue", cont)] if cont else []))
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                return ListResult(items, str(meta.get("resourceVersion") or ""))

    def watch(self, resource: Resource, resource_version: str, *, namespace: str | None = None,
              field_selector: str | None = None, timeout_seconds: int = 300) -> KubeWatch:
        operation = f"watch {resource}"
        query: list[tuple[str, Any]] = [("watch", "true"), ("resourceVersion", resource_version),
                                        ("allowWatchBookmarks", "true"), ("timeoutSeconds", timeout_seconds)]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        resp = self._send("GET", _path(resource, namespace), query=query, operation=operation,
                          timeout=(self.settings.request_timeout, timeout_seconds + 30))
        return KubeWatch(resp, operation)

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        return self._json("GET", _path(resource, namespace, name), f"get {resource} {_key(namespace, name)}")

    def create(self, resource: Resource, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        return self._json("POST", _path(resource, meta.get("namespace")), f"create {resource} {_key(meta.get('namespace'), meta.get('name'))}",
                          body=obj, content_type=_JSON)

    def replace(self, resource: Resource, obj: Obj, *, subresource: str | None = None) -> Obj:
        meta = obj["metadata"]
        what = f"replace {resource}{'/' + subresource if subresource else ''} {_key(meta.get('namespace'), meta['name'])}"
        return self._json("PUT", _path(resource, meta.get("namespace"), meta["name"], subresource), what, body=obj, content_type=_JSON)

    def patch(self, resource: Resource, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        return self._json("PATCH", _path(resource, namespace, name), f"patch {resource} {_key(namespace, name)}",
                          body=patch, content_type=_MERGE)

    def apply(self, resource: Resource, obj: Obj, *, field_manager: str, subresource: str | None = None, force: bool = True) -> Obj:
        meta = obj["metadata"]
        query: list[tuple[str, Any]] = [("fieldManager", field_manager)] + ([("force", "true")] if force else [])
        what = f"apply {resource}{'/' + subresource if subresource else ''} {_key(meta.get('namespace'), meta['name'])}"
        return self._json("PATCH", _path(resource, meta.get("namespace"), meta["name"], subresource), what,
                          query=query, body=obj, content_type=_APPLY)


def _no_silent_resend(api: client.ApiClient) -> None:
    """urllib3 re-sends an idempotent request (GET, PUT) whose answer did not come, each time with
    a fresh timeout: a lease PUT could then land long after its attempt's timeout, and its
    retries bypass Atoll's own (logged, fenced, budgeted) loop. Connection failures, where
    nothing was sent, are still retried there; an answer that does not come is Atoll's to retry."""
    manager = api.rest_client.pool_manager
    if getattr(manager, "connection_pool_kw", {}).get("retries") is _RETRIES:
        return
    manager.connection_pool_kw["retries"] = _RETRIES
    manager.clear()  # pools made before now keep their own retries


_RETRIES = urllib3.Retry(total=3, connect=3, read=0, status=0, other=0, redirect=0, raise_on_status=False)


def _key(namespace: str | None, name: str | None) -> str:
    return f"{namespace}/{name}" if namespace else str(name)

"""Kubernetes API failures as Atoll errors, and the one retry loop for the transient ones.

    ApiError                 any failed API call: status, reason, message, Status body
    ├── BadRequest       400 the request itself is malformed (a bug in Atoll)
    ├── Unauthorized     401 credentials refused (token, kubeconfig)
    ├── Forbidden        403 RBAC denies the verb (Atoll's ClusterRole)
    ├── NotFound         404 the object is gone; callers usually skip it
    ├── Conflict         409 exists already, stale resourceVersion, field-manager conflict
    ├── Gone             410 a watch's resourceVersion was compacted: list again
    ├── Invalid          422 the schema refused what Atoll wrote (a bug, never retried)
    ├── Fenced               not sent: this replica's leadership lapsed (never retried)
    ├── OutOfTime            not sent: the caller's time budget is spent (never retried)
    └── Retryable            worth another attempt after a pause
        ├── TooManyRequests  429 (honours Retry-After)
        ├── ServerError      5xx (honours Retry-After)
        └── NetworkError     no HTTP answer: refused, reset, timeout, TLS

The adapter raises the most specific one with the client's exception as ``__cause__``.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import structlog

__all__ = [
    "ApiError",
    "BadRequest",
    "Conflict",
    "Fenced",
    "Forbidden",
    "Gone",
    "Invalid",
    "NetworkError",
    "NotFound",
    "OutOfTime",
    "Retryable",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "error_for_status",
    "parse_retry_after",
    "retry",
]

T = TypeVar("T")
_log = structlog.get_logger("atoll.api")


class ApiError(Exception):
    """A Kubernetes API call failed. ``status`` is the HTTP code, 0 when there was no answer."""

    hint = ""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", body: Mapping[str, Any] | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.body: Mapping[str, Any] = body or {}
        self.retry_after = retry_after


class Fenced(ApiError):
    """A write not sent because the replica may no longer write (its lease term ended or may have)."""


class OutOfTime(ApiError):
    """An attempt (or the wait before one) not made because the caller's whole budget is spent
    (an admission review must answer within the webhook's timeout)."""


class BadRequest(ApiError):
    """400: the server could not read the request."""


class Unauthorized(ApiError):
    """401: the credentials were refused."""

    hint = "check the token or kubeconfig (atoll run --kubeconfig, or the ServiceAccount in-cluster)"


class Forbidden(ApiError):
    """403: RBAC does not allow this verb on this resource."""

    hint = "grant the verb in Atoll's ClusterRole (helm/atoll/templates/rbac.yaml)"


class NotFound(ApiError):
    """404: the object (or the resource type, if its CRD is missing) does not exist."""


class Conflict(ApiError):
    """409: the object exists, was changed since it was read, or another manager owns the field."""


class Gone(ApiError):
    """410: the resourceVersion is older than the server keeps; list again, then watch."""


class Invalid(ApiError):
    """422: the object does not validate against the server's schema (the Kueue CRD)."""


class Retryable(ApiError):
    """A transient failure; the same call may succeed after a pause."""


class TooManyRequests(Retryable):
    """429: the apiserver's priority-and-fairness limits; wait Retry-After."""


class ServerError(Retryable):
    """5xx: the apiserver (or etcd, or a webhook) failed; try again."""


class NetworkError(Retryable):
    """No HTTP answer: connection refused or reset, timeout, TLS failure."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone, 422: Invalid, 429: TooManyRequests,
}


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _status_body(body: bytes | str | Mapping[str, Any] | None) -> Mapping[str, Any]:
    if isinstance(body, Mapping):
        return body
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        return {"message": text.strip()[:500]}
    return parsed if isinstance(parsed, dict) else {}


def error_for_status(status: int, body: bytes | str | Mapping[str, Any] | None = None, headers: Mapping[str, str] | None = None,
                     *, operation: str = "API call") -> ApiError:
    """The most specific error for an HTTP status and its Kubernetes Status body."""
    status_body = _status_body(body)
    reason = str(status_body.get("reason") or "")
    message = str(status_body.get("message") or reason or f"HTTP {status}")
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else (NetworkError if status == 0 else ApiError)
    retry_after = parse_retry_after((headers or {}).get("Retry-After")) if issubclass(cls, Retryable) else None
    text = f"{operation}: HTTP {status}{f' {reason}' if reason else ''}: {message}"
    if cls.hint:
        text += f" ({cls.hint})"
    return cls(text, status=status, reason=reason, body=status_body, retry_after=retry_after)


def retry(call: Callable[[], T], *, operation: str, backoffs: Sequence[float], max_retry_after: float = 60.0,
          sleep: Callable[[float], None] = time.sleep) -> T:
    """Run ``call``; after a ``Retryable`` failure wait the next backoff (or the server's
    Retry-After, capped at ``max_retry_after``) and try again, logging ``attempt n/N``.
    Other errors, and the last retryable one, propagate unchanged."""
    attempts = len(backoffs) + 1
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Retryable as err:
            if attempt == attempts:
                _log.error("api call failed, giving up", operation=operation, attempt=f"{attempt}/{attempts}", error=str(err))
                raise
            delay = min(err.retry_after, max_retry_after) if err.retry_after is not None else backoffs[attempt - 1]
            _log.warning("api call failed, retrying", operation=operation, attempt=f"{attempt}/{attempts}", delay_s=delay, error=str(err))
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover

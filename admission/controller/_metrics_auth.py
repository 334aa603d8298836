"""Who may read ``/metrics``: the bearer token of each scrape, checked as Kubernetes checks it.

As controller-runtime's secure metrics do: the token is authenticated by a ``TokenReview`` and
the user it names is authorized by a ``SubjectAccessReview`` for ``get`` on the non-resource URL
``/metrics`` (the chart grants it with a ClusterRole to bind to Prometheus' ServiceAccount).
Answers are kept for ``ttl`` seconds per token, so a scrape every few seconds costs the API server
two reviews a minute, not two per scrape; a refusal is kept as long, an API failure not at all.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable

import structlog

from admission.kube import ClusterPort, Resource
from admission.kube.errors import ApiError

__all__ = ["SUBJECT_ACCESS_REVIEWS", "TOKEN_REVIEWS", "MetricsAuthorizer"]

TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False)
SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False)
MAX_CACHED = 1024
"""Tokens whose answer is kept (all are dropped when it is passed)."""

_log = structlog.get_logger("atoll.metrics")


class MetricsAuthorizer:
    """``authorize(Authorization header)`` → (200, user) or (401 / 403 / 500, why)."""

    def __init__(self, port: ClusterPort, *, path: str = "/metrics", ttl: float = 30.0, clock: Callable[[], float] | None = None) -> None:
        self.port = port
        self.path = path
        self.ttl = ttl
        self._clock = clock or time.monotonic
        self._cache: dict[str, tuple[float, int, str]] = {}
        self._lock = threading.Lock()

    def __call__(self, header: str | None) -> tuple[int, str]:
        if not header or not header.lower().startswith("bearer ") or not header[7:].strip():
            return 401, "Unauthorized: send a bearer token (Authorization: Bearer <ServiceAccount token>)"
        token = header[7:].strip()
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        try:
            code, why = self._review(token)
        except ApiError as exc:
            _log.warning("metrics scrape not authorized: the review failed", error=str(exc))
            return 500, f"cannot review the token now: {exc}"
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = (now + self.ttl, code, why)
        return code, why

    def _review(self, token: str) -> tuple[int, str]:
        review = self.port.create(TOKEN_REVIEWS, {"apiVersion": TOKEN_REVIEWS.api_version, "kind": TOKEN_REVIEWS.kind,
                                                  "spec": {"token": token}})
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return 401, "Unauthorized: the token is not valid (TokenReview)" + (f": {status['error']}" if status.get("error") else "")
        user = status.get("user") or {}
        name = str(user.get("username", ""))
        spec = {"user": name, "groups": list(user.get("groups") or []), "uid": str(user.get("uid", "")),
                "extra": {k: list(v) for k, v in (user.get("extra") or {}).items()},
                "nonResourceAttributes": {"path": self.path, "verb": "get"}}
        sar = self.port.create(SUBJECT_ACCESS_REVIEWS, {"apiVersion": SUBJECT_ACCESS_REVIEWS.api_version,
                                                        "kind": SUBJECT_ACCESS_REVIEWS.kind, "spec": spec})
        if (sar.get("status") or {}).get("allowed"):
            return 200, name
        return 403, (f"Forbidden: {name} may not get {self.path} (bind it to the chart's <release>-metrics-reader "
                     f"ClusterRole, or any role with nonResourceURLs [{self.path}] verbs [get])")

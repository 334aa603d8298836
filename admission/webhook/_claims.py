"""Slots handed to pods the apiserver has not stored yet, shared by every webhook replica.

The apiserver stores a pod only after its webhooks answered, so for a moment a slot is given
but no pod shows it. Two replicas answering two pods of one gang at once would otherwise both
see the slot free. The claims live in one Lease in Atoll's namespace (annotation
``atoll.dev/slot-claims``: ``{"ns/decision/podset/slot": expiry}``, epoch seconds), read and
written with its resourceVersion: a write that raced another is refused (409) and redone on
the fresh state, so claims are serialized by the apiserver itself. Only in-flight claims are
kept (each expires after ``claim_seconds``, and goes as soon as a live pod holds its slot), so
the object stays small and needs no cleanup.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from admission import vocabulary
from admission.kube import LEASES, Clock, ClusterPort, Obj, errors
from admission.webhook._budget import review_time_left

__all__ = ["ANN_CLAIMS", "SlotClaims"]

ANN_CLAIMS = vocabulary.SLOT_CLAIMS
_RETRIES = 20


class SlotClaims:
    """``claim()`` picks and records a slot in one compare-and-swap on the claims Lease."""

    def __init__(self, port: ClusterPort, namespace: str, name: str, clock: Clock, ttl: float) -> None:
        self.port = port
        self.namespace = namespace
        self.name = name
        self.clock = clock
        self.ttl = ttl

    def _read(self) -> Obj:
        try:
            return self.port.get(LEASES, self.name, self.namespace)
        except errors.NotFound:
            pass
        try:
            return self.port.create(LEASES, {"apiVersion": LEASES.api_version, "kind": LEASES.kind,
                                             "metadata": {"name": self.name, "namespace": self.namespace, "annotations": {ANN_CLAIMS: "{}"}},
                                             "spec": {}})
        except errors.Conflict:  # another replica made it first
            return self.port.get(LEASES, self.name, self.namespace)

    def claim(self, prefix: str, held: set[int], choose: Callable[[set[int]], int | None]) -> int | None:
        """``choose(unavailable)`` → slot, with ``unavailable`` = ``held`` (live pods) plus the
        slots under ``prefix`` claimed and not expired; the chosen slot is recorded before this
        returns. None (nothing recorded) when ``choose`` finds none."""
        for _ in range(_RETRIES):
            left = review_time_left()
            if left is not None and left <= 0:
                raise errors.OutOfTime(f"update leases {self.namespace}/{self.name}: slot claim not done within the review's time budget")
            lease = self._read()
            now = self.clock.now()
            meta = lease.setdefault("metadata", {})
            try:
                raw = json.loads((meta.get("annotations") or {}).get(ANN_CLAIMS) or "{}")
                claims = {str(k): float(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
            except (ValueError, TypeError):  # unreadable: start over (claims only live for seconds)
                claims = {}
            claims = {k: t for k, t in claims.items() if t > now and not (k.startswith(prefix) and _slot(k, prefix) in held)}
            mine = {s for k in claims if k.startswith(prefix) and (s := _slot(k, prefix)) is not None}
            slot = choose(held | mine)
            if slot is None:
                return None
            claims[f"{prefix}{slot}"] = now + self.ttl
            meta.setdefault("annotations", {})[ANN_CLAIMS] = json.dumps(claims, sort_keys=True)
            try:
                self.port.replace(LEASES, lease)
                return slot
            except errors.Conflict:
                continue
        raise errors.Conflict(f"update leases {self.namespace}/{self.name}: slot claims still conflicting after {_RETRIES} tries")


def _slot(key: str, prefix: str) -> int | None:
    tail = key[len(prefix):]
    return int(tail) if tail.isascii() and tail.isdigit() else None

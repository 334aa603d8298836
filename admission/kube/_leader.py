"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Several replicas run; the one holding the Lease decides. Expiry is judged on the local
monotonic clock from when this replica last saw the Lease change (never by comparing another
machine's timestamps), writes use the Lease's resourceVersion (a lost race is a 409), and a
leader that cannot renew within the renew deadline steps down.

Fencing: ``valid()`` is true only until the renew deadline after the *sending* of the last
renewal that succeeded. A standby takes over only after it has seen that renewal unchanged for
the lease duration, which is longer, and it saw the renewal after it was sent; so a leader that
writes only while ``valid()`` never writes in another replica's term, however slowly its own
renewals come back. A write attempt must also *end* inside the term: ``write_window()`` is the
time left, less ``write_margin_seconds``, and the controller's port bounds each attempt's timeout
by it (``KubePort``'s ``fence``). A renewal round is bounded the same way by its renew deadline
(``round_budget()``, the elector's port's ``budget``; one attempt per call, no retry policy):
the leader learns of its loss within the deadline, not after a 30 s request. ``term`` is the Lease's ``leaseTransitions`` of the leader's tenure, which
decision records carry, so a log shows which tenure wrote what.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import structlog

from admission.kube import errors
from admission.kube._port import LEASES, Clock, ClusterPort, Obj, SystemClock
from admission.kube._settings import LeaderSettings

__all__ = ["LeaderElector"]

_log = structlog.get_logger("atoll.leader")


def _micro_time(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, port: ClusterPort, *, namespace: str, identity: str, settings: LeaderSettings | None = None,
                 clock: Clock | None = None) -> None:
        self.port = port
        self.namespace = namespace
        self.identity = identity
        self.settings = settings or LeaderSettings()
        self.clock = clock or SystemClock()
        self.is_leader = False
        self.term: int | None = None
        """``leaseTransitions`` of the tenure this replica holds (None: not leading)."""
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._valid_until = 0.0
        self._round_deadline = 0.0

    def _spec(self, transitions: int, acquired: str | None) -> dict[str, Any]:
        now = _micro_time(self.clock.now())
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.settings.lease_duration_seconds),
                "acquireTime": acquired or now, "renewTime": now, "leaseTransitions": transitions}

    def valid(self) -> bool:
        """May this replica write now? Leading, and within the renew deadline of the sending of its
        last successful renewal (see the module's note on fencing)."""
        return self.is_leader and self.clock.monotonic() < self._valid_until

    def write_window(self) -> float:
        """Seconds in which a write attempt may still start and must end: to the end of ``valid()``
        less ``write_margin_seconds``; 0 or less when this replica may not write."""
        if not self.is_leader:
            return 0.0
        return self._valid_until - self.clock.monotonic() - self.settings.write_margin_seconds

    def round_budget(self) -> float:
        """Seconds left for the calls of the current round: a leader's renewal must land before its
        term lapses, a campaign within one renew deadline."""
        return self._round_deadline - self.clock.monotonic()

    def try_acquire_or_renew(self) -> bool:
        """One round: create the Lease, renew ours, or take an expired one. True if we lead."""
        name = self.settings.lease_name
        sent = self.clock.monotonic()
        self._round_deadline = self._valid_until if self.is_leader else sent + self.settings.renew_deadline_seconds
        try:
            lease = self.port.get(LEASES, name, self.namespace)
        except errors.NotFound:
            body: Obj = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": name, "namespace": self.namespace}, "spec": self._spec(0, None)}
            try:
                self._observe(self.port.create(LEASES, body))
            except errors.Conflict:
                return self._lost("another replica created the Lease first")
            return self._won(sent, 0)
        spec = lease.get("spec") or {}
        if self._observed is None or (self._observed.get("spec") or {}) != spec:
            self._observe(lease)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration_seconds)
        mine = holder == self.identity
        expired = self.clock.monotonic() > self._observed_at + duration
        if holder and not mine and not expired:
            return self._lost(f"held by {holder}")
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        lease = {**lease, "spec": self._spec(transitions, spec.get("acquireTime") if mine else None)}
        try:
            self._observe(self.port.replace(LEASES, lease))
        except errors.Conflict:
            return self._lost("lost the race to update the Lease")
        return self._won(sent, transitions)

    def _observe(self, lease: Obj) -> None:
        self._observed = lease
        self._observed_at = self.clock.monotonic()

    def _won(self, sent: float, term: int) -> bool:
        if not self.is_leader:
            _log.info("became leader", identity=self.identity, lease=f"{self.namespace}/{self.settings.lease_name}", term=term)
        self.is_leader = True
        self.term = term
        self._last_renew = self.clock.monotonic()
        self._valid_until = sent + self.settings.renew_deadline_seconds
        return True

    def _lost(self, why: str) -> bool:
        if self.is_leader:
            _log.warning("not leader any more", identity=self.identity, why=why)
        self.is_leader = False
        self.term = None
        self._valid_until = 0.0
        return False

    def release(self) -> None:
        """Step down on shutdown so a standby need not wait for expiry."""
        if not self.is_leader or self._observed is None:
            return
        lease = dict(self._observed)
        lease["spec"] = {**(lease.get("spec") or {}), "holderIdentity": None, "leaseDurationSeconds": 1}
        self.is_leader = False  # no write of ours may follow the release
        self.term = None
        self._valid_until = 0.0
        try:
            self.port.replace(LEASES, lease)
        except errors.ApiError as exc:
            _log.warning("lease not released", error=str(exc))

    def run(self, stop: threading.Event, on_started: Callable[[], None], on_stopped: Callable[[], None]) -> None:
        """Campaign until leading, call ``on_started``, renew until ``stop`` or the renew deadline
        passes, then call ``on_stopped``."""
        s = self.settings
        leading = False
        while not stop.is_set():
            try:
                ok: bool | None = self.try_acquire_or_renew()
            except errors.ApiError as exc:
                _log.warning("lease round failed", error=str(exc))
                ok = None
            if ok and not leading:
                leading = True
                on_started()
            elif leading and ok is False:  # someone else holds it now
                on_stopped()
                return
            elif leading and ok is None and not self.valid():
                _log.error("could not renew the lease within the deadline; stepping down", deadline_s=s.renew_deadline_seconds)
                self.is_leader = False
                self.term = None
                on_stopped()
                return
            stop.wait(s.retry_period_seconds)
        if leading:
            on_stopped()
            self.release()

"""Killing a controller in-process: its port is wrapped in ``CrashingPort``. Once killed, every
call any of the controller's threads makes raises ``Crash`` (a ``BaseException``, so no handler
in the controller swallows it): from that instant the dead controller has no further effect on
the cluster, wherever it was, as after SIGKILL. Besides kills at random times, the port kills
the controller on its own between computing a decision and writing it, and right after the
write (before the decision record), at ``crash_rate`` per decision write. A fresh ``Controller``
then starts from nothing but the API.
"""

from __future__ import annotations

import copy
import random
import threading
from collections import Counter
from typing import Any

from admission.kube import WORKLOADS, KubePort, Obj, Resource

__all__ = ["Crash", "CrashingPort"]


class Crash(BaseException):
    """The controller process died here."""


class CrashingPort:
    """A ``ClusterPort`` that can die: ``kill()`` at any time, or on its own around decision writes."""

    def __init__(self, port: KubePort, rng: random.Random, crash_rate: float) -> None:
        self.port = port
        self.rng = rng
        self.crash_rate = crash_rate
        self.dead = threading.Event()
        self.crashes: Counter[str] = Counter()
        self._lock = threading.Lock()

    def single_attempt(self) -> CrashingPort:
        """The same port, dying with it, making one attempt per call (the controller's worker's view)."""
        view = copy.copy(self)
        view.port = self.port.single_attempt()
        return view

    def kill(self, where: str = "random-time") -> None:
        if not self.dead.is_set():
            self.crashes[where] += 1
        self.dead.set()

    def _alive(self) -> None:
        if self.dead.is_set():
            raise Crash("controller killed")

    def list(self, resource: Resource, **kw: Any) -> Any:
        self._alive()
        return self.port.list(resource, **kw)

    def watch(self, resource: Resource, resource_version: str, **kw: Any) -> Any:
        self._alive()
        return self.port.watch(resource, resource_version, **kw)

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        self._alive()
        return self.port.get(resource, name, namespace)

    def create(self, resource: Resource, obj: Obj) -> Obj:
        self._alive()
        return self.port.create(resource, obj)

    def replace(self, resource: Resource, obj: Obj) -> Obj:
        self._alive()
        return self.port.replace(resource, obj)

    def patch(self, resource: Resource, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        self._alive()
        return self.port.patch(resource, name, patch, namespace)

    def apply(self, resource: Resource, obj: Obj, **kw: Any) -> Obj:
        self._alive()
        if resource != WORKLOADS or kw.get("subresource") != "status":
            return self.port.apply(resource, obj, **kw)
        with self._lock:
            roll = self.rng.random()
        if roll < self.crash_rate / 2:
            self.kill("decided-not-written")
            raise Crash("killed between deciding and writing")
        out = self.port.apply(resource, obj, **kw)
        if roll < self.crash_rate:
            self.kill("written-not-recorded")
            raise Crash("killed after writing, before recording")
        return out


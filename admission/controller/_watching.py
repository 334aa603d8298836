"""Informers: one thread per watched resource lists it, then watches from the list's version,
and hands everything it sees to one inbox (the worker applies it, so nothing here touches the
cache). A 410 Gone lists again; any other failure backs off and resumes, so a watcher outlives
a broken apiserver.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from admission.controller._settings import WatchSettings
from admission.kube import ClusterPort, Resource, WatchStream, errors

__all__ = ["Informers", "Watch"]

_log = structlog.get_logger("atoll.watch")

Inbox = queue.Queue[tuple[str, Resource, Any]]
"""("list", resource, items) or ("event", resource, WatchEvent), in the order seen."""


@dataclass(frozen=True, slots=True)
class Watch:
    """One watched resource, optionally narrowed to a namespace and a field selector."""

    resource: Resource
    namespace: str | None = None
    field_selector: str | None = None


class Informers:
    """The watch threads of one controller; ``stop`` is the controller's stop event."""

    def __init__(self, port: ClusterPort, watches: Sequence[Watch], settings: WatchSettings, inbox: Inbox, stop: threading.Event) -> None:
        self.port = port
        self.watches = tuple(watches)
        self.settings = settings
        self.inbox = inbox
        self._stop = stop
        self._streams: dict[Resource, WatchStream] = {}
        self._lock = threading.Lock()

    def start(self) -> list[threading.Thread]:
        threads = []
        for w in self.watches:
            t = threading.Thread(target=self._run, args=(w,), name=f"watch-{w.resource.plural}", daemon=True)
            t.start()
            threads.append(t)
        return threads

    def close(self) -> None:
        """End every open watch stream (the threads see the stop event and return)."""
        with self._lock:
            for stream in self._streams.values():
                stream.close()

    def _run(self, w: Watch) -> None:
        backoffs = self.settings.error_backoffs
        failures = 0
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    result = self.port.list(w.resource, namespace=w.namespace, field_selector=w.field_selector)
                    self.inbox.put(("list", w.resource, result.items))
                    rv = result.resource_version
                stream = self.port.watch(w.resource, rv, namespace=w.namespace, field_selector=w.field_selector,
                                         timeout_seconds=self.settings.timeout_seconds)
                with self._lock:
                    self._streams[w.resource] = stream
                if self._stop.is_set():
                    stream.close()
                    return
                for event in stream:
                    version = (event.object.get("metadata") or {}).get("resourceVersion")
                    if version:
                        rv = str(version)
                    self.inbox.put(("event", w.resource, event))
                    failures = 0
            except errors.Gone:
                _log.info("watch expired; listing again", resource=str(w.resource))
                rv = None
            except Exception as exc:  # noqa: BLE001 - a watcher must outlive any failure; it backs off and resumes
                if self._stop.is_set():
                    return
                delay = backoffs[min(failures, len(backoffs) - 1)]
                failures += 1
                _log.warning("list/watch failed; backing off", resource=str(w.resource), attempt=failures, delay_s=delay, error=str(exc))
                self._stop.wait(delay)


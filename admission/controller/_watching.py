"""Informers: one thread per watched resource lists it, then watches from the list's version,
and hands everything it sees to one inbox (the worker applies it, so nothing here touches the
cache). A 410 Gone lists again; any other failure backs off and resumes, so a watcher outlives
a broken apiserver.

The inbox is coalesced per object, so it holds at most one entry per object plus one list per
resource however far the worker falls behind: a newer event of an object replaces the one
waiting (in its place), and a list replaces everything of its resource still waiting. The
worker then applies the newest state of each object once, which is what applying every event
in turn would leave in the cache (objects are kept by key, a late event never overwrites a newer
one). A recreated object (a new uid under the same name) is another object: its predecessor's
DELETED is kept, so what the ledger holds for the old uid is let go.
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from admission.controller._settings import WatchSettings
from admission.kube import ClusterPort, Resource, WatchEvent, WatchStream, object_key, reflect

__all__ = ["Inbox", "Informers", "Watch"]

_log = structlog.get_logger("atoll.watch")

Item = tuple[str, Resource, Any]
"""("list", resource, items) or ("event", resource, WatchEvent)."""


class Inbox:
    """What the watches saw and the worker has not applied yet, coalesced per object (module
    docstring); ``get`` and ``get_nowait`` raise ``queue.Empty`` as ``queue.Queue``'s do."""

    def __init__(self) -> None:
        self._items: OrderedDict[tuple[Any, ...], Item] = OrderedDict()
        self._ready = threading.Condition()

    def put(self, item: Item) -> None:
        kind, resource, payload = item
        with self._ready:
            if kind == "list":
                for key in [k for k in self._items if k[0] == resource]:
                    del self._items[key]
                self._items[(resource,)] = item
            elif kind == "written":  # a pipelined write answered (payload: the Workload's key)
                self._items[(resource, "written", payload)] = item
            else:
                self._items[_event_key(resource, payload)] = item  # a waiting entry keeps its place
            self._ready.notify()

    def get(self, timeout: float | None = None) -> Item:
        with self._ready:
            if not self._ready.wait_for(lambda: bool(self._items), timeout):
                raise queue.Empty
            return self._items.popitem(last=False)[1]

    def get_nowait(self) -> Item:
        with self._ready:
            if not self._items:
                raise queue.Empty
            return self._items.popitem(last=False)[1]

    def qsize(self) -> int:
        return len(self._items)


def _event_key(resource: Resource, event: WatchEvent) -> tuple[Any, ...]:
    meta = event.object.get("metadata") if isinstance(event.object, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    if event.type == "BOOKMARK" or not meta.get("name"):
        return (resource, "", event.type)
    return (resource, object_key(event.object), str(meta.get("uid", "")))


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
        def gone() -> None:
            _log.info("watch expired; listing again", resource=str(w.resource))

        def failed(exc: Exception, attempt: int, delay: float) -> None:
            _log.warning("list/watch failed; backing off", resource=str(w.resource), attempt=attempt, delay_s=delay, error=str(exc))

        reflect(self.port, w.resource, namespace=w.namespace, field_selector=w.field_selector,
                on_list=lambda listed: self.inbox.put(("list", w.resource, listed.items)),
                on_event=lambda event: self.inbox.put(("event", w.resource, event)),
                stop=self._stop, backoffs=self.settings.error_backoffs, timeout_seconds=self.settings.timeout_seconds,
                streams=self._streams, lock=self._lock, on_gone=gone, on_error=failed)

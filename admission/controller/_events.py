"""Kubernetes Events about Atoll's decisions and configuration, posted off the decision path.

Best effort: a failed post is logged and never fails a decision. Repeats of the same (object,
reason, message) bump ``count`` on one Event instead of piling up new ones. Memory is bounded:
the repeats remembered are the latest 2,000, and while the API is too slow to take them, at most
``max_queued`` Events wait to be sent; beyond that new ones are dropped (and counted in the log).
"""

from __future__ import annotations

import queue
import secrets
import threading
from collections import OrderedDict

import structlog

from admission import vocabulary
from admission.controller._records import rfc3339, truncate
from admission.kube import EVENTS, Clock, ClusterPort, Obj, errors, object_key

__all__ = ["EventPoster"]

_log = structlog.get_logger("atoll.events")


class EventPoster:
    """core/v1 Events, best effort: a failure is logged, never fails a decision. Repeats of the
    same (object, reason, message) bump ``count`` on one Event instead of piling up new ones."""

    MAX_SEEN = 2000
    """Repeats remembered (the latest ones): a repeat older than that starts a new Event."""

    def __init__(self, port: ClusterPort, *, clock: Clock, instance: str, max_chars: int = 1024, default_namespace: str = "default",
                 max_queued: int = 10_000) -> None:
        self.port = port
        self.clock = clock
        self.instance = instance
        self.max_chars = max_chars
        self.default_namespace = default_namespace
        self._seen: OrderedDict[tuple[str, str, str], tuple[str, str, int]] = OrderedDict()
        self._queue: queue.Queue[tuple[Obj, str, str, str] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.max_queued = max_queued
        self.dropped = 0
        """Events not posted because ``max_queued`` were already waiting."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="atoll-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None

    def flush(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        done = threading.Event()
        self._queue.put(({"_flush": done}, "", "", ""))
        done.wait(timeout)

    def post(self, involved: Obj, kind: str, reason: str, message: str) -> None:
        item = (involved, kind, reason, truncate(message, self.max_chars))
        if self._thread is None:
            self._send(*item)
        elif self._queue.qsize() >= self.max_queued:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                _log.warning("events dropped: the API is not taking them fast enough", dropped=self.dropped, queued=self.max_queued)
        else:
            self._queue.put(item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if "_flush" in item[0]:
                item[0]["_flush"].set()
                continue
            self._send(*item)

    def _send(self, involved: Obj, kind: str, reason: str, message: str) -> None:
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or self.default_namespace
        key = (str(meta.get("uid") or object_key(involved)), reason, message)
        now = rfc3339(self.clock.now())
        try:
            if key in self._seen:
                ns, name, count = self._seen[key]
                try:
                    self.port.patch(EVENTS, name, {"count": count + 1, "lastTimestamp": now}, namespace=ns)
                    self._seen[key] = (ns, name, count + 1)
                    self._seen.move_to_end(key)
                    return
                except errors.NotFound:
                    del self._seen[key]
            name = f"{meta.get('name', 'atoll')}.{secrets.token_hex(8)}"
            self.port.create(EVENTS, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"), "name": meta.get("name"),
                                   "namespace": meta.get("namespace"), "uid": meta.get("uid")},
                "type": kind, "reason": reason, "message": message, "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": "atoll"}, "reportingComponent": vocabulary.CONTROLLER_NAME, "reportingInstance": self.instance,
            })
            self._seen[key] = (namespace, name, 1)
            if len(self._seen) > self.MAX_SEEN:
                self._seen.popitem(last=False)
        except errors.ApiError as exc:
            _log.warning("event not posted", object=object_key(involved), reason=reason, error=str(exc))


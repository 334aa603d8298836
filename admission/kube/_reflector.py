"""List, then watch from the list's version, forever: the loop behind every cache Atoll keeps.

The controller's informers and the webhook's cache each run it, one thread per resource, and
differ only in what they do with what they see. So the loop's rules live here once:
- a list comes first and after every 410 Gone (the version watched from has been compacted);
- the watch resumes from the last resourceVersion seen (bookmarks included), so a stream that
  times out or closes picks up where it ended without listing again;
- any other failure backs off along ``backoffs`` (the last value repeats) and resumes; a clean
  event resets the count, so a reflector outlives a broken apiserver;
- ``stop`` ends it: the stream is closed (``streams`` holds the open one, for whoever must close
  it from another thread) and the thread returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from admission.kube import errors
from admission.kube._port import ClusterPort, ListResult, Resource, WatchEvent, WatchStream

__all__ = ["reflect"]


def reflect(
    port: ClusterPort,
    resource: Resource,
    *,
    on_list: Callable[[ListResult], None],
    on_event: Callable[[WatchEvent], None],
    stop: threading.Event,
    backoffs: Sequence[float],
    timeout_seconds: int,
    streams: MutableMapping[Resource, Any],
    lock: threading.Lock,
    on_gone: Callable[[], None] = lambda: None,
    on_error: Callable[[Exception, int, float], None] = lambda exc, attempt, delay: None,
    namespace: str | None = None,
    field_selector: str | None = None,
) -> None:
    """Run the loop (module docstring) until ``stop`` is set. ``on_error`` gets the failure, the
    attempt number and the delay about to be waited; ``on_gone`` is told before the relist."""
    failures = 0
    rv: str | None = None
    while not stop.is_set():
        try:
            if rv is None:
                listed = port.list(resource, namespace=namespace, field_selector=field_selector)
                on_list(listed)
                rv = listed.resource_version
            stream: WatchStream = port.watch(resource, rv, namespace=namespace, field_selector=field_selector,
                                             timeout_seconds=timeout_seconds)
            with lock:
                streams[resource] = stream
            if stop.is_set():
                stream.close()
                return
            for event in stream:
                version = (event.object.get("metadata") or {}).get("resourceVersion")
                if version:
                    rv = str(version)
                on_event(event)
                failures = 0
        except errors.Gone:
            on_gone()
            rv = None
        except Exception as exc:  # noqa: BLE001 - a reflector must outlive any failure; it backs off and resumes
            if stop.is_set():
                return
            delay = backoffs[min(failures, len(backoffs) - 1)]
            failures += 1
            on_error(exc, failures, delay)
            stop.wait(delay)

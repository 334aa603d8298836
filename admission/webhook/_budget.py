"""One time budget for a whole admission review, whatever it calls.

The apiserver stops waiting after the webhook's ``timeoutSeconds``; an answer that comes later is
wasted and the pod is refused anyway. So a review gets one deadline when it starts (a share of
that timeout), and everything it waits for asks what is left: the cache's first sync, each
attempt of each API call (the webhook's port passes ``review_time_left`` as ``KubePort``'s
``deadline``), each wait between attempts, each round of a slot claim. Per thread: the HTTPS
server answers each review in its own thread, and other threads (the cache's watches) see no
budget.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from admission.kube import Clock

__all__ = ["review_budget", "review_time_left"]

_local = threading.local()


@contextmanager
def review_budget(clock: Clock, seconds: float) -> Iterator[None]:
    """Within the block, ``review_time_left()`` counts down from ``seconds`` on ``clock``'s monotonic time."""
    before = getattr(_local, "budget", None)
    _local.budget = (clock, clock.monotonic() + seconds)
    try:
        yield
    finally:
        _local.budget = before


def review_time_left() -> float | None:
    """Seconds left of this thread's review (negative once spent); None outside a review."""
    budget = getattr(_local, "budget", None)
    if budget is None:
        return None
    clock, end = budget
    return float(end - clock.monotonic())

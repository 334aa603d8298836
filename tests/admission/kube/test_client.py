"""``KubePort``'s ``deadline``: one budget across every attempt and wait of a call (the webhook's
whole review), with nothing listening so every attempt fails fast."""

from __future__ import annotations

import socket

import pytest
from kubernetes import client

from admission.kube import NODES, ApiRetrySettings, KubePort, errors


def dead_port(**kw: object) -> KubePort:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed when the block ends: nothing listens there
    cfg = client.Configuration()
    cfg.host = f"https://127.0.0.1:{dead}"
    return KubePort(client.ApiClient(cfg), ApiRetrySettings(backoffs=(0.5, 0.5, 0.5), request_timeout=2.0), **kw)  # type: ignore[arg-type]


def test_a_spent_budget_sends_nothing() -> None:
    with pytest.raises(errors.OutOfTime, match="get nodes n1: not sent"):
        dead_port(deadline=lambda: 0.0).get(NODES, "n1")


def test_no_wait_starts_that_would_end_past_the_budget() -> None:
    slept: list[float] = []
    left = [0.8]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        left[0] -= seconds

    with pytest.raises(errors.OutOfTime, match="no retry"):
        dead_port(deadline=lambda: left[0], sleep=sleep).get(NODES, "n1")
    assert slept == [0.5]  # the second 0.5 s wait would have ended past the 0.8 s budget


def test_without_a_deadline_every_retry_runs() -> None:
    slept: list[float] = []
    with pytest.raises(errors.NetworkError):
        dead_port(sleep=slept.append).get(NODES, "n1")
    assert slept == [0.5, 0.5, 0.5]

"""One time budget for a whole admission review, on the real apiserver: the calls a review makes
share it (each attempt asks what is left), so a slow apiserver gets a refusal from Atoll within
the webhook's timeout instead of each call taking its own."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest

from admission.kube import LEASES, ClusterPort, KubePort, ManualClock
from admission.webhook import PodPinner, WebhookSettings, review_time_left
from tests.admission.fabric import Fabric
from tests.admission.webhook.conftest import admit, exact_fabric, kueue_pod

pytestmark = pytest.mark.apiserver


class Slow:
    """The cluster port, each call inside a review taking ``step`` seconds of ``clock``'s time."""

    def __init__(self, port: ClusterPort, clock: ManualClock, step: float) -> None:
        self.port, self.clock, self.step = port, clock, step
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.port, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if review_time_left() is not None:
                self.calls.append(name)
                self.clock.advance(self.step)
            return method(*args, **kwargs)

        return call


def review(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE", "namespace": namespace, "object": pod}}


def pinner(fabric: Fabric, step: float) -> tuple[PodPinner, Slow]:
    clock = ManualClock()
    slow = Slow(KubePort(fabric.api, WebhookSettings(timeout_seconds=1).api_retry(), deadline=review_time_left), clock, step)
    made = PodPinner(slow, WebhookSettings(namespace=fabric.ns, timeout_seconds=1), clock)  # type: ignore[arg-type]
    assert made.start(60)  # listed before the review: the budget is for the review's own calls
    return made, slow


def test_calls_that_each_fit_but_together_overrun_the_review_budget_are_refused(fabric: Fabric) -> None:
    """A claim takes three calls (read the Lease, create it, write the claim) of 0.35 s each: every
    one fits a per-call budget, but the review's 0.8 s (80 % of a 1 s timeout) is spent before the
    third, which is not sent."""
    exact_fabric(fabric)
    admit(fabric, "gang", [("main", 2, 4)])
    slow_pinner, slow = pinner(fabric, 0.35)
    try:
        answer = slow_pinner.review(review(kueue_pod(fabric, "gang", "gang-0"), fabric.ns))["response"]
    finally:
        slow_pinner.close()
    assert answer["allowed"] is False and answer["status"]["code"] == 503, answer
    assert "time budget" in answer["status"]["message"]
    assert slow.calls == ["get", "create", "replace"]
    lease = fabric.port.get(LEASES, WebhookSettings().claims_lease, fabric.ns)
    assert lease["metadata"]["annotations"]["atoll.dev/slot-claims"] == "{}"  # the claim's write was never sent


def test_the_same_calls_within_the_budget_pin_the_pod(fabric: Fabric) -> None:
    exact_fabric(fabric)
    admit(fabric, "gang", [("main", 2, 4)])
    fast_pinner, fast = pinner(fabric, 0.2)
    try:
        answer = fast_pinner.review(review(kueue_pod(fabric, "gang", "gang-0"), fabric.ns))["response"]
    finally:
        fast_pinner.close()
    assert answer["allowed"] is True and fast.calls == ["get", "create", "replace"]
    ops = json.loads(base64.b64decode(answer["patch"]))
    assert any(op["path"].endswith("atoll.dev~1slot") and op["value"] == "0" for op in ops)

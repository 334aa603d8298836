"""A decision write whose answer is lost (a 5xx or no answer) may have been applied all the same:
the ledger keeps its booking, so the next decision, made before the cache shows what landed,
never plans the same GPUs; a write refused outright still gives its booking back. And a write
the server still holds when the controller gives up is ended by the server at that deadline,
so it never lands after the Workload's next decision."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from admission.controller import Controller, DecisionSettings
from admission.kube import WORKLOADS, ApiRetrySettings, KubePort, Obj, Resource, errors
from tests.admission.controller.test_racing_workloads import assert_no_double_booking, one_island_free
from tests.admission.fabric import Fabric
from tests.admission.slow_review import SLOW_REVIEW, slow_review
from tests.chaos.proxy import FaultProxy
from tests.envtest import ApiServer

pytestmark = pytest.mark.apiserver


class LosesAnswer:
    """The real port, except that the first status apply of Workload ``name`` is applied by the
    server and its answer replaced by ``failure`` (as a proxy or a server that fails after
    committing does)."""

    def __init__(self, port: KubePort, name: str, failure: errors.ApiError, *, applied: bool = True) -> None:
        self.port = port
        self.name = name
        self.failure = failure
        self.applied = applied
        self.answers_lost = [0]  # shared with the single-attempt view the controller writes through

    @property
    def lost(self) -> int:
        return self.answers_lost[0]

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.port, attr)

    def single_attempt(self) -> LosesAnswer:
        view = LosesAnswer(self.port.single_attempt(), self.name, self.failure, applied=self.applied)
        view.answers_lost = self.answers_lost
        return view

    def apply(self, resource: Resource, body: Obj, **kw: Any) -> Obj:
        ours = resource == WORKLOADS and (body.get("metadata") or {}).get("name") == self.name and not self.lost
        if ours:
            self.answers_lost[0] += 1
            if self.applied:
                self.port.apply(resource, body, **kw)
            raise self.failure
        return self.port.apply(resource, body, **kw)


def controller(fabric: Fabric, port: LosesAnswer, workers: int) -> Controller:
    settings = fabric.settings().model_copy(update={"decisions": DecisionSettings(write_workers=workers)})
    return Controller(port, settings=settings, clock=fabric.clock, metrics=fabric.metrics)  # type: ignore[arg-type]


@pytest.mark.parametrize("workers", [0, 2], ids=["serial", "pipelined"])
@pytest.mark.parametrize("failure", [errors.ServerError("etcd timeout", status=504), errors.NetworkError("connection reset")],
                         ids=["5xx", "no-answer"])
def test_a_decision_whose_answer_was_lost_keeps_its_gpus_from_the_next_decision(fabric: Fabric, workers: int,
                                                                                 failure: errors.ApiError) -> None:
    fabric.install()
    one_island_free(fabric)
    fabric.submit("a", [("main", 2, 4)])
    fabric.submit("b", [("main", 2, 4)])
    port = LosesAnswer(fabric.port, "a", failure)
    ctrl = controller(fabric, port, workers)
    ctrl.sync()
    first = ctrl.process(limit=1)  # a decided; its write applied, its answer lost (and taken) before b is decided
    assert [v.outcome for v in first] == ["admit"] and not first[0].written and port.lost == 1
    assert fabric.entry("a")["state"] == "Ready"  # the server has it
    (second,) = ctrl.process(limit=1)
    assert second.outcome == "wait"  # the only free island is a's, though the cache has not shown it
    assert_no_double_booking(fabric, ["a", "b"])


@pytest.mark.parametrize("workers", [0, 2], ids=["serial", "pipelined"])
def test_a_decision_refused_outright_gives_its_gpus_to_the_next(fabric: Fabric, workers: int) -> None:
    """A 429 applied nothing: the booking goes back, and b takes the island."""
    fabric.install()
    one_island_free(fabric)
    fabric.submit("a", [("main", 2, 4)])
    fabric.submit("b", [("main", 2, 4)])
    port = LosesAnswer(fabric.port, "a", errors.TooManyRequests("slow down", status=429), applied=False)
    ctrl = controller(fabric, port, workers)
    ctrl.sync()
    assert [v.outcome for v in ctrl.process(limit=1)] == ["admit"]
    (second,) = ctrl.process(limit=1)
    assert second.outcome == "admit" and fabric.entry("b")["state"] == "Ready"


@pytest.mark.parametrize("workers", [0, 2], ids=["serial", "pipelined"])
def test_a_lost_answer_whose_write_never_landed_is_decided_afresh_on_its_retry(fabric: Fabric, workers: int) -> None:
    """The doubt ends when the Workload is decided again: its kept booking does not keep it from
    its own island."""
    fabric.install()
    one_island_free(fabric)
    fabric.submit("a", [("main", 2, 4)])
    port = LosesAnswer(fabric.port, "a", errors.ServerError("bad gateway", status=502), applied=False)
    ctrl = controller(fabric, port, workers)
    ctrl.sync()
    assert [v.written for v in ctrl.process()] == [False]
    assert fabric.entry("a")["state"] == "Pending"
    fabric.clock.advance(max(DecisionSettings().error_requeue_seconds) + 1)
    (again,) = ctrl.process()
    assert again.outcome == "admit" and again.written and fabric.entry("a")["state"] == "Ready"


HELD = 2.0
"""How long the slow webhook holds the first decision write inside the apiserver (s)."""


def test_a_decision_write_the_server_holds_past_the_controllers_give_up_is_never_applied(
        apiserver: ApiServer, fabric: Fabric, tmp_path: Path) -> None:
    """The first decision write is held 2 s inside the apiserver (an admission webhook), behind
    a proxy that does not pass the client's hang-up on; the controller gives up at its attempt's
    0.8 s. The attempt told the server that deadline (``timeout``), so the server ends the write
    there: it is never applied, the Workload is decided again and only that decision lands.
    Without the deadline the server applied the abandoned write at 2 s, whenever the controller
    had moved on (the window where a decision lands after the Workload's next one)."""
    fabric.install()
    fabric.submit("a", [("main", 2, 4)])
    fabric.port.patch(WORKLOADS, "a", {"metadata": {"labels": {SLOW_REVIEW: fabric.ns}}}, fabric.ns)

    def probe() -> None:
        fabric.port.patch(WORKLOADS, "a", {"metadata": {"annotations": {"probe": str(time.monotonic())}}}, fabric.ns)

    rules = [{"apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["workloads", "workloads/status"]}]
    with slow_review(fabric.api, tmp_path, fabric.ns, rules, probe, lambda i: HELD if i == 0 else 0.0) as reviews, \
            FaultProxy("127.0.0.1", apiserver.port, apiserver.ca_file, rate=0.0, max_seconds=60) as proxy:
        cfg = client.Configuration()
        cfg.host, cfg.api_key = proxy.url, {"authorization": f"Bearer {apiserver.token}"}
        port = KubePort(client.ApiClient(cfg), ApiRetrySettings(backoffs=(), request_timeout=0.8))
        ctrl = Controller(port, settings=fabric.settings(), clock=fabric.clock, metrics=fabric.metrics)
        ctrl.sync()
        (first,) = ctrl.process()
        assert first.outcome == "admit" and not first.written
        time.sleep(HELD + 1.0)  # past the webhook's answer to the held write
        assert len(reviews) == 1  # the server did get to it
        assert fabric.entry("a")["state"] == "Pending", "the abandoned decision write was applied after the controller gave up"
        (held,) = [w for w in proxy.timeline if "/workloads/a/status" in w.path]
        # The server ends the request at its deadline: with its own 504, or, when its per-request
        # write deadline wins that race, by closing the connection without an answer (status 0).
        # Either way before the webhook let the write through; an applied write answers 2xx at 2 s.
        assert held.status in (504, 0) and held.answered is not None and held.answered - held.sent < HELD, held

        fabric.clock.advance(max(DecisionSettings().error_requeue_seconds) + 1)
        (again,) = ctrl.process()
        assert again.outcome == "admit" and again.written
        entry = fabric.entry("a")
        assert entry["state"] == "Ready"
        assert entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"] == again.decision_id != first.decision_id

"""A decision write whose answer is lost (a 5xx or no answer) may have been applied all the same:
the ledger keeps its booking, so the next decision, made before the cache shows what landed,
never plans the same GPUs; a write refused outright still gives its booking back."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import Controller, DecisionSettings
from admission.kube import WORKLOADS, KubePort, Obj, Resource, errors
from tests.admission.controller.test_racing_workloads import assert_no_double_booking, one_island_free
from tests.admission.fabric import Fabric

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

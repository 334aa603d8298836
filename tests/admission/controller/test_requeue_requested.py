"""The webhook's ``atoll.dev/RequeueRequested`` on an admitted Workload (a pod lost its node and
its domain has no replacement): the controller sets its check to Retry once, naming the pod and
PodSet, Kueue evicts and requeues, and the next reservation is decided afresh; a request for an
older decision, a cleared one, or one on a Workload Kueue is evicting is left alone.

The condition is written by the webhook's own writer (``ClusterReader.request_requeue``, under
its field manager); Kueue is played write by write (tests/kube_objects.py)."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import REQUEUE_CONDITION, requeue_request
from admission.webhook._cluster import ClusterReader
from admission.webhook._pin import ExactPod
from tests.admission.fabric import Fabric, planned, run
from tests.kube_objects import apply_workload_status, condition, is_true

CHECK = "atoll-topology"
WHY = "node n1 is cordoned, and no other node of its domain nvidia.com/gpu.clique=c0 is healthy with room for it"


def decision_of(entry: dict[str, Any]) -> str:
    return str(entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])


def mark(fabric: Fabric, workload: str, decision: str, pod: str = "train-0-c") -> None:
    """What the webhook writes when it cannot re-home ``pod`` of ``decision``."""
    exact = ExactPod(namespace=fabric.ns, name=pod, decision_id=decision, podset="main", slots=("n1",), rank=0, tolerations=(),
                     node_selector=(), workload=workload)
    assert ClusterReader(fabric.port).request_requeue(exact, f"pod {fabric.ns}/{pod} (podset main, slot 0): {WHY}", fabric.clock.now()) == workload


# ---------------------------------------------------------------------- on the apiserver


@pytest.mark.apiserver
def test_a_requeue_request_for_the_decision_in_force_becomes_one_retry(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("train", [("main", 2, 4)])
    (admitted,) = run(ctrl)
    first = decision_of(fabric.entry("train"))
    assert admitted.outcome == "admit"

    mark(fabric, "train", first)
    (verdict,) = run(ctrl)
    entry = fabric.entry("train")
    assert entry["state"] == "Retry" and verdict.written and "requeueAfterSeconds" not in entry  # Kueue requeues at once
    assert entry["message"].startswith(f"Retry: decision {first} cannot keep its placement: pod {fabric.ns}/train-0-c (podset main, slot 0): ")
    assert WHY in entry["message"] and "requeue" in entry["message"]
    [event] = [e for e in fabric.events_for("train") if e.reason == "TopologyRequeued"]
    assert event.type == "Warning" and "train-0-c" in event.message
    assert fabric.decision_records()[-1]["check_state"] == "Retry"

    # once: the entry is no longer Ready, so neither this controller nor a fresh one writes again
    version = fabric.workload("train")["metadata"]["resourceVersion"]
    assert run(ctrl) == [] and run(fabric.controller()) == []
    assert fabric.workload("train")["metadata"]["resourceVersion"] == version

    # Kueue evicts and requeues (in Kueue's order, ``KueueActor.react`` in tests/kube_objects.py); the next reservation gets a new decision, and
    # the webhook's condition, naming the old one, is not acted on again
    assert fabric.kueue.react(fabric.ns, "train") == "retry"
    fabric.kueue.end_backoff(fabric.ns, "train")
    fabric.kueue.reserve_quota(fabric.ns, "train", fabric.cq, fabric.flavor)
    (again,) = run(ctrl)
    assert again.outcome == "admit" and fabric.entry("train")["state"] == "Ready"
    assert decision_of(fabric.entry("train")) != first
    assert is_true(fabric.workload("train"), REQUEUE_CONDITION)  # the webhook's record of why stays
    assert run(ctrl) == [] and fabric.entry("train")["state"] == "Ready"


@pytest.mark.apiserver
def test_a_request_naming_an_older_decision_or_cleared_is_left_alone(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("train", [("main", 2, 4)])
    run(ctrl)
    old = decision_of(fabric.entry("train"))
    mark(fabric, "train", old)
    fabric.kueue.preempt(fabric.ns, "train")  # Kueue requeued it for its own reasons before Atoll acted
    fabric.kueue.reserve_quota(fabric.ns, "train", fabric.cq, fabric.flavor)
    (verdict,) = run(ctrl)  # a new decision; the request names the old one
    current = decision_of(fabric.entry("train"))
    assert verdict.outcome == "admit" and current != old and is_true(fabric.workload("train"), REQUEUE_CONDITION)
    assert run(ctrl) == [] and fabric.entry("train")["state"] == "Ready"

    mark(fabric, "train", current)
    cleared = dict(condition(fabric.workload("train"), REQUEUE_CONDITION) or {}, status="False")
    apply_workload_status(fabric.custom, fabric.ns, "train", {"conditions": [cleared]}, manager="atoll-webhook")
    assert run(ctrl) == [] and fabric.entry("train")["state"] == "Ready"
    assert planned(fabric.entry("train"))  # the placement is untouched


@pytest.mark.apiserver
def test_nothing_is_written_while_kueue_evicts(fabric: Fabric) -> None:
    """Kueue's eviction resets the entry to Pending with Evicted=True in one write: a request not yet
    answered then asks for what is already happening, and a Retry would leave the Workload stuck."""
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("train", [("main", 2, 4)])
    run(ctrl)
    mark(fabric, "train", decision_of(fabric.entry("train")))
    evicting = fabric.kueue.evict(fabric.ns, "train", "Preempted", "Preempted to accommodate a workload", preempted=True)
    assert is_true(evicting, "Evicted") and is_true(evicting, "QuotaReserved") and is_true(evicting, REQUEUE_CONDITION)
    version = fabric.workload("train")["metadata"]["resourceVersion"]
    assert run(ctrl) == [] and fabric.workload("train")["metadata"]["resourceVersion"] == version


# ---------------------------------------------------------------------- the reading itself


def admitted(decision: str = "d1", *, message: str | None = None, status: str = "True", **conditions: str) -> dict[str, Any]:
    conds = [{"type": t, "status": s} for t, s in {"QuotaReserved": "True", **conditions}.items()]
    conds.append({"type": REQUEUE_CONDITION, "status": status,
                  "message": message if message is not None else f"decision {decision}: pod team/p-0 (podset main, slot 0): {WHY}"})
    return {"metadata": {"name": "w", "namespace": "team", "uid": "u"}, "spec": {},
            "status": {"conditions": conds, "admissionChecks": [
                {"name": CHECK, "state": "Ready", "podSetUpdates": [{"name": "main", "annotations": {"atoll.dev/decision-id": decision}}]}]}}


def test_the_request_names_the_pod_and_the_decision() -> None:
    request = requeue_request(admitted(), [CHECK])
    assert request is not None and request.decision_id == "d1"
    assert request.detail == f"pod team/p-0 (podset main, slot 0): {WHY}"
    assert request.message.startswith("Retry: decision d1 cannot keep its placement: pod team/p-0 (podset main, slot 0)")


@pytest.mark.parametrize(("workload", "why"), [
    (admitted(Evicted="True"), "Kueue is evicting it"),
    (admitted(Finished="True"), "finished"),
    (admitted(QuotaReserved="False"), "no quota"),
    (admitted(status="False"), "cleared"),
    (admitted(message="decision d9: pod team/p-0: gone"), "another decision"),
    (admitted(message="no decision named here"), "unreadable message"),
    ({**admitted(), "spec": {"active": False}}, "deactivated"),
])
def test_no_request_is_read_where_none_may_be_acted_on(workload: dict[str, Any], why: str) -> None:
    assert requeue_request(workload, [CHECK]) is None, why
    assert requeue_request(admitted(), ["another-check"]) is None

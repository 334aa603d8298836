"""The wait state (attempts, first wait) comes from status the Workload's owner cannot write:
Kueue's retryCount on Atoll's entry and Atoll's own ``atoll.dev/TopologyWaiting`` condition.
The annotations older releases kept are ignored, so an owner cannot force a relax or block one."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import read_wait_state
from admission.controller._records import parse_time
from admission.controller._wait import WAITING_CONDITION, waiting_condition
from tests.admission.fabric import BLOCK, CLIQUE, Fabric, run
from tests.kube_objects import GROUP, VERSION

ELASTIC = {"main": {"atoll.dev/profile": "elastic"}}
T0 = 1_800_000_000.0


def wl(entry: dict[str, Any] | None = None, conditions: list[dict[str, Any]] | None = None,
       annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "w", "namespace": "ns", "annotations": annotations or {}},
            "status": {"admissionChecks": [{"name": "other", "state": "Retry", "retryCount": 9},
                                           *([{"name": "atoll", **entry}] if entry else [])],
                       "conditions": conditions or []}}


def waiting(status: str, since: str = "2027-01-15T08:00:00Z") -> dict[str, Any]:
    return {"type": WAITING_CONDITION, "status": status, "reason": "NoPlacementYet", "message": "", "lastTransitionTime": since}


def test_attempts_are_kueues_retry_count_on_atolls_entry_only() -> None:
    assert read_wait_state(wl({"state": "Pending", "retryCount": 2}), {"atoll"}).attempts == 2
    assert read_wait_state(wl({"state": "Pending"}), {"atoll"}).attempts == 0  # another check's count is not ours
    for junk in (-3, "7", True, None, 1.5):
        assert read_wait_state(wl({"state": "Pending", "retryCount": junk}), {"atoll"}).attempts == 0


def test_first_wait_is_the_true_conditions_transition_time() -> None:
    assert read_wait_state(wl(conditions=[waiting("True")]), {"atoll"}).first_waited_at == parse_time("2027-01-15T08:00:00Z")
    assert read_wait_state(wl(conditions=[waiting("False")]), {"atoll"}).first_waited_at is None
    assert read_wait_state(wl(conditions=[waiting("True", "not a time")]), {"atoll"}).first_waited_at is None


def test_owner_annotations_are_ignored() -> None:
    forged = wl({"state": "Pending"}, annotations={"atoll.dev/first-waited-at": "1970-01-01T00:00:00Z", "atoll.dev/attempts": "99"})
    state = read_wait_state(forged, {"atoll"})
    assert state.first_waited_at is None and state.attempts == 0


def test_the_condition_keeps_the_time_of_the_wait_under_way() -> None:
    first = waiting_condition(wl(), "wait", T0)
    assert first is not None and first["status"] == "True"
    again = waiting_condition(wl(conditions=[first]), "wait", T0 + 500)
    assert again is not None and again["lastTransitionTime"] == first["lastTransitionTime"]
    done = waiting_condition(wl(conditions=[first]), "admit", T0 + 600)
    assert done is not None and done["status"] == "False" and done["lastTransitionTime"] != first["lastTransitionTime"]
    assert waiting_condition(wl(), "admit", T0) is None  # never waited: nothing to write


# ---------------------------------------------------------------------- on the real apiserver


def half_full(fabric: Fabric) -> None:
    for b in range(2):
        for c in range(2):
            fabric.bind_pod(f"busy-b{b}c{c}", fabric.node_name(b, c, 0), 4)


def condition_of(obj: dict[str, Any]) -> dict[str, Any]:
    (cond,) = [c for c in obj["status"]["conditions"] if c["type"] == WAITING_CONDITION]
    return cond


def set_annotations(fabric: Fabric, name: str, annotations: dict[str, str]) -> None:
    """What the Workload's owner can do: edit its metadata."""
    fabric.custom.patch_namespaced_custom_object(GROUP, VERSION, fabric.ns, "workloads", name, {"metadata": {"annotations": annotations}},
                                                 _content_type="application/merge-patch+json")


@pytest.mark.apiserver
def test_a_forged_old_first_wait_does_not_relax(fabric: Fabric) -> None:
    fabric.install()
    half_full(fabric)
    forged = {"atoll.dev/first-waited-at": "1970-01-01T00:00:00Z", "atoll.dev/attempts": "40"}
    fabric.submit("gang", [("main", 2, 4)], podset_annotations=ELASTIC, annotations=forged)
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("gang")
    assert verdict.outcome == "wait" and not verdict.relaxed and verdict.reason == "relax-pending"
    assert entry["requeueAfterSeconds"] == 20  # elastic's first backoff, not the 40th
    assert "attempt 1" in entry["message"]


@pytest.mark.apiserver
def test_a_forged_future_first_wait_does_not_block_the_relax(fabric: Fabric) -> None:
    fabric.install()
    half_full(fabric)
    ctrl = fabric.controller()
    fabric.submit("gang", [("main", 2, 4)], podset_annotations=ELASTIC)
    (first,) = run(ctrl)
    assert first.outcome == "wait"
    set_annotations(fabric, "gang", {"atoll.dev/first-waited-at": "2999-01-01T00:00:00Z", "atoll.dev/attempts": "0"})
    fabric.clock.advance(300)
    fabric.requeue("gang")
    (second,) = run(ctrl)
    entry = fabric.entry("gang")
    assert second.outcome == "admit" and second.relaxed
    assert list(entry["podSetUpdates"][0]["nodeSelector"]) == [BLOCK]


@pytest.mark.apiserver
def test_the_waiting_condition_rides_the_entrys_write_and_kueue_leaves_it_alone(fabric: Fabric) -> None:
    fabric.install()
    half_full(fabric)
    applied: list[tuple[str, str | None]] = []
    real_apply = fabric.port.apply

    def counting_apply(resource: Any, obj: Any, **kw: Any) -> Any:
        applied.append((resource.plural, kw.get("subresource")))
        return real_apply(resource, obj, **kw)

    fabric.port.apply = counting_apply  # type: ignore[method-assign]
    ctrl = fabric.controller()
    fabric.submit("gang", [("main", 2, 4)], podset_annotations=ELASTIC)
    before = fabric.workload("gang")["metadata"]["resourceVersion"]
    run(ctrl)
    assert [a for a in applied if a[0] == "workloads"] == [("workloads", "status")]  # no extra write for the wait state
    after = fabric.workload("gang")
    assert int(after["metadata"]["resourceVersion"]) > int(before)
    cond = condition_of(after)
    assert cond["status"] == "True" and parse_time(cond["lastTransitionTime"]) == int(fabric.clock.now())
    atoll = [m for m in after["metadata"]["managedFields"] if m["manager"] == "atoll"]
    assert len(atoll) == 1 and atoll[0]["operation"] == "Apply"  # one apply: entry and condition together
    owned = atoll[0]["fieldsV1"]["f:status"]
    assert f'k:{{"type":"{WAITING_CONDITION}"}}' in owned["f:conditions"] and "f:admissionChecks" in owned

    fabric.clock.advance(100)
    fabric.requeue("gang")  # requeueAt, eviction, release, backoff over, a forced reservation: all Kueue's
    kept = condition_of(fabric.workload("gang"))
    assert kept == cond
    assert fabric.kueue.writes[-5:] == ["requeue-at", "evict", "release", "backoff-finished", "reserve"]

    (second,) = run(ctrl)
    assert second.outcome == "wait" and condition_of(fabric.workload("gang"))["lastTransitionTime"] == cond["lastTransitionTime"]
    assert fabric.entry("gang")["retryCount"] == 1 and "attempt 2" in fabric.entry("gang")["message"]

    fabric.finish_pod("busy-b0c0")  # an island frees up
    fabric.requeue("gang")
    (third,) = run(ctrl)
    done = condition_of(fabric.workload("gang"))
    assert third.outcome == "admit" and done["status"] == "False" and done["reason"] == "Placed"
    assert list(fabric.entry("gang")["podSetUpdates"][0]["nodeSelector"]) == [CLIQUE]

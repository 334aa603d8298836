"""The inbox between the watches and the worker is coalesced per object: however far the worker
falls behind, it holds one entry per object (the newest event, in the first one's place) and one
list per resource, and applying it leaves the cache as applying every event would."""

from __future__ import annotations

import queue
from typing import Any

import pytest

from admission.controller import Controller, KueueSettings, Settings
from admission.controller._watching import Inbox
from admission.kube import NODES, WORKLOADS, WatchEvent


def wl(name: str, rv: int, *, uid: str = "u1", state: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": str(rv)},
            "spec": {"podSets": []}, "status": {"admissionChecks": [{"name": "c", "state": state}]}}


def node(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv), "labels": {}}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}


def drain(inbox: Inbox) -> list[tuple[str, Any, Any]]:
    out = []
    while True:
        try:
            out.append(inbox.get_nowait())
        except queue.Empty:
            return out


def test_the_newest_event_of_an_object_replaces_the_waiting_one_in_its_place() -> None:
    inbox = Inbox()
    inbox.put(("event", WORKLOADS, WatchEvent("ADDED", wl("a", 1))))
    inbox.put(("event", NODES, WatchEvent("ADDED", node("n1", 2))))
    for rv in range(3, 1003):
        inbox.put(("event", WORKLOADS, WatchEvent("MODIFIED", wl("a", rv))))
    assert inbox.qsize() == 2
    items = drain(inbox)
    assert [(r, e.type, e.object["metadata"]["resourceVersion"]) for _, r, e in items] == [(WORKLOADS, "MODIFIED", "1002"), (NODES, "ADDED", "2")]


def test_a_list_replaces_what_its_resource_has_waiting_and_later_events_follow_it() -> None:
    inbox = Inbox()
    inbox.put(("event", WORKLOADS, WatchEvent("ADDED", wl("a", 1))))
    inbox.put(("event", NODES, WatchEvent("ADDED", node("n1", 2))))
    inbox.put(("list", WORKLOADS, [wl("a", 3), wl("b", 3)]))
    inbox.put(("event", WORKLOADS, WatchEvent("MODIFIED", wl("b", 4))))
    kinds = [(kind, r) for kind, r, _ in drain(inbox)]
    assert kinds == [("event", NODES), ("list", WORKLOADS), ("event", WORKLOADS)]


def test_a_recreated_object_keeps_its_predecessors_deletion() -> None:
    inbox = Inbox()
    inbox.put(("event", WORKLOADS, WatchEvent("MODIFIED", wl("a", 1, uid="old"))))
    inbox.put(("event", WORKLOADS, WatchEvent("DELETED", wl("a", 2, uid="old"))))
    inbox.put(("event", WORKLOADS, WatchEvent("ADDED", wl("a", 3, uid="new"))))
    got = [(e.type, e.object["metadata"]["uid"]) for _, _, e in drain(inbox)]
    assert got == [("DELETED", "old"), ("ADDED", "new")]


def test_get_waits_then_says_empty() -> None:
    with pytest.raises(queue.Empty):
        Inbox().get(timeout=0.01)


def test_the_controller_inbox_holds_one_entry_per_object_however_many_events_arrive() -> None:
    ctrl = Controller(object(), settings=Settings(kueue=KueueSettings(admission_check="c")))  # type: ignore[arg-type]
    for rv in range(1, 5001):
        ctrl.informers.inbox.put(("event", WORKLOADS, WatchEvent("MODIFIED", wl(f"w{rv % 10}", rv))))
    assert ctrl.informers.inbox.qsize() == 10
    for _ in range(10):
        ctrl._handle(ctrl.informers.inbox.get_nowait())
    assert sorted(o["metadata"]["resourceVersion"] for o in ctrl.cache.objects[WORKLOADS].values()) == [str(v) for v in range(4991, 5001)]

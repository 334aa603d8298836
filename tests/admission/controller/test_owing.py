"""Gangs owed their turn (``queueing.holdBehindGangs``), on the real apiserver: the controller
reads a gang waiting for quota from its cache, parks a Workload Kueue admits behind it (reason
``behind-gang``), decides the gang itself when it holds quota, and then decides again what waited
behind it."""

from __future__ import annotations

import pytest

from tests.admission.controller.test_parking import parking
from tests.admission.controller.test_yielding import active, kueue_deactivates, yielded_to
from tests.admission.fabric import Fabric, profiles_doc, run
from tests.kube_objects import now_rfc3339, workload

pytestmark = pytest.mark.apiserver


def held_doc(fabric: Fabric, mode: str) -> dict[str, object]:
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["queueing"] = {"reserveAfterSeconds": 600, "holdBehindGangs": mode}  # type: ignore[index]
    return doc


def gang_waits_for_quota(fabric: Fabric, name: str = "gang") -> None:
    """A 2-pod gang Kueue tried and did not reserve quota for (``QuotaReserved=False``). The
    controller's clock is past its creation by more than ``reserveAfterSeconds``: it is owed."""
    fabric.kueue.create(workload(fabric.ns, name, [("main", 2, 4)]))
    fabric.kueue._write(fabric.ns, name, "pending", lambda wl: {"conditions": [{
        "type": "QuotaReserved", "status": "False", "reason": "Pending", "lastTransitionTime": now_rfc3339(),
        "message": "couldn't assign flavors to pod set main: insufficient unused quota"}]})


def test_a_workload_admitted_behind_a_gang_owed_quota_parks_until_the_gang_holds_it(fabric: Fabric) -> None:
    fabric.install(held_doc(fabric, "quota"))
    ctrl = parking(fabric)
    gang_waits_for_quota(fabric)
    assert run(ctrl) == []  # nothing holds quota yet: nothing to decide
    fabric.submit("small", [("main", 1, 4)])  # created after the gang: behind it in Kueue's order
    (held,) = run(ctrl)
    entry = fabric.entry("small")
    assert held.outcome == "wait" and held.reason == "behind-gang" and held.parked and entry["state"] == "Pending"
    assert f"gang {fabric.ns}/gang (8 GPUs) is owed its turn" in entry["message"]
    # parked, its quota goes back to the gang (the gang's GPUs are free on the flavor): Kueue evicts it and admits the gang
    assert not active(fabric, "small") and yielded_to(fabric, "small") == f"{fabric.ns}/gang"
    kueue_deactivates(fabric, "small")
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    (gang,) = run(ctrl)
    assert gang.outcome == "admit" and fabric.entry("gang")["state"] == "Ready"  # an owed gang is never held
    assert active(fabric, "small")  # reactivated: no Workload waits for quota ahead of it
    fabric.kueue.reserve_quota(fabric.ns, "small", fabric.cq, fabric.flavor)
    (again,) = run(ctrl)
    assert again.outcome == "admit" and fabric.entry("small")["state"] == "Ready"  # owed no longer: decided on its own


def test_without_hold_behind_gangs_a_gang_waiting_for_quota_holds_nothing(fabric: Fabric) -> None:
    fabric.install()
    ctrl = parking(fabric)
    gang_waits_for_quota(fabric)
    fabric.submit("small", [("main", 1, 4)])
    (v,) = run(ctrl)
    assert v.outcome == "admit" and fabric.entry("small")["state"] == "Ready"


"""The reservation ledger lives in API state: a restarted controller rebuilds it, admits nothing
twice, and releases a reservation when pods bind, the Workload finishes or is evicted."""

from __future__ import annotations

from collections import Counter

import pytest

from admission.controller import Ledger, Reservation, decode_planned, encode_planned, holds_reservation
from tests.admission.controller.test_racing_workloads import one_island_free
from tests.admission.fabric import Fabric, planned, run
from topology import ResourceVector


@pytest.mark.apiserver
def test_restart_between_decisions_rebuilds_the_ledger(fabric: Fabric) -> None:
    fabric.install()
    one_island_free(fabric)
    fabric.submit("first", [("main", 2, 4)])
    before = fabric.controller()
    assert [v.outcome for v in run(before)] == ["admit"]
    del before  # the controller process is gone; only the API state remains

    after = fabric.controller()
    fabric.submit("second", [("main", 2, 4)])
    rv_first = fabric.workload("first")["metadata"]["resourceVersion"]
    verdicts = run(after)
    assert [(v.outcome, v.reserved_gpus) for v in verdicts] == [("wait", 8)]
    assert fabric.entry("second")["state"] == "Retry"
    assert fabric.workload("first")["metadata"]["resourceVersion"] == rv_first  # not decided again
    assert len(after.ledger) == 1


@pytest.mark.apiserver
def test_bound_pods_replace_the_reservation_and_finishing_frees_the_island(fabric: Fabric) -> None:
    fabric.install()
    one_island_free(fabric)
    fabric.submit("first", [("main", 2, 4)])
    ctrl = fabric.controller()
    run(ctrl)
    entry = fabric.entry("first")
    decision = entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"]
    for i, node in enumerate(planned(entry)):
        fabric.bind_pod(f"first-{i}", node, 4, decision_id=decision)

    fabric.submit("second", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait" and verdict.reserved_gpus == 0  # the pods, not the ledger, hold the GPUs now

    for i in range(2):
        fabric.finish_pod(f"first-{i}")
    fabric.finish("first")
    fabric.requeue("second")
    (verdict,) = run(fabric.controller())  # a fresh controller agrees
    assert verdict.outcome == "admit" and verdict.reserved_gpus == 0


@pytest.mark.apiserver
def test_eviction_releases_the_reservation(fabric: Fabric) -> None:
    fabric.install()
    one_island_free(fabric)
    fabric.submit("first", [("main", 2, 4)])
    ctrl = fabric.controller()
    run(ctrl)
    fabric.requeue("first")  # Kueue evicted it (e.g. preempted) and reserved again: the check is Pending
    fabric.submit("second", [("main", 2, 4)])
    verdicts = {v.outcome for v in run(ctrl)}
    assert verdicts == {"admit", "wait"}  # the island went to one of them, not to both, and not to nobody


# ----------------------------------------------------------------------------- pure parts


def test_planned_nodes_round_trip_and_compress() -> None:
    nodes = [(f"gb200-su-07-rack-{r:02d}-node-{n:02d}", 1) for r in range(16) for n in range(18)]
    plain = encode_planned(nodes[:3], 1000)
    assert plain == "gb200-su-07-rack-00-node-00=1,gb200-su-07-rack-00-node-01=1,gb200-su-07-rack-00-node-02=1"
    packed = encode_planned(nodes, 4000)
    assert packed is not None and packed.startswith("zlib+b64:") and len(packed) <= 4000
    assert decode_planned(packed) == dict(nodes)
    assert encode_planned(nodes, 256) is None
    with pytest.raises(ValueError, match="atoll.dev/planned-nodes: 'n1' is not node=pods"):
        decode_planned("n0=1,n1")


def test_outstanding_takes_off_pods_running_or_succeeded_anywhere() -> None:
    ledger = Ledger()
    r = Reservation("u", "ns/w", "d1", "gpu", "main", (("n0", 2), ("n1", 2)), ResourceVector(gpu=4))
    assert ledger.outstanding(r, {}) == [("n0", 2), ("n1", 2)]
    assert ledger.outstanding(r, {"main": Counter({"n0": 1})}) == [("n0", 1), ("n1", 2)]
    # the scheduler put one pod on n9 (same domain, other node): the last planned slot is released
    assert ledger.outstanding(r, {"main": Counter({"n0": 2, "n9": 1})}) == [("n1", 1)]
    # the pod on n9 failed (or went): its slot is planned again
    assert ledger.outstanding(r, {"main": Counter({"n0": 2})}) == [("n1", 2)]
    # a succeeded pod keeps its node's planned slot, as a running one does
    assert ledger.outstanding(r, {"main": Counter({"n0": 1})}, {"p1": "n1"}) == [("n0", 1), ("n1", 1)]
    assert ledger.outstanding(r, {"main": Counter({"n0": 2, "n1": 1})}, {"p1": "n1"}) == []


def test_only_a_live_ready_entry_reserves() -> None:
    def wl(state: str, **conds: str) -> dict:
        conditions = [{"type": "QuotaReserved", "status": "True"}] + [{"type": k, "status": v} for k, v in conds.items()]
        return {"spec": {}, "status": {"conditions": conditions, "admissionChecks": [{"name": "c", "state": state}]}}

    assert holds_reservation(wl("Ready"), {"c"})
    assert not holds_reservation(wl("Ready"), {"other"})
    assert not holds_reservation(wl("Pending"), {"c"})
    assert not holds_reservation(wl("Ready", Finished="True"), {"c"})
    assert not holds_reservation(wl("Ready", Evicted="True"), {"c"})
    assert not holds_reservation({**wl("Ready"), "spec": {"active": False}}, {"c"})


def test_owed_pods_come_from_the_admitted_count_and_survive_a_lost_plan() -> None:
    from tests.admission.controller.test_double_booking import CHECK, admitted
    from tests.admission.controller.test_double_booking import Fabric as Island

    island = Island()
    ledger = Ledger(bound=island.bound_pods)
    obj = admitted("w", {"n1": 1, "n2": 1}, pods=3)  # partial admission: 3 pods, only two planned
    ledger.observe(obj, [CHECK])
    (r,) = ledger.reservations()
    assert (r.pods, ledger.owed_pods(r), r.selector) == (3, 3, (("nvidia.com/gpu.clique", "i0"),))
    (owed,) = ledger.owed(island.snapshot())
    assert owed.witness == (("n1", 1), ("n2", 1), ("n3", 1))  # planned first, then the island in path order

    obj["status"]["admissionChecks"][0]["podSetUpdates"][0]["annotations"]["atoll.dev/planned-nodes"] = "n1"
    ledger.observe(obj, [CHECK])  # the plan is unreadable: the pods are still owed, anywhere in the island
    assert ledger.apply(island.snapshot()) == 12
    assert ledger.apply(island.snapshot(), exclude_uid="uid-w") == 0

    island.bind("d-w", "n5")
    island.bind("d-w", "n6")
    ledger.pods_changed("d-w")
    (owed,) = ledger.owed(island.snapshot())
    assert (owed.pods, owed.witness) == (1, (("n1", 1),))


def test_the_pod_templates_own_selector_narrows_the_domain() -> None:
    from tests.admission.controller.test_double_booking import CHECK, admitted
    from tests.admission.controller.test_double_booking import Fabric as Island

    island = Island()
    ledger = Ledger(bound=island.bound_pods)
    obj = admitted("w", {"n1": 1, "n2": 1})
    obj["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    ledger.observe(obj, [CHECK])
    (owed,) = ledger.owed(island.snapshot())
    assert owed.domain == ("n1",) and owed.witness == (("n1", 1),)
    snap = island.snapshot()
    ledger.apply(snap)
    assert [(s.workload, s.missing) for s in ledger.shortfalls] == [("team/w", 1)]
    assert snap.free[:, 0].tolist() == [0, 4, 4, 4, 4, 4]  # only n1 counts as full

"""A ClusterQueue's GPU quota with its cohort's, as Kueue v0.19.2 counts it (``_quota``), on
hand-worked cases of ``available`` in pkg/cache/scheduler/resource_node.go."""

from __future__ import annotations

from admission.controller._quota import CohortQuota, flavor_quota, reserved_by_workloads


def test_without_a_cohort_a_cluster_queue_has_its_nominal_quota_less_its_usage() -> None:
    q = CohortQuota(None)
    q.add("a", 16, None, None, 12)
    assert q.available("a") == 4
    q.release("a", 8)
    assert q.available("a") == 12


def test_a_cohort_lends_unused_quota_up_to_the_lending_and_borrowing_limits() -> None:
    q = CohortQuota("pool")
    q.add("a", 8, None, None, 8)
    q.add("b", 8, None, 2, 0)  # keeps 6 to itself, lends 2
    assert q.available("a") == 2
    assert q.available("b") == 6 + 2  # its own 6, and the 2 it stored in the cohort
    q.add("b", 8, None, None, 0)
    assert q.available("a") == 8
    q.add("a", 8, 3, None, 8)  # may borrow 3
    assert q.available("a") == 3
    q.release("a", 8)  # its own 8 back, plus 3 borrowed at most
    assert q.available("a") == 11


def test_quota_a_cluster_queue_keeps_from_its_cohort_is_no_use_to_another() -> None:
    q = CohortQuota("pool")
    q.add("a", 8, None, 0, 8)  # lends nothing: its usage stays within its local quota
    q.add("b", 4, None, None, 0)
    assert q.available("b") == 4
    q.release("a", 8)
    assert q.available("b") == 4
    assert q.available("a") == 8 + 4


def test_a_cluster_queues_quota_and_reserved_usage_on_one_flavor_are_read_from_its_spec_and_status() -> None:
    cq = {"spec": {"resourceGroups": [{"flavors": [
        {"name": "gb200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "16", "borrowingLimit": 4, "lendingLimit": "8"}]},
        {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 32}]}]}]},
        "status": {"flavorsReservation": [{"name": "gb200", "resources": [{"name": "nvidia.com/gpu", "total": "12"}]}]}}
    assert flavor_quota(cq, "gb200", ("nvidia.com/gpu",)) == (16, 4, 8, 12)
    assert flavor_quota(cq, "h100", ("nvidia.com/gpu",)) == (32, None, None, 0)
    assert flavor_quota(cq, "a100", ("nvidia.com/gpu",)) is None  # no quota there: Kueue never assigns it


def test_reserved_usage_adds_up_the_workloads_holding_quota() -> None:
    def wl(cq: str, flavor: str, gpus: int, reserved: bool = True) -> dict[str, object]:
        return {"status": {"conditions": [{"type": "QuotaReserved", "status": "True" if reserved else "False"}],
                           "admission": {"clusterQueue": cq, "podSetAssignments": [
                               {"flavors": {"nvidia.com/gpu": flavor}, "resourceUsage": {"nvidia.com/gpu": str(gpus)}}]}}}
    got = reserved_by_workloads([wl("a", "gb200", 8), wl("a", "gb200", 4), wl("b", "gb200", 2), wl("a", "gb200", 16, reserved=False)],
                                ("nvidia.com/gpu",))
    assert got == {("a", "gb200"): 12, ("b", "gb200"): 2}

"""Quota above the GPUs, through real Kueue: config/kueue/gb200-nvl72's ClusterQueue has 2,304 GPUs
of quota and the tier's KWOK nodes 288, so Kueue reserves quota for every one of six 64-GPU Jobs
(room for four: one per NVL72 rack). Atoll, parking its waits (``atoll run --park-waiting``), admits
four and parks two holding their quota; as admitted Jobs are deleted, the parked ones are woken,
oldest first, and admitted into the rack that freed. Every pod lands in its decision's rack, none
stays Pending for lack of GPUs, and no tray is booked beyond its GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import DecisionSettings
from tests.kueue.conftest import BLOCKS, CLIQUE, RACKS, Live, check_entry, is_true, model_job, model_profiles, wait_for

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

NS = "team-a"
JOBS = 6  # 16 pods x 4 GPUs each; four racks hold one each


def _rack(live: Live, job: dict[str, Any]) -> str:
    wl = live.workload(job)
    assert wl is not None
    (update,) = check_entry(wl)["podSetUpdates"]
    return str(update["nodeSelector"][CLIQUE])


def _in_its_rack(live: Live, job: dict[str, Any]) -> None:
    nodes = live.node_labels()
    pods = live.wait_bound(job, 16)
    assert {nodes[p.spec.node_name][CLIQUE] for p in pods} == {_rack(live, job)}


def test_quota_above_the_gpus_parks_what_does_not_fit_and_wakes_it_oldest_first_into_the_freed_rack(live: Live) -> None:
    assert BLOCKS * RACKS == 4
    live.set_profiles(model_profiles())
    jobs = [model_job("llm-pretrain", f"headroom-{i}") for i in range(JOBS)]  # strict: one NVL72 rack, 64 GPUs
    submitted: list[dict[str, Any]] = []
    try:
        with live.history(NS) as history, live.controller(decisions=DecisionSettings(park_waiting=True)) as ctrl:
            for job in jobs:
                submitted.append(live.submit(job))
                history.wait(submitted[-1], "quota reserved", lambda wl: is_true(wl, "QuotaReserved"))
            first, parked = submitted[:4], submitted[4:]
            for job in first:
                history.wait(job, "admitted", lambda wl: is_true(wl, "Admitted"))
                _in_its_rack(live, job)
            assert len({_rack(live, j) for j in first}) == 4
            for job in parked:  # quota held, Atoll's check Pending: parked, no pod created
                history.wait(job, "parked holding quota", lambda wl: is_true(wl, "QuotaReserved") and not is_true(wl, "Admitted")
                             and (check_entry(wl) or {}).get("state") == "Pending" and is_true(wl, "atoll.dev/TopologyWaiting"))
                assert live.pods(job) == []
            assert ctrl.quota_yields == 0  # nobody waits for quota: nothing to give
            assert live.gpus_booked_beyond_allocatable() == {}

            for gone, woken in zip(first[:2], parked):  # each deletion frees one rack: the oldest parked Job takes it
                freed = _rack(live, gone)
                live.delete(gone)
                history.wait(woken, "admitted into the freed rack", lambda wl: is_true(wl, "Admitted"))
                assert _rack(live, woken) == freed
                _in_its_rack(live, woken)
                assert live.gpus_booked_beyond_allocatable() == {}
                if woken is parked[0]:
                    later = live.workload(parked[1])
                    assert later is not None and not is_true(later, "Admitted")  # the younger one still waits
            running = first[2:] + parked
            wait_for("no pod of the Jobs left Pending", lambda: all(
                p.status.phase == "Running" for j in running for p in live.pods(j)) or None)
    finally:
        for job in submitted:
            live.delete(job)

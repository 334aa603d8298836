"""Preemption that clears a domain (``preemptDomain``), through real Kueue: lower-priority Jobs fill
every GB200 rack, a higher-priority gang fits only in a cleared rack, and Atoll's plan is carried
out by Kueue's own eviction (Atoll's check to Retry on each victim; Kueue evicts with reason
AdmissionCheck), the Job controller removes the victims' pods, and kube-scheduler binds the gang
in the cleared rack. A dry run first: the record names the victims, and nobody is evicted."""

from __future__ import annotations

import copy
import io
import json
import re
from collections import Counter
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from admission.controller import Recorder
from tests.kueue.conftest import (
    BLOCKS,
    CLIQUE,
    GROUP,
    RACKS,
    VERSION,
    History,
    Live,
    check_entry,
    condition,
    is_true,
    model_documents,
    model_job,
    model_profiles,
    wait_for,
)

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

NS = "team-a"
QUEUE, CQ = "clear", "gb200-clear"
LOW, HIGH = "atoll-clear-low", "atoll-clear-high"
LOW_PODS = 7  # two 7-tray Jobs per 18-tray rack, never three: every rack keeps 4 trays free
NOTE = re.compile(r"clears gpu\.clique (\S+) by evicting (.+) \((\d+) GPUs, ")


def _create(create: Any, *args: Any) -> None:
    """Create once per session: another test of the tier may have made it already."""
    try:
        create(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise


def _setup(live: Live) -> None:
    """Two priorities, and a ClusterQueue like config/kueue's whose policy lets a Workload preempt
    lower priorities (Kueue's default, Never, lets nobody), with ample quota: Kueue itself never
    preempts here; only Atoll's plan can clear a rack."""
    for name, value in ((LOW, 100), (HIGH, 1000)):
        _create(live.custom.create_cluster_custom_object, GROUP, VERSION, "workloadpriorityclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value})
    cq = copy.deepcopy(next(d for d in model_documents("kueue.yaml") if d["kind"] == "ClusterQueue"))
    cq["metadata"] = {"name": CQ}
    cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    _create(live.custom.create_cluster_custom_object, GROUP, VERSION, "clusterqueues", cq)
    _create(live.custom.create_namespaced_custom_object, GROUP, VERSION, NS, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": NS},
        "spec": {"clusterQueue": CQ}})
    wait_for(f"ClusterQueue {CQ} active", lambda: is_true(live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ), "Active"))


def _profiles(mode: str) -> dict[str, Any]:
    doc = model_profiles(strict={"preemptDomain": mode, "retry": {"initialSeconds": 3, "maxSeconds": 3}})
    doc["queues"][f"{NS}/{QUEUE}"] = "strict"
    return doc


def _job(name: str, priority: str, pods: int) -> dict[str, Any]:
    job = model_job("llm-pretrain", name, parallelism=pods, completions=pods)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE, "kueue.x-k8s.io/priority-class": priority}
    return job


def _records(sink: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in sink.getvalue().splitlines() if line.startswith("{")]


def _plans(sink: io.StringIO, workload: str, dry_run: bool) -> list[tuple[str, tuple[str, ...], int]]:
    """(rack, victims, freed GPUs) of each preemption note in ``workload``'s decision records."""
    prefix = "preemption (dry run, nothing evicted): " if dry_run else "preemption: "
    out = []
    for rec in _records(sink):
        for note in rec.get("notes") or []:
            if rec["workload"] == workload and note.startswith(prefix):
                match = NOTE.search(note)
                assert match, note
                out.append((match.group(1), tuple(match.group(2).split(", ")), int(match.group(3))))
    return out


def _ever(history: History, keys: dict[str, str], pred: Any) -> set[str]:
    """The Workloads (by key) of which some recorded version satisfies ``pred``."""
    with history.cv:
        return {keys[wl["metadata"]["name"]] for wl in history.versions if wl["metadata"]["name"] in keys and pred(wl)}


def test_a_gang_clears_one_rack_through_kueues_own_eviction_after_a_dry_run_that_only_names_the_victims(live: Live) -> None:
    _setup(live)
    sink = io.StringIO()
    live.set_profiles(_profiles("dry-run"))
    lows = [_job(f"fill-{i}", LOW, LOW_PODS) for i in range(BLOCKS * RACKS * 2)]
    gang = _job("gang", HIGH, 16)  # 16 trays in one rack: every rack has 4 free until one is cleared
    submitted: list[dict[str, Any]] = []
    try:
        with live.history(NS) as history, live.controller(Recorder(sink)):
            for job in lows:
                submitted.append(live.submit(job))
            lows = submitted[:]
            for job in lows:
                history.wait(job, "admitted", lambda wl: is_true(wl, "Admitted"))
            nodes = live.node_labels()
            placed = {j["metadata"]["name"]: live.wait_bound(j, LOW_PODS) for j in lows}
            where = {name: {p.spec.node_name for p in pods} for name, pods in placed.items()}
            used = Counter(nodes[n][CLIQUE] for ns in where.values() for n in ns)
            assert sorted(used.values()) == [2 * LOW_PODS] * (BLOCKS * RACKS)  # the precondition: no rack holds the gang
            keys = {live.workload(j)["metadata"]["name"]: f"{NS}/{live.workload(j)['metadata']['name']}" for j in lows}
            job_of = {keys[live.workload(j)["metadata"]["name"]]: j["metadata"]["name"] for j in lows}

            # dry run: the gang waits, its records name a rack and its victims, and nobody is evicted
            gang = live.submit(gang)
            submitted.append(gang)
            gang_wl = wait_for("the gang's Workload", lambda: live.workload(gang))["metadata"]["name"]
            dry = wait_for("two dry-run decisions of the gang", lambda: (p := _plans(sink, gang_wl, True)) and len(p) >= 2 and p)
            assert len(set(dry)) == 1, dry  # the same state, the same plan
            domain, victims, freed = dry[0]  # the rack's path in the Topology: zone/block/rack
            rack = domain.rsplit("/", 1)[-1]
            assert len(victims) == 2 and set(victims) <= set(keys.values())
            assert {nodes[n][CLIQUE] for v in victims for n in where[job_of[v]]} == {rack}  # the two Jobs of that rack
            assert freed == 2 * LOW_PODS * 4
            assert _ever(history, keys, lambda wl: (check_entry(wl) or {}).get("state") == "Retry") == set()
            assert _ever(history, keys, lambda wl: is_true(wl, "Evicted")) == set()
            assert all(len(live.pods(j)) == LOW_PODS for j in lows)
            gang_now = live.workload(gang)
            assert gang_now is not None and not is_true(gang_now, "Admitted")

            # on: the same plan is applied; Kueue evicts exactly the victims, and the gang takes their rack
            live.set_profiles(_profiles("on"))
            (applied,) = wait_for("the applied plan in the gang's record", lambda: _plans(sink, gang_wl, False))
            assert applied == dry[0]
            victim_jobs = [j for j in lows if keys[live.workload(j)["metadata"]["name"]] in victims]
            for job in victim_jobs:
                retried, i = history.wait(job, "Atoll's check to Retry", lambda wl: (check_entry(wl) or {}).get("state") == "Retry")
                assert check_entry(retried)["message"].startswith(f"Preempted by Atoll to clear gpu.clique {domain} for Workload {NS}/{gang_wl}")
                evicted, _ = history.wait(job, "evicted by Kueue", lambda wl: is_true(wl, "Evicted"), after=i)
                assert condition(evicted, "Evicted")["reason"] == "AdmissionCheck"
            for job in victim_jobs:
                wait_for(f"{job['metadata']['name']}: its pods gone (Kueue suspended it)", lambda job=job: not live.pods(job))
            admitted, _ = history.wait(gang, "admitted in the cleared rack", lambda wl: is_true(wl, "Admitted"))
            (update,) = check_entry(admitted)["podSetUpdates"]
            assert update["nodeSelector"][CLIQUE] == rack
            bound = live.wait_bound(gang, 16)
            assert {nodes[p.spec.node_name][CLIQUE] for p in bound} == {rack}
            assert _ever(history, keys, lambda wl: is_true(wl, "Evicted")) == set(victims)  # exactly the planned victims
            for job in lows:  # the others run on, where they were
                if job not in victim_jobs:
                    assert {p.spec.node_name for p in live.pods(job)} == where[job["metadata"]["name"]]
            assert len(_plans(sink, gang_wl, False)) == 1  # one plan applied, not one per retry
            assert live.gpus_booked_beyond_allocatable() == {}
            for job in victim_jobs:  # 18 - 16 trays left in the rack, 4 elsewhere: they wait for room
                wl = live.workload(job)
                assert wl is not None and not is_true(wl, "Admitted") and not live.pods(job)
    finally:
        live.set_profiles(model_profiles())
        for job in submitted:
            live.delete(job)

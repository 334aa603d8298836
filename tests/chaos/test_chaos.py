"""Chaos on the real apiserver: faults between the controller and the API, the controller killed
at random points, Kueue and an adversarial scheduler around it, running pods failing and being
replaced; the audit of every run's final state finds no double booking, no unplaceable owed pod,
nothing lost and nothing decided twice. The audit is not blind: a controller whose ledger forgets
owed pods is caught, so is one whose ledger counts a failed pod's slot as done, and so is the
scheduler taking a node-level domain's only node for a Workload admitted on the whole clique."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from kubernetes import client

from admission.controller import Controller
from admission.controller._invariant import ClaimSet
from tests.admission.fabric import Fabric, planned, run
from tests.chaos.actors import FAILED_NODE, NodeSpec, Scheduler, admitted
from tests.chaos.audit import unplaceable_pods
from tests.chaos.config import RunConfig
from tests.chaos.harness import ChaosRun
from tests.chaos.planted import planted_failure
from tests.chaos.proxy import Received
from tests.chaos.runner import run_many
from tests.chaos.terms import AGENT, writes_answered_late, writes_outside_term
from tests.kube_objects import manifest
from topology import ResourceVector

pytestmark = pytest.mark.apiserver


def test_a_few_seeded_runs_with_faults_and_kills_keep_every_invariant(chaos_apiserver: Any) -> None:
    """Every run also fails its first running pod (``plant_failure``), so the failure path is
    audited whatever the dice draw (a random ``fail_rate`` alone drew no failure in some runs)."""
    config = RunConfig(seed=11, fault_rate=0.2, seconds=4.0, shapes="flat", fail_rate=0.2, plant_failure=True)
    summary = run_many(chaos_apiserver, 3, config, prefix="chaos-small")
    assert summary.clean, summary.json()
    assert summary.ledger_mismatch == 0, summary.failed_runs
    # the runs did what they claim: faults answered, controllers killed, decisions written, pods bound, failed and replaced
    assert sum(summary.faults.values()) > 0 and sum(summary.kills.values()) > 0
    assert summary.decisions > 0 and summary.admissions > 0 and summary.bound > 0
    assert summary.pods_failed > 0 and summary.replacements_bound > 0


def test_seeded_runs_with_pipelined_writes_keep_every_invariant(chaos_apiserver: Any) -> None:
    """Decision writes in flight at once (``write_workers``), under faults and kills: no
    double booking, nothing lost, the ledger matches the cluster."""
    summary = run_many(chaos_apiserver, 3, RunConfig(seed=31, fault_rate=0.2, seconds=4.0, shapes="flat", fail_rate=0.2, write_workers=4),
                       prefix="chaos-pipelined")
    assert summary.clean, summary.json()
    assert summary.ledger_mismatch == 0, summary.failed_runs
    assert sum(summary.faults.values()) > 0 and summary.decisions > 0 and summary.admissions > 0


def test_an_atoll_run_process_killed_with_sigkill_keeps_every_invariant(chaos_apiserver: Any) -> None:
    config = RunConfig(seed=21, fault_rate=0.2, seconds=8.0, kill_rate=0.05, shapes="flat", process=True)
    summary = run_many(chaos_apiserver, 1, config, prefix="chaos-process")
    assert summary.clean, summary.json()
    assert summary.kills["sigkill"] >= 1 and summary.decisions > 0, summary.json()


def test_two_replicas_with_the_leader_killed_never_write_in_one_term(chaos_apiserver: Any) -> None:
    config = RunConfig(seed=31, fault_rate=0.2, seconds=6.0, kill_rate=0.05, shapes="nested", replicas=True)
    summary = run_many(chaos_apiserver, 2, config, prefix="chaos-replicas")
    assert summary.clean, summary.json()
    assert summary.dual_leaders == 0 and sum(summary.kills.values()) >= 1, summary.json()
    assert summary.takeovers >= 3 and summary.decisions > 0, summary.json()  # leaders were replaced (2 runs, 3+ tenures) and decided


SLOW_SERVER = {"fault_rate": 0.4, "faults": ("slow",), "slow_seconds": (0.5, 3.0), "workloads": 16, "seconds": 8.0}
"""A server that holds 40% of requests for 0.5 to 3 s, longer than the gap between a term's end
and a standby's takeover (0.5 s with the chaos ``LEASE``): renewals lapse, leaders change often,
and a write sent near a term's end reaches the server late unless its attempt ended first."""


def _write(sent: float, answered: float | None, who: str, rv: int | None, *, lease_holder: str | None = None, status: int = 200) -> Received:
    path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/atoll" if lease_holder is not None else "/apis/kueue.x-k8s.io/v1beta2/workloads/w/status"
    return Received(sent, answered, "PUT" if lease_holder is not None else "PATCH", path, AGENT + who, status, lease_holder=lease_holder,
                    lease_term=1 if lease_holder == "chaos-x-a" else 2, resource_version=rv)


def test_the_term_audit_reads_the_servers_timeline() -> None:
    """The audit is not blind: a write the server applied (by its revisions) after another
    replica's Lease write, or before its sender held the Lease at all, counts; one applied inside
    the sender's hold does not, however late its answer came; a write whose outcome is unknown
    is judged by time, conservatively. (Runs that make a deposed leader's attempt land after a
    takeover depend on timing; the audit's rule itself is checked here on a timeline of the
    server's own shape.)"""
    a_holds = _write(0.0, 0.01, "chaos-x-a", 10, lease_holder="chaos-x-a")
    b_takes = _write(2.0, 2.01, "chaos-x-b", 20, lease_holder="chaos-x-b")
    inside = _write(1.0, 1.05, "chaos-x-a", 12)
    answered_late = _write(1.9, 2.5, "chaos-x-a", 15)  # sent in a's term, answered after b's Lease write, applied before it
    applied_late = _write(1.9, 2.5, "chaos-x-a", 21)  # sent in a's term, applied after b's Lease write
    reached_late = _write(3.0, 3.02, "chaos-x-a", 25)  # reached the server while the Lease named b
    before_any = _write(-1.0, -0.9, "chaos-x-b", 5)
    no_answer = _write(1.95, None, "chaos-x-a", None)  # the server's answer never came: outcome unknown, b took over meanwhile
    refused = _write(3.0, 3.01, "chaos-x-a", None, status=409)  # the server applied nothing
    timed_out = _write(1.95, 2.3, "chaos-x-a", None, status=504)  # the server gave up: maybe applied, after b's Lease write was sent
    cut_early = _write(1.5, 1.6, "chaos-x-a", None, status=0)  # the server hung up at 1.6, before b's Lease write: inside
    cut_late = _write(1.9, 2.2, "chaos-x-a", None, status=0)  # the server hung up after b's Lease write was sent
    no_op = _write(3.0, 3.01, "chaos-x-a", 12)  # answered at an earlier revision: the object as it was, nothing applied
    other_run = _write(3.0, 3.02, "chaos-y-a", 30)  # another namespace's replica: not this run's
    timeline = [a_holds, inside, answered_late, applied_late, b_takes, reached_late, before_any, no_answer, refused, timed_out, cut_early,
                cut_late, no_op, other_run]
    found = writes_outside_term(timeline, "chaos-x-")
    assert len(found) == 6, found
    assert sum("applied at revision 21 while the Lease named 'chaos-x-b'" in f for f in found) == 1
    assert sum("applied at revision 25 while the Lease named 'chaos-x-b' (its Lease write at revision 20, term 2)" in f for f in found) == 1
    assert sum("applied at revision 5 while the Lease named 'nobody'" in f for f in found) == 1
    assert sum("got no answer; meanwhile 'chaos-x-b' sent its Lease write (term 2)" in f for f in found) == 1
    assert sum("answered 0.300s after 'chaos-x-b' sent its Lease write" in f for f in found) == 1
    assert sum("ended without an answer 0.200s after 'chaos-x-b' sent its Lease write" in f for f in found) == 1
    assert writes_answered_late(timeline, "chaos-x-") == 2  # answered_late, and no_op (overlapping b's takeover by time)
    assert writes_outside_term([a_holds, inside, answered_late, b_takes], "chaos-x-") == []


def test_write_attempts_bounded_by_the_term_never_land_outside_it(chaos_apiserver: Any) -> None:
    config = RunConfig(seed=41, kill_rate=0.06, shapes="nested", replicas=True, **SLOW_SERVER)  # type: ignore[arg-type]
    summary = run_many(chaos_apiserver, 2, config, prefix="chaos-bounded")
    assert summary.takeovers >= 2 and summary.writes_received > 0 and summary.decisions > 0, summary.json()
    assert summary.dropped_slow > 0, summary.json()  # attempts did end while the server held them
    assert summary.writes_outside_term == 0, summary.json()
    assert summary.clean, summary.json()


def test_writes_answered_after_a_takeover_but_applied_before_it_are_not_outside_the_term(chaos_apiserver: Any) -> None:
    """The proxy reads the server's answer to 40% of writes 0.5 to 3 s late (``late-read``, as a
    loaded proxy process does): many answers come after another replica's Lease write, which a
    timing audit counts against their sender; the server's revisions show each was applied
    inside its sender's term. Whether a late answer meets a takeover is up to thread timing (on a
    loaded machine the client may give up first), so up to three seeds run until one does; every
    run, that one or not, must stay inside its terms."""
    late = 0
    for seed in (41, 42, 43):
        config = RunConfig(seed=seed, kill_rate=0.06, shapes="nested", replicas=True, **{**SLOW_SERVER, "faults": ("late-read",)})  # type: ignore[arg-type]
        summary = run_many(chaos_apiserver, 2, config, prefix=f"chaos-late-read-s{seed}")
        assert summary.faults["late-read"] > 0 and summary.takeovers >= 2 and summary.decisions > 0, summary.json()
        assert summary.writes_outside_term == 0 and summary.clean, summary.json()
        late += summary.writes_answered_late
        if late:
            break
    assert late > 0  # the timing audit's false alarm happened, and the server's record cleared it


def test_writes_the_server_ended_or_hung_up_on_are_settled_from_its_record(chaos_apiserver: Any) -> None:
    """30 % of writes either reach the server with a 1 ms deadline (``deadline``: the server ends
    them itself, with a 504 or after applying them) or are cut off after the server got them
    (``hang-up``): their answers say nothing of whether they were applied. The audit settles
    every one from the server's record, finds its matching sound on every answered write, and
    none of them applied outside its sender's term."""
    config = RunConfig(seed=51, fault_rate=0.3, faults=("deadline", "hang-up"), seconds=6.0, kill_rate=0.05, shapes="nested",
                       replicas=True)
    summary = run_many(chaos_apiserver, 2, config, prefix="chaos-ended")
    assert summary.faults["deadline"] > 0 and summary.faults["hang-up"] > 0 and summary.decisions > 0, summary.json()
    assert summary.writes_unknown > 0 and summary.writes_unknown_unsettled == 0, summary.json()
    assert summary.record_misses == 0 and summary.writes_checked > 0, summary.json()
    assert summary.writes_outside_term == 0 and summary.clean, summary.json()


def test_a_server_still_slow_while_settling_has_every_workload_decided_within_the_terms(chaos_apiserver: Any) -> None:
    """The settle phase on a server that stays slow (as a loaded machine's: reads time out):
    with the chaos terms a clean leader's writes were refused by its own fence and 11 Workloads
    were left undecided (counted lost); the settle's terms leave room for the server's answers,
    and every write still lands inside its sender's term."""
    config = RunConfig(seed=41, kill_rate=0.06, shapes="nested", replicas=True, settle_faults=True, **SLOW_SERVER)  # type: ignore[arg-type]
    summary = run_many(chaos_apiserver, 2, config, prefix="chaos-slow-settle")
    assert summary.writes_received > 0 and summary.decisions > 0, summary.json()
    assert summary.lost == 0 and summary.writes_outside_term == 0, summary.json()
    assert summary.clean, summary.json()


def forgetful_controller(*args: Any, **kwargs: Any) -> Controller:
    """A controller whose ledger counts nothing as owed: admitted pods not yet bound look free."""
    ctrl = Controller(*args, **kwargs)
    ctrl.ledger.apply = lambda snapshot, **_: 0  # type: ignore[method-assign]
    ctrl.ledger.claims = lambda snapshot, **_: ClaimSet.empty(snapshot.num_nodes)  # type: ignore[method-assign]
    return ctrl


def test_the_audit_catches_a_ledger_that_forgets_owed_pods(chaos_apiserver: Any) -> None:
    config = RunConfig(seed=5, fault_rate=0.0, seconds=2.0, quota_factor=2.0, kill_rate=0.0, crash_rate=0.0,
                       bind_rate=0.05, finish_rate=0.0, preempt_rate=0.0, shapes="flat")
    summary = run_many(chaos_apiserver, 2, config, prefix="chaos-forgetful", controller_factory=forgetful_controller)
    assert summary.unplaceable_owed + summary.double_booked > 0, summary.json()
    assert not summary.clean


def counts_failed_pods_as_done(*args: Any, **kwargs: Any) -> Controller:
    """A controller whose ledger sees every pod it ever saw bound as still bound (on its node), so
    a failed pod's slot is not owed again while its replacement is pending."""
    ctrl = Controller(*args, **kwargs)
    seen: dict[str, dict[str, Counter[str]]] = {}
    live = ctrl.ledger.bound

    def ever_bound(decision_id: str) -> dict[str, Counter[str]]:
        memory = seen.setdefault(decision_id, {})
        for podset, nodes in live(decision_id).items():
            memory[podset] = memory.get(podset, Counter()) | nodes
        return memory

    ctrl.ledger.bound = ever_bound
    return ctrl


def test_the_audit_catches_a_ledger_that_counts_failed_pods_as_done(chaos_apiserver: Any) -> None:
    """The planted failure (``planted``): the faulty ledger hands the failed pod's slot to the
    next Workload while the replacement is pending, and the audit finds the pod left without room."""
    faulty = planted_failure(chaos_apiserver, "chaos-failed-done", counts_failed_pods_as_done)
    assert faulty.narrow_outcome == "admit", faulty.result.violations
    assert faulty.result.pods_failed == 1 and faulty.result.replacements_bound == 1, faulty.result
    assert faulty.result.unplaceable_owed + faulty.result.double_booked > 0, faulty.result
    assert not faulty.result.clean


def test_an_honest_ledger_keeps_a_failed_pods_slot_for_its_replacement(chaos_apiserver: Any) -> None:
    """The same planted failure with the controller as it ships: the next Workload waits, and
    the audit finds nothing (so what it finds with the faulty ledger is the fault)."""
    honest = planted_failure(chaos_apiserver, "chaos-failed-honest")
    assert honest.narrow_outcome == "wait", honest.result.violations
    assert honest.result.pods_failed == 1 and honest.result.replacements_bound == 1, honest.result
    assert honest.result.clean and honest.result.ledger_mismatch == 0, honest.result.violations


def one_clique(kube_client: Any, ns: str) -> tuple[Fabric, list[str]]:
    """A namespace with one clique of three 4-GPU nodes."""
    client.CoreV1Api(kube_client).create_namespace(manifest({"metadata": {"name": ns}}))
    fabric = Fabric(kube_client, ns)
    fabric.install(nodes=False)
    return fabric, [fabric.add_node(0, 0, i) for i in range(3)]


def admit(fabric: Fabric, name: str, pods: int) -> dict[str, Any]:
    """Submit a Workload of ``pods`` 4-GPU pods, have a fresh controller admit it; its check entry."""
    fabric.submit(name, [("main", pods, 4)])
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit", verdict.message
    return fabric.entry(name)


def test_a_node_level_domain_inside_another_workloads_clique_keeps_its_room(kube_client: Any) -> None:
    fabric, nodes = one_clique(kube_client, "chaos-nested-domain")
    wide = admit(fabric, "wide", 2)
    admit(fabric, "narrow", 1)
    (narrow_node,) = planned(fabric.entry("narrow"))
    assert narrow_node not in planned(wide) and wide["podSetUpdates"][0]["nodeSelector"] != {"kubernetes.io/hostname": narrow_node}
    assert fabric.entry("narrow")["podSetUpdates"][0]["nodeSelector"] == wide["podSetUpdates"][0]["nodeSelector"]  # the clique

    # the scheduler, inside wide's clique as its nodeSelector allows, takes the narrow Workload's only node first
    decision = wide["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"]
    fabric.bind_pod("wide-0", narrow_node, 4, decision_id=decision)
    assert admitted(fabric.workload("narrow"), fabric.check)

    ctrl = fabric.controller()
    ctrl.sync()
    snap = ctrl.cache.snapshot(fabric.flavor)
    alloc = {n: ctrl.cache.nodes[n].allocatable for n in snap.node_names}
    used = {n: ctrl.cache.usage.get(n, ResourceVector()) for n in snap.node_names}
    assert sorted(alloc) == sorted(nodes)
    assert unplaceable_pods(alloc, used, ctrl.ledger.owed(snap)) == 0


def test_the_audit_finds_room_for_a_replacement_whose_workload_plans_a_narrow_workloads_node(kube_client: Any) -> None:
    """A failure gives a wide Workload back a claim over a one-node Workload admitted meanwhile on
    the wide one's planned node: the audit's ground truth places the pending replacement where
    its failed pod ran (where it binds) and the one-node Workload on its node, instead of a greedy
    first pick of the wide one's plan that leaves no room for the other."""
    ns = "chaos-failed-wide-claim"
    fabric, nodes = one_clique(kube_client, ns)
    entry = admit(fabric, "a-wide", 2)
    wide = entry["podSetUpdates"][0]
    first, second = sorted(planned(entry))
    (spare,) = set(nodes) - {first, second}
    fabric.create_pod("a-wide-0", 4, wide, node_name=spare)  # bound off its plan, as the scheduler may
    fabric.create_pod("a-wide-1", 4, wide, node_name=second)
    narrow = admit(fabric, "b-narrow", 1)["podSetUpdates"][0]  # a-wide owes nothing: its planned node `first` is free
    assert narrow["nodeSelector"] == {"kubernetes.io/hostname": first}

    fabric.finish_pod("a-wide-0", "Failed")  # the replacement is pending; it binds back on `spare`
    fabric.create_pod("a-wide-2", 4, {**wide, "annotations": {**wide["annotations"], FAILED_NODE: spare}})

    chaos = ChaosRun(kube_client, "", None, ns, RunConfig())  # type: ignore[arg-type]  # only its audit is used
    chaos.nodes = [NodeSpec(n, dict((fabric.core.read_node(n).metadata or client.V1ObjectMeta()).labels or {}), 4) for n in nodes]
    chaos.scheduler = Scheduler(fabric.core, ns, fabric.check, chaos.nodes, random.Random(0))
    owed = chaos.owed_from_api(chaos.workloads())
    ctrl = fabric.controller()
    ctrl.sync()
    alloc = {n: ctrl.cache.nodes[n].allocatable for n in nodes}
    used = {n: ctrl.cache.usage.get(n, ResourceVector()) for n in nodes}
    assert unplaceable_pods(alloc, used, owed) == 0
    assert [(o.workload, o.pods, o.planned[0]) for o in owed] == [(f"{ns}/a-wide", 1, (spare, 1)), (f"{ns}/b-narrow", 1, (first, 1))]

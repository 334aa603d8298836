"""The audit of a chaos run's final state, after faults stop and a clean controller has had
the chance to decide what is left:

- ``double_booked``: a node where bound pods plus the owed pods the ledger (rebuilt by a fresh
  controller from a list of the API) counts there exceed allocatable;
- ``unplaceable_owed``: owed pods, counted independently from the API (admitted count minus the
  pods of that decision bound and unfinished, minus those that succeeded), that no assignment
  fits in their nodeSelector domain;
- ``lost``: Workloads Atoll must decide (quota held, not evicted, entry Pending) left undecided;
- ``duplicate_decisions``: decision records beyond one per quota reservation Kueue made;
- ``dual_leaders`` (with ``replicas``: two controllers electing a leader on a Lease, the leader
  killed at random): decision records of one lease term written by two replicas, records written
  with no term, and moments when two live replicas both held a valid term;
- ``writes_outside_term`` (with ``replicas``): writes the apiserver applied from a replica
  when the Lease's history says it did not hold the Lease. The proxy records each write as it
  forwards it, with the server's answer: the resourceVersion it answered, and for each Lease
  write it accepted, the holder. A write must be applied after its sender's hold of the Lease
  was accepted and before any other replica's Lease write, in the server's order of revisions
  (``terms``). That order is exact on this test server only: it keeps every object in one
  etcd, whose revision is one store-wide counter, and answers an object's last revision as its
  resourceVersion; the Kubernetes API calls resourceVersion opaque, and Atoll never reads it
  this way. A write whose answer did not say whether it was applied (a 5xx, a hang-up, no
  answer) is settled from the server's own record (``history``: watches on the run's objects):
  the revision it made, or none. ``writes_answered_late`` counts the writes answered after a
  takeover began that were applied before it; ``writes_unknown`` those settled from the record
  (``writes_unknown_applied`` of them made a revision); ``record_misses`` answered writes the
  record did not show as answered (the matching's own check). Terms are real (the short ``LEASE``); a replica killed in-process is
  a paused one: a write it had in flight still lands unless its timeout ends it first.
"""

from __future__ import annotations

import io
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from admission.controller import Controller, Recorder, check_invariant, decode_planned
from admission.controller._invariant import Demand, OwedPods, place_owed, pod_shape
from admission.kube import KubePort
from tests.chaos.actors import FINISHED, actionable, admitted, decision_of, entry_of, failed_node_of, gpus_of, phase_of
from tests.chaos.terms import AGENT, record_misses, settle_unknown, writes_answered_late, writes_outside_term
from topology import ResourceVector

if TYPE_CHECKING:
    from tests.chaos.harness import ChaosRun

__all__ = ["audit", "audit_terms", "describe", "owed_from_api", "unplaceable_pods"]


def audit(run: ChaosRun) -> None:
    r = run.result
    wls = run.workloads()
    r.lost = sum(actionable(wl, run.check) for wl in wls)
    r.admissions = run.kueue.admissions
    r.preemptions = run.kueue.preemptions
    r.bound, r.bound_on_others_plan = run.scheduler.bound, run.scheduler.on_planned_of_others
    r.pods_failed, r.replacements_bound = run.scheduler.failed, run.scheduler.replacements_bound
    records = run._records()
    r.decisions = len(records)
    per_uid = Counter(str(rec["uid"]) for rec in records if rec.get("namespace") == run.ns)
    r.duplicate_decisions = sum(max(0, n - run.kueue.reservations[uid]) for uid, n in per_uid.items())
    if run.cfg.replicas:
        audit_terms(run, records)

    ctrl = Controller(KubePort(run.api), settings=run.settings(), recorder=Recorder(io.StringIO()))
    ctrl.sync()
    snap = ctrl.cache.snapshot(run.flavor)
    names = list(snap.node_names)
    alloc = {n: ctrl.cache.nodes[n].allocatable for n in names}
    used = {n: ctrl.cache.usage.get(n, ResourceVector()) for n in names}
    ledger_owed = ctrl.ledger.owed(snap)
    own = owed_from_api(run, wls)
    for v in check_invariant(alloc, used, ledger_owed):
        r.violations.append(f"ledger {v.kind}: {v.message}")
        r.double_booked += v.kind == "overbooked"
    for v in check_invariant(alloc, used, own, check_witness=False):
        r.violations.append(f"api {v.kind}: {v.message}")
        r.double_booked += v.kind == "overbooked"
    r.unplaceable_owed = unplaceable_pods(alloc, used, own)
    if r.violations:
        r.violations.append(describe(run, wls, used))
    if sum(o.pods for o in ledger_owed) != sum(o.pods for o in own):
        r.ledger_mismatch += 1
        r.violations.append(f"ledger owes {sum(o.pods for o in ledger_owed)} pods, the API says {sum(o.pods for o in own)}")

def audit_terms(run: ChaosRun, records: list[dict[str, Any]]) -> None:
    """One writer per lease term, and no write applied outside its sender's term: the writes
    whose answer did not say are settled from the server's record (``history``), when the
    run's watches delivered all of it (else they are judged by time, and a violation says so)."""
    r = run.result
    writers: dict[int, set[str]] = {}
    for rec in records:
        if rec.get("namespace") != run.ns:
            continue
        if rec.get("lease_term") is None:
            r.dual_leaders += 1
            r.violations.append(f"{rec.get('controller')} wrote decision {rec.get('decision_id')} holding no lease term")
            continue
        writers.setdefault(int(rec["lease_term"]), set()).add(str(rec.get("controller")))
    for term, who in sorted(writers.items()):
        if len(who) > 1:
            r.dual_leaders += len(who) - 1
            r.violations.append(f"lease term {term} written by {sorted(who)}")
    record = None
    if run.history is not None:
        caught_up = run.history.settled()
        run.history.stop()
        record = run.history.record() if caught_up else None
        if record is None:
            r.violations.append("the watches never caught up with the server: unknown writes judged by time")
    timeline = run.proxy.timeline[run._timeline_from:]
    mine = f"chaos-{run.ns}-"
    r.writes_received = sum(1 for w in timeline if not w.lease and w.agent.startswith(AGENT + mine))
    late = writes_outside_term(timeline, mine, record, run.ns)
    r.writes_outside_term = len(late)
    r.writes_answered_late = writes_answered_late(timeline, mine)
    if record is not None:
        settled = settle_unknown(timeline, mine, record)
        r.writes_unknown, r.writes_unknown_applied, r.writes_unknown_unsettled = settled.unknown, settled.applied, settled.unsettled
        r.writes_outside_by_time = len(writes_outside_term(timeline, mine))  # what the timing rule alone would count
        r.writes_checked, misses = record_misses(timeline, mine, record)
        r.record_misses = len(misses)
        r.violations.extend(f"the record misses an answered write: {m}" for m in misses[:3])
    r.violations.extend(late[:5])


def describe(run: ChaosRun, wls: list[dict[str, Any]], used: dict[str, ResourceVector]) -> str:
    """The state behind a violation: each admitted Workload's selector, plan and bound pods."""
    pods = run.scheduler.pods()
    parts = [f"gpus used {{{', '.join(f'{n}: {u.gpu}' for n, u in sorted(used.items()))}}}"]
    for wl in wls:
        if not admitted(wl, run.check):
            continue
        for u in (entry_of(wl, run.check) or {}).get("podSetUpdates") or []:
            ann = u.get("annotations") or {}
            on = sorted(p["spec"].get("nodeName", "") for p in pods
                        if (p["metadata"].get("annotations") or {}).get("atoll.dev/decision-id") == ann.get("atoll.dev/decision-id"))
            parts.append(f"{wl['metadata']['name']} {gpus_of(wl)} GPUs selector={u.get('nodeSelector')} "
                         f"planned={ann.get('atoll.dev/planned-nodes')} pods on {on}")
    return "; ".join(parts).replace(f"{run.ns}-", "")


def owed_from_api(run: ChaosRun, wls: list[dict[str, Any]]) -> list[OwedPods]:
    """Owed pods read straight from the API, without the controller's code: per admitted
    PodSet, its admitted count minus the pods of its decision bound and unfinished, minus
    those that succeeded (a failed pod's slot is owed until its replacement binds), in the
    domain its nodeSelector allows. They prefer their planned nodes, and a pending
    replacement the node its failed pod ran on, where it binds: the greedy ``place_owed``
    then does not hand that replacement another Workload's planned node (a failure gives a
    wide claim back over narrow ones admitted meanwhile, where a greedy first pick can miss
    an assignment that exists)."""
    pods = run.scheduler.pods()
    out = []
    for wl in wls:
        if not admitted(wl, run.check):
            continue
        counts = {a["name"]: int(a.get("count", 0)) for a in (wl["status"].get("admission") or {}).get("podSetAssignments") or []}
        for ps in wl["spec"]["podSets"]:
            update = next((u for u in (entry_of(wl, run.check) or {}).get("podSetUpdates") or [] if u["name"] == ps["name"]), None)
            if update is None:
                continue
            ann = update.get("annotations") or {}
            decision = ann.get("atoll.dev/decision-id", "")
            mine = [p for p in pods if decision_of(p) == (decision, ps["name"])]
            running = sum(1 for p in mine if p["spec"].get("nodeName") and phase_of(p) not in FINISHED)
            succeeded = sum(1 for p in mine if phase_of(p) == "Succeeded")
            owed = counts.get(ps["name"], int(ps["count"])) - running - succeeded
            if owed <= 0:
                continue
            selector = {**(ps["template"]["spec"].get("nodeSelector") or {}), **(update.get("nodeSelector") or {})}
            domain = tuple(n.name for n in run.nodes if all(n.labels.get(k) == v for k, v in selector.items()))
            per_pod_gpu = gpus_of({"spec": {"podSets": [{**ps, "count": 1}]}})
            planned = tuple(decode_planned(ann["atoll.dev/planned-nodes"]).items()) if ann.get("atoll.dev/planned-nodes") else ()
            replacing = Counter(node for p in mine if not p["spec"].get("nodeName") and phase_of(p) not in FINISHED
                                and (node := failed_node_of(p)) is not None)
            planned = tuple(replacing.items()) + planned
            out.append(OwedPods(f"{run.ns}/{wl['metadata']['name']}", ps["name"], owed,
                                ResourceVector(per_pod_gpu, 1000, 0, 1), domain, planned))
    return out

def unplaceable_pods(alloc: dict[str, ResourceVector], used: dict[str, ResourceVector], owed: list[OwedPods]) -> int:
    """Owed pods that no assignment (``place_owed``, as ``check_invariant`` builds it) fits in their domain."""
    names = sorted(alloc)
    index = {n: i for i, n in enumerate(names)}
    free = np.maximum(np.array([alloc[n].as_tuple() for n in names], dtype=np.int64).reshape(len(names), 4)
                      - np.array([used.get(n, ResourceVector()).as_tuple() for n in names], dtype=np.int64).reshape(len(names), 4), 0)
    demands = [Demand(o.pods, pod_shape(o.per_pod), tuple((index[n], k) for n, k in o.planned if n in index and n in o.domain),
                      np.array(sorted(index[n] for n in o.domain if n in index), dtype=np.int64)) for o in owed]
    return sum(place_owed(free, demands)[1])



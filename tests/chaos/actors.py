"""The other parties of a chaos run, all on a direct (fault-free) client: Kueue, played by the
tests' ``KueueActor`` in Kueue's order, with a ClusterQueue quota it reserves within; and an
adversarial job controller + scheduler that creates and binds the pods of admitted Workloads.

The scheduler obeys only what Kubernetes would enforce: a pod binds to a node its nodeSelector
(template plus Atoll's podSetUpdate) allows, and never over the node's allocatable GPUs. Within
that it picks the worst node it can: one another admitted Workload was planned on, so Atoll's
planned nodes are a preference it ignores. A pod that fits nowhere stays pending (it is created
when it binds: the controller's cache reads bound pods only).

Now and then a running pod fails, and the job controller creates its replacement at once, as
Kubernetes' Job controller does for a Job below its parallelism: a pending pod with the failed
pod's labels, annotations and nodeSelector. Atoll must owe the failed pod's slot again until the
replacement binds, so that no Workload admitted after the failure is given it. The replacement
binds on the node its failed pod ran on, and the scheduler keeps that room for it: were a pod of
a Workload admitted *before* the failure to take it, the replacement could be left with no room
in its domain through no decision of Atoll's (the failure gives back a claim that did not exist
when the others were admitted), which no admission check can prevent.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from admission.controller import ANN_DECISION_ID, ANN_PLANNED_NODES, decode_planned
from tests.kube_objects import (
    GPU,
    KueueActor,
    condition,
    is_true,
    manifest,
    now_rfc3339,
    set_condition,
)

WORKLOAD_LABEL = "atoll.dev/chaos-workload"
PODSET_LABEL = "kueue.x-k8s.io/podset"
FAILED_NODE = "atoll.dev/chaos-failed-node"
"""On a replacement pod: the node its failed pod ran on (where it binds)."""
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    labels: dict[str, str]
    gpus: int


def entry_of(wl: dict[str, Any], check: str) -> dict[str, Any] | None:
    return next((e for e in (wl.get("status") or {}).get("admissionChecks") or [] if e.get("name") == check), None)


def holds_quota(wl: dict[str, Any]) -> bool:
    return is_true(wl, "QuotaReserved") and not is_true(wl, "Finished")


def active(wl: dict[str, Any]) -> bool:
    return (wl.get("spec") or {}).get("active", True) is not False


def admitted(wl: dict[str, Any], check: str) -> bool:
    """Atoll's check is Ready on a live reservation: the placement is to be honoured."""
    entry = entry_of(wl, check) or {}
    return (entry.get("state") == "Ready" and holds_quota(wl) and not is_true(wl, "Evicted") and active(wl))


def actionable(wl: dict[str, Any], check: str) -> bool:
    """What Atoll must decide: quota held, not evicted, active, its entry Pending."""
    entry = entry_of(wl, check) or {}
    return entry.get("state") == "Pending" and holds_quota(wl) and not is_true(wl, "Evicted") and active(wl)


def gpus_of(wl: dict[str, Any]) -> int:
    total = 0
    for ps in wl["spec"]["podSets"]:
        for c in ps["template"]["spec"].get("containers", []):
            total += int((c.get("resources") or {}).get("requests", {}).get(GPU, 0)) * int(ps["count"])
    return total


def pod_gpus(pod: dict[str, Any]) -> int:
    return sum(int((c.get("resources") or {}).get("requests", {}).get(GPU, 0)) for c in pod["spec"].get("containers", []))


def phase_of(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def decision_of(pod: dict[str, Any]) -> tuple[str, str]:
    """(Atoll decision id, PodSet) a pod carries."""
    meta = pod["metadata"]
    return str((meta.get("annotations") or {}).get(ANN_DECISION_ID, "")), str((meta.get("labels") or {}).get(PODSET_LABEL, ""))


@dataclass
class Kueue:
    """Kueue for one ClusterQueue: reserve within ``quota`` GPUs, admit on Ready, evict and requeue
    on Retry (after its requeueAfterSeconds), deactivate on Rejected, now and then preempt."""

    actor: KueueActor
    ns: str
    cq: str
    flavor: str
    check: str
    quota: int
    rng: random.Random
    preempt_rate: float = 0.02
    reserving: bool = True
    """False during the settle phase: reactions go on, no new reservations."""
    reservations: Counter[str] = field(default_factory=Counter)
    """Quota reservations made, per Workload uid: at most one Atoll decision each."""
    admissions: int = 0
    preemptions: int = 0
    _requeue_at: dict[str, float] = field(default_factory=dict)

    def tick(self, workloads: list[dict[str, Any]], stop_pods: Any) -> None:
        used = sum(gpus_of(wl) for wl in workloads if holds_quota(wl))
        order = list(workloads)
        self.rng.shuffle(order)
        for wl in order:
            name, uid = wl["metadata"]["name"], wl["metadata"]["uid"]
            if is_true(wl, "Finished") or not active(wl):
                continue
            entry = entry_of(wl, self.check) or {}
            state = entry.get("state")
            if holds_quota(wl):
                if is_true(wl, "Evicted"):  # an eviction whose release did not happen yet
                    self.actor.release(self.ns, name)
                elif state in ("Retry", "Rejected"):
                    outcome = self.actor.react(self.ns, name)
                    if outcome == "retry":
                        self._requeue_at[uid] = time.monotonic() + float(entry.get("requeueAfterSeconds") or 0)
                elif state == "Ready" and not is_true(wl, "Admitted"):
                    self._admit(name)
                    self.admissions += 1
                elif state == "Ready" and self.rng.random() < self.preempt_rate:
                    stop_pods(wl)  # the job reconciler stops the job before Kueue releases the quota
                    self.actor.preempt(self.ns, name)
                    self.preemptions += 1
                continue
            if not self.reserving or time.monotonic() < self._requeue_at.get(uid, 0.0):
                continue
            requeued = condition(wl, "Requeued")
            if requeued and requeued.get("status") == "False" and requeued.get("reason") == "AdmissionCheck":
                self.actor.end_backoff(self.ns, name)
            if used + gpus_of(wl) <= self.quota:
                self.actor.reserve_quota(self.ns, name, self.cq, self.flavor)
                self.reservations[uid] += 1
                used += gpus_of(wl)

    def _admit(self, name: str) -> None:
        """Every check Ready: Kueue sets ``Admitted=True`` (``SyncAdmittedCondition``)."""
        def change(wl: dict[str, Any]) -> dict[str, Any] | None:
            if not admitted(wl, self.check):
                return None
            conditions = [dict(c) for c in wl["status"].get("conditions") or []]
            set_condition(conditions, "Admitted", "True", "Admitted", "The workload is admitted", now_rfc3339(),
                          wl["metadata"].get("generation", 1))
            return {"conditions": conditions}
        self.actor._write(self.ns, name, "admit", change)


@dataclass
class Scheduler:
    """Job controller plus an adversarial kube-scheduler for one run's namespace."""

    core: client.CoreV1Api
    ns: str
    check: str
    nodes: list[NodeSpec]
    rng: random.Random
    bind_rate: float = 0.4
    """Chance per tick that one pending pod binds (the lag that leaves pods owed)."""
    finish_rate: float = 0.05
    fail_rate: float = 0.0
    """Chance per tick that one running pod of an admitted Workload fails and is replaced."""
    bound: int = 0
    stayed_pending: int = 0
    on_planned_of_others: int = 0
    failed: int = 0
    replacements_bound: int = 0
    _names: set[str] = field(default_factory=set)

    def pods(self) -> list[dict[str, Any]]:
        return [client.ApiClient().sanitize_for_serialization(p)  # type: ignore[no-untyped-call]
                for p in self.core.list_namespaced_pod(self.ns).items]

    def admitted_podsets(self, workloads: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
        """(decision id, PodSet) → (Workload, PodSet, podSetUpdate) of the Workloads Kueue admitted on Atoll's Ready."""
        out = {}
        for wl in workloads:
            if not (admitted(wl, self.check) and is_true(wl, "Admitted")):
                continue
            for ps in wl["spec"]["podSets"]:
                update: dict[str, Any] = next((u for u in (entry_of(wl, self.check) or {}).get("podSetUpdates") or []
                                               if u["name"] == ps["name"]), {})
                out[(str((update.get("annotations") or {}).get(ANN_DECISION_ID, "")), ps["name"])] = (wl, ps, update)
        return out

    def usage(self, pods: list[dict[str, Any]], live: Collection[tuple[str, str]] = ()) -> Counter[str]:
        """GPUs per node: bound unfinished pods, and the room kept for the pending replacements of
        the ``live`` (decision id, PodSet)s."""
        used: Counter[str] = Counter()
        for p in pods:
            if phase_of(p) in FINISHED:
                continue
            node = p["spec"].get("nodeName") or (failed_node_of(p) if decision_of(p) in live else None)
            if node:
                used[node] += pod_gpus(p)
        return used

    def fail(self, workloads: list[dict[str, Any]]) -> None:
        """At ``fail_rate``: one running pod of an admitted Workload fails, and its job controller
        creates the replacement at once, pending, from the same template (with Atoll's podSetUpdate)."""
        if self.fail_rate <= 0 or self.rng.random() >= self.fail_rate:
            return
        live = self.admitted_podsets(workloads)
        running = [p for p in self.pods() if p["spec"].get("nodeName") and phase_of(p) == "Running" and decision_of(p) in live]
        if not running:
            return
        self.fail_pod(self.rng.choice(running), workloads)

    def fail_first(self, workloads: list[dict[str, Any]]) -> bool:
        """The planted failure: the first running pod (by name) of an admitted Workload fails, and
        is replaced; False when none runs yet."""
        live = self.admitted_podsets(workloads)
        running = sorted((p for p in self.pods() if p["spec"].get("nodeName") and phase_of(p) == "Running" and decision_of(p) in live),
                         key=lambda p: str(p["metadata"]["name"]))
        if not running:
            return False
        self.fail_pod(running[0], workloads)
        return True

    def fail_pod(self, victim: dict[str, Any], workloads: list[dict[str, Any]]) -> None:
        """This running pod of an admitted Workload fails; its replacement is created pending."""
        wl, ps, update = self.admitted_podsets(workloads)[decision_of(victim)]
        self.core.patch_namespaced_pod_status(victim["metadata"]["name"], self.ns, {"status": {"phase": "Failed"}})
        self.failed += 1
        self._create(wl, ps, update, 0, None, {FAILED_NODE: victim["spec"]["nodeName"]})

    def tick(self, workloads: list[dict[str, Any]], finish: Any) -> None:
        pods = self.pods()
        live = [wl for wl in workloads if admitted(wl, self.check) and is_true(wl, "Admitted")]
        used = self.usage(pods, self.admitted_podsets(workloads))
        planned_by: dict[str, set[str]] = {}
        for wl in live:
            for u in (entry_of(wl, self.check) or {}).get("podSetUpdates") or []:
                text = (u.get("annotations") or {}).get(ANN_PLANNED_NODES)
                if text:
                    planned_by[wl["metadata"]["name"]] = planned_by.get(wl["metadata"]["name"], set()) | set(decode_planned(text))
        for wl in live:
            name = wl["metadata"]["name"]
            others = set().union(*(v for k, v in planned_by.items() if k != name)) if planned_by else set()
            complete = True
            for ps in wl["spec"]["podSets"]:
                update: dict[str, Any] = next((u for u in (entry_of(wl, self.check) or {}).get("podSetUpdates") or []
                                               if u["name"] == ps["name"]), {})
                decision = (update.get("annotations") or {}).get(ANN_DECISION_ID, "")
                mine = [p for p in pods if decision_of(p) == (decision, ps["name"]) and phase_of(p) != "Failed"]
                for p in mine:
                    if p["spec"].get("nodeName") or phase_of(p) in FINISHED:
                        continue
                    complete = False  # a replacement: its failed pod's node keeps the room for it
                    failed_on = failed_node_of(p)
                    if self.rng.random() < self.bind_rate and failed_on is not None:  # one without a failed pod is not a replacement
                        self._schedule(p["metadata"]["name"], failed_on)
                        self.bound += 1
                        self.replacements_bound += 1
                for i in range(len(mine), int(ps["count"])):
                    complete = False
                    if self.rng.random() >= self.bind_rate:
                        continue
                    target = self._pick(ps, update, used, others, planned_by.get(name, set()))
                    if target is None:
                        self.stayed_pending += 1
                        continue
                    self._bind(wl, ps, update, i, target)
                    used[target] += self._per_pod(ps)
                    self.bound += 1
                    self.on_planned_of_others += target in others
            if complete and self.rng.random() < self.finish_rate:
                finish(wl)

    @staticmethod
    def _per_pod(ps: dict[str, Any]) -> int:
        return sum(int((c.get("resources") or {}).get("requests", {}).get(GPU, 0)) for c in ps["template"]["spec"].get("containers", []))

    def _pick(self, ps: dict[str, Any], update: dict[str, Any], used: Counter[str], others: set[str], own: set[str]) -> str | None:
        selector = dict(ps["template"]["spec"].get("nodeSelector") or {})
        selector.update(update.get("nodeSelector") or {})
        need = self._per_pod(ps)
        allowed = [n for n in self.nodes if all(n.labels.get(k) == v for k, v in selector.items())]
        self.rng.shuffle(allowed)
        # the worst order: another Workload's planned nodes first, never its own plan if it can help it
        allowed.sort(key=lambda n: (n.name not in others, n.name in own))
        return next((n.name for n in allowed if used[n.name] + need <= n.gpus), None)

    def _fresh(self, base: str, i: int) -> str:
        name = next(f"{base}-{k}" for k in range(i, i + 10_000) if f"{base}-{k}" not in self._names)
        self._names.add(name)
        return name

    def _schedule(self, name: str, node: str) -> None:
        """Bind a pending pod (``pods/binding``, as the kube-scheduler does); it starts running."""
        self.core.create_namespaced_pod_binding(name, self.ns, manifest({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                                                         "target": {"apiVersion": "v1", "kind": "Node", "name": node}}),
                                                _preload_content=False)
        self.core.patch_namespaced_pod_status(name, self.ns, {"status": {"phase": "Running"}})

    def _bind(self, wl: dict[str, Any], ps: dict[str, Any], update: dict[str, Any], i: int, node: str) -> None:
        name = self._create(wl, ps, update, i, node)
        self.core.patch_namespaced_pod_status(name, self.ns, {"status": {"phase": "Running"}})

    def _create(self, wl: dict[str, Any], ps: dict[str, Any], update: dict[str, Any], i: int, node: str | None,
                annotations: dict[str, str] | None = None) -> str:
        """A pod of the PodSet from its template with Atoll's podSetUpdate merged (what the job
        controller creates once Kueue starts the job), bound to ``node`` or pending; its name."""
        template = ps["template"]
        decision = (update.get("annotations") or {}).get(ANN_DECISION_ID, "")
        name = self._fresh(f"{wl['metadata']['name']}-{decision or 'x'}-{ps['name']}", i)
        labels = {**(template.get("metadata") or {}).get("labels", {}), **(update.get("labels") or {}),
                  PODSET_LABEL: ps["name"], WORKLOAD_LABEL: wl["metadata"]["name"]}
        annotations = {**(template.get("metadata") or {}).get("annotations", {}), **(update.get("annotations") or {}), **(annotations or {})}
        spec = dict(template["spec"])
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **(update.get("nodeSelector") or {})}
        if node:
            spec["nodeName"] = node
        self.core.create_namespaced_pod(self.ns, manifest({"metadata": {"name": name, "namespace": self.ns, "labels": labels,
                                                                         "annotations": annotations}, "spec": spec}))
        return name

    def stop_pods(self, wl: dict[str, Any], phase: str = "Failed") -> None:
        """The job's pods end (``Failed`` when the job is stopped, ``Succeeded`` when it finished)."""
        for p in self.pods():
            if (p["metadata"].get("labels") or {}).get(WORKLOAD_LABEL) == wl["metadata"]["name"] and phase_of(p) not in FINISHED:
                self.core.patch_namespaced_pod_status(p["metadata"]["name"], self.ns, {"status": {"phase": phase}})


def failed_node_of(pod: dict[str, Any]) -> str | None:
    """The node a replacement pod's failed pod ran on (None for any other pod)."""
    return (pod["metadata"].get("annotations") or {}).get(FAILED_NODE)

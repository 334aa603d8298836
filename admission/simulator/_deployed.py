"""Atoll in the simulator as it is deployed: the controller's ``Decider`` and ``Ledger`` on a
``ClusterCache`` fed from the simulated cluster, and pods bound by a kube-scheduler model.

Per simulated job there is a Kueue Workload (``_port.workload_object``: quota reserved on the
job's flavor, Atoll's check Pending); the decision is ``Decider.evaluate`` on it, exactly as the
controller calls it. What the controller's status write leaves on the Workload is written back
(the check entry with its podSetUpdates, Atoll's ``atoll.dev/TopologyWaiting`` condition, and
Kueue's ``retryCount`` after a Retry), and the ledger observes it. After Ready the job's pods
are bound by the scheduler model (``_scheduler``) over the nodes their written nodeSelector,
affinity and tolerations allow, or pinned to the planned nodes under ``exact`` enforcement; each
bound pod enters the cache as the watch would deliver it (``spec.nodeName``, the decision id
annotation, the ``kueue.x-k8s.io/podset`` label), and the ledger re-counts what is owed.

``owed()`` is the ground truth the invariant is checked against: every admitted PodSet's unbound
pods, their shape and the nodes the scheduler may put them on, with the ledger's own witness
beside it (so a ledger that forgets owed pods is caught, not trusted).

Why this module is longer than the others: it is the simulated cluster around the real
controller code, from the Workload object to the bound pod and back into the cache, and each
step writes what the next reads on the same ``DeployedAtoll``; the scheduler models, the cost
model and the invariant live in rooms of their own.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from admission import vocabulary
from admission.controller import (
    WAITING_CONDITION,
    BoundPod,
    ClusterCache,
    Decider,
    Ledger,
    OwedPods,
    Recorder,
    Settings,
    Verdict,
    WorkloadView,
    build_record,
    decode_planned,
    parse_workload,
    pod_usage,
    rfc3339,
    waiting_condition,
)
from admission.kube import ADMISSION_CHECKS, NODES, PODS, RESOURCE_FLAVORS, TOPOLOGIES
from admission.queue import Outlook, OwedGang, Running, WaitingRoom, wake_freed, wake_released, wake_suspended
from admission.simulator._cohort import CohortShape
from admission.simulator._port import CHECK_NAME, CLUSTER_QUEUE, cluster_objects, profiles_for_cluster, quantities, workload_object
from admission.simulator._preemption import SimPreemption
from admission.simulator._scheduler import BindingModel
from policies import SLICE_REQUIRED_TOPOLOGY, SLICE_SIZE, ProfilesDocument
from topology import HOSTNAME_LABEL, ClusterModel, NodeConstraint, ResourceVector, SliceLayer, Snapshot, Toleration

__all__ = ["NAMESPACE", "PODSET", "DeployedAtoll", "LedgerFactory", "node_rows", "real_ledger", "witness_holds"]

NAMESPACE = "sim"
PODSET = "main"
PODSET_LABEL = vocabulary.KUEUE_PODSET
ANN_DECISION = vocabulary.DECISION_ID
IntArray = npt.NDArray[np.int64]
LedgerFactory = Callable[[ClusterCache], Ledger]
"""Builds the ledger on the cache (tests inject a faulty one to show the invariant catches it)."""


def real_ledger(cache: ClusterCache) -> Ledger:
    """The controller's ledger on the cache's bound pods. Simulated Workloads carry no template
    nodeSelector, so every selector key is a topology level or the hostname, which the ledger
    reads from the snapshot; without the label reader it need not scan every node's labels for
    each one-node selector (same answers, a large fabric stays fast)."""
    return Ledger(cache.gpu_resource, bound=cache.bound_pods, succeeded=cache.succeeded_pods)


@dataclass
class _PodSet:
    name: str
    count: int
    per_pod: ResourceVector
    selector: tuple[tuple[str, str], ...]
    terms: Any
    tolerations: tuple[Toleration, ...]
    planned: dict[str, int]
    decision_id: str
    exact: bool
    bound: int = 0
    pods: list[dict[str, Any]] = field(default_factory=list)
    usage: BoundPod | None = None
    """What the cache reads from each of its pods (``pod_usage``), read once."""
    template: tuple[dict[str, str], dict[str, str], list[dict[str, Any]], dict[str, str]] | None = None
    """Labels, annotations, containers and status every pod of the PodSet carries (shared: never written)."""
    resource: str = "nvidia.com/gpu"
    """The accelerator resource its pods request: its flavor's ``gpuResource``."""


@dataclass
class _Admitted:
    key: str
    flavor: int
    obj: dict[str, Any]
    podsets: list[_PodSet]

    @property
    def unbound(self) -> int:
        return sum(ps.count - ps.bound for ps in self.podsets)


class DeployedAtoll:
    """One profile of the profiles document, decided by the controller's own code."""

    admission_check = True
    deployed = True

    def __init__(self, name: str, profile_name: str, doc: ProfilesDocument, cluster: ClusterModel, *, scheduler: str = "least-allocated",
                 enforcement: str | None = None, seed: int = 0, ledger: LedgerFactory | None = None,
                 records: TextIO | None = None, run: str = "", within_cluster_queue: str = "LowerPriority",
                 cohort: CohortShape | None = None) -> None:
        self.name = name
        self.profile_name = profile_name
        self.doc = profiles_for_cluster(doc, cluster, enforcement=enforcement)
        self.cluster = cluster
        self.settings = Settings()
        gpu = self.settings.kueue.gpu_resource
        self.cache = ClusterCache(gpu)
        for resource, obj in cluster_objects(cluster, self.doc):  # as the controller's first list delivers them
            if resource in (NODES, RESOURCE_FLAVORS, TOPOLOGIES, ADMISSION_CHECKS, PODS):
                self.cache.upsert(resource, obj)
        self.cache.set_profiles(self.doc)
        self.ledger = (ledger or real_ledger)(self.cache)
        self.cache.pod_listener = self.ledger.pods_changed
        # Without ``records`` the simulator keeps no decision records, so verdicts leave out the losing domains
        self.decider = Decider(self.cache, self.ledger, self.settings, explain=records is not None)
        self.recorder = Recorder(records, context={"run": run}) if records is not None else None
        """Decision records of this run (``atoll simulate --records``), as the controller writes them."""
        self.outlook = Outlook()
        """The queue manager's state, fed as the controller's cache would feed it: started when every pod is bound, finished at the end."""
        self.decider.queue = self.outlook
        self.check_names = frozenset({CHECK_NAME})
        self.model = BindingModel(scheduler, seed)
        self.flavor_names = [f.name for f in cluster.flavors]
        self.flavor_resources = [f.gpu_resource for f in cluster.flavors]
        """Each flavor's accelerator resource (``gpuResource``): its jobs' pods request it."""
        self.exact = {f.name: self.doc.flavors[f.name].enforcement == "exact" for f in cluster.flavors}
        self.workloads: dict[int, dict[str, Any]] = {}
        self.admitted: dict[int, _Admitted] = {}
        self._owing: dict[int, set[int]] = {}
        """Flavor → jobs admitted with pods not yet bound."""
        self._templates: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._domains: dict[tuple[int, tuple[tuple[str, str], ...]], IntArray] = {}
        self._pod_seq = 0
        self._requests: dict[tuple[ResourceVector, str], dict[str, str]] = {}
        """A pod's requests per shape, as the pod template writes them."""
        self._usage: dict[tuple[ResourceVector, str], ResourceVector] = {}
        """What the cache reads from a pod of each shape (``pod_usage``)."""
        self._views: dict[tuple[Any, ...], WorkloadView] = {}
        """Shape → its Workload read once (``read``)."""
        self.views: dict[int, WorkloadView] = {}
        """Job → its Workload as read (``Decider.evaluate`` and ``Ledger.observe`` take it)."""
        self.verdicts = 0
        self.preemption: SimPreemption | None = None
        """The controller's domain-clearing preemption, when the profile run sets ``preemptDomain``."""
        own = self.doc.profiles.get(profile_name)
        if own is not None and own.preempt_domain != "off":
            self.preemption = SimPreemption(self, own.preempt_domain, within_cluster_queue, cohort)
        self.behind = own.queueing.hold_behind_gangs if own is not None else "off"
        """The profile's ``queueing.holdBehindGangs``: with it, the simulator says which gangs are owed (``set_owed``)."""
        self.owed_after = float(own.queueing.reserve_after_seconds or 0) if own is not None else 0.0
        self.owed_min_gpus = own.queueing.hold_min_gpus if own is not None else 0
        self.lend_parked = own.queueing.lend_parked if own is not None else "off"
        """The profile's ``queueing.lendParked``: a giver whose placement fits now comes back at once (``admission.queue.fits_now``)."""
        self.unheld: dict[int, list[str]] = {}
        self._owed_queues: dict[int, set[str]] = {}
        """Flavor → the ClusterQueues with gangs owed there at the last ``set_owed``."""
        """Flavor → gangs owed no longer since ``take_unheld`` last looked."""
        self._index_map: tuple[tuple[int, int], IntArray | None] | None = None

    # ------------------------------------------------------------------ Kueue's Workload

    def _template(self, per_pod: ResourceVector, kind: str, slices: tuple[SliceLayer, ...] = (), resource: str = "nvidia.com/gpu") -> dict[str, Any]:
        key = (per_pod, kind, slices, resource)
        t = self._templates.get(key)
        if t is None:
            q = quantities(per_pod, resource)
            ann = {vocabulary.PROFILE: self.profile_name}
            if kind in self.doc.classes:
                ann[vocabulary.CLASS] = kind
            if slices:  # Kueue's slice annotations, as a user writes them (the Decider reads them)
                ann.update({SLICE_REQUIRED_TOPOLOGY: slices[0].level, SLICE_SIZE: str(slices[0].size)})
            t = self._templates[key] = {"metadata": {"annotations": ann},
                                        "spec": {"containers": [{"name": "main", "resources": {"requests": q, "limits": dict(q)}}]}}
        return t

    def workload(self, job: int, flavor: int, pods: int, per_pod: ResourceVector, kind: str,
                 slices: tuple[SliceLayer, ...] = (), max_execution_seconds: int | None = None, priority: int = 0,
                 created: float | None = None, cluster_queue: str | None = None) -> dict[str, Any]:
        """The Workload of simulated job ``job`` (built on its first decision, kept across Retries),
        declaring Kueue's ``maximumExecutionTimeSeconds`` when ``max_execution_seconds`` is given,
        its ``spec.priority`` when not 0, and ``created`` as its creationTimestamp when preempting. ``cluster_queue``: a
        ClusterQueue of a cohort (``_cohort``), which its LocalQueue of the same name points at; None: the one ClusterQueue."""
        obj = self.workloads.get(job)
        if obj is None:
            key = (flavor, pods, per_pod, kind, slices, cluster_queue)  # a view names its ClusterQueue and LocalQueue
            obj = self.workloads[job] = workload_object(f"job-{job}", [{"name": PODSET, "count": pods, "template": self._template(per_pod, kind, slices, self.flavor_resources[flavor])}],
                                                        flavor=self.flavor_names[flavor], namespace=NAMESPACE, uid=f"sim-{job}",
                                                        gpu_resource=self.flavor_resources[flavor],
                                                        **({"queue": cluster_queue, "cluster_queue": cluster_queue} if cluster_queue else {}))
            if max_execution_seconds is not None:
                obj["spec"]["maximumExecutionTimeSeconds"] = int(max_execution_seconds)
            if priority:
                obj["spec"]["priority"] = int(priority)
            if created is not None and (self.preemption is not None or self.behind != "off"):
                obj["metadata"]["creationTimestamp"] = rfc3339(created)
            self.views[job] = self.read(obj, key)
        return obj

    def lent(self, job: int) -> None:
        """Job ``job`` was reactivated by ``queueing.lendParked``: its next decision's record says so (``Decider.lent``)."""
        self.decider.lent.add(f"{NAMESPACE}/job-{job}")

    def read(self, obj: dict[str, Any], key: tuple[Any, ...]) -> WorkloadView:
        """``parse_workload(obj)``: Workloads of one shape differ only in name and uid, so each
        shape is read once (``test_deployed`` compares the two)."""
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = parse_workload(obj, gpu_resource=self.cache.gpu_resource)
        meta = obj["metadata"]
        return dataclasses.replace(view, name=meta["name"], uid=meta["uid"])

    # ------------------------------------------------------------------ deciding

    def decide(self, job: int, obj: dict[str, Any], now: float) -> Verdict:
        """``Decider.evaluate`` on the Workload; its outcome is written back as the controller and Kueue would."""
        status = obj["status"]
        entry = status["admissionChecks"][0]
        view = self.views.get(job) if self.workloads.get(job) is obj else None
        if view is None:  # a Workload not made by ``workload``: read it here
            view = self.views[job] = parse_workload(obj, gpu_resource=self.cache.gpu_resource)
        started = time.perf_counter() if self.recorder is not None else 0.0
        key = f"{NAMESPACE}/{obj['metadata']['name']}"
        verdict = self.decider.evaluate(obj, f"d{job}-{int(entry.get('retryCount') or 0)}", now, view=view)
        if self.preemption is not None:  # before the record, as the controller plans before it writes
            self.preemption.decided(obj, verdict, now)
        self.verdicts += 1
        if self.recorder is not None:  # the Workload as the decision read it, before the write-back below
            self.recorder.record(build_record(obj, verdict, self.cache, self.check_names, now=now, latency=time.perf_counter() - started,
                                              attempts=int(entry.get("retryCount") or 0) + (1 if verdict.outcome == "wait" else 0),
                                              controller="", term=None, profiles_rv=None))
        condition = waiting_condition(obj, verdict.outcome, now, 1)
        if condition is not None:
            status["conditions"] = [c for c in status["conditions"] if c.get("type") != WAITING_CONDITION] + [condition]
        if verdict.outcome == "wait":  # Kueue evicts, requeues and counts the Retry; the next decision sees Pending
            entry["retryCount"] = int(entry.get("retryCount") or 0) + 1
        elif verdict.outcome == "admit":
            entry.update(state="Ready", podSetUpdates=verdict.podset_updates)
            self.ledger.observe(obj, self.check_names, view=view)
            self._admit(job, obj, view, verdict)
            if self.preemption is not None:
                self.preemption.admitted(obj, key, now)
        else:
            entry["state"] = "Rejected"
        return verdict

    def _admit(self, job: int, obj: dict[str, Any], view: WorkloadView, verdict: Verdict) -> None:
        flavor = self.flavor_names.index(view.flavors[PODSET]) if PODSET in view.flavors else 0
        updates = {u["name"]: u for u in verdict.podset_updates}
        podsets = []
        for spec in view.podsets:
            update = updates.get(spec.name)
            if update is None:
                continue
            selector = dict(view.templates[spec.name].node_selector)
            selector.update(update.get("nodeSelector") or {})
            ann = update.get("annotations") or {}
            planned = decode_planned(ann[vocabulary.PLANNED_NODES]) if vocabulary.PLANNED_NODES in ann else {}
            terms = spec.node_constraint.terms if spec.node_constraint is not None else None
            podsets.append(_PodSet(spec.name, spec.count, spec.per_pod, tuple(sorted(selector.items())), terms, spec.tolerations,
                                   planned, str(ann.get(ANN_DECISION, "")), ann.get(vocabulary.ENFORCEMENT) == "exact",
                                   resource=view.accelerators.get(spec.name, self.flavor_resources[flavor])))
        self.admitted[job] = _Admitted(f"{NAMESPACE}/job-{job}", flavor, obj, podsets)
        self._owing.setdefault(flavor, set()).add(job)

    # ------------------------------------------------------------------ binding

    def bind(self, job: int, snap: Snapshot, now: float = 0.0) -> list[tuple[int, int]]:
        """Bind what the scheduler can of the job's unbound pods on ``snap`` (the simulator's
        ground truth; its free capacity is taken). Returns (node, pods) bound now."""
        adm = self.admitted[job]
        out: list[tuple[int, int]] = []
        for ps in adm.podsets:
            left = ps.count - ps.bound
            if left <= 0:
                continue
            req = (ps.per_pod.gpu, ps.per_pod.cpu_milli, ps.per_pod.memory_mib)
            if ps.exact:
                got = self._bind_planned(snap, ps, left)
            else:
                own = np.fromiter((snap.node_index[n] for n in ps.planned if n in snap.node_index), dtype=np.int64)
                others = self._planned_by_others(job, adm.flavor, snap) if self.model.name == "adversarial" else None
                got = self.model.bind(snap.free, snap.alloc, self.domain(snap, ps), req, left, own=own, others=others)
            with self.cache.pods_at_once():
                for node, k in got:
                    for _ in range(k):
                        self._create_pod(ps, snap.node_names[node])
                    ps.bound += k
            out.extend(got)
        if adm.unbound == 0:
            gpus: Counter[str] = Counter()
            for ps in adm.podsets:
                for pod in ps.pods:
                    gpus[pod["spec"]["nodeName"]] += ps.per_pod.gpu
            spec = adm.obj["spec"]
            self.outlook.started(adm.key, Running(self.flavor_names[adm.flavor], tuple(sorted(gpus.items())), now,
                                                  f"{NAMESPACE}/{spec.get('queueName')}", spec.get("maximumExecutionTimeSeconds")))
            self._owing.get(adm.flavor, set()).discard(job)
            # Every pod bound: the ledger owes nothing for it (owed 0 adds nothing to its witness
            # or claims) but would still sort it on every decision; letting go now gives the same
            # answers at a cost that does not grow with the running Workloads. A run that
            # preempts keeps it, as the controller does: its running Workloads are the candidates.
            if self.preemption is None:
                self.ledger.forget(str(adm.obj["metadata"]["uid"]))
        return out

    def _bind_planned(self, snap: Snapshot, ps: _PodSet, left: int) -> list[tuple[int, int]]:
        """The webhook pins each pod to a planned node; a pod whose node is full stays Pending."""
        got = []
        req = np.array([ps.per_pod.gpu, ps.per_pod.cpu_milli, ps.per_pod.memory_mib, 1], dtype=np.int64)
        need = req > 0
        on: dict[str, int] = {}
        for pod in ps.pods:
            on[pod["spec"]["nodeName"]] = on.get(pod["spec"]["nodeName"], 0) + 1
        for name, want in ps.planned.items():
            i = snap.node_index.get(name)
            if i is None or left <= 0:
                continue
            room = int((snap.free[i, need] // req[need]).min())
            k = min(want - on.get(name, 0), room, left)
            if k > 0:
                snap.free[i] -= req * k
                got.append((i, k))
                left -= k
        return got

    def _planned_by_others(self, job: int, flavor: int, snap: Snapshot) -> IntArray:
        """Per node, pods other admitted Workloads still owe there by plan (the adversary's bait)."""
        out = np.zeros(snap.num_nodes, dtype=np.int64)
        for other in self._owing.get(flavor, ()):
            if other == job:
                continue
            for ps in self.admitted[other].podsets:
                if ps.bound < ps.count:
                    for name, k in ps.planned.items():
                        i = snap.node_index.get(name)
                        if i is not None:
                            out[i] += k
        return out

    def domain(self, snap: Snapshot, ps: _PodSet) -> IntArray:
        """Nodes a pod of ``ps`` may bind on but for resources: the scheduler's filters."""
        base = self._selected(snap, ps)
        ok = snap.eligible_for(ps.tolerations)[base] != 0
        if ps.terms is not None:
            ok &= snap.allowed_by(NodeConstraint((), ps.terms))[base] != 0
        out: IntArray = base[ok]
        return out

    def _allows(self, snap: Snapshot, ps: _PodSet, nodes: IntArray) -> bool:
        """Are all ``nodes`` in ``domain(snap, ps)``? (Read on those nodes alone.)"""
        base = self._selected(snap, ps)
        at = np.minimum(np.searchsorted(base, nodes), max(base.size - 1, 0))
        if not base.size or not (base[at] == nodes).all():
            return False
        ok = snap.eligible_for(ps.tolerations)[nodes] != 0
        if ps.terms is not None:
            ok &= snap.allowed_by(NodeConstraint((), ps.terms))[nodes] != 0
        return bool(ok.all())

    def _selected(self, snap: Snapshot, ps: _PodSet) -> IntArray:
        """The nodes ``ps``'s nodeSelector picks, sorted (memoized per node structure)."""
        key = (id(snap.node_names), ps.selector)
        base = self._domains.get(key)
        if base is None:
            if len(self._domains) > 65536:  # one per hostname, domain and other selector in use: small index arrays
                self._domains.clear()
            base = self._domains[key] = _selector_nodes(snap, ps.selector)
        return base

    def _create_pod(self, ps: _PodSet, node: str) -> None:
        self._pod_seq += 1
        if ps.template is None:
            requests = self._requests.get((ps.per_pod, ps.resource))
            if requests is None:
                requests = self._requests[(ps.per_pod, ps.resource)] = quantities(ps.per_pod, ps.resource)
            ps.template = ({PODSET_LABEL: ps.name}, {ANN_DECISION: ps.decision_id},
                           [{"name": "main", "resources": {"requests": dict(requests)}}], {"phase": "Running"})
        labels, annotations, containers, status = ps.template
        name = f"pod-{self._pod_seq}"
        pod: dict[str, Any] = {"metadata": {"name": name, "namespace": NAMESPACE, "uid": name, "labels": labels, "annotations": annotations},
               "spec": {"nodeName": node, "containers": containers}, "status": status}
        ps.pods.append(pod)
        if ps.usage is None:  # every pod of a PodSet asks the same; read the first as the cache would
            read = self._usage.get((ps.per_pod, ps.resource))
            if read is None:  # pods of one shape ask the same: each shape is read once
                got = pod_usage(pod, self.cache.gpu_resource)
                assert got is not None
                read = self._usage[(ps.per_pod, ps.resource)] = got.usage
            ps.usage = BoundPod(node, read, ps.decision_id, ps.name)
        assert ps.usage is not None
        u = ps.usage
        self.cache.put_pod(pod["metadata"]["uid"], BoundPod(node, u.usage, u.decision_id, u.podset))

    def bound_nodes(self, job: int, snap: Snapshot) -> tuple[IntArray, IntArray]:
        """(nodes, pods per node) where the job's pods are bound, in node order."""
        count: dict[int, int] = {}
        for ps in self.admitted[job].podsets:
            for pod in ps.pods:
                i = snap.node_index[pod["spec"]["nodeName"]]
                count[i] = count.get(i, 0) + 1
        nodes = np.array(sorted(count), dtype=np.int64)
        return nodes, np.array([count[int(i)] for i in nodes], dtype=np.int64)

    def finish(self, job: int, now: float | None = None) -> None:
        """The job is done: its pods end and Kueue marks the Workload Finished (the ledger lets go;
        the queue manager learns its runtime when ``now`` is given)."""
        adm = self.admitted.pop(job)
        if now is not None:
            self.outlook.finished(adm.key, now)
        else:
            self.outlook.forget(adm.key)
        self._owing.get(adm.flavor, set()).discard(job)
        with self.cache.pods_at_once():
            for ps in adm.podsets:
                for pod in ps.pods:
                    self.cache.delete(PODS, pod)
        adm.obj["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded"})
        self.ledger.observe(adm.obj, self.check_names)
        self.workloads.pop(job, None)
        self.views.pop(job, None)
        if self.preemption is not None:
            self.preemption.gone(adm.key)

    def forget(self, job: int) -> None:
        """A Workload that will never be decided again (rejected)."""
        self.outlook.reservations.release(f"{NAMESPACE}/job-{job}")  # its end wakes what it held room for and the next gang for its slot (``take_released``)
        self.workloads.pop(job, None)
        self.views.pop(job, None)

    def drop_owing(self, flavor: int, job: int) -> None:
        """``job`` owes no pods on ``flavor`` any more (evicted)."""
        self._owing.get(flavor, set()).discard(job)

    def nodes_freed(self, room: WaitingRoom | None, flavor: int, nodes: Iterable[int]) -> list[Hashable]:
        """The parked jobs to decide again when pods stop holding ``nodes`` (rows of ``flavor``'s
        snapshot: a job ended, or a victim went): those a domain holding one of them now has room
        for, counted on the room a decision would search (``wake_freed``, the controller's rule on
        a pod that leaves a node)."""
        return wake_freed(room, self.flavor_names[flavor], nodes, self.decider.room_now)

    def take_released(self, room: WaitingRoom | None, now: float) -> list[Hashable]:
        """The parked jobs to decide again for reservations ended since the last call (their gangs
        placed or rejected): those the GPUs they held can hold, then, per reservation ended, the
        oldest gang parked on its flavor that was refused a reservation for the flavor's bound, to
        take the freed slot; for reservations moved, the nodes they left, and where the window
        moved later, the jobs that may backfill what they still hold at ``now`` and could not
        before (``wake_released``, the controller's rule)."""
        return wake_released(room, self.outlook.reservations, self.decider.room_now, now)

    def quota(self, job: int, held: bool) -> None:
        """Kueue reserved quota for ``job`` (``held``) or released it: a reservation it holds
        blocks only while it holds quota (``Reservations.quota``, as the controller's cache tells it)."""
        self.outlook.reservations.quota(f"{NAMESPACE}/job-{job}", held)

    def take_suspended(self, room: WaitingRoom | None) -> list[Hashable]:
        """The parked jobs to decide again for reservations suspended since the last call and
        suspended still: those the GPUs they held can hold (``wake_suspended``, the controller's rule)."""
        return wake_suspended(room, self.outlook.reservations, self.decider.room_now)

    def set_owed(self, flavor: int, gangs: Iterable[tuple[int, int, float, int, str | None]]) -> None:
        """The gangs owed their turn on ``flavor`` now, as the controller's cache would show them
        (job, priority, creation time, GPUs, ClusterQueue: None for the one ClusterQueue of the
        flavor), each filed under its own ClusterQueue as the controller's ``OwedIndex`` files it;
        those owed no longer are kept for ``take_unheld`` (what waited behind them is decided again)."""
        name = self.flavor_names[flavor]
        by_queue: dict[str, list[OwedGang]] = {q: [] for q in self._owed_queues.get(flavor, ())}
        for j, prio, created, gpus, queue in gangs:
            q = queue or CLUSTER_QUEUE
            by_queue.setdefault(q, []).append(OwedGang(-prio, created, f"{NAMESPACE}/job-{j}", q, gpus, name))
        by_queue.setdefault(CLUSTER_QUEUE, [])
        self._owed_queues[flavor] = {q for q, owed in by_queue.items() if owed}
        left = [k for q, owed in sorted(by_queue.items()) for k in self.outlook.owed.set(q, name, owed)]
        if left:
            self.unheld.setdefault(flavor, []).extend(left)

    def take_unheld(self) -> dict[int, list[str]]:
        """Flavor → gangs owed no longer since the last call (``set_owed``)."""
        out, self.unheld = self.unheld, {}
        return out

    def reserving(self, job: int) -> bool:
        """Does ``job`` hold a reservation (first in line on its domain)?"""
        return self.outlook.reservations.held_by(f"{NAMESPACE}/job-{job}") is not None

    def reserved_idle(self, flavor: int, snap: Snapshot) -> int:
        """GPUs reservations on ``flavor`` hold idle now: held and free on the simulated cluster."""
        return self.outlook.reservations.idle(self.flavor_names[flavor], snap)

    def price_spans(self, cost: Callable[[Snapshot, IntArray, IntArray], float], snap: Snapshot) -> None:
        """The next decisions price a span with ``cost(snap, nodes, pods per node)`` (the simulator's
        cost model for the job decided, on its own cluster's node indices)."""
        def span_cost(_on: Snapshot, decision: Any) -> float | None:
            if decision.placement is None:
                return None
            count: Counter[int] = Counter()
            for ps in decision.placement.podsets:
                for name, k in zip(ps.nodes, ps.pods_per_node):
                    count[snap.node_index[name]] += k
            nodes = np.array(sorted(count), dtype=np.int64)
            return float(cost(snap, nodes, np.array([count[int(i)] for i in nodes], dtype=np.int64)))
        self.decider.span_cost = span_cost

    # ------------------------------------------------------------------ the invariant's inputs

    def owing(self, flavor: int) -> bool:
        return bool(self._owing.get(flavor))

    def holds(self, flavor: int, snap: Snapshot) -> bool:
        """``witness_holds`` on ``owed``'s ground truth, in node indices: every unbound pod counted
        by the ledger's witness, inside the nodes the scheduler may use for it, and bound +
        witness pods within every node's allocatable. False says only "look closer"
        (``owed`` and ``check_invariant`` name what is wrong)."""
        jobs = self._owing.get(flavor)
        if not jobs:
            return True
        mine = self.cache.snapshot(self.flavor_names[flavor])
        w = self.ledger.witness(mine)
        to_sim = self._to_sim(mine, snap)
        counted = {(r.workload, r.podset): p for (r, _), p in zip(w.rows, w.placed)}  # type: ignore[attr-defined]
        load: dict[int, IntArray] = {}
        for job in jobs:
            adm = self.admitted[job]
            for ps in adm.podsets:
                if ps.bound >= ps.count:
                    continue
                got = counted.get((adm.key, ps.name), [])
                if sum(k for _, k in got) < ps.count - ps.bound:
                    return False
                if not got:
                    continue
                nodes = np.array([i for i, _ in got], dtype=np.int64)
                if to_sim is not None:
                    nodes = to_sim[nodes]
                if (nodes < 0).any():
                    return False
                if ps.exact:
                    allowed = self.domain(snap, ps)
                    on = Counter(pod["spec"]["nodeName"] for pod in ps.pods)
                    allowed = allowed[np.isin(allowed, [snap.node_index[n] for n, k in ps.planned.items() if k > on.get(n, 0) and n in snap.node_index])]
                    if not np.isin(nodes, allowed).all():
                        return False
                elif not self._allows(snap, ps, nodes):
                    return False
                shape = np.array([ps.per_pod.gpu, ps.per_pod.cpu_milli, ps.per_pod.memory_mib, 1], dtype=np.int64)
                for i, (_, k) in zip(nodes.tolist(), got):
                    load[i] = load.get(i, 0) + shape * k
        return all(bool((snap.free[i] >= used).all()) for i, used in load.items())

    def _to_sim(self, mine: Snapshot, snap: Snapshot) -> IntArray | None:
        """The cache snapshot's node indices in the simulator's snapshot (None: the same order)."""
        key = (id(mine.node_names), id(snap.node_names))
        if self._index_map is None or self._index_map[0] != key:
            same = mine.node_names is snap.node_names or mine.node_names == snap.node_names
            self._index_map = (key, None if same else np.array([snap.node_index.get(n, -1) for n in mine.node_names], dtype=np.int64))
        return self._index_map[1]

    def owed(self, flavor: int, snap: Snapshot) -> list[OwedPods]:
        """Every admitted PodSet's unbound pods on ``flavor``: count and domain from the simulated
        cluster (ground truth), planned nodes, and where the ledger counts them (its witness)."""
        jobs = sorted(self._owing.get(flavor, ()))
        if not jobs:
            return []
        witness = {(o.workload, o.podset): o.witness for o in self.ledger.owed(self.cache.snapshot(self.flavor_names[flavor]))}
        names = snap.node_names
        out = []
        for job in jobs:
            adm = self.admitted[job]
            for ps in adm.podsets:
                if ps.bound >= ps.count:
                    continue
                on: dict[str, int] = {}
                for pod in ps.pods:
                    on[pod["spec"]["nodeName"]] = on.get(pod["spec"]["nodeName"], 0) + 1
                planned = tuple((n, k - min(k, on.get(n, 0))) for n, k in ps.planned.items() if k > on.get(n, 0))
                domain = self.domain(snap, ps)
                if ps.exact:
                    pinned = {snap.node_index[n] for n, _ in planned if n in snap.node_index}
                    domain = np.array([i for i in domain.tolist() if i in pinned], dtype=np.int64)
                out.append(OwedPods(adm.key, ps.name, ps.count - ps.bound, ps.per_pod, tuple(names[i] for i in domain.tolist()),
                                    planned, witness.get((adm.key, ps.name), ())))
        return out


def witness_holds(snap: Snapshot, owed: Sequence[OwedPods]) -> bool:
    """Does the ledger's own witness prove the invariant on its face? Every owed pod counted,
    inside its domain, and bound + witness pods fit every node they use. When it does, every
    owed pod has room (the witness is the placement); when not, ``check_invariant`` names why."""
    index = snap.node_index
    load: dict[int, npt.NDArray[np.int64]] = {}
    for o in owed:
        if sum(k for _, k in o.witness) < o.pods:
            return False
        allowed = set(o.domain)
        shape = np.array([o.per_pod.gpu, o.per_pod.cpu_milli, o.per_pod.memory_mib, 1], dtype=np.int64)
        for name, k in o.witness:
            if name not in allowed:
                return False
            i = index.get(name)
            if i is None:
                return False
            load[i] = load.get(i, 0) + shape * k
    return all(bool((snap.free[i] >= used).all()) for i, used in load.items())


def _selector_nodes(snap: Snapshot, selector: Sequence[tuple[str, str]]) -> IntArray:
    """Snapshot nodes carrying every label of ``selector`` (topology levels read from the paths,
    the hostname from the node name, other keys from the node's labels), ascending. A level's
    domains are contiguous node ranges, so a topology key costs its domains, not the nodes."""
    out: IntArray | None = None
    for key, value in selector:
        if key == HOSTNAME_LABEL and value in snap.node_index:
            i = snap.node_index[value]
            found = np.array([i] if snap.labels[i].get(key, value) == value else [], dtype=np.int64)
        elif key in snap.level_labels[:-1]:
            lv = snap.level_index(key)
            ranges = [snap.domain_range(lv, d) for d, path in enumerate(snap.domain_values[lv]) if path[-1] == value]
            found = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges]) if ranges else np.zeros(0, dtype=np.int64)
        else:
            among = out if out is not None else np.arange(snap.num_nodes, dtype=np.int64)
            found = among[np.fromiter((snap.labels[k].get(key) == value for k in among.tolist()), dtype=bool, count=among.size)]
        out = found if out is None else np.intersect1d(out, found, assume_unique=True)
    return out if out is not None else np.arange(snap.num_nodes, dtype=np.int64)


def node_rows(snap: Snapshot, names: Iterable[str]) -> tuple[dict[str, ResourceVector], dict[str, ResourceVector]]:
    """Allocatable and bound usage of the named nodes, as ``check_invariant`` reads them."""
    alloc: dict[str, ResourceVector] = {}
    used: dict[str, ResourceVector] = {}
    for name in names:
        i = snap.node_index[name]
        a = snap.alloc[i]
        u = a - snap.free[i]
        alloc[name] = ResourceVector(*(int(x) for x in a))
        used[name] = ResourceVector(*(int(x) for x in u))
    return alloc, used

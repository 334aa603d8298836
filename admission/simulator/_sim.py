"""The discrete-event simulator: a clock, a Kueue model, and one placement policy at a time.

Events: arrivals (from the trace, in order), completions, and admission-check retry timers.
After every batch of events at one instant, each touched flavor runs one scheduling pass.

Kueue, as modelled
    One ClusterQueue per flavor, nominal GPU quota = the flavor's healthy GPUs (or, with
    ``SimSettings.cohort``, that quota split over the ClusterQueues of one cohort, each job's
    Workload in one of them: ``_cohort``), queueing strategy BestEffortFIFO: pending workloads
    are tried in Kueue's queue order, and one that
    cannot be admitted is skipped so later ones can go (set aside as inadmissible:
    ``requeueIfNotPresent`` in ``pkg/cache/queue/cluster_queue.go``). Kueue orders by creation time, except
    that a Workload evicted by an admission check (its Retry) is ordered by the time of that
    eviction until it holds quota again (``Ordering.GetQueueOrderTimestamp`` in
    ``pkg/workload/workload.go``, with ``IsEvictedByAdmissionCheck`` in
    ``pkg/workload/evict/evict.go``; ``SetQuotaReservation`` turns ``Evicted`` False; Kueue
    v0.19.2): a Retry sends it behind every job created before it was evicted. Ties go by
    arrival order (Kueue's by UID). Before that order comes the job's priority (``Job.priority``,
    its Workload's ``spec.priority``): higher first, as Kueue's ``baseCompareFunc`` compares
    priority, then the queue-order timestamp, then UID (``pkg/cache/queue/cluster_queue.go``,
    v0.19.2); with every priority equal (0 unless a workload gives them) the order is as above.
    Quota is checked first (usage + request ≤ nominal; in a cohort, ≤ what Kueue's ``available``
    lets the ClusterQueue borrow, and its heads go in Kueue's cycle order across the cohort). Kueue's own
    preemption for quota is off unless ``SimSettings.kueue_preemption`` names a policy
    (``_kueue_preemption``). A profile's ``preemptDomain`` clears a domain for a waiting gang
    through the controller's own plan, and its victims are evicted as Kueue evicts them (``_preemption``). Jobs are routed to a flavor once, before any
    policy runs (the flavor they name, else in proportion to flavor capacity among the flavors
    that can ever hold them), so every policy sees the same queues.

Why a pass stays cheap (and stays faithful)
    Jobs of one shape (pods × per-pod resources × class) get identical requests, so the queue of
    a flavor is one FIFO per shape (keyed by that order) and a pass merges their heads. A shape whose
    GPU count exceeds the free quota is skipped whole: that is Kueue's quota check, not an
    approximation. For a baseline a placement failure marks the whole shape inadmissible until
    capacity is freed (a completion in the flavor), which is what Kueue does with inadmissible
    workloads under BestEffortFIFO; it also loses nothing, because every finder here is monotone
    (a request that fails keeps failing while free capacity only shrinks) and the later jobs of
    that shape would ask the very same question. So a pass costs O(shapes + admitted) placement
    calls, not O(pending).

Atoll, as modelled
    Quota reserved → Atoll's check runs ``policies.decide`` with the job's wait state (when it
    first waited, how many Retries so far). Admit: the job starts. Wait: Retry with
    ``requeueAfterSeconds``. Kueue v0.19.2 keeps the quota reserved through the delay
    (``WorkloadReconciler.Reconcile`` in ``pkg/controller/core/workload_controller.go`` waits for
    ``requeueAt`` before ``reconcileCheckBasedEviction``), then evicts the Workload and queues it
    at once, ahead of the Workloads its quota kept out, which return from the inadmissible set a
    batch later; the real-Kueue tier shows the held quota (``tests/kueue/test_real_kueue.py``).
    So here the job keeps its quota until its timer fires, then gives it back and is queued first
    in its flavor: it is decided again at once if nothing else took the quota in that instant. It
    is retried when its timer fires, not earlier when capacity frees (Kueue's ``requeueAt`` is
    not cut short by capacity events). A Workload waiting on Retries thus holds its quota as long
    as it waits; parking (below) holds it on purpose and gives it back when another Workload
    waits for it. Elastic profiles cap the delay at the remaining relax time, so the retry at
    ``relaxAfterSeconds`` is the first one allowed to span. Reject: the job never runs (it cannot fit the flavor under the profile).
    Decisions take no simulated time.

    A Workload of a profile with ``queueing.parkWaiting`` (or any, with ``SimSettings.parking`` True;
    none with it False: the controller's ``decisions.park_waiting``) that waits for a domain is parked
    instead (``admission.queue.WaitingRoom``): Atoll's check stays ``Pending``, so Kueue keeps its
    quota reserved and neither evicts nor requeues it, and it is decided again only when capacity
    is freed in a domain of its level that now has the GPUs it needs, or when its profile may
    span. Waits for other reasons (owed pods, the configuration) stay Retries with their delay.
    Kueue counts a Workload's quota as used from ``QuotaReserved`` on, checks pending or not
    (``addOrUpdateWorkloadWithoutLock`` in ``pkg/cache/scheduler/cache.go``, v0.19.2), so a
    parked Workload keeps others out of its quota. With ``SimSettings.yield_quota`` (the default)
    parked Workloads give it back as the controller does (``QuotaYield.choose``): after Kueue's
    pass, each job still queued and blocked on quota (a waiter, in Kueue's order), whose GPUs the
    flavor has free, is given parked quota, newest parked first, until what they give covers what
    it asks for, and nothing if that with the free quota would not let it in; a Workload holding a reservation keeps its
    quota, each gives it back at most once per decision (``WaitingRoom.may_give``; under
    ``SimSettings.yield_in_turn`` again without one, but the oldest parked for a reservation
    keeps it), a waiter takes
    no more than it asks for while it waits, and one that gave its quota back and waits for it
    again takes none while its need is on file (``WaitingRoom.is_aside``); with
    ``SimSettings.yield_back_when_fits`` an event that reaches it drops its need only if the
    placement it was parked on fits now (``settle_givers``, asked when it would take quota or hold
    it again). A Workload that gives its quota back is deactivated: Kueue evicts it
    (reason ``Deactivated``) and releases its quota, then, in the same instant, tries the waiter
    again. Kueue queues a reactivated Workload at its creation time: an eviction by deactivation
    leaves ``Ordering.GetQueueOrderTimestamp`` (``pkg/workload/workload.go``, v0.19.2) at
    ``CreationTimestamp``, where a Retry's eviction would order it by the eviction. So it is
    reactivated (the controller's ``QuotaYield.due``) only once no queued job is ahead of the
    place the give left it at (its priority, the give's time): reactivated sooner, it went
    straight back ahead of every job that queued while it was parked, and took the next quota
    freed. Its need stays on file (``WaitingRoom.set_aside``): when it
    holds quota again while nothing it waits for changed, it is parked again undecided, in its
    old place among the parked; one whose need an event dropped is decided again.

A started job holds its nodes for ``duration × slowdown`` (the cost model); its pods are
reserved on the snapshot with ``Snapshot.reserve``'s arithmetic, applied to all of a
placement's nodes in one numpy step. A policy with a ``capacity_changed(snapshot, nodes)``
method is told of every reserve and release (Kueue's view then copies only those rows).

Why this module is longer than the others: ``_replay`` is one event loop whose closures (start,
bind, enqueue, a pass over a flavor's queue, the invariant check) share the loop's arrays and
clock; made into separate functions they would pass a dozen arrays each, on the hot path of every
replay. What stands alone (cost, policies, the deployed controller, metrics, traces) is elsewhere.
"""

from __future__ import annotations

import functools
import gc
import heapq
import math
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from admission.controller import DecisionSettings, Violation, check_invariant
from admission.queue import MAX_AHEAD, Need, Waiter, WaitingRoom, fits_now, settle_givers
from admission.simulator._cohort import HELD, CohortHeads, CohortShape, FlavorQuota, Gift, QueueHeads, split_shapes
from admission.simulator._deployed import NAMESPACE, DeployedAtoll, LedgerFactory, node_rows, witness_holds
from admission.simulator._jobs import Job, split_into_pods
from admission.simulator._kueue_preemption import KUEUE_PREEMPTION, Holder, candidates, classical_targets, minimal_targets
from admission.simulator._kueue_preemption import Preemptor as KueuePreemptor
from admission.simulator._policies import AtollPolicy, Attempt, JobShape, Policy, fits_one_island, island_level_of
from admission.simulator._preemption import WITHIN_CLUSTER_QUEUE, drop_events, release_admitted
from admission.simulator._scheduler import SCHEDULERS
from policies import WaitState
from topology import LINK_MODELS, ClusterModel, CostModel, FlavorModel, ResourceVector, Snapshot, fragmentation_index, island_free_gpus

__all__ = [
    "ENFORCEMENTS",
    "ISLAND_BLOCKS",
    "SCHEDULERS",
    "STATUS_DONE",
    "STATUS_REJECTED",
    "STATUS_UNFINISHED",
    "CostModel",
    "InvariantViolation",
    "PreparedWorkload",
    "SimResult",
    "SimSettings",
    "build_snapshots",
    "prepare_workload",
    "quota_waiters",
    "simulate",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
SlowdownFn = Callable[[Snapshot, IntArray, JobShape, Job, IntArray], float]
"""(snapshot, nodes, shape, job, pods per node) → slowdown: ``CostModel`` or a stand-in."""
ProgressFn = Callable[[int, int], None]
_Entry = tuple[tuple[float, float], int]
"""A job in a shape's queue: ((−priority, Kueue's order time), job)."""

STATUS_UNFINISHED, STATUS_DONE, STATUS_REJECTED = 0, 1, 2
ISLAND_BLOCKS = (72, 64, 32, 16)
"""Block sizes (GPUs) whose availability inside one island is sampled (``SimResult.block_free``)."""
ENFORCEMENTS = ("domain", "exact")
_COMPLETE, _RETRY, _BIND, _DEADLINE, _YIELD_END = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True)
class SimSettings:
    """Knobs of one run. Defaults suit a 2,000-job run and a 100,000-job run alike."""

    island_level: str | None = "nvidia.com/gpu.clique"
    """Level whose domains count as islands (single-island share, fragmentation, heatmap);
    a flavor without it uses the level just above the node."""
    reference_gang_gpus: int = 8
    """Gang size (GPUs) the fragmentation index is measured against."""
    samples: int = 2000
    """Fragmentation samples over the arrival window (each costs one pass over the nodes)."""
    record_islands: bool = False
    """Keep per-island usage at the busiest moment (for the heatmap)."""
    stall_seconds: float = 7 * 86400.0
    """Stop when nothing runs, nothing is left to arrive, and nothing was admitted for this long
    (a job whose profile lets it wait forever); such jobs are reported as unfinished."""
    scheduler: str = "least-allocated"
    """How pods of an admitted Workload are bound once Atoll says Ready (see ``SCHEDULERS``):
    ``least-allocated`` (the default kube-scheduler: NodeResourcesFit LeastAllocated on cpu and
    memory, GPUs not scored), ``most-allocated`` (bin packing with ``nvidia.com/gpu`` weighted),
    ``random`` (any feasible node), ``adversarial`` (the feasible node another Workload planned
    first). Under ``exact`` enforcement every model binds pods to their planned nodes."""
    enforcement: str | None = None
    """``domain`` or ``exact``; None: what the profiles document says for each flavor."""
    seed: int = 0
    """Seed of the scheduler model's ties (same seed, same run)."""
    parking: bool | None = None
    """Overrides each profile's ``queueing.parkWaiting``, as the controller's ``decisions.park_waiting``
    does. True: Atoll's waits for a domain park the Workload (check ``Pending``, quota kept) until
    what it waits for changes; False: every wait is a Retry decided again when its delay ends;
    None (the default): each profile as its ``queueing.parkWaiting`` says (``Verdict.waits_parked``)."""
    quota_yield_max_seconds: float = DecisionSettings().quota_yield_max_seconds
    """The longest a job that gave its quota back stays deactivated (s, from the give), as the
    controller's ``decisions.quota_yield_max_seconds`` (the same default): it comes back sooner
    once no job queued before the give waits for quota (``due_back``)."""
    yield_back_when_fits: bool = DecisionSettings().quota_yield_back_when_fits
    """The controller's ``decisions.quota_yield_back_when_fits`` (the same default): an event that
    reaches a job that gave its quota back drops its need only if its placement fits now."""
    yield_in_turn: bool = DecisionSettings().quota_yield_in_turn
    """The controller's ``decisions.quota_yield_in_turn`` (the same default): freed room reaches the
    jobs that gave their quota back counted after the parked ones, a job parked again undecided may
    give its quota back again, and the oldest one parked for a reservation of its flavor keeps its
    quota (``WaitingRoom``'s ``in_turn``)."""
    yield_turn_lead: float | None = DecisionSettings().quota_yield_turn_lead_seconds
    """The controller's ``decisions.quota_yield_turn_lead_seconds`` (the same default): from this
    many seconds before a reservation of its flavor is expected free, the first job in line for one
    keeps its quota and is given quota first (``WaitingRoom``'s ``turn_lead``)."""
    yield_quota: bool = True
    """With ``parking``: parked Workloads give their quota back to a queued job blocked on quota
    that theirs would let in (deactivated until it holds quota, newest parked first), as the
    controller does; False: parked Workloads keep their quota however long they wait."""
    declared_runtime_factor: float | None = None
    """Each job's Workload declares Kueue's ``maximumExecutionTimeSeconds`` as this factor times
    its true runtime (rounded up to a second), as users pad a limit they must not exceed; what
    lets a job backfill a reserved domain. None (the default): no job declares a limit. The
    simulator does not stop a job at its limit (a factor below its slowdown would understate)."""
    quota_factor: float = 1.0
    """Each ClusterQueue's nominal GPU quota as this multiple of its flavor's healthy GPUs. 1 (the
    default): quota is capacity. Above 1, as Kueue allows, quota is not what limits the queue, so
    a Workload holding quota through its Retries keeps no one else out."""
    bind_delay_seconds: float = 0.0
    """From Atoll's Ready to the scheduler binding the job's pods. 0: right after the scheduling
    pass that admitted it, so the Workloads admitted in one pass all owe pods at once."""
    records: str | None = None
    """A file the run's Atoll decision records go to (``atoll simulate --records``; the deployed
    policies only); None: no records, and verdicts leave out the losing domains."""
    run_label: str = ""
    """Its ``run`` field on every record: which run of a sweep wrote it."""
    link_model: str = "calibrated"
    """How a placement's all-reduce is priced (``_cost.LINK_MODELS``): ``calibrated``
    (``_collectives``) or ``flat-ring`` (the pessimistic ring at one rail)."""
    within_cluster_queue: str = "LowerPriority"
    """The ClusterQueues' ``spec.preemption.withinClusterQueue``, which bounds whom a profile's
    ``preemptDomain`` may evict (``_preemption``): ``LowerPriority`` (as a cluster that preempts
    sets it), ``LowerOrNewerEqualPriority``, or ``Never`` (Kueue's default: no victim at all)."""
    cohort: CohortShape | None = None
    """Several ClusterQueues per flavor in one cohort, with Kueue's borrowing (``_cohort``); None
    (the default): one ClusterQueue per flavor and no cohort."""
    kueue_preemption: str = "Never"
    """Kueue's own preemption for quota (``_kueue_preemption``) under this ``withinClusterQueue``:
    ``Never`` (the default, and Kueue's: nobody is preempted for quota, as before it was modelled),
    ``LowerPriority`` or ``LowerOrNewerEqualPriority``, which must then be ``within_cluster_queue``
    too (one ClusterQueue has one policy, read by Kueue and by Atoll's plan alike)."""

    def __post_init__(self) -> None:
        if self.link_model not in LINK_MODELS:
            raise ValueError(f"link_model: {self.link_model!r} is not one of {', '.join(LINK_MODELS)}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler: {self.scheduler!r} is not one of {', '.join(SCHEDULERS)}")
        if self.declared_runtime_factor is not None and not self.declared_runtime_factor >= 1.0:
            raise ValueError(f"declared_runtime_factor: {self.declared_runtime_factor!r} must be at least 1 (a declared limit "
                             "below the runtime would end the job early); leave it unset for no declared limits")
        if not self.quota_factor >= 1.0:
            raise ValueError(f"quota_factor: {self.quota_factor!r} must be at least 1 (quota below capacity would "
                             "leave healthy GPUs no Workload may use); leave it at 1 for quota equal to capacity")
        if self.within_cluster_queue not in WITHIN_CLUSTER_QUEUE:
            raise ValueError(f"within_cluster_queue: {self.within_cluster_queue!r} is not one of {', '.join(WITHIN_CLUSTER_QUEUE)}")
        if self.kueue_preemption not in KUEUE_PREEMPTION:
            raise ValueError(f"kueue_preemption: {self.kueue_preemption!r} is not one of {', '.join(KUEUE_PREEMPTION)}")
        if self.kueue_preemption != "Never" and self.kueue_preemption != self.within_cluster_queue:
            raise ValueError(f"kueue_preemption: {self.kueue_preemption!r} differs from within_cluster_queue {self.within_cluster_queue!r}; "
                             "both are the ClusterQueue's withinClusterQueue: give them the same value")
        if self.enforcement not in (None, *ENFORCEMENTS):
            raise ValueError(f"enforcement: {self.enforcement!r} is not one of {', '.join(ENFORCEMENTS)}")


@dataclass(frozen=True)
class PreparedWorkload:
    """Jobs routed to flavors and cut into pods once, shared by every policy of a run."""

    arrival: FloatArray
    duration: FloatArray
    gpus: IntArray
    flavor: IntArray
    """Flavor index per job, -1 when no flavor can ever hold it."""
    shape: IntArray
    """Index into ``shapes`` per job (-1 with flavor -1)."""
    shapes: tuple[tuple[int, JobShape], ...]
    """(flavor index, shape) per shape id."""
    flavors: tuple[FlavorModel, ...]
    jobs: tuple[Job, ...]
    """The jobs in arrival order (the cost model reads their comm fraction and gradient size)."""
    priority: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Each job's ``Job.priority`` (empty: all 0)."""

    def __len__(self) -> int:
        return int(self.arrival.shape[0])


@dataclass
class SimResult:
    """Everything one policy's run produced; ``_metrics`` turns it into numbers and plots."""

    policy: str
    arrival: FloatArray
    start: FloatArray
    end: FloatArray
    gpus: IntArray
    status: IntArray
    slowdown: FloatArray
    islands: IntArray
    """Islands a started job spans (0 when it never started)."""
    gang_fits_island: npt.NDArray[np.bool_]
    """Gangs (multi-pod training jobs; inference replicas are spread on purpose) that fit one
    island of their empty flavor."""
    relaxed: npt.NDArray[np.bool_]
    attempts: IntArray
    total_gpus: int
    times: FloatArray
    allocated: FloatArray
    useful: FloatArray
    """Allocated GPUs weighted by 1/slowdown (the work the ideal placement would do)."""
    pending: FloatArray
    frag_times: FloatArray
    frag_values: FloatArray
    decisions: int
    decision_seconds: float
    wall_seconds: float
    window: tuple[float, float]
    """First and last arrival: the span over which load is offered."""
    busiest_time: float = math.nan
    island_grid: list[dict[str, Any]] = field(default_factory=list)
    block_free: dict[int, FloatArray] = field(default_factory=dict)
    """Per block size (``ISLAND_BLOCKS``, GPUs): 1.0 at each fragmentation sample when some island
    of some flavor had that many GPUs free, else 0.0; only sizes some island can hold."""
    stranded_gpus: FloatArray = field(default_factory=lambda: np.zeros(0))
    """At each fragmentation sample: GPUs of the waiting gangs (multi-pod training jobs that fit
    one island when empty) whose flavor had enough GPUs free, but no island with that many."""
    """Per flavor at the busiest moment: {flavor, level, parents, used, total} (see _plots)."""
    invariant_checks: int = 0
    """Events after which the no-double-booking invariant was checked (an Atoll policy only)."""
    invariant_full_checks: int = 0
    """Of those, checks the ledger's own witness could not settle, run from scratch (``check_invariant``)."""
    invariant_violations: int = 0
    """Violations found: 0 in a finished run (the first violation stops it: ``InvariantViolation``)."""
    reserved_idle_gpu_hours: float = 0.0
    """GPU-hours reservations held idle: GPUs reserved for a waiting gang and free meanwhile (an Atoll profile with reservations)."""
    quota_yields: int = 0
    """Parked Workloads that gave their quota back (in a cluster, a deactivation: Kueue evicts them); ``SimSettings.yield_quota``."""
    reparked: int = 0
    """Of those, parked again without a decision when they held quota again (nothing they wait for had changed)."""
    quota_yields_timed_out: int = 0
    """Of those, reactivated by ``SimSettings.quota_yield_max_seconds`` while a job queued before the give still waited."""
    longest_quota_yield_hours: float = 0.0
    """The longest a job that gave its quota back stayed deactivated (h)."""
    quota_lends: int = 0
    """Of the yields, ended because the giver's placement fit now while a job queued before the give still waited (``queueing.lendParked``)."""
    preempt_domain: str = "off"
    """The policy's profile's ``preemptDomain`` (``off`` for every policy but an Atoll profile that sets it)."""
    preemption_plans: int = 0
    """Domain-clearing plans made (``preemptDomain``: ``on`` and ``dry-run`` alike; each is in the decision record)."""
    preempted: int = 0
    """Victims evicted by those plans (``on`` only; a job evicted twice counts twice)."""
    preempted_gpu_hours: float = 0.0
    """GPU-hours the victims had run when evicted: the work lost (each restarts from scratch)."""
    kueue_preemption: str = "Never"
    """``SimSettings.kueue_preemption``: Kueue's own preemption for quota (``Never``: off)."""
    kueue_preemptions: int = 0
    """Times Kueue preempted for a Workload (each evicts a minimal set of targets)."""
    kueue_preempted: int = 0
    """Workloads Kueue evicted for them (a job evicted twice counts twice)."""
    kueue_preempted_gpu_hours: float = 0.0
    """GPU-hours those had run when evicted: the work lost (each restarts from scratch)."""


# --------------------------------------------------------------------------------- preparing


def build_snapshots(cluster: ClusterModel) -> list[Snapshot]:
    return [Snapshot(f.name, f.level_specs(), f.build_nodes(), node_level=f.node_level()) for f in cluster.flavors]


def _gpus_per_node(snapshot: Snapshot) -> int:
    gpus = snapshot.alloc[:, 0]
    return int(gpus.max()) if gpus.size else 0


def job_shape(job: Job, gpus_per_node: int) -> JobShape:
    """The job's pods on nodes of ``gpus_per_node`` GPUs (``split_into_pods``); CPU and memory
    are the job's totals shared evenly, rounded up, as ``make_job`` does."""
    pods, per_pod = split_into_pods(job.gpus, gpus_per_node)
    cpu = -(-job.cpu_milli_per_pod * job.pods // pods)
    mem = -(-job.memory_mib_per_pod * job.pods // pods)
    return JobShape(pods, ResourceVector(per_pod, cpu, mem, 1), job.kind)


def prepare_workload(cluster: ClusterModel, jobs: Sequence[Job], *, snapshots: Sequence[Snapshot] | None = None) -> PreparedWorkload:
    """Route each job to a flavor and cut it into that flavor's pods. Jobs are ordered by
    submit time, ties by their trace order. A job no flavor can hold (even empty) gets flavor -1
    and is rejected at arrival by every policy alike."""
    snaps = list(snapshots) if snapshots is not None else build_snapshots(cluster)
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
    ordered = tuple(jobs[i] for i in order)
    n = len(ordered)
    arrival = np.fromiter((j.submit_s for j in ordered), dtype=np.float64, count=n)
    duration = np.fromiter((j.duration_s for j in ordered), dtype=np.float64, count=n)
    gpus = np.fromiter((j.gpus for j in ordered), dtype=np.int64, count=n)
    flavor = np.full(n, -1, dtype=np.int64)
    shape = np.full(n, -1, dtype=np.int64)
    shape_ids: dict[tuple[int, JobShape], int] = {}
    per_node = [_gpus_per_node(s) for s in snaps]
    capacity = np.array([s.total_gpus() for s in snaps], dtype=np.float64)
    cands_cache: dict[tuple[int, int, int, str], list[tuple[int, JobShape]]] = {}
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    for k, job in enumerate(ordered):
        key = (job.gpus, job.cpu_milli_per_pod * job.pods, job.memory_mib_per_pod * job.pods, job.kind)
        cands = cands_cache.get(key)
        if cands is None:
            cands = []
            for f, snap in enumerate(snaps):
                if per_node[f] < 1:
                    continue
                sh = job_shape(job, per_node[f])
                if _fits_empty(snap, sh):
                    cands.append((f, sh))
            cands_cache[key] = cands
        if not cands:
            continue
        if len(cands) == 1:
            chosen = cands[0]
        else:  # capacity-weighted, deterministic: a low-discrepancy draw per job
            weights = capacity[[c[0] for c in cands]]
            u = (k * golden) % 1.0
            chosen = cands[int(np.searchsorted(np.cumsum(weights) / weights.sum(), u, side="right"))]
        flavor[k] = chosen[0]
        shape[k] = shape_ids.setdefault(chosen, len(shape_ids))
    shapes = tuple(sorted(shape_ids, key=shape_ids.__getitem__))
    priority = np.fromiter((j.priority for j in ordered), dtype=np.int64, count=n)
    return PreparedWorkload(arrival, duration, gpus, flavor, shape, shapes, tuple(cluster.flavors), ordered, priority)


def _fits_empty(snapshot: Snapshot, shape: JobShape) -> bool:
    """The job's pods fit the flavor's healthy nodes when all are empty (policy-independent)."""
    req = np.array(shape.per_pod.as_tuple()[:3] + (1,), dtype=np.int64)
    mask = req > 0
    cap = (snapshot.alloc[:, mask] // req[mask]).min(axis=1)
    cap[snapshot.eligible == 0] = 0
    return int(cap.sum()) >= shape.pods


# --------------------------------------------------------------------------------- running


class InvariantViolation(RuntimeError):
    """Admitted pods were promised room that is not there: the simulation stops here."""

    def __init__(self, policy: str, now: float, violations: Sequence[Violation], checks: int = 0) -> None:
        who = sorted({w for v in violations for w in v.workloads})
        lines = "; ".join(f"[{v.kind}] {v.message}" for v in violations[:5])
        super().__init__(f"{policy}: invariant violated at t={now:.0f} s (check {checks}), {len(violations)} violations, "
                         f"Workloads {', '.join(who) or '(none named)'}: {lines}")
        self.checks = checks
        self.policy = policy
        self.now = now
        self.violations = tuple(violations)
        self.workloads = tuple(who)


class _Flavor:
    """Per-flavor state of a run: snapshot, quota, the FIFO per shape, inadmissible marks."""

    def __init__(self, snapshot: Snapshot, island_label: str, quota_factor: float = 1.0, cohort: CohortShape | None = None,
                 cq_of: Sequence[int] = ()) -> None:
        self.snapshot = snapshot
        self.capacity = snapshot.free_gpus()
        self.nominal = int(self.capacity * quota_factor)
        self.used = 0
        self.claimed = 0
        """Quota the waiters served in a quota yield take first (Kueue admits them in its order); 0 outside one."""
        self.quota = cohort.quota(self.nominal) if cohort is not None else None
        """The cohort's ClusterQueues on this flavor (``_cohort``); None: one ClusterQueue, no cohort."""
        self.claims: list[tuple[int, int]] = []
        """In a cohort: (ClusterQueue, GPUs) of each ``claim``, given back by ``unclaim``."""
        self.cq_of = cq_of
        """Shape → its ClusterQueue (with a cohort, a shape is one ClusterQueue's jobs of one request)."""
        self.version = 0
        self.queues: dict[int, list[tuple[tuple[float, float], int]]] = {}
        """Shape → heap of ((−priority, Kueue's order time), job): the order time is the arrival, or the eviction of a Retry."""
        self.dead: dict[int, int] = {}
        self.island_label = island_label
        self.island = snapshot.level_index(island_label)

    def free(self, sid: int) -> int:
        """GPUs of quota a Workload of shape ``sid`` may reserve now (less what waiters served in a yield claim)."""
        return self.nominal - self.used - self.claimed if self.quota is None else self.quota.available(self.cq_of[sid])

    def could_admit(self, sid: int, gpus: int) -> bool:
        """Kueue could ever admit ``gpus`` of shape ``sid`` (in a cohort: within what its ClusterQueue
        could use with nothing reserved), as the controller's ``QuotaYield`` counts a waiter."""
        return self.quota is None or gpus <= self.quota.ceiling[self.cq_of[sid]]

    def hold(self, sid: int, gpus: int) -> None:
        """A Workload of shape ``sid`` takes ``gpus`` of quota (negative: gives them back)."""
        self.used += gpus
        if self.quota is not None:
            self.quota.hold(self.cq_of[sid], gpus)

    def claim(self, sid: int, gpus: int) -> None:
        """A waiter of shape ``sid`` served in a yield is counted as taking ``gpus`` (until ``unclaim``)."""
        self.claimed += gpus
        if self.quota is not None:
            self.quota.hold(self.cq_of[sid], gpus)
            self.claims.append((self.cq_of[sid], gpus))

    def unclaim(self) -> None:
        self.claimed = 0
        if self.quota is not None:
            for c, gpus in self.claims:
                self.quota.hold(c, -gpus)
            self.claims.clear()

    def gift(self, sid: int) -> Gift | None:
        """What givers would add for a waiter of shape ``sid`` (None: one ClusterQueue, a giver adds its GPUs)."""
        return None if self.quota is None else Gift(self.quota, self.cq_of[sid])

    def heads(self, heads: list[tuple[tuple[float, float], int, int]], shape_gpus: Sequence[int]) -> QueueHeads | CohortHeads:
        """A pass's heads in Kueue's order: one ClusterQueue's queue, or the cohort's cycles."""
        return QueueHeads(heads) if self.quota is None else CohortHeads(heads, self.cq_of, shape_gpus, self.quota)


def simulate(
    cluster: ClusterModel,
    work: PreparedWorkload,
    policy: Policy,
    *,
    settings: SimSettings = SimSettings(),
    slowdown: SlowdownFn | None = None,
    progress: ProgressFn | None = None,
    ledger: LedgerFactory | None = None,
) -> SimResult:
    """Replay ``work`` on a fresh copy of ``cluster`` under ``policy``. Deterministic.

    An Atoll policy runs as deployed (``_deployed.DeployedAtoll``): the controller's decision and
    ledger, pods bound by ``settings.scheduler``, and the invariant checked after every event;
    a violation raises ``InvariantViolation`` naming the Workloads. ``ledger`` replaces the
    controller's ledger (tests show the check catching a faulty one)."""
    with _collecting_young_objects_less_often():
        return _simulate(cluster, work, policy, settings, slowdown, progress, ledger)


@contextmanager
def _collecting_young_objects_less_often() -> Iterator[None]:
    """A replay allocates a few dozen short-lived objects per decision beside hundreds of
    thousands of long-lived ones (Workloads, pods); at Python's default threshold the cyclic
    collector walks the young ones every few decisions: 12-15 % of a long run (same peak memory
    without it). It still runs here, over a hundred times less often; the thresholds are put
    back after."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _simulate(cluster: ClusterModel, work: PreparedWorkload, policy: Policy, settings: SimSettings, slowdown: SlowdownFn | None,
              progress: ProgressFn | None, ledger: LedgerFactory | None) -> SimResult:
    wall0 = time.perf_counter()
    deployed: DeployedAtoll | None = None
    records = None
    if isinstance(policy, AtollPolicy):
        records = open(settings.records, "w", encoding="utf-8") if settings.records else None  # noqa: SIM115 - closed below
        deployed = DeployedAtoll(policy.name, policy.profile_name, policy.document(), cluster, scheduler=settings.scheduler,
                                 enforcement=settings.enforcement, seed=settings.seed, ledger=ledger, records=records,
                                 run=settings.run_label, within_cluster_queue=settings.within_cluster_queue, cohort=settings.cohort)
    try:
        return _replay(cluster, work, policy, settings, slowdown, progress, deployed, wall0)
    finally:
        if records is not None:
            records.close()


def _replay(cluster: ClusterModel, work: PreparedWorkload, policy: Policy, settings: SimSettings, slowdown: SlowdownFn | None,
            progress: ProgressFn | None, deployed: DeployedAtoll | None, wall0: float) -> SimResult:
    cost = slowdown if slowdown is not None else CostModel(settings.link_model)
    snaps = build_snapshots(cluster)
    shape_of, shapes, cq_of = split_shapes(work.shape, work.shapes, work.jobs, settings.cohort, settings.seed)
    fl = [_Flavor(s, island_level_of(s, settings.island_level), settings.quota_factor, settings.cohort, cq_of) for s in snaps]
    if deployed is not None and deployed.preemption is not None:  # Atoll's plan reclaims only from a ClusterQueue that borrows
        deployed.preemption.quotas = {f.snapshot.flavor: f.quota for f in fl if f.quota is not None}
    total_gpus = sum(f.capacity for f in fl)
    n = len(work)
    prio = work.priority if work.priority.size == n else np.zeros(n, dtype=np.int64)
    shape_gpus = [sh.gpus for _, sh in shapes]
    shape_fits = [sh.pods > 1 and sh.kind == "training" and fits_one_island(fl[f].snapshot, sh, fl[f].island_label) for f, sh in shapes]
    capacity_changed = getattr(policy, "capacity_changed", None)  # optional: told of every reserve and release

    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int64)
    slow = np.full(n, np.nan)
    islands = np.zeros(n, dtype=np.int64)
    relaxed = np.zeros(n, dtype=bool)
    attempts = np.zeros(n, dtype=np.int64)
    first_wait = np.full(n, np.nan)
    placed: dict[int, tuple[IntArray, IntArray]] = {}

    events: list[tuple[float, int, int, int]] = []  # (time, seq, kind, job)
    seq = 0
    nxt = 0
    running_gpus = 0
    useful_gpus = 0.0
    pending = 0
    decisions = 0
    decision_s = 0.0
    arr = work.arrival
    window = (float(arr[0]), float(arr[-1])) if n else (0.0, 0.0)
    sample_every = max(1.0, (window[1] - window[0]) / max(1, settings.samples))
    next_sample = window[0]
    times, alloc_t, useful_t, pend_t = array("d"), array("d"), array("d"), array("d")
    frag_t, frag_v = array("d"), array("d")
    island_cap = max((_largest_island(f) for f in fl), default=0)
    blocks = {b: array("d") for b in ISLAND_BLOCKS if b <= island_cap}
    stranded_t = array("d")
    retrying: dict[tuple[int, int], int] = {}
    """(flavor, shape) → jobs waiting on an admission-check retry timer (out of Kueue's queue meanwhile)."""
    busiest = -1
    busiest_time = math.nan
    grid: list[dict[str, Any]] = []
    last_admit = window[0]

    blocked: dict[int, list[int]] = {}
    """Flavor → admitted jobs with pods the scheduler could not bind yet (retried as capacity frees)."""
    room = WaitingRoom(settle_by_fit=settings.yield_back_when_fits, in_turn=settings.yield_in_turn,
                       turn_lead=settings.yield_turn_lead) if deployed is not None and settings.parking is not False else None
    idle_gpu_s, idle_now, idle_at = 0.0, 0, window[0]
    """GPU-seconds reservations held idle (reserved GPUs free on the cluster), integrated over events."""
    parked_gpus = np.zeros(len(fl), dtype=np.int64)
    parked: list[dict[int, float]] = [{} for _ in fl]
    """Flavor → parked jobs in the order they parked, each with the Retry delay its wait gave."""

    def wake(keys: list[Any]) -> None:
        """Parked jobs leave the room and are decided again in the pass that follows, first in their queue: a parked
        Workload keeps its quota while the controller decides it again, so no job its quota kept out takes it meanwhile."""
        for j in keys:
            fi = int(work.flavor[j])
            gpus = shape_gpus[int(shape_of[j])]
            fl[fi].hold(int(shape_of[j]), -gpus)
            parked_gpus[fi] -= gpus
            parked[fi].pop(j, None)
            enqueue(j, holds_quota=True)  # it held its quota: decided again before any job its quota kept out takes it

    def yield_quota(fi: int, now: float) -> bool:
        """Parked jobs give their quota back as the controller's ``QuotaYield.choose`` does, after
        Kueue's pass has refused the queued jobs blocked on quota. Each such job, in Kueue's order
        (the waiters; not one that gave its quota back and waits for it again with its need on file
        (``WaitingRoom.is_aside``), nor one given its
        GPUs' worth already while it waits), whose GPUs the flavor has free, is given parked
        quota, newest parked first (a job holding a reservation never; each at most once per
        decision, ``WaitingRoom.may_give``), until what they give covers what it asks for; if that,
        with the quota free, would not let it in, nobody gives anything to it. A waiter served
        takes its quota from what is left for the next. A job that gives its quota back is deactivated (Kueue evicts it and releases
        its quota) until no queued job is ahead of the place the give left it at
        (``due_back``). True when some job gave its quota back."""
        nonlocal seq
        assert room is not None
        settle()
        f = fl[fi]
        order: list[tuple[_Entry, int, Iterator[_Entry]]] = []
        for sid, q in f.queues.items():
            if shape_gpus[sid] > f.free(sid) and f.dead.get(sid) != f.version:
                it = _in_order(q)
                order.append((next(it), sid, it))
        if not order:
            return False
        heapq.heapify(order)
        gpus_free = int(f.snapshot.free[:, 0].sum())
        ends = deployed.outlook.reservations.soonest_free() if deployed is not None else None
        gave = False  # the waiters served in this pass take their quota first (Kueue admits them in its order): ``_Flavor.claim``
        while order:
            (_, j), sid, it = order[0]
            want = shape_gpus[sid]
            if not room.may_take(j, now, ends) or served.get(j, 0) >= want:
                _advance(order, it)
                continue
            if want > gpus_free:
                heapq.heappop(order)  # the flavor lacks the GPUs for it, and for every later job of its shape
                continue
            given = served.get(j, 0)
            picked: list[int] = []
            gain = 0
            gift = f.gift(sid)  # with a cohort: what each giver adds to the quota the waiter's ClusterQueue could use
            for p in reversed(list(parked[fi])):  # newest parked first, until what they give covers what it asks for
                if given + gain >= want:
                    break
                if deployed is not None and deployed.reserving(p):
                    continue  # first in line on its reserved domain: its quota is what starts it there
                if owing and p in gangs_pending[fi] and arr[p] <= now - owed_after:
                    continue  # a gang owed its turn keeps its quota: given away, it would be owed again and hold what it gave to
                if not room.may_give(p, now, ends):
                    continue  # it gave its quota back since its last decision: at most once per decision
                rise = shape_gpus[int(shape_of[p])] if gift is None else gift.add(f.cq_of[int(shape_of[p])], shape_gpus[int(shape_of[p])])
                if rise > 0:  # 0: its quota stays in its ClusterQueue (lendingLimit), or is past the waiter's borrowingLimit
                    picked.append(p)
                    gain += rise
            if gift is not None:
                gift.undo()
            if not picked:
                heapq.heappop(order)  # nothing left to give it, nor a later job of its shape
                continue
            if given + gain + f.free(sid) < want:
                heapq.heappop(order)  # all they could give, with the quota free, would not let it in: it would only wait in their place
                continue
            for p in picked:
                give_back(p, j, fi, now)
            gave = True
            served[j] = given + gain
            f.claim(sid, want)
            _advance(order, it)
        f.unclaim()
        return gave

    def give_back(p: int, j: int, fi: int, now: float) -> None:
        """Parked ``p`` is deactivated for waiter ``j``: Kueue evicts it (reason ``Deactivated``) and releases its quota."""
        nonlocal seq
        assert room is not None
        f = fl[fi]
        retry_after = parked[fi].pop(p)
        retry_of[p] = retry_after
        room.set_aside(p)  # its need stays on file: unchanged when it holds quota again, it parks without a decision
        gpus = shape_gpus[int(shape_of[p])]
        f.hold(int(shape_of[p]), -gpus)
        parked_gpus[fi] -= gpus
        sid = int(shape_of[p])
        retrying[(fi, sid)] = retrying.get((fi, sid), 0) + 1
        gave_at[fi][p] = (-int(prio[p]), now)  # its place in Kueue's order had the give been an eviction
        need = room.need(p)
        if need is not None:
            lent_need[p] = need
        yielded[0] += 1
        if math.isfinite(settings.quota_yield_max_seconds):
            heapq.heappush(events, (now + settings.quota_yield_max_seconds, seq, _YIELD_END, p))
            seq += 1

    def settle() -> None:
        """Givers an event reached take quota again only if their placement fits now
        (``settle_givers``, the controller's rule); the others stay aside."""
        if room is not None and deployed is not None:
            settle_givers(room, deployed.decider.room_now)

    def left_queue(j: int, fi: int) -> None:
        """Job ``j`` left Kueue's queue (it holds quota, or is gone): what it was given ends."""
        served.pop(j, None)

    def due_back(fi: int, now: float) -> list[int]:
        """The controller's ``QuotaYield.due``: the deactivated jobs of flavor ``fi`` no queued job
        is ahead of (priority, then order time) at the place their give left them at, or whose
        give is ``quota_yield_max_seconds`` old (those leave the room: what they wait for is
        decided afresh when they hold quota again); they leave ``gave_at``."""
        out = gave_at[fi]
        if not out:
            return []
        first = min((q[0][0] for sid, q in fl[fi].queues.items() if q and fl[fi].could_admit(sid, shape_gpus[sid])), default=None)
        due: list[int] = []
        timed_out: list[int] = []
        for p, at in out.items():
            if first is None or first > at:  # one queued at the give's instant came first
                due.append(p)
            elif now >= at[1] + settings.quota_yield_max_seconds:
                timed_out.append(p)
        yield_figs[0] += len(timed_out)
        lent = lent_back(fi, [p for p in out if p not in due and p not in timed_out]) if lend_parked != "off" else []
        yield_figs[2] += len(lent)
        for p in lent:
            assert deployed is not None
            deployed.lent(p)
        for p in timed_out + lent:  # back ahead of a job queued before the give: decided afresh on its next quota, so it may give it again
            assert room is not None
            room.leave(p)
        due += timed_out + lent
        for p in due:
            lent_need.pop(p, None)
        for p in due:
            yield_figs[1] = max(yield_figs[1], now - out.pop(p)[1])
        return due

    def lent_back(fi: int, held: list[int]) -> list[int]:
        """``queueing.lendParked``: of the deactivated jobs ``held`` out by a job queued before their
        give, those whose placement (the request their parking decision searched) fits now
        (``fits_now``, on the snapshot a decision reads); under ``starts`` only while the quota
        free covers them too, each taking its share in turn."""
        if not held:
            return []
        assert deployed is not None
        snap = deployed.decider.room_now(deployed.flavor_names[fi])
        if snap is None:
            return []
        f = fl[fi]
        out = []
        for p in held:
            need = lent_need.get(p)
            if need is None or not fits_now(snap, need):
                continue
            if lend_parked == "starts":
                want = shape_gpus[int(shape_of[p])]
                if want > f.free(int(shape_of[p])):
                    continue
                f.claim(int(shape_of[p]), want)
            out.append(p)
        f.unclaim()
        return out

    def reactivate(p: int) -> None:
        """Deactivated ``p`` is active again: Kueue queues it at its creation time (an eviction by
        deactivation leaves ``Ordering.GetQueueOrderTimestamp`` at ``CreationTimestamp``)."""
        fi = int(work.flavor[p])
        retrying[(fi, int(shape_of[p]))] -= 1
        enqueue(p)

    def reoffer(fi: int) -> list[Any]:
        """Freed room a job it woke was decided on, for the next parked jobs (``WaitingRoom.reoffer``), what admitted
        jobs still owe counted as used, as the controller asks it."""
        if room is None or deployed is None or deployed.flavor_names[fi] not in room.owed():
            return []
        snap = deployed.decider.room_now(deployed.flavor_names[fi])
        return room.reoffer(snap) if snap is not None else room.wake_flavor(deployed.flavor_names[fi])

    def pass_and_reactivate(fi: int, now: float) -> bool:
        """Kueue's pass over flavor ``fi``; then, at the same instant, as long as something
        changed: the waiters given quota are tried again, and the deactivated jobs no queued job
        is ahead of any more are reactivated and tried again (the controller's and Kueue's next
        turns). Room freed on the flavor that a woken job parked again without taking is offered to the next parked
        jobs (``WaitingRoom.reoffer``) in the same way, at the same instant."""
        admitted = run_pass(fi, now)
        back = due_back(fi, now)
        again = reoffer(fi)
        while tried_again[fi] or back or again:
            tried_again[fi] = False
            for p in back:
                reactivate(p)
            wake(again)
            admitted = run_pass(fi, now) or admitted
            back = due_back(fi, now)
            again = reoffer(fi)
        return admitted

    checks = [0, 0]  # invariant checks, and those run from scratch
    yielded = [0]  # parked jobs that gave their quota back to a job blocked on quota
    yield_figs = [0, 0.0, 0]  # of those, reactivated by the time bound; the longest a yield lasted (s); ended by a lend
    lend_parked = deployed.lend_parked if deployed is not None else "off"
    lent_need: dict[int, Need] = {}
    """A deactivated job → the need it parked on (its placement request: ``lent_back`` asks it again)."""
    reparked = [0]  # of those, parked again on quota without a decision (nothing they wait for changed)
    retry_of: dict[int, float] = {}
    """A job set aside by ``yield_quota``: the Retry delay its wait gave (kept when it parks again)."""
    gave_at: list[dict[int, tuple[int, float]]] = [{} for _ in fl]
    """Flavor → deactivated job → (−priority, time of the give): reactivated once no queued job is ahead of it."""
    served: dict[int, int] = {}
    """A waiter → GPUs of quota given to it while it waits (it takes no more than it asks for)."""
    tried_again: list[bool] = [False for _ in fl]
    """Flavor → quota was given back in its last pass: Kueue tries its queue again at once."""
    park_seq: dict[int, int] = {}
    """A parked job → when it was parked by a decision (its place among the parked, kept when it parks again undecided)."""

    requeue: list[tuple[int, float]] = []
    """Victims evicted during a pass: they rejoin their queues (by eviction time) once it ends."""
    freed: list[tuple[int, IntArray]] = []
    """(flavor, nodes) the victims left: parked Workloads are woken by them once the pass ends (the gang has parked by then)."""

    def evict(victims: list[int], now: float, by_kueue: bool = False) -> None:
        """Kueue evicts a plan's victims (``_preemption``), or with ``by_kueue`` the targets of its
        own preemption for quota (``_kueue_preemption``): their pods leave the nodes, their quota
        is released, they restart from scratch (what they had run is lost) and rejoin the queue,
        a plan's at the eviction (Atoll's Retry evicted them), Kueue's at their creation."""
        nonlocal running_gpus, useful_gpus, pending
        for j in victims:
            fi = int(work.flavor[j])
            f = fl[fi]
            shape = shapes[int(shape_of[j])][1]
            if by_kueue:
                kueue_figs[1] += 1
                if kueue_release(j, fi, shape.gpus):
                    continue
            if deployed is not None:
                nodes, pods = deployed.bound_nodes(j, f.snapshot)
            else:
                nodes, pods = placed[j]
            if nodes.size:
                _release(f.snapshot, nodes, pods, shape.per_pod)
                if capacity_changed is not None:
                    capacity_changed(f.snapshot, nodes)
            ran = placed.pop(j, None) is not None
            drop_events(events, j, (_COMPLETE, _BIND))
            if j in blocked.get(fi, ()):
                blocked[fi].remove(j)
            lost = shape.gpus * (now - float(start[j])) / 3600.0 if ran else 0.0
            if by_kueue:
                kueue_figs[2] += lost
                if deployed is not None:
                    release_admitted(deployed, j)
            else:
                assert deployed is not None and deployed.preemption is not None
                deployed.preemption.evict(j, lost)
            f.hold(int(shape_of[j]), -shape.gpus)
            f.version += 1
            if ran:
                running_gpus -= shape.gpus
                useful_gpus -= shape.gpus / float(slow[j])
            start[j] = slow[j] = np.nan
            islands[j] = 0
            relaxed[j] = False
            pending += 1
            requeue.append((j, float(arr[j]) if by_kueue else now))
            if room is not None and nodes.size:
                freed.append((fi, nodes))
            check(fi, now)

    kueue_figs: list[float] = [0, 0, 0.0]
    """Kueue's own preemption: preemptions, Workloads evicted by them, GPU-hours those had run."""
    quota_at = np.full(n, np.nan)
    """When each job last took quota (its ``QuotaReserved`` time: Kueue preempts the most recent first)."""
    on_retry: set[int] = set()
    """Jobs holding quota through a Retry's delay (a timer pending)."""
    lowest = int(prio.min()) if n else 0

    def may_preempt(j: int) -> bool:
        """Could Kueue's own preemption find ``j`` a candidate (``SimSettings.kueue_preemption``)?
        Under ``LowerPriority`` none has a priority below the lowest."""
        policy = settings.kueue_preemption
        if settings.cohort is not None and settings.cohort.reclaim_within_cohort != "Never":
            return True  # it may reclaim quota a ClusterQueue of its cohort borrows
        return policy != "Never" and (policy == "LowerOrNewerEqualPriority" or int(prio[j]) > lowest)

    def holders(fi: int) -> list[Holder]:
        """The jobs holding quota in flavor ``fi``'s ClusterQueue: admitted (bound or not), on a Retry's delay, parked."""
        if deployed is None:
            jobs = [k for k in placed if work.flavor[k] == fi]
        else:
            jobs = [k for k, adm in deployed.admitted.items() if adm.flavor == fi]
            jobs += [k for k in on_retry if work.flavor[k] == fi]
            jobs += list(parked[fi])
        return [held_as.get(k) or holder(k) for k in jobs]

    held_as: dict[int, Holder] = {}
    """Each job's ``Holder`` as of the quota it last took (``quota_at``, the one field that changes): made once per quota
    taken, not once per blocked head looked at."""

    def holder(k: int) -> Holder:
        sid = int(shape_of[k])
        h = held_as[k] = Holder(k, int(prio[k]), float(arr[k]), float(quota_at[k]), shape_gpus[sid], cq_of[sid])
        return h

    def no_candidate(j: int, sid: int, quota: FlavorQuota | None) -> bool:
        """``candidates`` would find none for ``j`` whoever holds quota, told without listing the holders:
        its own ClusterQueue's policy allows none of them, and no other ClusterQueue of the cohort borrows
        (or ``LowerPriority`` reclaims and none has a priority below the lowest)."""
        policy, mine, lower = settings.kueue_preemption, cq_of[sid], int(prio[j]) > lowest
        if policy == "LowerOrNewerEqualPriority" or (policy == "LowerPriority" and lower):
            return False
        cohort = settings.cohort
        if quota is None or cohort is None or cohort.reclaim_within_cohort == "Never" or not (cohort.reclaim_within_cohort == "Any" or lower):
            return True
        return not any(quota.borrowing(c) for c in range(len(quota.names)) if c != mine)

    def kueue_preempt(j: int, fi: int, sid: int, now: float) -> bool:
        """Kueue's own preemption for ``j``, short of quota or, on a Kueue TAS flavor (a
        baseline's), of a placement (``_kueue_preemption``): a minimal set of the holders the
        ClusterQueue's policy lets it preempt is evicted, and True (it fits now); False: no set
        lets it fit. An Atoll flavor is quota alone to Kueue; a baseline's fit is its placement too."""
        f = fl[fi]
        quota, cohort = f.quota, settings.cohort
        if no_candidate(j, sid, quota):
            return False
        ordered = candidates(settings.kueue_preemption, int(prio[j]), float(arr[j]), holders(fi), queue=cq_of[sid],
                             reclaim=cohort.reclaim_within_cohort if cohort is not None else "Never",
                             borrowing=quota.borrowing if quota is not None else None)
        if not ordered:
            return False
        shape = shapes[sid][1]

        def move(h: Holder, op: Callable[[Snapshot, IntArray, IntArray, ResourceVector], None]) -> None:
            nodes, pods = placed[h.job]
            op(f.snapshot, nodes, pods, shapes[int(shape_of[h.job])][1].per_pod)
            if capacity_changed is not None:
                capacity_changed(f.snapshot, nodes)

        def remove(h: Holder) -> None:
            f.hold(int(shape_of[h.job]), -h.gpus)
            if deployed is None:
                move(h, _release)

        def add(h: Holder) -> None:
            f.hold(int(shape_of[h.job]), h.gpus)
            if deployed is None:
                move(h, _reserve)

        def fits() -> bool:
            return f.free(sid) >= shape.gpus and (deployed is not None or policy.attempt(f.snapshot, shape, now=now, wait=WaitState(None, 0)).outcome == "admit")

        if quota is None or cohort is None:
            targets = minimal_targets(ordered, remove, add, fits)
        else:
            c = cq_of[sid]
            targets = classical_targets(ordered, KueuePreemptor(
                c, int(prio[j]), cohort.borrow_within_cohort, quota.borrowing, lambda: quota.used[c] < quota.nominal[c],
                lambda borrow: fits() and (borrow or not quota.borrows(c, shape.gpus))), remove, add)
        if targets is None:
            return False
        kueue_figs[0] += 1
        evict([t.job for t in targets], now, by_kueue=True)
        return True

    def kueue_release(j: int, fi: int, gpus: int) -> bool:
        """Kueue evicts ``j`` holding quota undecided (on a Retry's delay, or parked): its quota
        goes, and it rejoins the queue at its creation. False: ``j`` is admitted (``evict`` goes on)."""
        f = fl[fi]
        if j in on_retry:
            on_retry.discard(j)
            drop_events(events, j, (_RETRY,))
            retrying[(fi, int(shape_of[j]))] -= 1
        elif j in parked[fi]:
            assert room is not None
            room.leave(j)
            parked[fi].pop(j)
            parked_gpus[fi] -= gpus
        else:
            return False
        f.hold(int(shape_of[j]), -gpus)
        if deployed is not None:
            deployed.quota(j, False)  # its quota released: a reservation it holds is suspended
        requeue.append((j, float(arr[j])))
        return True

    def check(fi: int, now: float) -> None:
        """The invariant on one flavor: bound + owed fits every node, and every owed pod has room."""
        if deployed is None:
            return
        checks[0] += 1
        if not deployed.owing(fi):
            return
        snap = fl[fi].snapshot
        if deployed.holds(fi, snap):
            return
        owed = deployed.owed(fi, snap)
        if witness_holds(snap, owed):
            return
        names = {n for o in owed for n in o.domain} | {n for o in owed for n, _ in o.witness if n in snap.node_index}
        alloc, used = node_rows(snap, sorted(names))
        checks[1] += 1
        found = check_invariant(alloc, used, owed)
        if found:
            raise InvariantViolation(policy.name, now, found, checks[0])

    def start_job(j: int, fi: int, shape: JobShape, nodes: IntArray, pods: IntArray, now: float) -> None:
        nonlocal seq, running_gpus, useful_gpus
        f = fl[fi]
        s = float(cost(f.snapshot, nodes, shape, work.jobs[j], pods))
        placed[j] = (nodes, pods)
        start[j] = now
        slow[j] = s
        islands[j] = f.snapshot.count_domains(f.island, nodes)
        heapq.heappush(events, (now + float(work.duration[j]) * s, seq, _COMPLETE, j))
        seq += 1
        running_gpus += shape.gpus
        useful_gpus += shape.gpus / s

    def bind(j: int, fi: int, now: float) -> bool:
        """The scheduler binds what it can of job ``j``'s pods; the job starts once all are bound."""
        assert deployed is not None
        deployed.bind(j, fl[fi].snapshot, now)
        check(fi, now)
        if deployed.admitted[j].unbound:
            return False
        nodes, pods = deployed.bound_nodes(j, fl[fi].snapshot)
        start_job(j, fi, shapes[int(shape_of[j])][1], nodes, pods, now)
        return True

    def declared(j: int) -> int | None:
        """Job ``j``'s declared ``maximumExecutionTimeSeconds`` (``SimSettings.declared_runtime_factor``)."""
        factor = settings.declared_runtime_factor
        return None if factor is None else max(1, math.ceil(float(work.duration[j]) * factor))

    owing = deployed is not None and deployed.behind != "off"
    owed_min = deployed.owed_min_gpus if deployed is not None else 0
    owed_after = deployed.owed_after if deployed is not None else 0.0
    gangs_pending: list[dict[int, None]] = [{} for _ in fl]
    """Flavor → gangs (of ``holdBehindGangsMinGPUs`` or more) that arrived and have not started (nor were rejected), in
    arrival order (``holdBehindGangs``)."""

    def feed_owed(fi: int, now: float) -> None:
        """Tell the queue manager which gangs of flavor ``fi`` are owed their turn now, as the
        controller's cache shows them: waiting ``reserveAfterSeconds`` since arrival, not
        deactivated by a give (the controller reads only active Workloads as waiting for quota),
        and under ``quota`` without quota (queued), under ``start`` not started."""
        if not owing:
            return
        assert deployed is not None
        horizon = now - deployed.owed_after
        out = []
        for g in gangs_pending[fi]:
            if arr[g] > horizon:
                break
            if deployed.behind == "quota" and (g in parked[fi] or g in on_retry):
                continue
            if g in gave_at[fi]:
                continue  # deactivated by a give: the controller sees no Workload waiting for quota in it (inactive)
            sid, quota = int(shape_of[g]), fl[fi].quota
            out.append((g, int(prio[g]), float(arr[g]), int(shape_gpus[sid]), None if quota is None else quota.names[cq_of[sid]]))
        deployed.set_owed(fi, out)

    def quota_line(flavor: str, cluster_queue: str | None) -> list[Waiter]:
        """The jobs waiting for quota on ``flavor`` in ``cluster_queue`` (the one ClusterQueue), or in
        a cohort in the deciding Workload's ClusterQueue and in any other whose quota Kueue could
        let them in with (``FlavorQuota.ceiling``), as the controller counts them
        (``QuotaYield.shares_quota``): ``Outlook.quota_waiters``."""
        f = fl[deployed.flavor_names.index(flavor)] if deployed is not None and flavor in deployed.flavor_names else None
        if f is None:
            return []
        if f.quota is None:
            return quota_waiters(f.queues, flavor, lambda sid: shapes[sid][1], shape_of, declared)
        quota = f.quota
        line = {sid: q for sid, q in f.queues.items()
                if quota.names[f.cq_of[sid]] == cluster_queue or shape_gpus[sid] <= quota.ceiling[f.cq_of[sid]]}
        return quota_waiters(line, flavor, lambda sid: shapes[sid][1], shape_of, declared, queue=lambda j: quota.names[f.cq_of[int(shape_of[j])]])

    if deployed is not None:
        deployed.outlook.quota_waiters = quota_line

    def enqueue(j: int, order: float | None = None, *, holds_quota: bool = False) -> int:
        """Job ``j`` joins its flavor's queue, ordered by priority, then ``order`` (Kueue's order time; None: its arrival).
        ``holds_quota``: it never left Kueue's admitted set (a woken parked Workload), so it comes before every job
        waiting for quota, whatever their priority or ClusterQueue (``HELD``)."""
        f = fl[work.flavor[j]]
        sid = int(shape_of[j])
        key = HELD if holds_quota else (-int(prio[j]), float(arr[j]) if order is None else order)
        heapq.heappush(f.queues.setdefault(sid, []), (key, j))
        return int(work.flavor[j])

    def run_pass(fi: int, now: float) -> bool:
        nonlocal seq, running_gpus, useful_gpus, pending, decisions, decision_s
        f = fl[fi]
        snap = f.snapshot
        heads = f.heads([(*q[0], sid) for sid, q in f.queues.items()
                         if (shape_gpus[sid] <= f.free(sid) or may_preempt(q[0][1])) and f.dead.get(sid) != f.version], shape_gpus)
        admitted = False
        while heads:
            _, j, sid = heads.pop()
            if shape_gpus[sid] > f.free(sid) and not (may_preempt(j) and kueue_preempt(j, fi, sid, now)):
                continue
            shape = shapes[sid][1]
            quota_at[j] = now
            if deployed is not None:
                deployed.quota(j, True)  # QuotaReserved: a reservation it holds blocks again
            held_as.pop(j, None)
            if room is not None and room.is_aside(j):
                settle()  # an event reached it and it fits now: decided afresh
            if room is not None and room.unchanged(j, now) is not None:  # gave its quota back, nothing it waits for changed
                _dequeue(f, sid, heads)
                left_queue(j, fi)
                f.hold(sid, shape.gpus)
                parked_gpus[fi] += shape.gpus
                newest = next(reversed(parked[fi]), None)
                parked[fi][j] = retry_of[j]
                if newest is not None and park_seq[newest] > park_seq[j]:  # it keeps its place among the parked, as in the room
                    parked[fi] = dict(sorted(parked[fi].items(), key=lambda kv: park_seq[kv[0]]))
                reparked[0] += 1
                continue
            fw = first_wait[j]
            wait = WaitState(None if math.isnan(fw) else float(fw), int(attempts[j]))
            t0 = time.perf_counter()
            if deployed is not None:
                deployed.price_spans(functools.partial(_span_cost, cost, shape, work.jobs[j]), snap)
                feed_owed(fi, now)
                att = _deployed_attempt(deployed, j, fi, shape, now, declared(j), int(prio[j]), float(arr[j]), settings.parking,
                                        None if f.quota is None else f.quota.names[f.cq_of[sid]])
            else:
                att = policy.attempt(snap, shape, now=now, wait=wait)
            decision_s += time.perf_counter() - t0
            decisions += 1
            if deployed is not None and deployed.preemption is not None and deployed.preemption.due:
                evict(deployed.preemption.take(), now)  # the plan this decision made, under preemptDomain: on
            if att.outcome == "nofit" and deployed is None and may_preempt(j) and kueue_preempt(j, fi, sid, now):
                att = policy.attempt(snap, shape, now=now, wait=wait)  # Kueue's next cycle: its targets are gone
            if att.outcome == "nofit":
                f.dead[sid] = f.version
                continue
            _dequeue(f, sid, heads)
            left_queue(j, fi)
            if room is not None and not (att.outcome == "wait" and att.parks):
                room.decided(j)  # woken by freed room and not parked: the room it did not take goes to the next
            if att.outcome != "wait":
                gangs_pending[fi].pop(j, None)
            if att.outcome == "admit":
                assert att.nodes is not None and att.pods is not None
                f.hold(sid, shape.gpus)
                relaxed[j] = att.relaxed
                pending -= 1
                admitted = True
                if deployed is not None:  # Ready: the pods are created and wait for the scheduler
                    check(fi, now)
                    heapq.heappush(events, (now + settings.bind_delay_seconds, seq, _BIND, j))
                    seq += 1
                    continue
                _reserve(snap, att.nodes, att.pods, shape.per_pod)
                if capacity_changed is not None:
                    capacity_changed(snap, att.nodes)
                start_job(j, fi, shape, att.nodes, att.pods, now)
            elif att.outcome == "wait":
                retrying[(fi, sid)] = retrying.get((fi, sid), 0) + 1
                if math.isnan(first_wait[j]):
                    first_wait[j] = now
                attempts[j] += 1
                if room is not None and att.parks:  # parked: Pending, its quota kept
                    need = att.needs[0]
                    room.park(j, need)
                    park_seq[j] = seq
                    seq += 1
                    f.hold(sid, shape.gpus)
                    parked_gpus[fi] += shape.gpus
                    parked[fi][j] = att.retry_after
                    if need.deadline is not None:
                        heapq.heappush(events, (max(need.deadline, now + 1.0), seq, _DEADLINE, j))
                        seq += 1
                    continue
                f.hold(sid, shape.gpus)  # Kueue holds its quota through the Retry's delay
                on_retry.add(j)
                heapq.heappush(events, (now + max(att.retry_after, 1.0), seq, _RETRY, j))
                seq += 1
            else:  # reject
                status[j] = STATUS_REJECTED
                pending -= 1
                if deployed is not None:
                    deployed.forget(j)
        if room is not None and parked_gpus[fi] and settings.yield_quota and yield_quota(fi, now):
            tried_again[fi] = True
        feed_owed(fi, now)
        return admitted

    while nxt < n or events:
        now = min(arr[nxt] if nxt < n else math.inf, events[0][0] if events else math.inf)
        touched: set[int] = set()
        idle = nxt >= n or arr[nxt] != now  # stays True if only yield ends that end nothing come now: the run goes on as without them
        while events and events[0][0] == now:
            _, _, kind, j = heapq.heappop(events)
            fi = int(work.flavor[j])
            f = fl[fi]
            idle = idle and kind == _YIELD_END
            if kind == _BIND:
                if not bind(j, fi, now):
                    blocked.setdefault(fi, []).append(j)
                continue
            if kind == _YIELD_END:  # a give this old ends whoever waits: the flavor is tried again (only then, so a give
                at = gave_at[fi].get(j)  # ended sooner, or a later give of the same job, adds no pass)
                if at is not None and now >= at[1] + settings.quota_yield_max_seconds:
                    touched.add(fi)
                    idle = False
                continue
            if kind == _DEADLINE:
                assert room is not None
                due = room.due(now)
                if due:
                    wake(due)
                    touched.update(int(work.flavor[cast(int, k)]) for k in due)  # the room keys jobs by index
                continue
            if kind == _COMPLETE:
                nodes, pods = placed.pop(j)
                shape = shapes[int(shape_of[j])][1]
                _release(f.snapshot, nodes, pods, shape.per_pod)
                if capacity_changed is not None:
                    capacity_changed(f.snapshot, nodes)
                if deployed is not None:
                    deployed.finish(j, now)
                    waiting = blocked.pop(fi, [])
                    still = [b for b in waiting if not bind(b, fi, now)]
                    if still:
                        blocked[fi] = still
                f.hold(int(shape_of[j]), -shape.gpus)
                f.version += 1
                if room is not None and len(room):
                    assert deployed is not None
                    wake(deployed.nodes_freed(room, fi, nodes))
                end[j] = now
                status[j] = STATUS_DONE
                running_gpus -= shape.gpus
                useful_gpus -= shape.gpus / float(slow[j])
            else:
                sid = int(shape_of[j])
                retrying[(fi, sid)] -= 1
                on_retry.discard(j)
                f.hold(sid, -shape_gpus[sid])  # evicted now and queued at once, before the Workloads its quota kept out
                enqueue(j, -math.inf)  # between its tries: a reservation it holds stays in force (``between_tries``)
            touched.add(fi)
        if idle:
            continue
        while nxt < n and arr[nxt] == now:
            if work.flavor[nxt] < 0:
                status[nxt] = STATUS_REJECTED
            else:
                touched.add(enqueue(nxt))
                pending += 1
                if owing and shapes[int(shape_of[nxt])][1].pods > 1 and shape_gpus[int(shape_of[nxt])] >= owed_min:
                    gangs_pending[int(work.flavor[nxt])][nxt] = None
            nxt += 1
            if progress is not None and nxt % 500 == 0:
                progress(nxt, n)
        for fi in sorted(touched):
            if pass_and_reactivate(fi, now):
                last_admit = now
        if owing and room is not None:
            assert deployed is not None
            for fi, gangs in sorted(deployed.take_unheld().items()):  # gangs owed no longer: what waited behind them goes again
                woken = room.wake_behind(gangs)
                if woken:
                    wake(woken)
                    if pass_and_reactivate(fi, now):
                        last_admit = now
        if deployed is not None:
            while True:
                while requeue:  # victims evicted in those passes rejoin their queues, and their flavors are tried again
                    if room is not None and len(room):
                        for fi, nodes in freed:
                            wake(deployed.nodes_freed(room, fi, nodes))
                    freed.clear()
                    again = {enqueue(j, t) for j, t in requeue}
                    requeue.clear()
                    for fi in sorted(again):
                        if pass_and_reactivate(fi, now):
                            last_admit = now
                # reservations suspended at this instant and suspended still once its passes are done (a holder given
                # quota again in them wakes nobody), and reservations ended: the parked jobs the GPUs they held can hold,
                # as the controller wakes them
                woken = deployed.take_suspended(room) + deployed.take_released(room, now)
                if not woken:
                    break
                wake(woken)
                for fi in sorted({int(work.flavor[cast(int, j)]) for j in woken}):  # the room keys jobs by index
                    if pass_and_reactivate(fi, now):
                        last_admit = now
            idle_gpu_s += idle_now * (now - idle_at)
            idle_at = now
            idle_now = sum(deployed.reserved_idle(fi, f.snapshot) for fi, f in enumerate(fl)) if len(deployed.outlook.reservations) else 0
        while requeue:  # a baseline's victims of Kueue's own preemption rejoin their queues, and their flavors are tried again
            again = {enqueue(j, t) for j, t in requeue}
            requeue.clear()
            for fi in sorted(again):
                if pass_and_reactivate(fi, now):
                    last_admit = now
        times.append(now)
        alloc_t.append(running_gpus)
        useful_t.append(useful_gpus)
        pend_t.append(pending)
        if now >= next_sample and now <= window[1]:
            frag_t.append(now)
            frag_v.append(_fragmentation(fl, settings.reference_gang_gpus))
            best, stranded = _island_blocks(fl, shape_gpus, shape_fits, retrying)
            for b, out in blocks.items():
                out.append(1.0 if best >= b else 0.0)
            stranded_t.append(stranded)
            next_sample = now + sample_every
        if settings.record_islands and running_gpus > busiest:
            busiest = running_gpus
            busiest_time = now
            grid = [_island_grid(f) for f in fl]
        if nxt >= n and running_gpus == 0 and now - last_admit > settings.stall_seconds:
            break
    if progress is not None:
        progress(n, n)

    return SimResult(
        policy=policy.name, arrival=arr, start=start, end=end, gpus=work.gpus, status=status, slowdown=slow,
        islands=islands, gang_fits_island=np.array([shape_fits[s] if s >= 0 else False for s in shape_of.tolist()], dtype=bool),
        relaxed=relaxed, attempts=attempts, total_gpus=total_gpus,
        times=np.frombuffer(times), allocated=np.frombuffer(alloc_t), useful=np.frombuffer(useful_t),
        pending=np.frombuffer(pend_t), frag_times=np.frombuffer(frag_t), frag_values=np.frombuffer(frag_v),
        decisions=decisions, decision_seconds=decision_s, wall_seconds=time.perf_counter() - wall0, window=window,
        busiest_time=busiest_time, island_grid=grid, invariant_checks=checks[0], invariant_full_checks=checks[1],
        block_free={b: np.frombuffer(v) for b, v in blocks.items()},
        stranded_gpus=np.frombuffer(stranded_t), reserved_idle_gpu_hours=idle_gpu_s / 3600.0,
        quota_yields=yielded[0], reparked=reparked[0], quota_yields_timed_out=int(yield_figs[0]),
        longest_quota_yield_hours=float(yield_figs[1]) / 3600.0, quota_lends=int(yield_figs[2]),
        kueue_preemption=settings.kueue_preemption, kueue_preemptions=int(kueue_figs[0]), kueue_preempted=int(kueue_figs[1]),
        kueue_preempted_gpu_hours=float(kueue_figs[2]),
        **(deployed.preemption.figures() if deployed is not None and deployed.preemption is not None else {}),
    )


def _deployed_attempt(deployed: DeployedAtoll, j: int, fi: int, shape: JobShape, now: float, limit: int | None = None, priority: int = 0,
                      created: float | None = None, parking: bool | None = None, cluster_queue: str | None = None) -> Attempt:
    """The controller's decision on job ``j``'s Workload (declaring ``limit`` seconds, of ``priority``), as an attempt of the simulator's
    loop; ``parking``: ``SimSettings.parking``, the override of the profile's ``queueing.parkWaiting``; ``cluster_queue``: its
    ClusterQueue in a cohort (None: the one ClusterQueue)."""
    obj = deployed.workload(j, fi, shape.pods, shape.per_pod, shape.kind, shape.slices, max_execution_seconds=limit, priority=priority,
                            created=created, cluster_queue=cluster_queue)
    v = deployed.decide(j, obj, now)
    if v.outcome == "admit":
        planned = np.array([0], dtype=np.int64)
        return Attempt("admit", planned, planned, relaxed=v.relaxed, message=v.message)
    if v.outcome == "wait":
        return Attempt("wait", retry_after=float(v.retry_after), relaxed=v.relaxed, message=v.message, needs=tuple(v.needs),
                       parks=v.waits_parked(parking))
    return Attempt("reject", message=v.message)


def _span_cost(cost: SlowdownFn, shape: JobShape, job: Job, snapshot: Snapshot, nodes: IntArray, pods: IntArray) -> float:
    """The slowdown the simulator would charge ``job`` on a span (what wait-or-span weighs)."""
    return float(cost(snapshot, nodes, shape, job, pods))


def _amounts(pods: IntArray, per_pod: ResourceVector) -> IntArray:
    out: IntArray = pods[:, None] * np.asarray(per_pod.as_tuple(), dtype=np.int64)[None, :]
    return out


def _reserve(snapshot: Snapshot, nodes: IntArray, pods: IntArray, per_pod: ResourceVector) -> None:
    """``Snapshot.reserve`` for every node of a placement at once (same arithmetic, one numpy step)."""
    snapshot.free[nodes] = np.maximum(snapshot.free[nodes] - _amounts(pods, per_pod), 0)


def _release(snapshot: Snapshot, nodes: IntArray, pods: IntArray, per_pod: ResourceVector) -> None:
    """``Snapshot.release`` for every node of a placement at once."""
    snapshot.free[nodes] = np.minimum(snapshot.free[nodes] + _amounts(pods, per_pod), snapshot.alloc[nodes])


def quota_waiters(queues: Mapping[int, list[_Entry]], flavor: str, shape: Callable[[int], JobShape], shape_of: npt.NDArray[np.int64],
                  declared: Callable[[int], int | None], limit: int = MAX_AHEAD,
                  queue: Callable[[int], str] | None = None) -> list[Waiter]:
    """The jobs in Kueue's ``queues`` (shape → heap of entries) of ``flavor``, front of Kueue's order
    first (priority, then order time, then job; at most ``limit``), as waiters for the line a span
    is priced by (``queueing.spanCountsQueue: quota``). A woken parked job (``HELD``) holds its quota: not one of them."""
    out = []
    for (neg, t), j in heapq.nsmallest(limit, (e for q in queues.values() for e in q if e[0] != HELD)):
        s = shape(int(shape_of[j]))
        out.append(Waiter(flavor, s.gpus, s.per_pod.gpu, -int(neg), float(t), f"{NAMESPACE}/{'default' if queue is None else queue(j)}", declared(j)))
    return out


def _in_order(q: list[_Entry]) -> Iterator[_Entry]:
    """The entries of heap ``q`` in order, lazily (a heap over its indices: O(k log k) for the first k)."""
    if not q:
        return
    frontier = [(q[0], 0)]
    while frontier:
        item, i = heapq.heappop(frontier)
        yield item
        for c in (2 * i + 1, 2 * i + 2):
            if c < len(q):
                heapq.heappush(frontier, (q[c], c))


def _advance(order: list[tuple[_Entry, int, Iterator[_Entry]]], it: Iterator[_Entry]) -> None:
    """The head of ``order`` moves on to the next job of its shape's queue (or leaves with the last)."""
    nxt = next(it, None)
    if nxt is None:
        heapq.heappop(order)
    else:
        heapq.heapreplace(order, (nxt, order[0][1], it))


def _dequeue(f: _Flavor, sid: int, heads: QueueHeads | CohortHeads) -> None:
    """Take shape ``sid``'s head job off its queue, and put the queue's next job in ``heads``."""
    q = f.queues[sid]
    heapq.heappop(q)
    if q:
        heads.push((*q[0], sid))
    else:
        del f.queues[sid]


def _fragmentation(fl: Sequence[_Flavor], reference_gpus: int) -> float:
    """Fragmentation index of each flavor at its island level, weighted by free GPUs."""
    total = 0.0
    weight = 0.0
    for f in fl:
        free = f.snapshot.free_gpus()
        if free:
            total += free * fragmentation_index(f.snapshot, f.island, reference_gpus)
            weight += free
    return total / weight if weight else 0.0


def _largest_island(f: _Flavor) -> int:
    """GPUs of the biggest island of the flavor (healthy nodes)."""
    snap = f.snapshot
    alloc = np.where(snap.eligible.astype(bool), snap.alloc[:, 0], 0)
    b = snap.bounds[snap.bptr[f.island]: snap.bptr[f.island + 1]]
    pc = np.concatenate(([0], np.cumsum(alloc)))
    return int((pc[b[1:]] - pc[b[:-1]]).max()) if b.size > 1 else 0


def _island_blocks(fl: Sequence[_Flavor], shape_gpus: Sequence[int], shape_fits: Sequence[bool], retrying: dict[tuple[int, int], int]) -> tuple[int, float]:
    """The largest free block inside one island over all flavors, and the GPUs of waiting gangs
    stranded by fragmentation: their flavor has as many GPUs free, no island does."""
    best = 0
    stranded = 0.0
    for fi, f in enumerate(fl):
        free = island_free_gpus(f.snapshot, f.island)
        top = int(free.max()) if free.size else 0
        total = int(free.sum())
        best = max(best, top)
        if total <= top:
            continue
        for sid, q in f.queues.items():
            g = shape_gpus[sid]
            if shape_fits[sid] and top < g <= total:
                stranded += g * len(q)
        for (rf, sid), count in retrying.items():
            g = shape_gpus[sid]
            if rf == fi and count and shape_fits[sid] and top < g <= total:
                stranded += g * count
    return best, stranded


def _island_grid(f: _Flavor) -> dict[str, Any]:
    """Used and total GPUs per island, islands grouped by their parent domain (heatmap rows)."""
    snap = f.snapshot
    free = island_free_gpus(snap, f.island)
    alloc = np.where(snap.eligible.astype(bool), snap.alloc[:, 0], 0)
    pc = np.concatenate(([0], np.cumsum(alloc)))
    b = snap.bounds[snap.bptr[f.island]: snap.bptr[f.island + 1]]
    total = pc[b[1:]] - pc[b[:-1]]
    parents = [p[:-1] for p in snap.domain_values[f.island]]
    return {"flavor": snap.flavor, "level": f.island_label, "parents": parents, "used": (total - free).tolist(), "total": total.tolist()}

"""What one chaos run is asked to do (``RunConfig``), what its audit found (``RunResult``), and
the lease terms its replicas elect with."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from admission.kube import LeaderSettings

__all__ = ["LEASE", "SETTLE_LEASE", "SETTLE_MAX_S", "SETTLE_QUIET_S", "SHAPES", "RunConfig", "RunResult"]


NESTED = ((1, 4), (2, 4), (3, 4), (1, 2), (3, 2), (4, 2), (2, 1), (6, 1))
"""(pods, GPUs per pod) of the Workloads, on 4-GPU nodes: single-node ones get a hostname
selector, multi-node ones a clique selector, so domains nest (a node inside another Workload's
clique) and the scheduler may bind the wide Workload's pods on the narrow one's only node."""
FLAT = ((2, 4), (3, 4), (5, 2), (6, 1))
"""Shapes that never fit on one 4-GPU node, all under the strict profile: every selector is a
whole clique, domains never nest."""
SHAPES = {"nested": NESTED, "flat": FLAT}


@dataclass(frozen=True)
class RunConfig:
    seed: int = 1
    fault_rate: float = 0.2
    seconds: float = 3.0
    """Chaos phase length; the settle phase and the audit come after."""
    blocks: int = 1
    cliques: int = 2
    per_clique: int = 3
    node_gpus: int = 4
    workloads: int = 8
    shapes: str = "nested"
    """``nested`` or ``flat`` (``SHAPES``)."""
    quota_factor: float = 1.5
    """ClusterQueue quota as a multiple of the fabric's GPUs: Kueue reserves more than fits."""
    kill_rate: float = 0.03
    """Chance per harness tick (~50 ms) that the controller is killed at whatever it is doing."""
    crash_rate: float = 0.1
    """Chance per decision write of a kill just before or just after it."""
    bind_rate: float = 0.4
    finish_rate: float = 0.05
    preempt_rate: float = 0.01
    fail_rate: float = 0.05
    """Chance per harness tick that a running pod of an admitted Workload fails and its job
    controller creates a replacement (``actors``): its slot is owed again until the replacement binds."""
    plant_failure: bool = False
    """Besides ``fail_rate``'s dice: the first pod to run fails at once (once per run), so a run
    that binds pods has a failure and a replacement to audit however the dice fall."""
    slow_seconds: tuple[float, float] = (0.05, 0.4)
    """How long the proxy holds a request drawn ``slow`` (s, uniform)."""
    faults: tuple[str, ...] | None = None
    """Only these faults (None: all of them)."""
    settle_seconds: float = 1.0
    settle_faults: bool = False
    """Keep the proxy's faults on while settling: a server still slow once the chaos stops, as a
    loaded machine's is (reads timing out)."""
    process: bool = False
    """Run the controller as an ``atoll run`` process killed with SIGKILL (instead of in-process,
    where ``crash_rate`` also kills it around decision writes)."""
    replicas: bool = False
    """Two in-process replicas electing a leader on a Lease (short terms, ``LEASE``); kills go to
    the leader; each write is fenced by its replica's term."""
    write_workers: int = 0
    """``DecisionSettings.write_workers``: decision writes in flight at once (0: serial)."""
    """How long a clean controller must have had nothing to decide before the audit."""


@dataclass
class RunResult:
    double_booked: int = 0
    unplaceable_owed: int = 0
    lost: int = 0
    duplicate_decisions: int = 0
    ledger_mismatch: int = 0
    admissions: int = 0
    decisions: int = 0
    chaos_seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    kills: Counter[str] = field(default_factory=Counter)
    bound: int = 0
    bound_on_others_plan: int = 0
    preemptions: int = 0
    pods_failed: int = 0
    replacements_bound: int = 0
    dual_leaders: int = 0
    takeovers: int = 0
    writes_received: int = 0
    """Writes of the replicas the apiserver received (the timeline the term audit read)."""
    writes_outside_term: int = 0
    writes_answered_late: int = 0
    """Writes applied inside their sender's term whose answer came after a takeover began."""
    writes_unknown: int = 0
    """Writes of the replicas whose answer did not say whether the server applied them (a 5xx,
    a hang-up, no answer), settled from the server's record (``history``)..."""
    writes_unknown_applied: int = 0
    """... of which the record shows a revision they made (the rest made none) ..."""
    writes_unknown_unsettled: int = 0
    """... and those on objects the record does not cover (judged by time)."""
    record_misses: int = 0
    """Writes answered as applied that the record does not show holding what they set: the
    matching that settles unknown writes failed on a known one (a failure of the audit; unclean)."""
    writes_checked: int = 0
    """Writes answered as applied that the record was checked against."""
    writes_outside_by_time: int = 0
    """What the audit would count outside a term judging unknown writes by time alone (no record)."""
    violations: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.double_booked or self.unplaceable_owed or self.lost or self.duplicate_decisions or self.dual_leaders
                    or self.writes_outside_term or self.record_misses)


LEASE = LeaderSettings(lease_name="atoll-controller", lease_duration_seconds=1.5, renew_deadline_seconds=1.0, retry_period_seconds=0.1,
                      write_margin_seconds=0.2)
"""Short terms, so a killed leader is replaced within a run's chaos phase."""
SETTLE_LEASE = LeaderSettings(lease_name=LEASE.lease_name)
"""The clean replicas' terms while settling: a chaos term leaves a write 0.8 s to end, which a
loaded apiserver (reads timing out) does not answer in, so a clean leader's writes were
refused by its own fence and it stepped down again and again until the settle ran out, and the
Workloads left undecided counted as lost (``test_a_server_still_slow_while_settling_…``: 11 at
seed 41 with the chaos terms and 20 s). A term a loaded server can renew in is what a
clean deployment runs (client-go's defaults, as ``atoll run`` and the chart have them); every
write is still checked against the term it was sent in (``writes_outside_term``)."""
SETTLE_QUIET_S = 30.0
"""The settle phase ends when nothing is left to decide, or after this long without progress
(fewer Workloads left to decide); ``SETTLE_MAX_S`` in all."""
SETTLE_MAX_S = 120.0


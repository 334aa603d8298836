"""The controller's settings: grouped, documented with units and the reason for each default.

Built once (from flags and environment in ``atoll run``, directly in tests) and passed down as
``settings=``; nothing reads a global. Fabric policy (profiles, link model per level) is not
here: it lives in the hot-reloaded profiles ConfigMap.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from admission import vocabulary
from admission.kube import ApiRetrySettings, LeaderSettings

__all__ = [
    "ConfigSettings",
    "CostSettings",
    "DecisionSettings",
    "KueueSettings",
    "ServeSettings",
    "Settings",
    "WatchSettings",
]

CONTROLLER_NAME = vocabulary.CONTROLLER_NAME


class _Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KueueSettings(_Group):
    """Which Kueue objects are Atoll's."""

    controller_name: str = CONTROLLER_NAME
    """``spec.controllerName`` of the AdmissionChecks Atoll serves (fixed by the Kueue contract)."""
    admission_check: str | None = "atoll-topology"
    """Serve only the AdmissionCheck of this name (the one the Helm chart creates); None serves
    every AdmissionCheck whose controllerName is Atoll's."""
    gpu_resource: str = "nvidia.com/gpu"
    """The extended resource counted as GPUs (the NVIDIA device plugin's name by default)."""


class ConfigSettings(_Group):
    """Where the profiles document lives."""

    namespace: str = "atoll-system"
    """Namespace of the profiles ConfigMap and the leader Lease (the release namespace)."""
    configmap: str = "atoll-policies"
    """ConfigMap holding ``profiles.yaml``; watched and hot-reloaded."""


class DecisionSettings(_Group):
    """What Atoll writes per decision, and limits that keep it readable and within the API's."""

    field_manager: str = "atoll"
    """Server-side-apply field manager of every Atoll write (its check entry, its annotations)."""
    message_max_chars: int = Field(default=4096, ge=64, le=32768)
    """Check message length (characters). The CRD allows 32768; `kubectl describe` readers do not."""
    event_message_max_chars: int = Field(default=1024, ge=64, le=4096)
    """Event message length (characters): Events are for humans scrolling a list."""
    planned_nodes_max_chars: int = Field(default=16384, ge=256, le=65536)
    """Budget of the ``atoll.dev/planned-nodes`` annotation (characters); longer lists are
    compressed, and dropped (with a note in the message) if still over. Pods copy it, and
    Kubernetes caps all annotations of an object at 256 KiB."""
    config_error_retry_seconds: int = Field(default=60, gt=0)
    """Retry delay (s) while a Workload cannot be decided because Atoll's configuration is
    incomplete (flavor not mapped, Topology missing): fixing config should not wait long."""
    error_requeue_seconds: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)
    """Delays (s) before re-deciding after a failed write (the last one repeats)."""
    park_waiting: bool | None = None
    """Overrides every profile's ``queueing.parkWaiting``. True: a Workload waiting for a domain
    keeps Atoll's check ``Pending`` (Kueue keeps its quota, no eviction, no requeue) and is
    decided again when capacity frees in a domain that could hold it, a node or the profiles
    change, or its relax deadline passes (``_parking``); False: every wait is a ``Retry`` with
    the profile's backoff; None (the default): each profile as its ``queueing.parkWaiting`` says."""
    quota_yield_max_seconds: float = Field(default=43200.0, gt=0)
    """The longest (s) a parked Workload that gave its quota back stays deactivated (``_yielding``):
    it is reactivated once no Workload queued before the give waits for quota, or this long after
    the give, whichever comes first. A waiter the quota could admit but that never is (it waits for
    a domain, say) would otherwise keep it out for ever. Long enough that it ends no yield in the
    measured runs (``docs/queue.md``); ``atoll yields --end`` ends them all by hand."""
    quota_yield_back_when_fits: bool = False
    """How an event (freed room, a node or profiles change, what admitted Workloads owe) treats a
    Workload that gave its quota back (``WaitingRoom.settle``). False (the default): it drops the
    need, so the Workload takes quota as any waiter and is decided afresh on it. True: it drops
    the need only if the placement it was parked on fits now (``settle_givers``); otherwise the
    need stays on file and the Workload comes back only when it can use what it takes. Fewer
    decisions and quota yields, longer mean JCT on the goal cells (``docs/numbers.md``, "Givers
    come back only when they fit"); the simulator's ``SimSettings.yield_back_when_fits``."""
    quota_yield_in_turn: bool = False
    """How parked Workloads take turns with the quota they give back (``WaitingRoom``'s
    ``in_turn``). True: freed room reaches a Workload that gave its quota back as it
    reaches a parked one, counted after the parked ones (one pod's end drops as many needs as its
    room holds); one parked again undecided may give its quota back again, not once per decision;
    and the oldest one parked for a reservation of its flavor (``reserveAfterSeconds``, the
    flavor's reservations all held) keeps its quota, so it can take the next reservation that
    ends without waiting for all its quota at once again. False (the default): every set-aside
    Workload the room could hold alone is reached, and a Workload gives its quota back at most
    once per decision. Off because, on the goal cells, it costs ``costed-floor`` its DGX H100 wins
    while it wins every GB200 cell and shortens the 64-GPU gangs' and the 8–15 GPU band's wait on the 14-day stream; measured in
    ``docs/queue.md``, "Why the 64-GPU gangs wait on the whole stream"; the simulator's
    ``SimSettings.yield_in_turn``."""
    quota_yield_turn_lead_seconds: float | None = Field(default=None, ge=0)
    """When the first Workload in line for a reservation of its flavor (``reserveAfterSeconds``,
    the flavor's reservations all held) stops giving its quota back (``WaitingRoom``'s
    ``turn_lead``): from this many seconds before the soonest reservation of its flavor is expected
    free, it keeps its quota, and if it gave it back, parked Workloads give theirs to it as to
    any Workload waiting for quota; before that it gives like any parked Workload. None (the
    default): never. Measured in ``docs/queue.md``, "Quota back before the turn"; the simulator's
    ``SimSettings.yield_turn_lead``."""
    write_workers: int = Field(default=0, ge=0, le=32)
    """Decision writes in flight at once (``Controller``'s pipelined writes): the ledger counts a
    decision when it is made and lets it go if its write is refused; 0: each decision is written
    before the next one is made."""
    decide_before_quota: bool = False
    """Decide a Workload queued in a ClusterQueue with one Atoll flavor before Kueue reserves its
    quota (``_before_quota``), so that Kueue admits it in the reservation's own write; the
    placement is held in the ledger for ``before_quota_hold_seconds``."""
    before_quota_hold_seconds: float = Field(default=30.0, gt=0)
    """How long (s) a decision made before quota holds its domain; a Workload still without quota
    then is set back to Pending, its domain freed, and it is not decided early again for as long."""
    before_quota_settle_seconds: float = Field(default=1.0, ge=0)
    """How long (s) a Workload must have waited for quota, as Atoll saw it, before it is decided
    early: Kueue reserves from its own copy of the Workload, and a reservation made from a copy
    older than Atoll's Ready resets the entry to Pending (a wasted write); a Workload that waits
    for quota gives Kueue's copy time to catch up."""
    before_quota_list_own: bool = False
    """With ``decide_before_quota``: a Workload that holds quota before Kueue's Workload
    controller has listed Atoll's check on it is decided at once and Atoll's entry written with
    the decision (Kueue keeps an entry already there: ``syncAdmissionCheckConditions``), instead
    of waiting for Kueue's listing write."""
    before_quota_depth: int = Field(default=2, ge=1, le=64)
    """Workloads per ClusterQueue holding a decision made before quota at once (the first in
    Kueue's order): Kueue reserves for a queue's head first."""



class CostSettings(_Group):
    """What a span costs a Workload (wait-or-span, ``_span_cost``): the simulator's defaults."""

    link_model: Literal["calibrated", "flat-ring"] = "calibrated"
    """How a placement's all-reduce is priced (``topology.LINK_MODELS``; ``atoll simulate --link-model``)."""
    comm_fraction: float = Field(default=0.1, ge=0.0, le=1.0)
    """Share of a multi-GPU Workload's ideal step spent in all-reduce (``--cost-comm-fraction``)."""
    overlap: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of that all-reduce hidden behind compute; 0: none, the upper bound of the penalty (``--cost-overlap``)."""


class WatchSettings(_Group):
    """List-then-watch of each resource."""

    timeout_seconds: int = Field(default=300, gt=0)
    """Server-side timeout (s) of one watch request; a fresh watch every few minutes bounds how
    long a silently broken connection can hide changes."""
    error_backoffs: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0)
    """Waits (s) after a failed list or watch, the last one repeating, so a broken API is not hammered."""



class ServeSettings(_Group):
    """HTTP endpoints."""

    bind_address: str = "0.0.0.0"
    metrics_port: int | None = Field(default=8080, ge=0, le=65535)
    """Prometheus ``/metrics`` (None = not served, 0 = any free port)."""
    health_port: int | None = Field(default=8081, ge=0, le=65535)
    """``/healthz``, ``/readyz`` and ``/leader`` (None = not served, 0 = any free port)."""
    metrics_secure: bool = False
    """``/metrics`` over HTTPS, each scrape's bearer token checked by TokenReview and its access to
    the ``/metrics`` URL by SubjectAccessReview (the chart's default)."""
    stall_seconds: float = Field(default=120.0, gt=0)
    """``/healthz`` fails when the worker loop has not turned for this long (s)."""


class Settings(_Group):
    kueue: KueueSettings = KueueSettings()
    config: ConfigSettings = ConfigSettings()
    decisions: DecisionSettings = DecisionSettings()
    api: ApiRetrySettings = ApiRetrySettings()
    watch: WatchSettings = WatchSettings()
    leader: LeaderSettings = LeaderSettings()
    serve: ServeSettings = ServeSettings()
    cost: CostSettings = CostSettings()

    @property
    def worker_turn_worst_case_seconds(self) -> float:
        """Longest one turn of the worker can wait on the API: it makes one attempt per call
        (failures are requeued, never slept on), and a turn makes at most three in a row: the
        AdmissionCheck's condition (one Atoll check), a decision's write, and the re-read after
        a 409. Computing the decision is not counted."""
        return 3 * self.api.request_timeout

    @model_validator(mode="after")
    def _turn_within_stall(self) -> Settings:
        worst = self.worker_turn_worst_case_seconds
        if worst >= self.serve.stall_seconds:
            raise ValueError(f"api.request_timeout ({self.api.request_timeout:g} s) lets one worker turn wait {worst:g} s "
                             f"(3 attempts), not below serve.stall_seconds ({self.serve.stall_seconds:g} s), so liveness "
                             f"would kill a busy leader: lower api.request_timeout or raise serve.stall_seconds")
        return self

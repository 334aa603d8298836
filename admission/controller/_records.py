"""One JSON decision record per decision, for auditors (``atoll audit`` reads them back).

A record says what was asked (workload, queues, flavor, profile, class), what was decided
(outcome, message, placement per PodSet with its domain path), why not elsewhere (the top
rejected domains with their numbers, and who holds them), and how (latency, snapshot generation,
decision id, the inputs' resourceVersions). Every record is ``schema: atoll.dev/decision/v1``;
``decision-v1.schema.json`` beside this module is its contract (fields are only added within a
version; ``docs/records.md``). Records go through structlog as one JSON object per line with ``"event": "decision"``; the
logger is injected, so nothing here configures logging globally. The default logger is not the
global one: auditors need every decision, so the ``--log-level`` filter must not drop records.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, TextIO

import structlog

from admission import vocabulary
from topology import SlicePlacement

__all__ = ["DECISION_EVENT", "DECISION_SCHEMA", "DecisionRecord", "PodSetRecord", "Recorder", "WhyNotRecord", "iso_time", "parse_time", "rfc3339",
           "slice_records", "truncate"]

DECISION_EVENT = "decision"
DECISION_SCHEMA = vocabulary.DECISION_SCHEMA
"""Every record's ``schema``; the JSON Schema is ``decision-v1.schema.json`` beside this module."""


def rfc3339(epoch: float) -> str:
    """Whole-second RFC 3339 UTC, as Kubernetes' ``metav1.Time`` fields take it."""
    return dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 time; None when unreadable."""
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def truncate(text: str, limit: int) -> str:
    """At most ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def iso_time(epoch: float) -> str:
    """RFC 3339 UTC with milliseconds."""
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class PodSetRecord:
    podset: str
    pods: int
    gpus_per_pod: int
    nodes: Mapping[str, int]
    """Planned node → pods."""
    domain_level: str
    domain_path: Sequence[str]
    islands: int
    island_level: str
    min_perf: float
    max_perf: float
    bottleneck_gbps: float
    node_selector: Mapping[str, str] = field(default_factory=dict)
    slices: Sequence[Mapping[str, Any]] = ()
    """Per slice (``slice_records``): index, level, domain, pods, nodes, and whether the written
    enforcement holds it in its domain; with the ledger's view of the slice's domain (``ledger``)."""
    ledger: Mapping[str, Any] | None = None
    """The ledger's view of the chosen domain at decision time (``DomainLedger.view``): pods that
    admitted Workloads still owe there, the GPUs they reserve, GPUs bound pods hold, and by whom."""


def slice_records(slices: Sequence[SlicePlacement], selector: Mapping[str, str], level_labels: Sequence[str], *,
                  exact: bool) -> list[dict[str, Any]]:
    """The slices of one placed PodSet as the record and ``atoll place`` show them. ``held``: the
    enforcement keeps the slice in its domain: ``exact`` pins each pod to its planned node, a
    nodeSelector at or below the slice level confines the PodSet to that one domain; otherwise
    (``domain`` enforcement, slices in several domains) the kube-scheduler may break a slice."""
    if not slices:
        return []
    depth = max((level_labels.index(k) for k in selector if k in level_labels), default=-1)
    written = "nodeSelector " + ",".join(f"{k}={v}" for k, v in selector.items()) if selector else "no nodeSelector"
    out = []
    for sl in slices:
        held = exact or (sl.level in level_labels and depth >= level_labels.index(sl.level))
        if exact:
            by = "planned nodes (exact)"
        else:
            by = written if held else f"{written} spans several slices' domains (the planned nodes are a preference)"
        out.append({**sl.as_dict(), "held": held, "held_by": by})
    return out


@dataclass(frozen=True, slots=True)
class WhyNotRecord:
    podset: str
    level: str
    domain_path: Sequence[str]
    capacity_pods: int
    need_pods: int
    reason: str
    ledger: Mapping[str, Any] | None = None
    """The ledger's view of this losing domain (``DomainLedger.view``); its ``workloads`` are the
    Workloads that hold it (owed pods or bound GPUs)."""


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    decision_id: str
    time: str
    workload: str
    namespace: str
    uid: str
    local_queue: str
    cluster_queue: str
    flavor: str
    profile: str
    workload_class: str
    outcome: str
    """admit | wait | reject"""
    check_state: str
    """The check state written: Ready | Retry | Rejected."""
    message: str
    placement: Sequence[PodSetRecord] = ()
    why_not: Sequence[WhyNotRecord] = ()
    retry_after_seconds: int = 0
    attempts: int = 0
    relaxed: bool = False
    latency_ms: float = 0.0
    snapshot_generation: int = 0
    reserved_gpus: int = 0
    """GPUs of earlier admitted, not yet running placements counted as used (the ledger)."""
    links: Sequence[Mapping[str, Any]] = ()
    """Each graph edge as placed (``LinkPlacement.as_dict``): its ends, bottleneck level, per-GPU
    bandwidth and latency there, and what it asked for."""
    notes: Sequence[str] = ()
    """What the decision says beside its outcome, whatever it is: Kueue annotations read but not
    honoured, slices the enforcement does not hold, podSetUpdates left out."""
    controller: str = ""
    """The replica that decided and wrote (its leader-election identity)."""
    lease_term: int | None = None
    """Its lease term (the Lease's ``leaseTransitions`` of its tenure; None without leader election):
    an auditor sees that no two replicas wrote in one term."""
    reason: str = ""
    """Why it waits (no-domain, relax-pending, owed-pods, behind-gang, config, node-lost); empty otherwise."""
    first_waited_at: str | None = None
    """When the current wait began (RFC 3339); None when it never waited."""
    waited_seconds: float = 0.0
    """Time waited so far at this decision: for an admit, the whole wait."""
    inputs: Mapping[str, Any] = field(default_factory=lambda: {"workload": None, "profiles": None, "resource_flavors": {}, "topologies": {}})
    """The resourceVersions the decision read: ``workload``, ``profiles`` (the ConfigMap), and per
    flavor its ``resource_flavors`` and ``topologies`` objects (None and empty: not read from a cluster)."""
    wait_or_span: Sequence[Mapping[str, Any]] = ()
    """Per flavor where waiting for one domain was weighed against a span (``kind: span``) or
    against GPUs under the class's speed floor (``kind: floor``): the expected wait, its error and
    basis, the other side's slowdown and price, and the choice (``WaitOrSpan.as_record``)."""
    schema: str = DECISION_SCHEMA

    def as_dict(self) -> dict[str, Any]:
        return _plain(self)  # type: ignore[no-any-return]


class Recorder:
    """Writes decision records as JSON lines (stdout by default)."""

    def __init__(self, stream: TextIO | None = None, logger: Any = None, context: Mapping[str, Any] | None = None) -> None:
        self.context = dict(context or {})
        """Fields added to every record (an offline run names itself: ``run``)."""
        self.logger = logger or structlog.wrap_logger(
            structlog.PrintLogger(stream or sys.stdout),
            processors=[structlog.processors.JSONRenderer(sort_keys=False, ensure_ascii=False)],
            wrapper_class=structlog.BoundLogger,  # unfiltered: the configured wrapper drops info below the log level
        )

    def record(self, rec: DecisionRecord) -> None:
        self.logger.info(DECISION_EVENT, **rec.as_dict(), **self.context)


def _plain(value: Any) -> Any:
    """``dataclasses.asdict`` without its deep copy of every leaf: a record is rendered once, at
    once, and its strings and numbers are immutable (tuples become lists, as JSON has them)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value

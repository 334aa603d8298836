"""The admission-check controller: what Atoll runs in the cluster.

Rooms: ``_loop`` (watches → work queue → reconcile), ``_decide`` (the pure decision: cache
state + Workload → Verdict and podSetUpdates), ``_status`` (the one server-side apply per
decision, Events, the AdmissionCheck condition), ``_wait`` (the wait state behind backoff and
relax), ``_requeue`` (the webhook's request to requeue a Workload whose pod lost its node),
``_ledger`` (what admitted Workloads still owe), ``_invariant`` (the no-double-booking check),
``_cache`` (cluster objects and per-flavor snapshots), ``_workloads`` (reading Kueue Workloads,
Jobs and JobSets), ``_explain``,
``_records`` (decision records), ``_events``, ``_metrics``, ``_settings``.

Exports are loaded on first use, so ``atoll place`` reads a Workload through ``_workloads``
without importing the loop, metrics and logging it does not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from admission.controller._cache import BoundPod, ClusterCache, FlavorProblem, node_info, pod_usage
    from admission.controller._decide import Decider, Verdict
    from admission.controller._domains import build_record
    from admission.controller._events import EventPoster
    from admission.controller._invariant import OwedPods, Violation, check_invariant
    from admission.controller._ledger import (
        ANN_DECISION_ID,
        ANN_ENFORCEMENT,
        ANN_PLANNED_NODES,
        Ledger,
        Reservation,
        Shortfall,
        decode_planned,
        encode_planned,
        holds_reservation,
    )
    from admission.controller._loop import Controller
    from admission.controller._metrics import HttpEndpoints, Metrics
    from admission.controller._metrics_auth import MetricsAuthorizer
    from admission.controller._preempting import Preemptor, describe
    from admission.controller._quota import CohortQuota
    from admission.controller._records import DECISION_EVENT, DecisionRecord, PodSetRecord, Recorder, WhyNotRecord, iso_time, rfc3339
    from admission.controller._requeue import REQUEUE_CONDITION, RequeueRequest, requeue_request
    from admission.controller._schema import record_problems
    from admission.controller._settings import ConfigSettings, CostSettings, DecisionSettings, KueueSettings, ServeSettings, Settings, WatchSettings
    from admission.controller._spread import read_spread
    from admission.controller._wait import WAITING_CONDITION, read_wait_state, waiting_condition
    from admission.controller._workloads import (
        WorkloadError,
        WorkloadView,
        as_workload,
        check_entry,
        condition_true,
        load_workload_file,
        parse_object,
        parse_workload,
    )
    from admission.controller._yielding import yield_patch

_WHERE = {
    "ANN_ENFORCEMENT": "_ledger",
    "BoundPod": "_cache",
    "OwedPods": "_invariant",
    "as_workload": "_workloads",
    "build_record": "_domains",
    "rfc3339": "_records",
    "waiting_condition": "_wait",
    "ANN_DECISION_ID": "_ledger",
    "ANN_PLANNED_NODES": "_ledger",
    "ClusterCache": "_cache",
    "CohortQuota": "_quota",
    "ConfigSettings": "_settings",
    "CostSettings": "_settings",
    "Controller": "_loop",
    "DECISION_EVENT": "_records",
    "Decider": "_decide",
    "DecisionRecord": "_records",
    "DecisionSettings": "_settings",
    "EventPoster": "_events",
    "FlavorProblem": "_cache",
    "HttpEndpoints": "_metrics",
    "KueueSettings": "_settings",
    "Ledger": "_ledger",
    "Metrics": "_metrics",
    "MetricsAuthorizer": "_metrics_auth",
    "PodSetRecord": "_records",
    "Preemptor": "_preempting",
    "describe": "_preempting",
    "REQUEUE_CONDITION": "_requeue",
    "Recorder": "_records",
    "RequeueRequest": "_requeue",
    "Reservation": "_ledger",
    "ServeSettings": "_settings",
    "Settings": "_settings",
    "Shortfall": "_ledger",
    "Verdict": "_decide",
    "Violation": "_invariant",
    "WAITING_CONDITION": "_wait",
    "WatchSettings": "_settings",
    "WhyNotRecord": "_records",
    "WorkloadError": "_workloads",
    "WorkloadView": "_workloads",
    "read_spread": "_spread",
    "check_entry": "_workloads",
    "check_invariant": "_invariant",
    "condition_true": "_workloads",
    "decode_planned": "_ledger",
    "encode_planned": "_ledger",
    "holds_reservation": "_ledger",
    "iso_time": "_records",
    "load_workload_file": "_workloads",
    "node_info": "_cache",
    "parse_object": "_workloads",
    "parse_workload": "_workloads",
    "pod_usage": "_cache",
    "read_wait_state": "_wait",
    "record_problems": "_schema",
    "requeue_request": "_requeue",
    "yield_patch": "_yielding",
}

__all__ = [
    "ANN_DECISION_ID",
    "ANN_ENFORCEMENT",
    "ANN_PLANNED_NODES",
    "DECISION_EVENT",
    "REQUEUE_CONDITION",
    "WAITING_CONDITION",
    "BoundPod",
    "ClusterCache",
    "CohortQuota",
    "ConfigSettings",
    "Controller",
    "CostSettings",
    "Decider",
    "DecisionRecord",
    "DecisionSettings",
    "EventPoster",
    "FlavorProblem",
    "HttpEndpoints",
    "KueueSettings",
    "Ledger",
    "Metrics",
    "MetricsAuthorizer",
    "OwedPods",
    "PodSetRecord",
    "Preemptor",
    "Recorder",
    "RequeueRequest",
    "Reservation",
    "ServeSettings",
    "Settings",
    "Shortfall",
    "Verdict",
    "Violation",
    "WatchSettings",
    "WhyNotRecord",
    "WorkloadError",
    "WorkloadView",
    "as_workload",
    "build_record",
    "check_entry",
    "check_invariant",
    "condition_true",
    "decode_planned",
    "describe",
    "encode_planned",
    "holds_reservation",
    "iso_time",
    "load_workload_file",
    "node_info",
    "parse_object",
    "parse_workload",
    "pod_usage",
    "read_spread",
    "read_wait_state",
    "record_problems",
    "requeue_request",
    "rfc3339",
    "waiting_condition",
    "yield_patch",
]


def __getattr__(name: str) -> Any:
    """Import the module defining ``name`` when it is first asked for."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

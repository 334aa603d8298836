"""What ``atoll bench kueue``'s times turn into: each arm's row (time to admission, its tail, its
stages), when Atoll began each decision (from ``atoll run``'s decision records), and Kueue's
Workload controller's figures (from its metrics)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["BEFORE_QUOTA_KINDS", "before_quota_counts", "decision_starts", "row", "stages", "workload_controller_figures"]

BEFORE_QUOTA_KINDS = ("decided", "released-expired", "released-room", "retry-mismatch", "retry-released")
"""The kinds of ``atoll run``'s ``atoll_before_quota`` counter (``admission.controller._metrics``)."""


def decision_starts(lines: Sequence[str], admitted: dict[str, float], wall: float) -> dict[str, float]:
    """``namespace/name`` -> when Atoll's controller began the decision that set its check
    ``Ready`` (the record's ``time`` less its ``latency_ms``: the record is written once the
    decision's write landed), on the bench's monotonic clock (``wall``: wall less monotonic
    time); the last such decision before the Workload was seen admitted. Lines that are not
    decision records (or are cut short) are passed over."""
    from admission.controller import DECISION_EVENT

    out: dict[str, float] = {}
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("event") != DECISION_EVENT or rec.get("check_state") != "Ready":
            continue
        try:
            at = dt.datetime.fromisoformat(str(rec.get("time", "")).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        key = f"{rec.get('namespace')}/{rec.get('workload')}"
        start = at - float(rec.get("latency_ms") or 0.0) / 1000.0 - wall
        if start <= admitted.get(key, float("inf")) and start > out.get(key, float("-inf")):
            out[key] = start
    return out


def before_quota_counts(metrics: str) -> dict[str, float]:
    """From ``atoll run``'s Prometheus text: its decisions made before quota, holds released and
    reservations answered with a Retry, by kind (``BEFORE_QUOTA_KINDS``; 0 where none)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = dict.fromkeys(BEFORE_QUOTA_KINDS, 0.0)
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "atoll_before_quota_total" and sample.labels.get("kind") in out:
                out[sample.labels["kind"]] = sample.value
    return out


def workload_controller_figures(metrics: str) -> dict[str, float | None]:
    """From Kueue's Prometheus text: its Workload controller's reconciles at once, and the mean
    ms a Workload waited in that controller's queue and took to reconcile over the run (a check
    turning Ready waits there before Kueue turns the Workload Admitted)."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    workers: float | None = None
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.labels.get("controller", sample.labels.get("name")) != "workload_controller":
                continue
            if sample.name == "controller_runtime_max_concurrent_reconciles":
                workers = sample.value
            elif sample.name in ("workqueue_queue_duration_seconds_sum", "workqueue_queue_duration_seconds_count",
                                 "controller_runtime_reconcile_time_seconds_sum", "controller_runtime_reconcile_time_seconds_count"):
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value

    def mean(base: str) -> float | None:
        n = sums.get(f"{base}_count", 0.0)
        return round(1000.0 * sums.get(f"{base}_sum", 0.0) / n, 1) if n else None

    return {"workers": workers, "queue_wait_ms": mean("workqueue_queue_duration_seconds"),
            "reconcile_ms": mean("controller_runtime_reconcile_time_seconds"),
            "reconciles": sums.get("controller_runtime_reconcile_time_seconds_count")}


def stages(keys: list[str], created: dict[str, float], reserved: dict[str, float], ready: dict[str, float],
            admitted: dict[str, float], decided: dict[str, float] | None = None,
            listed: dict[str, float] | None = None, first_listed: dict[str, float] | None = None) -> dict[str, float | None]:
    """Mean ms of each stage over the Workloads that passed both its ends (``listed``: when the
    reserved Workload was first seen with Atoll's check entry). A Workload whose check was Ready
    before its reservation (Atoll decided it before quota) is counted in ``ready_before_reserved``
    and left out of the stages from the reservation to Ready and from Ready to admission, which
    it did not pass through; ``admitted_on_reservation`` counts the Workloads whose reservation
    and admission came in one watch event (one write); ``first_listed``: when Atoll's check entry
    was first seen at all, counted in ``listed_before_reserved`` when before the reservation
    (the Workloads an early decision could reach) and timed from the create."""
    out: dict[str, float | None] = {}
    decided, listed = decided or {}, listed or {}
    early = {k for k in keys if k in ready and k in reserved and ready[k] < reserved[k]}
    after = [k for k in keys if k not in early]
    for name, a, b, among in (("create_to_reserved", created, reserved, keys), ("reserved_to_ready", reserved, ready, after),
                              ("reserved_to_listed", reserved, listed, after), ("listed_to_decided", listed, decided, after),
                              ("reserved_to_decided", reserved, decided, after), ("decided_to_ready", decided, ready, after),
                              ("ready_to_admitted", ready, admitted, after), ("reserved_to_admitted", reserved, admitted, keys)):
        d = [1000.0 * (b[k] - a[k]) for k in among if k in a and k in b]
        out[f"{name}_ms"] = round(float(np.mean(d)), 1) if d else None
    out["ready_before_reserved"] = len(early)
    out["admitted_on_reservation"] = sum(1 for k in keys if k in reserved and k in admitted and admitted[k] == reserved[k])
    first = first_listed or {}
    out["listed_before_reserved"] = sum(1 for k in keys if k in first and k in reserved and first[k] < reserved[k])
    d = [1000.0 * (first[k] - created[k]) for k in keys if k in first and k in created]
    out["create_to_first_listed_ms"] = round(float(np.mean(d)), 1) if d else None
    return out


def row(arm: str, created: dict[str, float], admitted: dict[str, float], classes: dict[str, str], class_names: Sequence[str] = (),
        reserved: dict[str, float] | None = None, ready: dict[str, float] | None = None,
        decided: dict[str, float] | None = None, listed: dict[str, float] | None = None,
        first_listed: dict[str, float] | None = None) -> dict[str, Any]:
    keys = [k for k in created if k.startswith(f"bench-{arm}/")]
    done = [k for k in keys if k in admitted]
    tta = np.array([admitted[k] - created[k] for k in done]) * 1000.0
    span = (max(admitted[k] for k in done) - min(created[k] for k in keys)) if done else 0.0
    row: dict[str, Any] = {"arm": arm, "workloads": len(keys), "admitted": len(done),
                           "admissions_per_s": round(len(done) / span, 2) if span > 0 else 0.0}
    for q, v in (("mean", tta.mean() if tta.size else None), ("p50", np.percentile(tta, 50) if tta.size else None),
                 ("p90", np.percentile(tta, 90) if tta.size else None), ("p99", np.percentile(tta, 99) if tta.size else None),
                 ("max", tta.max() if tta.size else None)):
        row[f"tta_{q}_ms"] = round(float(v), 1) if v is not None else None
    for name in class_names:
        sel = np.array([admitted[k] - created[k] for k in done if classes[k] == name]) * 1000.0
        row[f"tta_{name}_ms"] = round(float(sel.mean()), 1) if sel.size else None
    row.update(stages(keys, created, reserved or {}, ready or {}, admitted, decided, listed, first_listed))
    return row

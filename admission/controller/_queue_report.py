"""The waiting line as Atoll sees it: each Workload whose Atoll check is not yet Ready, with its
GPUs, profile, time waited, why it waits in plain words per flavor, the domain held for it and
its expected start. ``atoll queue`` prints it; it writes nothing.
"""

from __future__ import annotations

from typing import Any

from admission.controller._cache import ClusterCache, FlavorProblem
from admission.controller._decide import Decider
from admission.controller._records import iso_time, parse_time
from admission.controller._settings import Settings
from admission.controller._wait import read_wait_state
from admission.controller._workloads import WorkloadError, check_entry, condition_true, parse_workload
from admission.kube import WORKLOADS, Obj
from admission.queue import REASONS, QueueHints, largest_block, plain_reason, size_band

__all__ = ["queue_report"]

_WAITING_STATES = ("Pending", "Retry")


def queue_report(cache: ClusterCache, decider: Decider, settings: Settings, hints: QueueHints, *, check_names: frozenset[str], now: float,
                 flavor: str | None = None, queue: str | None = None) -> list[dict[str, Any]]:
    """The Workloads waiting on Atoll's check (``Pending`` or ``Retry``), longest waiting first;
    ``flavor`` keeps those assigned that flavor, ``queue`` those of that LocalQueue (NAME or
    NAMESPACE/NAME) or ClusterQueue."""
    out = []
    for key, obj in sorted(cache.objects[WORKLOADS].items()):
        entry = check_entry(obj, check_names)
        if entry is None or entry.get("state") not in _WAITING_STATES or condition_true(obj, "Finished"):
            continue
        try:
            view = parse_workload(obj, gpu_resource=settings.kueue.gpu_resource)
        except WorkloadError as exc:
            row = _row(key, obj, entry, now, check_names)
            row.update(reason="config", words=[str(exc)])
            out.append(row)
            continue
        if queue and queue not in (view.queue_name, view.local_queue, view.cluster_queue):
            continue
        flavors = sorted(set(view.flavors.values()))
        if flavor and flavor not in flavors:
            continue
        row = _row(key, obj, entry, now, check_names)
        row.update(local_queue=view.local_queue, cluster_queue=view.cluster_queue, flavors=flavors,
                   gpus=sum(s.count * s.per_pod.gpu for s in view.podsets))
        row["band"] = size_band(row["gpus"])
        held = hints.held(view.uid)
        start = hints.expected_start(view.uid)
        row["held"] = None if held is None else {"flavor": held.flavor, "level": held.level, "domain": held.domain, "kind": held.kind,
                                                 "expected_free_at": iso_time(held.expected_free_at) if held.expected_free_at else None}
        row["expected_start"] = iso_time(start) if start is not None else None
        if condition_true(obj, "Evicted"):
            row.update(reason="evicting", words=[REASONS["evicting"]])
        elif not condition_true(obj, "QuotaReserved"):
            row.update(reason="quota", words=[REASONS["quota"]])
        elif cache.profiles is None:
            row.update(reason="config", words=["no valid profiles document is in force"])
        else:
            _explain_wait(row, cache, decider, obj, now, held, start)
        out.append(row)
    out.sort(key=lambda r: (-r["waited_seconds"], r["workload"]))
    return out


def _row(key: str, obj: Obj, entry: dict[str, Any], now: float, check_names: frozenset[str]) -> dict[str, Any]:
    wait = read_wait_state(obj, check_names)
    created = parse_time(str((obj.get("metadata") or {}).get("creationTimestamp") or ""))
    since = wait.first_waited_at if wait.first_waited_at is not None else created
    return {"workload": key, "state": entry.get("state"), "profile": None, "gpus": 0, "band": "0", "flavors": [], "local_queue": None,
            "cluster_queue": None, "waited_seconds": round(max(0.0, now - since), 1) if since is not None else 0.0,
            "reason": "", "words": [], "why_not": [], "held": None, "expected_start": None}


def _explain_wait(row: dict[str, Any], cache: ClusterCache, decider: Decider, obj: Obj, now: float, held: Any, start: float | None) -> None:
    """What the decision made now says, in plain words per flavor it waits on."""
    v = decider.evaluate(obj, "dry-run", now)
    row["profile"] = v.profile or None
    row["why_not"] = [f"not {'/'.join(w.domain_path)} ({w.level.rsplit('/', 1)[-1]}): {w.reason}" for w in v.why_not]
    if v.outcome == "admit":
        row.update(reason="placeable", words=[REASONS["placeable"]])
        return
    if v.outcome == "reject":
        row.update(reason="rejected", words=[v.message])
        return
    row["reason"] = v.reason
    words = []
    for need in v.needs:
        try:
            shared = cache.snapshot(need.flavor)
        except (FlavorProblem, ValueError) as exc:
            words.append(f"flavor {need.flavor}: {exc}")
            continue
        snap = shared.fork()
        decider.ledger.apply(snap, exclude_uid=str((obj.get("metadata") or {}).get("uid")))  # what admitted Workloads still owe is not free
        block = largest_block(snap, need.level, need.gpus_per_pod, cache.draining_mask(snap))
        if block.pods_if_undrained >= need.pods > block.pods:
            row["reason"] = "draining"
        words.append(plain_reason(need, block, held=held, expected_start=start, now=now))
    row["words"] = words or [v.message]

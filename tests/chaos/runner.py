"""Many chaos runs on one apiserver behind one proxy, and the one-line summary ``make chaos`` prints."""

from __future__ import annotations

import json
import resource
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from tests.chaos.config import SETTLE_MAX_S, RunConfig, RunResult
from tests.chaos.harness import run_once
from tests.chaos.proxy import FaultProxy
from tests.envtest import ApiServer

__all__ = ["Summary", "run_many"]


@dataclass
class Summary:
    runs: int = 0
    fault_rate: float = 0.0
    shapes: str = ""
    double_booked: int = 0
    unplaceable_owed: int = 0
    lost: int = 0
    duplicate_decisions: int = 0
    ledger_mismatch: int = 0
    admissions: int = 0
    decisions: int = 0
    chaos_seconds: float = 0.0
    wall_seconds: float = 0.0
    requests: int = 0
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
    writes_outside_term: int = 0
    writes_answered_late: int = 0
    """Writes applied inside their sender's term, answered after a takeover began."""
    writes_unknown: int = 0
    """Writes whose answer did not say whether they were applied (5xx, hang-up, none), settled
    from the server's record; ``writes_unknown_applied`` of them made a revision."""
    writes_unknown_applied: int = 0
    writes_unknown_unsettled: int = 0
    record_misses: int = 0
    """Writes answered as applied that the server's record did not show holding what they set
    (of ``writes_checked``)."""
    writes_checked: int = 0
    writes_outside_by_time: int = 0
    """What the timing rule alone (no record) would have counted outside a term."""
    dropped_slow: int = 0
    """Slow requests the proxy dropped because their client had given up."""
    replicas: bool = False
    failed_runs: list[dict[str, Any]] = field(default_factory=list)

    def add(self, seed: int, r: RunResult) -> None:
        self.runs += 1
        for name in ("double_booked", "unplaceable_owed", "lost", "duplicate_decisions", "ledger_mismatch", "admissions",
                     "decisions", "chaos_seconds", "bound", "bound_on_others_plan", "preemptions", "pods_failed",
                     "replacements_bound", "dual_leaders", "takeovers", "writes_received", "writes_outside_term",
                     "writes_answered_late", "writes_unknown", "writes_unknown_applied", "writes_unknown_unsettled", "record_misses", "writes_checked", "writes_outside_by_time"):
            setattr(self, name, getattr(self, name) + getattr(r, name))
        self.faults.update(r.faults)
        self.kills.update(r.kills)
        if not r.clean or r.ledger_mismatch:
            self.failed_runs.append({"seed": seed, "violations": r.violations[:5], "lost": r.lost,
                                     "duplicate_decisions": r.duplicate_decisions, "writes_outside_term": r.writes_outside_term})

    @property
    def clean(self) -> bool:
        return not (self.double_booked or self.unplaceable_owed or self.lost or self.duplicate_decisions or self.dual_leaders
                    or self.writes_outside_term or self.record_misses)

    def as_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "fault_rate": self.fault_rate, "shapes": self.shapes, "double_booked": self.double_booked,
                "unplaceable_owed": self.unplaceable_owed, "lost": self.lost, "duplicate_decisions": self.duplicate_decisions,
                "ledger_mismatch": self.ledger_mismatch, "admissions": self.admissions, "decisions": self.decisions,
                "admissions_per_s": round(self.admissions / self.chaos_seconds, 2) if self.chaos_seconds else 0.0,
                "requests": self.requests, "faults_injected": sum(self.faults.values()), "faults": dict(self.faults),
                "kills": dict(self.kills), "pods_bound": self.bound, "pods_bound_on_others_plan": self.bound_on_others_plan,
                "preemptions": self.preemptions, "pods_failed": self.pods_failed, "replacements_bound": self.replacements_bound,
                "dual_leaders": self.dual_leaders, "replicas": self.replicas,
                "leader_takeovers": self.takeovers, "writes_received": self.writes_received,
                "writes_outside_term": self.writes_outside_term,
                "writes_answered_late": self.writes_answered_late, "writes_unknown": self.writes_unknown,
                "writes_unknown_applied": self.writes_unknown_applied, "writes_unknown_unsettled": self.writes_unknown_unsettled, "record_misses": self.record_misses,
                "writes_checked": self.writes_checked, "writes_outside_by_time": self.writes_outside_by_time,
                "dropped_slow": self.dropped_slow, "wall_seconds": round(self.wall_seconds, 1),
                "peak_rss_mib": peak_rss_mib(), "failed_runs": self.failed_runs[:10]}

    def line(self) -> str:
        d = self.as_dict()
        return (f"runs={self.runs} shapes={self.shapes} faults={round(self.fault_rate * 100)}% double_booked={self.double_booked} "
                f"unplaceable_owed={self.unplaceable_owed} lost={self.lost} duplicate_decisions={self.duplicate_decisions} "
                + (f"dual_leaders={self.dual_leaders} leader_takeovers={self.takeovers} writes_outside_term={self.writes_outside_term}/"
                   f"{self.writes_received} answered_late={self.writes_answered_late} unknown={self.writes_unknown} "
                   f"(applied {self.writes_unknown_applied}, unsettled {self.writes_unknown_unsettled}) record_misses={self.record_misses}/{self.writes_checked} " if self.replicas else "") +
                f"admissions={self.admissions} admissions/s={d['admissions_per_s']} injected={d['faults_injected']}/{self.requests} "
                f"kills={sum(self.kills.values())} pods_failed={self.pods_failed} replacements_bound={self.replacements_bound} "
                f"peak_rss={d['peak_rss_mib']}MiB")

    def json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)


def peak_rss_mib() -> float:
    """This process's peak resident set (the controllers run in it), MiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_many(server: ApiServer, runs: int, config: RunConfig, *, prefix: str = "chaos", progress: Any = None,
             controller_factory: Any = None) -> Summary:
    """``runs`` runs, seeds ``config.seed`` … ``config.seed + runs - 1``, each in a namespace of its own."""
    api = server.api_client()
    summary = Summary(fault_rate=config.fault_rate, shapes=config.shapes, replicas=config.replicas)
    started = time.monotonic()
    with FaultProxy("127.0.0.1", server.port, server.ca_file, seed=config.seed, rate=config.fault_rate,
                    max_seconds=runs * (config.seconds + SETTLE_MAX_S + 60.0) + 60.0, slow_seconds=config.slow_seconds, faults=config.faults) as proxy:
        for i in range(runs):
            seed = config.seed + i
            kw = {"controller_factory": controller_factory} if controller_factory else {}
            result = run_once(api, server.token, proxy, f"{prefix}-{seed}", replace(config, seed=seed), **kw)
            summary.add(seed, result)
            if progress is not None:
                progress(i + 1, result)
        summary.requests = proxy.requests
        summary.dropped_slow = proxy.dropped
    summary.wall_seconds = time.monotonic() - started
    return summary

"""The queue manager's goal on ``atoll bench quality --goal``: at offered loads 1.0–1.3, a profile
of the profiles document wins on mean JCT against both ``kueue-bestfit`` and ``kueue-required``
(the paired interval clear of zero), drops no work, and costs at most one point of GPU allocation.

Allocation is judged two ways, both printed:

- ``GPU alloc``, the goal as written: time-weighted allocated GPUs ÷ GPUs over the arrival window;
- ``goodput``: the same with each allocated GPU weighted by 1/slowdown, the ideal GPU-hours of work
  done. A policy whose jobs run less stretched needs fewer GPU-hours for the same work, so its
  allocation falls without a GPU more left idle while work waited; goodput does not count that.

The gate (the exit code) is the goal as written, on allocation; the goodput reading is printed
beside it and never changes the exit code. One profile must meet every load of the range run, on
every cluster run (``goal_met``). The goal itself covers loads 1.0, 1.15 and 1.3 on both bundled
clusters (``GOAL_POINTS``); a run that leaves some out is judged on the points it ran, and says
which it left out (``goal_not_run``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from admission.simulator import Comparison, verdict

__all__ = ["GOAL_BASELINES", "GOAL_LOADS", "GOAL_POINTS", "MAX_ALLOCATION_COST", "GoalRow", "format_goal", "goal_json", "goal_judgeable",
           "goal_met", "goal_not_run", "goal_rows", "in_range"]

GOAL_BASELINES = ("kueue-bestfit", "kueue-required")
GOAL_LOADS = (1.0, 1.3)
"""The offered loads the goal covers, both ends included."""
GOAL_POINTS = tuple((c, x) for c in ("gb200-nvl72-superpod", "dgx-h100-superpod") for x in (1.0, 1.15, 1.3))
"""The (cluster, load) points of the issue's goal: both bundled clusters at the tables' loads of the range."""
MAX_ALLOCATION_COST = 0.01
"""One point of allocation: a mean paired drop larger than this misses the goal."""


@dataclass(frozen=True)
class GoalRow:
    """One Atoll profile at one cluster and load, against both Kueue modes."""

    cluster: str
    load: float
    policy: str
    jct: tuple[tuple[float, float, str], ...]
    """Per baseline (``GOAL_BASELINES`` order): Δ mean JCT %, its 95 % half-width, the verdict."""
    dropped: float
    """Jobs rejected or unfinished (mean over seeds)."""
    alloc: tuple[float, ...]
    """Per baseline: Δ GPU allocation in points (policy − baseline, mean over seeds)."""
    goodput: tuple[float, ...]
    """Per baseline: Δ goodput in points."""

    @property
    def wins(self) -> bool:
        return all(v == "win" for _, _, v in self.jct)

    @property
    def met(self) -> bool:
        """The goal as written: wins against both, drops nothing, allocation within one point."""
        return self.wins and self.dropped == 0 and min(self.alloc) >= -100 * MAX_ALLOCATION_COST

    @property
    def met_on_goodput(self) -> bool:
        return self.wins and self.dropped == 0 and min(self.goodput) >= -100 * MAX_ALLOCATION_COST


def in_range(load: float | None) -> bool:
    return load is not None and GOAL_LOADS[0] - 1e-9 <= load <= GOAL_LOADS[1] + 1e-9


def goal_judgeable(policies: Sequence[str], loads: str) -> bool:
    """Whether ``--goal`` has something to judge: both Kueue modes, an Atoll profile, a load in its range."""
    from admission.simulator import parse_loads

    try:
        load_list = parse_loads(loads)
    except ValueError:
        return True  # the sweep reports the bad --loads itself
    return set(GOAL_BASELINES) <= set(policies) and any(p.startswith("atoll-") for p in policies) and any(in_range(x) for x in load_list)


def goal_rows(cluster: str, by_baseline: Mapping[str, Sequence[Comparison]]) -> list[GoalRow]:
    """The rows of every ``atoll-`` policy at every load of the range, from one comparison per
    load against each of ``GOAL_BASELINES`` (the same runs); none when a baseline was not run."""
    if not all(b in by_baseline for b in GOAL_BASELINES):
        return []
    rows: list[GoalRow] = []
    for cmps in zip(*(by_baseline[b] for b in GOAL_BASELINES)):
        load = cmps[0].load
        if not in_range(load):
            continue
        assert load is not None and all(c.load == load for c in cmps)
        for p in cmps[0].policies:
            if not p.startswith("atoll-"):
                continue
            jct = tuple((c.diffs[p]["mean_jct_s"].mean, c.diffs[p]["mean_jct_s"].half, verdict(c.diffs[p]["mean_jct_s"])) for c in cmps)
            f = cmps[0].figures[p]
            dropped = f["jobs_rejected"].mean + f["jobs_unfinished"].mean
            rows.append(GoalRow(cluster, load, p, jct, dropped, tuple(100 * c.diffs[p]["gpu_allocation"].mean for c in cmps),
                                tuple(100 * c.diffs[p]["gpu_goodput"].mean for c in cmps)))
    return rows


def goal_met(rows: Sequence[GoalRow], *, on_goodput: bool = False) -> list[str]:
    """The profiles that meet the goal at every (cluster, load) of ``rows``; empty when none does
    (or nothing in the range was run)."""
    points = {(r.cluster, r.load) for r in rows}
    out = []
    for p in sorted({r.policy for r in rows}):
        mine = [r for r in rows if r.policy == p]
        if {(r.cluster, r.load) for r in mine} == points and all(r.met_on_goodput if on_goodput else r.met for r in mine):
            out.append(p)
    return out


def goal_not_run(rows: Sequence[GoalRow]) -> list[tuple[str, float]]:
    """The goal's points (``GOAL_POINTS``) with no row: a verdict on ``rows`` says nothing of them."""
    ran = {(r.cluster, round(r.load, 6)) for r in rows}
    return [(c, x) for c, x in GOAL_POINTS if (c, round(x, 6)) not in ran]


def _jct(m: float, h: float, v: str) -> str:
    return f"{m:+.1f} ± {h:.1f} % {v.split(' ')[0]}"


def format_goal(rows: Sequence[GoalRow]) -> str:
    """The goal table and its two verdict lines."""
    head = ("cluster", "load", "policy", "Δ JCT vs bestfit", "Δ JCT vs required", "dropped", "Δ alloc pt (bf/req)",
            "Δ goodput pt (bf/req)", "goal", "on goodput")
    body = [(r.cluster, f"{r.load:g}", r.policy, _jct(*r.jct[0]), _jct(*r.jct[1]), f"{r.dropped:g}",
             f"{r.alloc[0]:+.1f} / {r.alloc[1]:+.1f}", f"{r.goodput[0]:+.1f} / {r.goodput[1]:+.1f}",
             "met" if r.met else "missed", "met" if r.met_on_goodput else "missed") for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)] if body else [len(h) for h in head]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in (head, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    written, goodput = goal_met(rows), goal_met(rows, on_goodput=True)
    left = goal_not_run(rows)
    partial = " on the points run" if left and written else ""
    lines.append(f"goal (loads {GOAL_LOADS[0]:g}-{GOAL_LOADS[1]:g}; wins against both Kueue modes, drops nothing, costs at most "
                 f"{100 * MAX_ALLOCATION_COST:g} point of GPU allocation): " + (f"met by {', '.join(written)}{partial}" if written else "MISSED"))
    lines.append("the same with goodput (ideal GPU-hours of work done) for allocation: "
                 + (f"met by {', '.join(goodput)}" if goodput else "missed"))
    if left:
        lines.append("not run, so not judged: " + ", ".join(f"{c} load {x:g}" for c, x in left))
    return "\n".join(lines)


def goal_json(rows: Sequence[GoalRow]) -> dict[str, Any]:
    return {
        "rows": [{"cluster": r.cluster, "load": r.load, "policy": r.policy,
                  "jct_pct": {b: {"mean": round(m, 3), "ci95": round(h, 3), "verdict": v} for b, (m, h, v) in zip(GOAL_BASELINES, r.jct)},
                  "dropped_jobs": r.dropped, "alloc_points": dict(zip(GOAL_BASELINES, (round(x, 3) for x in r.alloc))),
                  "goodput_points": dict(zip(GOAL_BASELINES, (round(x, 3) for x in r.goodput))), "met": r.met,
                  "met_on_goodput": r.met_on_goodput} for r in rows],
        "met_by": goal_met(rows),
        "met_on_goodput_by": goal_met(rows, on_goodput=True),
        "not_run": [{"cluster": c, "load": x} for c, x in goal_not_run(rows)],
    }

"""Do reservations cut the largest size band's wait? One profile run three ways on the same jobs.

The goal (``reservations_goal``): reservations cut the p95 wait of the largest size band by at least 50 % against
the same profile without them, at a GPU-idle cost that is reported. ``reservation_variants``
adds three copies of a profile whose ``queueing`` holds ``reserveAfterSeconds`` to a profiles
document: ``<p>-island`` (``reserveAt: island``), ``<p>-span`` (``reserveAt: span``) and
``<p>-nores`` (``reserveAfterSeconds`` removed, and with it ``holdBehindGangs``: no reservation
and nothing held behind a gang, everything else the same).
``reservation_cell`` reads the runs of one load:

- the band: the largest size band (``SIZE_BANDS`` of ``_metrics``) with a job in the workload;
- per variant, over seeds (mean ± 95 %, t over seeds): that band's p95 and maximum wait, the
  GPU-hours reservations held idle (``reserved_idle_gpu_hours``) and their share of the GPU-hours
  the cluster offers over the arrival window, and mean JCT of the jobs it completed;
- per reserving variant against ``-nores``: the change of the mean p95 (the cut), the paired
  per-seed difference of the p95 with its interval, the per-seed relative change (seeds whose
  ``-nores`` p95 is 0 left out: nothing to cut) and the paired mean-JCT change in %.

A variant meets the goal at a load when the mean p95 falls by at least ``GOAL_CUT`` and the paired
difference's interval lies below zero (``verdict`` ``win``). When ``-nores`` had no wait in the
band on any seed there is nothing to cut: the cell is ``n/a`` and judges nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from admission.simulator._compare import verdict
from admission.simulator._metrics import SIZE_BANDS
from admission.simulator._stats import Estimate, RunRecord, estimate, paired
from policies import ProfilesDocument

__all__ = ["GOAL_CUT", "RESERVE_VARIANTS", "ReservationCell", "format_reservations", "reservation_cell", "reservation_variants",
           "reservations_goal", "reservations_goal_line", "reservations_json"]

RESERVE_VARIANTS = ("island", "span", "nores")
"""The suffixes of ``reservation_variants``' copies, in table order; ``nores`` is the baseline."""
GOAL_CUT = 0.5
"""The goal: the largest band's mean p95 wait falls by at least this share against ``-nores``."""


def reservation_variants(doc: ProfilesDocument, profile: str) -> tuple[ProfilesDocument, str]:
    """``doc`` with ``<profile>-island``, ``-span`` and ``-nores`` added, and the variant the
    profile is as written (``island`` or ``span``). ValueError (one line, naming the field) when
    the profile is missing or reserves nothing."""
    p = doc.profiles.get(profile)
    if p is None:
        raise ValueError(f"--reservations: {profile!r} is not a profile of the document (have {', '.join(sorted(doc.profiles))})")
    if p.queueing.reserve_after_seconds is None:
        raise ValueError(f"--reservations: profiles.{profile}.queueing.reserveAfterSeconds is unset: the profile reserves nothing to compare")
    raw = doc.model_dump(by_alias=True, exclude_unset=True)
    base = raw["profiles"][profile]
    for suffix in RESERVE_VARIANTS:
        name = f"{profile}-{suffix}"
        if name in raw["profiles"]:
            raise ValueError(f"--reservations: the document already has a profile {name!r}; rename it")
        queueing = dict(base["queueing"])
        if suffix == "nores":
            del queueing["reserveAfterSeconds"]
            queueing.pop("holdBehindGangs", None)  # it holds Workloads behind a gang owed a reservation: nothing is owed without one
        else:
            queueing["reserveAt"] = suffix
        raw["profiles"][name] = {**base, "queueing": queueing}
    return ProfilesDocument.model_validate(raw), p.queueing.reserve_at


def _band_name(lo: int, hi: int | None) -> str:
    return f"{lo}-{hi}" if hi is not None else f"{lo}+"


@dataclass(frozen=True)
class ReservationCell:
    """One cluster and load: the three variants of one profile over the same seeds."""

    cluster: str
    load: float | None
    profile: str
    shipped: str
    """The variant the profile is as written (``island`` or ``span``)."""
    band: str
    """The largest size band with a job in the workload (``64+``, ``16-63``, …)."""
    band_jobs: int
    seeds: tuple[int, ...]
    p95: Mapping[str, Estimate]
    max_wait: Mapping[str, Estimate]
    idle_gpu_h: Mapping[str, Estimate]
    idle_share: Mapping[str, Estimate]
    """Idle reserved GPU-hours ÷ the GPU-hours the cluster offers over the arrival window."""
    mean_jct: Mapping[str, Estimate]
    cut: Mapping[str, float]
    """Per reserving variant: mean p95 ÷ ``-nores``'s mean p95 − 1 (NaN when ``-nores`` has none)."""
    p95_diff: Mapping[str, Estimate]
    """Per reserving variant: paired per-seed p95 difference against ``-nores`` (s)."""
    p95_rel: Mapping[str, Estimate]
    """Per reserving variant: paired per-seed relative p95 change (%), seeds with a ``-nores`` wait."""
    jct_rel: Mapping[str, Estimate]
    """Per reserving variant: paired per-seed mean-JCT change against ``-nores`` (%)."""
    p95_by_seed: Mapping[str, tuple[float, ...]]

    @property
    def judged(self) -> bool:
        """False when the variant without reservations had no wait in the band to cut."""
        return any(v > 0 for v in self.p95_by_seed[f"{self.profile}-nores"])

    def met(self, variant: str) -> bool:
        """The goal for ``variant`` (``island`` or ``span``) at this cell; True when not judged."""
        if not self.judged:
            return True
        name = f"{self.profile}-{variant}"
        return self.cut[name] <= -GOAL_CUT and verdict(self.p95_diff[name]) == "win"


def reservation_cell(records: Mapping[tuple[float | None, int, str], RunRecord], *, cluster: str, load: float | None,
                     seeds: Sequence[int], profile: str, shipped: str, gpus: int) -> ReservationCell:
    """The cell of ``load`` from the runs of the three variants (policies ``atoll-<profile>-<suffix>``)."""
    names = [f"{profile}-{s}" for s in RESERVE_VARIANTS]
    runs = {n: [records[(load, seed, f"atoll-{n}")] for seed in seeds] for n in names}
    first = runs[names[0]][0]
    band, band_jobs = "", 0
    for lo, hi in SIZE_BANDS:
        count = int(((first.gpus >= lo) & ((first.gpus <= hi) if hi is not None else True)).sum())
        if count:
            band, band_jobs = _band_name(lo, hi), count

    def band_figure(r: RunRecord, key: str) -> float:
        v = r.summary["wait_by_size_band"][band][key]
        return math.nan if v is None else float(v)

    def offered(r: RunRecord) -> float:
        return gpus * float(r.arrival.max() - r.arrival.min()) / 3600.0

    p95s = {n: [band_figure(r, "p95_wait_s") for r in runs[n]] for n in names}
    jcts = {n: [float(r.summary["mean_jct_s"]) for r in runs[n]] for n in names}
    base = f"{profile}-nores"
    reserving = names[:2]
    mean_base = estimate(p95s[base]).mean
    return ReservationCell(
        cluster, load, profile, shipped, band, band_jobs, tuple(seeds),
        p95={n: estimate(p95s[n]) for n in names},
        max_wait={n: estimate([band_figure(r, "max_wait_s") for r in runs[n]]) for n in names},
        idle_gpu_h={n: estimate([float(r.summary["reserved_idle_gpu_hours"]) for r in runs[n]]) for n in names},
        idle_share={n: estimate([100.0 * float(r.summary["reserved_idle_gpu_hours"]) / offered(r) for r in runs[n]]) for n in names},
        mean_jct={n: estimate(jcts[n]) for n in names},
        cut={n: (estimate(p95s[n]).mean / mean_base - 1.0) if mean_base > 0 else math.nan for n in reserving},
        p95_diff={n: paired(p95s[n], p95s[base]) for n in reserving},
        p95_rel={n: paired(p95s[n], p95s[base], relative=True) for n in reserving},
        jct_rel={n: paired(jcts[n], jcts[base], relative=True) for n in reserving},
        p95_by_seed={n: tuple(p95s[n]) for n in names},
    )


def _pm(e: Estimate, spec: str = ",.0f", unit: str = "") -> str:
    if not e.known:
        return "–"
    half = "" if math.isnan(e.half) else f" ± {e.half:{spec.lstrip('+')}}"
    return f"{e.mean:{spec}}{half}{unit}"


def format_reservations(cells: Sequence[ReservationCell]) -> str:
    """One row per cell and variant, then the goal line (``reservations_goal``)."""
    head = ("cluster", "load", "variant", "band (jobs)", "p95 wait s", "max wait s", "idle GPU-h (% offered)", "mean JCT h",
            "vs nores: mean p95 / paired s / per seed %", "Δ JCT %", "goal")
    body = []
    for c in cells:
        for suffix in RESERVE_VARIANTS:
            n = f"{c.profile}-{suffix}"
            shipped = " (as shipped)" if suffix == c.shipped else ""
            if suffix == "nores":
                vs, dj, goal = "", "", ""
            else:
                cut = "n/a" if math.isnan(c.cut[n]) else f"{100 * c.cut[n]:+.0f} %"
                vs = f"{cut} / {_pm(c.p95_diff[n], '+,.0f')} / {_pm(c.p95_rel[n], '+.0f')} ({c.p95_rel[n].n} seeds)"
                dj = _pm(c.jct_rel[n], "+.1f")
                goal = "n/a (no wait to cut)" if not c.judged else ("met" if c.met(suffix) else "missed")
            scale = Estimate(c.mean_jct[n].mean / 3600.0, c.mean_jct[n].half / 3600.0, c.mean_jct[n].n)
            body.append((c.cluster, "" if c.load is None else f"{c.load:g}", n + shipped, f"{c.band} ({c.band_jobs})", _pm(c.p95[n]),
                         _pm(c.max_wait[n]), f"{_pm(c.idle_gpu_h[n], ',.1f')} ({_pm(c.idle_share[n], '.2f')} %)", _pm(scale, ".2f"),
                         vs, dj, goal))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)] if body else [len(h) for h in head]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in (head, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(reservations_goal_line(cells))
    return "\n".join(lines)


def reservations_goal(cells: Sequence[ReservationCell], variant: str | None = None) -> bool:
    """The goal at every cell for ``variant`` (default: each cell's shipped one)."""
    return all(c.met(variant or c.shipped) for c in cells)


def reservations_goal_line(cells: Sequence[ReservationCell]) -> str:
    if not cells:
        return "reservation goal: nothing run"
    shipped = {c.shipped for c in cells}
    other = [v for v in ("island", "span") if v not in shipped]
    line = (f"reservation goal (the largest band's p95 wait cut by at least {100 * GOAL_CUT:.0f} % against the same profile without "
            f"reservations, paired interval below zero), as shipped ({'/'.join(sorted(shipped))}): "
            + ("met" if reservations_goal(cells) else "MISSED"))
    for v in other:
        line += f"; with reserveAt {v}: " + ("met" if reservations_goal(cells, v) else "missed")
    return line


def reservations_json(cells: Sequence[ReservationCell]) -> dict[str, Any]:
    def e(x: Estimate) -> dict[str, Any]:
        return x.to_json(3)

    return {
        "cells": [{
            "cluster": c.cluster, "load": c.load, "profile": c.profile, "shipped": c.shipped, "band": c.band, "band_jobs": c.band_jobs,
            "seeds": list(c.seeds), "judged": c.judged,
            "variants": {n: {"p95_wait_s": e(c.p95[n]), "max_wait_s": e(c.max_wait[n]), "reserved_idle_gpu_hours": e(c.idle_gpu_h[n]),
                             "reserved_idle_pct_offered": e(c.idle_share[n]), "mean_jct_s": e(c.mean_jct[n]),
                             "p95_by_seed": list(c.p95_by_seed[n]),
                             **({"cut_of_mean_p95": None if math.isnan(c.cut[n]) else round(c.cut[n], 4), "p95_diff_s": e(c.p95_diff[n]),
                                 "p95_rel_pct": e(c.p95_rel[n]), "mean_jct_rel_pct": e(c.jct_rel[n]),
                                 "met": c.met(n.rsplit("-", 1)[1])} if n in c.cut else {})}
                         for n in c.p95},
        } for c in cells],
        "met_as_shipped": reservations_goal(cells),
        "met_by_variant": {v: reservations_goal(cells, v) for v in ("island", "span")},
    }

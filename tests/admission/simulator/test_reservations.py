"""The reservation goal: a profile run reserving at the island level, at the span level and not at
all, the largest size band's p95 wait read from each, and the cut judged against no reservation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from admission.simulator._reservations import (
    format_reservations,
    reservation_cell,
    reservation_variants,
    reservations_goal,
    reservations_json,
)
from admission.simulator._sim import STATUS_DONE
from admission.simulator._stats import RunRecord
from policies import load_profiles

DOC = """
defaultProfile: strict
profiles:
  strict: {requiredLevel: nvidia.com/gpu.clique}
  costed:
    preferredLevel: nvidia.com/gpu.clique
    maxSpanLevel: network.example.com/su
    relaxAfterSeconds: 3600
    queueing: {waitOrSpan: true, reserveAfterSeconds: 1800, maxReservationsPerFlavor: 1}
"""

GPUS = (1, 4, 16, 32, 8)
"""The jobs of every record: the largest band present is 16-63 (two jobs)."""


def test_the_variants_are_the_profile_reserving_at_each_level_and_not_at_all() -> None:
    doc, shipped = reservation_variants(load_profiles(DOC), "costed")
    assert shipped == "island"
    island, span, nores = (doc.profiles[f"costed-{s}"] for s in ("island", "span", "nores"))
    assert island.queueing.reserve_at == "island" and span.queueing.reserve_at == "span"
    assert island.queueing.reserve_after_seconds == span.queueing.reserve_after_seconds == 1800
    assert nores.queueing.reserve_after_seconds is None
    for v in (island, span, nores):  # nothing else changes
        assert v.queueing.wait_or_span and v.relax_after_seconds == 3600 and v.preferred_level == "nvidia.com/gpu.clique"
    assert doc.profiles["costed"] == load_profiles(DOC).profiles["costed"]
    _, shipped = reservation_variants(load_profiles(DOC.replace("maxReservationsPerFlavor: 1", "reserveAt: span")), "costed")
    assert shipped == "span"


def test_a_profile_holding_behind_gangs_keeps_the_hold_where_it_reserves_and_drops_it_with_its_reservations() -> None:
    held = DOC.replace("maxReservationsPerFlavor: 1", "maxReservationsPerFlavor: 1, holdBehindGangs: quota")
    doc, _ = reservation_variants(load_profiles(held), "costed")
    assert doc.profiles["costed-island"].queueing.hold_behind_gangs == doc.profiles["costed-span"].queueing.hold_behind_gangs == "quota"
    nores = doc.profiles["costed-nores"].queueing
    assert nores.hold_behind_gangs == "off" and nores.reserve_after_seconds is None  # the same profile with neither


def test_a_profile_that_reserves_nothing_or_is_missing_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"profiles\.strict\.queueing\.reserveAfterSeconds is unset"):
        reservation_variants(load_profiles(DOC), "strict")
    with pytest.raises(ValueError, match="'elastic' is not a profile"):
        reservation_variants(load_profiles(DOC), "elastic")


def record(policy: str, seed: int, band_p95: float, *, idle: float = 0.0, jct: float = 10_000.0) -> RunRecord:
    n = len(GPUS)
    arrival = np.array([0.0, 900.0, 1800.0, 2700.0, 3600.0])  # a window of 1 h
    status = np.full(n, STATUS_DONE, dtype=np.int64)
    bands: dict[str, Any] = {
        "1-7": {"jobs": 2, "p95_wait_s": 5.0, "max_wait_s": 9.0, "never_started": 0},
        "8-15": {"jobs": 1, "p95_wait_s": 7.0, "max_wait_s": 7.0, "never_started": 0},
        "16-63": {"jobs": 2, "p95_wait_s": band_p95, "max_wait_s": band_p95 + 100.0, "never_started": 0},
        "64+": {"jobs": 0, "p95_wait_s": None, "max_wait_s": None, "never_started": 0},
    }
    return RunRecord(policy, seed, 1.0, status, arrival, arrival.copy(), arrival + jct, np.array(GPUS, dtype=np.int64),
                     np.full(n, jct), {"wait_by_size_band": bands, "reserved_idle_gpu_hours": idle, "mean_jct_s": jct})


def runs(island: list[float], span: list[float], nores: list[float], load: float = 1.0) -> dict[Any, RunRecord]:
    out: dict[Any, RunRecord] = {}
    for suffix, waits in (("island", island), ("span", span), ("nores", nores)):
        for seed, w in enumerate(waits):
            p = f"atoll-costed-{suffix}"
            out[(load, seed, p)] = record(p, seed, w, idle=0.0 if suffix == "nores" else 8.0, jct=10_000.0 + (50.0 if suffix == "span" else 0.0))
    return out


def test_span_halving_every_seed_meets_the_goal_and_an_island_cut_of_a_third_misses_it() -> None:
    recs = runs(island=[6_000.0, 4_200.0, 8_400.0], span=[4_000.0, 2_800.0, 5_200.0], nores=[9_000.0, 6_000.0, 12_000.0])
    cell = reservation_cell(recs, cluster="gb200", load=1.0, seeds=(0, 1, 2), profile="costed", shipped="island", gpus=16)
    assert (cell.band, cell.band_jobs) == ("16-63", 2)
    assert cell.p95["costed-nores"].mean == pytest.approx(9_000.0)
    assert cell.max_wait["costed-span"].mean == pytest.approx(4_100.0)
    assert cell.cut["costed-span"] == pytest.approx(4_000.0 / 9_000.0 - 1.0)
    assert cell.cut["costed-island"] == pytest.approx(6_200.0 / 9_000.0 - 1.0)
    assert cell.p95_rel["costed-span"].mean == pytest.approx(100.0 * (4 / 9 + 2.8 / 6 + 5.2 / 12) / 3 - 100.0)
    assert cell.idle_gpu_h["costed-span"].mean == 8.0 and cell.idle_gpu_h["costed-nores"].mean == 0.0
    assert cell.idle_share["costed-span"].mean == pytest.approx(100.0 * 8.0 / 16.0)  # 16 GPUs over the 1 h window
    assert cell.jct_rel["costed-span"].mean == pytest.approx(0.5)
    assert cell.met("span") and not cell.met("island")
    assert not reservations_goal([cell]) and reservations_goal([cell], "span")
    text = format_reservations([cell])
    assert "costed-island (as shipped)" in text and "16-63 (2)" in text
    assert "-5,000 ± 4,472" in text  # the span's paired p95 difference (s), its half-width unsigned
    assert text.splitlines()[-1].endswith("as shipped (island): MISSED; with reserveAt span: met")
    data = reservations_json([cell])
    assert data["met_as_shipped"] is False and data["met_by_variant"] == {"island": False, "span": True}
    assert data["cells"][0]["variants"]["costed-span"]["met"] is True


def test_a_half_cut_of_the_mean_carried_by_one_seed_is_no_cut_when_its_interval_holds_zero() -> None:
    recs = runs(island=[20_000.0, 0.0, 0.0], span=[500.0, 6_000.0, 5_000.0], nores=[20_000.0, 1_000.0, 4_000.0], load=1.3)
    cell = reservation_cell(recs, cluster="gb200", load=1.3, seeds=(0, 1, 2), profile="costed", shipped="span", gpus=16)
    assert cell.cut["costed-span"] <= -0.5  # the mean falls by more than half...
    assert cell.p95_diff["costed-span"].holds_zero()  # ...but two seeds of three got worse
    assert not cell.met("span")


def test_without_any_wait_to_cut_the_cell_judges_nothing() -> None:
    recs = runs(island=[0.0, 0.0], span=[0.0, 0.0], nores=[0.0, 0.0])
    cell = reservation_cell(recs, cluster="dgx", load=1.0, seeds=(0, 1), profile="costed", shipped="island", gpus=16)
    assert not cell.judged and math.isnan(cell.cut["costed-span"])
    assert cell.met("island") and cell.met("span") and reservations_goal([cell])
    assert "n/a (no wait to cut)" in format_reservations([cell])

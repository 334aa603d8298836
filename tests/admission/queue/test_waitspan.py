"""Wait or span: the cheaper expected cost wins, a tie waits, and an unknown side leaves the choice to relaxAfterSeconds."""

from __future__ import annotations

import pytest

from admission.queue import weigh


def test_the_cheaper_side_wins() -> None:
    slow = weigh(900.0, 60.0, "u0/c1", 1.10, 3600.0, 600.0)  # span costs 360 s, the wait 900 s
    assert slow.choice == "span" and slow.span_cost_s is not None and round(slow.span_cost_s) == 360
    assert weigh(300.0, 60.0, "u0/c1", 1.10, 3600.0).choice == "wait"
    assert weigh(360.0, 0.0, "u0/c1", 1.10, 3600.0).choice == "wait"  # a tie waits: one domain is what the profile prefers


def test_an_unknown_side_gives_no_answer() -> None:
    assert weigh(None, 0.0, "", 1.1, 3600.0).choice is None
    assert weigh(900.0, 0.0, "u0/c1", None, 3600.0).choice is None
    assert weigh(900.0, 0.0, "u0/c1", 1.1, None).choice is None


def test_both_numbers_are_said() -> None:
    w = weigh(900.0, 60.0, "u0/c1", 1.10, 3600.0, 600.0)
    text = w.describe()
    assert "expected wait for one domain 900s ± 60s (u0/c1)" in text and "1.100×" in text and "+360s" in text and "spans now" in text
    rec = w.as_record()
    assert rec["expectedWaitSeconds"] == 900.0 and rec["spanCostSeconds"] == 360.0 and rec["choice"] == "span"
    assert "unknown" in weigh(None, 0.0, "", 1.1, 3600.0).describe()


def test_a_span_charged_for_the_line_waits_when_the_delays_it_imposes_tip_the_balance() -> None:
    alone = weigh(900.0, 60.0, "u0/c1", 1.10, 3600.0)  # +360 s of its own: spans
    lined = weigh(900.0, 60.0, "u0/c1", 1.10, 3600.0, queue_cost_s=600.0, queue_later=2, queue_counted=5)
    assert alone.choice == "span" and lined.choice == "wait" and lined.span_price_s == pytest.approx(960.0)
    text = lined.describe()
    assert "delays the 5 others in line +600s in all (2 start later) = 960s" in text and "waits (cheaper)" in text
    rec = lined.as_record()
    assert rec["queueCostSeconds"] == 600.0 and rec["queueDelayed"] == 2 and rec["spanPriceSeconds"] == 960.0 and rec["choice"] == "wait"
    assert alone.as_record()["queueCostSeconds"] is None and alone.as_record()["spanPriceSeconds"] == 360.0


def test_a_span_that_lets_the_line_start_sooner_is_not_credited_for_it() -> None:
    w = weigh(300.0, 0.0, "u0/c1", 1.10, 3600.0, queue_cost_s=-5000.0, queue_counted=3)
    assert w.span_price_s == pytest.approx(360.0) and w.choice == "wait"  # its own 360 s still outweigh a 300 s wait


def test_a_wait_charged_for_the_gpus_it_leaves_idle_counts_wait_weight_times() -> None:
    own = weigh(300.0, 0.0, "u0/c1", 1.10, 3600.0)  # 300 s of waiting against +360 s of span: waits
    idle = weigh(300.0, 0.0, "u0/c1", 1.10, 3600.0, wait_weight=2.0)  # charged 600 s: spans
    assert own.choice == "wait" and idle.choice == "span" and idle.wait_price_s == pytest.approx(600.0)
    assert weigh(180.0, 0.0, "u0/c1", 1.10, 3600.0, wait_weight=2.0).choice == "wait"  # 360 s against 360 s: a tie waits
    assert "charged ×2 for the GPUs it leaves idle = 600s" in idle.describe() and "charged" not in own.describe()
    assert idle.as_record()["waitWeight"] == 2.0 and idle.as_record()["expectedWaitSeconds"] == 300.0

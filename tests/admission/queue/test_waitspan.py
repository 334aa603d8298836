"""Wait or span: the cheaper expected cost wins, a tie waits, and an unknown side leaves the choice to relaxAfterSeconds."""

from __future__ import annotations

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

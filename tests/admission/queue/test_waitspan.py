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
    rec = w.as_record("f", "limits", "learned")
    assert rec["expected_wait_seconds"] == 900.0 and rec["span_cost_seconds"] == 360.0 and rec["chose"] == "span"
    assert (rec["flavor"], rec["kind"], rec["domain"], rec["wait_basis"], rec["runtime_basis"]) == ("f", "span", "u0/c1", "limits", "learned")
    assert "unknown" in weigh(None, 0.0, "", 1.1, 3600.0).describe()


def test_a_span_charged_for_the_line_waits_when_the_delays_it_imposes_tip_the_balance() -> None:
    alone = weigh(900.0, 60.0, "u0/c1", 1.10, 3600.0)  # +360 s of its own: spans
    lined = weigh(900.0, 60.0, "u0/c1", 1.10, 3600.0, queue_cost_s=600.0, queue_later=2, queue_counted=5)
    assert alone.choice == "span" and lined.choice == "wait" and lined.span_price_s == pytest.approx(960.0)
    text = lined.describe()
    assert "delays the 5 others in line +600s in all (2 start later) = 960s" in text and "waits (cheaper)" in text
    rec = lined.as_record("f", None, None)
    assert rec["queue_cost_seconds"] == 600.0 and rec["queue_delayed"] == 2 and rec["span_price_seconds"] == 960.0 and rec["chose"] == "wait"
    assert alone.as_record("f", None, None)["queue_cost_seconds"] is None and alone.as_record("f", None, None)["span_price_seconds"] == 360.0


def test_a_span_that_lets_the_line_start_sooner_is_not_credited_for_it() -> None:
    w = weigh(300.0, 0.0, "u0/c1", 1.10, 3600.0, queue_cost_s=-5000.0, queue_counted=3)
    assert w.span_price_s == pytest.approx(360.0) and w.choice == "wait"  # its own 360 s still outweigh a 300 s wait


def test_a_wait_charged_for_the_gpus_it_leaves_idle_counts_wait_weight_times() -> None:
    own = weigh(300.0, 0.0, "u0/c1", 1.10, 3600.0)  # 300 s of waiting against +360 s of span: waits
    idle = weigh(300.0, 0.0, "u0/c1", 1.10, 3600.0, wait_weight=2.0)  # charged 600 s: spans
    assert own.choice == "wait" and idle.choice == "span" and idle.wait_price_s == pytest.approx(600.0)
    assert weigh(180.0, 0.0, "u0/c1", 1.10, 3600.0, wait_weight=2.0).choice == "wait"  # 360 s against 360 s: a tie waits
    assert "charged ×2 for the GPUs it leaves idle = 600s" in idle.describe() and "charged" not in own.describe()
    assert idle.as_record("f", None, None)["wait_weight"] == 2.0 and idle.as_record("f", None, None)["expected_wait_seconds"] == 300.0


def test_the_wait_says_whether_limits_or_learned_runtimes_set_it() -> None:
    from admission.queue import Running, RuntimeEstimator, wait_basis
    from tests.admission.queue.test_estimate import cluster

    snap, est = cluster(), RuntimeEstimator(min_samples=1)
    est.learn("ns/q", 4, 2000.0)
    limited = Running("f", (("c0n0", 4),), 0.0, "ns/q", limit=1000.0)  # ends at 1000 by its limit
    learned = Running("f", (("c0n1", 4),), 0.0, "ns/q")  # ends at 2000, learned
    elsewhere = Running("f", (("c1n0", 4),), 0.0, "ns/q", limit=500.0)  # another island: never the reason
    running = [limited, learned, elsewhere]
    assert wait_basis(snap, "u0/c0", 0.0, running, est, 0.0) == "now"
    assert wait_basis(snap, "u0/c0", None, running, est, 0.0) is None
    assert wait_basis(snap, "u0/c0", 1000.0, running, est, 0.0) == "limits"
    assert wait_basis(snap, "u0/c0", 2000.0, running, est, 0.0) == "limits+learned"
    assert wait_basis(snap, "u0/c0", 2000.0, [learned], est, 0.0) == "learned"
    assert wait_basis(snap, "u0/c0", 400.0, running, est, 0.0) is None  # nothing there ends by then: set by the queue ahead
    assert wait_basis(snap, "", 500.0, running, est, 0.0) == "limits"  # the whole flavor: the other island counts
    # the Workloads queued ahead made it later: said beside what runs there, or alone
    assert wait_basis(snap, "u0/c0", 2000.0, running, est, 0.0, queue=True) == "limits+learned+queue"
    assert wait_basis(snap, "u0/c0", 1500.0, running, est, 0.0, queue=True) == "limits+queue"
    assert wait_basis(snap, "u0/c0", 2000.0, [learned], est, 0.0, queue=True) == "learned+queue"
    assert wait_basis(snap, "u0/c0", 400.0, running, est, 0.0, queue=True) == "queue"
    assert wait_basis(snap, "u0/c0", 0.0, running, est, 0.0, queue=True) == "now"
    assert wait_basis(snap, "u0/c0", None, running, est, 0.0, queue=True) is None


def test_the_queue_ahead_sets_the_wait_only_when_counted_it_makes_the_wait_later() -> None:
    assert weigh(7200.0, 0.0, "b0/c1", 1.1, 3600.0, ahead=2, wait_alone_s=3600.0).queue_delays
    assert weigh(7200.0, 0.0, "b0/c1", 1.1, 3600.0, ahead=2, wait_alone_s=None).queue_delays  # the room alone: unknown
    assert not weigh(3600.0, 0.0, "b0/c1", 1.1, 3600.0, ahead=2, wait_alone_s=3600.0).queue_delays  # they took other room
    assert not weigh(3600.0, 0.0, "b0/c1", 1.1, 3600.0, ahead=0, wait_alone_s=3600.0).queue_delays  # nobody ahead
    assert not weigh(3600.0, 0.0, "b0/c1", 1.1, 3600.0).queue_delays  # the queue not counted (waitCountsQueue off)
    assert not weigh(None, 0.0, "", 1.1, 3600.0, ahead=2, wait_alone_s=3600.0).queue_delays  # no wait known

"""The weighing as data (``weighing_records``): the verdict a decision hands to its record carries
the same numbers its message says, and says nothing when nothing was weighed."""

from __future__ import annotations

from admission.controller import CostSettings
from admission.controller._span_cost import SpanPricer
from tests.admission.controller.test_queueing import atoll, decide, two_gangs_ahead
from tests.admission.controller.test_span_cost import slowdown_said


def test_the_verdict_carries_the_weighing_its_message_says() -> None:
    a = atoll("elastic", used={"r0n0": 4, "r1n0": 4})  # one free node per island: a span now, no runtime known for the busy ones
    a.decider.span_cost = SpanPricer(CostSettings())
    v = decide(a, 1, 2)
    assert v.outcome == "wait" and "relaxAfterSeconds decides" in v.message
    (weighed,) = v.wait_or_span
    assert (weighed["flavor"], weighed["kind"], weighed["chose"]) == ("f", "span", None)
    assert weighed["expected_wait_seconds"] is None and weighed["wait_basis"] is None  # what runs there has no runtime known
    assert round(weighed["span_slowdown"], 3) == slowdown_said(v.message) > 1.0
    assert weighed["runtime_basis"] is None and weighed["span_cost_seconds"] is None


def test_a_strict_profile_weighs_nothing() -> None:
    v = decide(atoll("strict", used={"r0n0": 4, "r1n0": 4}), 1, 2)
    assert v.outcome == "wait" and v.wait_or_span == []


def test_the_wait_basis_says_when_the_gangs_queued_ahead_set_the_wait() -> None:
    # r0's Workload ends at 3,000 s (learned), r1's at 6,000 s (its limit); job-1 and job-2 queue in that order
    alone = decide(two_gangs_ahead("elastic"), 3, 2, now=1002.0)
    queued = decide(two_gangs_ahead("queued"), 3, 2, now=1002.0)
    (a,), (q,) = alone.wait_or_span, queued.wait_or_span
    assert (a["domain"], a["wait_basis"], a["queued_ahead"]) == ("u0/r0", "learned", None)  # the room alone: r0 at 3,000 s
    # after job-1 takes r0 and job-2 r1, the gang waits for r1 until 6,000 s: r1's limit, and the two ahead
    assert (q["domain"], q["expected_wait_seconds"], q["wait_basis"], q["queued_ahead"]) == ("u0/r1", 4998.0, "limits+queue", 2)

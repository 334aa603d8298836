"""The weighing as data (``weighing_records``): the verdict a decision hands to its record carries
the same numbers its message says, and says nothing when nothing was weighed."""

from __future__ import annotations

from admission.controller import CostSettings
from admission.controller._span_cost import SpanPricer
from tests.admission.controller.test_queueing import atoll, decide
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

"""Chaos on the real apiserver: faults between the controller and the API, the controller killed
at random points, Kueue and an adversarial scheduler around it; the audit of every run's final
state finds no double booking, no unplaceable owed pod, nothing lost and nothing decided twice.
And the audit is not blind: a controller whose ledger forgets owed pods is caught."""

from __future__ import annotations

from typing import Any

import pytest

from admission.controller import Controller
from tests.chaos.harness import RunConfig
from tests.chaos.runner import run_many

pytestmark = pytest.mark.apiserver


def test_a_few_seeded_runs_with_faults_and_kills_keep_every_invariant(apiserver: Any) -> None:
    summary = run_many(apiserver, 3, RunConfig(seed=11, fault_rate=0.2, seconds=2.5), prefix="chaos-small")
    assert summary.clean, summary.json()
    assert summary.ledger_mismatch == 0, summary.failed_runs
    # the runs did what they claim: faults answered, controllers killed, decisions written, pods bound
    assert sum(summary.faults.values()) > 0 and sum(summary.kills.values()) > 0
    assert summary.decisions > 0 and summary.admissions > 0 and summary.bound > 0


def forgetful_controller(*args: Any, **kwargs: Any) -> Controller:
    """A controller whose ledger counts nothing as owed: admitted pods not yet bound look free."""
    ctrl = Controller(*args, **kwargs)
    ctrl.ledger.apply = lambda snapshot, exclude_uid=None: 0  # type: ignore[method-assign]
    return ctrl


def test_the_audit_catches_a_ledger_that_forgets_owed_pods(apiserver: Any) -> None:
    config = RunConfig(seed=5, fault_rate=0.0, seconds=2.0, quota_factor=2.0, kill_rate=0.0, crash_rate=0.0,
                       bind_rate=0.05, finish_rate=0.0, preempt_rate=0.0)
    summary = run_many(apiserver, 2, config, prefix="chaos-forgetful", controller_factory=forgetful_controller)
    assert summary.unplaceable_owed + summary.double_booked > 0, summary.json()
    assert not summary.clean

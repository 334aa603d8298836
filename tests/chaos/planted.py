"""A planted pod failure, at a chosen moment, instead of the dice: the failed pod's replacement
meets another Workload on its slot every time, so the audit's ground truth is put to the test
the same way in every run.

On one clique of two 4-GPU nodes, with no API faults and no kills:

1. ``a-wide`` (two 4-GPU pods) is admitted and both its pods run, one per node; the
   controller's cache has seen both bound.
2. One of them fails; its job controller creates the replacement, which stays pending (the
   scheduler binds nothing meanwhile) and keeps the failed pod's node for itself. The
   controller's cache has seen the node freed.
3. ``b-narrow`` (one 4-GPU pod) gets quota and the controller decides it. The failed pod's
   node is the only room in the clique, and it is owed to the replacement: an honest ledger
   leaves it to the replacement (``b-narrow`` waits); a ledger that counts the failed pod as
   still done hands it to ``b-narrow``.
4. The scheduler binds again (the replacement goes back on its node), the run settles and the
   usual audit (``ChaosRun``) reads the final state.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from admission.controller import Controller
from tests.chaos.actors import phase_of
from tests.chaos.config import SETTLE_MAX_S, RunConfig, RunResult
from tests.chaos.harness import ChaosRun
from tests.chaos.proxy import FaultProxy
from tests.envtest import ApiServer
from tests.kube_objects import workload

__all__ = ["PLANTED", "Planted", "planted_failure"]

PLANTED = RunConfig(fault_rate=0.0, kill_rate=0.0, crash_rate=0.0, cliques=1, per_clique=2, workloads=0, quota_factor=2.0,
                    bind_rate=1.0, finish_rate=0.0, preempt_rate=0.0, fail_rate=0.0, shapes="nested")
"""The scenario's cluster and actors: nothing random is left but thread timing."""
STEP_S = 60.0
"""The longest any step may take before the scenario gives up (an ``AssertionError`` naming it)."""


@dataclass
class Planted:
    result: RunResult
    narrow_outcome: str
    """The controller's first decision on ``b-narrow`` (admit, wait or reject)."""


def planted_failure(server: ApiServer, ns: str, controller_factory: Callable[..., Controller] = Controller) -> Planted:
    """The scenario of the module's note in namespace ``ns`` (the controller behind a proxy that
    injects nothing): its audited result, then cleanup."""
    with FaultProxy("127.0.0.1", server.port, server.ca_file, rate=0.0, max_seconds=4 * STEP_S + SETTLE_MAX_S + 60.0) as proxy:
        run = ChaosRun(server.api_client(), server.token, proxy, ns, PLANTED, controller_factory)
        try:
            return _play(run, ns)
        finally:
            run._kill(count=False)
            run.cleanup()
            shutil.rmtree(run._dir, ignore_errors=True)


def _play(run: ChaosRun, ns: str) -> Planted:
    run.install()
    strict = {"main": {"atoll.dev/profile": "strict"}}
    run.kueue.actor.create(workload(ns, "a-wide", [("main", 2, 4)], podset_annotations=strict))
    run._start(0.0)
    ctrl = run._ctrl
    assert ctrl is not None
    nodes = [n.name for n in run.nodes]

    def gpus(node: str) -> int:
        used = ctrl.cache.usage.get(node)
        return used.gpu if used is not None else 0

    started = time.monotonic()
    _until(run, "a-wide runs on both nodes, as the controller sees it", lambda: all(gpus(n) == 4 for n in nodes))
    run.scheduler.bind_rate = 0.0  # nothing binds until b-narrow is decided
    victim = next(p for p in run.scheduler.pods() if p["metadata"]["name"].startswith("a-wide") and phase_of(p) == "Running")
    run.scheduler.fail_pod(victim, run.workloads())
    _until(run, "the controller sees the failed pod's node freed", lambda: gpus(victim["spec"]["nodeName"]) == 0)
    run.kueue.actor.create(workload(ns, "b-narrow", [("main", 1, 4)], podset_annotations=strict))
    first: list[dict[str, Any]] = []

    def decided() -> bool:
        first[:] = [rec for rec in run._records() if rec.get("workload") == "b-narrow"][:1]
        return bool(first)

    _until(run, "the controller decides b-narrow", decided)
    run.scheduler.bind_rate = 1.0
    _until(run, "the replacement binds", lambda: run.scheduler.replacements_bound > 0)
    run.result.chaos_seconds = time.monotonic() - started
    run._settle()
    run._audit()
    return Planted(run.result, str(first[0].get("outcome")))


def _until(run: ChaosRun, what: str, done: Callable[[], bool]) -> None:
    """Tick Kueue and the scheduler until ``done``; an ``AssertionError`` naming ``what`` after ``STEP_S``."""
    deadline = time.monotonic() + STEP_S
    while not done():
        assert time.monotonic() < deadline, f"planted failure: gave up waiting until {what}"
        run._tick(bind=True)
        time.sleep(0.05)

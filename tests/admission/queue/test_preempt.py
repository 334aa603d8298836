"""The preemption plan: the cheapest domain to clear (GPU-hours lost, then priority), only
victims the ClusterQueues' rules allow, nothing when the gang fits already, never a draining domain."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from admission.queue import Candidate, Gang, QueueRules, plan_preemption
from admission.queue._preempt import allowed
from topology import Level, NodeInfo, ResourceVector, Snapshot

RACK = "nvidia.com/gpu.clique"
NOW = 100_000.0
HOUR = 3600.0
RULES = {"cq": QueueRules(cohort="org", within_cluster_queue="LowerPriority"), "other": QueueRules(cohort="org"),
         "stranger": QueueRules(cohort="elsewhere")}


def run(key: str, nodes: dict[str, int], hours: float, priority: int = 0, cq: str = "cq") -> Candidate:
    return Candidate(key, cq, priority, nodes, NOW - hours * HOUR)


def cluster(running: Sequence[Candidate], draining: frozenset[str] = frozenset()) -> Snapshot:
    """Two racks of four 4-GPU nodes; each node's use is what ``running`` holds there."""
    used: dict[str, int] = {}
    for c in running:
        for n, g in c.gpus_on.items():
            used[n] = used.get(n, 0) + g
    nodes = [NodeInfo(n, {RACK: r}, ResourceVector(4, 1000, 1000, 10), ResourceVector(gpu=used.get(n, 0)), draining=n in draining)
             for r in ("r0", "r1") for n in [f"{r}n{i}" for i in range(4)]]
    return Snapshot("f", [Level(RACK)], nodes)


def gang(gpus: int, priority: int = 10, cq: str = "cq") -> Gang:
    return Gang("team/gang", cq, priority, RACK, gpus // 4, 4)


RUNNING = [run("A", {"r0n0": 4, "r0n1": 4}, hours=10), run("B", {"r0n2": 4, "r0n3": 4}, hours=1),
           run("C", {f"r1n{i}": 4 for i in range(4)}, hours=2)]


def test_the_domain_losing_the_fewest_gpu_hours_is_cleared() -> None:
    plan = plan_preemption(cluster(RUNNING), gang(8), RUNNING, RULES, NOW)
    assert plan is not None and (plan.domain, plan.victims, plan.gpu_hours_lost, plan.freed_gpus) == ("r0", ("B",), 8.0, 8)
    assert plan.nodes == ("r0n0", "r0n1", "r0n2", "r0n3")
    whole = plan_preemption(cluster(RUNNING), gang(16), RUNNING, RULES, NOW)  # r0 needs A and B (88 GPU-h); r1 needs C (32)
    assert whole is not None and (whole.domain, whole.victims, whole.gpu_hours_lost) == ("r1", ("C",), 32.0)


def test_equal_loss_is_broken_by_the_lower_priority() -> None:
    running = [run("hi", {f"r0n{i}": 4 for i in range(4)}, hours=1, priority=5), run("lo", {f"r1n{i}": 4 for i in range(4)}, hours=1, priority=1)]
    plan = plan_preemption(cluster(running), gang(16), running, RULES, NOW)
    assert plan is not None and plan.victims == ("lo",) and plan.highest_priority == 1


def test_a_victim_that_does_not_help_is_given_back() -> None:
    running = [run("small", {"r0n0": 2}, hours=0.1), run("keeper", {"r0n0": 2}, hours=0.1, priority=50),
               run("large", {"r0n2": 4, "r0n3": 4}, hours=1), run("full", {f"r1n{i}": 4 for i in range(4)}, hours=9),
               run("pin", {"r0n1": 4}, hours=9)]
    plan = plan_preemption(cluster(running), gang(8), running, RULES, NOW)
    # "small" is cheapest but leaves r0n0 with 2 GPUs held by "keeper" (priority 50, not allowed): no whole pod; "large" suffices alone
    assert plan is not None and plan.victims == ("large",) and plan.domain == "r0"


def test_the_cluster_queues_rules_are_respected() -> None:
    assert plan_preemption(cluster(RUNNING), gang(8, priority=0), RUNNING, RULES, NOW) is None  # equal priority: not lower
    never = {"cq": QueueRules(cohort="org")}  # Kueue's default: withinClusterQueue Never
    assert plan_preemption(cluster(RUNNING), gang(8), RUNNING, never, NOW) is None
    others = [run("A", {f"r0n{i}": 4 for i in range(4)}, hours=1, cq="other"), run("S", {f"r1n{i}": 4 for i in range(4)}, hours=1, cq="stranger")]
    assert plan_preemption(cluster(others), gang(16), others, RULES, NOW) is None  # reclaimWithinCohort Never; a stranger never
    reclaim = dict(RULES, cq=QueueRules(cohort="org", reclaim_within_cohort="LowerPriority"))
    plan = plan_preemption(cluster(others), gang(16), others, reclaim, NOW, borrowed={"other": 16, "stranger": 16})
    assert plan is not None and plan.victims == ("A",)  # same cohort, lower priority; the other cohort's S stays
    newer = {"cq": QueueRules(within_cluster_queue="LowerOrNewerEqualPriority")}
    equal = [Candidate("late", "cq", 10, {f"r0n{i}": 4 for i in range(4)}, NOW - HOUR, admitted_at=NOW - HOUR),
             Candidate("early", "cq", 10, {f"r1n{i}": 4 for i in range(4)}, NOW - HOUR, admitted_at=0.0)]
    g = Gang("team/gang", "cq", 10, RACK, 4, 4, created_at=NOW - 2 * HOUR)
    plan = plan_preemption(cluster(equal), g, equal, newer, NOW)
    assert plan is not None and plan.victims == ("late",)  # equal priority, admitted after the gang was created


@pytest.mark.parametrize("reclaim", ["LowerPriority", "Any"])
def test_another_cluster_queue_is_reclaimed_from_only_while_it_borrows_and_only_what_it_borrows(reclaim: str) -> None:
    """Kueue's ``cqIsBorrowing``: "other" holds r0 with two 8-GPU Workloads. Within its nominal
    quota it gives nothing; borrowing 8 GPUs it gives one Workload, after which it borrows no more,
    so r0 (which needs both) stays as it is; borrowing 9 it gives both."""
    others = [run("A", {"r0n0": 4, "r0n1": 4}, hours=1, cq="other"), run("B", {"r0n2": 4, "r0n3": 4}, hours=2, cq="other"),
              run("C", {f"r1n{i}": 4 for i in range(4)}, hours=5)]  # the gang's own ClusterQueue's: always a candidate
    rules = dict(RULES, cq=QueueRules(cohort="org", within_cluster_queue="LowerPriority", reclaim_within_cohort=reclaim))
    for borrowed in (None, {}, {"other": 0}, {"other": -4}, {"other": 8}):
        plan = plan_preemption(cluster(others), gang(16), others, rules, NOW, borrowed=borrowed)
        assert plan is not None and plan.victims == ("C",), borrowed  # r1 (80 GPU-hours) though r0 would cost 24
    plan = plan_preemption(cluster(others), gang(16), others, rules, NOW, borrowed={"other": 9})
    assert plan is not None and (plan.domain, plan.victims) == ("r0", ("A", "B"))
    half = plan_preemption(cluster(others), gang(8), others, rules, NOW, borrowed={"other": 8})
    assert half is not None and half.victims == ("A",)  # one Workload's worth of what it borrows
    assert plan_preemption(cluster(others), gang(8), others, rules, NOW, borrowed={"other": 0}) is not None  # C, its own
    assert all(not allowed(gang(8), v, rules, {"other": 0}) for v in others[:2]) and allowed(gang(8), others[0], rules, {"other": 1})


def test_no_plan_when_the_gang_fits_or_nothing_can_clear_a_domain() -> None:
    light = [run("A", {"r0n0": 4}, hours=1)]
    assert plan_preemption(cluster(light), gang(16), light, RULES, NOW) is None  # r1 is empty: it fits, no preemption
    assert plan_preemption(cluster(RUNNING), gang(32), RUNNING, RULES, NOW) is None  # no rack holds 32 GPUs


def test_a_draining_domain_is_never_cleared() -> None:
    drained = frozenset(f"r0n{i}" for i in range(4))
    plan = plan_preemption(cluster(RUNNING, drained), gang(8), RUNNING, RULES, NOW)
    assert plan is not None and plan.domain == "r1" and plan.victims == ("C",)  # dearer, but r0 takes no new work


def test_the_same_state_gives_the_same_plan() -> None:
    running = [run(k, {f"{r}n{i}": 4 for i in range(4)}, hours=1) for k, r in (("x", "r1"), ("y", "r0"))]
    plans = {plan_preemption(cluster(running), gang(16), list(order), RULES, NOW) for order in (running, running[::-1])}
    assert len(plans) == 1 and next(iter(plans)).domain == "r0"  # a tie in cost, broken by the domain's path

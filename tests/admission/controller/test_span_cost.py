"""The controller's price of a span (``SpanPricer``): the simulator's own charge for the same job,
moved by the settings ``atoll run`` takes; and on the real apiserver, a costed Workload waiting for
one clique gets its span priced in the check, the decision record and ``explain``, and takes the
span exactly when the expected wait exceeds the span's cost."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest

from admission.controller import ConfigSettings, CostSettings, KueueSettings, Settings
from admission.controller._schema import record_problems
from admission.controller._span_cost import SpanPricer
from admission.simulator._jobs import make_job
from admission.simulator._policies import JobShape
from admission.simulator._sim import _span_cost
from tests.admission.controller.test_queue_state import finished_at, submit
from tests.admission.controller.test_queueing import atoll
from tests.admission.controller.test_queueing import decide as sim_decide
from tests.admission.fabric import Fabric, planned, profiles_doc, run
from tests.kube_objects import workload
from topology import CostModel, ResourceVector

PER_POD = ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024)
PRICED = re.compile(r"expected wait for one domain (\d+)s ± \d+s \([^)]*\); best span slows it ([\d.]+)× = \+(\d+)s on an expected "
                    r"(\d+)s ± \d+s; (spans now|waits) \(cheaper\)")


def slowdown_said(message: str) -> float:
    got = re.search(r"best span slows it ([\d.]+)×", message)
    assert got is not None, message
    return float(got.group(1))


def priced_by(pricer: Any) -> float:
    """The slowdown a 2 × 4-GPU elastic gang's best span is priced at (one free node per island)."""
    a = atoll("elastic", used={"r0n0": 4, "r1n0": 4})
    if pricer is not None:
        a.decider.span_cost = pricer
    else:  # the simulator's own charge for the job it replays
        shape = JobShape(2, PER_POD, "training")
        job = make_job("sim/job-1", 0.0, 3600.0, 8, 4)
        a.price_spans(functools.partial(_span_cost, CostModel(), shape, job), a.cache.snapshot("f"))
    v = sim_decide(a, 1, 2)
    assert v.outcome == "wait"
    return slowdown_said(v.message)


def test_the_controller_prices_a_span_as_the_simulator_charges_it() -> None:
    ours = priced_by(SpanPricer(CostSettings()))
    assert ours > 1.0  # a span across two NVLink islands is slower than one island
    assert ours == priced_by(None)


def test_the_settings_move_the_price() -> None:
    base = priced_by(SpanPricer(CostSettings()))
    assert priced_by(SpanPricer(CostSettings(comm_fraction=0.0))) == 1.0  # no all-reduce: only GPU perf (1.0 here)
    assert priced_by(SpanPricer(CostSettings(comm_fraction=0.3))) > base
    assert priced_by(SpanPricer(CostSettings(link_model="flat-ring"))) > base  # one rail: the pessimistic end
    assert priced_by(SpanPricer(CostSettings(overlap=1.0))) < base  # part of the all-reduce hidden behind compute


def test_podsets_of_different_gpu_shapes_are_not_priced() -> None:
    from policies import Decision
    from topology import Placement, PlacementRequest, PodSetPlacement, PodSetRequest

    a = atoll("elastic", used={})
    snap = a.cache.snapshot("f")
    names = tuple(snap.node_names[:2])
    request = PlacementRequest((PodSetRequest("a", 1, PER_POD), PodSetRequest("b", 1, ResourceVector(gpu=2, cpu_milli=1, memory_mib=1))))
    ps = [PodSetPlacement(n, (node,), (1,), "x", (), 1, "x", 1.0, 1.0, 50.0) for n, node in zip("ab", names)]
    placed = Decision("admit", "elastic", "", Placement(True, tuple(ps)), request=request)
    assert SpanPricer(CostSettings())(snap, placed) is None
    same = Decision("admit", "elastic", "", Placement(True, tuple(ps)),
                    request=PlacementRequest((PodSetRequest("a", 1, PER_POD), PodSetRequest("b", 1, PER_POD))))
    assert SpanPricer(CostSettings())(snap, same) is not None


# ---------------------------------------------------------------------- on the real apiserver

LIMIT = 3600
RUNS = (1000, 2000, 3000)


def one_clique_busy(fabric: Fabric) -> None:
    """Block 0 of two cliques × two 4-GPU nodes. Three 8-GPU Workloads of the queue ran 1000, 2000
    and 3000 s (the runtime learned); then one node of each clique runs a Workload for
    ``LIMIT`` s. An 8-GPU gang finds no whole clique before then, and a span of the two free
    nodes now."""
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["elastic"].update({"relaxAfterSeconds": 10 * LIMIT, "queueing": {"waitOrSpan": True}})
    fabric.install(doc, nodes=False)
    nodes = [[fabric.add_node(0, c, i) for i in range(2)] for c in range(2)]
    ctrl = fabric.controller()
    t0 = fabric.clock.now()
    for batch in (RUNS[:2], RUNS[2:]):
        names = [f"done-{s}" for s in batch]
        for name in names:
            submit(fabric, name, 2)
        assert [v.outcome for v in run(ctrl)] == ["admit"] * len(names)
        for name, seconds in zip(names, batch):
            finished_at(fabric, name, t0, t0 + seconds)
        run(ctrl)
    for c in range(2):  # the first node of each clique runs one Workload: cordon the other while it is placed
        fabric.core.patch_node(nodes[c][1], {"spec": {"unschedulable": True}})
    for c in range(2):
        submit(fabric, f"busy-{c}", 1, limit=LIMIT)
    assert [v.outcome for v in run(ctrl)] == ["admit"] * 2
    for c in range(2):
        fabric.core.patch_node(nodes[c][1], {"spec": {"unschedulable": False}})
        entry = fabric.entry(f"busy-{c}")  # its pod bound where planned: nothing owed that a span could collide with
        (node,) = planned(entry)
        fabric.bind_pod(f"busy-{c}-0", node, 4, decision_id=entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])
    ctrl.stop()
    gang(fabric, "gang")


def gang(fabric: Fabric, name: str) -> None:
    """An elastic 2 × 4-GPU gang that weighs waiting for one clique against spanning now."""
    fabric.kueue.create(workload(fabric.ns, name, [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}}))
    fabric.kueue.reserve_quota(fabric.ns, name, fabric.cq, fabric.flavor)


def settings(fabric: Fabric, cost: CostSettings) -> Settings:
    return Settings(kueue=KueueSettings(admission_check=fabric.check), config=ConfigSettings(namespace=fabric.ns), cost=cost)


@pytest.mark.apiserver
def test_a_waiting_gang_gets_its_span_priced_in_the_record_and_explain(fabric: Fabric) -> None:
    one_clique_busy(fabric)
    ctrl = fabric.controller()
    (verdict,) = run(ctrl)
    est = ctrl.queue_state.outlook.estimator.estimate(f"{fabric.ns}/lq", 8)
    assert est is not None and est.samples == len(RUNS)
    got = PRICED.search(verdict.message)
    assert got is not None, verdict.message
    wait, slowdown, cost, runtime = int(got.group(1)), float(got.group(2)), int(got.group(3)), int(got.group(4))
    assert (wait, runtime) == (LIMIT, round(est.seconds))
    assert slowdown > 1.0 and cost == round(runtime * (slowdown - 1.0))
    said = got.group(0)
    (record,) = [r for r in fabric.decision_records() if r["workload"] == "gang"]
    assert said in record["message"]
    explained = ctrl.explain(f"{fabric.ns}/gang")
    assert said in explained["check"]["message"]
    # the same numbers as data: the wait comes from the busy Workloads' limits, the runtime was learned
    (weighed,) = record["wait_or_span"]
    assert weighed["flavor"] == fabric.flavor and weighed["kind"] == "span" and weighed["domain"]
    assert (weighed["expected_wait_seconds"], weighed["wait_error_seconds"], weighed["wait_basis"]) == (LIMIT, 0.0, "limits")
    assert round(weighed["span_slowdown"], 3) == slowdown and round(weighed["span_cost_seconds"]) == cost
    assert (round(weighed["expected_runtime_seconds"]), weighed["runtime_basis"]) == (runtime, "learned")
    assert weighed["chose"] == {"spans now": "span", "waits": "wait"}[got.group(5)] and record_problems(record) == []
    assert [w["chose"] for w in explained["now"]["wait_or_span"]] == [weighed["chose"]]


@pytest.mark.apiserver
def test_the_price_decides_between_waiting_and_spanning(fabric: Fabric) -> None:
    one_clique_busy(fabric)
    choices = []
    for name, cost in (("gang", CostSettings(link_model="flat-ring")), ("again", CostSettings())):  # the pessimistic price first
        if name != "gang":
            gang(fabric, name)  # the same gang anew (the first one now waits out its Retry)
        ctrl = fabric.controller(settings=settings(fabric, cost))
        (verdict,) = run(ctrl)
        got = PRICED.search(verdict.message)
        assert got is not None, verdict.message
        wait, span_cost = int(got.group(1)), int(got.group(3))
        expected = "span" if wait > span_cost else "wait"
        assert got.group(5) == {"span": "spans now", "wait": "waits"}[expected]
        assert verdict.outcome == {"span": "admit", "wait": "wait"}[expected]
        choices.append(expected)
        ctrl.stop()
    assert choices == ["wait", "span"]  # same wait, same runtime: only the price differs, and it decides
    assert {n.rsplit("n", 1)[0] for n in planned(fabric.entry("again"))} == {fabric.clique(0, 0), fabric.clique(0, 1)}  # the span


@pytest.mark.apiserver
def test_free_gpus_in_scraps_too_small_for_a_pod_are_no_room_in_the_record(fabric: Fabric) -> None:
    # clique 0 has 4 GPUs free, 1 and 3 per node: room for one of the gang's 2-GPU pods, not two,
    # until its 3-GPU Workload ends at 2000 s. The wait said is those 2000 s, never 0 s
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["elastic"].update({"relaxAfterSeconds": 10 * LIMIT, "queueing": {"waitOrSpan": True}})
    fabric.install(doc, nodes=False)
    nodes = {(c, i): fabric.add_node(0, c, i) for c in range(2) for i in range(2)}
    ctrl = fabric.controller()
    for (c, i), (gpus, limit) in {(0, 0): (3, 2000), (0, 1): (1, 6000), (1, 0): (2, 5000), (1, 1): (4, 5000)}.items():
        for at, node in nodes.items():  # only the node it is for is open while it is placed
            fabric.core.patch_node(node, {"spec": {"unschedulable": at != (c, i)}})
        name = f"busy-{c}{i}"
        manifest = workload(fabric.ns, name, [("main", 1, gpus)])
        manifest["spec"]["maximumExecutionTimeSeconds"] = limit
        fabric.kueue.create(manifest)
        fabric.kueue.reserve_quota(fabric.ns, name, fabric.cq, fabric.flavor)
        assert [v.outcome for v in run(ctrl)] == ["admit"]
        entry = fabric.entry(name)
        assert planned(entry) == {nodes[(c, i)]: 1}
        fabric.bind_pod(f"{name}-0", nodes[(c, i)], gpus, decision_id=entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])
    for node in nodes.values():
        fabric.core.patch_node(node, {"spec": {"unschedulable": False}})
    ctrl.stop()
    manifest = workload(fabric.ns, "gang", [("main", 2, 2)], podset_annotations={"main": {"atoll.dev/profile": "elastic"}})
    manifest["spec"]["maximumExecutionTimeSeconds"] = 2400
    fabric.kueue.create(manifest)
    fabric.kueue.reserve_quota(fabric.ns, "gang", fabric.cq, fabric.flavor)
    ctrl = fabric.controller()
    (verdict,) = run(ctrl)
    got = PRICED.search(verdict.message)
    assert got is not None, verdict.message
    wait, span_cost = int(got.group(1)), int(got.group(3))
    assert wait == 2000 and f"/{fabric.clique(0, 0)})" in got.group(0) and int(got.group(4)) == 2400
    assert verdict.outcome == ("admit" if wait > span_cost else "wait")  # read as 0 s, it could only ever wait
    (record,) = [r for r in fabric.decision_records() if r["workload"] == "gang"]
    assert got.group(0) in record["message"]

"""The controller's own decision at fleet scale: Workloads of one shape share the engine's
remembered answers although each is read afresh (``Decider.read``), and the whole-flavor fabric
gauges are measured periodically, not on every decision. Verdicts are those of a Decider that
reads every Workload on its own. What the first decision after a start would pay once (the
kernels, the flavor's snapshot, what admitted Workloads owe on it) is paid before it, and so is
what a profiles reload drops."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import admission.controller._cache as cache_module
import policies._decision as engine
import topology._finder as finder
import topology._kernels as kernels
from admission.controller import ConfigSettings, Controller, Decider, KueueSettings, Recorder, Settings, parse_workload
from admission.controller._ledger import Ledger
from admission.kube import CONFIGMAPS, WORKLOADS, ManualClock, WatchEvent
from admission.simulator._port import CHECK_NAME, PROFILES_NAMESPACE, MemoryCluster, cluster_objects, profiles_for_cluster, workload_object
from policies import load_profiles_file
from tests.admission.fabric import Fabric, profiles_doc, run
from topology import HOSTNAME_LABEL, ResourceVector, Snapshot, load_cluster_model

CONFIG = Path(__file__).resolve().parents[3] / "config"


class Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


def template(gpus: int, profile: str = "strict") -> dict[str, Any]:
    return {"metadata": {"annotations": {"atoll.dev/profile": profile}},
            "spec": {"containers": [{"name": "c", "image": "img", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}


def controller(*workloads: dict[str, Any]) -> Controller:
    cluster = load_cluster_model(CONFIG / "clusters" / "gb200-nvl72-superpod.yaml")
    doc = profiles_for_cluster(load_profiles_file(CONFIG / "profiles.yaml"), cluster)
    port = MemoryCluster(ManualClock(1_767_225_600.0)).load(cluster_objects(cluster, doc))
    for w in workloads:
        port.put(WORKLOADS, w)
    settings = Settings(kueue=KueueSettings(admission_check=CHECK_NAME), config=ConfigSettings(namespace=PROFILES_NAMESPACE))
    ids = iter(range(10**6))
    ctrl = Controller(port, settings=settings, clock=port.clock, recorder=Recorder(Discard()),  # type: ignore[arg-type]
                      new_id=lambda: f"d{next(ids)}")
    ctrl.sync()
    return ctrl


def gang(name: str, pods: int, gpus: int) -> dict[str, Any]:
    return workload_object(name, [{"name": "main", "count": pods, "template": template(gpus)}], flavor="gb200", namespace="team")


def test_workloads_of_one_shape_share_the_engines_remembered_request(monkeypatch: pytest.MonkeyPatch) -> None:
    ctrl = controller(*(gang(f"w{i}", 2, 4) for i in range(4)), gang("other", 3, 4))
    prepared: list[Any] = []
    real = engine._prepare_now

    def counted(*args: Any, **kw: Any) -> Any:
        prepared.append(args[1])
        return real(*args, **kw)

    monkeypatch.setattr(engine, "_prepare_now", counted)
    verdicts = ctrl.process()
    assert [v.outcome for v in verdicts] == ["admit"] * 5
    assert len(prepared) == 2  # one per shape, not one per Workload


def test_read_is_parse_workload_with_one_instance_per_value() -> None:
    ctrl = controller()
    a, b = gang("a", 2, 4), gang("b", 2, 4)
    va, vb = ctrl.decider.read(a), ctrl.decider.read(b)
    assert va == parse_workload(a) and vb == parse_workload(b)
    assert va.podsets[0] is vb.podsets[0]
    assert ctrl.decider.read(gang("c", 3, 4)).podsets[0] is not va.podsets[0]


def test_verdicts_are_those_of_a_decider_reading_each_workload_alone() -> None:
    shapes = [(2, 4), (1, 2), (2, 4), (18, 4), (1, 2), (36, 4), (2, 4), (1, 1)]
    ctrl = controller(*(gang(f"w{i}", p, g) for i, (p, g) in enumerate(shapes)))
    fresh = Decider(ctrl.cache, ctrl.ledger, ctrl.settings)
    fresh.read = lambda obj: parse_workload(obj)  # type: ignore[method-assign]
    for key in ctrl.pending():
        obj = ctrl.cache.objects[WORKLOADS][key]
        mine, theirs = ctrl.decider.evaluate(obj, "d", 0.0), fresh.evaluate(obj, "d", 0.0)
        assert (mine.outcome, mine.message, mine.podset_updates, mine.why_not) == (theirs.outcome, theirs.message, theirs.podset_updates,
                                                                                   theirs.why_not)
        assert ctrl.reconcile(key) is not None


def test_fabric_gauges_are_measured_periodically_not_per_decision() -> None:
    ctrl = controller(gang("a", 18, 4), gang("b", 18, 4), gang("c", 18, 4))
    free = ctrl.metrics.free_gpus.labels("gb200")
    total = ctrl.cache.snapshot("gb200").total_gpus()
    key_a, key_b, key_c = ctrl.pending()
    assert ctrl.reconcile(key_a).outcome == "admit"  # type: ignore[union-attr]
    assert free._value.get() == total - 72  # the first decision on a flavor measures it
    assert ctrl.reconcile(key_b).outcome == "admit"  # type: ignore[union-attr]
    assert free._value.get() == total - 72  # within the period: not measured again
    ctrl.clock.advance(Controller.GAUGE_SECONDS)  # type: ignore[attr-defined]
    assert ctrl.reconcile(key_c).outcome == "admit"  # type: ignore[union-attr]
    assert free._value.get() == total - 3 * 72


# ---------------------------------------------------------------------- a domain held for a preempting gang

SU, CLIQUE = "network.example.com/su", "nvidia.com/gpu.clique"
HELD = ("u0r0n0", "u0r0n1")


def held_rack(free: set[str], enforcement: str = "domain", profile: str = "spanning") -> Any:
    """2 scalable units × 3 racks × 2 nodes of 4 GPUs, every node used but ``free``; rack u0/r0 is
    held for a preempting gang (its victims still going)."""
    from admission.simulator._deployed import DeployedAtoll
    from policies import load_profiles
    from topology import ClusterModel

    doc = load_profiles(f"""
defaultProfile: spanning
profiles:
  spanning: {{preferredLevel: {CLIQUE}, maxSpanLevel: {SU}, relaxAfterSeconds: 0}}
  anywhere: {{}}
""")
    model = ClusterModel.model_validate({"name": "test", "flavors": [{
        "name": "f", "topology": "t",
        "levels": [{"label": SU, "bandwidthGBps": 50}, {"label": CLIQUE, "bandwidthGBps": 1800}],
        "nodeAllocatable": {"nvidia.com/gpu": 4, "cpu": "64", "memory": "512Gi", "pods": 110},
        "nodes": [{"name": f"u{u}r{r}n{n}", "labels": {SU: f"u{u}", CLIQUE: f"u{u}r{r}"},
                   "used": {"nvidia.com/gpu": 0 if f"u{u}r{r}n{n}" in free else 4}}
                  for u in range(2) for r in range(3) for n in range(2)]}]})
    a = DeployedAtoll(f"atoll-{profile}", profile, doc, model, enforcement=enforcement)
    a.decider.holds["f"] = {"gang-uid": HELD}
    return a


def spanning(a: Any, pods: int = 2) -> Any:
    from topology import ResourceVector

    return a.decide(1, a.workload(1, 0, pods, ResourceVector(gpu=4, cpu_milli=1000, memory_mib=1024), "training"), 1000.0)


def test_under_domain_enforcement_no_selector_reaches_a_domain_held_for_another_gang() -> None:
    # a span over u0's free nodes would get the selector su=u0, and kube-scheduler could bind its
    # pods in u0/r0 as the victims leave it; the span over u1 is taken instead
    v = spanning(held_rack({"u0r1n0", "u0r2n0", "u1r0n0", "u1r1n0", "u1r2n0"}))
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} <= {"u1r0n0", "u1r1n0", "u1r2n0"}
    assert [u["nodeSelector"] for u in v.podset_updates] == [{SU: "u1"}]
    # with no such span it waits, and says why
    w = spanning(held_rack({"u0r1n0", "u0r2n0"}))
    assert w.outcome == "wait" and f"nodeSelector domain ({SU}=u0) that holds nodes cleared for another gang" in w.message
    # a selector of the whole flavor reaches every domain: it waits too
    w = spanning(held_rack({"u0r1n0", "u1r0n0"}, profile="anywhere"))
    assert w.outcome == "wait" and "(the whole flavor) that holds nodes cleared for another gang" in w.message
    # a one-pod Workload's selector names its node: never held back
    v = spanning(held_rack({"u0r1n0"}, profile="anywhere"), pods=1)
    assert v.outcome == "admit" and [u["nodeSelector"] for u in v.podset_updates] == [{"kubernetes.io/hostname": "u0r1n0"}]


def test_under_exact_enforcement_a_selector_may_reach_a_held_domain() -> None:
    # each pod is pinned to its planned node: the held rack is safe whatever the selector
    v = spanning(held_rack({"u0r1n0", "u0r2n0"}, enforcement="exact"))
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} == {"u0r1n0", "u0r2n0"}


# ---------------------------------------------------------------------- free GPUs reserved for a waiting gang

def reserved_rack(free: set[str], enforcement: str = "domain", profile: str = "spanning") -> Any:
    """``held_rack``'s cluster with no hold; instead rack u0/r0's nodes (free) are reserved for a waiting gang."""
    from admission.queue import Reservation

    a = held_rack(free | set(HELD), enforcement, profile)
    a.decider.holds.clear()
    assert a.outlook.reservations.add(Reservation("other/gang", "f", CLIQUE, ("u0", "u0r0"), tuple((n, 4) for n in HELD), 0.0, None),
                                            limit=1)
    return a


def test_under_domain_enforcement_no_selector_reaches_free_gpus_reserved_for_another_gang() -> None:
    # a span over u0's free nodes would get the selector su=u0, and kube-scheduler (least-allocated) would bind
    # its pods on the reserved rack's empty nodes first; the span over u1 is taken instead
    v = spanning(reserved_rack({"u0r1n0", "u0r2n0", "u1r0n0", "u1r1n0", "u1r2n0"}))
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} <= {"u1r0n0", "u1r1n0", "u1r2n0"}
    assert [u["nodeSelector"] for u in v.podset_updates] == [{SU: "u1"}]
    # with no such span it waits, and says why
    w = spanning(reserved_rack({"u0r1n0", "u0r2n0"}))
    assert w.outcome == "wait" and f"nodeSelector domain ({SU}=u0) that holds free GPUs reserved for another gang" in w.message
    assert "waiting until the reservation ends" in w.message
    # a one-pod Workload's selector names its node: never held back
    v = spanning(reserved_rack({"u0r1n0"}, profile="anywhere"), pods=1)
    assert v.outcome == "admit" and [u["nodeSelector"] for u in v.podset_updates] == [{"kubernetes.io/hostname": "u0r1n0"}]
    # under exact enforcement each pod is pinned to its planned node: the reserved rack is safe whatever the selector
    v = spanning(reserved_rack({"u0r1n0", "u0r2n0"}, enforcement="exact"))
    assert v.outcome == "admit" and {n for p in v.placements for n in p.nodes} == {"u0r1n0", "u0r2n0"}


def test_under_domain_enforcement_no_selector_of_a_podset_without_gpus_reaches_a_domain_held_for_another_gang() -> None:
    # three CPU-only pods, one per node, on the Atoll flavor: su=u0 would let kube-scheduler bind one in the held rack u0/r0,
    # taking CPU, memory and a pod slot the preempting gang needs; the span over u1 is taken instead
    a = held_rack(set())
    obj = a.workload(1, 0, 3, ResourceVector(gpu=0, cpu_milli=40_000, memory_mib=1024), "training")
    obj["status"]["admission"]["podSetAssignments"][0]["flavors"] = {"cpu": "f"}
    a.views.pop(1, None)
    v = a.decide(1, obj, 1000.0)
    assert v.outcome == "admit" and [u["nodeSelector"] for u in v.podset_updates] == [{SU: "u1"}]
    # GPUs reserved for a waiting gang are not what a pod without GPUs takes: it is not held away from them
    b = reserved_rack(set())
    obj = b.workload(1, 0, 3, ResourceVector(gpu=0, cpu_milli=40_000, memory_mib=1024), "training")
    obj["status"]["admission"]["podSetAssignments"][0]["flavors"] = {"cpu": "f"}
    b.views.pop(1, None)
    assert [u["nodeSelector"] for u in b.decide(1, obj, 1000.0).podset_updates] == [{SU: "u0"}]


# ---------------------------------------------------------------------- what a start pays instead of the first decision

def test_the_kernel_warm_up_calls_every_kernel_the_finder_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Decider.warm_up`` (a deployed controller's, before its first decision) calls every numba
    kernel the finder calls from Python, so none is compiled or loaded inside a decision: the
    placement kernel, and the two that count why a PodSet fits no domain (a wait's reason)."""
    names = set(re.findall(r"_kernels\.([a-z_]+)\(", Path(finder.__file__).read_text())) | {"place_podset"}
    assert {"capacity_summary", "_layer_prefix"} <= names
    calls: Counter[str] = Counter()

    def counting(name: str, kernel: Any) -> Any:
        def counted(*args: Any, **kw: Any) -> Any:
            calls[name] += 1
            return kernel(*args, **kw)
        return counted

    monkeypatch.setitem(finder._KERNELS, "numba", counting("place_podset", finder._KERNELS["numba"]))
    for name in names - {"place_podset"}:
        monkeypatch.setattr(kernels, name, counting(name, getattr(kernels, name)))
    Decider.warm_up()
    assert set(calls) == names


def count_builds(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[object]]:
    """From now on, the flavors whose snapshot a cache builds and the reservations whose owed pods
    a ledger resolves (on ledgers made from now on: a book keeps the resolver it was made with)."""
    built: list[str] = []
    resolved: list[object] = []

    class Counted(Snapshot):
        def __init__(self, flavor: str, *args: Any, **kw: Any) -> None:
            built.append(flavor)
            super().__init__(flavor, *args, **kw)

    real_resolve = Ledger._resolve

    def resolve(self: Ledger, key: Any, snapshot: Any) -> Any:
        resolved.append(key)
        return real_resolve(self, key, snapshot)

    monkeypatch.setattr(cache_module, "Snapshot", Counted)
    monkeypatch.setattr(Ledger, "_resolve", resolve)
    return built, resolved


def count_labels(ctrl: Controller, read: list[str] | None = None) -> list[str]:
    """From now on, the nodes whose labels ``ctrl``'s ledger reads (appended to ``read``)."""
    read = [] if read is None else read
    real = ctrl.ledger.node_labels
    assert real is not None

    def node_labels(name: str) -> Any:
        read.append(name)
        return real(name)

    ctrl.ledger.node_labels = node_labels
    return read


def lists_alone(ctrl: Controller, fabric: Fabric) -> Controller:
    """``ctrl`` with every watched resource listed and applied as ``sync`` does, without its warm-up."""
    for w in ctrl.watches:
        ctrl._apply_list(w.resource, fabric.port.list(w.resource, namespace=w.namespace, field_selector=w.field_selector).items)
    return ctrl


@pytest.mark.apiserver
def test_the_flavors_snapshot_and_owed_pods_warmed_at_the_first_list_are_what_the_first_decision_builds_cold(
        fabric: Fabric, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sync`` builds the flavor's snapshot and resolves on it what admitted Workloads owe (an
    admitted Workload whose pod is not bound yet, planned by node name) before the first decision:
    that decision builds no snapshot, resolves no reservation and reads no node's labels for the
    hostname index, and decides what a controller that builds all of it in its first decision
    decides, on the same free GPUs."""
    fabric.install()
    fabric.submit("runner", [("main", 1, 4)])
    (runner,) = run(fabric.controller())  # admitted on one node; its pod never binds here: owed
    assert runner.outcome == "admit" and list(runner.podset_updates[0]["nodeSelector"]) == [HOSTNAME_LABEL]
    fabric.submit("next", [("main", 2, 4)])
    built, resolved = count_builds(monkeypatch)
    ids = iter(range(10**6))
    warm = fabric.controller(new_id=lambda: f"w{next(ids)}")
    warm.sync()
    assert built == [fabric.flavor] and len(resolved) == 1  # the runner's owed pod, resolved at the start
    cold = lists_alone(fabric.controller(new_id=lambda: f"w{next(ids)}"), fabric)
    labels_read = count_labels(warm)
    key = f"{fabric.ns}/next"
    snap = warm.cache.snapshot(fabric.flavor)
    owed = warm.ledger.witness(snap)
    assert built == [fabric.flavor] and len(resolved) == 1  # kept: nothing changed since the start
    obj = warm.cache.objects[WORKLOADS][key]
    mine = warm.decider.evaluate(obj, "d", fabric.clock.now())
    assert built == [fabric.flavor] and len(resolved) == 1 and labels_read == []
    theirs = cold.decider.evaluate(obj, "d", fabric.clock.now())
    assert built == [fabric.flavor, fabric.flavor] and len(resolved) == 2  # cold: built and resolved in the decision
    cold_snap = cold.cache.snapshot(fabric.flavor)
    assert snap.node_names == cold_snap.node_names and np.array_equal(snap.free, cold_snap.free)
    assert owed.used_rows()[0].tolist() == cold.ledger.witness(cold_snap).used_rows()[0].tolist() != []
    assert (mine.outcome, mine.message, mine.podset_updates) == (theirs.outcome, theirs.message, theirs.podset_updates)
    assert mine.outcome == "admit"


@pytest.mark.apiserver
def test_a_profiles_reload_builds_the_flavors_snapshot_and_owed_pods_again_before_the_next_decision_in_leader_and_standby(
        fabric: Fabric, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new profiles document drops every flavor's snapshot (its links are built from the
    document) and what admitted Workloads owe resolved on it; the reload builds both again, in
    the leader and in a standby alike, so the next decision builds no snapshot, resolves no
    reservation and reads no node's labels, and decides what a controller that builds all of it
    cold decides, on the same snapshot. A document equal to the one in force keeps the snapshot."""
    fabric.install()
    fabric.submit("runner", [("main", 1, 4)])
    (runner,) = run(fabric.controller())  # admitted on one node; its pod never binds here: owed
    assert runner.outcome == "admit"
    fabric.submit("next", [("main", 2, 4)])
    built, resolved = count_builds(monkeypatch)
    ids = iter(range(10**6))
    leader, standby = fabric.controller(new_id=lambda: f"w{next(ids)}"), fabric.controller(new_id=lambda: f"w{next(ids)}")
    for ctrl in (leader, standby):
        ctrl.sync()
    standby._leading.clear()  # as ``start(leading=False)`` leaves it
    old = leader.cache.snapshot(fabric.flavor)
    assert built == [fabric.flavor] * 2 and len(resolved) == 2  # at the start
    del built[:], resolved[:]
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["flavors"][fabric.flavor]["links"] = {CLIQUE: {"bandwidthGBps": 900.0}}

    def reload() -> None:
        cm = fabric.port.get(CONFIGMAPS, "atoll-policies", fabric.ns)
        for ctrl in (leader, standby):
            ctrl._apply_event(CONFIGMAPS, WatchEvent("MODIFIED", cm))  # only the ConfigMap's event, as the watch delivers it

    fabric.set_profiles(doc)
    reload()
    assert built == [fabric.flavor] * 2 and len(resolved) == 2  # one snapshot and one owed pod each, at the reload
    snap = leader.cache.snapshot(fabric.flavor)
    assert snap is not old and [lv.bandwidth_gbps for lv in snap.levels if lv.label == CLIQUE] == [900.0]
    owed = leader.ledger.witness(snap)
    labels_read = count_labels(leader)
    obj = leader.cache.objects[WORKLOADS][f"{fabric.ns}/next"]
    mine = leader.decider.evaluate(obj, "d", fabric.clock.now())
    assert built == [fabric.flavor] * 2 and len(resolved) == 2 and labels_read == []
    cold = lists_alone(fabric.controller(new_id=lambda: f"w{next(ids)}"), fabric)
    theirs = cold.decider.evaluate(obj, "d", fabric.clock.now())
    assert built == [fabric.flavor] * 3 and len(resolved) == 3  # cold: built and resolved in the decision
    cold_snap = cold.cache.snapshot(fabric.flavor)
    for ctrl in (leader, standby):
        warm = ctrl.cache.snapshot(fabric.flavor)
        assert (warm.node_names, warm.levels) == (cold_snap.node_names, cold_snap.levels) and np.array_equal(warm.free, cold_snap.free)
        assert ctrl.ledger.witness(warm).used_rows()[0].tolist() == cold.ledger.witness(cold_snap).used_rows()[0].tolist() != []
    assert owed.used_rows()[0].tolist() != []
    assert (mine.outcome, mine.message, mine.podset_updates) == (theirs.outcome, theirs.message, theirs.podset_updates)
    assert mine.outcome == "admit"
    doc["classes"] = dict(doc["classes"])  # the same document written again: a new version, nothing changed
    fabric.set_profiles(doc)
    reload()
    assert built == [fabric.flavor] * 3 and leader.cache.snapshot(fabric.flavor) is snap


@pytest.mark.apiserver
def test_the_node_index_by_hostname_is_built_at_the_start_so_the_first_admitted_workload_is_resolved_without_reading_nodes(
        fabric: Fabric) -> None:
    """Nothing is owed at the start, so no reservation builds the index of the flavor's nodes by
    hostname then; ``sync`` builds it all the same, and the first Workload admitted on one node
    (its nodeSelector a hostname) has its owed pod resolved without reading any node's labels, on
    the node it was planned on. A controller without the warm-up reads every node's labels there."""
    fabric.install()
    fabric.submit("a", [("main", 1, 4)])
    key = f"{fabric.ns}/a"
    labels_read: list[str] = []
    ctrls = []
    for warmed in (True, False):
        ctrl = fabric.controller()
        if warmed:
            ctrl.sync()
        else:
            lists_alone(ctrl, fabric)
        count_labels(ctrl, labels_read)
        verdict = ctrl.evaluate(ctrl.cache.objects[WORKLOADS][key], "d")  # what a decision reads: no reservation yet
        assert verdict.outcome == "admit" and list(verdict.podset_updates[0]["nodeSelector"]) == [HOSTNAME_LABEL]
        obj = ctrl.cache.objects[WORKLOADS][key]
        status = ctrl.status.prepare(obj, verdict, ctrl.check_names, [])
        assert status is not None
        ctrl.ledger.observe(ctrl.status.booked(obj, status), ctrl.check_names)  # booked as when its write is sent
        snap = ctrl.cache.snapshot(fabric.flavor)
        nodes = ctrl.ledger.witness(snap).used_rows()[0].tolist()
        assert [snap.node_names[i] for i in nodes] == [verdict.podset_updates[0]["nodeSelector"][HOSTNAME_LABEL]]
        ctrls.append(len(labels_read))
    assert ctrls[0] == 0 and ctrls[1] > 0

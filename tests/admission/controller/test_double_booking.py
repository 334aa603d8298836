"""Domain enforcement: the scheduler may bind one Workload's pods on the nodes planned for
another. What the second Workload still owes must keep its room somewhere in its island, so no
third Workload is handed the same GPUs (the ledger counts owed pods, not planned nodes)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from structlog.testing import capture_logs

from admission.controller import Ledger, Reservation, encode_planned
from admission.controller._invariant import OwedPods, check_invariant
from policies import PodSetSpec, Profile, decide
from topology import Level, NodeInfo, ResourceVector, Snapshot

BLOCK = "network.example.com/block"
CLIQUE = "nvidia.com/gpu.clique"
CHECK = "atoll-check"
POD = ResourceVector(gpu=4, cpu_milli=1000)
NODE = ResourceVector(gpu=4, cpu_milli=16000, memory_mib=65536, pods=110)
STRICT = Profile(requiredLevel=CLIQUE)


def admitted(name: str, planned: Mapping[str, int], *, pods: int = 2, island: str = "i0", gpus: int = 4) -> dict[str, Any]:
    """A Workload as the ledger reads it after Atoll's Ready: quota reserved, island selector, planned nodes."""
    return {
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": pods, "template": {"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "1"}}}]}}}]},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "main", "count": pods, "flavors": {"nvidia.com/gpu": "gpu", "cpu": "gpu"}}]},
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admissionChecks": [{"name": CHECK, "state": "Ready", "podSetUpdates": [{
                "name": "main", "nodeSelector": {CLIQUE: island},
                "annotations": {"atoll.dev/decision-id": f"d-{name}", "atoll.dev/planned-nodes": encode_planned(list(planned.items()), 4000)},
            }]}],
        },
    }


class Fabric:
    """One flavor: an island of six 4-GPU nodes (n1…n6), pods bound by decision id."""

    def __init__(self, nodes: int = 6) -> None:
        self.names = [f"n{i}" for i in range(1, nodes + 1)]
        self.bound: dict[str, Counter[str]] = {}  # decision id → node → pods

    def bind(self, decision_id: str, node: str) -> None:
        self.bound.setdefault(decision_id, Counter())[node] += 1

    def bound_pods(self, decision_id: str) -> dict[str, Counter[str]]:
        return {"main": self.bound[decision_id]} if decision_id in self.bound else {}

    def usage(self) -> dict[str, ResourceVector]:
        out: dict[str, ResourceVector] = {}
        for pods in self.bound.values():
            for node, k in pods.items():
                out[node] = out.get(node, ResourceVector()) + ResourceVector(POD.gpu, POD.cpu_milli, 0, 1).scaled(k)
        return out

    def snapshot(self) -> Snapshot:
        used = self.usage()
        return Snapshot("gpu", [Level(BLOCK), Level(CLIQUE)],
                        [NodeInfo(n, {BLOCK: "b0", CLIQUE: "i0"}, NODE, used.get(n, ResourceVector())) for n in self.names])


def a_bound_on_b_planned_nodes(ledger: Ledger, fabric: Fabric) -> None:
    """A was planned on n1/n2 and B on n3/n4; the scheduler bound A's two pods on n3 and n4."""
    ledger.observe(admitted("a", {"n1": 1, "n2": 1}), [CHECK])
    ledger.observe(admitted("b", {"n3": 1, "n4": 1}), [CHECK])
    fabric.bind("d-a", "n3")
    fabric.bind("d-a", "n4")
    ledger.pods_changed("d-a")


def admit_what_fits(ledger: Ledger, fabric: Fabric, names: list[str]) -> list[str]:
    """Decide each further 8-GPU Workload (2 pods × 4 GPUs, one island) as the controller does."""
    out = []
    for name in names:
        snap = fabric.snapshot()
        ledger.apply(snap)
        decision = decide(snap, [PodSetSpec("main", 2, POD)], profile_name="strict", profile=STRICT, now=0.0)
        if decision.outcome == "admit":
            assert decision.placement is not None
            ps = decision.placement.podsets[0]
            ledger.observe(admitted(name, dict(zip(ps.nodes, ps.pods_per_node))), [CHECK])
            out.append(name)
    return out


class ClippingLedger(Ledger):
    """The rule before owed pods were counted: a PodSet's unbound pods count on its planned nodes
    only, clipped at what is free there (so pods planned on a node someone else took vanish)."""

    def __init__(self, fabric: Fabric) -> None:
        super().__init__(bound=fabric.bound_pods)
        self.fabric = fabric

    def _planned(self, r: Reservation) -> list[tuple[str, int]]:
        return self.outstanding(r, self.fabric.bound_pods(r.decision_id))

    def apply(self, snapshot: Snapshot, *, exclude_uid: str | None = None) -> int:
        for r in self.reservations(snapshot.flavor):
            for node, pods in self._planned(r):
                snapshot.reserve(node, POD.scaled(pods))  # reserve() clips at zero
        return 0

    def owed(self, snapshot: Snapshot) -> list[OwedPods]:
        return [OwedPods(r.workload, r.podset, sum(k for _, k in self._planned(r)), r.per_pod, snapshot.node_names,
                         tuple(self._planned(r)), tuple(self._planned(r))) for r in self.reservations(snapshot.flavor)]


def allocatable(fabric: Fabric) -> dict[str, ResourceVector]:
    return {n: NODE for n in fabric.names}


# ----------------------------------------------------------------------------- the scenario


def test_owed_pods_keep_their_room_when_another_workload_takes_their_planned_nodes() -> None:
    fabric = Fabric()
    ledger = Ledger(bound=fabric.bound_pods)
    a_bound_on_b_planned_nodes(ledger, fabric)

    snap = fabric.snapshot()
    assert ledger.apply(snap) == 8  # B's two pods, A's are bound
    assert ledger.shortfalls == ()
    (b,) = ledger.owed(fabric.snapshot())
    assert (b.workload, b.pods, b.witness) == ("team/b", 2, (("n1", 1), ("n2", 1)))  # planned n3/n4 are A's now

    assert admit_what_fits(ledger, fabric, ["c", "d"]) == ["c"]  # n5+n6 for C; D waits: nothing left for it
    assert check_invariant(allocatable(fabric), fabric.usage(), ledger.owed(fabric.snapshot())) == []
    owed_pods = sum(o.pods for o in ledger.owed(fabric.snapshot()))
    empty = sum(1 for n in fabric.names if n not in fabric.usage())
    assert (owed_pods, empty) == (4, 4)  # every owed 4-GPU pod has an empty 4-GPU node


def test_the_clipping_rule_double_books_and_the_invariant_says_where() -> None:
    fabric = Fabric()
    old = ClippingLedger(fabric)
    a_bound_on_b_planned_nodes(old, fabric)
    # Under the clipping rule B's pods sit on full n3/n4 and count for nothing: the invariant names them.
    violations = check_invariant(allocatable(fabric), fabric.usage(), old.owed(fabric.snapshot()))
    assert {(v.kind, v.workloads, v.nodes) for v in violations} == {
        ("overbooked", ("team/b",), ("n3",)), ("overbooked", ("team/b",), ("n4",))}

    assert admit_what_fits(old, fabric, ["c", "d"]) == ["c", "d"]  # two more 8-GPU Workloads on four empty nodes
    truth = Ledger(bound=fabric.bound_pods)  # what is really owed: B, C and D, six 4-GPU pods
    for name, planned in (("a", {"n1": 1, "n2": 1}), ("b", {"n3": 1, "n4": 1})):
        truth.observe(admitted(name, planned), [CHECK])
    for r in old.reservations():
        if r.workload in ("team/c", "team/d"):
            truth.observe(admitted(r.workload.split("/")[1], dict(r.planned)), [CHECK])
    owed = truth.owed(fabric.snapshot())
    assert sum(o.pods for o in owed) == 6
    (unplaceable,) = [v for v in check_invariant(allocatable(fabric), fabric.usage(), owed) if v.kind == "unplaceable"]
    assert unplaceable.workloads == ("team/b", "team/c", "team/d")
    assert unplaceable.nodes == tuple(fabric.names)
    # the fixed ledger sees the same state as a shortfall and admits nothing more in that island
    snap = fabric.snapshot()
    truth.apply(snap)
    assert sum(s.missing for s in truth.shortfalls) == 2 and truth.shortfall_applies == 1
    assert snap.free[:, 0].sum() == 0
    assert decide(snap, [PodSetSpec("main", 1, POD)], profile_name="strict", profile=STRICT, now=0.0).outcome == "wait"


def test_a_ledger_that_forgets_owed_pods_is_caught() -> None:
    fabric = Fabric()
    ledger = Ledger(bound=fabric.bound_pods)
    a_bound_on_b_planned_nodes(ledger, fabric)
    honest = ledger.owed(fabric.snapshot())
    assert check_invariant(allocatable(fabric), fabric.usage(), honest) == []
    forgot = [OwedPods(o.workload, o.podset, o.pods, o.per_pod, o.domain, o.planned, ()) for o in honest]
    (v,) = check_invariant(allocatable(fabric), fabric.usage(), forgot)
    assert (v.kind, v.workloads) == ("uncounted", ("team/b",))
    outside = [OwedPods(o.workload, o.podset, o.pods, o.per_pod, ("n1",), o.planned, o.witness) for o in honest]
    assert {v.kind for v in check_invariant(allocatable(fabric), fabric.usage(), outside)} == {"outside-domain", "unplaceable"}


def test_owed_pods_follow_their_selector_not_their_planned_nodes() -> None:
    """Two islands: a PodSet owed in i0 is never counted in i1, even when i0 is short."""
    fabric = Fabric(nodes=4)
    used = fabric.usage

    def snapshot() -> Snapshot:
        u = used()
        return Snapshot("gpu", [Level(BLOCK), Level(CLIQUE)],
                        [NodeInfo(n, {BLOCK: "b0", CLIQUE: "i0" if n in ("n1", "n2") else "i1"}, NODE, u.get(n, ResourceVector()))
                         for n in fabric.names])

    ledger = Ledger(bound=fabric.bound_pods)
    ledger.observe(admitted("b", {"n1": 1, "n2": 1}), [CHECK])
    fabric.bind("other", "n1")  # a pod Atoll did not place took n1
    snap = snapshot()
    ledger.apply(snap)
    assert [(s.workload, s.missing) for s in ledger.shortfalls] == [("team/b", 1)]
    assert snap.free[:, 0].tolist() == [0, 0, 4, 4]  # i0 counts as full; i1 is untouched


def test_a_shortfall_says_whether_other_pods_took_the_room_or_the_domain_has_no_usable_node() -> None:
    def warned(fabric: Fabric, snap: Snapshot) -> dict[str, Any]:
        ledger = Ledger(bound=fabric.bound_pods)
        ledger.observe(admitted("b", {"n1": 1, "n2": 1}), [CHECK])
        with capture_logs() as logs:
            ledger.apply(snap)
        (warning,) = [e for e in logs if e["log_level"] == "warning"]
        return warning

    full = Fabric(nodes=4)
    for n in full.names:
        full.bind("other", n)  # pods Atoll did not place took every node of island i0
    taken = warned(full, full.snapshot())
    assert "other pods" in taken["event"] and taken["domain_nodes"] == 4
    empty = Fabric(nodes=4)  # island i0's nodes left the flavor (deleted, or no longer eligible)
    gone = warned(empty, Snapshot("gpu", [Level(BLOCK), Level(CLIQUE)],
                                  [NodeInfo(n, {BLOCK: "b0", CLIQUE: "i1"}, NODE) for n in empty.names]))
    assert "no usable node" in gone["event"] and gone["domain_nodes"] == 0


def test_apply_cost_on_a_thousand_nodes_with_two_hundred_reservations() -> None:
    """Not a limit: prints what one apply costs at this size (the decider pays it per decision)."""
    names = [f"n{i:04d}" for i in range(1000)]
    nodes = [NodeInfo(n, {BLOCK: f"b{i // 100}", CLIQUE: f"i{i // 10}"}, ResourceVector(8, 64000, 512000, 110)) for i, n in enumerate(names)]
    snap = Snapshot("gpu", [Level(BLOCK), Level(CLIQUE)], nodes)
    bound: dict[str, dict[str, Counter[str]]] = {}
    ledger = Ledger(bound=lambda d: bound.get(d, {}))
    for k in range(200):
        island = k % 100
        planned = {names[island * 10 + (k // 100) * 4 + j]: 1 for j in range(4)}
        obj = admitted(f"w{k}", planned, pods=4, island=f"i{island}", gpus=8)
        ledger.observe(obj, [CHECK])
        if k % 3 == 0:  # a third of them: the scheduler bound one pod elsewhere in the island
            bound[f"d-w{k}"] = {"main": Counter({names[island * 10 + 9 - (k // 100)]: 1})}
            ledger.pods_changed(f"d-w{k}")
    assert len(ledger) == 200
    ledger.apply(snap.fork())
    rounds = 50
    start = time.perf_counter()
    for _ in range(rounds):
        reserved = ledger.apply(snap.fork())
    per_apply_ms = (time.perf_counter() - start) / rounds * 1000
    print(f"\napply(): 1000 nodes, 200 reservations ({reserved} GPUs owed): {per_apply_ms:.2f} ms")
    assert ledger.shortfalls == ()

"""Quota headroom on the real apiserver: a ClusterQueue whose nominal GPU quota is twice the
flavor's GPUs lets Kueue reserve quota for more Workloads than the nodes hold. Atoll's check is
what keeps pods within the GPUs: it says Ready only to placements that fit the live nodes less
what Ready Workloads still owe, parks the rest with their quota, and as Workloads finish wakes the
parked ones, oldest first, into the room they free; no GPU is ever promised twice."""

from __future__ import annotations

from collections import Counter

import pytest

from admission.controller import Controller
from admission.controller._invariant import check_invariant
from tests.admission.controller.test_parking import parking
from tests.admission.fabric import CLIQUE, Fabric, planned, run
from tests.kube_objects import GROUP, VERSION

pytestmark = pytest.mark.apiserver

GANGS = 8
"""Eight gangs of two 4-GPU pods (one whole island each) on four islands of 8 GPUs: 64 GPUs of quota, 32 GPUs."""


def headroom(fabric: Fabric, factor: int = 2) -> int:
    """Install the fabric with the ClusterQueue's nominal GPU quota at ``factor`` x its nodes' GPUs; returns the quota."""
    fabric.install()
    gpus = sum(int(n.status.allocatable["nvidia.com/gpu"]) for n in fabric.core.list_node(label_selector=f"atoll.dev/test-pool={fabric.ns}").items)
    quota = factor * gpus
    cq = fabric.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", fabric.cq)
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = quota
    fabric.custom.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", fabric.cq, cq)
    return quota


def ready(fabric: Fabric, names: list[str]) -> list[str]:
    return [n for n in names if fabric.entry(n)["state"] == "Ready"]


def decision_id(fabric: Fabric, name: str) -> str:
    return str(fabric.entry(name)["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"])


def bind(fabric: Fabric, name: str) -> None:
    """The scheduler binds the gang's pods on the nodes Atoll planned."""
    for i, node in enumerate(sorted(planned(fabric.entry(name)))):
        fabric.bind_pod(f"{name}-{i}", node, 4, decision_id=decision_id(fabric, name))


def finish(fabric: Fabric, name: str) -> None:
    """The gang's pods succeed and Kueue marks its Workload finished."""
    for i in range(len(planned(fabric.entry(name)))):
        fabric.finish_pod(f"{name}-{i}")
    fabric.finish(name)


def never_double_booked(ctrl: Controller, fabric: Fabric, running: list[str]) -> None:
    """The Ready Workloads' planned nodes are disjoint, and the controller's own invariant (GPUs used
    plus GPUs owed per node within allocatable) holds on what it sees."""
    per_node: Counter[str] = Counter()
    for name in running:
        for node, pods in planned(fabric.entry(name)).items():
            per_node[node] += 4 * pods
    assert max(per_node.values()) <= 4, per_node
    ctrl.sync()
    snap = ctrl.cache.snapshot(fabric.flavor)
    assert snap is not None
    alloc = {n: ctrl.cache.nodes[n].allocatable for n in snap.node_names}
    from topology import ResourceVector

    used = {n: ctrl.cache.usage.get(n, ResourceVector()) for n in snap.node_names}
    assert check_invariant(alloc, used, ctrl.ledger.owed(snap)) == []


def test_quota_above_the_gpus_admits_only_what_fits_and_wakes_the_parked_oldest_first(fabric: Fabric) -> None:
    quota = headroom(fabric)
    assert quota == 2 * 32
    ctrl = parking(fabric)
    names = [f"g{i}" for i in range(GANGS)]
    for name in names:  # Kueue reserves quota for all eight: 64 GPUs of quota on 32 GPUs
        fabric.submit(name, [("main", 2, 4)])
    assert all(fabric.workload(n)["status"]["admission"]["clusterQueue"] == fabric.cq for n in names)

    verdicts = run(ctrl)
    assert sorted((v.outcome, v.parked) for v in verdicts) == [("admit", False)] * 4 + [("wait", True)] * 4
    first = ready(fabric, names)
    assert first == names[:4]  # Kueue's order: the four oldest take the four islands
    assert sorted(fabric.entry(n)["podSetUpdates"][0]["nodeSelector"][CLIQUE] for n in first) == sorted(
        fabric.clique(b, c) for b in (0, 1) for c in (0, 1))
    for name in names[4:]:
        assert fabric.entry(name)["state"] == "Pending" and "requeueAfterSeconds" not in fabric.entry(name)
    for name in first:
        bind(fabric, name)
    never_double_booked(ctrl, fabric, first)
    assert run(ctrl) == []  # nothing changed: the parked ones are not decided again

    running = list(first)
    woken_order = []
    for done in list(first):  # each finishing gang frees one island: the oldest parked gang takes it
        finish(fabric, done)
        running.remove(done)
        verdicts = run(ctrl)
        now_ready = [n for n in ready(fabric, names) if n not in running and n not in woken_order and n not in first]
        assert len(now_ready) == 1, [(v.outcome, v.message) for v in verdicts]
        (woken,) = now_ready
        assert fabric.entry(woken)["podSetUpdates"][0]["nodeSelector"][CLIQUE] == fabric.entry(done)["podSetUpdates"][0]["nodeSelector"][CLIQUE]
        assert all(v.outcome in ("admit", "wait") for v in verdicts)
        woken_order.append(woken)
        bind(fabric, woken)
        running.append(woken)
        never_double_booked(ctrl, fabric, running)
        assert all(fabric.entry(n)["state"] == "Pending" for n in names[4:] if n not in running)
    assert woken_order == names[4:]

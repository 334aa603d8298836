"""A PodSet that requests no GPU, on an Atoll flavor, is placed and counted by the ledger: its
CPU, memory and pod slot are no longer free for the next decision, and with
``protectEmptyDomains`` it goes to a partly used island so whole islands stay free. On a flavor
Atoll does not serve it is left alone."""

from __future__ import annotations

from typing import Any

import pytest

from tests.admission.fabric import Fabric, planned, profiles_doc, run
from tests.kube_objects import workload

pytestmark = pytest.mark.apiserver


def submit(fabric: Fabric, name: str, gpus: int, cpu: str, memory: str | None = None) -> None:
    body: dict[str, Any] = workload(fabric.ns, name, [("main", 1, gpus)])
    res = body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
    res["requests"] = {"cpu": cpu, **({"memory": memory} if memory else {}), **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    res["limits"] = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    fabric.kueue.create(body)
    fabric.kueue.reserve_quota(fabric.ns, name, fabric.cq, fabric.flavor)


@pytest.mark.parametrize("what", ["cpu", "memory", "pods"])
def test_a_workload_with_no_gpu_is_placed_and_its_cpu_memory_and_pod_slot_counted(fabric: Fabric, what: str) -> None:
    """One island of two nodes (4 GPUs, 64 CPUs, 512Gi, 110 pods each; with ``pods``, one pod slot
    each). A PodSet with no GPU takes most of one node's CPU, most of its memory, or its one pod
    slot; of two 4-GPU Workloads that ask for a little of each, only one then fits."""
    nodes = [fabric.add_node(0, 0, i) for i in range(2)]
    if what == "pods":
        for name in nodes:
            fabric.core.patch_node_status(name, {"status": {"allocatable": {"pods": "1"}, "capacity": {"pods": "1"}}})
    fabric.install(nodes=False)
    ctrl = fabric.controller()
    cpu, memory = {"cpu": ("60", None), "memory": ("1", "500Gi"), "pods": ("1", None)}[what]
    submit(fabric, "cpu", 0, cpu, memory)
    (verdict,) = run(ctrl)
    entry = fabric.entry("cpu")
    assert verdict.outcome == "admit" and entry["state"] == "Ready" and "needs no placement" not in entry["message"]
    (held,) = planned(entry)  # placed like any PodSet: planned node, decision id, nodeSelector
    assert [r.workload for r in ctrl.ledger.reservations(fabric.flavor)] == [f"{fabric.ns}/cpu"]
    submit(fabric, "gpu-a", 4, "8", "16Gi")
    submit(fabric, "gpu-b", 4, "8", "16Gi")
    verdicts = run(ctrl)
    assert sorted(v.outcome for v in verdicts) == ["admit", "wait"]  # 8 GPUs free, but one node's room is the first one's
    (placed,) = [n for n in ("gpu-a", "gpu-b") if fabric.entry(n)["state"] == "Ready"]
    assert set(planned(fabric.entry(placed))) == set(nodes) - {held}


def test_a_cpu_only_workload_goes_to_a_partly_used_island(fabric: Fabric) -> None:
    fabric.add_nodes(blocks=1, cliques=2)
    doc = profiles_doc(fabric.flavor, fabric.topology)
    doc["profiles"]["strict"]["fragmentation"] = {"bestFit": True, "protectEmptyDomains": True}
    fabric.install(doc, nodes=False)
    fabric.bind_pod("busy", fabric.node_name(0, 1, 0), 4)  # island c1 is partly used; c0 is whole
    submit(fabric, "cpu", 0, "8")
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit"
    assert set(planned(fabric.entry("cpu"))) <= {fabric.node_name(0, 1, i) for i in range(2)}


def test_a_cpu_only_podset_on_a_flavor_atoll_does_not_serve_is_left_alone(fabric: Fabric) -> None:
    fabric.install()
    body = workload(fabric.ns, "elsewhere", [("main", 1, 0)])
    body["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    fabric.kueue.create(body)
    fabric.kueue.reserve_quota(fabric.ns, "elsewhere", fabric.cq, "cpu-pool")  # a flavor the profiles document does not map
    ctrl = fabric.controller()
    (verdict,) = run(ctrl)
    entry = fabric.entry("elsewhere")
    assert verdict.outcome == "admit" and not entry.get("podSetUpdates")
    assert "podSets[main]: requests no nvidia.com/gpu; needs no placement" in entry["message"]
    assert not ctrl.ledger.reservations()

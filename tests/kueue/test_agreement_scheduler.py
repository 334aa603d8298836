"""The simulator's ``least-allocated`` model against the real kube-scheduler, on the same KWOK
nodes and the same pods.

The GB200 nodes are first made unequal: one pod per node, bound there by name (so no scheduler
chose it), takes a different share of its CPU, memory and GPUs. Then pods of mixed shapes, with
no selector, a block's or a rack's selector (what Atoll's ``domain`` enforcement writes), are
created one at a time; each waits until the real scheduler binds it (or calls it unschedulable)
before the next is made, so every decision sees the one state both sides know.

Two figures, per pod:

- **closed loop**: the model scores the live state before the pod; the real node must be one of
  the nodes the model ranks best (kube-scheduler draws at random among equal scores, and so does
  the model), and the real domain at each level one of those nodes' domains. Goal: every time.
- **open loop**: the model binds the whole sequence alone from the same start, drawing ties from
  its seed; the share of pods on the same node and in the same domain at each level.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from kubernetes.utils import parse_quantity

from admission.simulator._scheduler import BindingModel
from tests.kueue.conftest import BLOCK, CLIQUE, HOST, ZONE, Live, wait_for

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

NS = "sched-agree"
LEVELS = (ZONE, BLOCK, CLIQUE, HOST)
PODS = 64
MIB = 1024 * 1024
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _pod(name: str, gpu: int, cpu: int, mem_gi: int, *, node: str | None = None,
         selector: dict[str, str] | None = None) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": str(cpu), "memory": f"{mem_gi}Gi"}
    limits: dict[str, str] = {}
    if gpu:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpu)
    spec: dict[str, Any] = {"tolerations": [TOLERATION], "terminationGracePeriodSeconds": 0, "containers": [
        {"name": "c", "image": "registry.example.com/agree/pause:1", "resources": {"requests": requests, "limits": limits}}]}
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def _row(gpu: int, cpu: int, mem_gi: int) -> tuple[int, int, int]:
    """A pod's requests in the simulator's columns: GPUs, milli-CPU, MiB."""
    return gpu, cpu * 1000, mem_gi * 1024


@pytest.fixture
def namespace(live: Live) -> Iterator[str]:
    live.core.create_namespace({"metadata": {"name": NS}})
    try:
        yield NS
    finally:
        live.core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
        wait_for("the agreement pods gone", lambda: not live.core.list_namespaced_pod(NS).items)
        live.core.delete_namespace(NS)


def _bound_or_unschedulable(live: Live, name: str) -> str | None:
    """The node the real scheduler bound ``name`` to, or "" once it reports the pod unschedulable."""
    def probe() -> str | None:
        pod = live.core.read_namespaced_pod(name, NS)
        if pod.spec.node_name:
            return str(pod.spec.node_name)
        if any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in pod.status.conditions or []):
            return "-"
        return None
    got = wait_for(f"pod {name} bound or unschedulable", probe, every=0.05)
    return None if got == "-" else got


def test_least_allocated_picks_what_the_real_kube_scheduler_picks(live: Live, namespace: str) -> None:
    nodes = sorted(live.core.list_node(label_selector="type=kwok").items, key=lambda n: n.metadata.name)
    names = [n.metadata.name for n in nodes]
    index = {name: i for i, name in enumerate(names)}
    labels = [n.metadata.labels for n in nodes]

    def others_gone() -> bool:
        """No pod of another test holds or may yet take a KWOK node: the model starts from these
        nodes' allocatable minus this test's own pods, so anything else there skews every pick."""
        return not [p for p in live.core.list_pod_for_all_namespaces().items if p.metadata.namespace != NS
                    and p.status.phase not in ("Succeeded", "Failed") and (not p.spec.node_name or p.spec.node_name in index)]
    wait_for("the tier's other pods gone from the KWOK nodes", others_gone)
    alloc = np.array([[int(parse_quantity(n.status.allocatable[r])) for r in ("nvidia.com/gpu", "cpu")]
                      + [int(parse_quantity(n.status.allocatable["memory"])) // MIB, int(n.status.allocatable["pods"])]
                      for n in nodes], dtype=np.int64)
    alloc[:, 1] *= 1000
    free = alloc.copy()
    rng = np.random.default_rng(24)

    # Unequal nodes: every node carries a pod of its own shape, placed by name.
    for i, name in enumerate(names):
        gpu, cpu, mem = i % 3, 1 + (i * 37) % 71, 8 * (1 + (i * 53) % 67)
        live.core.create_namespaced_pod(NS, _pod(f"bg-{i:02d}", gpu, cpu, mem, node=name))
        free[i] -= (*_row(gpu, cpu, mem), 1)
    wait_for("every background pod Running", lambda: all(
        p.status.phase == "Running" for p in live.core.list_namespaced_pod(NS).items) and len(live.core.list_namespaced_pod(NS).items) == len(names))

    model = BindingModel("least-allocated", seed=24)
    alone = BindingModel("least-allocated", seed=24)
    alone_free = free.copy()
    blocks = sorted({lb[BLOCK] for lb in labels})
    racks = sorted({lb[CLIQUE] for lb in labels})
    closed_node = closed_unique = 0
    closed_level = dict.fromkeys(LEVELS, 0)
    open_level = dict.fromkeys(LEVELS, 0)
    misses: list[tuple[Any, ...]] = []
    for k in range(PODS):
        gpu = int(rng.choice([1, 2, 4]))
        cpu, mem = int(rng.integers(2, 40)), int(8 * rng.integers(2, 40))
        kind = k % 3
        selector = {} if kind == 0 else {BLOCK: str(rng.choice(blocks))} if kind == 1 else {CLIQUE: str(rng.choice(racks))}
        allowed = np.array([i for i, lb in enumerate(labels) if all(lb.get(key) == v for key, v in selector.items())], dtype=np.int64)
        per_pod = _row(gpu, cpu, mem)
        best = model.best_nodes(free, alloc, allowed, per_pod)
        (picked,) = alone.bind(alone_free, alloc, allowed, per_pod, 1) or [(-1, 0)]
        live.core.create_namespaced_pod(NS, _pod(f"p-{k:02d}", gpu, cpu, mem, selector=selector))
        real = _bound_or_unschedulable(live, f"p-{k:02d}")
        r = -1 if real is None else index[real]
        if r >= 0:
            free[r] -= (*per_pod, 1)
        in_best = (r in best.tolist()) if r >= 0 else best.size == 0
        closed_node += in_best
        closed_unique += best.size <= 1
        for level in LEVELS:
            domains = {labels[b][level] for b in best.tolist()}
            closed_level[level] += (labels[r][level] in domains) if r >= 0 else not domains
            open_level[level] += (r < 0 and picked[0] < 0) or (r >= 0 and picked[0] >= 0 and labels[r][level] == labels[picked[0]][level])
        if not in_best:
            misses.append((k, selector, per_pod, real, [names[b] for b in best.tolist()][:4], best.size))

    figures = {
        "pods": PODS,
        "closed loop: real node among the model's best": f"{closed_node}/{PODS}",
        "closed loop: the model saw one best node": f"{closed_unique}/{PODS}",
        **{f"closed loop: same {level}": f"{n}/{PODS}" for level, n in closed_level.items()},
        **{f"open loop: same {level}": f"{n}/{PODS}" for level, n in open_level.items()},
    }
    print("\nleast-allocated vs kube-scheduler:", figures)
    assert closed_node == PODS, (figures, misses)
    assert all(n == PODS for n in closed_level.values()), figures
    # The nodes are unequal, so most picks are no draw among ties: the agreement is the scores', not luck.
    assert closed_unique >= PODS // 2, figures

"""``kueue-bestfit`` and ``kueue-required`` (``topology._kueue_tas``) against real Kueue TAS.

Real Kueue gets a ResourceFlavor with ``topologyName`` (config/kueue/gb200-nvl72's Topology) and a
ClusterQueue of its own with no admission check: Kueue's TAS alone assigns the topology. Each
scenario submits one Workload (one or more PodSets, ``required``/``preferred``/unconstrained,
slices, sub-node pods), waits for Kueue's answer (admitted with a ``topologyAssignment``, or
pending with its "allows to fit only" message), and asks the model the same question over the
same nodes and the same usage: the assignments of the Workloads still admitted, as Kueue
reported them. Some scenarios keep their Workload admitted, so later ones meet partly used
racks, blocks and nodes.

A scenario is identical when every PodSet lands on the same nodes with the same pod counts (or
neither side fits it). The share is held at 95 % or better; every difference is named by
scenario in the failure message.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from tests.kueue.conftest import BLOCK, CLIQUE, GROUP, HOST, PRODUCT, VERSION, ZONE, Live, condition, is_true, wait_for
from topology import Toleration
from topology._kueue_tas import KueueNode, KueuePodSet, build_kueue_leaves, kueue_place_workload

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

NS, FLAVOR, CQ, LQ, TOPOLOGY = "tas-agree", "gb200-tas", "tas-agree", "tas", "gb200-nvl72"
LEVELS = (ZONE, BLOCK, CLIQUE, HOST)
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
G4 = {"nvidia.com/gpu": 4, "cpu": 32, "memory": "256Gi"}
G2 = {"nvidia.com/gpu": 2, "cpu": 16, "memory": "128Gi"}
G1 = {"nvidia.com/gpu": 1, "cpu": 8, "memory": "64Gi"}
CPU_HEAVY = {"nvidia.com/gpu": 1, "cpu": 100, "memory": "100Gi"}  # one per node by CPU
MEM_HEAVY = {"nvidia.com/gpu": 1, "cpu": 4, "memory": "1000Gi"}  # one per node by memory
LEADER = {"cpu": 4, "memory": "16Gi"}


@dataclass(frozen=True)
class PS:
    """One PodSet: ``count`` pods of ``requests``; ``how`` is required/preferred/unconstrained."""

    name: str
    count: int
    requests: dict[str, Any]
    how: str = "required"
    level: str | None = CLIQUE
    slice_level: str | None = None
    slice_size: int = 1
    group: str | None = None
    """``podSetGroupName``: Kueue places a group's PodSets (a leader and its workers) together."""


@dataclass(frozen=True)
class Scenario:
    name: str
    podsets: tuple[PS, ...]
    keep: bool = False
    """Leave it admitted: later scenarios meet its usage."""
    expect: str = ""
    """What the scenario is about (for the reader; not asserted)."""


def one(count: int, requests: dict[str, Any], how: str = "required", level: str | None = CLIQUE, **kw: Any) -> tuple[PS, ...]:
    return (PS("main", count, requests, how, level, **kw),)


SCENARIOS = (
    Scenario("rack-16", one(16, G4), keep=True, expect="one NVL72 rack, best fit among equal racks"),
    Scenario("rack-18-whole", one(18, G4), expect="a whole rack, not the one with 2 trays left"),
    Scenario("rack-2-bestfit", one(2, G4), keep=True, expect="the partly used rack's last 2 trays"),
    Scenario("rack-19-nofit", one(19, G4), expect="no rack holds 19 trays"),
    Scenario("rack-20-preferred", one(20, G4, "preferred"), expect="one level up: a block"),
    Scenario("block-36", one(36, G4, level=BLOCK), expect="the untouched block"),
    Scenario("block-20", one(20, G4, level=BLOCK), keep=True, expect="the untouched block (the other has 18 trays left)"),
    Scenario("block-30-preferred", one(30, G4, "preferred", BLOCK), expect="no block holds 30: greedy over the zone"),
    Scenario("unconstrained-10x1", one(10, G1, "unconstrained", None), expect="least free capacity first"),
    Scenario("host-4x1", one(4, G1, level=HOST), expect="one node"),
    Scenario("host-5x1-nofit", one(5, G1, level=HOST), expect="no node holds 5 GPUs"),
    Scenario("host-6x2-preferred", one(6, G2, "preferred", HOST), expect="climbs to a rack"),
    Scenario("slices-rack-8", one(16, G4, level=BLOCK, slice_level=CLIQUE, slice_size=8), expect="2 slices of 8 trays, each in one rack"),
    Scenario("slices-rack-6", one(24, G4, level=ZONE, slice_level=CLIQUE, slice_size=6), expect="4 slices of 6 trays"),
    Scenario("slices-host-2", one(12, G2, slice_level=HOST, slice_size=2), expect="6 slices of one node each"),
    Scenario("cpu-bound", one(10, CPU_HEAVY), expect="one pod per node by CPU"),
    Scenario("memory-bound", one(12, MEM_HEAVY, level=BLOCK), expect="one pod per node by memory"),
    Scenario("subnode-7x1", one(7, G1, "unconstrained", None), keep=True, expect="partly used nodes"),
    Scenario("rack-17x2-after-subnode", one(17, G2), expect="best fit over partly used nodes"),
    Scenario("two-podsets", (PS("leader", 1, LEADER), PS("workers", 8, G4)), expect="each PodSet sees the earlier one's pods"),
    Scenario("group-leader-workers", (PS("workers", 8, G4, group="g"), PS("leader", 1, LEADER, group="g")),
             expect="a PodSet group: the leader in its workers' rack"),
    Scenario("rack-30-preferred", one(30, G4, "preferred"), expect="no block holds 30 now: greedy over the zone"),
    Scenario("zone-72-nofit", one(72, G4, level=ZONE), expect="the zone has fewer trays free"),
    Scenario("unconstrained-120x1", one(120, G1, "unconstrained", None), expect="most of the free GPUs"),
    Scenario("slices-block-9", one(18, G4, level=ZONE, slice_level=BLOCK, slice_size=9), expect="2 slices of 9, block-sized domains"),
)


def _workload(sc: Scenario) -> dict[str, Any]:
    podsets = []
    for ps in sc.podsets:
        req: dict[str, Any] = {"unconstrained": True} if ps.how == "unconstrained" else {ps.how: ps.level}
        if ps.slice_level:
            req.update(podSetSliceRequiredTopology=ps.slice_level, podSetSliceSize=ps.slice_size)
        if ps.group:
            req["podSetGroupName"] = ps.group
        requests = {k: str(v) for k, v in ps.requests.items()}
        limits = {k: v for k, v in requests.items() if k == "nvidia.com/gpu"}
        podsets.append({"name": ps.name, "count": ps.count, "topologyRequest": req, "template": {"spec": {
            "restartPolicy": "Never", "tolerations": [TOLERATION],
            "containers": [{"name": "c", "image": "registry.example.com/agree/pause:1",
                            "resources": {"requests": requests, "limits": limits}}]}}})
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": sc.name, "namespace": NS},
            "spec": {"queueName": LQ, "podSets": podsets}}


def _units(requests: dict[str, Any]) -> dict[str, int]:
    """Requests in the model's units: milli-CPU, bytes, counts."""
    out = {}
    for k, v in requests.items():
        q = parse_quantity(str(v))
        out[k] = int(q * 1000) if k == "cpu" else int(q)
    return out


def decode(assignment: dict[str, Any]) -> dict[str, int]:
    """Kueue's v1beta2 ``topologyAssignment`` (compressed slices) as lowest-level value -> pods."""
    out: dict[str, int] = {}
    for sl in assignment["slices"]:
        n = sl["domainCount"]
        lowest = sl["valuesPerLevel"][-1]
        if "universal" in lowest:
            values = [lowest["universal"]] * n
        else:
            ind = lowest["individual"]
            values = [f"{ind.get('prefix', '')}{root}{ind.get('suffix', '')}" for root in ind["roots"]]
        counts = sl["podCounts"].get("individual") or [sl["podCounts"]["universal"]] * n
        for v, c in zip(values, counts):
            out[v] = out.get(v, 0) + int(c)
    return out


@pytest.fixture
def tas_queue(live: Live) -> Iterator[Live]:
    flavor = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
              "spec": {"nodeLabels": {PRODUCT: "NVIDIA-GB200"}, "tolerations": [TOLERATION], "topologyName": TOPOLOGY}}
    cq = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": CQ},
          "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "resourceGroups": [{
              "coveredResources": ["nvidia.com/gpu", "cpu", "memory"],
              "flavors": [{"name": FLAVOR, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 10_000},
                                                         {"name": "cpu", "nominalQuota": 100_000},
                                                         {"name": "memory", "nominalQuota": "10000Ti"}]}]}]}}
    live.custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", flavor)
    live.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq)
    live.core.create_namespace({"metadata": {"name": NS}})
    live.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": LQ, "namespace": NS},
        "spec": {"clusterQueue": CQ}})
    wait_for("the TAS ClusterQueue to be active", lambda: is_true(
        live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ), "Active"))
    try:
        yield live
    finally:
        for wl in live.custom.list_namespaced_custom_object(GROUP, VERSION, NS, "workloads")["items"]:
            _delete(live, wl["metadata"]["name"])
        live.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "localqueues", LQ)
        live.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ)
        live.core.delete_namespace(NS)
        wait_for("the TAS ClusterQueue gone", lambda: not any(
            c["metadata"]["name"] == CQ for c in live.custom.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")["items"]))
        live.custom.delete_cluster_custom_object(GROUP, VERSION, "resourceflavors", FLAVOR)


def _delete(live: Live, name: str) -> None:
    try:
        live.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "workloads", name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _wait_settled(live: Live, reserving: int) -> None:
    """Kueue's cache holds exactly the kept Workloads (its ClusterQueue status is written from it)."""
    def probe() -> bool:
        st = live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ).get("status") or {}
        return st.get("reservingWorkloads", 0) == reserving and st.get("pendingWorkloads", 0) == 0 and not any(
            w["metadata"].get("deletionTimestamp") for w in live.custom.list_namespaced_custom_object(GROUP, VERSION, NS, "workloads")["items"])
    wait_for(f"ClusterQueue {CQ} to hold {reserving} Workloads and none pending", probe)


def _kueue_answer(live: Live, name: str) -> dict[str, Any]:
    """The Workload once Kueue admitted it or said why it cannot (a topology message)."""
    def probe() -> dict[str, Any] | None:
        wl: dict[str, Any] = live.custom.get_namespaced_custom_object(GROUP, VERSION, NS, "workloads", name)
        if is_true(wl, "Admitted"):
            return wl
        qr = condition(wl, "QuotaReserved")
        if qr and qr["status"] == "False" and "topology" in qr.get("message", ""):
            return wl
        return None
    return wait_for(f"Kueue's answer for {name}", probe)


def _model_nodes(live: Live, usage: dict[str, dict[str, int]]) -> list[KueueNode]:
    nodes = []
    for n in live.core.list_node(label_selector="type=kwok").items:
        alloc = {k: int(parse_quantity(v) * 1000) if k == "cpu" else int(parse_quantity(v))
                 for k, v in n.status.allocatable.items() if k in ("cpu", "memory", "nvidia.com/gpu", "pods")}
        nodes.append(KueueNode(n.metadata.name, dict(n.metadata.labels), alloc, usage.get(n.metadata.name, {}),
                               unschedulable=bool(n.spec.unschedulable)))
    return nodes


def _add_usage(usage: dict[str, dict[str, int]], placed: dict[str, int], requests: dict[str, Any]) -> None:
    per_pod = {**_units(requests), "pods": 1}
    for node, pods in placed.items():
        row = usage.setdefault(node, {})
        for k, q in per_pod.items():
            row[k] = row.get(k, 0) + q * pods


def test_kueue_tas_model_places_as_real_kueue_does(tas_queue: Live) -> None:
    live = tas_queue
    assert not [p for p in live.core.list_pod_for_all_namespaces().items if p.spec.node_name], "the nodes must start empty"
    usage: dict[str, dict[str, int]] = {}
    kept = 0
    identical, differences = 0, []
    for sc in SCENARIOS:
        _wait_settled(live, kept)
        nodes = _model_nodes(live, usage)
        leaves = build_kueue_leaves(LEVELS, nodes, node_labels={PRODUCT: "NVIDIA-GB200"},
                                    tolerations=[Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")])
        model = kueue_place_workload(leaves, [
            KueuePodSet(ps.name, ps.count, _units(ps.requests), ps.how, ps.level, ps.slice_level, ps.slice_size)  # type: ignore[arg-type]
            for ps in sc.podsets], topology_name=TOPOLOGY, excluded={})
        live.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "workloads", _workload(sc))
        wl = _kueue_answer(live, sc.name)
        if is_true(wl, "Admitted"):
            real = {psa["name"]: decode(psa["topologyAssignment"]) for psa in wl["status"]["admission"]["podSetAssignments"]}
            got = {name: {values[-1]: n for values, n in r.domains} for name, r in model.podsets} if model.fits else None
            same = got == real
            detail = f"Kueue {real}, model {got if got is not None else model.reason}"
        else:
            message = condition(wl, "QuotaReserved")["message"]
            same = not model.fits and model.reason in message
            detail = f"Kueue pending: {message!r}; model {'fits: ' + str(dict(model.podsets)) if model.fits else repr(model.reason)}"
        identical += same
        if not same:
            differences.append(f"{sc.name} ({sc.expect}): {detail}")
        if sc.keep and is_true(wl, "Admitted"):
            for ps in sc.podsets:
                _add_usage(usage, real[ps.name], ps.requests)
            kept += 1
        else:
            _delete(live, sc.name)
    share = identical / len(SCENARIOS)
    print(f"\nkueue TAS model vs real Kueue: {identical}/{len(SCENARIOS)} identical ({share:.0%})", *differences, sep="\n  ")
    assert len(SCENARIOS) >= 20
    assert share >= 0.95, differences


def test_decode_reads_kueues_compressed_assignment() -> None:
    ta = {"levels": [HOST], "slices": [
        {"domainCount": 2, "valuesPerLevel": [{"individual": {"prefix": "gb-b0r0n", "roots": ["00", "01"]}}],
         "podCounts": {"universal": 4}},
        {"domainCount": 1, "valuesPerLevel": [{"universal": "gb-b1r0n05"}], "podCounts": {"individual": [2]}}]}
    assert decode(copy.deepcopy(ta)) == {"gb-b0r0n00": 4, "gb-b0r0n01": 4, "gb-b1r0n05": 2}

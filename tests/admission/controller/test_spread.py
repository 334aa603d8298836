"""Spread groups across Workloads: the replicas of one service, each its own Workload, spread
over a level at most k per domain (Atoll's label) or by a share (Kueue's KEP-13746 annotation),
counting the replicas already admitted; Retry when not now, Rejected with numbers when never.
Decided by the controller on the in-memory cluster built from the bundled GB200 model."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from admission.controller import ConfigSettings, Controller, KueueSettings, Recorder, Settings, decode_planned
from admission.kube import NODES, PODS, WORKLOADS, ManualClock
from admission.simulator._port import CHECK_NAME, PROFILES_NAMESPACE, MemoryCluster, cluster_objects, profiles_for_cluster, quantities, workload_object
from policies import load_profiles_file
from topology import ResourceVector, load_cluster_model

CONFIG = Path(__file__).resolve().parents[3] / "config"
SU, CLIQUE = "network.example.com/su", "nvidia.com/gpu.clique"


class Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


def setup() -> tuple[Controller, MemoryCluster]:
    cluster = load_cluster_model(CONFIG / "clusters" / "gb200-nvl72-superpod.yaml")
    doc = profiles_for_cluster(load_profiles_file(CONFIG / "profiles.yaml"), cluster)
    port = MemoryCluster(ManualClock(1_767_225_600.0)).load(cluster_objects(cluster, doc))
    settings = Settings(kueue=KueueSettings(admission_check=CHECK_NAME), config=ConfigSettings(namespace=PROFILES_NAMESPACE))
    ids = iter(range(10**6))
    ctrl = Controller(port, settings=settings, clock=port.clock, recorder=Recorder(Discard()),  # type: ignore[arg-type]
                      new_id=lambda: f"d{next(ids)}")
    ctrl.sync()
    return ctrl, port


def replica(name: str, annotations: dict[str, str], labels: dict[str, str] | None = None, pods: int = 2) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"atoll.dev/profile": "strict", **annotations}},
                "spec": {"containers": [{"name": "c", "image": "img", "resources": {"requests": {"nvidia.com/gpu": "4"}}}]}}
    obj = workload_object(name, [{"name": "main", "count": pods, "template": template}], flavor="gb200", namespace="serving")
    obj["metadata"]["labels"] = dict(labels or {})
    return obj


def spread(service: str, level: str, k: int, replicas: int | None = None) -> tuple[dict[str, str], dict[str, str]]:
    ann = {"atoll.dev/spread-level": level, "atoll.dev/spread-max-per-domain": str(k)}
    if replicas is not None:
        ann["atoll.dev/spread-replicas"] = str(replicas)
    return ann, {"atoll.dev/spread-group": service}


def admit(ctrl: Controller, port: MemoryCluster, obj: dict[str, Any]) -> Any:
    port.put(WORKLOADS, obj)
    ctrl.sync()
    (verdict,) = ctrl.process()
    return verdict


def planned_nodes(port: MemoryCluster, name: str) -> list[str]:
    obj = port.get(WORKLOADS, name, "serving")
    entry = next(e for e in obj["status"]["admissionChecks"] if e["name"] == CHECK_NAME)
    return [n for u in entry["podSetUpdates"] for n in decode_planned(u["annotations"]["atoll.dev/planned-nodes"])]


def domain(node: str, level: str) -> str:
    """gb200-s1-u0-r3-n07: its scalable unit (s1-u0) or rack (s1-u0-r3)."""
    parts = node.split("-")
    return "-".join(parts[1:3] if level == SU else parts[1:4])


def test_replicas_spread_at_most_k_per_domain_and_survive_any_lost_domain() -> None:
    ctrl, port = setup()
    ann, labels = spread("chat", SU, 2, replicas=6)
    for i in range(6):
        v = admit(ctrl, port, replica(f"chat-{i}", ann, labels))
        assert v.outcome == "admit", v.message
    where = {f"chat-{i}": planned_nodes(port, f"chat-{i}") for i in range(6)}
    for nodes in where.values():
        assert len({domain(n, CLIQUE) for n in nodes}) == 1  # each replica packed in one NVLink rack
    per_su = Counter(domain(ns[0], SU) for ns in where.values())
    assert max(per_su.values()) <= 2 and len(per_su) == 3
    for lost in sorted({domain(n, SU) for ns in where.values() for n in ns} | {"s0-u0", "s0-u1", "s1-u0", "s1-u1"}):
        alive = [name for name, ns in where.items() if all(domain(n, SU) != lost for n in ns)]
        assert len(alive) >= 6 - 2, f"losing {lost} leaves {alive}"


def test_a_replica_that_cannot_spread_now_waits_and_one_that_never_can_is_rejected_with_numbers() -> None:
    ctrl, port = setup()
    ann, labels = spread("chat", SU, 1)
    for i in range(4):
        assert admit(ctrl, port, replica(f"chat-{i}", ann, labels)).outcome == "admit"
    fifth = admit(ctrl, port, replica("chat-4", ann, labels))
    assert fifth.outcome == "wait", fifth.message
    assert "spread group chat, 4 replica(s) admitted: 4 network.example.com/su domain(s) left out" in fifth.message
    other = admit(ctrl, port, replica("other-0", *spread("other", SU, 1)[::1]))  # another service is not held back
    assert other.outcome == "admit", other.message

    ctrl, port = setup()
    never = admit(ctrl, port, replica("big-0", *spread("big", SU, 1, replicas=5)))
    assert never.outcome == "reject"
    assert ("spread group big: 5 replicas at most 1 per network.example.com/su domain need 5 such domains that can each hold a "
            "replica of 8 GPUs; flavor gb200 has 4") in never.message


def test_spread_replicas_take_a_partly_used_rack_before_an_empty_one() -> None:
    ctrl, port = setup()
    port.put(PODS, {"metadata": {"name": "train", "namespace": "default", "uid": "train"},
                    "spec": {"nodeName": "gb200-s1-u1-r5-n03", "containers": [{"name": "c", "resources": {
                        "requests": quantities(ResourceVector(gpu=4), "nvidia.com/gpu")}}]}, "status": {"phase": "Running"}})
    ann, labels = spread("chat", CLIQUE, 1)
    assert admit(ctrl, port, replica("chat-0", ann, labels)).outcome == "admit"
    assert {domain(n, CLIQUE) for n in planned_nodes(port, "chat-0")} == {"s1-u1-r5"}
    assert admit(ctrl, port, replica("chat-1", ann, labels)).outcome == "admit"
    assert {domain(n, CLIQUE) for n in planned_nodes(port, "chat-1")} != {"s1-u1-r5"}  # at most one per rack


def test_kueue_topology_spreading_by_share_across_workloads() -> None:
    ctrl, port = setup()
    kep = {"kueue.x-k8s.io/podset-topology-spreading": json.dumps(
        {"workloadLabelSelectors": [{"key": "app", "operator": "In", "values": ["chat"]}],
         "rules": [{"topologyKey": SU, "maxShareAllowingPlacement": "50%"}]})}
    sus = []
    for i in range(4):
        v = admit(ctrl, port, replica(f"chat-{i}", kep, {"app": "chat"}))
        assert v.outcome == "admit", v.message
        sus.append(domain(planned_nodes(port, f"chat-{i}")[0], SU))
    assert sus[0] != sus[1]  # after one, its domain holds 100 % > 50 %
    assert max(Counter(sus).values()) <= 2


@pytest.mark.parametrize(("annotations", "needle"), [
    ({"atoll.dev/spread-max-per-domain": "0", "atoll.dev/spread-level": SU}, "atoll.dev/spread-max-per-domain]: a whole number"),
    ({}, "needs the pod template annotation atoll.dev/spread-level"),
    ({"kueue.x-k8s.io/podset-topology-spreading": '{"rules": [{"topologyKey": "x", "maxShareAllowingPlacement": "150%"}]}'},
     "rules[0].maxShareAllowingPlacement: a percentage"),
])
def test_bad_spread_settings_are_rejected_naming_the_field(annotations: dict[str, str], needle: str) -> None:
    ctrl, port = setup()
    labels = {} if "kueue.x-k8s.io/podset-topology-spreading" in annotations else {"atoll.dev/spread-group": "chat"}
    v = admit(ctrl, port, replica("bad", annotations, labels))
    assert v.outcome == "reject" and needle in v.message, v.message


@pytest.mark.parametrize("key", ["atoll.dev/spread-level", "atoll.dev/spread-max-per-domain", "atoll.dev/spread-replicas"])
def test_a_spread_annotation_without_the_group_label_is_rejected_naming_both(key: str) -> None:
    ctrl, port = setup()
    v = admit(ctrl, port, replica("stray", {key: SU if key.endswith("level") else "2"}))
    assert v.outcome == "reject", v.message
    assert f"annotations[{key}]: needs the Workload label atoll.dev/spread-group" in v.message, v.message


def test_each_replica_of_a_spread_serving_graph_keeps_prefill_and_decode_in_one_rack() -> None:
    ctrl, port = setup()
    ann, labels = spread("graph", SU, 1)
    for i in range(4):
        obj = replica(f"graph-{i}", ann, labels)
        prefill = obj["spec"]["podSets"][0]
        decode = json.loads(json.dumps(prefill))
        prefill["name"], prefill["count"] = "prefill", 1
        decode["name"], decode["count"] = "decode", 2
        decode["template"]["metadata"]["annotations"].update({"atoll.dev/near": "prefill", "atoll.dev/near-min-bandwidth-gbps": "400"})
        obj["spec"]["podSets"] = [prefill, decode]
        obj["status"]["admission"]["podSetAssignments"] = [
            {"name": "prefill", "flavors": {"nvidia.com/gpu": "gb200"}, "count": 1}, {"name": "decode", "flavors": {"nvidia.com/gpu": "gb200"}, "count": 2}]
        v = admit(ctrl, port, obj)
        assert v.outcome == "admit", v.message
        assert [(e["from"], e["to"], e["bottleneck_level"]) for e in v.links] in ([("prefill", "decode", CLIQUE)],
                                                                                   [("prefill", "decode", "kubernetes.io/hostname")])
    racks = [{domain(n, CLIQUE) for n in planned_nodes(port, f"graph-{i}")} for i in range(4)]
    assert all(len(r) == 1 for r in racks)  # prefill and decode co-located in one NVLink rack
    assert len({domain(planned_nodes(port, f"graph-{i}")[0], SU) for i in range(4)}) == 4  # one replica per scalable unit


@pytest.mark.parametrize(("mode", "fifth"), [("Required", "wait"), ("Preferred", "admit")])
def test_a_preferred_share_rule_falls_back_to_a_filled_domain_where_a_required_one_waits(mode: str, fifth: str) -> None:
    ctrl, port = setup()
    kep = {"kueue.x-k8s.io/podset-topology-spreading": json.dumps(
        {"rules": [{"topologyKey": SU, "maxShareAllowingPlacement": "1%", "enforcementMode": mode}]})}
    labels = {"kueue.x-k8s.io/job-uid": "lws-1"}  # the default selector: Workloads of one parent job
    for i in range(4):
        assert admit(ctrl, port, replica(f"chat-{i}", kep, labels)).outcome == "admit"
    assert len({domain(planned_nodes(port, f"chat-{i}")[0], SU) for i in range(4)}) == 4
    v = admit(ctrl, port, replica("chat-4", kep, labels))
    assert v.outcome == fifth, v.message


def test_a_workload_spread_across_the_whole_flavor_waits_while_it_could_take_the_room_another_owes() -> None:
    """An inference Workload spreads its pods one per NVLink rack; when the racks with room are in
    two scalable units its placement has no domain selector, so the scheduler may bind its pods
    anywhere in the flavor, including the last free nodes of a scalable unit where another
    Workload's pods are still owed. It waits for those pods to bind instead of being admitted."""
    ctrl, port = setup()
    owed_at = ["gb200-s0-u1-r1-n07", "gb200-s0-u1-r6-n11"]
    spare = ["gb200-s0-u1-r7-n01", "gb200-s1-u0-r7-n02"]

    def busy(node: str, phase: str = "Running") -> None:
        port.put(PODS, {"metadata": {"name": f"busy-{node}", "namespace": "default", "uid": f"busy-{node}"},
                        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                            "requests": quantities(ResourceVector(gpu=4), "nvidia.com/gpu")}}]}, "status": {"phase": phase}})

    for node in sorted(o["metadata"]["name"] for o in port.list(NODES).items):
        if node not in owed_at:
            busy(node)
    inference = {"atoll.dev/class": "inference"}
    first = admit(ctrl, port, replica("first", inference))
    assert first.outcome == "admit", first.message
    assert sorted(planned_nodes(port, "first")) == owed_at  # owed: no pod of it is bound yet
    for node in spare:
        busy(node, "Succeeded")  # two more nodes free up, one in first's scalable unit
    ctrl.sync()
    second = admit(ctrl, port, replica("second", inference))
    assert second.outcome == "wait", second.message  # its pods could take s0-u1-r7-n01 and a node first needs
    assert "serving/first" in second.message
    assert not any(v.kind == "unplaceable" for v in ctrl_violations(ctrl))


def ctrl_violations(ctrl: Controller) -> list[Any]:
    """The no-double-booking invariant on the controller's own ledger and cache."""
    from admission.controller._invariant import check_invariant

    snap = ctrl.cache.snapshot("gb200")
    alloc = {n: ctrl.cache.nodes[n].allocatable for n in snap.node_names}
    used = {n: ctrl.cache.usage.get(n, ResourceVector()) for n in snap.node_names}
    return check_invariant(alloc, used, ctrl.ledger.owed(snap))


def test_under_strict_a_training_gang_keeps_to_one_rack_and_inference_replicas_take_one_rack_each() -> None:
    # what was once seen as strict's 8-GPU jobs across two racks with a spine-wide selector: those
    # were inference replicas, whose class spreads them one per rack (the island level is for gangs)
    ctrl, port = setup()
    gang = replica("train", {"atoll.dev/class": "training"})
    assert admit(ctrl, port, gang).outcome == "admit"
    assert len({domain(n, CLIQUE) for n in planned_nodes(port, "train")}) == 1
    entry = next(e for e in port.get(WORKLOADS, "train", "serving")["status"]["admissionChecks"] if e["name"] == CHECK_NAME)
    assert list(entry["podSetUpdates"][0]["nodeSelector"]) == [CLIQUE]
    served = replica("serve", {"atoll.dev/class": "inference"})
    assert admit(ctrl, port, served).outcome == "admit"
    assert len({domain(n, CLIQUE) for n in planned_nodes(port, "serve")}) == 2
    entry = next(e for e in port.get(WORKLOADS, "serve", "serving")["status"]["admissionChecks"] if e["name"] == CHECK_NAME)
    assert CLIQUE not in entry["podSetUpdates"][0].get("nodeSelector", {})  # their lowest common domain: above one rack

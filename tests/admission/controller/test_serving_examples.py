"""The serving examples of ``config/workloads`` decided by the controller on the real apiserver,
as ``atoll place`` decides them on the bundled models: the prefill/decode graph lands in one
NVLink island with its edge's bandwidth in the record, and the replicas of the spread service
each take their own island, Retry when every island holds one, Rejected when the declared
replicas can never be spread."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.controller import as_workload, decode_planned
from tests.admission.fabric import Fabric, run

CONFIG = Path(__file__).resolve().parents[3] / "config" / "workloads"
CLIQUE = "nvidia.com/gpu.clique"

pytestmark = pytest.mark.apiserver


def _ours(fabric: Fabric, manifest: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    wl = copy.deepcopy(as_workload(manifest) if manifest.get("kind") == "JobSet" else manifest)
    wl["metadata"] = {**{k: v for k, v in wl["metadata"].items() if k in ("name", "labels", "annotations")},
                      "namespace": fabric.ns, "name": name or wl["metadata"]["name"]}
    wl["apiVersion"], wl["kind"] = "kueue.x-k8s.io/v1beta2", "Workload"
    wl["spec"]["queueName"] = "lq"
    for ps in wl["spec"]["podSets"]:
        ps.setdefault("count", 1)
    return wl


def _submit(fabric: Fabric, wl: dict[str, Any]) -> Any:
    fabric.kueue.create(wl)
    fabric.kueue.reserve_quota(fabric.ns, wl["metadata"]["name"], fabric.cq, fabric.flavor)
    (verdict,) = run(fabric.controller())
    return verdict


def _cliques(fabric: Fabric, name: str) -> set[str]:
    entry = fabric.entry(name)
    nodes = [n for u in entry["podSetUpdates"] for n in decode_planned(u["annotations"]["atoll.dev/planned-nodes"])]
    return {n.rsplit("n", 1)[0] for n in nodes}  # {ns}-b0c1n0 → {ns}-b0c1


def test_the_serving_graph_example_lands_in_one_island_with_its_edge_recorded(fabric: Fabric) -> None:
    fabric.install()
    manifest = yaml.safe_load((CONFIG / "serving-graph.yaml").read_text())
    verdict = _submit(fabric, _ours(fabric, manifest))
    assert verdict.outcome == "admit", verdict.message
    name = manifest["metadata"]["name"]
    assert fabric.entry(name)["state"] == "Ready" and len(_cliques(fabric, name)) == 1
    assert "edge prefill->decode:" in fabric.entry(name)["message"]
    (record,) = fabric.decision_records()
    (edge,) = record["links"]
    assert (edge["from"], edge["to"], edge["bottleneck_level"], edge["asked"]) == ("prefill", "decode", CLIQUE, "≥ 400 GB/s")
    assert edge["bandwidth_gbps"] >= 400


def test_the_spread_service_takes_one_island_per_replica_then_waits_and_never_is_rejected(fabric: Fabric) -> None:
    fabric.install(nodes=False)
    fabric.add_nodes(blocks=2, cliques=2, per_clique=4)  # 4 islands of 16 GPUs: room for two replicas each
    replicas = [d for d in yaml.safe_load_all((CONFIG / "spread-service.yaml").read_text()) if d]
    seen = []
    for doc in replicas:
        verdict = _submit(fabric, _ours(fabric, doc))
        assert verdict.outcome == "admit", verdict.message
        (island,) = _cliques(fabric, doc["metadata"]["name"])
        seen.append(island)
    assert len(set(seen)) == 3
    fourth = _submit(fabric, _ours(fabric, replicas[0], "llama-70b-3"))
    assert fourth.outcome == "admit" and _cliques(fabric, "llama-70b-3").isdisjoint(seen)
    fifth = _submit(fabric, _ours(fabric, replicas[0], "llama-70b-4"))
    assert fifth.outcome == "wait", fifth.message  # room in every island, but each holds a replica
    assert fabric.entry("llama-70b-4")["state"] == "Retry"
    assert "spread group llama-70b, 4 replica(s) admitted: 4 nvidia.com/gpu.clique domain(s) left out" in fabric.entry("llama-70b-4")["message"]

    big = _ours(fabric, replicas[0], "big-0")
    big["metadata"]["labels"] = {"atoll.dev/spread-group": "big"}
    for ps in big["spec"]["podSets"]:
        ps["template"]["metadata"]["annotations"]["atoll.dev/spread-replicas"] = "5"
    never = _submit(fabric, big)
    assert never.outcome == "reject" and fabric.entry("big-0")["state"] == "Rejected"
    assert "5 replicas at most 1 per nvidia.com/gpu.clique domain need 5 such domains" in never.message and "has 4" in never.message

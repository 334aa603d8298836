"""``atoll bench controller``: the controller against a real kube-apiserver with Kueue's CRDs.

It starts etcd and kube-apiserver (``admission.kube.envtest``), creates a GB200-like fabric (Nodes,
a Topology, a ResourceFlavor, the AdmissionCheck, a ClusterQueue, the profiles ConfigMap),
then plays Kueue for N Workloads (create, reserve quota, check Pending) while the controller
runs its watch loop, and measures each Workload from its Pending entry being written to
Atoll's entry being written.

- ``--mode stream`` (default): one producer submits Workloads one after another while the
  controller runs; latencies are what a Workload sees on a cluster that keeps up.
- ``--mode backlog``: every Workload is Pending before the controller starts; the rate is the
  controller's own (list, then decide the backlog as fast as it can).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import yaml

__all__ = ["main", "run_bench"]

BLOCK, CLIQUE, POOL = "network.example.com/block", "nvidia.com/gpu.clique", "atoll.dev/bench-pool"
GPU = "nvidia.com/gpu"
NS = "atoll-bench"
CHECK, FLAVOR, TOPOLOGY, CQ = "atoll-topology", "gb200", "nvl72-fabric", "bench-cq"
SHAPES = ((1, 1), (1, 2), (1, 4), (2, 4))
"""(pods, GPUs per pod) of the benchmark's Workloads, drawn uniformly."""


def _node(name: str, block: int, island: int, gpus: int) -> tuple[dict[str, Any], dict[str, Any]]:
    labels = {"kubernetes.io/hostname": name, POOL: "bench", BLOCK: f"b{block}", CLIQUE: f"b{block}-c{island}"}
    res = {GPU: str(gpus), "cpu": "144", "memory": "1800Gi", "pods": "110"}
    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"allocatable": res, "capacity": res,
              "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
                              "lastHeartbeatTime": t, "lastTransitionTime": t}]}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}, status


def _workload(name: str, pods: int, gpus: int, profile: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": NS},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": pods, "template": {
                "metadata": {"annotations": {"atoll.dev/profile": profile}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.example.com/train:1",
                         "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}}}]}}


def _reserve(port: Any, name: str, pods: int, gpus: int) -> None:
    """Kueue's quota reservation: admission, QuotaReserved, Atoll's check Pending (field manager kueue)."""
    from admission.kube._port import WORKLOADS

    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    port.apply(WORKLOADS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": NS},
                           "status": {
                               "admission": {"clusterQueue": CQ, "podSetAssignments": [
                                   {"name": "main", "count": pods, "flavors": {GPU: FLAVOR}, "resourceUsage": {GPU: str(pods * gpus)}}]},
                               "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                               "message": f"Quota reserved in ClusterQueue {CQ}", "lastTransitionTime": t}],
                               "admissionChecks": [{"name": CHECK, "state": "Pending", "message": "Waiting for the admission check",
                                                    "lastTransitionTime": t}]}},
               field_manager="kueue", subresource="status")


def _install(port: Any, islands: int, per_island: int, gpus: int) -> int:
    from admission.kube._port import ADMISSION_CHECKS, CLUSTER_QUEUES, CONFIGMAPS, LOCAL_QUEUES, NODES, RESOURCE_FLAVORS, TOPOLOGIES, Resource

    namespaces = Resource("", "v1", "namespaces", "Namespace", False)
    port.create(namespaces, {"metadata": {"name": NS}})

    def one(i: int) -> None:
        block, island = divmod(i // per_island, 8)
        name = f"n{i:05d}"
        body, status = _node(name, block, island, gpus)
        port.create(NODES, body)
        port.apply(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status},
                   field_manager="kubelet", subresource="status")
        port.patch(NODES, name, {"spec": {"taints": None}})  # lift the not-ready taint (no node lifecycle controller here)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(islands * per_island)))
    port.create(TOPOLOGIES, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": TOPOLOGY},
                             "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": CLIQUE}]}})
    port.create(RESOURCE_FLAVORS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
                                   "spec": {"nodeLabels": {POOL: "bench"}}})
    port.create(ADMISSION_CHECKS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
                                   "spec": {"controllerName": "atoll.dev/topology"}})
    port.create(CLUSTER_QUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CQ}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": FLAVOR, "resources": [{"name": GPU, "nominalQuota": islands * per_island * gpus}]}]}],
        "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK, "onFlavors": [FLAVOR]}]}}})
    port.create(LOCAL_QUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": NS},
                               "spec": {"clusterQueue": CQ}})
    doc = {"defaultProfile": "strict", "flavors": {FLAVOR: {"topology": TOPOLOGY}},
           "profiles": {"strict": {"requiredLevel": CLIQUE}, "elastic": {"preferredLevel": CLIQUE, "maxSpanLevel": BLOCK, "relaxAfterSeconds": 300}}}
    port.create(CONFIGMAPS, {"metadata": {"name": "atoll-policies", "namespace": NS}, "data": {"profiles.yaml": yaml.safe_dump(doc)}})
    return islands * per_island * gpus


def run_bench(workloads: int, *, islands: int = 64, per_island: int = 18, gpus: int = 4, mode: str = "stream", seed: int = 7,
              timeout: float = 600.0) -> dict[str, Any]:
    from admission.controller._loop import Controller
    from admission.kube._client import KubePort
    from admission.kube._port import WORKLOADS
    from admission.controller._records import Recorder
    from admission.controller._settings import ConfigSettings, KueueSettings, Settings
    from admission.kube.envtest import ApiServer, EnvtestError, install_kueue_crds, kueue_crd_dir

    crds = kueue_crd_dir()
    if crds is None:
        raise EnvtestError("Kueue CRDs not found (../shared/kueue beside the repository, or set ATOLL_KUEUE_CRDS)")
    rng = np.random.default_rng(seed)
    shapes = [SHAPES[int(k)] for k in rng.integers(0, len(SHAPES), workloads)]
    profiles = ["elastic" if rng.random() < 0.3 else "strict" for _ in range(workloads)]
    pending_at: dict[str, float] = {}
    written_at: dict[str, float] = {}
    outcomes: dict[str, str] = {}
    lock = threading.Lock()

    def on_written(key: str, outcome: str, when: float) -> None:
        with lock:
            written_at[key.split("/", 1)[1]] = time.monotonic()
            outcomes[key.split("/", 1)[1]] = outcome

    with ApiServer() as api:
        client = api.api_client()
        install_kueue_crds(client, crds)
        port = KubePort(client)
        total_gpus = _install(port, islands, per_island, gpus)
        settings = Settings(kueue=KueueSettings(admission_check=CHECK), config=ConfigSettings(namespace=NS))
        ctrl = Controller(port, settings=settings, recorder=Recorder(io.StringIO()), on_written=on_written)

        def submit(i: int) -> None:
            name = f"w{i:05d}"
            pods, per = shapes[i]
            port.create(WORKLOADS, _workload(name, pods, per, profiles[i]))
            _reserve(port, name, pods, per)
            with lock:
                pending_at[name] = time.monotonic()

        started = time.monotonic()
        if mode == "backlog":
            for i in range(workloads):
                submit(i)
            started = time.monotonic()
            ctrl.start()
        else:
            ctrl.start()
            if not ctrl.wait_synced(60):
                raise TimeoutError("controller did not finish its initial list within 60s")
            started = time.monotonic()
            for i in range(workloads):
                submit(i)
        deadline = time.monotonic() + timeout
        while len(written_at) < workloads and time.monotonic() < deadline:
            time.sleep(0.05)
        ctrl.stop()
    with lock:
        done = [n for n in pending_at if n in written_at]
        lat = np.array([written_at[n] - pending_at[n] for n in done]) * 1000.0
        end = max(written_at.values()) if written_at else started
        counts = {o: sum(1 for n in done if outcomes[n] == o) for o in ("admit", "wait", "reject")}
    elapsed = max(end - started, 1e-9)
    return {
        "mode": mode, "workloads": workloads, "decided": len(done), "nodes": islands * per_island, "gpus": total_gpus,
        "admitted": counts["admit"], "waited": counts["wait"], "rejected": counts["reject"],
        "elapsed_s": round(elapsed, 2), "decisions_per_s": round(len(done) / elapsed, 1), "admissions_per_s": round(counts["admit"] / elapsed, 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 1) if lat.size else None,
        "p99_ms": round(float(np.percentile(lat, 99)), 1) if lat.size else None,
        "max_ms": round(float(lat.max()), 1) if lat.size else None,
    }


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="atoll bench controller",
                                description="decisions against a real kube-apiserver: admissions/s and check-Pending → status-written latency")
    p.add_argument("--workloads", type=int, default=1000)
    p.add_argument("--islands", type=int, default=64, help="NVLink islands (8 per block)")
    p.add_argument("--nodes-per-island", type=int, default=18)
    p.add_argument("--gpus-per-node", type=int, default=4)
    p.add_argument("--mode", choices=("stream", "backlog"), default="stream")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--timeout", type=float, default=600.0, help="give up waiting for decisions after this many seconds")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    if args.workloads < 1 or args.islands < 1 or args.nodes_per_island < 1:
        print("atoll bench controller: --workloads, --islands and --nodes-per-island must be ≥ 1", file=sys.stderr)
        return 2
    from admission.kube.envtest import EnvtestError

    try:
        row = run_bench(args.workloads, islands=args.islands, per_island=args.nodes_per_island, gpus=args.gpus_per_node,
                        mode=args.mode, seed=args.seed, timeout=args.timeout)
    except (EnvtestError, TimeoutError) as exc:
        print(f"atoll bench controller: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(row))
    else:
        print(" | ".join(row))
        print(" | ".join(str(v) for v in row.values()))
    return 0 if row["decided"] == row["workloads"] else 1

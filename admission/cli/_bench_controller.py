"""``atoll bench controller``: the controller against a real kube-apiserver with Kueue's CRDs.

It starts etcd and kube-apiserver (``tests.envtest``: it runs from a clone of the repository), creates a GB200-like fabric (Nodes,
a Topology, a ResourceFlavor, the AdmissionCheck, a ClusterQueue, the profiles ConfigMap),
then plays Kueue for N Workloads (create, reserve quota, check Pending) while the controller
runs its watch loop, and measures each Workload from its Pending entry being written to
Atoll's entry being written.

- ``--mode stream`` (default): one producer submits Workloads one after another while the
  controller runs; latencies are what a Workload sees on a cluster that keeps up.
- ``--mode backlog``: every Workload is Pending before the controller starts; the rate is the
  controller's own (list, then decide the backlog as fast as it can).

The same run first drives a no-op check controller: Atoll's own loop, informers and status
write, with a decision that admits without placing anything. On 2 cores the apiserver is the
ceiling, so Atoll's admissions/s as a ratio of the no-op's is the figure that says what
placement costs; both rows and the ratio are printed, with the process's peak RSS.
"""

from __future__ import annotations

import io
import json
import resource
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import yaml

from admission import vocabulary
from admission.cli._args import Parser, number, seed, whole

__all__ = ["main", "run_bench"]

BLOCK, CLIQUE, POOL = "network.example.com/block", "nvidia.com/gpu.clique", vocabulary.BENCH_POOL
GPU = "nvidia.com/gpu"
NS = "atoll-bench"
NOOP_NS = "atoll-bench-noop"
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


def _workload(ns: str, name: str, pods: int, gpus: int, profile: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": pods, "template": {
                "metadata": {"annotations": {vocabulary.PROFILE: profile}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.example.com/train:1",
                         "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}}}]}}


def _kueue_status(ns: str, name: str, pods: int, gpus: int, *, finished: bool = False) -> dict[str, Any]:
    """Kueue's quota reservation: admission, QuotaReserved, Atoll's check Pending (and Finished
    when the job is done; the admission is sent again, as the field manager that owns it)."""
    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                   "message": f"Quota reserved in ClusterQueue {CQ}", "lastTransitionTime": t}]
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "Job finished successfully",
                           "lastTransitionTime": t})
    status: dict[str, Any] = {
        "admission": {"clusterQueue": CQ, "podSetAssignments": [
            {"name": "main", "count": pods, "flavors": {GPU: FLAVOR}, "resourceUsage": {GPU: str(pods * gpus)}}]},
        "conditions": conditions}
    if not finished:
        status["admissionChecks"] = [{"name": CHECK, "state": "Pending", "message": "Waiting for the admission check", "lastTransitionTime": t}]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": ns}, "status": status}


def _reserve(port: Any, ns: str, name: str, pods: int, gpus: int) -> None:
    from admission.kube import WORKLOADS

    port.apply(WORKLOADS, _kueue_status(ns, name, pods, gpus), field_manager="kueue", subresource="status")


def _finish_all(port: Any, ns: str, shapes: list[tuple[int, int]]) -> None:
    """Kueue's Finished condition on every Workload of ``ns`` (as when their jobs complete)."""
    from admission.kube import WORKLOADS

    def one(i: int) -> None:
        pods, gpus = shapes[i]
        port.apply(WORKLOADS, _kueue_status(ns, f"w{i:05d}", pods, gpus, finished=True), field_manager="kueue", subresource="status")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(len(shapes))))


def _install(port: Any, islands: int, per_island: int, gpus: int) -> int:
    from admission.kube import ADMISSION_CHECKS, CLUSTER_QUEUES, NODES, RESOURCE_FLAVORS, TOPOLOGIES

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
                                   "spec": {"controllerName": vocabulary.CONTROLLER_NAME}})
    port.create(CLUSTER_QUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CQ}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": FLAVOR, "resources": [{"name": GPU, "nominalQuota": islands * per_island * gpus}]}]}],
        "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK, "onFlavors": [FLAVOR]}]}}})
    return islands * per_island * gpus


def _install_namespace(port: Any, ns: str) -> None:
    """The namespace a run submits to: its LocalQueue and the profiles ConfigMap its controller reads."""
    from admission.kube import CONFIGMAPS, LOCAL_QUEUES, Resource

    port.create(Resource("", "v1", "namespaces", "Namespace", False), {"metadata": {"name": ns}})
    port.create(LOCAL_QUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
                               "spec": {"clusterQueue": CQ}})
    doc = {"defaultProfile": "strict", "flavors": {FLAVOR: {"topology": TOPOLOGY}},
           "profiles": {"strict": {"requiredLevel": CLIQUE}, "elastic": {"preferredLevel": CLIQUE, "maxSpanLevel": BLOCK, "relaxAfterSeconds": 300}}}
    port.create(CONFIGMAPS, {"metadata": {"name": "atoll-policies", "namespace": ns}, "data": {"profiles.yaml": yaml.safe_dump(doc)}})


class _NoopDecider:
    """Admits every Workload at once with no placement: the write path's cost alone."""

    def __init__(self) -> None:
        self.holds: dict[str, dict[str, tuple[str, ...]]] = {}
        """No domain is ever held for preemption (the controller reads this as it reads the Decider's)."""

    @staticmethod
    def warm_up() -> None:
        return None

    @staticmethod
    def warm() -> list[str]:
        """Nothing to build: it searches no snapshot."""
        return []

    @staticmethod
    def room_now(flavor: str) -> None:
        """No snapshot to offer freed room on (the controller then wakes a flavor's parked Workloads whole)."""
        return None

    @staticmethod
    def evaluate(obj: Any, decision_id: str, now: float) -> Any:
        from admission.controller import Verdict

        return Verdict("admit", "Ready: no-op check (benchmark baseline)", decision_id=decision_id)


def _run_one(port: Any, ns: str, *, noop: bool, shapes: list[tuple[int, int]], profiles: list[str], mode: str,
             timeout: float) -> dict[str, Any]:
    """Submit the Workloads to ``ns`` and time the controller (Atoll's, or the no-op) deciding them."""
    from admission.controller import ConfigSettings, Controller, KueueSettings, Recorder, Settings
    from admission.kube import WORKLOADS

    workloads = len(shapes)
    pending_at: dict[str, float] = {}
    written_at: dict[str, float] = {}
    outcomes: dict[str, str] = {}
    lock = threading.Lock()

    def on_written(key: str, outcome: str, when: float) -> None:
        namespace, name = key.split("/", 1)
        if namespace == ns:
            with lock:
                written_at[name] = time.monotonic()
                outcomes[name] = outcome

    _install_namespace(port, ns)
    settings = Settings(kueue=KueueSettings(admission_check=CHECK), config=ConfigSettings(namespace=ns))
    ctrl = Controller(port, settings=settings, recorder=Recorder(io.StringIO()), on_written=on_written)
    if noop:
        ctrl.decider = _NoopDecider()  # type: ignore[assignment]
    ctrl.decider.warm_up()  # a deployed controller compiles its kernels before it is ready: not part of the rate

    def submit(i: int) -> None:
        name = f"w{i:05d}"
        pods, per = shapes[i]
        port.create(WORKLOADS, _workload(ns, name, pods, per, profiles[i]))
        _reserve(port, ns, name, pods, per)
        with lock:
            pending_at[name] = time.monotonic()

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
        "controller": "no-op" if noop else "atoll", "mode": mode, "workloads": workloads, "decided": len(done),
        "admitted": counts["admit"], "waited": counts["wait"], "rejected": counts["reject"],
        "elapsed_s": round(elapsed, 2), "decisions_per_s": round(len(done) / elapsed, 1), "admissions_per_s": round(counts["admit"] / elapsed, 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 1) if lat.size else None,
        "p99_ms": round(float(np.percentile(lat, 99)), 1) if lat.size else None,
        "max_ms": round(float(lat.max()), 1) if lat.size else None,
    }


def run_bench(workloads: int, *, islands: int = 64, per_island: int = 18, gpus: int = 4, mode: str = "stream", seed: int = 7,
              timeout: float = 600.0) -> dict[str, Any]:
    """The no-op controller, then Atoll's, on the same apiserver, fabric and Workload shapes."""
    from admission.kube import KubePort
    from tests.envtest import ApiServer, ensure_kueue_crds, install_kueue_crds  # a clone's test infrastructure

    crds = ensure_kueue_crds()  # one line naming what is missing and how to provide it
    rng = np.random.default_rng(seed)
    shapes = [SHAPES[int(k)] for k in rng.integers(0, len(SHAPES), workloads)]
    profiles = ["elastic" if rng.random() < 0.3 else "strict" for _ in range(workloads)]
    with ApiServer() as api:
        client = api.api_client()
        install_kueue_crds(client, crds)
        port = KubePort(client)
        total_gpus = _install(port, islands, per_island, gpus)
        noop = _run_one(port, NOOP_NS, noop=True, shapes=shapes, profiles=profiles, mode=mode, timeout=timeout)
        _finish_all(port, NOOP_NS, shapes)  # the no-op's Workloads held no placement: they must owe nothing in Atoll's run
        atoll = _run_one(port, NS, noop=False, shapes=shapes, profiles=profiles, mode=mode, timeout=timeout)
    ratio = atoll["admissions_per_s"] / noop["admissions_per_s"] if noop["admissions_per_s"] else 0.0
    return {**atoll, "nodes": islands * per_island, "gpus": total_gpus, "noop": noop,
            "ratio_vs_noop": round(ratio, 3), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv: Sequence[str]) -> int:
    p = Parser(prog="atoll bench controller",
                                description="decisions against a real kube-apiserver: admissions/s and check-Pending → status-written latency")
    p.add_argument("--workloads", type=whole(1), default=1000)
    p.add_argument("--islands", type=whole(1), default=64, help="NVLink islands (8 per block)")
    p.add_argument("--nodes-per-island", type=whole(1), default=18)
    p.add_argument("--gpus-per-node", type=whole(1), default=4)
    p.add_argument("--mode", choices=("stream", "backlog"), default="stream")
    p.add_argument("--seed", type=seed, default=7)
    p.add_argument("--timeout", type=number(above=0), default=600.0, help="give up waiting for decisions after this many seconds")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    try:  # the test control plane is test infrastructure: it lives in a clone's tests/, never in the installed package
        from tests.envtest import EnvtestError
    except ImportError:
        print("atoll bench controller: it starts the test control plane of Atoll's repository (tests/envtest): run it from "
              "the root of a clone, after `make envtest`", file=sys.stderr)
        return 1
    try:
        row = run_bench(args.workloads, islands=args.islands, per_island=args.nodes_per_island, gpus=args.gpus_per_node,
                        mode=args.mode, seed=args.seed, timeout=args.timeout)
    except (EnvtestError, TimeoutError) as exc:
        print(f"atoll bench controller: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(row))
    else:
        columns = ("controller", "mode", "workloads", "decided", "admitted", "waited", "rejected", "elapsed_s", "decisions_per_s",
                   "admissions_per_s", "p50_ms", "p99_ms", "max_ms")
        print(" | ".join(columns))
        for r in (row["noop"], row):
            print(" | ".join(str(r[c]) for c in columns))
        print(f"atoll / no-op admissions/s: {row['ratio_vs_noop']} on {row['nodes']} nodes ({row['gpus']} GPUs); "
              f"peak RSS {row['peak_rss_mb']} MB")
    return 0 if row["decided"] == row["workloads"] and row["noop"]["decided"] == row["workloads"] else 1

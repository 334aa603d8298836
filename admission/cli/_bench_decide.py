"""``atoll bench decide``: the controller's own decision at fleet scale, on the in-memory port.

A generated GB200 NVL72 fabric (racks of 18 nodes × 4 GPUs, 8 racks per scalable unit, 8 units
per spine) is cut to ``--nodes`` Nodes and loaded into ``MemoryCluster`` with Atoll's
ResourceFlavor, Topology, AdmissionCheck and profiles ConfigMap, one running pod of another
tenant on most nodes (60-90 % of each rack's GPUs in use), and ``--pending`` Workloads Kueue has
reserved quota for with Atoll's check Pending (ITP-shaped synthetic jobs, 1 to 512 GPUs). The
objects look like a real fleet's: Nodes carry the kubelet's image list, addresses, node info and
``managedFields``; Workloads carry a full pod template (image, command, environment, volumes)
and ``managedFields``.

The controller runs as deployed (decision records rendered, Events posted from their own
thread, metrics kept, writes through the port): ``sync()`` lists everything once, then
``Controller.reconcile`` decides ``--decisions`` of the pending Workloads one at a time. Each
admitted Workload's pods bind on their planned nodes before the next decision, as the watch
would deliver them. Reported: the decision time (p50, p95, p99, max: one ``reconcile``, the
write's preparation and the record included, the time spent inside the port left out, as an
apiserver round trip is not the controller's work). ``p50_ms``/``p99_ms`` are the worker
thread's CPU time, so that other processes sharing the machine do not count; ``wall_*`` is the
same span on the wall clock (equal on an idle machine), and ``with_port_*`` the wall clock with
the port's time in. Also the outcomes, the peak RSS of the whole process (the in-memory
apiserver's own copies of every object included; ``rss_port_mb`` is the process with the port
loaded, before the controller lists it, ``rss_synced_mb`` after), and the time to build the
cluster and to list it into the controller. Events are posted from their thread and taken by
the port without being kept. Decision ids are numbered, so ``verdicts_sha256`` (over each
verdict's Workload, outcome, message and podSetUpdates, in order) compares two versions' verdicts.

``--waiting N`` adds N Workloads waiting for quota in the same ClusterQueue (``gpu-cq``, whose
quota is what the pending Workloads hold: it is full; no admission,
``QuotaReserved=False`` as Kueue writes it, created a day before the clock: every gang among
them has waited ``reserveAfterSeconds``), and ``--hold-behind-gangs quota|start`` gives the
profile ``queueing.holdBehindGangs`` (``reserveAfterSeconds: 1800``), so each decision first
reads which gangs are owed (``Controller._feed_owed``). ``feed_owed_p50_ms``/``p99_ms`` are its
own CPU time per decision, inside the decision's.

``--park-waiting`` gives the profile ``queueing.parkWaiting`` (waits for a domain park), and after each decision
times one quota-yield pass as the controller makes it once its queue drains (``Controller.
_yield_pairs``: which parked Workload would give its quota to which waiter); the pairs are
digested (``yield_sha256``), not written (no Kueue here evicts the givers), each giver set aside
as after its write (it gives once, as deployed).
``look_p50_ms``/``p99_ms`` are the owed-gang look and the pass together, per decision;
``look_gc_*`` the collector's pauses inside them, ``gc_*`` over the timed decisions
(``gc_full``: full collections).

Goal (``--goal-p99-ms``, ``--goal-rss-mb``): the command exits 1 when either is missed. With
``--scale-from N`` the same bench first runs with N waiting, and the command also exits 1 when
the look's p50 or p99 at ``--waiting`` is more than ``--goal-scale`` (2) times that at N.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import resource
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from admission import vocabulary
from admission.cli._args import Parser, number, seed, whole
from admission.kube import EVENTS

__all__ = ["fleet_cluster", "main", "run_decide"]

SPINE, SU, CLIQUE, HOST = "network.example.com/spine", "network.example.com/su", "nvidia.com/gpu.clique", "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
NODES_PER_RACK, RACKS_PER_SU, SUS_PER_SPINE = 18, 8, 8
NODES_PER_SPINE = NODES_PER_RACK * RACKS_PER_SU * SUS_PER_SPINE
NAMESPACES = 40
IMAGES_PER_NODE = 24


def fleet_cluster(nodes: int) -> Any:
    """The GB200 NVL72 fabric with at least ``nodes`` nodes (whole spines; the bench keeps the first ``nodes``)."""
    from admission.cli._bench_quality import scale_cluster

    return scale_cluster(spines=max(1, -(-nodes // NODES_PER_SPINE)), sus=SUS_PER_SPINE, racks=RACKS_PER_SU, nodes=NODES_PER_RACK)


def _kubelet_node(obj: dict[str, Any], i: int) -> dict[str, Any]:
    """A Node as a kubelet, the GPU operator and node-feature-discovery leave it."""
    meta, status = obj["metadata"], obj["status"]
    name = meta["name"]
    meta["labels"].update({
        "beta.kubernetes.io/arch": "arm64", "kubernetes.io/arch": "arm64", "beta.kubernetes.io/os": "linux", "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "gb200-nvl72-tray", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "189471",
        "nvidia.com/gpu.family": "blackwell", "nvidia.com/cuda.driver.major": "570", "nvidia.com/mig.capable": "false",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "ARM", "topology.kubernetes.io/zone": f"zone-{i % 3}",
    })
    meta["annotations"] = {**meta.get("annotations", {}), "node.alpha.kubernetes.io/ttl": "0",
                           "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                           "nfd.node.kubernetes.io/feature-labels": "cpu-model.vendor_id,nvidia.com/gpu.family"}
    meta["managedFields"] = [
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in meta["labels"]}},
                      "f:status": {"f:allocatable": {f"f:{k}": {} for k in status["allocatable"]},
                                   "f:images": {}, "f:nodeInfo": {"f:kubeletVersion": {}}}}},
        {"manager": "nfd-worker", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{k}": {} for k in meta["annotations"]}}}},
    ]
    status["addresses"] = [{"type": "InternalIP", "address": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"},
                           {"type": "Hostname", "address": name}]
    status["nodeInfo"] = {"architecture": "arm64", "containerRuntimeVersion": "containerd://2.0.4", "kernelVersion": "6.8.0-1021-nvidia-64k",
                          "kubeProxyVersion": "", "kubeletVersion": "v1.33.2", "operatingSystem": "linux",
                          "osImage": "Ubuntu 24.04.2 LTS", "machineID": f"{i:032x}", "systemUUID": f"{i:08x}-0000-4000-8000-{i:012x}",
                          "bootID": f"{i:08x}-boot"}
    status["images"] = [{"names": [f"registry.example.com/team-{k}/trainer@sha256:{(i * 31 + k):064x}",
                                   f"registry.example.com/team-{k}/trainer:v{k}.{i % 7}"], "sizeBytes": 9_000_000_000 + k}
                        for k in range(IMAGES_PER_NODE)]
    status["conditions"] = [{"type": t, "status": "False", "reason": f"Kubelet{t}", "message": f"kubelet has no {t}",
                             "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                            for t in ("MemoryPressure", "DiskPressure", "PIDPressure")] + [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
         "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    return obj


def _template(job: Any, k: int, profile: str) -> dict[str, Any]:
    """The pod template a training or serving job's Workload carries."""
    req = {GPU: str(job.gpus_per_pod), "cpu": str(max(1, job.gpus_per_pod * 16)), "memory": f"{max(1, job.gpus_per_pod * 200)}Gi"}
    return {
        "metadata": {"labels": {"app": job.id, "team": f"team-{k % NAMESPACES}"},
                     "annotations": {vocabulary.PROFILE: profile, **({vocabulary.CLASS: job.kind} if job.kind == "inference" else {})}},
        "spec": {
            "restartPolicy": "Never", "serviceAccountName": "trainer",
            "containers": [{
                "name": "trainer", "image": "registry.example.com/llm/trainer:2026.01", "imagePullPolicy": "IfNotPresent",
                "command": ["torchrun"], "args": ["--nnodes", str(job.pods), "--nproc-per-node", str(job.gpus_per_pod), "train.py",
                                                  "--config", f"/etc/config/{job.id}.yaml"],
                "env": [{"name": f"NCCL_VAR_{k}", "value": str(k)} for k in range(8)]
                       + [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "ports": [{"containerPort": 29500, "name": "rendezvous", "protocol": "TCP"}],
                "resources": {"requests": req, "limits": {GPU: req[GPU]}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "shm", "mountPath": "/dev/shm"},
                                 {"name": "config", "mountPath": "/etc/config"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
                        {"name": "config", "configMap": {"name": "trainer-config"}}],
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def _workload(job: Any, k: int, profile: str) -> dict[str, Any]:
    from admission.simulator import CHECK_NAME, workload_object

    ns = f"team-{k % NAMESPACES}"
    obj = workload_object(f"job-{k:06d}", [{"name": "main", "count": job.pods, "template": _template(job, k, profile)}], flavor="gb200",
                          namespace=ns, queue="training", cluster_queue="gpu-cq", gpu_resource=GPU, check=CHECK_NAME, uid=f"wl-{k:06d}")
    meta = obj["metadata"]
    meta["labels"] = {vocabulary.KUEUE_JOB_UID: f"job-uid-{k:06d}"}
    meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": f"job-{k:06d}", "uid": f"job-uid-{k:06d}",
                                "controller": True, "blockOwnerDeletion": True}]
    meta["managedFields"] = [
        {"manager": "kueue", "operation": "Update", "apiVersion": "kueue.x-k8s.io/v1beta2", "time": "2026-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:podSets": {}, "f:queueName": {}, "f:priority": {}}}},
        {"manager": "kueue-admission", "operation": "Apply", "apiVersion": "kueue.x-k8s.io/v1beta2", "time": "2026-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": {"f:status": {"f:admission": {"f:clusterQueue": {}, "f:podSetAssignments": {}}, "f:conditions": {}}}},
    ]
    obj["spec"]["priority"] = 0
    obj["status"]["resourceRequests"] = [{"name": "main", "resources": {GPU: str(job.gpus)}}]
    obj["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] = {GPU: str(job.gpus)}  # the quota it holds
    return obj


def _resident_pods(names: Sequence[str], seed: int) -> list[dict[str, Any]]:
    """One running pod of another tenant per node: each rack draws its share of GPUs in use (60-90 %)."""
    rng = np.random.default_rng(seed)
    out = []
    share = 0.0
    for i, name in enumerate(names):
        if i % NODES_PER_RACK == 0:
            share = float(rng.uniform(0.6, 0.9))
        used = int(rng.binomial(4, share))
        if used:
            out.append({"metadata": {"name": f"resident-{name}", "namespace": "tenant", "uid": f"resident-{name}"},
                        "spec": {"nodeName": name, "containers": [{"name": "main", "resources": {"requests": {GPU: str(used)}}}]},
                        "status": {"phase": "Running"}})
    return out


class _TimedPort:
    """The in-memory port as the controller sees it, with the time the worker spends inside it
    counted (an apiserver round trip, not the controller's work), and Events taken without being
    kept (the Event thread's writes cost the apiserver, not the controller)."""

    def __init__(self, port: Any) -> None:
        self.port = port
        self.worker = threading.get_ident()
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.events = 0

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.port, name)

        def timed(resource: Any, *args: Any, **kw: Any) -> Any:
            if resource == EVENTS:
                self.events += 1
                return args[0] if name == "create" else {}
            if threading.get_ident() != self.worker:
                return call(resource, *args, **kw)
            t, c = time.perf_counter(), time.thread_time()
            try:
                return call(resource, *args, **kw)
            finally:
                self.seconds += time.perf_counter() - t
                self.cpu_seconds += time.thread_time() - c

        return timed


class _Discard:
    """Where the records go: rendered as deployed, then dropped."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


def _rss_mb() -> float:
    """Resident set size now (MB), from /proc; the peak where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _waiting(job: Any, k: int, profile: str) -> dict[str, Any]:
    """A Workload Kueue found too little quota for, created a day before the bench's clock."""
    obj = _workload(job, k, profile)
    obj["metadata"]["creationTimestamp"] = "2025-12-31T00:00:00Z"
    obj["status"] = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                     "lastTransitionTime": "2025-12-31T00:00:00Z",
                                     "message": "couldn't assign flavors to pod set main: insufficient unused quota"}],
                     "resourceRequests": obj["status"]["resourceRequests"]}
    return obj


def run_decide(nodes: int, pending: int, decisions: int, seed: int = 0, waiting: int = 0, hold: str = "off",
               park: bool = False) -> dict[str, Any]:
    """Build the fleet in memory, list it into a controller, and time ``decisions`` reconciles
    (with ``waiting`` Workloads waiting for quota, ``hold``: ``queueing.holdBehindGangs``, and
    ``park``: ``queueing.parkWaiting``, a quota-yield pass timed after each decision)."""
    from admission.cli._bundled import resolve_profiles
    from admission.controller import ConfigSettings, Controller, KueueSettings, Recorder, Settings
    from admission.kube import CLUSTER_QUEUES, LOCAL_QUEUES, NODES, PODS, WORKLOADS, ManualClock
    from admission.simulator import CHECK_NAME, PROFILES_NAMESPACE, MemoryCluster, cluster_objects, profiles_for_cluster, synthetic_jobs
    from policies import ProfilesDocument, load_profiles_file

    t0 = time.perf_counter()
    cluster = fleet_cluster(nodes)
    doc = profiles_for_cluster(load_profiles_file(resolve_profiles(None)), cluster)
    if hold != "off" or park:
        raw = doc.model_dump(by_alias=True, exclude_unset=True)
        queueing = raw["profiles"]["elastic"].get("queueing", {})
        if hold != "off":
            queueing = {**queueing, "reserveAfterSeconds": 1800, "holdBehindGangs": hold}
        if park:
            queueing = {**queueing, "parkWaiting": True}
        raw["profiles"]["elastic"]["queueing"] = queueing
        doc = ProfilesDocument.model_validate(raw)
    port = MemoryCluster(ManualClock(1_767_225_600.0))
    kept: list[str] = []
    for res, obj in cluster_objects(cluster, doc):
        if res == NODES:
            if len(kept) >= nodes:
                continue
            kept.append(obj["metadata"]["name"])
            obj = _kubelet_node(obj, len(kept))
        port.put(res, obj)
    for pod in _resident_pods(kept, seed):
        port.put(PODS, pod)
    jobs = synthetic_jobs(pending, seed, gpus_per_node=4)
    held = sum(job.gpus for job in jobs)
    for k, job in enumerate(jobs):
        port.put(WORKLOADS, _workload(job, k, "elastic"))
    if waiting:
        for k, job in enumerate(synthetic_jobs(waiting, seed + 1, gpus_per_node=4), start=pending):
            port.put(WORKLOADS, _waiting(job, k, "elastic"))
        # as much quota as the pending Workloads hold (Kueue reserved it for them): the ClusterQueue is full
        port.put(CLUSTER_QUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpu-cq"},
                                  "spec": {"resourceGroups": [{"coveredResources": [GPU], "flavors": [
                                      {"name": "gb200", "resources": [{"name": GPU, "nominalQuota": str(held)}]}]}]}})
        for i in range(NAMESPACES):
            port.put(LOCAL_QUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                                    "metadata": {"name": "training", "namespace": f"team-{i}"}, "spec": {"clusterQueue": "gpu-cq"}})
    del jobs
    gc.collect()
    build_s = time.perf_counter() - t0
    rss_port = _rss_mb()

    settings = Settings(kueue=KueueSettings(admission_check=CHECK_NAME), config=ConfigSettings(namespace=PROFILES_NAMESPACE))
    timed = _TimedPort(port)
    ids = iter(range(1, 1 << 62))
    controller = Controller(timed, settings=settings, clock=port.clock, recorder=Recorder(_Discard()), identity="bench",  # type: ignore[arg-type]
                            new_id=lambda: f"bench-{next(ids)}")
    t1 = time.perf_counter()
    controller.sync()
    gc.collect()
    sync_s = time.perf_counter() - t1
    rss_synced = _rss_mb()
    queued = controller.pending()
    controller.decider.warm_up()
    feed: list[float] = []
    feed_owed = controller._feed_owed
    collecting = {"start": 0.0, "spent": 0.0, "full": 0, "longest": 0.0}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        """The collector's pauses (wall clock), and how many were full (generation 2)."""
        if phase == "start":
            collecting["start"] = time.perf_counter()
            return
        took = time.perf_counter() - collecting["start"]
        collecting["spent"] += took
        collecting["longest"] = max(collecting["longest"], took)
        collecting["full"] += info.get("generation") == 2

    look = {"cpu": 0.0, "gc": 0.0}
    """This decision's look so far: the owed gangs' and the quota-yield pass's CPU time, and the collector's pauses inside them."""
    looks: list[float] = []
    look_gc: list[float] = []

    def timed_feed() -> None:
        c, g = time.thread_time(), collecting["spent"]
        try:
            feed_owed()
        finally:
            feed.append(time.thread_time() - c)
            look["cpu"] += feed[-1]
            look["gc"] += collecting["spent"] - g

    controller._feed_owed = timed_feed  # type: ignore[method-assign]
    passes: list[float] = []
    gave = 0
    yield_digest = hashlib.sha256()

    def yield_pass() -> None:
        """One quota-yield pass as the controller makes it once its queue drains (who would give to
        whom), timed. The gives are not written (no Kueue here to evict the givers and admit the
        waiters); each giver is set aside as after its write, so it gives at most once, as deployed."""
        nonlocal gave
        c, g = time.thread_time(), collecting["spent"]
        pairs: list[tuple[str, str]] = []
        try:
            pairs = controller._yield_pairs()
        finally:
            passes.append(time.thread_time() - c)
            look["cpu"] += passes[-1]
            look["gc"] += collecting["spent"] - g
        gave += len(pairs)
        yield_digest.update(json.dumps(pairs).encode())
        for key, waiter in pairs:
            controller.parking.set_aside(key)
            controller.quota_yield.gave(key, waiter, port.clock.now(), controller.quota_yield.flavor_of(key),
                                        controller.parking.room.need(key))

    controller.events.start()
    gc.callbacks.append(on_gc)
    own, wall, total = [], [], []
    digest = hashlib.sha256()
    outcomes = {"admit": 0, "wait": 0, "reject": 0}
    pod_seq = 0
    try:
        for key in queued[:decisions]:
            in_port, cpu_in_port = timed.seconds, timed.cpu_seconds
            t, c = time.perf_counter(), time.thread_time()
            verdict = controller.reconcile(key)
            took, cpu = time.perf_counter() - t, time.thread_time() - c
            total.append(took)
            wall.append(took - (timed.seconds - in_port))
            own.append(cpu - (timed.cpu_seconds - cpu_in_port))
            if park:
                yield_pass()
            looks.append(look["cpu"])
            look_gc.append(look["gc"])
            look["cpu"] = look["gc"] = 0.0
            if verdict is None:
                continue
            outcomes[verdict.outcome] += 1
            digest.update(json.dumps([key, verdict.outcome, verdict.message, verdict.podset_updates], sort_keys=True).encode())
            if verdict.outcome == "admit":  # the scheduler binds the pods on their planned nodes; the watch delivers them
                with controller.cache.pods_at_once():
                    for placed, update in zip(verdict.placements, verdict.podset_updates):
                        for node, count in placed.nodes.items():
                            for _ in range(count):
                                pod_seq += 1
                                controller.cache.upsert(PODS, {
                                    "metadata": {"name": f"bench-pod-{pod_seq}", "namespace": "bench", "uid": f"bench-pod-{pod_seq}",
                                                 "labels": {vocabulary.KUEUE_PODSET: placed.podset},
                                                 "annotations": dict(update.get("annotations") or {})},
                                    "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {
                                        "requests": {GPU: str(placed.gpus_per_pod)}}}]},
                                    "status": {"phase": "Running"}})
    finally:
        gc.callbacks.remove(on_gc)
        controller.events.stop()
    arr, walls, whole, fed, yp, lk = (np.array(v) if v else np.zeros(1) for v in (own, wall, total, feed, passes, looks))

    def ms(a: Any, q: float) -> float:
        return round(float(np.percentile(a, q)) * 1e3, 3)

    return {
        "nodes": len(kept), "gpus": 4 * len(kept), "pending": pending, "waiting": waiting, "hold_behind_gangs": hold,
        "owed": len(controller.queue_state.outlook.owed), "decisions": len(own), **outcomes,
        "p50_ms": ms(arr, 50), "p95_ms": ms(arr, 95), "p99_ms": ms(arr, 99), "max_ms": round(float(arr.max()) * 1e3, 3),
        "feed_owed_p50_ms": ms(fed, 50), "feed_owed_p99_ms": ms(fed, 99), "park_waiting": park,
        "parked": len(controller.parking.parked()), "yield_p50_ms": ms(yp, 50), "yield_p99_ms": ms(yp, 99), "yield_pairs": gave, "yield_sha256": yield_digest.hexdigest()[:16],
        "look_p50_ms": ms(lk, 50), "look_p99_ms": ms(lk, 99),
        "look_gc_p99_ms": ms(np.array(look_gc) if look_gc else np.zeros(1), 99), "look_gc_max_ms": round(max(look_gc, default=0.0) * 1e3, 3),
        "gc_full": collecting["full"], "gc_ms": round(collecting["spent"] * 1e3, 1), "gc_longest_ms": round(collecting["longest"] * 1e3, 3),
        "verdicts_sha256": digest.hexdigest()[:16],
        "wall_p50_ms": ms(walls, 50), "wall_p99_ms": ms(walls, 99), "wall_max_ms": round(float(walls.max()) * 1e3, 3),
        "with_port_p50_ms": ms(whole, 50), "with_port_p99_ms": ms(whole, 99), "events": timed.events,
        "build_s": round(build_s, 1), "sync_s": round(sync_s, 1),
        "rss_port_mb": round(rss_port, 1), "rss_synced_mb": round(rss_synced, 1),
        # the kernel syncs ru_maxrss from per-thread counters lazily, so it can trail a VmRSS sample
        "peak_rss_mb": round(max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, rss_port, rss_synced, _rss_mb()), 1),
    }


def main(argv: Sequence[str]) -> int:
    p = Parser(prog="atoll bench decide",
                                description="the controller's own decision (reconcile, records on) at fleet scale on the in-memory port")
    p.add_argument("--nodes", type=whole(NODES_PER_RACK), default=25_344,
                   help=f"GB200 nodes (4 GPUs each, at least one rack of {NODES_PER_RACK}); default: the 25,344-node fabric")
    p.add_argument("--pending", type=whole(1), default=50_000, help="Workloads with quota reserved and Atoll's check Pending")
    p.add_argument("--decisions", type=whole(1), default=2_000, help="of the pending Workloads, how many to decide (timed)")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--waiting", type=whole(0), default=0, help="Workloads waiting for quota in the same ClusterQueue (Kueue refused them)")
    p.add_argument("--hold-behind-gangs", choices=("off", "quota", "start"), default="off",
                   help="the profile's queueing.holdBehindGangs (reserveAfterSeconds 1800): each decision reads which gangs are owed")
    p.add_argument("--park-waiting", action="store_true",
                   help="the profile's queueing.parkWaiting: waits park, and a quota-yield pass is timed after each decision")
    p.add_argument("--scale-from", type=whole(0), default=0, metavar="N",
                   help="first run the same bench with N waiting, and compare the look per decision (owed gangs and quota-yield pass)")
    p.add_argument("--goal-scale", type=number(0), default=2.0,
                   help="with --scale-from: PASS when the look's p50 and p99 at --waiting are at most this many times those at N")
    p.add_argument("--goal-p99-ms", type=number(0), default=10.0, help="PASS when the p99 decision takes at most this long")
    p.add_argument("--goal-rss-mb", type=number(0), default=4096.0, help="PASS when the process's peak RSS stays at or below this")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    if args.scale_from and (args.scale_from >= args.waiting or not (args.park_waiting or args.hold_behind_gangs != "off")):
        print("atoll bench decide: --scale-from must be below --waiting, with --park-waiting or --hold-behind-gangs to time a look",
              file=sys.stderr)
        return 2
    run = (args.nodes, args.pending, min(args.decisions, args.pending), args.seed)
    with contextlib.redirect_stdout(sys.stderr):  # the controller's log lines, so that stdout is the report alone (--format json parses)
        base = run_decide(*run, args.scale_from, args.hold_behind_gangs, args.park_waiting) if args.scale_from else None
        gc.collect()
        row = run_decide(*run, args.waiting, args.hold_behind_gangs, args.park_waiting)
    ok = row["p99_ms"] <= args.goal_p99_ms and row["peak_rss_mb"] <= args.goal_rss_mb
    row["goal"] = {"p99_ms": args.goal_p99_ms, "peak_rss_mb": args.goal_rss_mb, "met": ok}
    scaled = None
    if base is not None:
        ratio = {q: round(row[f"look_{q}_ms"] / max(base[f"look_{q}_ms"], 1e-3), 2) for q in ("p50", "p99")}
        scaled = all(r <= args.goal_scale for r in ratio.values())
        row["scale"] = {"from_waiting": args.scale_from, "from": base, "look_ratio": ratio, "goal": args.goal_scale, "met": scaled}
        ok = ok and scaled
    if args.format == "json":
        print(json.dumps(row))
    else:
        shown = {k: v for k, v in row.items() if k not in ("goal", "scale")}
        print(" | ".join(shown))
        print(" | ".join(str(v) for v in shown.values()))
        print(f"{'PASS' if ok else 'FAIL'} decide: p99 {row['p99_ms']} ms (goal ≤ {args.goal_p99_ms:g}), "
              f"peak RSS {row['peak_rss_mb']:.0f} MB (goal ≤ {args.goal_rss_mb:g})")
        if base is not None:
            r = row["scale"]["look_ratio"]
            print(f"{'PASS' if scaled else 'FAIL'} scale: the look per decision at {args.waiting:,} waiting is {r['p50']}x (p50) and "
                  f"{r['p99']}x (p99) that at {args.scale_from:,} ({row['look_p50_ms']} / {row['look_p99_ms']} ms against "
                  f"{base['look_p50_ms']} / {base['look_p99_ms']} ms; goal ≤ {args.goal_scale:g}x)")
    return 0 if ok else 1

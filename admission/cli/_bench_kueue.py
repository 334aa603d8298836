"""``atoll bench kueue``: Kueue's own TAS performance shape on the test control plane, Kueue's
TAS alone against Kueue plus Atoll's check, in the same run.

It starts the current control plane of ``tests.envtest`` (etcd, kube-apiserver, the Job
controller, kube-scheduler, KWOK and real Kueue: it runs from a clone of the repository) and
makes two identical pools of KWOK nodes, one per arm, shaped as Kueue's TAS performance test
(test/performance/scheduler/configs/tas: racks of 64 nodes of 96 CPUs and 256Gi, one block),
with 8 GPUs per node: every pod also asks one GPU, since Atoll places GPU pods (a CPU-only
PodSet needs no placement, and Atoll admits it at once):

- ``tas``: a ResourceFlavor with ``topologyName``; Kueue's TAS assigns every Workload.
- ``atoll``: a ResourceFlavor without it, mapped to the same Topology in Atoll's profiles, and
  Atoll's AdmissionCheck on its ClusterQueues; Atoll's controller places, as its own ``atoll
  run`` process (as it is deployed: it shares no interpreter with the bench's watch, creators
  and runner), with ``--write-workers`` decision writes in flight at once.
- ``instant`` (``--control-check listed|reserved``, optional): Atoll's arm with a check that does
  no work in place of Atoll's (``_bench_kueue_instant``, its own process too): it answers
  ``Ready`` as soon as Kueue lists it, or once the Workload holds quota. What it adds to Kueue
  TAS's time to admission is what Kueue charges any admission check; Atoll's arm is measured
  against it in the same run (``atoll_over_control``).

Each arm has ``--queues`` ClusterQueues in one cohort (nominal 20 CPUs each, borrowing up to 100),
a LocalQueue each, and gets the same stream of Workloads at ``--rate`` per second (at most
``--create-workers`` creates in flight): Kueue's
classes (small 2 x 500m for 200 ms, medium 4 x 1250m for 500 ms, large 8 x 2500m for 1 s, in
its 7:2:1 mix), half required and half preferred at the rack level (Atoll: the strict and the
elastic profile). A runner marks each Workload Finished its runtime after it is admitted, as
Kueue's performance runner does, so quota turns over.

Kueue runs with the controller concurrency and client limits of the Configuration it ships
(``KueueCluster``; ``--kueue-workload-concurrency`` sets its Workload controller's alone).

Time to admission is from the create call to the Workload's first ``Admitted=True`` seen on a
watch; admissions/s from the first create to the last admission of the arm. The same watch
times each stage (``--format json`` carries them; the table shows their means): create →
``QuotaReserved=True`` (Kueue's scheduler), → Atoll's check ``Ready`` (Atoll's share: it sees
the reservation, places and writes the check's state; Atoll's arm only), → ``Admitted=True``
(the extra reconcile Kueue itself needs after a check turns Ready; Kueue's TAS arm admits on
reservation). Atoll's share is split at the start of the decision that made the check Ready,
read from the decision records ``atoll run`` writes: reserved → decided is how late Atoll saw
the reservation (its watch and its queue), decided → Ready its decision, its write and the
bench's watch. Reserved → decided is split where Atoll's check entry is first seen on the
reserved Workload (``listed``): Kueue's scheduler can reserve quota before Kueue's Workload
controller has added the check entries (it adds them in a write of its own, and Atoll acts on
its entry alone), so reserved → listed is Kueue's wait, listed → decided Atoll's. Kueue's own metrics give its Workload controller's mean queue wait and reconcile
time over the run; ``versions_to_admission`` counts the versions of each Workload the watch saw up
to its admission (the create and every write: Kueue reconciles each). Creates and the runner's status writes are retried on a loaded apiserver's
errors (429, 5xx, timeouts), up to ``RETRIES`` times with backoff. Goal: Atoll's mean
time to admission at most ``--goal-ratio`` (1.10) times Kueue's alone; the command exits 1 when
it is missed or a Workload is not admitted within ``--timeout``.

One module past 400 lines: the cluster it builds, the runner that plays the Workloads' jobs and
the run that times them share one set of names (arms, pools, the check) and are read together;
what the times turn into is ``_bench_kueue_figures``.
"""

from __future__ import annotations

import heapq
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from admission import vocabulary
from admission.cli._args import Parser, number, seed, whole
from admission.cli._bench_kueue_figures import before_quota_counts, decision_starts, row, workload_controller_figures
from admission.cli._bench_kueue_instant import CONTROLLER as CONTROL_CONTROLLER
from admission.cli._bench_kueue_instant import INSTANT_CHECK, WHEN

__all__ = ["CLASSES", "main", "run_bench"]

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
BLOCK, RACK, HOST = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
POOL, ARM_LABEL = vocabulary.BENCH_POOL, vocabulary.BENCH_ARM
TOPOLOGY, CHECK, ATOLL_NS = "bench-topology", "atoll-topology", "atoll-system"
ARMS = ("tas", "atoll")
CONTROL_ARM = "instant"
"""The arm of ``--control-check``: Atoll's arm with the bench's control check in place of Atoll's
(``_bench_kueue_instant``), on its own pool of nodes."""
CHECKS = (CHECK, INSTANT_CHECK)
GPU = "nvidia.com/gpu"
NODES_PER_RACK = 64
CLASSES = (("small", 2, "500m", 0.2, 0.7), ("medium", 4, "1250m", 0.5, 0.2), ("large", 8, "2500m", 1.0, 0.1))
"""Kueue's TAS performance classes: (name, pods, CPU per pod, runtime s, share of Workloads)."""


def _node(arm: str, i: int) -> dict[str, Any]:
    from tests.envtest import KWOK_NODE_ANNOTATION

    name = f"{arm}-r{i // NODES_PER_RACK:02d}-n{i % NODES_PER_RACK:02d}"
    res = {"cpu": "96", "memory": "256Gi", "pods": "110", GPU: "8"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                         "labels": {BLOCK: "b0", RACK: f"{arm}-r{i // NODES_PER_RACK:02d}", HOST: name, POOL: arm, "type": "kwok"}},
            "status": {"allocatable": res, "capacity": res}}


def _install(port: Any, nodes: int, queues: int, arms: Sequence[str] = ARMS) -> None:
    """Nodes, the Topology, each arm's flavor, the AdmissionChecks, the cohorts' ClusterQueues,
    namespaces and LocalQueues, and Atoll's profiles."""
    from admission.kube import ADMISSION_CHECKS, CLUSTER_QUEUES, CONFIGMAPS, LOCAL_QUEUES, NODES, RESOURCE_FLAVORS, TOPOLOGIES, Resource

    namespaces = Resource("", "v1", "namespaces", "Namespace", False)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda a_i: _retry(lambda: port.create(NODES, _node(*a_i)), create=True), [(a, i) for a in arms for i in range(nodes)]))
    kueue = {"apiVersion": f"{GROUP}/{VERSION}"}
    port.create(TOPOLOGIES, {**kueue, "kind": "Topology", "metadata": {"name": TOPOLOGY},
                             "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]}})
    port.create(RESOURCE_FLAVORS, {**kueue, "kind": "ResourceFlavor", "metadata": {"name": "tas"},
                                   "spec": {"nodeLabels": {POOL: "tas"}, "topologyName": TOPOLOGY}})
    port.create(RESOURCE_FLAVORS, {**kueue, "kind": "ResourceFlavor", "metadata": {"name": "atoll"}, "spec": {"nodeLabels": {POOL: "atoll"}}})
    port.create(ADMISSION_CHECKS, {**kueue, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
                                   "spec": {"controllerName": vocabulary.CONTROLLER_NAME}})
    if CONTROL_ARM in arms:
        port.create(RESOURCE_FLAVORS, {**kueue, "kind": "ResourceFlavor", "metadata": {"name": CONTROL_ARM},
                                       "spec": {"nodeLabels": {POOL: CONTROL_ARM}}})
        port.create(ADMISSION_CHECKS, {**kueue, "kind": "AdmissionCheck", "metadata": {"name": INSTANT_CHECK},
                                       "spec": {"controllerName": CONTROL_CONTROLLER}})
    for arm in arms:
        port.create(namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"bench-{arm}"}})
        for q in range(queues):
            spec: dict[str, Any] = {
                "cohortName": f"{arm}-cohort", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{"coveredResources": ["cpu", GPU], "flavors": [
                    {"name": arm, "resources": [{"name": "cpu", "nominalQuota": 20, "borrowingLimit": 100},
                                                {"name": GPU, "nominalQuota": 8 * nodes}]}]}]}
            if arm != "tas":
                check = CHECK if arm == "atoll" else INSTANT_CHECK
                spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check, "onFlavors": [arm]}]}
            port.create(CLUSTER_QUEUES, {**kueue, "kind": "ClusterQueue", "metadata": {"name": f"{arm}-cq-{q}"}, "spec": spec})
            port.create(LOCAL_QUEUES, {**kueue, "kind": "LocalQueue", "metadata": {"name": f"lq-{q}", "namespace": f"bench-{arm}"},
                                       "spec": {"clusterQueue": f"{arm}-cq-{q}"}})
    port.create(namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ATOLL_NS}})
    doc = {"defaultProfile": "strict", "flavors": {"atoll": {"topology": TOPOLOGY}},
           "profiles": {"strict": {"requiredLevel": RACK}, "elastic": {"preferredLevel": RACK, "maxSpanLevel": BLOCK}}}
    port.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "atoll-policies", "namespace": ATOLL_NS},
                             "data": {"profiles.yaml": yaml.safe_dump(doc)}})


def _workload(arm: str, name: str, queue: int, pods: int, cpu: str, required: bool) -> dict[str, Any]:
    podset: dict[str, Any] = {"name": "main", "count": pods, "template": {"metadata": {}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "registry.example.com/bench/pause:1", "resources": {"requests": {"cpu": cpu, GPU: "1"}, "limits": {GPU: "1"}}}]}}}
    if arm == "tas":
        podset["topologyRequest"] = {"required" if required else "preferred": RACK}
    elif arm == "atoll":
        podset["template"]["metadata"]["annotations"] = {vocabulary.PROFILE: "strict" if required else "elastic"}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
            "metadata": {"name": name, "namespace": f"bench-{arm}", "labels": {ARM_LABEL: arm}},
            "spec": {"queueName": f"lq-{queue}", "podSets": [podset]}}


def _eviction_finished(obj: dict[str, Any], now: str) -> dict[str, Any] | None:
    """The Workload with its eviction finished, as a job's controller finishes it (Kueue's own
    performance runner does the same for its Workloads, which have no job either): quota no
    longer reserved, no admission, not admitted. None unless ``obj`` is evicted
    (``Evicted=True``) while it still holds its reservation and is not finished. Kueue then
    requeues it; without this, a Workload preempted by a reclaim in the cohort stays evicted
    and unadmitted for good."""
    status = obj.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}

    def true(kind: str) -> bool:
        return (conds.get(kind) or {}).get("status") == "True"

    if not true("Evicted") or not true("QuotaReserved") or true("Finished"):
        return None
    generation = (obj.get("metadata") or {}).get("generation")
    out = []
    for c in status.get("conditions") or []:
        if c.get("type") == "QuotaReserved" or (c.get("type") == "Admitted" and c.get("status") == "True"):
            c = {**c, "status": "False", "reason": "Pending" if c.get("type") == "QuotaReserved" else "NoReservation",
                 "message": "Evicted by the bench runner", "lastTransitionTime": now,
                 **({"observedGeneration": generation} if generation is not None else {})}
        out.append(c)
    return {**obj, "status": {**{k: v for k, v in status.items() if k != "admission"}, "conditions": out}}


class _Runner:
    """Watches the bench Workloads: records each first ``Admitted=True``, marks the Workload
    Finished its runtime later (Kueue then releases its quota), and finishes the eviction of a
    preempted one (``_eviction_finished``) so that Kueue requeues it."""

    def __init__(self, port: Any) -> None:
        self.port = port
        self.admitted: dict[str, float] = {}
        self.reserved: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.listed: dict[str, float] = {}
        self.first_listed: dict[str, float] = {}
        """When the arm's check entry was first seen on the Workload, reserved or not (the earliest an
        early decision can start)."""
        self.versions: dict[str, int] = {}
        """Versions of each Workload seen up to its admission, the create's included: every write
        to it (Kueue's, the check's) makes one, and Kueue's Workload controller reconciles each."""
        self.runtime: dict[str, float] = {}
        self.due: list[tuple[float, str]] = []
        self.cv = threading.Condition()
        self.done = threading.Event()
        self.stream: Any = None
        self.threads = [threading.Thread(target=self._watch, daemon=True), threading.Thread(target=self._finish, daemon=True)]
        for t in self.threads:
            t.start()

    def _watch(self) -> None:
        from admission.kube import WORKLOADS
        from admission.kube.errors import Conflict

        rv = self.port.list(WORKLOADS).resource_version
        while not self.done.is_set():
            try:
                self.stream = self.port.watch(WORKLOADS, rv, timeout_seconds=30)
                for ev in self.stream:
                    obj = ev.object
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if ev.type not in ("ADDED", "MODIFIED") or ARM_LABEL not in (obj["metadata"].get("labels") or {}):
                        continue
                    key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
                    status = obj.get("status") or {}
                    conds = status.get("conditions") or []
                    now = time.monotonic()
                    if key not in self.admitted:
                        self.versions[key] = self.versions.get(key, 0) + 1
                    evicted = _eviction_finished(obj, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                    if evicted is not None:
                        if key not in self.admitted:  # its wait for a reservation starts again
                            self.reserved.pop(key, None)
                            self.listed.pop(key, None)
                            self.ready.pop(key, None)
                        try:
                            _retry(lambda b=evicted: self.port.replace(WORKLOADS, b, subresource="status"))
                        except Conflict:  # it changed since it was read: the event of that change comes back here
                            pass
                        except Exception as exc:  # noqa: BLE001 - named; the Workload then shows as not admitted
                            print(f"atoll bench kueue: could not finish the eviction of {key}: {exc}", file=sys.stderr)
                        continue
                    if key not in self.reserved and any(c["type"] == "QuotaReserved" and c["status"] == "True" for c in conds):
                        self.reserved[key] = now
                    entry_listed = any(a.get("name") in CHECKS for a in status.get("admissionChecks") or [])
                    if entry_listed and key not in self.first_listed and key not in self.admitted:
                        self.first_listed[key] = now
                    if key in self.reserved and key not in self.listed and entry_listed:
                        self.listed[key] = now  # reserved, and the arm's check entry there to act on
                    if key not in self.ready and any(a.get("name") in CHECKS and a.get("state") == "Ready"
                                                     for a in status.get("admissionChecks") or []):
                        self.ready[key] = now
                    if key not in self.admitted and any(c["type"] == "Admitted" and c["status"] == "True" for c in conds):
                        with self.cv:
                            self.admitted[key] = now
                            heapq.heappush(self.due, (now + self.runtime.get(key, 0.0), key))
                            self.cv.notify_all()
                    if self.done.is_set():
                        return
            except Exception:  # noqa: BLE001 - a dropped watch: resume from the last version seen
                time.sleep(0.2)

    def _finish(self) -> None:
        from admission.kube import WORKLOADS

        while not self.done.is_set():
            with self.cv:
                while not self.done.is_set() and (not self.due or self.due[0][0] > time.monotonic()):
                    self.cv.wait(0.05 if self.due else 0.5)
                if self.done.is_set():
                    return
                _, key = heapq.heappop(self.due)
            ns, name = key.split("/", 1)
            t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
                    "status": {"conditions": [{"type": "Finished", "status": "True", "reason": "Succeeded",
                                               "message": "the bench runner finished it", "lastTransitionTime": t}]}}
            try:
                _retry(lambda b=body: self.port.apply(WORKLOADS, b, field_manager="bench-runner", subresource="status"))
            except Exception as exc:  # noqa: BLE001 - the Workload stays admitted (its arm's quota stays used): say so
                print(f"atoll bench kueue: could not finish {key}: {exc}", file=sys.stderr)

    def stop(self) -> None:
        self.done.set()
        if self.stream is not None:
            self.stream.close()
        with self.cv:
            self.cv.notify_all()
        for t in self.threads:
            t.join(timeout=10)


RETRIES = 5
PROGRESS_S = 60.0
"""How often a run waiting for admissions says how many it has, on stderr."""
CREATE_WORKERS = 16
"""The bench's creates in flight at once (``--create-workers``): at 4, 15,000 Workloads per arm
took 25 minutes per arm to create."""


def _retry(call: Any, *, create: bool = False) -> Any:
    """``call()``, again after 0.5, 1, 2, 4 s when a loaded apiserver throttles (429), fails (5xx)
    or gives no answer; other errors (a 422) at once. A create retried after no answer may
    have landed the first time: its 409 then counts as done."""
    from admission.kube.errors import ApiError

    for attempt in range(RETRIES):
        try:
            return call()
        except ApiError as exc:
            if create and attempt > 0 and exc.status == 409:
                return None
            if attempt == RETRIES - 1 or exc.status not in (0, 408, 429, 500, 502, 503, 504):
                raise
        except (TimeoutError, OSError):
            if attempt == RETRIES - 1:
                raise
        time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def nodes_ready_seconds(nodes: int) -> float:
    """How long both arms' KWOK nodes may take to turn Ready and untainted: 300 s, plus 0.15 s per
    node beyond the first 640 per arm (KWOK heartbeats every node, so a loaded apiserver takes
    longer the more there are; 2,000 per arm were Ready a little after 300 s at load 21)."""
    return 300.0 + 0.15 * max(0, nodes - 640) * 2


def run_bench(nodes: int, workloads: int, *, queues: int = 3, rate: float = 10.0, seed: int = 7, timeout: float = 600.0,
              write_workers: int = 4, kueue_config: dict[str, Any] | None = None, logs: Path | None = None,
              create_workers: int = CREATE_WORKERS, decide_before_quota: bool = False, before_quota_depth: int = 2,
              before_quota_settle: float = 1.0, before_quota_list_own: bool = False, control_check: str | None = None,
              control_only: bool = False) -> dict[str, Any]:
    """One control plane, two arms (three with ``control_check``) of ``nodes`` KWOK nodes each,
    ``workloads`` Workloads per arm;
    ``write_workers``: Atoll's decision writes in flight at once (``atoll run --write-workers``);
    ``create_workers``: the bench's creates in flight at once (each on its own connection);
    ``kueue_config``: fields of Kueue's Configuration set over the tier's (``KueueCluster``);
    ``logs``: a folder that gets Kueue's log and ``atoll run``'s records and log at the end;
    ``decide_before_quota``: ``atoll run --decide-before-quota`` (its default hold), with
    ``--before-quota-depth before_quota_depth`` and ``--before-quota-settle before_quota_settle``;
    ``control_check`` (``WHEN``): a third arm, ``CONTROL_ARM``, whose check answers at once, then or
    once reserved; ``control_only``: that arm in place of Atoll's (Kueue TAS and the control check
    alone: the floor at the two-arm run's load)."""
    from admission.kube import ADMISSION_CHECKS, KubePort
    from tests.envtest import ApiServer, EnvtestError, KueueCluster, find_current  # a clone's test infrastructure
    from tests.envtest._server import die_with_parent

    binaries = find_current()
    if binaries is None:
        raise EnvtestError("the current control plane build is missing (kube-scheduler, kube-controller-manager, Kueue, KWOK): "
                           "run `python -m tests.envtest ensure` with Go 1.26+ on PATH")
    rng = np.random.default_rng(seed)
    shares = np.array([c[4] for c in CLASSES])
    draws = [(CLASSES[int(rng.choice(len(CLASSES), p=shares / shares.sum()))], bool(rng.random() < 0.5)) for _ in range(workloads)]
    load_before = os.getloadavg()
    arms = ("tas", CONTROL_ARM) if control_check and control_only else ARMS + ((CONTROL_ARM,) if control_check else ())
    with ApiServer(binaries) as api:
        try:
            cluster = KueueCluster(api, kueue_config=kueue_config).start()
            api_client = api.api_client()
            api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = create_workers + 4  # a connection per creator
            port = KubePort(api_client)
            _install(port, nodes, queues, arms)
            _wait_nodes_ready(port, nodes, arms=len(arms))
            records, log = api.dir / "atoll-run.jsonl", api.dir / "atoll-run.log"
            metrics_port = _free_port()
            with open(records, "wb") as out, open(log, "wb") as err:
                ctrl = None if "atoll" not in arms else subprocess.Popen(  # as deployed: its own process, its own interpreter
                    [sys.executable, "-c", "import sys; from admission.cli import main; sys.argv[0] = 'atoll'; sys.exit(main())", "run",
                     "--kubeconfig", str(api.kubeconfig_path), "--namespace", ATOLL_NS, "--admission-check", CHECK,
                     "--metrics-port", str(metrics_port), "--health-port", "off", "--no-leader-elect", "--write-workers", str(write_workers),
                     "--log-level", "warning", *(["--decide-before-quota", "--before-quota-depth", str(before_quota_depth),
                                                  "--before-quota-settle", str(before_quota_settle),
                                                  *(["--before-quota-list-own"] if before_quota_list_own else [])] if decide_before_quota else [])], stdout=out, stderr=err, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
                control = None if not control_check else subprocess.Popen(  # its own process too
                    [sys.executable, "-c", "import sys; from admission.cli._bench_kueue_instant import main; sys.exit(main(sys.argv[1:]))",
                     "--kubeconfig", str(api.kubeconfig_path), "--namespace", f"bench-{CONTROL_ARM}", "--when", control_check,
                     "--writers", str(max(1, write_workers))], stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
                try:
                    if ctrl is not None:
                        _wait_active(port, ADMISSION_CHECKS, ctrl, 120.0)
                    if control is not None:
                        _wait_active(port, ADMISSION_CHECKS, control, 60.0, INSTANT_CHECK)
                    result = _run_arms(port, draws, queues, rate, workloads, timeout, write_workers, nodes, load_before, records,
                                       create_workers, arms)
                    result["atoll_before_quota"] = before_quota_counts(_scrape(metrics_port) if ctrl is not None else "")
                finally:
                    for proc in (ctrl, control):
                        if proc is None:
                            continue
                        proc.terminate()
                        try:
                            proc.wait(30)
                        except subprocess.TimeoutExpired:
                            proc.kill()
                            proc.wait()
            return {**result, "control_check": control_check, "control_only": control_only, "decide_before_quota": decide_before_quota, "before_quota_depth": before_quota_depth,
                    "before_quota_settle": before_quota_settle, "before_quota_list_own": before_quota_list_own, "kueue_config": yaml.safe_load((api.dir / "kueue-config.yaml").read_text()).get("controller"),
                    "kueue_feature_gates": yaml.safe_load((api.dir / "kueue-config.yaml").read_text()).get("featureGates"),
                    "kueue_workload_controller": workload_controller_figures(cluster.metrics())}
        finally:
            if logs is not None:
                logs.mkdir(parents=True, exist_ok=True)
                for name in ("kueue.log", "kueue-config.yaml", "atoll-run.jsonl", "atoll-run.log", "kwok.log", "kube-controller-manager.log"):
                    if (api.dir / name).exists():
                        shutil.copy(api.dir / name, logs / name)


def _free_port() -> int:
    """A loopback port free now, for ``atoll run``'s metrics (read once at the end of the run)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> str:
    """``atoll run``'s Prometheus text; "" when it does not answer (its counts then read as none)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:  # noqa: S310 - loopback, our own process
            return str(answer.read().decode())
    except OSError:
        return ""


CONDITION_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
"""The taints the node lifecycle controller puts on a node that is not Ready, and lifts once it is."""


def _wait_nodes_ready(port: Any, nodes: int, *, seconds: float | None = None, selector: str = "type=kwok", arms: int = 2) -> None:
    """Until every arm's KWOK nodes (``arms`` pools of ``nodes``) are Ready and untainted (``nodes_ready_seconds``), listing
    every 5 s (a list of thousands of nodes costs the apiserver and this process); a timeout
    names how many were Ready, how many untainted, and the taints left (``seconds``: instead of
    ``nodes_ready_seconds``; ``selector``: the nodes' label).

    A node Ready on two lists in a row that still carries a ``CONDITION_TAINTS`` taint (the
    not-ready one the apiserver puts on a new node, or unreachable after a late heartbeat) gets it
    lifted here, as the node lifecycle controller lifts it: with 4,000 nodes on two loaded cores
    that controller's updates kept losing to KWOK's status writes (409), 152 nodes were still
    tainted after 10 minutes, and 3 Ready nodes kept an unreachable taint after 12."""
    from collections import Counter

    from admission.kube import NODES
    from admission.kube.errors import ApiError

    ready_s = nodes_ready_seconds(nodes) if seconds is None else seconds
    deadline = time.monotonic() + ready_s
    seen_ready: set[str] = set()
    while True:
        listed = port.list(NODES, label_selector=selector).items
        ready = [n for n in listed if any(c["type"] == "Ready" and c["status"] == "True"
                                          for c in (n.get("status") or {}).get("conditions") or [])]
        taints = Counter(t.get("key") for n in listed for t in (n.get("spec") or {}).get("taints") or [])
        untainted = sum(not (n.get("spec") or {}).get("taints") for n in listed)
        if len(listed) == arms * nodes and len(ready) == untainted == arms * nodes:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {arms * nodes} KWOK nodes were not Ready and untainted within {ready_s:.0f}s: {len(listed)} listed, "
                               f"{len(ready)} Ready, {untainted} untainted (taints left: {dict(taints) or 'none'})")
        for n in ready:
            meta, left = n["metadata"], (n.get("spec") or {}).get("taints") or []
            if meta["name"] in seen_ready and any(t.get("key") in CONDITION_TAINTS for t in left):
                try:  # on the version listed: a node that changed since is looked at again on the next list
                    port.patch(NODES, meta["name"], {"metadata": {"resourceVersion": meta["resourceVersion"]},
                                                     "spec": {"taints": [t for t in left if t.get("key") not in CONDITION_TAINTS]}})
                except ApiError:
                    pass
        seen_ready = {n["metadata"]["name"] for n in ready}
        time.sleep(5)


def _wait_active(port: Any, checks: Any, proc: subprocess.Popen[bytes], seconds: float, name: str = CHECK) -> None:
    """Until Atoll's controller has listed the cluster, compiled its finder and marked its
    AdmissionCheck Active (it does so on its worker's first turn as leader); ``name``: another
    check's, ``proc`` its controller."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TimeoutError(f"the controller of AdmissionCheck {name} exited with {proc.returncode} before it was Active")
        ac: dict[str, Any] = next((o for o in port.list(checks).items if (o.get("metadata") or {}).get("name") == name), {})
        if any(c.get("type") == "Active" and c.get("status") == "True" for c in (ac.get("status") or {}).get("conditions") or []):
            return
        time.sleep(0.5)
    raise TimeoutError(f"AdmissionCheck {name} was not Active within {seconds:.0f}s of starting its controller")


def _run_arms(port: Any, draws: list[Any], queues: int, rate: float, workloads: int, timeout: float, write_workers: int,
              nodes: int, load_before: tuple[float, float, float], records: Path, create_workers: int = 4,
              arms: Sequence[str] = ARMS) -> dict[str, Any]:
    """Create every arm's Workloads at ``rate`` with ``create_workers`` creates in flight, and time
    them to admission (module docstring)."""
    from admission.kube import WORKLOADS
    from admission.kube.errors import ApiError

    runner = _Runner(port)
    wall = time.time() - time.monotonic()  # a decision record's wall-clock time, on this process's monotonic clock
    created: dict[str, float] = {}
    classes: dict[str, str] = {}
    failed: list[str] = []
    lock = threading.Lock()

    def submit(arm: str, i: int) -> None:
        (name, pods, cpu, runtime, _), required = draws[i]
        key = f"bench-{arm}/w{i:05d}"
        with runner.cv:
            runner.runtime[key] = runtime
        body = _workload(arm, f"w{i:05d}", i % queues, pods, cpu, required)
        t = time.monotonic()
        try:
            _retry(lambda: port.create(WORKLOADS, body), create=True)
        except ApiError as exc:  # an apiserver too loaded to answer: the Workload is counted as not created
            print(f"atoll bench kueue: could not create {key}: {exc}", file=sys.stderr)
            with lock:
                failed.append(key)
            return
        with lock:
            created[key], classes[key] = t, name

    started = time.monotonic()
    with ThreadPoolExecutor(create_workers) as pool:
        futures = []
        for i in range(workloads):
            wait = started + i / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            for arm in (*arms[i % len(arms):], *arms[:i % len(arms)]):  # no arm always first
                futures.append(pool.submit(submit, arm, i))
        for f in futures:
            f.result()  # a create that failed ends the run, named
    end, report = time.monotonic() + timeout, time.monotonic() + PROGRESS_S
    while time.monotonic() < end and len(runner.admitted) < len(arms) * workloads:
        time.sleep(0.2)
        if time.monotonic() > report:  # a long run says how far it is, on stderr
            report += PROGRESS_S
            with runner.cv:
                done = {arm: sum(k.startswith(f"bench-{arm}/") for k in runner.admitted) for arm in arms}
            print(f"atoll bench kueue: {time.monotonic() - started:.0f}s: admitted {done} of {workloads} per arm; "
                  f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    runner.stop()
    with runner.cv:
        admitted, reserved, ready, listed = dict(runner.admitted), dict(runner.reserved), dict(runner.ready), dict(runner.listed)
        first_listed, versions = dict(runner.first_listed), dict(runner.versions)
    decided = decision_starts(records.read_text(errors="replace").splitlines(), admitted, wall)
    rows = {arm: row(arm, created, admitted, classes, [c[0] for c in CLASSES], reserved, ready, decided, listed, first_listed)
            for arm in arms}
    for arm, r in rows.items():
        seen = [versions[k] for k in admitted if k.startswith(f"bench-{arm}/") and k in versions]
        r["versions_to_admission"] = round(float(np.mean(seen)), 2) if seen else None
    tas, atoll = rows["tas"]["tta_mean_ms"], rows["atoll"]["tta_mean_ms"] if "atoll" in rows else None
    control = rows[CONTROL_ARM]["tta_mean_ms"] if CONTROL_ARM in rows else None
    creates_s = max(created.values(), default=started) - started
    return {"nodes_per_arm": nodes, "workloads_per_arm": workloads, "queues_per_arm": queues, "rate_per_s": rate,
            "create_workers": create_workers, "creates_s": round(creates_s, 1), "write_workers": write_workers, "rows": [rows[arm] for arm in arms], "not_created": len(failed), "tta_ratio": round(atoll / tas, 3) if tas and atoll else None,
            "control_ratio": round(control / tas, 3) if tas and control else None,
            "atoll_over_control": round(atoll / control, 3) if atoll and control else None,
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
            "cores": os.cpu_count()}


def _workload_concurrency(n: int | None) -> dict[str, Any] | None:
    """Kueue's ``controller`` settings with its Workload controller at ``n`` at once, the rest as
    Kueue ships them; None (Kueue's shipped settings) when ``n`` is None."""
    if n is None:
        return None
    from tests.envtest import KUEUE_VERSION, go_module_dir

    path = go_module_dir("sigs.k8s.io/kueue", KUEUE_VERSION) / "config" / "components" / "manager" / "controller_manager_config.yaml"
    concurrency = dict(yaml.safe_load(path.read_text())["controller"]["groupKindConcurrency"])
    return {"controller": {"groupKindConcurrency": {**concurrency, "Workload.kueue.x-k8s.io": n}}}


def feature_gates(text: str | None) -> dict[str, bool]:
    """``--kueue-feature-gates``' ``Name=true,Other=false`` as Kueue's Configuration ``featureGates``;
    ValueError naming the item that is not ``Name=true|false``."""
    out: dict[str, bool] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, _, value = item.strip().partition("=")
        if not name or value.lower() not in ("true", "false"):
            raise ValueError(f"--kueue-feature-gates: {item.strip()!r} is not Name=true or Name=false")
        out[name] = value.lower() == "true"
    return out


def main(argv: Sequence[str]) -> int:
    p = Parser(prog="atoll bench kueue",
               description="Kueue's TAS performance shape on real Kueue: Kueue TAS alone vs Kueue plus Atoll's check, one run")
    p.add_argument("--nodes", type=whole(1), default=640, help="KWOK nodes per arm (racks of 64; Kueue's TAS test has 640)")
    p.add_argument("--workloads", type=whole(1), default=2000, help="Workloads per arm")
    p.add_argument("--queues", type=whole(1), default=3, help="ClusterQueues per arm, all in the arm's cohort")
    p.add_argument("--rate", type=number(above=0), default=10.0, help="Workloads created per second per arm")
    p.add_argument("--goal-ratio", type=number(above=0), default=1.10, help="Atoll's mean time to admission over Kueue TAS's, at most")
    p.add_argument("--seed", type=seed, default=7)
    p.add_argument("--timeout", type=number(above=0), default=600.0, help="seconds to wait for admissions after the last create")
    p.add_argument("--create-workers", type=whole(1, 64), default=CREATE_WORKERS,
                   help="the bench's Workload creates in flight at once (both arms together)")
    p.add_argument("--write-workers", type=whole(0, 32), default=4, help="Atoll's decision writes in flight at once (0: serial)")
    p.add_argument("--kueue-workload-concurrency", type=whole(1), default=None,
                   help="Workloads Kueue's Workload controller reconciles at once (default: what Kueue's shipped Configuration sets)")
    p.add_argument("--kueue-feature-gates", default=None,
                   help="Kueue feature gates over its defaults, Name=true|false,... (e.g. WorkloadRequestUseMergePatch=true)")
    p.add_argument("--decide-before-quota", action="store_true",
                   help="Atoll decides each Workload before Kueue reserves its quota (atoll run --decide-before-quota)")
    p.add_argument("--before-quota-depth", type=whole(1, 64), default=2,
                   help="with --decide-before-quota: Workloads per ClusterQueue holding an early decision at once (1-64)")
    p.add_argument("--before-quota-settle", type=number(0), default=1.0,
                   help="with --decide-before-quota: seconds a Workload must have waited for quota before it is decided early")
    p.add_argument("--before-quota-list-own", action="store_true",
                   help="with --decide-before-quota: atoll run --before-quota-list-own")
    p.add_argument("--control-check", choices=WHEN, default=None,
                   help="a third arm whose check does no work and answers Ready at once: as soon as Kueue lists it (listed) "
                        "or once the Workload holds quota (reserved); what Kueue charges any check, apart from Atoll's placement")
    p.add_argument("--control-only", action="store_true",
                   help="with --control-check: Kueue TAS and the control check's arm alone, no Atoll arm (the floor at a two-arm run's load)")
    p.add_argument("--logs", type=Path, default=None, help="folder to copy Kueue's log and atoll run's records and log into")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    if args.control_only and not args.control_check:
        print("atoll bench kueue: --control-only needs --control-check listed|reserved (the check its arm runs)", file=sys.stderr)
        return 2
    try:
        gates = feature_gates(args.kueue_feature_gates)
    except ValueError as exc:
        print(f"atoll bench kueue: {exc}", file=sys.stderr)
        return 2
    kueue_config = _workload_concurrency(args.kueue_workload_concurrency) or {}
    if gates:  # the tier's own gate (VisibilityOnDemand off) kept unless named
        kueue_config["featureGates"] = {"VisibilityOnDemand": False, **gates}
    try:  # the test control plane is test infrastructure: it lives in a clone's tests/, never in the installed package
        from tests.envtest import EnvtestError
    except ImportError:
        print("atoll bench kueue: it starts the test control plane of Atoll's repository (tests/envtest): run it from "
              "the root of a clone, after `make envtest`", file=sys.stderr)
        return 1
    try:
        out = run_bench(args.nodes, args.workloads, queues=args.queues, rate=args.rate, seed=args.seed, timeout=args.timeout,
                        write_workers=args.write_workers, kueue_config=kueue_config or None,
                        logs=args.logs, create_workers=args.create_workers, decide_before_quota=args.decide_before_quota,
                        before_quota_depth=args.before_quota_depth, before_quota_settle=args.before_quota_settle,
                        before_quota_list_own=args.before_quota_list_own, control_check=args.control_check,
                        control_only=args.control_only)
    except (EnvtestError, TimeoutError) as exc:
        print(f"atoll bench kueue: {exc}", file=sys.stderr)
        return 1
    ratio = out["tta_ratio"]
    met = (ratio is not None and ratio <= args.goal_ratio and not out["not_created"]
           and all(r["admitted"] == r["workloads"] for r in out["rows"]))
    if args.format == "json":
        print(json.dumps({**out, "goal_ratio": args.goal_ratio, "goal_met": met}))
    else:
        columns = ("arm", "workloads", "admitted", "admissions_per_s", "tta_mean_ms", "tta_p50_ms", "tta_p90_ms", "tta_p99_ms",
                   "tta_max_ms", *(f"tta_{c[0]}_ms" for c in CLASSES), "create_to_reserved_ms", "reserved_to_ready_ms",
                   "reserved_to_listed_ms", "listed_to_decided_ms", "reserved_to_decided_ms", "decided_to_ready_ms", "ready_to_admitted_ms",
                   "ready_before_reserved", "admitted_on_reservation", "listed_before_reserved", "create_to_first_listed_ms",
                   "versions_to_admission")
        wc = out["kueue_workload_controller"]
        print(" | ".join(columns))
        for r in out["rows"]:
            print(" | ".join(str(r[c]) for c in columns))
        if out["control_check"]:
            print(f"control check ({out['control_check']}) / kueue-tas mean time to admission: {out['control_ratio']}; "
                  f"atoll / control check: {out['atoll_over_control']}")
        if out["decide_before_quota"]:
            print("atoll run, decisions before quota: " + ", ".join(f"{k} {v:g}" for k, v in out["atoll_before_quota"].items()))
        print(f"atoll / kueue-tas mean time to admission: {ratio} (goal ≤ {args.goal_ratio}: {'met' if met else 'MISSED'}); "
              f"{out['nodes_per_arm']} KWOK nodes per arm, {out['queues_per_arm']} ClusterQueues per cohort, "
              f"{out['rate_per_s']} Workloads/s per arm ({out['creates_s']} s of creates, {out['create_workers']} at once), {out['write_workers']} write workers{', deciding before quota' if out['decide_before_quota'] else ''}; Kueue's Workload controller "
              f"{wc['workers']} at once, {wc['queue_wait_ms']} ms mean queue wait, {wc['reconcile_ms']} ms mean reconcile; {out['not_created']} creates failed; load {out['load_before']} → {out['load_after']} on {out['cores']} cores")
    return 0 if met else 1

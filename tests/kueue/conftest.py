"""The real-Kueue tier: one control plane of its own (so Kueue never meets the Workloads the other
tests play Kueue for), with Kueue's manager (its Job and JobSet integrations), JobSet's controller,
the Job controller, kube-scheduler and KWOK nodes labelled like the bundled GB200 NVL72 model, and
the Kueue objects of config/kueue/gb200-nvl72.

Atoll's controller runs in-process per test (``Live.controller``), as the other apiserver tests
run it. Every wait is for a state read from the API, with a generous bound, never a sleep that
assumes how fast something happens.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from admission.controller import ConfigSettings, Controller, DecisionSettings, KueueSettings, Recorder, Settings
from admission.kube import KubePort
from tests.envtest import (
    JOBSET_FRAMEWORK,
    KWOK_NODE_ANNOTATION,
    ApiServer,
    EnvtestError,
    KueueCluster,
    find_current,
)

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "config" / "kueue" / "gb200-nvl72"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
CHECK = "atoll-topology"
ATOLL_NS = "atoll-system"
ZONE, BLOCK, CLIQUE, HOST = "topology.kubernetes.io/zone", "network.example.com/block", "nvidia.com/gpu.clique", "kubernetes.io/hostname"
PRODUCT = "nvidia.com/gpu.product"
BLOCKS, RACKS, TRAYS = 2, 2, 18  # 72 trays of 4 GPUs: two blocks of two NVL72 racks
WAIT = 180.0  # seconds: a bound for a state to be reached on two shared cores, not an expected duration
T = TypeVar("T")


def gb200_node(block: int, rack: int, tray: int) -> dict[str, Any]:
    """One GB200 compute tray as config/clusters/gb200-nvl72-superpod.yaml describes it (4 GPUs,
    144 CPUs, 1800Gi), labelled by the levels of config/kueue/gb200-nvl72's Topology, managed by KWOK."""
    name = f"gb-b{block}r{rack}n{tray:02d}"
    resources = {"nvidia.com/gpu": "4", "cpu": "144", "memory": "1800Gi", "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                     "labels": {ZONE: "z0", BLOCK: f"b{block}", CLIQUE: f"b{block}r{rack}", HOST: name, PRODUCT: "NVIDIA-GB200",
                                "type": "kwok"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": resources, "capacity": resources},
    }


def model_documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MODEL / name).read_text()) if d]


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT, every: float = 0.25) -> T:
    """``probe()``'s first truthy answer; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def is_true(obj: dict[str, Any], type_: str) -> bool:
    c = condition(obj, type_)
    return bool(c and c["status"] == "True")


def check_entry(wl: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (wl.get("status") or {}).get("admissionChecks") or [] if c["name"] == CHECK), None)


class History:
    """Every version of every Workload of a namespace, from a watch started before the test acts:
    a state Kueue holds for a moment (Atoll's Retry before Kueue's eviction resets it) is never
    missed by polling."""

    def __init__(self, custom: Any, namespace: str) -> None:
        self.custom, self.ns = custom, namespace
        self.versions: list[dict[str, Any]] = []
        self.cv = threading.Condition()
        self.done = threading.Event()
        self.rv = self._relist()
        self.thread = threading.Thread(target=self._run, name=f"history-{namespace}", daemon=True)
        self.thread.start()

    def _relist(self) -> str:
        listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, "workloads")
        with self.cv:
            self.versions.extend(listed["items"])
            self.cv.notify_all()
        rv: str = listed["metadata"]["resourceVersion"]
        return rv

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                for event in watch.Watch().stream(self.custom.list_namespaced_custom_object, GROUP, VERSION, self.ns, "workloads",
                                                  resource_version=self.rv, timeout_seconds=5):
                    obj = event["object"]
                    self.rv = obj["metadata"]["resourceVersion"]
                    with self.cv:
                        self.versions.append(obj)
                        self.cv.notify_all()
                    if self.done.is_set():
                        return
            except ApiException as exc:
                if exc.status == 410:  # too old: list again (only then could a version be skipped)
                    self.rv = self._relist()
                else:
                    time.sleep(0.5)
            except Exception:  # noqa: BLE001 - a dropped connection: watch again from the last version seen
                time.sleep(0.5)

    def wait(self, job: dict[str, Any], what: str, pred: Callable[[dict[str, Any]], bool], *, after: int = 0,
             timeout: float = WAIT) -> tuple[dict[str, Any], int]:
        """The first version (at index ``after`` or later) of ``job``'s Workload that ``pred``
        accepts, and its index; fails naming ``what`` after ``timeout`` seconds."""
        uid = job["metadata"]["uid"]
        deadline = time.monotonic() + timeout
        i = after
        with self.cv:
            while True:
                while i < len(self.versions):
                    wl = self.versions[i]
                    i += 1
                    if (wl["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid") == uid and pred(wl):
                        return wl, i
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    pytest.fail(f"timed out after {timeout}s waiting for {job['metadata']['name']}: {what}")
                self.cv.wait(min(remaining, 1.0))

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)


@dataclass
class Live:
    """The running tier: API clients and helpers over the live objects."""

    api: ApiServer
    cluster: KueueCluster
    client: Any

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.client)
        self.batch = client.BatchV1Api(self.client)
        self.custom = client.CustomObjectsApi(self.client)

    # ------------------------------------------------------------------ Atoll

    def set_profiles(self, doc: dict[str, Any]) -> None:
        body = {"metadata": {"name": "atoll-policies", "namespace": ATOLL_NS}, "data": {"profiles.yaml": yaml.safe_dump(doc)}}
        try:
            self.core.replace_namespaced_config_map("atoll-policies", ATOLL_NS, body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.core.create_namespaced_config_map(ATOLL_NS, body)

    @contextmanager
    def controller(self, recorder: Recorder | None = None, decisions: DecisionSettings | None = None) -> Iterator[Controller]:
        """Atoll's controller, in-process on a real clock, serving config/kueue's AdmissionCheck
        (its decision records to ``recorder``, else to stdout; ``decisions``: e.g. ``park_waiting``)."""
        settings = Settings(kueue=KueueSettings(admission_check=CHECK), config=ConfigSettings(namespace=ATOLL_NS),
                            decisions=decisions or DecisionSettings())
        ctrl = Controller(KubePort(self.client), settings=settings, recorder=recorder)
        ctrl.start()
        try:
            assert ctrl.wait_synced(600), "Atoll never listed the cluster"  # a cold numba cache compiles its kernels first
            yield ctrl
        finally:
            ctrl.stop()

    # ------------------------------------------------------------------ jobs, workloads, pods

    def submit(self, job: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.client.sanitize_for_serialization(
            self.batch.create_namespaced_job(job["metadata"]["namespace"], job))
        return created

    def workload(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """The Workload Kueue made for ``job`` (found by the job's uid, as Kueue labels it)."""
        uid = job["metadata"]["uid"]
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, job["metadata"]["namespace"], "workloads",
                                                          label_selector=f"kueue.x-k8s.io/job-uid={uid}")["items"]
        return items[0] if items else None

    @contextmanager
    def history(self, namespace: str) -> Iterator[History]:
        """Record every Workload version of ``namespace`` until the block ends."""
        h = History(self.custom, namespace)
        try:
            yield h
        finally:
            h.close()

    def pods(self, job: dict[str, Any]) -> list[Any]:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        return [p for p in self.core.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={name}").items
                if p.metadata.deletion_timestamp is None]

    def wait_bound(self, job: dict[str, Any], count: int, timeout: float = WAIT) -> list[Any]:
        """``count`` live pods of ``job``, every one bound to a node and Running (KWOK's part)."""
        def probe() -> list[Any] | None:
            pods = self.pods(job)
            ok = len(pods) == count and all(p.spec.node_name and p.status.phase == "Running" for p in pods)
            return pods if ok else None
        return wait_for(f"{count} running pods of {job['metadata']['name']}", probe, timeout)

    def node_labels(self) -> dict[str, dict[str, str]]:
        return {n.metadata.name: n.metadata.labels for n in self.core.list_node(label_selector="type=kwok").items}

    def gpus_booked_beyond_allocatable(self) -> dict[str, tuple[int, int]]:
        """Nodes whose live, bound, unfinished pods request more GPUs than the node has: node ->
        (requested, allocatable). Read from the API: what the kube-scheduler actually bound."""
        alloc = {n.metadata.name: int(n.status.allocatable.get("nvidia.com/gpu", "0"))
                 for n in self.core.list_node(label_selector="type=kwok").items}
        booked: dict[str, int] = {}
        for pod in self.core.list_pod_for_all_namespaces().items:
            if pod.spec.node_name in alloc and pod.status.phase not in ("Succeeded", "Failed"):
                gpus = sum(int((c.resources.requests or {}).get("nvidia.com/gpu", "0")) for c in pod.spec.containers)
                booked[pod.spec.node_name] = booked.get(pod.spec.node_name, 0) + gpus
        return {n: (g, alloc[n]) for n, g in booked.items() if g > alloc[n]}

    def delete(self, job: dict[str, Any]) -> None:
        """Delete the job and wait until its Workload and pods are gone (the quota and nodes free)."""
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        try:
            self.batch.delete_namespaced_job(name, ns, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise
        wait_for(f"{name}: workload and pods gone", lambda: self.workload(job) is None and not self.core.list_namespaced_pod(
            ns, label_selector=f"batch.kubernetes.io/job-name={name}").items)


def model_job(name: str, new_name: str, **changes: Any) -> dict[str, Any]:
    """A Job of config/kueue/gb200-nvl72/jobs.yaml, renamed, with top-level ``spec`` changes."""
    (job,) = [d for d in model_documents("jobs.yaml") if d["metadata"]["name"] == name]
    job = copy.deepcopy(job)
    job["metadata"]["name"] = new_name
    for container in job["spec"]["template"]["spec"]["containers"]:  # quantities are strings to the API client
        for kind in ("requests", "limits"):
            resources = container.get("resources", {}).get(kind) or {}
            resources.update({k: str(v) for k, v in resources.items()})
    job["spec"].update(changes)
    return job


def model_profiles(enforcement: str = "domain", **profile_changes: dict[str, Any]) -> dict[str, Any]:
    """config/kueue/gb200-nvl72/profiles.yaml with ``domain`` enforcement (only the exact test
    serves the webhook that pins pods; elsewhere Atoll's claim is the nodeSelector's domain) and
    any profile changes. Its profiles wait on Retries: this tier proves what Kueue does with a
    Retry (its requeue, and the decisions each Retry brings, that preemption and a restart are
    shown through); the sample's parking is run here where a test asks for it (a profile's
    ``queueing`` or ``DecisionSettings(park_waiting=True)``)."""
    doc: dict[str, Any] = yaml.safe_load((MODEL / "profiles.yaml").read_text())
    doc["flavors"]["gb200-nvl72"]["enforcement"] = enforcement
    for profile in doc["profiles"].values():
        profile["queueing"] = {**profile.get("queueing", {}), "parkWaiting": False}
    for name, change in profile_changes.items():
        doc["profiles"][name] = {**doc["profiles"][name], **change}
    return doc


@pytest.fixture(scope="session")
def live() -> Iterator[Live]:
    if os.environ.get("ATOLL_SKIP_APISERVER") == "1":
        pytest.skip("ATOLL_SKIP_APISERVER=1: the real-Kueue tier needs the control plane")
    binaries = find_current()  # Atoll's own build, whatever KUBEBUILDER_ASSETS says: only it has Kueue and KWOK
    if binaries is None:
        pytest.fail("the real-Kueue tier needs Atoll's control plane build (kube-scheduler, kube-controller-manager, Kueue, "
                    "KWOK): run `python -m tests.envtest ensure` with Go 1.26+ on PATH")
    with ApiServer(binaries) as api:
        try:
            cluster = KueueCluster(api, frameworks=("batch/job", JOBSET_FRAMEWORK)).start()
        except EnvtestError as exc:
            pytest.fail(str(exc))
        live = Live(api, cluster, api.api_client())
        for doc in model_documents("kueue.yaml"):
            if doc["kind"] == "Namespace":
                live.core.create_namespace(doc)
            elif doc["metadata"].get("namespace"):
                live.custom.create_namespaced_custom_object(GROUP, VERSION, doc["metadata"]["namespace"], doc["kind"].lower() + "s", doc)
            else:
                plural = {"Topology": "topologies"}.get(doc["kind"], doc["kind"].lower() + "s")
                live.custom.create_cluster_custom_object(GROUP, VERSION, plural, doc)
        live.core.create_namespace({"metadata": {"name": ATOLL_NS}})
        live.set_profiles(model_profiles())
        # the chart's AdmissionCheck; Atoll's controller marks it Active, and only then is the ClusterQueue
        live.custom.create_cluster_custom_object(GROUP, VERSION, "admissionchecks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
            "spec": {"controllerName": "atoll.dev/topology"}})
        for b in range(BLOCKS):
            for r in range(RACKS):
                for n in range(TRAYS):
                    live.core.create_node(gb200_node(b, r, n))
        wait_for("every node Ready (KWOK) and untainted not-ready (node lifecycle)", lambda: all(
            any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
            and not any(t.key.startswith("node.kubernetes.io/") for t in (n.spec.taints or []))
            for n in live.core.list_node(label_selector="type=kwok").items))
        with live.controller():
            try:
                wait_for("the ClusterQueue to be active", lambda: is_true(
                    live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", "gb200-training"), "Active"))
            except pytest.fail.Exception:
                cq = live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", "gb200-training")
                ac = live.custom.get_cluster_custom_object(GROUP, VERSION, "admissionchecks", CHECK)
                pytest.fail(f"ClusterQueue inactive: {condition(cq, 'Active')}; AdmissionCheck: {condition(ac, 'Active')}")
        yield live

"""A small GPU fabric per test on the real apiserver, and a controller wired to it.

Every test gets its own namespace, nodes, Topology, ResourceFlavor, AdmissionCheck and
ClusterQueue (names derived from the namespace), so tests share one apiserver without seeing
each other: the controller serves only its test's AdmissionCheck and the flavor selects only
its test's nodes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import yaml
from kubernetes import client

from admission.controller import ConfigSettings, Controller, KueueSettings, Metrics, Recorder, Settings
from admission.kube import KubePort, ManualClock
from tests.kube_objects import (
    GROUP,
    VERSION,
    KueueActor,
    admission_check,
    cluster_queue,
    create_node,
    local_queue,
    manifest,
    node,
    resource_flavor,
    topology,
    workload,
)

BLOCK = "network.example.com/block"
CLIQUE = "nvidia.com/gpu.clique"
POOL = "atoll.dev/test-pool"


def profiles_doc(flavor: str, topo: str, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "defaultProfile": "strict",
        "flavors": {flavor: {"topology": topo}},
        "profiles": {
            "strict": {"requiredLevel": CLIQUE, "retry": {"initialSeconds": 30, "maxSeconds": 600}},
            "elastic": {"preferredLevel": CLIQUE, "maxSpanLevel": BLOCK, "relaxAfterSeconds": 300,
                        "retry": {"initialSeconds": 20, "maxSeconds": 300}},
        },
        "classes": {"training": {"perfFloor": 0.9, "uniformPerf": True}},
    }
    doc.update(extra)
    return doc


@dataclass
class Fabric:
    """One test's slice of the cluster, with Kueue played by ``kueue``."""

    api: Any
    ns: str
    clock: ManualClock = field(default_factory=ManualClock)
    records: io.StringIO = field(default_factory=io.StringIO)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.flavor = f"{self.ns}-gpu"
        self.topology = f"{self.ns}-topo"
        self.check = f"{self.ns}-check"
        self.cq = f"{self.ns}-cq"
        self.kueue = KueueActor(self.api, self.check)
        self.port = KubePort(self.api)
        self.metrics = Metrics()

    # ------------------------------------------------------------------ cluster objects

    def node_name(self, block: int, clique: int, i: int) -> str:
        return f"{self.ns}-b{block}c{clique}n{i}"

    def add_nodes(self, blocks: int = 2, cliques: int = 2, per_clique: int = 2, gpus: int = 4, **node_kw: Any) -> list[str]:
        names = []
        for b in range(blocks):
            for c in range(cliques):
                for i in range(per_clique):
                    names.append(self.add_node(b, c, i, gpus, **node_kw))
        return names

    def add_node(self, block: int, clique: int, i: int, gpus: int = 4, **node_kw: Any) -> str:
        name = self.node_name(block, clique, i)
        labels = {POOL: self.ns, BLOCK: f"{self.ns}-b{block}", CLIQUE: f"{self.ns}-b{block}c{clique}"}
        create_node(self.core, node(name, labels, gpus, **node_kw))  # also lifts the apiserver's not-ready taint
        return name

    def clique(self, block: int, clique: int) -> str:
        return f"{self.ns}-b{block}c{clique}"

    def install(self, profiles: dict[str, Any] | None = None, *, nodes: bool = True) -> Fabric:
        if nodes:
            self.add_nodes()
        self.custom.create_cluster_custom_object(GROUP, VERSION, "topologies", topology(self.topology, [BLOCK, CLIQUE]))
        self.custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", resource_flavor(self.flavor, {POOL: self.ns}))
        self.custom.create_cluster_custom_object(GROUP, VERSION, "admissionchecks", admission_check(self.check))
        self.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue(self.cq, self.flavor, 1000, self.check))
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "localqueues", local_queue(self.ns, "lq", self.cq))
        self.set_profiles(profiles or profiles_doc(self.flavor, self.topology), create=True)
        return self

    def set_profiles(self, doc: dict[str, Any] | str, *, create: bool = False) -> None:
        text = doc if isinstance(doc, str) else yaml.safe_dump(doc)
        body = {"metadata": {"name": "atoll-policies", "namespace": self.ns}, "data": {"profiles.yaml": text}}
        if create:
            self.core.create_namespaced_config_map(self.ns, manifest(body))
        else:
            self.core.replace_namespaced_config_map("atoll-policies", self.ns, manifest(body))

    def bind_pod(self, name: str, node_name: str, gpus: int, *, decision_id: str | None = None, podset: str = "main") -> None:
        """A pod already bound to a node (what the scheduler leaves behind), holding ``gpus`` GPUs."""
        update = {"annotations": {"atoll.dev/decision-id": decision_id}} if decision_id else {}
        self.create_pod(name, gpus, update, podset=podset, node_name=node_name)

    def create_pod(self, name: str, gpus: int, update: dict[str, Any], *, podset: str = "main", node_name: str | None = None) -> None:
        """A pod of ``podset`` as its job controller creates it from the pod template Kueue merged
        ``update`` (a podSetUpdate: labels, annotations, nodeSelector) into: pending, unless
        ``node_name`` binds it already."""
        meta: dict[str, Any] = {"name": name, "namespace": self.ns, "labels": {**(update.get("labels") or {}), "kueue.x-k8s.io/podset": podset}}
        if update.get("annotations"):
            meta["annotations"] = dict(update["annotations"])
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.example.com/train:1", "resources": {
            "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}
        if update.get("nodeSelector"):
            spec["nodeSelector"] = dict(update["nodeSelector"])
        if node_name:
            spec["nodeName"] = node_name
        self.core.create_namespaced_pod(self.ns, manifest({"metadata": meta, "spec": spec}))

    def schedule_pod(self, name: str, node_name: str) -> None:
        """The kube-scheduler binds a pending pod (``pods/binding``)."""
        self.core.create_namespaced_pod_binding(name, self.ns, manifest({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                                                         "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}),
                                                _preload_content=False)

    def finish_pod(self, name: str, phase: str = "Succeeded") -> None:
        """The pod ends: ``Succeeded``, or ``Failed``."""
        self.core.patch_namespaced_pod_status(name, self.ns, {"status": {"phase": phase}})

    # ------------------------------------------------------------------ the controller

    def settings(self) -> Settings:
        return Settings(kueue=KueueSettings(admission_check=self.check), config=ConfigSettings(namespace=self.ns))

    def controller(self, **kw: Any) -> Controller:
        kw.setdefault("settings", self.settings())
        kw.setdefault("clock", self.clock)
        kw.setdefault("recorder", Recorder(self.records))
        kw.setdefault("metrics", self.metrics)
        return Controller(self.port, **kw)

    @contextmanager
    def running(self, **kw: Any) -> Iterator[Controller]:
        """A controller running its own loop (watches and worker), synced, until the block ends."""
        ctrl = self.controller(**kw)
        ctrl.start()
        try:
            assert ctrl.wait_synced(30)
            yield ctrl
        finally:
            ctrl.stop()

    # ------------------------------------------------------------------ Kueue's part

    def submit(self, name: str, podsets: list[tuple[str, int, int]], **kw: Any) -> dict[str, Any]:
        """Create the Workload, then reserve quota with Atoll's check Pending (what Kueue does)."""
        self.kueue.create(workload(self.ns, name, podsets, **kw))
        return self.kueue.reserve_quota(self.ns, name, self.cq, self.flavor)

    def requeue(self, name: str) -> dict[str, Any]:
        """Kueue after Atoll's Retry, write by write: requeueAt, eviction (check back to Pending,
        retryCount+1), release (quota and admission gone), backoff over, reservation again.
        A Workload whose check is not Retry (e.g. Ready) is preempted instead, then reserved again."""
        entry = self.kueue.check_state(self.ns, name) or {}
        if entry.get("state") == "Retry":
            assert self.kueue.react(self.ns, name) == "retry"
            self.kueue.end_backoff(self.ns, name)
        else:
            self.kueue.preempt(self.ns, name)
        return self.kueue.reserve_quota(self.ns, name, self.cq, self.flavor)

    def evict_only(self, name: str) -> dict[str, Any]:
        """Kueue's reaction to Atoll's Retry up to the eviction write: Evicted=True, the check reset to
        Pending, QuotaReserved and the admission still there (the job has not stopped yet)."""
        self.kueue.set_requeue_at(self.ns, name)
        return self.kueue.evict(self.ns, name, "AdmissionCheck", f"Evicted due to the admission check {self.check} in Retry state")

    def finish(self, name: str) -> None:
        """Kueue when the job is done: Finished=True (the admission stays, as Kueue leaves it)."""
        self.kueue.finish(self.ns, name)

    def entry(self, name: str) -> dict[str, Any]:
        entry = self.kueue.check_state(self.ns, name)
        assert entry is not None, f"workload {name} has no {self.check} entry"
        return entry

    def workload(self, name: str) -> dict[str, Any]:
        return self.kueue.get(self.ns, name)

    def decision_records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.records.getvalue().splitlines() if line.strip()]

    def events_for(self, name: str) -> list[Any]:
        return [e for e in self.core.list_namespaced_event(self.ns).items if e.involved_object.name == name]


def run(ctrl: Controller) -> list[Any]:
    """One synchronous round: relist everything, decide what is queued."""
    ctrl.sync()
    return ctrl.process()


def planned(entry: dict[str, Any], podset: str = "main") -> dict[str, int]:
    from admission.controller import decode_planned

    update = next(u for u in entry["podSetUpdates"] if u["name"] == podset)
    return decode_planned(update["annotations"]["atoll.dev/planned-nodes"])

"""One kind cluster for the e2e tests: four GPU workers (advertised ``nvidia.com/gpu: 4`` each, two
NVLink islands of two), Kueue from its release manifest on disk, Atoll from the chart with the
image built from the repository's Dockerfile and a flavor under exact enforcement, and Kueue's
Topology, ResourceFlavor, ClusterQueue (Atoll's check on the flavor) and LocalQueue.

Without E2E=1, kind, kubectl, a Docker engine, the manifest and the images in the local engine,
every test skips with the reason (``prerequisites.missing``). Nothing is downloaded: images are
loaded into the nodes from the local engine, and every pod uses ``imagePullPolicy: Never``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from kubernetes import client
from pytest_kind import KindCluster

from admission.kube import api_client_from_kubeconfig
from tests.e2e.prerequisites import E2eSettings, kueue_images, missing
from tests.helm.chart import render
from tests.kube_objects import GROUP, VERSION, cluster_queue, local_queue, resource_flavor, topology

RELEASE, NAMESPACE, TEAM = "atoll", "atoll-system", "team-e2e"
FLAVOR, TOPOLOGY, CQ, LQ = "e2e-gpu", "e2e-fabric", "e2e-cq", "lq"
CHECK = "atoll-topology"
POOL, BLOCK, CLIQUE = "atoll.dev/e2e-pool", "network.example.com/block", "nvidia.com/gpu.clique"
GPU = "nvidia.com/gpu"
KIND_CONFIG = {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4",
               "nodes": [{"role": "control-plane"}] + [{"role": "worker"} for _ in range(4)]}
PROFILES = {"defaultProfile": "strict",
            "flavors": {FLAVOR: {"topology": TOPOLOGY, "enforcement": "exact"}},
            "profiles": {"strict": {"requiredLevel": CLIQUE, "retry": {"initialSeconds": 10, "maxSeconds": 60}}}}
T = TypeVar("T")


def eventually(what: str, probe: Callable[[], T | None], timeout: float = 300.0, every: float = 2.0) -> T:
    """``probe()`` until it returns something (errors count as not yet); fails naming ``what``."""
    deadline, last = time.monotonic() + timeout, "no answer yet"
    while time.monotonic() < deadline:
        try:
            out = probe()
            if out:
                return out
        except (client.ApiException, subprocess.CalledProcessError) as exc:
            last = str(exc)[:500]
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout:.0f} s (last: {last})")


def split_image(image: str) -> tuple[str, str]:
    repo, _, tag = image.rpartition(":")
    return (repo, tag) if repo and "/" not in tag else (image, "latest")


class E2eCluster:
    """The kind cluster and clients for it."""

    def __init__(self, kind: KindCluster, settings: E2eSettings) -> None:
        self.kind = kind
        self.settings = settings
        self.api = api_client_from_kubeconfig(str(kind.kubeconfig_path))
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return subprocess.run([str(self.kind.kubectl_path), "--kubeconfig", str(self.kind.kubeconfig_path), *args],
                              input=stdin, capture_output=True, text=True, check=True).stdout

    def gpu_workers(self) -> list[str]:
        nodes = self.core.list_node().items
        return sorted(n.metadata.name for n in nodes if "node-role.kubernetes.io/control-plane" not in (n.metadata.labels or {}))

    def prepare_nodes(self) -> None:
        """Two islands of two workers; each advertises 4 GPUs (an extended resource patched into
        the node's status, which the kubelet keeps and mirrors into allocatable)."""
        workers = self.gpu_workers()
        assert len(workers) == 4, workers
        for i, name in enumerate(workers):
            self.core.patch_node(name, {"metadata": {"labels": {POOL: "gpu", BLOCK: "b0", CLIQUE: f"e2e-c{i // 2}"}}})
            self.core.patch_node_status(name, {"status": {"capacity": {GPU: "4"}}})
        for name in workers:
            eventually(f"node {name} allocatable {GPU}",
                       lambda name=name: (self.core.read_node(name).status.allocatable or {}).get(GPU) == "4")

    def install_kueue(self, manifest: Path) -> None:
        self.kubectl("apply", "--server-side", "-f", str(manifest))
        self.kubectl("-n", "kueue-system", "rollout", "status", "deployment/kueue-controller-manager", "--timeout=300s")

    def install_atoll(self) -> None:
        repo, tag = split_image(self.settings.image)
        values = {"image": {"repository": repo, "tag": tag, "pullPolicy": "Never"}, "profiles": {"document": yaml.safe_dump(PROFILES)}}
        self.core.create_namespace({"metadata": {"name": NAMESPACE}})
        objects = render(values, release=RELEASE, namespace=NAMESPACE)
        # Kueue's webhooks answer a little after its rollout: the AdmissionCheck is retried until they do
        eventually("the chart applied", lambda: self.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(objects)))
        self.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{RELEASE}", "--timeout=300s")

    def kueue_objects(self) -> None:
        self.core.create_namespace({"metadata": {"name": TEAM}})
        for plural, body in (("topologies", topology(TOPOLOGY, [BLOCK, CLIQUE])), ("resourceflavors", resource_flavor(FLAVOR, {POOL: "gpu"})),
                             ("clusterqueues", cluster_queue(CQ, FLAVOR, 16, CHECK))):
            eventually(f"create {plural}", lambda plural=plural, body=body: self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body))
        self.custom.create_namespaced_custom_object(GROUP, VERSION, TEAM, "localqueues", local_queue(TEAM, LQ, CQ))
        eventually("Atoll's AdmissionCheck Active", lambda: any(
            c.get("type") == "Active" and c.get("status") == "True"
            for c in (self.custom.get_cluster_custom_object(GROUP, VERSION, "admissionchecks", CHECK).get("status") or {}).get("conditions") or []))


@pytest.fixture(scope="session")
def e2e() -> Iterator[E2eCluster]:
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    settings = E2eSettings.from_env()
    assert settings.kueue_manifest is not None
    kind = KindCluster("atoll-e2e", image=settings.node_image, kind_path=Path(shutil.which("kind") or "kind"),
                       kubectl_path=Path(shutil.which("kubectl") or "kubectl"))
    config = kind.path / "kind-config.yaml"
    config.write_text(yaml.safe_dump(KIND_CONFIG))
    kind.create(config)
    try:
        for image in [settings.image, *kueue_images(settings.kueue_manifest)]:
            kind.load_docker_image(image)
        cluster = E2eCluster(kind, settings)
        cluster.prepare_nodes()
        cluster.install_kueue(settings.kueue_manifest)
        cluster.install_atoll()
        cluster.kueue_objects()
        yield cluster
    finally:
        if not settings.keep:
            kind.delete()


def job(name: str, image: str, *, pods: int = 2, gpus: int = 4, indexed: bool = False) -> dict[str, Any]:
    """A suspended batch Job in Atoll's LocalQueue; its pods sleep in Atoll's own image (already on the nodes)."""
    container = {"name": "main", "image": image, "imagePullPolicy": "Never", "command": ["sleep", "900"],
                 "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}
    spec: dict[str, Any] = {"suspend": True, "parallelism": pods, "completions": pods, "backoffLimit": 0,
                            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": TEAM, "labels": {"kueue.x-k8s.io/queue-name": LQ}},
            "spec": spec}

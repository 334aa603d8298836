"""Fixtures for the webhook tests: a serving certificate for 127.0.0.1, the webhook on a loopback
HTTPS port, and its registration with the real apiserver (a MutatingWebhookConfiguration
scoped to the test's namespace and removed afterwards, so other tests' pods never reach it).

Kueue's part is played as Kueue does it (``tests/kube_objects.py``): the controller admits a Workload under exact
enforcement; ``kueue_pod`` builds the pod a Job controller would create from the Workload's
template with the check's podSetUpdate merged in (labels, annotations, nodeSelector), Kueue's
``kueue.x-k8s.io/podset`` label and its ``kueue.x-k8s.io/workload`` annotation.
"""

from __future__ import annotations

import base64
import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from admission.kube import NODES, PODS, ClusterPort, object_key
from admission.webhook import MUTATE_PATH, PodPinner, ServingCert, WebhookServer, WebhookSettings, ensure_serving_cert
from tests.admission.fabric import Fabric, profiles_doc, run

NS_LABEL = "atoll.dev/webhook-test"


@pytest.fixture
def cert(tmp_path: Path) -> ServingCert:
    return ensure_serving_cert(tmp_path / "certs", ["127.0.0.1", "localhost"], generate=True)


def pinner(fabric: Fabric) -> PodPinner:
    """A replica's handler; its slot claims live in the test's namespace."""
    return PodPinner(fabric.port, WebhookSettings(namespace=fabric.ns))


def settle(pinner: PodPinner, port: ClusterPort, namespace: str, timeout: float = 30.0) -> None:
    """Wait until the webhook's watch-fed cache holds every pod of ``namespace`` and every node as
    the apiserver has them now. The webhook reads the cluster as an informer does, a watch delay
    behind; a test that changes a node or a pod and at once creates a pod whose pin depends on it
    waits here first, as a real controller's retry would. Started if it was not yet."""
    assert pinner.start(timeout), f"the webhook's cache did not list the cluster: {pinner.cache.last_error}"
    for resource, namespace_or_none in ((PODS, namespace), (NODES, None)):
        for obj in port.list(resource, namespace=namespace_or_none).items:
            assert pinner.cache.wait_seen(resource, obj, timeout), f"the webhook's cache never saw {object_key(obj)}"


@dataclass
class Served:
    """A running webhook (restartable on the same port) and the certificate it serves."""

    fabric: Fabric
    cert: ServingCert
    server: WebhookServer | None = None
    port: int = 0
    pinner: PodPinner | None = None

    def start(self) -> None:
        self.pinner = pinner(self.fabric)
        assert self.pinner.start(60), f"the webhook's cache did not list the cluster: {self.pinner.cache.last_error}"
        self.server = WebhookServer(self.pinner, self.cert.cert_file, self.cert.key_file, bind="127.0.0.1", port=self.port).start()
        self.port = self.server.port

    def settle(self) -> None:
        """The webhook's cache has caught up with the test namespace's pods and the nodes."""
        assert self.pinner is not None
        settle(self.pinner, self.fabric.port, self.fabric.ns)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def restart(self) -> None:
        """A fresh process's webhook: nothing remembered, same address."""
        self.stop()
        self.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{MUTATE_PATH}"


@pytest.fixture
def served(fabric: Fabric, cert: ServingCert) -> Iterator[Served]:
    s = Served(fabric, cert)
    s.start()
    yield s
    s.stop()


@functools.cache
def chart_object_selector() -> dict[str, Any]:
    """The objectSelector of the chart's MutatingWebhookConfiguration, as rendered for a flavor under exact enforcement."""
    from tests.helm.chart import by_kind, render

    doc = "flavors:\n  gb200: {topology: nvl72-fabric, enforcement: exact}\n"
    [config] = by_kind(render({"profiles": {"document": doc}}), "MutatingWebhookConfiguration")
    selector: dict[str, Any] = config["webhooks"][0]["objectSelector"]
    return selector


def webhook_configuration(name: str, url: str, ca_pem: bytes, namespace: str, *, timeout: int = 10) -> dict[str, Any]:
    """What the chart installs (its objectSelector as rendered), with a URL instead of a Service and
    the test's namespace only."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
        "webhooks": [{
            "name": "pods.exact.atoll.dev", "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun",
            "failurePolicy": "Fail", "timeoutSeconds": timeout, "reinvocationPolicy": "Never",
            "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}],
            "objectSelector": copy.deepcopy(chart_object_selector()),
            "namespaceSelector": {"matchLabels": {NS_LABEL: namespace}},
        }],
    }


@pytest.fixture
def register(fabric: Fabric, cert: ServingCert) -> Iterator[Any]:
    """``register(url)`` installs a MutatingWebhookConfiguration calling ``url`` for this test's namespace."""
    admission = client.AdmissionregistrationV1Api(fabric.api)
    fabric.core.patch_namespace(fabric.ns, {"metadata": {"labels": {NS_LABEL: fabric.ns}}})
    name = f"atoll-test-{fabric.ns}"[:253]

    def install(url: str) -> None:
        assert cert.ca_pem is not None
        admission.create_mutating_webhook_configuration(webhook_configuration(name, url, cert.ca_pem, fabric.ns))

    yield install
    try:
        admission.delete_mutating_webhook_configuration(name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def exact_fabric(fabric: Fabric, *, cliques: int = 1, per_clique: int = 3) -> Fabric:
    """One block of ``cliques`` cliques of ``per_clique`` 4-GPU nodes; the flavor under exact enforcement."""
    doc = profiles_doc(fabric.flavor, fabric.topology, flavors={fabric.flavor: {"topology": fabric.topology, "enforcement": "exact"}})
    fabric.install(doc, nodes=False)
    fabric.add_nodes(blocks=1, cliques=cliques, per_clique=per_clique)
    return fabric


def admit(fabric: Fabric, name: str, podsets: list[tuple[str, int, int]]) -> dict[str, Any]:
    """Submit, let the controller decide, and return the Ready check entry."""
    fabric.submit(name, podsets)
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit", verdict.message
    entry = fabric.entry(name)
    assert entry["state"] == "Ready"
    return entry


def kueue_pod(fabric: Fabric, workload: str, name: str, *, podset: str = "main", labels: dict[str, str] | None = None,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The pod a Job controller creates once Kueue has merged Atoll's podSetUpdate into the template."""
    wl = fabric.workload(workload)
    template = copy.deepcopy(next(p for p in wl["spec"]["podSets"] if p["name"] == podset)["template"])
    update = next(u for u in fabric.entry(workload)["podSetUpdates"] if u["name"] == podset)
    meta = template.get("metadata") or {}
    spec = template["spec"]
    return {
        "metadata": {
            "name": name, "namespace": fabric.ns,
            "labels": {**(meta.get("labels") or {}), **update.get("labels", {}), "kueue.x-k8s.io/podset": podset, **(labels or {})},
            "annotations": {**(meta.get("annotations") or {}), **update.get("annotations", {}), "kueue.x-k8s.io/workload": workload,
                            **(annotations or {})},
        },
        "spec": {**spec, "nodeSelector": {**(spec.get("nodeSelector") or {}), **update.get("nodeSelector", {})}},
    }


def create(fabric: Fabric, pod: dict[str, Any]) -> dict[str, Any]:
    """Create through the apiserver (which calls the webhook) and return the pod as stored."""
    fabric.core.create_namespaced_pod(fabric.ns, pod)
    return stored(fabric, pod["metadata"]["name"])


def stored(fabric: Fabric, name: str) -> dict[str, Any]:
    return fabric.port.get(PODS, name, fabric.ns)


def pinned_node(pod: dict[str, Any]) -> str | None:
    """The hostname every required node-affinity term pins the pod to (None: not pinned)."""
    terms = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms") or []
    hosts = {tuple(e["values"]) for t in terms for e in t.get("matchExpressions") or [] if e["key"] == "kubernetes.io/hostname"}
    if not terms or len(hosts) != 1:
        return None
    (values,) = hosts
    return values[0] if len(values) == 1 else None


def bind(fabric: Fabric, name: str, node: str) -> None:
    """What the scheduler does: a Binding (the 1.20 apiserver has no scheduler of its own)."""
    fabric.core.create_namespaced_pod_binding(name, fabric.ns, {"metadata": {"name": name}, "target": {"kind": "Node", "name": node}},
                                              _preload_content=False)


def fail(fabric: Fabric, name: str) -> None:
    """What a kubelet reports when the pod's node broke under it."""
    fabric.core.patch_namespaced_pod_status(name, fabric.ns, {"status": {"phase": "Failed", "reason": "NodeLost"}})

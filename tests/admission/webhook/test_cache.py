"""The webhook answers from a watch-fed cache on the real apiserver: no LIST (and no read of
pods, nodes or Workloads) inside an admission call, objects stripped on ingest and kept current
by watches, and a ranked pod takes the slot of its rank without a claim."""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from typing import Any

import pytest

from admission.kube import LEASES, NODES, PODS, ClusterPort, errors
from admission.webhook import ANN_SLOT, MUTATE_PATH, PodPinner, WebhookCache, WebhookServer, WebhookSettings, review_time_left
from tests.admission.fabric import Fabric, planned
from tests.admission.webhook.conftest import Served, admit, bind, create, exact_fabric, fail, kueue_pod, pinned_node, settle

pytestmark = pytest.mark.apiserver

INDEX = "batch.kubernetes.io/job-completion-index"


class Recording:
    """The cluster port, noting each call and whether it came from inside an admission review."""

    def __init__(self, port: ClusterPort) -> None:
        self.port = port
        self.calls: list[tuple[str, str, bool]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.port, name)

        def call(resource: Any, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls.append((name, str(resource), review_time_left() is not None))
            return method(resource, *args, **kwargs)

        return call

    def in_review(self) -> Counter[tuple[str, str]]:
        with self._lock:
            return Counter((verb, resource) for verb, resource, inside in self.calls if inside)


def test_an_admission_call_reads_no_pods_nodes_or_workloads_from_the_apiserver(fabric: Fabric, cert: Any, register: Any) -> None:
    """Pinning, a node replacement and a requeue mark: the reviews write (claims Lease, the
    Workload's condition) and read the claims Lease, and read nothing else from the apiserver."""
    exact_fabric(fabric, cliques=2, per_clique=3)
    admit(fabric, "train", [("main", 2, 4)])
    recording = Recording(fabric.port)
    pinner = PodPinner(recording, WebhookSettings(namespace=fabric.ns))  # type: ignore[arg-type]
    assert pinner.start(60)
    server = WebhookServer(pinner, cert.cert_file, cert.key_file, bind="127.0.0.1", port=0).start()
    try:
        register(f"https://127.0.0.1:{server.port}{MUTATE_PATH}")
        pods = [create(fabric, kueue_pod(fabric, "train", f"train-{i}-a")) for i in range(2)]  # no rank: claims
        for i, pod in enumerate(pods):
            bind(fabric, f"train-{i}-a", pinned_node(pod) or "")
        lost = pinned_node(pods[0]) or ""
        fail(fabric, "train-0-a")
        fabric.core.patch_node(lost, {"spec": {"unschedulable": True}})
        settle(pinner, fabric.port, fabric.ns)
        spare = pinned_node(create(fabric, kueue_pod(fabric, "train", "train-0-b", labels={INDEX: "0"})))
        assert spare not in (None, lost)  # a replacement in the domain
        bind(fabric, "train-0-b", spare or "")
        fail(fabric, "train-0-b")
        fabric.core.patch_node(spare or "", {"spec": {"unschedulable": True}})
        settle(pinner, fabric.port, fabric.ns)
        assert pinned_node(create(fabric, kueue_pod(fabric, "train", "train-0-c", labels={INDEX: "0"}))) == spare
        assert "atoll.dev/RequeueRequested" in {c["type"] for c in fabric.workload("train")["status"]["conditions"]}
        calls = recording.in_review()
    finally:
        server.stop()
    assert calls, "no review ran"
    assert not [c for c in calls if c[0] in ("list", "watch")], calls
    assert {resource for _, resource in calls} <= {str(LEASES), "workloads.kueue.x-k8s.io"}, calls
    assert ("get", "workloads.kueue.x-k8s.io") not in calls and calls[("apply", "workloads.kueue.x-k8s.io")] == 1


def test_a_ranked_pod_takes_its_rank_even_while_its_predecessor_still_shows_live_and_claims_nothing(fabric: Fabric, served: Served,
                                                                                                   register: Any) -> None:
    """A recreated pod of rank 0 whose old pod has not been seen failing yet (still Running in
    the API): the rank is stable, so slot 0 and its node, and no Lease round-trip."""
    exact_fabric(fabric)
    admit(fabric, "train", [("main", 4, 2)])
    register(served.url)
    slots = [node for node, count in planned(fabric.entry("train")).items() for _ in range(count)]
    first = create(fabric, kueue_pod(fabric, "train", "train-0-a", labels={INDEX: "0"}))
    bind(fabric, "train-0-a", pinned_node(first) or "")
    fabric.core.patch_namespaced_pod_status("train-0-a", fabric.ns, {"status": {"phase": "Running"}})
    served.settle()
    again = create(fabric, kueue_pod(fabric, "train", "train-0-b", labels={INDEX: "0"}))
    assert again["metadata"]["annotations"][ANN_SLOT] == "0" and pinned_node(again) == slots[0]
    assert again["metadata"]["annotations"]["atoll.dev/previous-pod"] == "train-0-a"
    for i in (3, 1, 2):
        assert create(fabric, kueue_pod(fabric, "train", f"train-{i}", labels={INDEX: str(i)}))["metadata"]["annotations"][ANN_SLOT] == str(i)
    with pytest.raises(errors.NotFound):  # no claim was made for any ranked pod
        fabric.port.get(LEASES, WebhookSettings().claims_lease, fabric.ns)


def test_the_cache_follows_the_apiserver_and_keeps_only_what_the_webhook_reads(fabric: Fabric) -> None:
    exact_fabric(fabric)
    admit(fabric, "train", [("main", 2, 4)])
    cache = WebhookCache(fabric.port).start()
    try:
        assert cache.wait_synced(30)
        node = fabric.port.get(NODES, next(iter(planned(fabric.entry("train")))))
        assert node["metadata"].get("managedFields")  # the apiserver serves them; the cache drops them
        held = cache.node(node["metadata"]["name"])
        assert held is not None and "managedFields" not in held["metadata"] and held["metadata"]["labels"] == node["metadata"]["labels"]
        owed = [o for o in cache.owed() if o.decision == fabric.entry("train")["podSetUpdates"][0]["labels"]["atoll.dev/decision-id"]]
        assert [(o.podset, o.planned) for o in owed] == [("main", planned(fabric.entry("train")))]
        assert cache.workloads_with_decision(fabric.ns, owed[0].decision) == ["train"]

        pod = kueue_pod(fabric, "train", "train-0")
        pod["metadata"]["annotations"]["atoll.dev/node"] = node["metadata"]["name"]
        made = fabric.port.create(PODS, pod)
        assert cache.wait_seen(PODS, made, 30)
        assert [p["metadata"]["name"] for p in cache.pinned_unbound(node["metadata"]["name"])] == ["train-0"]
        assert [p["metadata"]["name"] for p in cache.podset_pods(fabric.ns, owed[0].decision, "main")] == ["train-0"]
        stored = cache.podset_pods(fabric.ns, owed[0].decision, "main")[0]
        assert set(stored["metadata"]["labels"]) == {"atoll.dev/decision-id", "kueue.x-k8s.io/podset"}  # the rest is dropped
        bind(fabric, "train-0", node["metadata"]["name"])
        bound = fabric.port.get(PODS, "train-0", fabric.ns)
        assert cache.wait_seen(PODS, bound, 30)
        assert not cache.pinned_unbound(node["metadata"]["name"])
        assert [p["metadata"]["name"] for p in cache.pods_on(node["metadata"]["name"])] == ["train-0"]
        fabric.core.delete_namespaced_pod("train-0", fabric.ns, grace_period_seconds=0)
        assert cache.wait_seen(PODS, {"metadata": {"name": "train-0", "namespace": fabric.ns}}, 30)
        assert not cache.pods_on(node["metadata"]["name"]) and not cache.podset_pods(fabric.ns, owed[0].decision, "main")
    finally:
        cache.stop()


def test_a_cordon_reaches_the_cache_through_its_watch(fabric: Fabric) -> None:
    """After its first list, the cache learns of changes by its watch alone."""
    exact_fabric(fabric)
    pinner = PodPinner(fabric.port, WebhookSettings(namespace=fabric.ns))
    try:
        settle(pinner, fabric.port, fabric.ns)
        name = fabric.port.list(NODES, label_selector=f"atoll.dev/test-pool={fabric.ns}").items[0]["metadata"]["name"]
        fabric.core.patch_node(name, {"spec": {"unschedulable": True}})
        settle(pinner, fabric.port, fabric.ns)
        assert (pinner.cache.node(name) or {})["spec"]["unschedulable"] is True
    finally:
        pinner.close()



def test_two_pods_answered_before_the_watch_shows_either_never_get_the_same_room(fabric: Fabric) -> None:
    """Both planned nodes are cordoned; the two pods of the gang are answered one after the other
    and never stored (so no watch ever shows them): each spare holds one pod, and each gets its own."""
    exact_fabric(fabric, per_clique=4)
    admit(fabric, "train", [("main", 2, 4)])
    slots = [node for node, count in planned(fabric.entry("train")).items() for _ in range(count)]
    for node in slots:
        fabric.core.patch_node(node, {"spec": {"unschedulable": True}})
    replica = PodPinner(fabric.port, WebhookSettings(namespace=fabric.ns))
    try:
        settle(replica, fabric.port, fabric.ns)
        nodes = []
        for i in range(2):
            pod = kueue_pod(fabric, "train", f"train-{i}", labels={INDEX: str(i)})
            answer = replica.review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": f"u{i}", "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
                "namespace": fabric.ns, "object": pod}})["response"]
            ops = json.loads(base64.b64decode(answer["patch"]))
            nodes.append(next(op["value"] for op in ops if op["path"].endswith("atoll.dev~1node")))
    finally:
        replica.close()
    assert len(set(nodes)) == 2 and not set(nodes) & set(slots), nodes


def test_accelerators_of_other_flavors_count_as_gpus_when_the_settings_name_them(fabric: Fabric) -> None:
    """A flavor whose gpuResource is amd.com/gpu: the webhook sees its nodes' room and its pods'
    requests only when ``accelerators`` names the resource (``atoll run --accelerator-resources``)."""
    from admission.webhook._cluster import ClusterReader
    from tests.kube_objects import create_node, node

    name = f"{fabric.ns}-amd0"
    amd = json.loads(json.dumps(node(name, {"atoll.dev/test-pool": f"{fabric.ns}-amd"}, 8)).replace('"nvidia.com/gpu"', '"amd.com/gpu"'))
    create_node(fabric.core, amd)
    fabric.core.create_namespaced_pod(fabric.ns, {"metadata": {"name": "amd-tenant", "namespace": fabric.ns}, "spec": {
        "nodeName": name, "containers": [{"name": "c", "image": "registry.example.com/x:1",
                                          "resources": {"requests": {"amd.com/gpu": "3"}, "limits": {"amd.com/gpu": "3"}}}]}})
    settings = WebhookSettings(namespace=fabric.ns, accelerators=("amd.com/gpu", "habana.ai/gaudi"))
    assert settings.resources() == ("nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi")
    assert WebhookSettings().resources() == "nvidia.com/gpu"
    with pytest.raises(ValueError, match="accelerators"):
        WebhookSettings(accelerators=("cpu",))
    for resources, gpus, held in ((settings.resources(), 8, 3), (WebhookSettings().resources(), 0, 0)):
        cache = WebhookCache(fabric.port, resources).start()
        try:
            assert cache.wait_synced(30)
            pod = fabric.port.get(PODS, "amd-tenant", fabric.ns)
            assert cache.wait_seen(PODS, pod, 30)
            info = (cache.node_info(name) or (None, ""))[0]
            assert info is not None and info.allocatable.gpu == gpus
            assert ClusterReader(fabric.port, resources, cache=cache).pod_requests(pod).gpu == held
        finally:
            cache.stop()

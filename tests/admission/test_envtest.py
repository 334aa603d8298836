"""The test control plane is a real kube-apiserver: Kueue's CRDs validate, SSA merges check
entries by key, watches honour resourceVersions."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from admission.envtest import ApiServer, adapt_for_old_apiservers
from tests.kube_objects import CHECK, GROUP, VERSION, KueueActor, admission_check, cluster_queue, resource_flavor, topology, workload

pytestmark = pytest.mark.apiserver


def test_kueue_crds_are_established(kube_client: Any) -> None:
    ext = client.ApiextensionsV1Api(kube_client)
    names = {c.metadata.name for c in ext.list_custom_resource_definition().items}
    assert {"workloads.kueue.x-k8s.io", "admissionchecks.kueue.x-k8s.io", "topologies.kueue.x-k8s.io"} <= names


def test_cluster_objects_validate(kube_client: Any) -> None:
    custom = client.CustomObjectsApi(kube_client)
    for plural, body in (("topologies", topology("envtest-topo", ["rack", "kubernetes.io/hostname"])),
                         ("resourceflavors", resource_flavor("envtest-flavor", {"pool": "a"})),
                         ("admissionchecks", admission_check("envtest-check")),
                         ("clusterqueues", cluster_queue("envtest-cq", "envtest-flavor", 8, "envtest-check"))):
        created = custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
        assert created["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(GROUP, VERSION, "topologies", {**topology("bad", []), "spec": {"levels": []}})
    assert err.value.status == 422


def test_workload_validates_and_bad_one_is_refused(kube_client: Any, namespace: str) -> None:
    kueue = KueueActor(kube_client)
    created = kueue.create(workload(namespace, "ok", [("main", 2, 4)]))
    assert created["metadata"]["uid"]
    bad = workload(namespace, "bad", [("main", 2, 4)])
    bad["spec"]["podSets"][0]["count"] = -1
    with pytest.raises(ApiException) as err:
        kueue.create(bad)
    assert err.value.status == 422


def test_status_apply_merges_admission_checks_by_name(kube_client: Any, namespace: str) -> None:
    kueue = KueueActor(kube_client)
    kueue.create(workload(namespace, "w", [("main", 1, 1)]))
    kueue.reserve_quota(namespace, "w", "cq", "gb200")
    custom = client.CustomObjectsApi(kube_client)
    ours = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": "w", "namespace": namespace},
            "status": {"admissionChecks": [{"name": "other-check", "state": "Ready", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    out = custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "workloads", "w", ours, field_manager="atoll",
                                                      _content_type="application/apply-patch+yaml")
    states = {e["name"]: e["state"] for e in out["status"]["admissionChecks"]}
    assert states == {CHECK: "Pending", "other-check": "Ready"}
    assert {m["manager"] for m in out["metadata"]["managedFields"]} >= {"atoll", "kueue"}


def test_watch_from_resource_version_sees_only_new_events(kube_client: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "b"}})
    events = [(e["type"], e["object"].metadata.name) for e in watch.Watch().stream(
        core.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=1)]
    assert events == [("ADDED", "b")]


def test_compacted_resource_version_gives_410_gone() -> None:
    with ApiServer(watch_cache=False) as api:
        core = client.CoreV1Api(api.api_client())
        core.create_namespace({"metadata": {"name": "t"}})
        rv = core.create_namespaced_config_map("t", {"metadata": {"name": "a"}}).metadata.resource_version
        for name in ("b", "c"):
            core.create_namespaced_config_map("t", {"metadata": {"name": name}})
        api.compact_etcd()
        with pytest.raises(ApiException) as err:
            list(watch.Watch().stream(core.list_namespaced_config_map, "t", resource_version=rv, timeout_seconds=1))
        assert err.value.status == 410


def test_schema_adaptation_is_generic() -> None:
    crd = {"spec": {"versions": [{"schema": {"openAPIV3Schema": {"properties": {"xs": {
        "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
        "items": {"properties": {"name": {"type": "string", "default": ""},
                                 "q": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}}}}}}}}]}}
    items = adapt_for_old_apiservers(crd)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["xs"]["items"]
    assert "default" not in items["properties"]["name"] and items["required"] == ["name"]
    assert items["properties"]["q"] == {"x-kubernetes-preserve-unknown-fields": True}

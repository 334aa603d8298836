"""The test control plane is a real kube-apiserver: Kueue's CRDs load and validate, server-side
apply merges check entries by name, watches honour resourceVersions; and the binaries are found
the way the envtest convention says."""

from __future__ import annotations

import copy
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.envtest import (
    CONTROL_PLANE_VERSION,
    JOBSET_VERSION,
    KUEUE_CRD_FILES,
    KUEUE_VERSION,
    KWOK_VERSION,
    UNCACHED_RESOURCE,
    ApiServer,
    Binaries,
    EnvtestError,
    adapt_for_old_apiservers,
    cache_dir,
    control_plane_cache_dir,
    ensure_binaries,
    ensure_current,
    find_binaries,
)
from tests.kube_objects import (
    API_VERSION,
    CHECK,
    GPU,
    GROUP,
    VERSION,
    admission_check,
    apply_workload_status,
    cluster_queue,
    create_node,
    local_queue,
    node,
    reserve_quota,
    resource_flavor,
    topology,
    workload_manifest,
)

needs_apiserver = pytest.mark.apiserver


def _workloads(kube_client: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


def _create_workload(kube_client: Any, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = _workloads(kube_client).create_namespaced_custom_object(
        GROUP, VERSION, body["metadata"]["namespace"], "workloads", body)
    return created


# ---------------------------------------------------------------------- Kueue's CRDs


@needs_apiserver
def test_the_six_kueue_crds_are_established_and_serve_v1beta2(kube_client: Any) -> None:
    ext = client.ApiextensionsV1Api(kube_client)
    crds = {c.metadata.name: c for c in ext.list_custom_resource_definition().items if c.spec.group == GROUP}
    assert set(crds) == {f.removeprefix(f"{GROUP}_").removesuffix(".yaml") + f".{GROUP}" for f in KUEUE_CRD_FILES}
    for name, crd in crds.items():
        assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True", name
        assert [(v.name, v.served, v.storage) for v in crd.spec.versions] == [("v1beta1", True, False), ("v1beta2", True, True)], name


@needs_apiserver
def test_a_current_apiserver_serves_the_workload_crd_as_kueue_wrote_it(apiserver: ApiServer, kube_client: Any, kueue_crds: Path) -> None:
    import yaml

    served = kube_client.sanitize_for_serialization(client.ApiextensionsV1Api(kube_client).read_custom_resource_definition(f"workloads.{GROUP}"))
    served_schema = served["spec"]["versions"][1]["schema"]["openAPIV3Schema"]
    written = yaml.load((kueue_crds / "kueue.x-k8s.io_workloads.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    if apiserver.binaries.source == "debian-1.20":
        pytest.skip("the 1.20 fallback serves the CRDs rewritten at load and pruned of fields it does not know "
                    "(x-kubernetes-validations among them); this test is about current apiservers")
    assert served_schema == written["spec"]["versions"][1]["schema"]["openAPIV3Schema"]


@needs_apiserver
def test_cluster_scoped_kueue_objects_create_and_keep_their_fields(kube_client: Any, namespace: str) -> None:
    custom = client.CustomObjectsApi(kube_client)
    flavor, check = f"{namespace}-flavor", f"{namespace}-check"
    for plural, body in (("topologies", topology(f"{namespace}-topo", ["network.example.com/block", "kubernetes.io/hostname"])),
                         ("resourceflavors", resource_flavor(flavor, {"pool": "a"})),
                         ("admissionchecks", admission_check(check)),
                         ("clusterqueues", cluster_queue(f"{namespace}-cq", flavor, 8, check))):
        created = custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
        assert created["metadata"]["resourceVersion"] and created["metadata"]["uid"]
        assert created["spec"].items() >= body["spec"].items(), f"{plural}: fields were pruned"
    lq = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", local_queue(namespace, "lq", f"{namespace}-cq"))
    assert lq["spec"]["clusterQueue"] == f"{namespace}-cq"
    cq = custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", f"{namespace}-cq")
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": check, "onFlavors": [flavor]}]
    assert custom.get_cluster_custom_object(GROUP, VERSION, "admissionchecks", check)["spec"]["controllerName"] == "atoll.dev/topology"


@needs_apiserver
def test_a_topology_without_levels_is_refused(kube_client: Any) -> None:
    with pytest.raises(ApiException) as err:
        client.CustomObjectsApi(kube_client).create_cluster_custom_object(GROUP, VERSION, "topologies", topology("no-levels", []))
    assert err.value.status == 422 and "spec.levels" in err.value.body


# ---------------------------------------------------------------------- Workloads


@needs_apiserver
def test_a_v1beta2_workload_validates_and_is_created(kube_client: Any, namespace: str) -> None:
    body = workload_manifest(namespace, "train", [("leader", 1, 1), ("workers", 8, 4)], annotations={"atoll.dev/profile": "strict"},
                             podset_annotations={"workers": {"atoll.dev/class": "training"}})
    created = _create_workload(kube_client, body)
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert created["metadata"]["annotations"] == {"atoll.dev/profile": "strict"}
    workers = created["spec"]["podSets"][1]
    assert (workers["name"], workers["count"]) == ("workers", 8)
    assert workers["template"]["metadata"]["annotations"] == {"atoll.dev/class": "training"}
    assert workers["template"]["spec"]["containers"][0]["resources"]["requests"][GPU] == "4"


def _negative_count(body: dict[str, Any]) -> None:
    body["spec"]["podSets"][0]["count"] = -1


def _no_podsets(body: dict[str, Any]) -> None:
    body["spec"]["podSets"] = []


def _no_template(body: dict[str, Any]) -> None:
    del body["spec"]["podSets"][0]["template"]


@needs_apiserver
@pytest.mark.parametrize(("spoil", "field"), [(_negative_count, "spec.podSets.count"), (_no_podsets, "spec.podSets"),
                                              (_no_template, "spec.podSets.template")])
def test_an_invalid_workload_is_refused_with_422(kube_client: Any, namespace: str, spoil: Any, field: str) -> None:
    body = workload_manifest(namespace, "bad", [("main", 2, 4)])
    spoil(body)
    with pytest.raises(ApiException) as err:
        _create_workload(kube_client, body)
    assert err.value.status == 422
    # 1.36 names the list item (spec.podSets[0].count), 1.20 the bare path (spec.podSets.count)
    assert re.search(re.escape(field).replace(r"podSets\.", r"podSets(\[0\])?\."), err.value.body), err.value.body


@needs_apiserver
def test_reserve_quota_writes_what_kueue_writes(kube_client: Any, namespace: str) -> None:
    custom = _workloads(kube_client)
    _create_workload(kube_client, workload_manifest(namespace, "w", [("main", 4, 2), ("aux", 1, 1)]))
    out = reserve_quota(custom, namespace, "w", "cq", "gb200", {"main": 3})
    admission = out["status"]["admission"]
    assert admission["clusterQueue"] == "cq"
    assert admission["podSetAssignments"][0] == {"name": "main", "count": 3, "flavors": {GPU: "gb200", "cpu": "gb200"},
                                                  "resourceUsage": {GPU: "6", "cpu": "3"}}
    assert admission["podSetAssignments"][1]["count"] == 1
    assert {c["type"]: c["status"] for c in out["status"]["conditions"]} == {"QuotaReserved": "True"}
    [entry] = out["status"]["admissionChecks"]
    # an empty message is a valid string (the build fixes 1.20's validator, which took "" for null)
    assert (entry["name"], entry["state"], entry["message"]) == (CHECK, "Pending", "")
    assert [(m["manager"], m["operation"], m.get("subresource")) for m in out["metadata"]["managedFields"] if m["manager"] == "kueue"] \
        in ([("kueue", "Apply", None)], [("kueue", "Apply", "status")])


@needs_apiserver
def test_status_apply_by_atoll_merges_its_check_entry_by_name(kube_client: Any, namespace: str) -> None:
    custom = _workloads(kube_client)
    _create_workload(kube_client, workload_manifest(namespace, "w", [("main", 1, 1)]))
    reserve_quota(custom, namespace, "w", "cq", "gb200", check_name="provisioning")
    ours = {"admissionChecks": [{"name": CHECK, "state": "Ready", "message": "placed on island b0c1", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    out = apply_workload_status(custom, namespace, "w", ours, manager="atoll")
    assert {e["name"]: e["state"] for e in out["status"]["admissionChecks"]} == {"provisioning": "Pending", CHECK: "Ready"}
    assert out["status"]["admission"]["clusterQueue"] == "cq"
    [atoll] = [m for m in out["metadata"]["managedFields"] if m["manager"] == "atoll"]
    assert atoll["operation"] == "Apply"
    assert f'k:{{"name":"{CHECK}"}}' in atoll["fieldsV1"]["f:status"]["f:admissionChecks"]
    # a second apply by atoll changes only its own entry
    ours["admissionChecks"][0]["state"] = "Retry"
    out = apply_workload_status(custom, namespace, "w", ours, manager="atoll")
    assert {e["name"]: e["state"] for e in out["status"]["admissionChecks"]} == {"provisioning": "Pending", CHECK: "Retry"}


@needs_apiserver
def test_the_status_subresource_ignores_spec(kube_client: Any, namespace: str) -> None:
    custom = _workloads(kube_client)
    _create_workload(kube_client, workload_manifest(namespace, "w", [("main", 1, 1)], queue="lq"))
    body = {"apiVersion": API_VERSION, "kind": "Workload", "metadata": {"name": "w", "namespace": namespace},
            "spec": {"queueName": "other"}, "status": {"admissionChecks": [
                {"name": CHECK, "state": "Pending", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    out = custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "workloads", "w", body, field_manager="atoll",
                                                      force=True, _content_type="application/apply-patch+yaml")
    assert out["spec"]["queueName"] == "lq" and out["status"]["admissionChecks"][0]["name"] == CHECK


# ---------------------------------------------------------------------- watches


@needs_apiserver
def test_watch_from_a_lists_resource_version_sees_only_new_events(kube_client: Any, namespace: str) -> None:
    custom = _workloads(kube_client)
    _create_workload(kube_client, workload_manifest(namespace, "old", [("main", 1, 1)]))
    rv = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["metadata"]["resourceVersion"]
    _create_workload(kube_client, workload_manifest(namespace, "new", [("main", 1, 1)]))
    events = [(e["type"], e["object"]["metadata"]["name"]) for e in watch.Watch().stream(
        custom.list_namespaced_custom_object, GROUP, VERSION, namespace, "workloads", resource_version=rv, timeout_seconds=1)]
    assert events == [("ADDED", "new")]


@needs_apiserver
def test_a_resource_version_older_than_the_watch_window_gives_410(kube_client: Any, namespace: str) -> None:
    # the Workload watch cache started when the CRD was installed, far past revision 1
    custom = _workloads(kube_client)
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, "workloads",
                                  resource_version="1", timeout_seconds=1))
    assert err.value.status == 410


@needs_apiserver
def test_a_compacted_resource_version_gives_410_gone(apiserver: ApiServer, kube_client: Any, namespace: str) -> None:
    assert UNCACHED_RESOURCE == "podtemplates"  # served by etcd, which forgets compacted revisions
    core = client.CoreV1Api(kube_client)

    def template(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "template": {"spec": {"containers": [{"name": "c", "image": "registry.example.com/x:1"}]}}}

    rv = core.create_namespaced_pod_template(namespace, template("a")).metadata.resource_version
    for name in ("b", "c"):
        core.create_namespaced_pod_template(namespace, template(name))
    events = [e["object"].metadata.name for e in watch.Watch().stream(core.list_namespaced_pod_template, namespace, resource_version=rv, timeout_seconds=1)]
    assert events == ["b", "c"]
    # compaction keeps its own revision (c's): what is lost after rv is b's event
    apiserver.compact_etcd()
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(core.list_namespaced_pod_template, namespace, resource_version=rv, timeout_seconds=1))
    assert err.value.status == 410


# ---------------------------------------------------------------------- access and helpers


@needs_apiserver
def test_the_kubeconfig_reaches_the_server_with_tls_verified(apiserver: ApiServer, namespace: str) -> None:
    api = config.new_client_from_config(config_file=str(apiserver.kubeconfig_path))
    assert api.configuration.verify_ssl
    assert namespace in {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}


@needs_apiserver
def test_create_node_writes_status_and_keeps_only_the_given_taints(kube_client: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube_client)
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    created = create_node(core, node(f"{namespace}-n0", {"nvidia.com/gpu.clique": "c0"}, 8, unschedulable=True, taints=[taint]))
    assert created.status.allocatable[GPU] == "8"
    assert {c.type: c.status for c in created.status.conditions}["Ready"] == "True"
    assert [(t.key, t.effect) for t in created.spec.taints] == [("nvidia.com/gpu", "NoSchedule")]
    assert created.spec.unschedulable and created.metadata.labels["kubernetes.io/hostname"] == f"{namespace}-n0"
    plain = create_node(core, node(f"{namespace}-n1", {}, ready=False))
    assert not plain.spec.taints and {c.type: c.status for c in plain.status.conditions}["Ready"] == "False"


# ---------------------------------------------------------------------- no server needed


def test_schema_adaptation_is_generic() -> None:
    crd = {"spec": {"versions": [{"schema": {"openAPIV3Schema": {"properties": {"xs": {
        "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "kind"],
        "items": {"properties": {"name": {"type": "string", "default": ""}, "kind": {"type": "string", "default": "x"},
                                 "q": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}}}}}}}}]}}
    items = adapt_for_old_apiservers(copy.deepcopy(crd))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["xs"]["items"]
    assert "default" not in items["properties"]["name"] and items["properties"]["kind"]["default"] == "x"
    assert items["required"] == ["name"]
    assert items["properties"]["q"] == {"x-kubernetes-preserve-unknown-fields": True}


def _nodes(schema: Any) -> Any:
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _nodes(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _nodes(value)


def test_the_workload_crd_adaptation_leaves_no_empty_default_nor_anyof(kueue_crds: Path) -> None:
    import yaml

    path = kueue_crds / "kueue.x-k8s.io_workloads.yaml"
    original = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    assert any(n.get("default") == "" for n in _nodes(original)), "the file itself must stay as Kueue ships it"
    adapted = adapt_for_old_apiservers(copy.deepcopy(original))
    assert not [n for n in _nodes(adapted) if n.get("default") == "" or "anyOf" in n]
    for n in _nodes(adapted):
        if n.get("x-kubernetes-list-type") == "map":
            props = n["items"]["properties"]
            assert all(k in n["items"].get("required", []) or "default" in props[k] for k in n["x-kubernetes-list-map-keys"])


def _fake_binary(path: Path, version_line: str) -> None:
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_kubebuilder_assets_come_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_binary(tmp_path / "kube-apiserver", "Kubernetes v1.31.0")
    _fake_binary(tmp_path / "etcd", "etcd Version: 3.5.15")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    found = find_binaries()
    assert found is not None
    assert (found.kube_apiserver, found.etcd, found.version) == (tmp_path / "kube-apiserver", tmp_path / "etcd", "v1.31.0")


def test_kubebuilder_assets_without_etcd_is_an_error_naming_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_binary(tmp_path / "kube-apiserver", "Kubernetes v1.31.0")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    with pytest.raises(EnvtestError, match=f"KUBEBUILDER_ASSETS={tmp_path}: no executable etcd"):
        find_binaries()


def test_the_cache_follows_atoll_cache_dir_then_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATOLL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "atoll"
    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_a_cached_binary_counts_only_if_built_by_the_current_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.envtest._binaries import _recipe_digest

    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path))
    (tmp_path / "bin").mkdir()
    _fake_binary(tmp_path / "bin" / "etcd", "etcd Version: 3.4.23")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    folder = tmp_path / "kube-apiserver" / "v1.20.2"
    folder.mkdir(parents=True)
    _fake_binary(folder / "kube-apiserver", "Kubernetes v1.20.2")
    (folder / "recipe.sha256").write_text("0" * 64 + "\n")
    assert find_binaries() is None
    (folder / "recipe.sha256").write_text(_recipe_digest() + "\n")
    assert find_binaries() == Binaries(folder / "kube-apiserver", tmp_path / "bin" / "etcd", "v1.20.2", "debian-1.20")


def test_without_go_nor_root_a_missing_apiserver_is_an_error_saying_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.envtest import _binaries

    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(_binaries, "_go_version", lambda: None)  # the Debian fallback, which needs root
    with pytest.raises(EnvtestError, match="needs root.*KUBEBUILDER_ASSETS"):
        ensure_binaries()


def _fake_current(folder: Path) -> None:
    """The seven programs, with JobSet's recipe stamped (the rest's stamp is each test's business)."""
    from tests.envtest._binaries import _JOBSET_SCRIPT, _recipe_digest

    folder.mkdir(parents=True)
    for name in ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "etcd", "kueue", "kwok", "jobset"):
        _fake_binary(folder / name, f"{name} v1.36.2")
    (folder / "jobset.sha256").write_text(_recipe_digest(_JOBSET_SCRIPT) + "\n")


def test_the_current_build_counts_only_whole_and_stamped_by_its_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.envtest._binaries import _GO_SCRIPT, _recipe_digest

    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path))
    folder = control_plane_cache_dir()
    assert folder == tmp_path / "control-plane" / CONTROL_PLANE_VERSION
    _fake_current(folder)
    assert find_binaries() is None  # no stamp
    (folder / "recipe.sha256").write_text(_recipe_digest() + "\n")  # the Debian recipe's digest is not this one's
    assert find_binaries() is None
    (folder / "recipe.sha256").write_text(_recipe_digest(_GO_SCRIPT) + "\n")
    found = find_binaries()
    assert found is not None and found.source == "go-modules" and found.version == CONTROL_PLANE_VERSION
    assert (found.kube_scheduler, found.kueue, found.kwok, found.jobset) == (folder / "kube-scheduler", folder / "kueue", folder / "kwok",
                                                                             folder / "jobset")
    assert found.describe() == f"kube-apiserver {CONTROL_PLANE_VERSION} (built from Go modules): {folder / 'kube-apiserver'}"
    (folder / "jobset.sha256").write_text("0" * 64 + "\n")
    assert find_binaries() is None  # JobSet's own recipe stamps it
    _fake_binary(folder / "jobset", "jobset v0.12.0")
    (folder / "kwok").unlink()
    assert find_binaries() is None  # all seven programs or none


def test_a_new_or_changed_recipe_rebuilds_its_own_programs_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache holding the control plane but no JobSet (or JobSet from an older recipe) runs
    build-jobset.sh alone: kube-apiserver, Kueue and the rest are neither rebuilt nor touched."""
    from tests.envtest import _binaries

    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_binaries, "_go_version", lambda: (1, 26))
    folder = control_plane_cache_dir()
    _fake_current(folder)
    (folder / "recipe.sha256").write_text(_binaries._recipe_digest(_binaries._GO_SCRIPT) + "\n")
    (folder / "jobset").unlink()
    (folder / "jobset.sha256").write_text("0" * 64 + "\n")  # an older recipe's stamp
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.name not in ("jobset", "jobset.sha256")}
    ran: list[str] = []

    def build(cmd: list[str], log: Path, what: str) -> None:
        ran.append(Path(cmd[1]).name)
        _fake_binary(Path(cmd[2]) / "jobset", "jobset v0.12.0")
    monkeypatch.setattr(_binaries, "_run_logged", build)
    found = ensure_current()
    assert ran == ["build-jobset.sh"]
    assert found.jobset == folder / "jobset" and found.kueue == folder / "kueue"
    assert (folder / "jobset.sha256").read_text().strip() == _binaries._recipe_digest(_binaries._JOBSET_SCRIPT)
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.name not in ("jobset", "jobset.sha256")} == before
    assert ensure_current() == found and ran == ["build-jobset.sh"]  # stamped: nothing runs again


def test_the_current_build_comes_before_the_debian_fallback_and_after_kubebuilder_assets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.envtest._binaries import _GO_SCRIPT, _recipe_digest

    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path))
    (tmp_path / "bin").mkdir()
    _fake_binary(tmp_path / "bin" / "etcd", "etcd Version: 3.4.23")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    old = tmp_path / "kube-apiserver" / "v1.20.2"
    old.mkdir(parents=True)
    _fake_binary(old / "kube-apiserver", "Kubernetes v1.20.2")
    (old / "recipe.sha256").write_text(_recipe_digest() + "\n")
    assert find_binaries() == Binaries(old / "kube-apiserver", tmp_path / "bin" / "etcd", "v1.20.2", "debian-1.20")
    _fake_current(control_plane_cache_dir())
    (control_plane_cache_dir() / "recipe.sha256").write_text(_recipe_digest(_GO_SCRIPT) + "\n")
    assert find_binaries().source == "go-modules"
    _fake_binary(tmp_path / "bin" / "kube-apiserver", "Kubernetes v1.31.0")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "bin"))
    assert find_binaries().source == "KUBEBUILDER_ASSETS"


def test_building_the_current_control_plane_without_go_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.envtest import _binaries

    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_binaries, "_go_version", lambda: (1, 24))
    with pytest.raises(EnvtestError, match=r"needs Go 1\.26 or newer \(go 1\.24\).*KUBEBUILDER_ASSETS"):
        ensure_current()


def test_the_build_recipe_pins_the_versions_the_python_side_names() -> None:
    from tests.envtest._binaries import _GO_SCRIPT, _JOBSET_SCRIPT

    script = _GO_SCRIPT.read_text()
    assert f"kube={CONTROL_PLANE_VERSION} " in script and f"kueue={KUEUE_VERSION} " in script and f"kwok={KWOK_VERSION}\n" in script
    jobset = _JOBSET_SCRIPT.read_text()  # JobSet is built against the Kueue the control plane runs
    assert f"jobset={JOBSET_VERSION}\n" in jobset and f"kueue={KUEUE_VERSION}\n" in jobset


def test_ensure_prints_where_the_binaries_and_crds_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], kueue_crds: Path) -> None:
    from tests.envtest import __main__ as cli

    main = cli.main
    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cli, "_go_version", lambda: None)  # no Go: KUBEBUILDER_ASSETS alone, nothing built
    _fake_binary(tmp_path / "kube-apiserver", "Kubernetes v1.31.0")
    _fake_binary(tmp_path / "etcd", "etcd Version: 3.5.15")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    monkeypatch.setenv("ATOLL_KUEUE_CRDS", str(kueue_crds))
    assert main(["ensure"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"kube-apiserver v1.31.0 (KUBEBUILDER_ASSETS): {tmp_path / 'kube-apiserver'}", f"etcd: {tmp_path / 'etcd'}",
                                                    f"Kueue CRDs: {kueue_crds}"]
    monkeypatch.setenv("ATOLL_KUEUE_CRDS", str(tmp_path))
    assert main(["ensure"]) == 1
    assert f"ATOLL_KUEUE_CRDS={tmp_path}: missing" in capsys.readouterr().err
    monkeypatch.setenv("ATOLL_SKIP_APISERVER", "1")
    assert main(["ensure"]) == 0
    assert "NOT READY, and ATOLL_SKIP_APISERVER=1 skips the apiserver tests" in capsys.readouterr().err
    assert main([]) == 2


_STARTS_AND_WAITS = """
import sys, time
from tests.envtest import ApiServer
api = ApiServer().start()
print(" ".join(str(p.pid) for _, p in api._procs), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@needs_apiserver
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process state from /proc (Linux)")
def test_servers_die_with_a_test_process_killed_by_a_signal() -> None:
    """SIGTERM runs no fixture teardown; etcd and the apiserver must still not outlive the run."""
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))}
    pids: list[int] = []
    proc = subprocess.Popen([sys.executable, "-c", _STARTS_AND_WAITS], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env, cwd=root, text=True)
    try:
        assert proc.stdout is not None
        pids += [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids), f"the child did not start both servers: {pids}"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], "etcd or kube-apiserver outlived the process that started it"
    finally:
        proc.kill()
        proc.wait()
        for pid in pids:  # what a failure left behind
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)

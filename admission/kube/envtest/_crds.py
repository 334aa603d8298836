"""Install Kueue's own CRDs (the reference copies beside the project) into a test apiserver.

Kubernetes 1.20 refuses the Workload CRD as generated: ``default: ""`` is invalid there, and a
list-map key must then be required. Its server-side-apply type builder also cannot read the
``anyOf`` generated for int-or-string fields; it then treats every list of the CRD as atomic, so
``status.admissionChecks`` would not merge by name. All three are fixed at load time by walking
the schema; the files are never edited or copied. Newer apiservers accept the result too.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import yaml

__all__ = ["KUEUE_CRD_FILES", "adapt_for_old_apiservers", "install_kueue_crds", "kueue_crd_dir"]

KUEUE_CRD_FILES = (
    "kueue.x-k8s.io_admissionchecks.yaml",
    "kueue.x-k8s.io_clusterqueues.yaml",
    "kueue.x-k8s.io_localqueues.yaml",
    "kueue.x-k8s.io_resourceflavors.yaml",
    "kueue.x-k8s.io_topologies.yaml",
    "kueue.x-k8s.io_workloads.yaml",
)


def kueue_crd_dir() -> Path | None:
    """``$ATOLL_KUEUE_CRDS``, else ``shared/kueue`` beside the repository; None unless all six files are there."""
    env = os.environ.get("ATOLL_KUEUE_CRDS")
    # admission/kube/envtest/_crds.py -> parents[3] is the repository root, parents[4] the folder holding it
    folder = Path(env).expanduser() if env else Path(__file__).resolve().parents[4] / "shared" / "kueue"
    return folder if all((folder / f).is_file() for f in KUEUE_CRD_FILES) else None


def _adapt(schema: Any) -> None:
    if isinstance(schema, list):
        for value in schema:
            _adapt(value)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("default") == "":
        del schema["default"]
    if schema.get("x-kubernetes-int-or-string"):
        # quantities and ports become untyped preserved values (their pattern is not checked)
        description = schema.get("description")
        schema.clear()
        schema["x-kubernetes-preserve-unknown-fields"] = True
        if description:
            schema["description"] = description
        return
    for value in schema.values():
        _adapt(value)
    if schema.get("x-kubernetes-list-type") == "map":
        items = schema.get("items", {})
        props = items.get("properties", {})
        required = items.setdefault("required", [])
        for key in schema.get("x-kubernetes-list-map-keys", []):
            if key in props and "default" not in props[key] and key not in required:
                required.append(key)


def adapt_for_old_apiservers(crd: dict[str, Any]) -> dict[str, Any]:
    """Drop empty-string defaults, mark default-less list-map keys required, and turn
    int-or-string leaves into preserved untyped values, in every version's schema (in place)."""
    for version in crd.get("spec", {}).get("versions", []):
        _adapt(version.get("schema", {}).get("openAPIV3Schema", {}))
    return crd


def _load(path: Path) -> dict[str, Any]:
    # libyaml when present: the Workload CRD is ~1 MB of YAML, ~10x faster to parse in C
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path}: expected one CustomResourceDefinition document")
    return adapt_for_old_apiservers(crd)


def install_kueue_crds(api_client: Any, crd_dir: Path, timeout: float = 60.0) -> list[str]:
    """Create (or replace) the six Kueue CRDs and wait until each is Established and its
    resource answers a list; returns the CRD names."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext: Any = client.ApiextensionsV1Api(api_client)  # bodies are plain dicts, as loaded from YAML
    custom = client.CustomObjectsApi(api_client)
    crds = [_load(crd_dir / f) for f in KUEUE_CRD_FILES]
    for crd in crds:
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = ext.read_custom_resource_definition(crd["metadata"]["name"])
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)
    deadline = time.monotonic() + timeout
    for crd in crds:
        name, group, plural = crd["metadata"]["name"], crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        while True:
            conds = {c.type: c.status for c in (ext.read_custom_resource_definition(name).status.conditions or [])}
            if conds.get("Established") == "True":
                try:
                    custom.list_cluster_custom_object(group, version, plural, limit=1)
                    break
                except ApiException as exc:
                    if exc.status != 404:  # discovery lags Established by a moment on a fresh server
                        raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not served after {timeout}s (conditions: {conds})")
            time.sleep(0.1)
    return [crd["metadata"]["name"] for crd in crds]

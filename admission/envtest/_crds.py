"""Install Kueue's own CRDs (the reference copies beside the project) into a test apiserver.

Kubernetes 1.20 refuses the Workload CRD as generated (``default: ""`` is invalid there, and
list-map keys must then be required), and its server-side-apply type builder cannot read
the ``anyOf`` it generates for int-or-string fields (it then merges every list atomically, so
``admissionChecks`` would not merge by name). The fixes are applied at load time, generically over the schema; the files themselves
are never edited or copied.
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
    """``$ATOLL_KUEUE_CRDS``, else ``../shared/kueue`` beside the repository; None if absent."""
    env = os.environ.get("ATOLL_KUEUE_CRDS")
    folder = Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "kueue"
    return folder if all((folder / f).is_file() for f in KUEUE_CRD_FILES) else None


def _walk(schema: Any) -> None:
    if isinstance(schema, dict):
        if schema.get("default") == "":
            del schema["default"]
        if schema.get("x-kubernetes-int-or-string"):
            # 1.20 builds anyOf for int-or-string, which its server-side-apply type builder then
            # rejects, treating every list of the CRD as atomic. Quantities and ports become
            # untyped preserved values instead; Atoll never writes them.
            description = schema.get("description")
            schema.clear()
            schema["x-kubernetes-preserve-unknown-fields"] = True
            if description:
                schema["description"] = description
        for value in schema.values():
            _walk(value)
        if schema.get("x-kubernetes-list-type") == "map":
            items = schema.get("items", {})
            props = items.get("properties", {})
            required = items.setdefault("required", [])
            for key in schema.get("x-kubernetes-list-map-keys", []):
                if key in props and "default" not in props[key] and key not in required:
                    required.append(key)
    elif isinstance(schema, list):
        for value in schema:
            _walk(value)


def adapt_for_old_apiservers(crd: dict[str, Any]) -> dict[str, Any]:
    """Drop empty-string defaults, mark default-less list-map keys required, and turn
    int-or-string leaves into preserved untyped values (in place)."""
    for version in crd.get("spec", {}).get("versions", []):
        _walk(version.get("schema", {}).get("openAPIV3Schema", {}))
    return crd


def install_kueue_crds(api_client: Any, crd_dir: Path, timeout: float = 60.0) -> list[str]:
    """Create the six Kueue CRDs and wait until each is Established; returns their names."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api_client)
    names = []
    for file in KUEUE_CRD_FILES:
        crd = adapt_for_old_apiservers(yaml.safe_load((crd_dir / file).read_text()))
        ext.create_custom_resource_definition(crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            obj = ext.read_custom_resource_definition(name)
            conds = {c.type: c.status for c in (obj.status.conditions or [])}
            if conds.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s: {conds}")
            time.sleep(0.1)
    # the discovery cache of a fresh apiserver lags the Established condition by a moment
    time.sleep(0.5)
    return names

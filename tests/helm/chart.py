"""Render the Helm chart with the Helm SDK (no helm binary) and apply its objects to a real apiserver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

try:
    import helm_python as helm
except ImportError:  # pragma: no cover - a broken install, not a reason to skip
    pytest.fail("helm-python-sdk is missing: the chart tests need it; run `pip install -e '.[test]'`", pytrace=False)

CHART = Path(__file__).resolve().parents[2] / "helm" / "atoll"
CERT_MANAGER_GROUP = "cert-manager.io"

__all__ = ["CERT_MANAGER_GROUP", "CHART", "apply", "by_kind", "for_server", "helm", "render"]


def render(values: dict[str, Any] | None = None, *, release: str = "atoll", namespace: str = "atoll-system") -> list[dict[str, Any]]:
    """Every object the chart renders, in template order, as plain dicts."""
    manifests = helm.Chart.load(str(CHART)).render(values or {}, name=release, namespace=namespace, is_install=True)
    objects: list[dict[str, Any]] = []
    for path in sorted(manifests):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(manifests[path]) if doc)
    return objects


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


_DYNAMIC: dict[int, tuple[Any, Any]] = {}  # id -> (client, its DynamicClient): discovery once per client


def apply(api_client: Any, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Create ``obj`` through discovery (any kind the server serves); ``dry_run`` asks the server to
    validate and admit it fully without storing it."""
    from kubernetes.dynamic import DynamicClient

    _, dynamic = _DYNAMIC.setdefault(id(api_client), (api_client, DynamicClient(api_client)))
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    created: dict[str, Any] = resource.create(body=obj, namespace=obj["metadata"].get("namespace"),
                                              dry_run="All" if dry_run else None).to_dict()
    return created


def for_server(api_client: Any, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` adjusted as helm's discovery would on this server: a PodDisruptionBudget of
    policy/v1beta1 where policy/v1 is not served (Kubernetes < 1.21). Offline rendering cannot ask."""
    from kubernetes import client

    groups = client.ApisApi(api_client).get_api_versions().groups
    if any(v.version == "v1" for g in groups if g.name == "policy" for v in g.versions):
        return values
    return {**values, "podDisruptionBudget": {**values.get("podDisruptionBudget", {}), "apiVersion": "policy/v1beta1"}}

"""The sample Kueue objects shipped in config/kueue/ are accepted by a real apiserver with
Kueue's CRDs, and the sample profiles map their flavor to their Topology."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from policies import load_profiles_file

CONFIG = Path(__file__).resolve().parents[2] / "config"
pytestmark = pytest.mark.apiserver
PLURALS = {"Topology": "topologies", "ResourceFlavor": "resourceflavors", "AdmissionCheck": "admissionchecks",
           "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}


def test_sample_kueue_objects_validate(kube_client: Any) -> None:
    custom = client.CustomObjectsApi(kube_client)
    core = client.CoreV1Api(kube_client)
    docs = [d for d in yaml.safe_load_all((CONFIG / "kueue" / "gb200.yaml").read_text()) if d]
    kinds = []
    for doc in docs:
        group, version = doc["apiVersion"].split("/")
        plural = PLURALS[doc["kind"]]
        namespace = doc["metadata"].get("namespace")
        if namespace:
            try:
                core.create_namespace({"metadata": {"name": namespace}})
            except client.ApiException as exc:
                assert exc.status == 409
            created = custom.create_namespaced_custom_object(group, version, namespace, plural, doc)
        else:
            doc = {**doc, "metadata": {**doc["metadata"], "name": "sample-" + doc["metadata"]["name"]}}
            created = custom.create_cluster_custom_object(group, version, plural, doc)
        assert created["metadata"]["uid"]
        kinds.append(doc["kind"])
    assert kinds == ["Topology", "ResourceFlavor", "AdmissionCheck", "ClusterQueue", "LocalQueue"]


def test_sample_profiles_point_at_the_sample_topology() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all((CONFIG / "kueue" / "gb200.yaml").read_text()) if d}
    profiles = load_profiles_file(CONFIG / "profiles.yaml")
    assert profiles.flavors[docs["ResourceFlavor"]["metadata"]["name"]].topology == docs["Topology"]["metadata"]["name"]
    assert "topologyName" not in docs["ResourceFlavor"]["spec"]

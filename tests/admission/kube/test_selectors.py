"""``list`` with a label selector: the real adapter (the apiserver selects) and the in-memory
cluster (``parse_label_selector`` selects) answer every case alike, and both refuse the same
malformed selectors with ``BadRequest`` naming the requirement."""

from __future__ import annotations

from typing import Any

import pytest

from admission.kube import PODS, ClusterPort, KubePort, errors, parse_label_selector
from admission.simulator._port import MemoryCluster

PODS_LABELS = {
    "a": {"atoll.dev/decision-id": "d1", "kueue.x-k8s.io/podset": "main"},
    "b": {"atoll.dev/decision-id": "d1", "kueue.x-k8s.io/podset": "workers"},
    "c": {"atoll.dev/decision-id": "d2", "kueue.x-k8s.io/podset": "main"},
    "d": {"app": "web"},
    "e": {},
}

CASES = [
    ("atoll.dev/decision-id=d1", ["a", "b"]),
    ("atoll.dev/decision-id==d1", ["a", "b"]),
    ("atoll.dev/decision-id=d1,kueue.x-k8s.io/podset=main", ["a"]),
    ("atoll.dev/decision-id!=d1", ["c", "d", "e"]),
    ("atoll.dev/decision-id", ["a", "b", "c"]),
    ("!atoll.dev/decision-id", ["d", "e"]),
    ("atoll.dev/decision-id,kueue.x-k8s.io/podset!=main", ["b"]),
    ("kueue.x-k8s.io/podset in (main,workers)", ["a", "b", "c"]),
    ("kueue.x-k8s.io/podset notin (main)", ["b", "d", "e"]),
    (" app = web ", ["d"]),
    ("app in ()", []),
    ("app notin ()", ["a", "b", "c", "d", "e"]),
    ("atoll.dev/decision-id=nothing", []),
    ("", ["a", "b", "c", "d", "e"]),
]

BAD = [
    ("atoll.dev/decision-id=d1,", "''"),
    ("=d1", "'=d1'"),
    ("app=web extra", "'app=web extra'"),
    ("app in (web", "'app in (web'"),
    ("app=web,,app", "''"),
    ("a/b/c=1", "'a/b/c=1'"),
]


def _pod(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "registry.example.com/x:1"}]}}


@pytest.fixture(params=["memory", pytest.param("apiserver", marks=pytest.mark.apiserver)])
def pods(request: pytest.FixtureRequest) -> tuple[ClusterPort, str]:
    """The same five pods in a port of each kind (and one pod in another namespace, never listed)."""
    if request.param == "memory":
        port: Any = MemoryCluster()
        ns = "team"
        write = port.put
    else:
        from kubernetes import client

        api, ns = request.getfixturevalue("kube_client"), request.getfixturevalue("namespace")
        port = KubePort(api)
        write = port.create
        client.CoreV1Api(api).create_namespace({"metadata": {"name": f"{ns}-other"}})
    for name, labels in PODS_LABELS.items():
        write(PODS, _pod(name, ns, labels))
    write(PODS, _pod("elsewhere", f"{ns}-other", PODS_LABELS["a"]))
    return port, ns


@pytest.mark.parametrize(("selector", "names"), CASES)
def test_a_label_selector_lists_what_the_apiserver_would(pods: tuple[ClusterPort, str], selector: str, names: list[str]) -> None:
    port, ns = pods
    listed = port.list(PODS, namespace=ns, label_selector=selector).items
    assert sorted(p["metadata"]["name"] for p in listed) == names


def test_label_and_field_selectors_combine(pods: tuple[ClusterPort, str]) -> None:
    port, ns = pods
    listed = port.list(PODS, namespace=ns, label_selector="atoll.dev/decision-id=d1", field_selector="metadata.name=b").items
    assert [p["metadata"]["name"] for p in listed] == ["b"]


@pytest.mark.parametrize(("selector", "named"), BAD)
def test_a_malformed_selector_is_refused_as_bad_request(pods: tuple[ClusterPort, str], selector: str, named: str) -> None:
    port, ns = pods
    with pytest.raises(errors.BadRequest) as refused:
        port.list(PODS, namespace=ns, label_selector=selector)
    if isinstance(port, MemoryCluster):  # the apiserver words its own message; ours names the requirement
        assert f"requirement {named}" in str(refused.value)


def test_the_matcher_reads_labels_alone() -> None:
    matches = parse_label_selector("tier in (gold, silver),!spot")
    assert matches({"tier": "gold"}) and matches({"tier": "silver", "other": "x"})
    assert not matches({"tier": "bronze"}) and not matches({"tier": "gold", "spot": "true"}) and not matches({})

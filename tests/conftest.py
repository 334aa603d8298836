"""Session fixtures: one real kube-apiserver with Kueue's CRDs, shared by the integration tests
(mark them ``pytest.mark.apiserver``); each test gets a namespace of its own."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any

import pytest

from admission.kube.envtest import ApiServer, EnvtestError, find_binaries, install_kueue_crds, kueue_crd_dir


@pytest.fixture(scope="session")
def apiserver() -> Iterator[ApiServer]:
    crds = kueue_crd_dir()
    if crds is None:
        pytest.skip("Kueue CRDs not found at ../shared/kueue (set ATOLL_KUEUE_CRDS)")
    try:
        binaries = find_binaries()
    except EnvtestError as exc:
        pytest.fail(str(exc))
    if binaries is None:
        pytest.fail("no kube-apiserver: run `python -m admission.kube.envtest ensure` first (make test does) or set KUBEBUILDER_ASSETS")
    with ApiServer(binaries) as api:
        install_kueue_crds(api.api_client(), crds)
        yield api


@pytest.fixture(scope="session")
def kube_client(apiserver: ApiServer) -> Any:
    """A ``kubernetes.client.ApiClient`` for the session's apiserver."""
    return apiserver.api_client()


def _namespace_name(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-") or "test"
    if len(name) > 50:  # leave room for suffixes the tests derive from it; keep truncated names distinct
        name = f"{name[:43].rstrip('-')}-{hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:6]}"
    return name


@pytest.fixture
def namespace(kube_client: Any, request: pytest.FixtureRequest) -> str:
    """A fresh namespace named after the test (never deleted: 1.20 has no namespace controller to empty it)."""
    from kubernetes import client

    name = _namespace_name(request)
    client.CoreV1Api(kube_client).create_namespace({"metadata": {"name": name}})
    return name

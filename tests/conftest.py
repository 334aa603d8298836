"""Session fixtures: a real kube-apiserver with Kueue's CRDs, shared by the integration tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from admission.envtest import ApiServer, EnvtestError, find_binaries, install_kueue_crds, kueue_crd_dir


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
        pytest.fail("no kube-apiserver: run `python -m admission.envtest ensure` (make test does) or set KUBEBUILDER_ASSETS")
    with ApiServer(binaries) as api:
        install_kueue_crds(api.api_client(), crds)
        yield api


@pytest.fixture(scope="session")
def kube_client(apiserver: ApiServer) -> Any:
    return apiserver.api_client()


@pytest.fixture
def namespace(kube_client: Any, request: pytest.FixtureRequest) -> str:
    """A fresh namespace named after the test."""
    from kubernetes import client

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-") or "t"
    client.CoreV1Api(kube_client).create_namespace({"metadata": {"name": name}})
    return name

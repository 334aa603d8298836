"""Session fixtures: one real kube-apiserver with Kueue's CRDs, shared by the integration tests
(mark them ``pytest.mark.apiserver``); each test gets a namespace of its own.

No silent skips: when apiserver tests are selected but the apiserver binaries or Kueue's CRDs
cannot be found, the run stops at once with one line saying what is missing and how to provide
it. ``ATOLL_SKIP_APISERVER=1`` opts out explicitly: those tests are skipped and the run ends
with a loud summary of how many were not run.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.envtest import ApiServer, Binaries, EnvtestError, ensure_kueue_crds, find_binaries, install_kueue_crds
from tests.kube_objects import manifest

SKIP_ENV = "ATOLL_SKIP_APISERVER"
_MISSING_KEY = pytest.StashKey[str]()
_SKIPPED_KEY = pytest.StashKey[int]()


def control_plane() -> tuple[Binaries, Path]:
    """The apiserver binaries and Kueue's CRD folder, or ``EnvtestError`` saying what is missing."""
    try:
        binaries = find_binaries()
    except EnvtestError as exc:
        raise EnvtestError(f"no kube-apiserver: {exc}") from exc
    if binaries is None:
        raise EnvtestError("no kube-apiserver: run `python -m tests.envtest ensure` (make test does) "
                           "or set KUBEBUILDER_ASSETS to a folder holding kube-apiserver and etcd")
    return binaries, ensure_kueue_crds()


def pytest_report_header(config: pytest.Config) -> str:
    """Which control plane the apiserver tests run on (the first thing the run prints)."""
    try:
        found = find_binaries()
    except EnvtestError as exc:
        return f"control plane: none usable ({exc})"
    return f"control plane: {found.describe()}" if found else "control plane: none built yet"


@pytest.hookimpl(trylast=True)  # after -m / -k deselection: only the tests that will run count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = [item for item in items if item.get_closest_marker("apiserver")]
    if not wanted:
        return
    try:
        control_plane()
        return
    except EnvtestError as exc:
        missing = str(exc)
    if os.environ.get(SKIP_ENV) != "1":
        pytest.exit(f"{len(wanted)} apiserver tests cannot run: {missing} (or set {SKIP_ENV}=1 to skip them knowingly)", returncode=1)
    config.stash[_MISSING_KEY] = missing
    config.stash[_SKIPPED_KEY] = len(wanted)
    marker = pytest.mark.skip(reason=f"{SKIP_ENV}=1: {missing}")
    for item in wanted:
        item.add_marker(marker)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if config.get_verbosity() < 0:  # -q prints no header: name the control plane at the end instead
        terminalreporter.write_line(pytest_report_header(config))
    skipped = config.stash.get(_SKIPPED_KEY, 0)
    if not skipped:
        return
    terminalreporter.section("APISERVER TESTS NOT RUN", sep="!", red=True, bold=True)
    terminalreporter.write_line(f"{skipped} tests against a real kube-apiserver were SKIPPED because {SKIP_ENV}=1.", red=True, bold=True)
    terminalreporter.write_line(f"Missing: {config.stash[_MISSING_KEY]}", red=True)
    terminalreporter.write_line("The controller, chart and RBAC are untested in this run.", red=True, bold=True)


@pytest.fixture
def kueue_crds() -> Path:
    """The folder of Kueue's six CRD files (the run fails without it, unless ATOLL_SKIP_APISERVER=1)."""
    try:
        return ensure_kueue_crds()
    except EnvtestError as exc:
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"{SKIP_ENV}=1: {exc}")
        pytest.fail(str(exc))


@contextmanager
def kueue_apiserver() -> Iterator[ApiServer]:
    """A new apiserver with Kueue's CRDs installed; the test fails naming what is missing without one."""
    try:
        binaries, crds = control_plane()
    except EnvtestError as exc:
        pytest.fail(str(exc))
    with ApiServer(binaries) as api:
        install_kueue_crds(api.api_client(), crds)
        yield api


@pytest.fixture(scope="session")
def apiserver() -> Iterator[ApiServer]:
    with kueue_apiserver() as api:
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
    client.CoreV1Api(kube_client).create_namespace(manifest({"metadata": {"name": name}}))
    return name

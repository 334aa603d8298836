"""The kind tests skip naming exactly what is missing (E2E, kind, kubectl, a Docker engine, Kueue's
manifest, a local image), and run only when nothing is. The tools are stand-in scripts on a
private PATH: what is checked here is the gate, not kind or Docker."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.e2e.prerequisites import kueue_images, missing

MANIFEST = """
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - image: registry.k8s.io/kueue/kueue:v0.15.0
          name: manager
        - name: proxy
          image: "gcr.io/kubebuilder/kube-rbac-proxy:v0.16.0"
"""


def tool(bin_dir: Path, name: str, script: str = "exit 0") -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def machine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A PATH with nothing on it, and E2E=1."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return bin_dir, {"E2E": "1", "PATH": str(bin_dir)}


def test_without_e2e_the_tests_say_how_to_ask_for_them() -> None:
    reason = missing({"PATH": "/usr/bin"})
    assert reason is not None and reason.startswith("E2E=1 is not set")


def test_each_missing_tool_and_the_manifest_are_named(machine: tuple[Path, dict[str, str]]) -> None:
    _, env = machine
    reason = missing(env) or ""
    for part in ("kind is not on PATH", "kubectl is not on PATH", "docker is not on PATH", "ATOLL_E2E_KUEUE_MANIFEST is not set"):
        assert part in reason


def test_a_docker_client_without_an_engine_is_named(machine: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = machine
    for name in ("kind", "kubectl"):
        tool(bin_dir, name)
    tool(bin_dir, "docker", "exit 1")  # `docker info` fails: a client with no engine behind it
    manifest = tmp_path / "manifests.yaml"
    manifest.write_text(MANIFEST)
    reason = missing({**env, "ATOLL_E2E_KUEUE_MANIFEST": str(manifest)})
    assert reason == "no Docker engine answers `docker info` (kind needs one; the docker CLI alone is not enough)"
    assert "is not a file" in (missing({**env, "ATOLL_E2E_KUEUE_MANIFEST": str(tmp_path / "nope.yaml")}) or "")


def test_images_not_in_the_local_engine_are_named_never_pulled(machine: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = machine
    for name in ("kind", "kubectl"):
        tool(bin_dir, name)
    # the engine answers and holds only the kind node image
    tool(bin_dir, "docker", 'if [ "$1" = info ]; then exit 0; fi\n[ "$3" = kindest/node:v1.32.2 ]')
    manifest = tmp_path / "manifests.yaml"
    manifest.write_text(MANIFEST)
    reason = missing({**env, "ATOLL_E2E_KUEUE_MANIFEST": str(manifest)}) or ""
    assert "image atoll:e2e is not in the local Docker engine: run `docker build -t atoll:e2e .`" in reason
    assert "gcr.io/kubebuilder/kube-rbac-proxy:v0.16.0, registry.k8s.io/kueue/kueue:v0.15.0; `docker pull` them first" in reason
    assert kueue_images(manifest) == ["gcr.io/kubebuilder/kube-rbac-proxy:v0.16.0", "registry.k8s.io/kueue/kueue:v0.15.0"]

    tool(bin_dir, "docker")  # every image is there
    assert missing({**env, "ATOLL_E2E_KUEUE_MANIFEST": str(manifest)}) is None

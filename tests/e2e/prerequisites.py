"""What the kind tests need, and the precise reason when something is missing.

They run only when asked (``E2E=1``) on a machine with ``kind``, ``kubectl`` and a Docker engine,
and they never download: Kueue comes from a release manifest on disk, and every image they start
(the kind node, Atoll's, Kueue's) must already be in the local Docker engine. ``missing()`` names
each thing that is not there and how to provide it; the tests skip with that text.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["E2eSettings", "kueue_images", "missing"]

_IMAGE = re.compile(r"^\s*(?:-\s*)?image:\s*[\"']?([^\s\"']+)", re.MULTILINE)


@dataclass(frozen=True)
class E2eSettings:
    """Read from the environment (docs/install.md, "End-to-end tests on kind")."""

    image: str
    """Atoll's image, built beforehand: ``docker build -t atoll:e2e .`` (ATOLL_E2E_IMAGE)."""
    node_image: str
    """The kind node image (ATOLL_E2E_NODE_IMAGE), pulled beforehand."""
    kueue_manifest: Path | None
    """Kueue's release manifest, ``manifests.yaml`` of a release serving v1beta2 (ATOLL_E2E_KUEUE_MANIFEST)."""
    keep: bool
    """Leave the cluster running after the tests (ATOLL_E2E_KEEP=1), for a look around."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> E2eSettings:
        env = dict(os.environ if env is None else env)
        manifest = env.get("ATOLL_E2E_KUEUE_MANIFEST")
        return cls(image=env.get("ATOLL_E2E_IMAGE", "atoll:e2e"), node_image=env.get("ATOLL_E2E_NODE_IMAGE", "kindest/node:v1.32.2"),
                   kueue_manifest=Path(manifest) if manifest else None, keep=env.get("ATOLL_E2E_KEEP") == "1")


def kueue_images(manifest: Path) -> list[str]:
    """The images Kueue's manifest starts (each must be local: kind loads it into the nodes)."""
    return sorted(set(_IMAGE.findall(manifest.read_text())))


def _docker(docker: str, *args: str) -> bool:
    try:
        return subprocess.run([docker, *args], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def missing(env: dict[str, str] | None = None) -> str | None:
    """None when the kind tests can run here; else every missing piece, ``; ``-separated."""
    env = dict(os.environ if env is None else env)
    if env.get("E2E") != "1":
        return "E2E=1 is not set: the kind tests run only when asked (docs/install.md, 'End-to-end tests on kind')"
    settings = E2eSettings.from_env(env)
    path = env.get("PATH", "")
    reasons = [f"{tool} is not on PATH" for tool in ("kind", "kubectl", "docker") if shutil.which(tool, path=path) is None]
    docker = shutil.which("docker", path=path)
    engine = docker is not None and _docker(docker, "info", "--format", "{{.ServerVersion}}")
    if docker is not None and not engine:
        reasons.append("no Docker engine answers `docker info` (kind needs one; the docker CLI alone is not enough)")
    images = [settings.image, settings.node_image]
    if settings.kueue_manifest is None:
        reasons.append("ATOLL_E2E_KUEUE_MANIFEST is not set: point it at Kueue's release manifests.yaml on disk (the tests never download)")
    elif not settings.kueue_manifest.is_file():
        reasons.append(f"ATOLL_E2E_KUEUE_MANIFEST={settings.kueue_manifest} is not a file")
    else:
        images += kueue_images(settings.kueue_manifest)
    if docker is not None and engine:
        absent = [i for i in images if not _docker(docker, "image", "inspect", i)]
        if settings.image in absent:
            reasons.append(f"image {settings.image} is not in the local Docker engine: run `docker build -t {settings.image} .` "
                           "in the repository (or set ATOLL_E2E_IMAGE)")
        others = [i for i in absent if i != settings.image]
        if others:
            reasons.append(f"images not in the local Docker engine (the tests never pull): {', '.join(others)}; `docker pull` them first")
    return "; ".join(reasons) or None

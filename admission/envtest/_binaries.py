"""Find (or build once) a real kube-apiserver and etcd for integration tests and benchmarks.

Order: ``KUBEBUILDER_ASSETS`` (the envtest convention, so a modern envtest gives a modern
apiserver), then Atoll's cache (``$ATOLL_CACHE_DIR``, else ``$XDG_CACHE_HOME/atoll``, else
``~/.cache/atoll``), else a build from Debian's ``kubernetes`` source package into that cache.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["APISERVER_VERSION", "Binaries", "EnvtestError", "cache_dir", "ensure_binaries", "find_binaries"]

APISERVER_VERSION = "v1.20.2"
_SCRIPT = Path(__file__).with_name("build-kube-apiserver.sh")


class EnvtestError(RuntimeError):
    """The test control plane cannot be found, built or started; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path
    source: str


def cache_dir() -> Path:
    base = os.environ.get("ATOLL_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "atoll"


def _etcd(assets: Path | None) -> Path | None:
    for candidate in ([assets / "etcd"] if assets else []) + [Path(p) for p in filter(None, [shutil.which("etcd")])]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_binaries() -> Binaries | None:
    """The binaries if they are already here; never builds or installs."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        folder = Path(assets)
        api, etcd = folder / "kube-apiserver", _etcd(folder)
        if not api.is_file() or etcd is None:
            raise EnvtestError(f"KUBEBUILDER_ASSETS={assets}: expected kube-apiserver and etcd in that folder")
        return Binaries(api, etcd, "KUBEBUILDER_ASSETS")
    api = cache_dir() / "kube-apiserver" / APISERVER_VERSION / "kube-apiserver"
    etcd = _etcd(None)
    if api.is_file() and etcd is not None:
        return Binaries(api, etcd, f"cache {APISERVER_VERSION}")
    return None


def ensure_binaries() -> Binaries:
    """Find the binaries, building kube-apiserver (and installing etcd) once if needed.

    A file lock keeps two processes from building at the same time."""
    found = find_binaries()
    if found:
        return found
    target = cache_dir() / "kube-apiserver" / APISERVER_VERSION
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_binaries()
        if found:
            return found
        if os.geteuid() != 0:
            raise EnvtestError(
                "no kube-apiserver found: set KUBEBUILDER_ASSETS to an envtest folder (setup-envtest use), "
                f"or run `python -m admission.envtest ensure` as root once to build {APISERVER_VERSION} from Debian's source"
            )
        work = cache_dir() / "build"
        proc = subprocess.run(["bash", str(_SCRIPT), str(target), str(work)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise EnvtestError(f"building kube-apiserver failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        shutil.rmtree(work, ignore_errors=True)
    found = find_binaries()
    if found is None:
        raise EnvtestError("kube-apiserver was built but etcd is still missing (apt-get install etcd-server)")
    return found

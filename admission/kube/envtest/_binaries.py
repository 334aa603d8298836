"""Find (or build once) a real kube-apiserver and etcd for integration tests and benchmarks.

Order: ``KUBEBUILDER_ASSETS`` (the envtest convention, so a modern envtest gives a modern
apiserver), then Atoll's cache (``$ATOLL_CACHE_DIR``, else ``$XDG_CACHE_HOME/atoll``, else
``~/.cache/atoll``) with Debian's ``etcd-server``, else a build from Debian's ``kubernetes``
source package into that cache. A cached binary counts only if it was built by the current
recipe (its digest is stamped beside it), so a fixed recipe rebuilds stale caches.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["APISERVER_VERSION", "Binaries", "EnvtestError", "apiserver_cache_dir", "cache_dir", "ensure_binaries", "find_binaries"]

APISERVER_VERSION = "v1.20.2"
_SCRIPT = Path(__file__).with_name("build-kube-apiserver.sh")
_STAMP = "recipe.sha256"
_DEBIAN_ETCD = Path("/usr/bin/etcd")


class EnvtestError(RuntimeError):
    """The test control plane cannot be found, built or started; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path
    version: str


def cache_dir() -> Path:
    """Atoll's cache root: ``$ATOLL_CACHE_DIR``, else ``${XDG_CACHE_HOME:-~/.cache}/atoll``."""
    base = os.environ.get("ATOLL_CACHE_DIR")
    if base:
        return Path(base).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "atoll"


def apiserver_cache_dir() -> Path:
    return cache_dir() / "kube-apiserver" / APISERVER_VERSION


def _recipe_digest() -> str:
    return hashlib.sha256(_SCRIPT.read_bytes()).hexdigest()


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _system_etcd() -> Path | None:
    found = shutil.which("etcd")
    for candidate in ([Path(found)] if found else []) + [_DEBIAN_ETCD]:
        if _executable(candidate):
            return candidate
    return None


def _version_of(apiserver: Path) -> str:
    try:
        out = subprocess.run([str(apiserver), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(r"v\d+\.\d+\.\d+\S*", out)
    return match.group(0) if match else "unknown"


def _from_assets(folder: Path) -> Binaries:
    api, etcd = folder / "kube-apiserver", folder / "etcd"
    missing = [p.name for p in (api, etcd) if not _executable(p)]
    if missing:
        raise EnvtestError(
            f"KUBEBUILDER_ASSETS={folder}: no executable {' and '.join(missing)} there; point it at a setup-envtest "
            "folder (`setup-envtest use -p path`) or unset it to use Atoll's own build"
        )
    return Binaries(api, etcd, _version_of(api))


def _cached_apiserver() -> Path | None:
    folder = apiserver_cache_dir()
    api, stamp = folder / "kube-apiserver", folder / _STAMP
    if _executable(api) and stamp.is_file() and stamp.read_text().strip() == _recipe_digest():
        return api
    return None


def find_binaries() -> Binaries | None:
    """The binaries if they are already here; never builds or installs anything."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        return _from_assets(Path(assets))
    api, etcd = _cached_apiserver(), _system_etcd()
    if api is None or etcd is None:
        return None
    return Binaries(api, etcd, APISERVER_VERSION)


def _run_logged(cmd: list[str], log: Path, what: str) -> None:
    with open(log, "ab") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise EnvtestError(f"{what} failed (exit {code}); full log: {log}\n{tail}")


def ensure_binaries() -> Binaries:
    """Find the binaries, building kube-apiserver and installing Debian's etcd once if needed.

    Building needs root (apt-get) and about 7 minutes on 2 cores; a file lock keeps two
    processes from building at the same time (the second waits, then finds the first's result)."""
    found = find_binaries()
    if found:
        return found
    target = apiserver_cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{APISERVER_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_binaries()
        if found:
            return found
        if os.geteuid() != 0:
            raise EnvtestError(
                f"no kube-apiserver in {target} and building {APISERVER_VERSION} from Debian's source needs root "
                "(apt-get): run `python -m admission.kube.envtest ensure` as root once, or set KUBEBUILDER_ASSETS to a "
                "folder holding kube-apiserver and etcd (setup-envtest's layout)"
            )
        work = cache_dir() / "build"
        work.mkdir(parents=True, exist_ok=True)
        log = work / "build.log"
        if _cached_apiserver() is None:
            print(f"envtest: building kube-apiserver {APISERVER_VERSION} from Debian's source into {target} "
                  f"(about 7 minutes on 2 cores; log: {log})", file=sys.stderr, flush=True)
            (target / _STAMP).unlink(missing_ok=True)
            _run_logged(["bash", str(_SCRIPT), str(target), str(work)], log, "building kube-apiserver")
            (target / _STAMP).write_text(_recipe_digest() + "\n")
        if _system_etcd() is None:
            _run_logged(["apt-get", "update", "-q"], log, "apt-get update")
            _run_logged(["apt-get", "install", "-y", "-q", "etcd-server"], log, "installing etcd-server")
        shutil.rmtree(work, ignore_errors=True)
    found = find_binaries()
    if found is None:
        raise EnvtestError(f"kube-apiserver or etcd still missing after the build; see {target} and `apt-get install etcd-server`")
    return found

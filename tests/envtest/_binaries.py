"""Find (or build once) a real control plane for integration tests and benchmarks.

Order: ``KUBEBUILDER_ASSETS`` (the envtest convention: kube-apiserver and etcd from there), then
the current control plane in Atoll's cache (``$ATOLL_CACHE_DIR``, else ``$XDG_CACHE_HOME/atoll``,
else ``~/.cache/atoll``): kube-apiserver, kube-scheduler and kube-controller-manager
``CONTROL_PLANE_VERSION``, etcd, Kueue's manager and KWOK, built from their Go modules by
``build-control-plane.sh``, and JobSet's controller ``JOBSET_VERSION``, built by ``build-jobset.sh``
(both need Go ``MIN_GO`` or newer). Only where no such Go toolchain exists
does it fall back to kube-apiserver ``APISERVER_VERSION`` built from Debian's ``kubernetes``
source package, with Debian's ``etcd-server``. A cached build counts only if it was made by the
current recipe (its digest is stamped beside it), so a changed recipe rebuilds stale caches. Each
recipe has its own stamp: a changed or added recipe rebuilds its own programs, not the others.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "APISERVER_VERSION",
    "CONTROL_PLANE_VERSION",
    "JOBSET_VERSION",
    "KWOK_VERSION",
    "MIN_GO",
    "Binaries",
    "EnvtestError",
    "apiserver_cache_dir",
    "cache_dir",
    "control_plane_cache_dir",
    "ensure_binaries",
    "ensure_current",
    "find_binaries",
    "find_current",
    "go_module_dir",
]

APISERVER_VERSION = "v1.20.2"
"""The fallback kube-apiserver, built from Debian's source package where no current Go exists."""
CONTROL_PLANE_VERSION = "v1.36.2"
"""kube-apiserver, kube-scheduler and kube-controller-manager built from k8s.io/kubernetes."""
KWOK_VERSION = "v0.8.0"
"""KWOK, built with the control plane; its stages are read from the same module."""
JOBSET_VERSION = "v0.12.0"
"""JobSet's controller: the release Kueue v0.19.2's go.mod requires; its CRD is read from the same module."""
MIN_GO = (1, 26)
_SCRIPT = Path(__file__).with_name("build-kube-apiserver.sh")
_GO_SCRIPT = Path(__file__).with_name("build-control-plane.sh")
_JOBSET_SCRIPT = Path(__file__).with_name("build-jobset.sh")
_STAMP = "recipe.sha256"
_PARTS: tuple[tuple[Path, str, tuple[str, ...]], ...] = (
    (_GO_SCRIPT, _STAMP, ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "etcd", "kueue", "kwok")),
    (_JOBSET_SCRIPT, "jobset.sha256", ("jobset",)),
)
"""The current build's recipes: each script, its stamp's name and the programs it makes."""
_CURRENT = tuple(name for _, _, names in _PARTS for name in names)
_DEBIAN_ETCD = Path("/usr/bin/etcd")


class EnvtestError(RuntimeError):
    """The test control plane cannot be found, built or started; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Binaries:
    """Where the control plane's programs are. Only a current build (``source == "go-modules"``)
    has the scheduler, controller manager, Kueue, KWOK and JobSet."""

    kube_apiserver: Path
    etcd: Path
    version: str
    source: str = "KUBEBUILDER_ASSETS"
    kube_scheduler: Path | None = None
    kube_controller_manager: Path | None = None
    kueue: Path | None = None
    kwok: Path | None = None
    jobset: Path | None = None

    def describe(self) -> str:
        """One line naming the control plane, as the test run prints it."""
        how = {"go-modules": "built from Go modules", "debian-1.20": "Debian source fallback"}.get(self.source, self.source)
        return f"kube-apiserver {self.version} ({how}): {self.kube_apiserver}"


def cache_dir() -> Path:
    """Atoll's cache root: ``$ATOLL_CACHE_DIR``, else ``${XDG_CACHE_HOME:-~/.cache}/atoll``."""
    base = os.environ.get("ATOLL_CACHE_DIR")
    if base:
        return Path(base).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "atoll"


def apiserver_cache_dir() -> Path:
    return cache_dir() / "kube-apiserver" / APISERVER_VERSION


def control_plane_cache_dir() -> Path:
    return cache_dir() / "control-plane" / CONTROL_PLANE_VERSION


def _recipe_digest(script: Path = _SCRIPT) -> str:
    return hashlib.sha256(script.read_bytes()).hexdigest()


def _go_version() -> tuple[int, int] | None:
    """The (major, minor) of the ``go`` on PATH, or None without one."""
    go = shutil.which("go")
    if not go:
        return None
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.match(r"go(\d+)\.(\d+)", out.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _system_etcd() -> Path | None:
    found = shutil.which("etcd")
    for candidate in ([Path(found)] if found else []) + [_DEBIAN_ETCD]:
        if _executable(candidate):
            return candidate
    return None


@functools.cache  # one `go mod download` per module and process
def go_module_dir(module: str, version: str) -> Path:
    """``module@version`` in Go's module cache, downloaded once and verified by the Go checksum
    database; ``EnvtestError`` when it cannot be had."""
    go = shutil.which("go")
    if not go:
        raise EnvtestError(f"no go on PATH to fetch {module}@{version}")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GO111MODULE": "on"}
    env.pop("GOWORK", None)
    done = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True,
                          timeout=600, cwd=tempfile.gettempdir(), env=env)
    try:
        info = json.loads(done.stdout or "{}")
    except ValueError:
        info = {}
    if done.returncode != 0 or not info.get("Dir"):
        raise EnvtestError(f"go mod download {module}@{version} failed: {info.get('Error') or done.stderr.strip()}")
    return Path(info["Dir"])


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


def _stale_parts(folder: Path) -> list[tuple[Path, str, tuple[str, ...]]]:
    """The recipes whose programs are missing from ``folder`` or not stamped with their digest."""
    stale: list[tuple[Path, str, tuple[str, ...]]] = []
    for script, stamp_name, names in _PARTS:
        stamp = folder / stamp_name
        if (not all(_executable(folder / n) for n in names) or not stamp.is_file()
                or stamp.read_text().strip() != _recipe_digest(script)):
            stale.append((script, stamp_name, names))
    return stale


def find_current() -> Binaries | None:
    """The current control plane from Atoll's cache (whatever ``KUBEBUILDER_ASSETS`` says), or None."""
    folder = control_plane_cache_dir()
    if _stale_parts(folder):
        return None
    paths = {name: folder / name for name in _CURRENT}
    return Binaries(paths["kube-apiserver"], paths["etcd"], CONTROL_PLANE_VERSION, "go-modules", paths["kube-scheduler"],
                    paths["kube-controller-manager"], paths["kueue"], paths["kwok"], paths["jobset"])


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
    current = find_current()
    if current is not None:
        return current
    api, etcd = _cached_apiserver(), _system_etcd()
    if api is None or etcd is None:
        return None
    return Binaries(api, etcd, APISERVER_VERSION, "debian-1.20")


def _run_logged(cmd: list[str], log: Path, what: str) -> None:
    with open(log, "ab") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise EnvtestError(f"{what} failed (exit {code}); full log: {log}\n{tail}")


def ensure_current() -> Binaries:
    """The current control plane from Atoll's cache, built from Go modules once if needed (a file
    lock keeps two processes from building at once; the second waits and finds the first's). Only
    the recipes whose stamps are stale run: adding JobSet to a cache holding the rest builds JobSet alone."""
    found = find_current()
    if found:
        return found
    go = _go_version()
    if go is None or go < MIN_GO:
        have = "no go on PATH" if go is None else f"go {go[0]}.{go[1]}"
        raise EnvtestError(f"building the control plane needs Go {MIN_GO[0]}.{MIN_GO[1]} or newer ({have}): install it, "
                           "or set KUBEBUILDER_ASSETS to a folder holding kube-apiserver and etcd")
    target = control_plane_cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{CONTROL_PLANE_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_current()
        if found:
            return found
        work = cache_dir() / "build-go"
        work.parent.mkdir(parents=True, exist_ok=True)
        log = cache_dir() / f"control-plane-{CONTROL_PLANE_VERSION}.log"
        log.unlink(missing_ok=True)
        for script, stamp_name, names in _stale_parts(target):
            print(f"envtest: building {', '.join(names)} ({script.name}) from Go modules into {target} (the whole control "
                  f"plane takes about 30 minutes on 2 cores the first time; log: {log})", file=sys.stderr, flush=True)
            (target / stamp_name).unlink(missing_ok=True)
            _run_logged(["bash", str(script), str(target), str(work)], log, f"building {', '.join(names)}")
            (target / stamp_name).write_text(_recipe_digest(script) + "\n")
            shutil.rmtree(work, ignore_errors=True)
    found = find_current()
    if found is None:
        raise EnvtestError(f"the control plane is still missing from {target} after the build; see {log}")
    return found


def ensure_binaries() -> Binaries:
    """Find the binaries, else build the current control plane from Go modules once; only where no
    Go ``MIN_GO`` exists, build the Debian 1.20 kube-apiserver and install Debian's etcd instead.

    The fallback build needs root (apt-get) and about 7 minutes on 2 cores; a file lock keeps two
    processes from building at the same time (the second waits, then finds the first's result)."""
    found = find_binaries()
    if found and found.source != "debian-1.20":
        return found
    go = _go_version()
    if go is not None and go >= MIN_GO:
        return ensure_current()
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
                "(apt-get): run `python -m tests.envtest ensure` as root once, or set KUBEBUILDER_ASSETS to a "
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

"""Build (or reuse) Atoll's OCI image with ``helm/image/build.sh`` and run containers of it with runc.

The image is unpacked once by umoci into a runtime bundle: its ``config.json`` is the image's own
configuration (entrypoint, user, environment, working directory) as a runtime spec. Each
container gets a copy of that spec with the root filesystem read-only, as the chart runs it, and
the mounts and arguments the test gives. Nothing here needs a Docker engine.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.envtest import cache_dir

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "helm" / "image" / "build.sh"
BUILD_TIMEOUT = 3600  # a cold build compiles umoci, runc and numba's kernels on a loaded machine


def missing() -> str | None:
    """What this machine lacks to build the image, or None."""
    if os.geteuid() != 0:
        return "not root: debootstrap and chroot need root"
    for tool, why in (("go", "umoci and runc are built from Go modules"), ("cc", "runc needs cgo"),
                      ("apt-get", "the Debian mirror is read from apt's sources"), ("unshare", "the build's chroot runs in a mount namespace")):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH ({why})"
    if not Path("/usr/share/keyrings/debian-archive-keyring.gpg").is_file():
        return "no Debian archive keyring to verify debootstrap's download"
    return None


@dataclass(frozen=True)
class Image:
    layout: Path
    tag: str
    tools: Path

    def blob(self, digest: str) -> Any:
        algo, _, hexd = digest.partition(":")
        return json.loads((self.layout / "blobs" / algo / hexd).read_text())

    def manifest(self) -> dict[str, Any]:
        index = json.loads((self.layout / "index.json").read_text())
        (entry,) = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == self.tag]
        return dict(self.blob(entry["digest"]))

    def config(self) -> dict[str, Any]:
        return dict(self.blob(self.manifest()["config"]["digest"]))


def build() -> Image:
    """``helm/image/build.sh``: builds what changed, reuses the rest; its last line is ``LAYOUT:TAG (N MB compressed)``."""
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=BUILD_TIMEOUT, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"helm/image/build.sh failed ({done.returncode}):\n{done.stderr[-4000:]}")
    where = done.stdout.strip().splitlines()[-1].split(" ")[0]
    layout, _, tag = where.rpartition(":")
    return Image(Path(layout), tag, cache_dir() / "image" / "tools")


@dataclass
class Bundle:
    """The image unpacked by umoci: ``rootfs`` and the runtime spec made from the image config."""

    image: Image
    dir: Path

    @classmethod
    def unpack(cls, image: Image, where: Path) -> Bundle:
        subprocess.run([str(image.tools / "umoci"), "unpack", "--image", f"{image.layout}:{image.tag}", str(where / "bundle")],
                       check=True, capture_output=True, timeout=900)
        return cls(image, where)

    @property
    def rootfs(self) -> Path:
        return self.dir / "bundle" / "rootfs"

    def spec(self) -> dict[str, Any]:
        return dict(json.loads((self.dir / "bundle" / "config.json").read_text()))

    def container(self, args: Sequence[str] | None = None, *, env: dict[str, str] | None = None,
                  binds: Sequence[tuple[Path, str, bool]] = (), host_network: bool = False) -> Container:
        """A container of the image (not started): ``args`` replace the image's entrypoint and cmd;
        ``binds`` are (host path, container path, writable); ``host_network`` shares the host's
        network namespace (to reach the test apiserver on 127.0.0.1)."""
        spec = copy.deepcopy(self.spec())
        spec["root"] = {"path": str(self.rootfs), "readonly": True}
        process = spec["process"]
        process["terminal"] = False
        if args is not None:
            process["args"] = list(args)
        if env:
            process["env"] = [e for e in process["env"] if e.split("=", 1)[0] not in env] + [f"{k}={v}" for k, v in env.items()]
        for host, path, writable in binds:
            spec["mounts"].append({"destination": path, "type": "bind", "source": str(host),
                                   "options": ["rbind", "rw" if writable else "ro", "nosuid", "nodev"]})
        if host_network:
            spec["linux"]["namespaces"] = [ns for ns in spec["linux"]["namespaces"] if ns["type"] != "network"]
        name = f"atoll-{uuid.uuid4().hex[:12]}"
        run_dir = self.dir / name
        run_dir.mkdir()
        (run_dir / "config.json").write_text(json.dumps(spec))
        return Container(self.image.tools / "runc", self.dir / "runc-state", run_dir, name, spec)


@dataclass
class Container:
    runc: Path
    state: Path
    bundle: Path
    name: str
    spec: dict[str, Any]

    def _argv(self, *rest: str) -> list[str]:
        return [str(self.runc), "--root", str(self.state), *rest]

    def run(self, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run to the end in the foreground; the container is deleted after."""
        try:
            return subprocess.run(self._argv("run", "--bundle", str(self.bundle), self.name), capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        finally:
            self.delete()

    def start(self, log: Path) -> subprocess.Popen[bytes]:
        """Run in the background (``runc run`` stays the container's parent); output goes to ``log``."""
        with log.open("wb") as out:
            return subprocess.Popen(self._argv("run", "--bundle", str(self.bundle), self.name), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
        """SIGTERM to the container's process (what the kubelet sends), SIGKILL after ``timeout``; its exit code."""
        subprocess.run(self._argv("kill", self.name, "TERM"), capture_output=True, timeout=30)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            subprocess.run(self._argv("kill", self.name, "KILL"), capture_output=True, timeout=30)
            code = proc.wait(timeout=30)
        self.delete()
        return code

    def delete(self) -> None:
        subprocess.run(self._argv("delete", "--force", self.name), capture_output=True, timeout=60)

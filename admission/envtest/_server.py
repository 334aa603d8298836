"""Start etcd and a real kube-apiserver on loopback, for tests and benchmarks.

The apiserver listens with TLS only (its own self-signed certificate), authenticates a static
bearer token, and authorizes everything (``AlwaysAllow``) unless RBAC is asked for.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from admission.envtest._binaries import Binaries, EnvtestError, ensure_binaries

__all__ = ["ApiServer"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


class ApiServer:
    """``with ApiServer() as api: client = api.api_client()``. Ready in a few seconds."""

    def __init__(self, binaries: Binaries | None = None, *, rbac: bool = False, watch_cache: bool = True,
                 start_timeout: float = 60.0) -> None:
        self.binaries = binaries or ensure_binaries()
        self.rbac = rbac
        self.watch_cache = watch_cache
        self.etcd_port = 0
        self.start_timeout = start_timeout
        self.token = uuid.uuid4().hex
        self.dir = Path(tempfile.mkdtemp(prefix="atoll-envtest-"))
        self.port = 0
        self._procs: list[subprocess.Popen[bytes]] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ApiServer:
        d = self.dir
        (d / "certs").mkdir()
        etcd_port, peer_port, self.port = _free_port(), _free_port(), _free_port()
        self.etcd_port = etcd_port
        etcd_log = open(d / "etcd.log", "wb")
        self._procs.append(subprocess.Popen(
            [str(self.binaries.etcd), "--data-dir", str(d / "etcd"), "--name", "default",
             "--listen-client-urls", f"http://127.0.0.1:{etcd_port}", "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-cluster", f"default=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync"],
            stdout=etcd_log, stderr=subprocess.STDOUT))
        for args in (["genrsa", "-out", str(d / "sa.key"), "2048"], ["rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")]):
            subprocess.run(["openssl", *args], check=True, capture_output=True)
        (d / "tokens.csv").write_text(f'{self.token},atoll-test,atoll-test,"system:masters"\n')
        api_log = open(d / "apiserver.log", "wb")
        self._procs.append(subprocess.Popen(
            [str(self.binaries.kube_apiserver), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
             "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}", "--insecure-port=0",
             f"--cert-dir={d / 'certs'}", f"--token-auth-file={d / 'tokens.csv'}",
             "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={d / 'sa.pub'}",
             f"--service-account-signing-key-file={d / 'sa.key'}", "--service-cluster-ip-range=10.0.0.0/24",
             f"--authorization-mode={'RBAC' if self.rbac else 'AlwaysAllow'}", "--disable-admission-plugins=ServiceAccount",
             "--allow-privileged=true", f"--watch-cache={'true' if self.watch_cache else 'false'}"],
            stdout=api_log, stderr=subprocess.STDOUT))
        self._wait_ready()
        self._write_kubeconfig()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            for proc, name in zip(self._procs, ("etcd", "apiserver")):
                if proc.poll() is not None:
                    self.stop()
                    raise EnvtestError(f"{name} exited with {proc.returncode}:\n{_tail(self.dir / f'{name}.log')}")
            try:
                r = httpx.get(f"{self.host}/readyz", headers={"Authorization": f"Bearer {self.token}"}, verify=False, timeout=2)
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.25)
        log = _tail(self.dir / "apiserver.log")
        self.stop()
        raise EnvtestError(f"kube-apiserver not ready after {self.start_timeout}s ({last}):\n{log}")

    def _write_kubeconfig(self) -> None:
        self.kubeconfig_path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: envtest\n  cluster:\n    server: {self.host}\n    insecure-skip-tls-verify: true\n"
            f"users:\n- name: envtest\n  user:\n    token: {self.token}\n"
            "contexts:\n- name: envtest\n  context: {cluster: envtest, user: envtest}\ncurrent-context: envtest\n"
        )

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._procs.clear()
        if not os.environ.get("ATOLL_ENVTEST_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.stop()

    # ------------------------------------------------------------------ access

    def compact_etcd(self) -> int:
        """Compact etcd to its current revision, so watches from older resourceVersions get
        410 Gone (served straight from etcd when the watch cache is off). Returns the revision."""
        base = f"http://127.0.0.1:{self.etcd_port}/v3"
        rev = int(httpx.post(f"{base}/kv/range", json={"key": "AA=="}, timeout=5).json()["header"]["revision"])
        httpx.post(f"{base}/kv/compaction", json={"revision": rev, "physical": True}, timeout=5).raise_for_status()
        return rev

    @property
    def host(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.dir / "kubeconfig"

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` authenticated with the static token."""
        import urllib3
        from kubernetes import client

        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        cfg = client.Configuration()
        cfg.host = self.host
        cfg.verify_ssl = False
        cfg.api_key = {"authorization": f"Bearer {self.token}"}
        return client.ApiClient(cfg)

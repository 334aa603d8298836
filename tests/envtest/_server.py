"""Start etcd and a real kube-apiserver on loopback, for tests and benchmarks.

The apiserver listens with TLS only, on a certificate it makes for itself at start (its file
also carries the issuing CA, so clients verify against it: ``ca_file``). It authenticates one
static bearer token and authorizes everything (``AlwaysAllow``) unless RBAC is asked for.
Nothing outlives the context: both processes are stopped and the temp dir removed
(``ATOLL_ENVTEST_KEEP=1`` keeps it, logs included, for a post-mortem). Nothing outlives the test
process either: a run killed by a signal runs no ``finally``, so every process started here asks
the kernel to kill it when its parent dies (``die_with_parent``).
"""

from __future__ import annotations

import base64
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

from tests.envtest._binaries import Binaries, EnvtestError, ensure_binaries

__all__ = ["UNCACHED_RESOURCE", "ApiServer", "die_with_parent"]

_SERVICE_CIDR = "10.0.0.0/24"
UNCACHED_RESOURCE = "podtemplates"


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn`` for a child that must not outlive this process: on Linux, SIGKILL when the
    thread that started it dies (``prctl(PR_SET_PDEATHSIG)``). A pytest run killed with SIGTERM runs
    no fixture teardown, and an etcd or kube-apiserver left behind keeps its ports and its CPU.
    Every caller starts its servers from the main thread, which lives as long as the process.
    Elsewhere than Linux it does nothing; ``stop()`` still ends the processes on a normal exit."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _older_than(version: str, minor: int) -> bool:
    """True when ``version`` (``v1.20.2``) is a 1.x release before 1.``minor``; an unknown version is taken as current."""
    parts = version.lstrip("v").split(".")
    try:
        return parts[0] == "1" and int(parts[1]) < minor
    except (IndexError, ValueError):
        return False


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


class ApiServer:
    """``with ApiServer() as api: client = api.api_client()``; ready in about 6 seconds.

    ``rbac=True`` authorizes with RBAC instead of AlwaysAllow (the test token is in
    ``system:masters``, so it still may do anything). Watches of ``UNCACHED_RESOURCE`` (all
    resources with ``watch_cache=False``) are served by etcd, so ``compact_etcd()`` turns their
    older resourceVersions into 410 Gone; cached resources answer 410 for versions older than
    their watch cache, as in any cluster."""

    def __init__(self, binaries: Binaries | None = None, *, rbac: bool = False, watch_cache: bool = True,
                 start_timeout: float = 60.0) -> None:
        self.binaries = binaries or ensure_binaries()
        self.rbac = rbac
        self.watch_cache = watch_cache
        self.start_timeout = start_timeout
        self.token = uuid.uuid4().hex
        self.dir = Path(tempfile.mkdtemp(prefix="atoll-envtest-"))
        self.port = 0
        self.etcd_port = 0
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._logs: list[IO[bytes]] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ApiServer:
        try:
            self._start_etcd()
            self._start_apiserver()
            self._wait_ready()
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - open while the process runs; closed in stop()
        self._logs.append(log)
        self._procs.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                              preexec_fn=die_with_parent)))

    def _start_etcd(self) -> None:
        self.etcd_port, peer = _free_port(), _free_port()
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        self._spawn("etcd", [
            str(self.binaries.etcd), "--data-dir", str(self.dir / "etcd"), "--name", "default",
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"default={peer_url}", "--unsafe-no-fsync",
        ])

    def _start_apiserver(self) -> None:
        d = self.dir
        (d / "certs").mkdir()
        key, pub = d / "sa.key", d / "sa.pub"
        for args in (["genrsa", "-out", str(key), "2048"], ["rsa", "-in", str(key), "-pubout", "-out", str(pub)]):
            done = subprocess.run(["openssl", *args], capture_output=True, text=True)
            if done.returncode != 0:
                raise EnvtestError(f"openssl {args[0]} failed making the service-account key: {done.stderr.strip()}")
        (d / "tokens.csv").write_text(f'{self.token},atoll-test,atoll-test,"system:masters"\n')
        self.port = _free_port()
        # the insecure port is gone since 1.24; before that it must be turned off
        insecure = ["--insecure-port=0"] if _older_than(self.binaries.version, 24) else []
        self._spawn("apiserver", [
            str(self.binaries.kube_apiserver), *insecure, f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={d / 'certs'}", f"--token-auth-file={d / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={pub}",
            f"--service-account-signing-key-file={key}", f"--service-cluster-ip-range={_SERVICE_CIDR}",
            f"--authorization-mode={'RBAC' if self.rbac else 'AlwaysAllow'}",
            "--disable-admission-plugins=ServiceAccount", "--allow-privileged=true",
            f"--watch-cache={'true' if self.watch_cache else 'false'}",
            # PodTemplates (unused by Atoll) always come from etcd, so compact_etcd() gives a real 410 on them
            f"--watch-cache-sizes={UNCACHED_RESOURCE}#0",
        ])

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            for name, proc in self._procs:
                if proc.poll() is not None:
                    raise EnvtestError(f"{name} exited with {proc.returncode} while starting; its log ends:\n{_tail(self.dir / f'{name}.log')}")
            try:
                # the serving certificate appears only once the server runs: verify is off for this probe alone
                r = httpx.get(f"{self.host}/readyz", headers={"Authorization": f"Bearer {self.token}"}, verify=False, timeout=2)
                if r.status_code == 200:
                    return
                last = f"/readyz answered HTTP {r.status_code}: {r.text[-300:]}"
            except httpx.HTTPError as exc:
                last = f"/readyz: {exc}"
            time.sleep(0.2)
        raise EnvtestError(f"kube-apiserver not ready after {self.start_timeout}s ({last}); its log ends:\n{_tail(self.dir / 'apiserver.log')}")

    def _write_kubeconfig(self) -> None:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        self.kubeconfig_path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: envtest\n  cluster:\n    server: {self.host}\n    certificate-authority-data: {ca}\n"
            f"users:\n- name: envtest\n  user:\n    token: {self.token}\n"
            "contexts:\n- name: envtest\n  context:\n    cluster: envtest\n    user: envtest\ncurrent-context: envtest\n"
        )

    def stop(self) -> None:
        """Terminate the apiserver, then etcd (kill whichever ignores SIGTERM for 10 s); remove the temp dir."""
        for _, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._procs.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()
        if not os.environ.get("ATOLL_ENVTEST_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------ access

    @property
    def host(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The apiserver's self-made certificate chain; its CA verifies the server (SAN 127.0.0.1)."""
        return self.dir / "certs" / "apiserver.crt"

    @property
    def kubeconfig_path(self) -> Path:
        return self.dir / "kubeconfig"

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` verifying TLS against ``ca_file``, with the static token."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.host
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.verify_ssl = True
        cfg.api_key = {"authorization": f"Bearer {self.token}"}
        return client.ApiClient(cfg)

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (what the apiserver does every 5 minutes): watches
        served by etcd from an older resourceVersion then get 410 Gone. Returns the revision."""
        base = f"http://127.0.0.1:{self.etcd_port}/v3"
        rev = int(httpx.post(f"{base}/kv/range", json={"key": "AA=="}, timeout=5).json()["header"]["revision"])
        httpx.post(f"{base}/kv/compaction", json={"revision": str(rev), "physical": True}, timeout=5).raise_for_status()
        return rev

"""Kueue's CRDs are found in any clone: ATOLL_KUEUE_CRDS, then the cache, then the pinned release
manifest (downloaded once, sha256-checked; served here by a loopback HTTP server), then the
offline copy beside the repository; and a run whose apiserver tests cannot start fails loudly."""

from __future__ import annotations

import hashlib
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.envtest import KUEUE_CRD_FILES, KUEUE_VERSION, EnvtestError, _crds, adapt_for_old_apiservers, ensure_kueue_crds

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def reference_crds(kueue_crds: Path) -> Path:
    return kueue_crds


@pytest.fixture
def manifest(isolated: Path, reference_crds: Path) -> bytes:
    """A release-style manifest: a namespace, the six CRDs with Kueue's conversion webhook, one extra CRD."""
    docs: list[object] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}]
    for name in KUEUE_CRD_FILES:
        crd = yaml.safe_load((reference_crds / name).read_text())
        crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
            "service": {"name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/convert"}}}}
        docs.append(crd)
    docs.append({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "cohorts.kueue.x-k8s.io"}})
    return yaml.safe_dump_all(docs).encode()


class _Served:
    def __init__(self) -> None:
        self.body = b""
        self.requests: list[str] = []
        self.url = ""


@pytest.fixture
def server() -> Iterator[_Served]:
    served = _Served()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            served.requests.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(served.body)))
            self.end_headers()
            self.wfile.write(served.body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{httpd.server_address[1]}/kueue/{KUEUE_VERSION}/manifests.yaml"
    try:
        yield served
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reference_crds: Path) -> Path:
    """No ATOLL_KUEUE_CRDS, an empty cache, no offline copy: only a download can help (the
    reference copy is found before, to serve and compare)."""
    for var in ("ATOLL_KUEUE_CRDS", "ATOLL_KUEUE_SHA256", "ATOLL_KUEUE_MANIFEST_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_crds, "_shared_copy", lambda: tmp_path / "no-shared")
    monkeypatch.setattr(_crds, "_module_crds", lambda: None)  # no Kueue Go module either
    return tmp_path


def test_without_atoll_kueue_crds_they_come_untouched_from_the_kueue_go_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ATOLL_KUEUE_CRDS", raising=False)
    monkeypatch.setenv("ATOLL_CACHE_DIR", str(tmp_path / "cache"))
    module = _crds.kueue_module_dir()
    assert module is not None and module.name == f"kueue@{KUEUE_VERSION}"  # Go's module cache: checked against go.sum's database
    assert ensure_kueue_crds() == module / "config" / "components" / "crd" / "bases"


def test_the_pinned_manifest_is_downloaded_once_checked_and_split(isolated: Path, server: _Served, manifest: bytes,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    server.body = manifest
    monkeypatch.setenv("ATOLL_KUEUE_MANIFEST_URL", server.url)
    monkeypatch.setenv("ATOLL_KUEUE_SHA256", hashlib.sha256(manifest).hexdigest())
    found = ensure_kueue_crds()
    assert found == isolated / "cache" / "kueue" / KUEUE_VERSION
    assert sorted(p.name for p in found.glob("*.yaml")) == sorted(KUEUE_CRD_FILES)
    topology = yaml.safe_load((found / "kueue.x-k8s.io_topologies.yaml").read_text())
    assert topology["metadata"]["name"] == "topologies.kueue.x-k8s.io"
    assert adapt_for_old_apiservers(topology)["spec"]["conversion"] == {"strategy": "None"}
    assert ensure_kueue_crds() == found
    assert server.requests == [f"/kueue/{KUEUE_VERSION}/manifests.yaml"]  # the second call used the cache


def test_a_manifest_with_another_sha256_is_refused_and_nothing_is_cached(isolated: Path, server: _Served, manifest: bytes,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    server.body = manifest + b"\n# tampered\n"
    monkeypatch.setenv("ATOLL_KUEUE_MANIFEST_URL", server.url)
    monkeypatch.setenv("ATOLL_KUEUE_SHA256", hashlib.sha256(manifest).hexdigest())
    with pytest.raises(EnvtestError, match=r"sha256 [0-9a-f]{64} is not the pinned") as err:
        ensure_kueue_crds()
    assert "\n" not in str(err.value) and "ATOLL_KUEUE_CRDS" in str(err.value)
    assert not (isolated / "cache" / "kueue" / KUEUE_VERSION).exists()


def test_a_manifest_without_the_six_crds_is_refused(isolated: Path, server: _Served, monkeypatch: pytest.MonkeyPatch) -> None:
    server.body = b"apiVersion: v1\nkind: Namespace\nmetadata: {name: kueue-system}\n"
    monkeypatch.setenv("ATOLL_KUEUE_MANIFEST_URL", server.url)
    monkeypatch.setenv("ATOLL_KUEUE_SHA256", hashlib.sha256(server.body).hexdigest())
    with pytest.raises(EnvtestError, match="the manifest lacks kueue.x-k8s.io_admissionchecks.yaml"):
        ensure_kueue_crds()


def test_without_a_pinned_sha256_nothing_is_downloaded(isolated: Path, server: _Served, manifest: bytes,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    server.body = manifest
    monkeypatch.setenv("ATOLL_KUEUE_MANIFEST_URL", server.url)
    monkeypatch.setattr(_crds, "KUEUE_MANIFEST_SHA256", None)
    with pytest.raises(EnvtestError, match="has no pinned sha256.*set ATOLL_KUEUE_CRDS.*or set ATOLL_KUEUE_SHA256"):
        ensure_kueue_crds()
    assert server.requests == []


def test_an_unreachable_release_falls_back_to_the_offline_copy(isolated: Path, reference_crds: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATOLL_KUEUE_MANIFEST_URL", "http://127.0.0.1:9/manifests.yaml")  # discard port: refused at once
    monkeypatch.setenv("ATOLL_KUEUE_SHA256", "0" * 64)
    with pytest.raises(EnvtestError, match="cannot download http://127.0.0.1:9/manifests.yaml"):
        ensure_kueue_crds()
    monkeypatch.setattr(_crds, "_shared_copy", lambda: reference_crds)
    assert ensure_kueue_crds() == reference_crds


def test_atoll_kueue_crds_comes_first_and_must_be_complete(isolated: Path, reference_crds: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = isolated / "cache" / "kueue" / KUEUE_VERSION
    cache.mkdir(parents=True)
    for name in KUEUE_CRD_FILES:
        (cache / name).write_text((reference_crds / name).read_text())
    assert ensure_kueue_crds() == cache
    monkeypatch.setenv("ATOLL_KUEUE_CRDS", str(reference_crds))
    assert ensure_kueue_crds() == reference_crds
    monkeypatch.setenv("ATOLL_KUEUE_CRDS", str(isolated))
    with pytest.raises(EnvtestError, match=f"ATOLL_KUEUE_CRDS={isolated}: missing kueue.x-k8s.io_admissionchecks.yaml"):
        ensure_kueue_crds()


# ---------------------------------------------------------------------- the test run itself

_ONE_APISERVER_TEST = "tests/admission/kube/test_envtest.py::test_the_six_kueue_crds_are_established_and_serve_v1beta2"


def _pytest(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("ATOLL_SKIP_APISERVER", "ATOLL_KUEUE_SHA256")}
    # an empty folder as ATOLL_KUEUE_CRDS: the CRDs are "missing" whatever this machine has
    base.update({"ATOLL_KUEUE_CRDS": str(tmp_path), **env})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", _ONE_APISERVER_TEST],
                          cwd=REPO, env=base, capture_output=True, text=True, timeout=300)


def test_missing_crds_fail_the_run_with_one_line_saying_how_to_provide_them(tmp_path: Path) -> None:
    done = _pytest(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = [ln for ln in (done.stdout + done.stderr).splitlines() if "apiserver tests cannot run" in ln]
    assert f"ATOLL_KUEUE_CRDS={tmp_path}: missing" in line and "ATOLL_SKIP_APISERVER=1" in line
    assert "passed" not in done.stdout and "skipped" not in done.stdout


def test_opting_out_skips_them_with_a_loud_summary(tmp_path: Path) -> None:
    done = _pytest(tmp_path, ATOLL_SKIP_APISERVER="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "APISERVER TESTS NOT RUN" in done.stdout
    assert "1 tests against a real kube-apiserver were SKIPPED because ATOLL_SKIP_APISERVER=1" in done.stdout
    assert "1 skipped" in done.stdout

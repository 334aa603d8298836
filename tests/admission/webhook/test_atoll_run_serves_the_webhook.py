"""``atoll run --webhook-*``: the flags become settings; the process makes its certificate, puts
its CA into the MutatingWebhookConfiguration's caBundle, and the apiserver's calls then pin pods."""

from __future__ import annotations

import base64
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import structlog
from kubernetes import client

from admission.cli._run import build_webhook_settings, main, parser
from tests.admission.fabric import Fabric, planned
from tests.admission.webhook.conftest import create, exact_fabric, kueue_pod, pinned_node, webhook_configuration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_webhook_flags_and_their_defaults() -> None:
    s = build_webhook_settings(parser({"ATOLL_NAMESPACE": "gpu-system"}).parse_args([]))
    assert (s.port, s.generate_certs, s.service, s.namespace, s.config) == (0, False, "atoll-webhook", "gpu-system", "atoll-webhook")
    s = build_webhook_settings(parser({}).parse_args([
        "--webhook-port", "9443", "--webhook-cert-dir", "/certs", "--webhook-generate-certs", "--webhook-service", "hook",
        "--webhook-namespace", "ops", "--webhook-config", "atoll-pods"]))
    assert (s.port, s.cert_dir, s.generate_certs, s.service, s.namespace, s.config) == (9443, "/certs", True, "hook", "ops", "atoll-pods")


def test_a_bad_webhook_port_is_refused_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--webhook-port", "70000", "--kubeconfig", "/nonexistent"]) == 2
    assert "port" in capsys.readouterr().err


@pytest.mark.apiserver
def test_no_certificate_and_no_generation_stops_with_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str], apiserver: Any) -> None:
    code = main(["--kubeconfig", str(apiserver.kubeconfig_path), "--webhook-port", str(free_port()), "--webhook-cert-dir",
                 str(tmp_path / "none"), "--metrics-port", "0", "--health-port", "0", "--no-leader-elect"])
    structlog.reset_defaults()
    assert code == 2 and "--webhook-generate-certs" in capsys.readouterr().err


@pytest.mark.apiserver
def test_atoll_run_generates_its_certificate_publishes_the_ca_and_pins_pods(fabric: Fabric, apiserver: Any, tmp_path: Path) -> None:
    exact_fabric(fabric)
    port = free_port()
    admission = client.AdmissionregistrationV1Api(fabric.api)
    name = f"atoll-run-{fabric.ns}"[:253]
    config = webhook_configuration(name, f"https://localhost:{port}/mutate-pods", b"", fabric.ns)
    del config["webhooks"][0]["clientConfig"]["caBundle"]  # as the chart installs it: Atoll fills it in
    fabric.core.patch_namespace(fabric.ns, {"metadata": {"labels": {"atoll.dev/webhook-test": fabric.ns}}})
    admission.create_mutating_webhook_configuration(config)
    stop = threading.Event()
    result: list[int] = []
    argv = ["--kubeconfig", str(apiserver.kubeconfig_path), "--namespace", fabric.ns, "--admission-check", fabric.check,
            "--metrics-port", "0", "--health-port", "0", "--no-leader-elect",
            "--webhook-port", str(port), "--webhook-cert-dir", str(tmp_path / "certs"), "--webhook-generate-certs",
            # the certificate names the Service's DNS names; "localhost" lets the test apiserver dial it on loopback
            "--webhook-service", "localhost", "--webhook-config", name]
    runner = threading.Thread(target=lambda: result.append(main(argv, stop=stop)), daemon=True)
    runner.start()
    try:
        fabric.submit("train", [("main", 2, 4)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (fabric.entry("train")["state"] == "Pending"
                                               or not admission.read_mutating_webhook_configuration(name).webhooks[0].client_config.ca_bundle):
            time.sleep(0.1)
        bundle = admission.read_mutating_webhook_configuration(name).webhooks[0].client_config.ca_bundle
        assert base64.b64decode(bundle) == (tmp_path / "certs" / "ca.crt").read_bytes()
        pod = create(fabric, kueue_pod(fabric, "train", "train-0", labels={"batch.kubernetes.io/job-completion-index": "1"}))
        assert pinned_node(pod) == [n for n, k in planned(fabric.entry("train")).items() for _ in range(k)][1]
    finally:
        stop.set()
        runner.join(30)
        structlog.reset_defaults()
        admission.delete_mutating_webhook_configuration(name)
    assert result == [0]


@pytest.mark.apiserver
def test_each_replica_adds_its_own_ca_so_both_stay_trusted(fabric: Fabric, tmp_path: Path) -> None:
    from admission.webhook import CaBundlePublisher, ensure_serving_cert

    admission = client.AdmissionregistrationV1Api(fabric.api)
    name = f"atoll-ca-{fabric.ns}"[:253]
    config = webhook_configuration(name, "https://localhost:1/mutate-pods", b"", fabric.ns)
    del config["webhooks"][0]["clientConfig"]["caBundle"]
    admission.create_mutating_webhook_configuration(config)
    try:
        a, b = (ensure_serving_cert(tmp_path / r, ["x"], generate=True).ca_pem for r in "ab")
        assert a and b
        assert CaBundlePublisher(fabric.port, name, a).publish_once() and CaBundlePublisher(fabric.port, name, b).publish_once()
        version = admission.read_mutating_webhook_configuration(name).metadata.resource_version
        assert CaBundlePublisher(fabric.port, name, a).publish_once()  # already trusted: no write
        stored = admission.read_mutating_webhook_configuration(name)
        assert stored.metadata.resource_version == version
        bundle = base64.b64decode(stored.webhooks[0].client_config.ca_bundle)
        assert a in bundle and b in bundle
    finally:
        admission.delete_mutating_webhook_configuration(name)
    assert not CaBundlePublisher(fabric.port, name, a).publish_once()  # gone: reported, not raised

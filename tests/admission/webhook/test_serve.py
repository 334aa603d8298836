"""The webhook as ``atoll run`` serves it keeps its serving certificate current without a restart:
a mounted pair that changes (cert-manager's rotation) is served to new connections, and a
generated one near expiry is made anew, its CA published before it is served. Time is a
``ManualClock``; each check is called directly (nothing waits on a timer)."""

from __future__ import annotations

import base64
import datetime as dt
import shutil
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client

from admission.kube import ManualClock
from admission.webhook import Webhook, WebhookSettings, ensure_serving_cert
from admission.webhook._certs import renew_before
from tests.admission.fabric import Fabric
from tests.admission.webhook.conftest import webhook_configuration

DAY = 86400.0


def served_cert(port: int, ca: bytes) -> x509.Certificate:
    """The certificate a TLS handshake on ``port`` presents, verified against ``ca`` for "localhost"
    (``ssl.SSLCertVerificationError`` when it does not verify)."""
    ctx = ssl.create_default_context(cadata=ca.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_generated_certificate_is_renewed_when_a_third_of_its_life_is_left(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    three_days = ensure_serving_cert(tmp_path / "short", ["localhost"], generate=True, days=3, now=now)
    cert = x509.load_pem_x509_certificate(three_days.cert_file.read_bytes())
    assert renew_before(cert) == (cert.not_valid_after_utc - cert.not_valid_before_utc) / 3
    assert not ensure_serving_cert(tmp_path / "short", ["localhost"], generate=True, days=3, now=now + dt.timedelta(days=1.9)).generated
    assert ensure_serving_cert(tmp_path / "short", ["localhost"], generate=True, days=3, now=now + dt.timedelta(days=2.1)).generated
    year = x509.load_pem_x509_certificate(ensure_serving_cert(tmp_path / "year", ["localhost"], generate=True, now=now).cert_file.read_bytes())
    assert renew_before(year) == dt.timedelta(days=30)


@pytest.mark.apiserver
def test_a_rotated_mounted_certificate_is_served_without_a_restart(fabric: Fabric, tmp_path: Path) -> None:
    first = ensure_serving_cert(tmp_path / "first", ["localhost"], generate=True)
    second = ensure_serving_cert(tmp_path / "second", ["localhost"], generate=True)
    assert first.ca_pem and second.ca_pem
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for name in ("tls.crt", "tls.key"):
        shutil.copy(tmp_path / "first" / name, mounted / name)
    webhook = Webhook(fabric.port, WebhookSettings(port=free_port(), bind_address="127.0.0.1", cert_dir=str(mounted), namespace=fabric.ns,
                                                   cert_check_seconds=3600)).start()
    assert webhook.server is not None
    try:
        assert served_cert(webhook.server.port, first.ca_pem)
        assert webhook.check_certificate() == ""
        for name in ("tls.key", "tls.crt"):  # what the kubelet does when cert-manager updates the Secret
            tmp = mounted / f".{name}.new"
            shutil.copy(tmp_path / "second" / name, tmp)
            tmp.replace(mounted / name)
        assert webhook.check_certificate() == "reloaded"
        assert served_cert(webhook.server.port, second.ca_pem)
        with pytest.raises(ssl.SSLCertVerificationError):
            served_cert(webhook.server.port, first.ca_pem)
        (mounted / "tls.key").write_text("half written")  # a broken pair: the current one stays
        assert webhook.check_certificate() == ""
        assert served_cert(webhook.server.port, second.ca_pem)
    finally:
        webhook.stop()


@pytest.mark.apiserver
def test_a_generated_certificate_is_renewed_before_expiry_and_its_ca_published_first(fabric: Fabric, tmp_path: Path) -> None:
    admission = client.AdmissionregistrationV1Api(fabric.api)
    name = f"atoll-renew-{fabric.ns}"[:253]
    config: dict[str, Any] = webhook_configuration(name, "https://localhost:1/mutate-pods", b"", fabric.ns)
    del config["webhooks"][0]["clientConfig"]["caBundle"]
    config["webhooks"][0]["namespaceSelector"] = {"matchLabels": {"atoll.dev/never": "true"}}  # never called
    admission.create_mutating_webhook_configuration(config)
    clock = ManualClock(now=time.time() - 2.1 * DAY)  # started 2.1 days ago: 0.9 of its 3 days are left now
    settings = WebhookSettings(port=free_port(), bind_address="127.0.0.1", cert_dir=str(tmp_path / "certs"), generate_certs=True,
                               cert_days=3, service="localhost", namespace=fabric.ns, config=name, cert_check_seconds=3600,
                               ca_bundle_recheck_seconds=3600)
    webhook = Webhook(fabric.port, settings, clock).start()
    assert webhook.server is not None and webhook.cert is not None and webhook.cert.ca_pem
    old_ca = webhook.cert.ca_pem
    try:
        before = served_cert(webhook.server.port, old_ca)
        assert webhook.check_certificate() == ""  # at its start, it is fresh
        clock.advance(2.1 * DAY)  # now: less than a third of its life left
        assert webhook.check_certificate() == "renewed"
        new_ca = webhook.cert.ca_pem
        assert new_ca and new_ca != old_ca
        after = served_cert(webhook.server.port, new_ca)
        assert after.serial_number != before.serial_number and after.not_valid_after_utc > before.not_valid_after_utc
        bundle = base64.b64decode(admission.read_mutating_webhook_configuration(name).webhooks[0].client_config.ca_bundle)
        trusted = x509.load_pem_x509_certificates(bundle)
        assert x509.load_pem_x509_certificate(new_ca) in trusted
        assert webhook.check_certificate() == ""  # renewed once
    finally:
        webhook.stop()
        admission.delete_mutating_webhook_configuration(name)

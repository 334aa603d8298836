"""Kueue's webhooks in the test tier, served as its default install serves them except for the
route: its webhook configurations as its kustomization builds them, each service reference turned
into a loopback URL, and the certificate its internal certificate management keeps.

Kueue's certificate rotator (``internalCertManagement``) makes a certificate for its service's DNS
name only, which an apiserver calling 127.0.0.1 refuses. So its Secret is filled here, before Kueue
starts, with a CA and a serving certificate the rotator accepts as they are (the CA for the DNS
name ``kueue-ca``, the serving certificate for ``kueue-webhook-service.kueue-system.svc``, as it
checks them, and for 127.0.0.1 too, valid past its 90-day look-ahead): it keeps them, Kueue serves
them, and the rotator injects that CA into the webhook configurations and CRDs as it does in a
cluster. (Turning the rotator off is no way out: Kueue then reads its metrics certificate from a
fixed path under ``/etc``.)
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import yaml

from tests.envtest._binaries import EnvtestError, go_module_dir
from tests.envtest._crds import KUEUE_VERSION

__all__ = ["WEBHOOK_SECRET", "WEBHOOK_SERVICE", "kueue_webhook_certificates", "kueue_webhook_configurations", "loopback"]

WEBHOOK_SECRET = "kueue-webhook-server-cert"
WEBHOOK_SERVICE = "kueue-webhook-service"
"""The names Kueue's default install gives its webhook's Secret and Service."""
_KUEUE_WEBHOOKS = "config/components/webhook"


def kueue_webhook_certificates(namespace: str) -> dict[str, bytes]:
    """The Secret data Kueue's rotator keeps (module docstring): ``ca.crt``, ``ca.key`` (RSA,
    PKCS#1, as the rotator reads it), ``tls.crt``, ``tls.key``."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)
    start, end = now - dt.timedelta(hours=1), now + dt.timedelta(days=3650)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kueue"), x509.NameAttribute(NameOID.COMMON_NAME, "kueue-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .add_extension(x509.SubjectAlternativeName([x509.DNSName("kueue-ca")]), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    service = f"{WEBHOOK_SERVICE}.{namespace}.svc"
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(service), x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem, rsa_pem = serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL
    return {"ca.crt": ca.public_bytes(pem), "ca.key": ca_key.private_bytes(pem, rsa_pem, serialization.NoEncryption()),
            "tls.crt": cert.public_bytes(pem), "tls.key": key.private_bytes(pem, rsa_pem, serialization.NoEncryption())}


def loopback(client_config: dict[str, Any], base_url: str, ca_pem: bytes) -> dict[str, Any]:
    """A webhook's ``clientConfig`` with its service reference turned into ``base_url`` + its path."""
    import base64

    return {"url": base_url + client_config["service"].get("path", ""), "caBundle": base64.b64encode(ca_pem).decode()}


def kueue_webhook_configurations(base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations as its kustomization builds them (``manifests.yaml``, its
    inline patches merged into the webhooks they name, its replacements copied to their targets),
    named ``kueue-...`` as its default overlay names them, each service reference turned into
    ``base_url`` + its path with ``ca_pem`` as the caBundle. A kustomization step not understood
    here fails, named."""
    root = go_module_dir("sigs.k8s.io/kueue", KUEUE_VERSION) / _KUEUE_WEBHOOKS
    configs = {d["metadata"]["name"]: d for d in yaml.safe_load_all((root / "manifests.yaml").read_text()) if d}
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())

    def hook(config: str, name: str) -> dict[str, Any]:
        found = [h for h in configs[config]["webhooks"] if h["name"] == name]
        if len(found) != 1:
            raise EnvtestError(f"Kueue's webhook kustomization names {config}/{name}, which manifests.yaml has {len(found)} of")
        hit: dict[str, Any] = found[0]
        return hit

    for patch in kustomization.get("patches") or []:
        body = yaml.safe_load(patch["patch"]) if "patch" in patch else None
        if not body or body["metadata"]["name"] not in configs or set(body) - {"apiVersion", "kind", "metadata", "webhooks"}:
            raise EnvtestError(f"Kueue's webhook kustomization patch {patch} is not understood here")
        for h in body["webhooks"]:
            hook(body["metadata"]["name"], h["name"]).update(copy.deepcopy({k: v for k, v in h.items() if k != "name"}))
    for rep in kustomization.get("replacements") or []:
        value = _webhook_field(hook, rep["source"]["name"], rep["source"]["fieldPath"], None)
        for target in rep["targets"]:
            for path in target["fieldPaths"]:
                _webhook_field(hook, target["select"]["name"], path, value)
    out = []
    for config in configs.values():
        config = copy.deepcopy(config)
        config["metadata"] = {"name": "kueue-" + config["metadata"]["name"]}
        for h in config["webhooks"]:
            h["clientConfig"] = loopback(h["clientConfig"], base_url, ca_pem)
        out.append(config)
    return out


def _webhook_field(hook: Any, config: str, path: str, value: Any) -> Any:
    """Reads (``value`` None) or sets a kustomize field path ``webhooks.[name=X].field`` of ``config``."""
    import re

    m = re.fullmatch(r"webhooks\.\[name=([^\]]+)\]\.(\w+)", path)
    if m is None:
        raise EnvtestError(f"Kueue's webhook kustomization field path {path!r} is not understood here")
    h = hook(config, m.group(1))
    if value is None:
        return copy.deepcopy(h[m.group(2)])
    h[m.group(2)] = copy.deepcopy(value)
    return value

"""The webhook's serving certificate: mounted, or made at start with a self-signed CA whose
certificate goes into the caBundle of the MutatingWebhookConfiguration.

Made with ``cryptography`` (the de-facto X.509 library for Python, wheels for every platform),
not by shelling out to ``openssl``: no binary to ship in the image, errors as exceptions.
Keys are ECDSA P-256 (fast to make at every start; Go's TLS in the apiserver accepts them).

Each replica makes its own CA when its directory is empty (no Secret: Atoll may not read
Secrets), so the caBundle holds several CAs: ``merge_ca_bundle`` adds this replica's, drops
expired ones and keeps the newest few, so every running replica stays trusted.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertError", "ServingCert", "ensure_serving_cert", "fingerprint", "merge_ca_bundle", "renew_before", "service_hosts"]

_RENEW_BEFORE = dt.timedelta(days=30)
"""A generated certificate is made anew once less than this, or a third of its lifetime (cert-manager's
default ``renewBefore``), whichever is shorter, is left."""
_CA_DAYS = 3650
MAX_BUNDLE_CAS = 4
"""CAs kept in a caBundle: two replicas and their predecessors during a rolling restart."""


class CertError(RuntimeError):
    """The serving certificate is missing or unreadable; the message says which file and what to do."""


@dataclass(frozen=True, slots=True)
class ServingCert:
    cert_file: Path
    key_file: Path
    ca_pem: bytes | None
    """The CA to publish in the caBundle (None: someone else manages it, e.g. cert-manager)."""
    generated: bool


def service_hosts(service: str, namespace: str) -> list[str]:
    """The names the apiserver may use for a Service: it dials ``<service>.<namespace>.svc``."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _write(path: Path, data: bytes, mode: int) -> None:
    """Atomic: a reader never sees half a key."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for h in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            out.append(x509.DNSName(h))
    return out


def _covers(cert: x509.Certificate, hosts: Sequence[str]) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have = {str(n.value) for n in san}
    return all(h in have for h in hosts)


def _generate(hosts: Sequence[str], days: int, now: dt.datetime) -> tuple[bytes, bytes, bytes]:
    """(CA cert PEM, serving cert PEM, serving key PEM)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"atoll-webhook-ca-{now:%Y%m%d%H%M%S}")])
    start = now - dt.timedelta(minutes=5)  # clock skew between this pod and the apiserver
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(now + dt.timedelta(days=_CA_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
                         critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.PEM), key_pem


def renew_before(cert: x509.Certificate) -> dt.timedelta:
    """How long before its expiry a generated certificate is made anew."""
    return min(_RENEW_BEFORE, (cert.not_valid_after_utc - cert.not_valid_before_utc) / 3)


def fingerprint(*files: Path) -> bytes:
    """The files' contents, hashed: changes when any is rewritten (a mounted Secret's update
    swaps a symlink, so the paths stay and the contents change); empty when one is unreadable."""
    digest = hashes.Hash(hashes.SHA256())
    try:
        for f in files:
            digest.update(f.read_bytes())
    except OSError:
        return b""
    return digest.finalize()


def ensure_serving_cert(cert_dir: str | Path, hosts: Sequence[str], *, generate: bool, days: int = 365,
                        now: dt.datetime | None = None) -> ServingCert:
    """``tls.crt``/``tls.key`` in ``cert_dir``; with ``generate``, made (with ``ca.crt``) when absent,
    near expiry (``renew_before``), or not covering ``hosts``."""
    if not hosts:
        raise CertError("webhook certificate: no host names to make it for (set --webhook-service and --webhook-namespace)")
    now = now or dt.datetime.now(dt.timezone.utc)
    d = Path(cert_dir)
    crt, key, ca = d / "tls.crt", d / "tls.key", d / "ca.crt"
    if crt.exists() and key.exists():
        try:
            current = x509.load_pem_x509_certificate(crt.read_bytes())
        except (OSError, ValueError) as exc:
            if not generate:
                raise CertError(f"{crt}: not a PEM certificate ({exc})") from None
            current = None
        fresh = current is not None and current.not_valid_after_utc - now > renew_before(current) and _covers(current, hosts)
        if not generate or fresh:
            return ServingCert(crt, key, ca.read_bytes() if ca.exists() else None, generated=False)
    elif not generate:
        raise CertError(f"{d}: no tls.crt and tls.key; mount the webhook's serving certificate there "
                        "or pass --webhook-generate-certs to make one at start")
    try:
        d.mkdir(parents=True, exist_ok=True)
        ca_pem, cert_pem, key_pem = _generate(list(hosts), days, now)
        _write(ca, ca_pem, 0o644)
        _write(key, key_pem, 0o600)
        _write(crt, cert_pem, 0o644)
    except OSError as exc:
        raise CertError(f"{d}: cannot write the generated certificate ({exc}); mount a writable directory (an emptyDir)") from None
    return ServingCert(crt, key, ca_pem, generated=True)


def merge_ca_bundle(existing: bytes, ours: bytes, *, now: dt.datetime | None = None, keep: int = MAX_BUNDLE_CAS) -> bytes:
    """``existing`` with expired and unreadable content dropped and ``ours`` appended if missing;
    over ``keep`` CAs, the oldest others go. The order is kept, so replicas merging each other's
    CAs reach one fixed bundle instead of rewriting it in turn."""
    now = now or dt.datetime.now(dt.timezone.utc)
    mine = x509.load_pem_x509_certificate(ours)
    try:
        others = x509.load_pem_x509_certificates(existing) if existing.strip() else []
    except ValueError:
        others = []
    chosen: list[x509.Certificate] = []
    for c in [*others, mine]:
        if c.not_valid_after_utc > now and c not in chosen:
            chosen.append(c)
    while len(chosen) > max(keep, 1):
        chosen.remove(min((c for c in chosen if c != mine), key=lambda c: c.not_valid_before_utc))
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chosen)

"""The webhook as ``atoll run`` runs it: certificate, HTTPS server, and the caBundle kept current.

Every replica serves (the webhook needs no leadership: its answers come from API state), so a
standby answers as well as the leader and a rolling restart never leaves pods unanswered.

The serving certificate is checked every ``cert_check_seconds`` (``check_certificate``): a
mounted pair that changed (cert-manager rotated the Secret) is served to new connections; a
generated one near expiry is made anew, and its CA goes into the caBundle before the new
certificate is served, so the apiserver trusts it from its first handshake.
"""

from __future__ import annotations

import base64
import datetime as dt
import ssl
import threading

import structlog

from admission.kube import Clock, ClusterPort, Resource, SystemClock, errors
from admission.webhook._cache import WebhookCache
from admission.webhook._certs import CertError, ServingCert, ensure_serving_cert, fingerprint, merge_ca_bundle, service_hosts
from admission.webhook._handler import PodPinner
from admission.webhook._server import WebhookServer
from admission.webhook._settings import WebhookSettings

__all__ = ["MUTATING_WEBHOOK_CONFIGURATIONS", "CaBundlePublisher", "Webhook"]

MUTATING_WEBHOOK_CONFIGURATIONS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                                           "MutatingWebhookConfiguration", False)
_log = structlog.get_logger("atoll.webhook")
_CONFLICT_RETRIES = 5


class CaBundlePublisher:
    """Puts this replica's CA into every webhook of one MutatingWebhookConfiguration (a read, then a
    patch carrying the resourceVersion read; redone on a conflict), and again whenever it is missing.
    Needs only ``get`` and ``patch`` on that one configuration."""

    def __init__(self, port: ClusterPort, name: str, ca_pem: bytes) -> None:
        self.port = port
        self.name = name
        self.ca_pem = ca_pem

    def publish_once(self) -> bool:
        """True when the configuration trusts our CA after this call; False when it does not exist."""
        for _ in range(_CONFLICT_RETRIES):
            try:
                config = self.port.get(MUTATING_WEBHOOK_CONFIGURATIONS, self.name)
            except errors.NotFound:
                return False
            changed = False
            for hook in config.get("webhooks") or []:
                client = hook.setdefault("clientConfig", {})
                try:
                    current = base64.b64decode(client.get("caBundle") or "")
                except ValueError:
                    current = b""
                merged = merge_ca_bundle(current, self.ca_pem)
                if merged != current:
                    client["caBundle"] = base64.b64encode(merged).decode()
                    changed = True
            if not changed:
                return True
            # a merge patch replaces the whole list; the resourceVersion makes it conditional (409 if changed)
            patch = {"metadata": {"resourceVersion": (config.get("metadata") or {}).get("resourceVersion")}, "webhooks": config["webhooks"]}
            try:
                self.port.patch(MUTATING_WEBHOOK_CONFIGURATIONS, self.name, patch)
                _log.info("caBundle updated", config=self.name)
                return True
            except errors.Conflict:
                continue
        raise errors.Conflict(f"patch mutatingwebhookconfigurations {self.name}: still conflicting after {_CONFLICT_RETRIES} tries")

    def run(self, stop: threading.Event, every: float) -> None:
        missing_logged = False
        while not stop.is_set():
            try:
                if not self.publish_once() and not missing_logged:
                    _log.warning("MutatingWebhookConfiguration not found yet; its caBundle will be set once it exists", config=self.name)
                    missing_logged = True
            except errors.ApiError as exc:
                _log.warning("cannot update the caBundle", config=self.name, error=str(exc))
            stop.wait(every)


class Webhook:
    """``start()`` and ``stop()`` the whole webhook for ``atoll run``."""

    def __init__(self, port: ClusterPort, settings: WebhookSettings, clock: Clock | None = None, watch_port: ClusterPort | None = None) -> None:
        """``port``: what reviews call (retries sized to the webhook's timeout); ``watch_port``: what
        the cache lists and watches with (default ``port``), whose retries need not fit a review."""
        self.settings = settings
        self.cluster = port
        self.watch_port = watch_port or port
        self.clock = clock or SystemClock()
        self.cert: ServingCert | None = None
        self.server: WebhookServer | None = None
        self.cache: WebhookCache | None = None
        self._stop = threading.Event()
        self._publisher: threading.Thread | None = None
        self._ca: CaBundlePublisher | None = None
        self._certs: threading.Thread | None = None
        self._served = b""
        """Fingerprint of the certificate files being served."""
        self._unpublished = False
        """A renewed certificate whose CA is not in the caBundle yet: not served until it is."""

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.clock.now(), dt.timezone.utc)

    def start(self) -> Webhook:
        """Raises ``CertError`` (no certificate, nothing to make one in) and ``OSError`` (port taken)."""
        s = self.settings
        self.cert = ensure_serving_cert(s.cert_dir, service_hosts(s.service, s.namespace), generate=s.generate_certs, days=s.cert_days,
                                        now=self._now())
        self._served = fingerprint(self.cert.cert_file, self.cert.key_file)
        self.cache = WebhookCache(self.watch_port, s.resources()).start()  # warm before the first review
        self.server = WebhookServer(PodPinner(self.cluster, s, self.clock, self.cache), self.cert.cert_file, self.cert.key_file,
                                    bind=s.bind_address, port=s.port, max_body=s.max_body_bytes).start()
        if s.generate_certs and self.cert.ca_pem is not None:
            self._ca = CaBundlePublisher(self.cluster, s.config, self.cert.ca_pem)
            self._publisher = threading.Thread(target=self._ca.run, args=(self._stop, s.ca_bundle_recheck_seconds),
                                               name="atoll-webhook-cabundle", daemon=True)
            self._publisher.start()
        self._certs = threading.Thread(target=self._check_certificates, name="atoll-webhook-certs", daemon=True)
        self._certs.start()
        return self

    def _check_certificates(self) -> None:
        while not self._stop.wait(self.settings.cert_check_seconds):
            self.check_certificate()

    def check_certificate(self) -> str:
        """One check: "renewed" (a generated certificate made anew and served), "reloaded" (changed
        files served), "waiting" (renewed, its CA not in the caBundle yet) or "" (nothing to do).
        A failure is logged and the current certificate kept."""
        s = self.settings
        if self.server is None or self.cert is None:
            return ""
        renewed = False
        try:
            if s.generate_certs:
                cert = ensure_serving_cert(s.cert_dir, service_hosts(s.service, s.namespace), generate=True, days=s.cert_days,
                                           now=self._now())
                if cert.generated:
                    self.cert, self._unpublished, renewed = cert, True, True
                    _log.info("serving certificate near expiry; made anew", cert=str(cert.cert_file))
                if self._unpublished:
                    if self._ca is None or self.cert.ca_pem is None:
                        return "waiting"
                    self._ca.ca_pem = self.cert.ca_pem  # the periodic recheck keeps the new CA in place
                    if not self._ca.publish_once():
                        _log.warning("renewed certificate not served yet: its MutatingWebhookConfiguration is missing", config=s.config)
                        return "waiting"
                    self._unpublished = False
            now = fingerprint(self.cert.cert_file, self.cert.key_file)
            if not now or now == self._served:
                return ""
            self.server.reload_certificate()
            self._served = now
        except (CertError, ssl.SSLError, OSError, errors.ApiError) as exc:
            _log.warning("serving certificate not renewed or reloaded; the current one is kept", error=str(exc))
            return "waiting" if self._unpublished else ""
        _log.info("serving certificate reloaded", cert=str(self.cert.cert_file))
        return "renewed" if renewed or s.generate_certs else "reloaded"

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.stop()
        if self.cache is not None:
            self.cache.stop()
        if self._publisher is not None:
            self._publisher.join(10)
        if self._certs is not None:
            self._certs.join(10)

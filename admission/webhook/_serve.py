"""The webhook as ``atoll run`` runs it: certificate, HTTPS server, and the caBundle kept current.

Every replica serves (the webhook needs no leadership: its answers come from API state), so a
standby answers as well as the leader and a rolling restart never leaves pods unanswered.
"""

from __future__ import annotations

import base64
import threading

import structlog

from admission.kube import Clock, ClusterPort, Resource, SystemClock, errors
from admission.webhook._certs import ServingCert, ensure_serving_cert, merge_ca_bundle, service_hosts
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

    def __init__(self, port: ClusterPort, settings: WebhookSettings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.cluster = port
        self.clock = clock or SystemClock()
        self.cert: ServingCert | None = None
        self.server: WebhookServer | None = None
        self._stop = threading.Event()
        self._publisher: threading.Thread | None = None

    def start(self) -> Webhook:
        """Raises ``CertError`` (no certificate, nothing to make one in) and ``OSError`` (port taken)."""
        s = self.settings
        self.cert = ensure_serving_cert(s.cert_dir, service_hosts(s.service, s.namespace), generate=s.generate_certs, days=s.cert_days)
        self.server = WebhookServer(PodPinner(self.cluster, s, self.clock), self.cert.cert_file, self.cert.key_file,
                                    bind=s.bind_address, port=s.port, max_body=s.max_body_bytes).start()
        if s.generate_certs and self.cert.ca_pem is not None:
            publisher = CaBundlePublisher(self.cluster, s.config, self.cert.ca_pem)
            self._publisher = threading.Thread(target=publisher.run, args=(self._stop, s.ca_bundle_recheck_seconds),
                                               name="atoll-webhook-cabundle", daemon=True)
            self._publisher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.stop()
        if self._publisher is not None:
            self._publisher.join(10)

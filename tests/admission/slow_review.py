"""A validating admission webhook that holds writes inside the apiserver, as a slow webhook in
front of a real cluster does: the write is neither refused nor applied until it answers.

``slow_review(kube_client, tmp, name, rules, probe, hold)`` registers it for ``rules`` (writes of
objects labelled ``SLOW_REVIEW`` = ``name``), waits until the apiserver calls it (``probe``
makes one such write, answered at once), then yields the monotonic times at which later
reviews arrived; review ``i`` (from 0, after the probe) is answered after ``hold(i)`` seconds.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client

from admission.webhook import ensure_serving_cert

__all__ = ["SLOW_REVIEW", "slow_review"]

SLOW_REVIEW = "atoll.dev/slow-review"
"""Label of the objects the slow webhook reviews (its value: the webhook's ``name``)."""


@contextlib.contextmanager
def slow_review(kube_client: Any, tmp: Path, name: str, rules: list[dict[str, Any]], probe: Callable[[], None],
                hold: Callable[[int], float]) -> Iterator[list[float]]:
    cert = ensure_serving_cert(tmp / "certs", ["127.0.0.1"], generate=True)
    assert cert.ca_pem is not None
    arrived: list[float] = []
    armed = threading.Event()
    lock = threading.Lock()

    class Review(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            with lock:
                i = len(arrived) if armed.is_set() else -1
                arrived.append(time.monotonic())
            review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if i >= 0:
                time.sleep(hold(i))
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "response": {"uid": review["request"]["uid"], "allowed": True}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Review)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert.cert_file, cert.key_file)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    config = f"slow-review-{name}"
    admission = client.AdmissionregistrationV1Api(kube_client)
    admission.create_validating_webhook_configuration({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": config},
        "webhooks": [{"name": "slow.atoll.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                      "clientConfig": {"url": f"https://127.0.0.1:{server.server_address[1]}/",
                                       "caBundle": base64.b64encode(cert.ca_pem).decode()},
                      "rules": rules, "objectSelector": {"matchLabels": {SLOW_REVIEW: name}}, "failurePolicy": "Fail",
                      "timeoutSeconds": 10}]})
    try:
        deadline = time.monotonic() + 30
        while not arrived:  # the apiserver calls a new webhook once its informer has it
            assert time.monotonic() < deadline, "the apiserver never called the slow webhook"
            probe()
            time.sleep(0.05)
        with lock:
            arrived.clear()
            armed.set()
        yield arrived
    finally:
        admission.delete_validating_webhook_configuration(config)
        server.shutdown()
        server.server_close()

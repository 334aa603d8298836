"""HTTPS for the webhook: ``POST /mutate-pods`` (AdmissionReview v1) and ``GET /healthz``.

The standard library's threaded HTTP server with TLS; the handshake runs in the request's
thread (never in the accept loop, so one slow client cannot stall the others), and every
socket has a timeout. HTTP/1.1 keep-alive, as the apiserver's webhook client uses it.

The serving certificate can be swapped while serving (``reload_certificate``): each new
connection's handshake uses the context current when it arrives; open connections keep theirs.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import structlog

from admission.webhook._handler import PodPinner, ReviewError

__all__ = ["MUTATE_PATH", "WebhookServer"]

MUTATE_PATH = "/mutate-pods"
_SOCKET_TIMEOUT = 30.0
"""Seconds a connection may sit idle or mid-handshake (the apiserver gives up on a call after at most 30 s)."""
_log = structlog.get_logger("atoll.webhook")


class _TlsServer(ThreadingHTTPServer):
    daemon_threads = True
    ssl_context: ssl.SSLContext
    pinner: PodPinner
    max_body: int

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(_SOCKET_TIMEOUT)
        # headers and body leave in separate writes; without this, Nagle's algorithm holds the body
        # until the apiserver's delayed ACK (about 40 ms a request)
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            _log.debug("TLS handshake failed", client=str(client_address[0]), error=str(exc))
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            try:
                tls.close()
            except OSError:
                pass


class _TlsServer6(_TlsServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _TlsServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        _log.debug("http", line=format % args)

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the base class's naming
        if self.path == "/healthz":
            self._send(200, b"ok", "text/plain")
        else:
            self._send(404, f"no such path {self.path}; the webhook serves POST {MUTATE_PATH}".encode(), "text/plain")

    def do_POST(self) -> None:  # noqa: N802 - the base class's naming
        if self.path.split("?", 1)[0] != MUTATE_PATH:
            self._send(404, f"no such path {self.path}; the webhook serves POST {MUTATE_PATH}".encode(), "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._send(411, b"Content-Length: required", "text/plain")
            return
        if not 0 < length <= self.server.max_body:
            self.close_connection = True
            self._send(413, f"Content-Length: {length} is not in 1..{self.server.max_body}".encode(), "text/plain")
            return
        body = self.rfile.read(length)
        try:
            answer = self.server.pinner.review(body)
        except ReviewError as exc:
            self._send(400, str(exc).encode(), "text/plain")
            return
        except Exception as exc:  # noqa: BLE001 - a bug answers 500 and is logged; the server keeps serving
            _log.exception("review failed")
            self._send(500, f"internal error: {exc}".encode(), "text/plain")
            return
        self._send(200, json.dumps(answer).encode(), "application/json")


def _context(cert_file: str | Path, key_file: str | Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class WebhookServer:
    """``start()`` serves on ``bind:port`` (port 0: any free one, see ``.port``) until ``stop()``."""

    def __init__(self, pinner: PodPinner, cert_file: str | Path, key_file: str | Path, *, bind: str = "0.0.0.0", port: int = 9443,
                 max_body: int = 8 * 1024 * 1024) -> None:
        self.cert_file, self.key_file = Path(cert_file), Path(key_file)
        ctx = _context(cert_file, key_file)
        server_class = _TlsServer6 if ":" in bind else _TlsServer
        self._server = server_class((bind, port), _Handler, bind_and_activate=False)
        self._server.ssl_context = ctx
        self._server.pinner = pinner
        self._server.max_body = max_body
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def reload_certificate(self) -> None:
        """Serve the certificate and key now in the files to every new connection. ``ssl.SSLError``
        or ``OSError`` (a half-written or mismatched pair) leaves the current one in place."""
        self._server.ssl_context = _context(self.cert_file, self.key_file)

    def start(self) -> WebhookServer:
        self._server.server_bind()
        self._server.server_activate()
        self._thread = threading.Thread(target=self._server.serve_forever, name="atoll-webhook", daemon=True)
        self._thread.start()
        _log.info("webhook serving", port=self.port, path=MUTATE_PATH)
        return self

    def stop(self) -> None:
        """Stop serving, and the pinner's own cache with it."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(10)
            self._thread = None
        self._server.server_close()
        self._server.pinner.close()

"""A seeded fault-injecting proxy between the controller and the real kube-apiserver.

The controller's client speaks plain HTTP to the proxy on 127.0.0.1; the proxy speaks HTTPS to
the apiserver, verifying it against the apiserver's own CA, with the client's bearer token
passed through. Every request is forwarded unchanged unless the seeded dice say otherwise, at
``rate`` per request:

- ``500`` / ``503``: an error answer without forwarding (the apiserver never saw the request);
- ``lost-answer`` (writes): forwarded, then answered ``503``, so the write happened but the
  client believes it failed (what a dropped connection after commit looks like);
- ``409`` (writes): a Conflict without forwarding, as if someone wrote first;
- ``slow``: held for a while, as the apiserver's priority-and-fairness queue holds a request,
  then forwarded; like that queue, it drops a request whose client has gone meanwhile (timed
  out and closed its connection): the server never sees it;
- ``late-read`` (writes; drawn only when ``faults`` names it): forwarded at once, and the
  server's answer read only a while later, as a loaded proxy process gets to it: the write was
  applied when it arrived, its answer is stamped late (the shape of a write answered after a
  takeover though applied before it);
- ``deadline`` (writes; opt-in): forwarded with the apiserver's ``timeout`` parameter cut to
  1 ms, so the server itself ends the write at its deadline (a 504, or applied if it got there
  first): a write the server ended, whose outcome only the server's record tells;
- ``hang-up`` (writes; opt-in): forwarded, then the proxy drops both connections before the
  answer, as a proxy or load balancer that dies mid-request does; the client sees the
  connection close, and whether the server applied the write only its record tells;
- on watches: ``watch-drop`` (the stream ends after a few events), ``watch-truncate`` (half an
  event, then the connection breaks) and ``watch-gone`` (an ``ERROR`` event with code 410, the
  way the apiserver ends a watch whose resourceVersion is too old).

Bounded: the proxy stops itself after ``max_seconds`` and closes every stream it holds.

``timeline`` records every write the apiserver received, as the proxy forwards it: when it was
sent on, when the server's answer came back, who sent it (the client's User-Agent), its body, the
resourceVersion of the object the server answered with, and for a Lease the holder and term the
server answered. The chaos audit compares the two histories.
"""

from __future__ import annotations

import http.client
import json
import random
import select
import socket
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

__all__ = ["FAULTS", "FaultProxy", "Received"]

REQUEST_FAULTS = ("500", "503", "slow")
WRITE_FAULTS = ("409", "lost-answer")
WATCH_FAULTS = ("watch-drop", "watch-truncate", "watch-gone", "500")
OPT_IN_WRITE_FAULTS = ("late-read", "deadline", "hang-up")
"""Drawn only when a proxy's ``faults`` name them (the default mix stays as it was)."""
FAULTS = tuple(sorted(set(REQUEST_FAULTS + WRITE_FAULTS + WATCH_FAULTS + OPT_IN_WRITE_FAULTS)))
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "content-length"}


@dataclass(frozen=True, slots=True)
class Received:
    """One write the apiserver received: forwarded at ``sent``, answered at ``answered``
    (``time.monotonic()`` of this process; None if no answer came). ``status`` 0: the server
    closed the connection at ``answered`` without an answer (as it may once the request's
    deadline has passed)."""

    sent: float
    answered: float | None
    method: str
    path: str
    agent: str
    status: int
    lease_holder: str | None = None
    """For a Lease write the server accepted: the holder it now names ("" for none)."""
    lease_term: int | None = None
    resource_version: int | None = None
    """For a write the server accepted: the ``metadata.resourceVersion`` of the object it
    answered with (None when the answer carried none, or there was no answer)."""
    body: bytes | None = None
    """The write's request body, as sent: what the audit looks for in the server's history
    (``history``) when the answer did not say whether the write was applied."""

    @property
    def lease(self) -> bool:
        return "/leases" in self.path


def _status(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code}).encode()


class FaultProxy:
    """``with FaultProxy(host, port, ca_file, seed=1, rate=0.2) as proxy: proxy.url``; ``slow_seconds``
    is how long ``slow`` holds a request and ``late-read`` its answer."""

    def __init__(self, upstream_host: str, upstream_port: int, ca_file: Path | str, *, seed: int = 0, rate: float = 0.2,
                 max_seconds: float = 600.0, slow_seconds: tuple[float, float] = (0.05, 0.4),
                 faults: tuple[str, ...] | None = None) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate: {rate} is not within [0, 1]")
        self.upstream = (upstream_host, upstream_port)
        self.tls = ssl.create_default_context(cafile=str(ca_file))
        self.rng = random.Random(seed)
        self.rate = rate
        self.enabled = True
        """False forwards everything untouched (the end of a run, when the system is let settle)."""
        self.max_seconds = max_seconds
        self.slow_seconds = slow_seconds
        self.faults = faults
        """Only these faults are drawn (None: all that fit the request)."""
        self.timeline: list[Received] = []
        self.dropped = 0
        """Slow requests dropped because their client had gone (never forwarded)."""
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPSConnection] = set()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        assert self._server is not None, "proxy not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        proxy = self

        handler = type("Handler", (_Handler,), {"owner": proxy})

        self._server = _QuietServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        serve = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="chaos-proxy", daemon=True)
        serve.start()
        timer = threading.Thread(target=self._stop_after, name="chaos-proxy-timer", daemon=True)
        timer.start()
        self._threads = [serve, timer]
        return self

    def _stop_after(self) -> None:
        if not self._stopped.wait(self.max_seconds):
            self.stop()

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            _close(conn)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the dice

    def draw(self, *, write: bool, watch: bool) -> str | None:
        """The fault for one request (None: forward it as it is). Seeded, so one seed replays the
        same sequence of choices (thread timing still orders the requests)."""
        with self._lock:
            self.requests += 1
            if not self.enabled or self.rng.random() >= self.rate:
                return None
            choices = WATCH_FAULTS if watch else REQUEST_FAULTS + (WRITE_FAULTS if write else ())
            if self.faults is not None:
                choices = tuple(f for f in choices + (OPT_IN_WRITE_FAULTS if write and not watch else ()) if f in self.faults)
                if not choices:
                    return None
            fault = self.rng.choice(choices)
            self.injected[fault] += 1
            return fault

    def uniform(self, lo: float, hi: float) -> float:
        with self._lock:
            return self.rng.uniform(lo, hi)

    def randint(self, lo: int, hi: int) -> int:
        with self._lock:
            return self.rng.randint(lo, hi)

    def clear_timeline(self) -> None:
        with self._lock:
            self.timeline = []

    def received(self, write: Received) -> None:
        with self._lock:
            self.timeline.append(write)

    def connect(self, timeout: float | None) -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection(*self.upstream, context=self.tls, timeout=timeout)
        with self._lock:
            if self._stopped.is_set():
                raise ConnectionAbortedError("proxy stopped")
            self._open.add(conn)
        return conn

    def release(self, conn: http.client.HTTPSConnection) -> None:
        with self._lock:
            self._open.discard(conn)
        _close(conn)


def _close(conn: http.client.HTTPSConnection) -> None:
    try:
        if conn.sock is not None:
            conn.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-answer is what chaos is made of, not an error to print."""


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        return

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def do_PUT(self) -> None:
        self._forward()

    def do_PATCH(self) -> None:
        self._forward()

    def do_DELETE(self) -> None:
        self._forward()

    # ------------------------------------------------------------------ one request

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        query = parse_qs(urlsplit(self.path).query)
        watch = query.get("watch", [""])[0] in ("true", "1")
        write = self.command in ("POST", "PUT", "PATCH", "DELETE")
        fault = self.owner.draw(write=write, watch=watch)
        if fault in ("500", "503"):
            code = int(fault)
            self._answer(code, _status(code, "InternalError" if code == 500 else "ServiceUnavailable", f"injected {fault}"))
            return
        if fault == "409":
            self._answer(409, _status(409, "Conflict", "injected conflict: the object has been modified; please apply your changes "
                                                       "to the latest version and try again"))
            return
        if fault == "slow":
            time.sleep(self.owner.uniform(*self.owner.slow_seconds))
            if self._client_gone():
                with self.owner._lock:
                    self.owner.dropped += 1
                self.close_connection = True
                return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() != "host"}
        try:
            conn = self.owner.connect(None if watch else 30.0)
        except OSError:
            self._answer(503, _status(503, "ServiceUnavailable", "proxy stopping"))
            return
        path = _cut_deadline(self.path) if fault == "deadline" else self.path
        sent = time.monotonic()
        try:
            conn.request(self.command, path, body=body, headers=headers)
            if fault == "hang-up":
                self.owner.received(Received(sent, time.monotonic(), self.command, self.path, self.headers.get("User-Agent") or "", 0, body=body))
                self.close_connection = True
                return
            if fault == "late-read":
                time.sleep(self.owner.uniform(*self.owner.slow_seconds))
            try:
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                if write:  # the server ended the request without an answer, as with a 5xx; or no answer came at all
                    ended = None if isinstance(exc, TimeoutError) else time.monotonic()
                    self.owner.received(Received(sent, ended, self.command, self.path, self.headers.get("User-Agent") or "", 0, body=body))
                raise
            if watch and resp.status == 200:
                self._stream(resp, fault)
                return
            data = resp.read()
            if write:
                self.owner.received(_received(sent, self.command, self.path, self.headers.get("User-Agent") or "", resp.status, data, body))
            if fault == "lost-answer":
                self._answer(503, _status(503, "ServiceUnavailable", "injected: the answer was lost after the write"))
                return
            self._answer(resp.status, data, resp.getheader("Content-Type") or "application/json")
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            # the stream was cut (by a fault, the client, or the proxy stopping): drop the connection
            self.close_connection = True
        finally:
            self.owner.release(conn)

    def _client_gone(self) -> bool:
        """Has the client closed its connection (it sends nothing else while it waits)?"""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _answer(self, code: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _stream(self, resp: http.client.HTTPResponse, fault: str | None) -> None:
        """Relay watch events line by line; a watch fault ends the stream its own way."""
        self.send_response(200)
        self.send_header("Content-Type", resp.getheader("Content-Type") or "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        budget = self.owner.randint(0, 3) if fault else -1
        if fault == "watch-gone" and budget == 0:
            self._chunk(json.dumps({"type": "ERROR", "object": json.loads(_status(410, "Expired", "injected: too old resource version"))}).encode() + b"\n")
            self._chunk(b"")
            return
        sent = 0
        while True:
            line = resp.readline()
            if not line:
                self._chunk(b"")
                return
            if fault and sent >= budget:
                if fault == "watch-truncate":
                    self._chunk(line[: max(len(line) // 2, 1)])
                    self.close_connection = True
                elif fault == "watch-gone":
                    self._chunk(json.dumps({"type": "ERROR", "object": json.loads(_status(410, "Expired", "injected: too old resource version"))}).encode() + b"\n")
                    self._chunk(b"")
                else:  # watch-drop: the stream just ends, as a server timeout would
                    self._chunk(b"")
                return
            self._chunk(line)
            sent += 1


def _cut_deadline(path: str) -> str:
    """``path`` with the apiserver's ``timeout`` parameter set to 1 ms."""
    parts = urlsplit(path)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "timeout"] + [("timeout", "1ms")]
    return parts._replace(query=urlencode(query)).geturl()


def _received(sent: float, method: str, path: str, agent: str, status: int, data: bytes, body: bytes | None) -> Received:
    answered = time.monotonic()
    if not 200 <= status < 300:
        return Received(sent, answered, method, path, agent, status, body=body)
    try:
        obj = json.loads(data)
        spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
    except (ValueError, AttributeError):
        spec, meta = {}, {}
    version = str(meta.get("resourceVersion") or "")
    rv = int(version) if version.isdigit() else None
    if "/leases" not in path:
        return Received(sent, answered, method, path, agent, status, resource_version=rv, body=body)
    return Received(sent, answered, method, path, agent, status, str(spec.get("holderIdentity") or ""),
                    int(spec.get("leaseTransitions") or 0), rv, body)

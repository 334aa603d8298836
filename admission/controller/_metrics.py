"""Prometheus metrics and the health endpoints.

Each ``Metrics`` owns its registry (no process-global state), so tests and several controllers
in one process do not collide. Gauges about the fabric are set by the worker after it changes
them, never computed on the scrape thread.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from admission.controller._ledger import Shortfall

__all__ = ["HttpEndpoints", "Metrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decisions = Counter("atoll_decisions", "Placement decisions by outcome (admit, wait, reject).", ["outcome"], registry=r)
        self.decision_latency = Histogram("atoll_decision_latency_seconds", "From picking a Workload up to its check entry written.",
                                          buckets=_LATENCY_BUCKETS, registry=r)
        self.waiting = Gauge("atoll_waiting_workloads", "Workloads whose last decision was to wait, by reason.", ["reason"], registry=r)
        self.free_gpus = Gauge("atoll_free_gpus", "Free GPUs on healthy nodes after reservations, per flavor.", ["flavor"], registry=r)
        self.fragmentation = Gauge("atoll_fragmentation_index",
                                   "Share of free GPUs stranded in islands too small for the reference gang, per flavor.",
                                   ["flavor"], registry=r)
        self.config_rejections = Counter("atoll_config_rejections", "Profiles documents (or node annotations) refused as invalid.",
                                         ["source"], registry=r)
        self._bands: set[tuple[str, str]] = set()
        self.api_write_failures = Counter("atoll_api_write_failures", "Writes that failed after retries, by error.", ["error"], registry=r)
        self.leader = Gauge("atoll_leader", "1 while this replica holds the leader Lease.", registry=r)
        self.config_valid = Gauge("atoll_config_valid", "1 while a valid profiles document is in force.", registry=r)
        self.owed_without_room = Gauge("atoll_owed_pods_without_room",
                                       "Owed pods of admitted Workloads with no room left in their domain at the last decision, per "
                                       "flavor (the scheduler bound other pods there); those domains count as full.",
                                       ["flavor"], registry=r)
        self.waiting_by_band = Gauge("atoll_waiting_workloads_by_band",
                                     "Workloads whose last decision was to wait, by reason and GPU size band (1-7, 8-15, 16-63, 64+).",
                                     ["reason", "band"], registry=r)
        self.draining_nodes = Gauge("atoll_draining_nodes", "Nodes labelled draining (no new placement), per flavor.", ["flavor"], registry=r)
        self.draining_domains = Gauge("atoll_draining_domains", "Domains every node of which drains, per flavor and level.",
                                      ["flavor", "level"], registry=r)
        self.held_domains = Gauge("atoll_held_domains", "Domains held for waiting gangs (reservations), per flavor.", ["flavor"], registry=r)
        self.reservations = Gauge("atoll_reservations", "Reservations held for waiting gangs, per flavor, by state: active (blocking "
                                  "other placements) or suspended (the holder holds no quota: kept, blocking nobody).",
                                  ["flavor", "state"], registry=r)
        self.idle_held_gpus = Gauge("atoll_idle_held_gpus", "Free GPUs left idle because their domain is held for a waiting gang, per flavor.",
                                    ["flavor"], registry=r)
        self.shortfall_decisions = Counter("atoll_shortfall_decisions",
                                           "Decisions that found owed pods with no room in their domain.", registry=r)
        self.quota_yields = Counter("atoll_quota_yields", "Parked Workloads that gave their quota back to a Workload waiting for "
                                    "quota (--park-waiting), per flavor.", ["flavor"], registry=r)
        self.quota_yields_timed_out = Counter("atoll_quota_yields_timed_out", "Workloads that gave their quota back reactivated by "
                                              "the time bound (atoll run --quota-yield-max-seconds) while a Workload queued "
                                              "before the give still waited for quota, per flavor.", ["flavor"], registry=r)
        self.before_quota = Counter("atoll_before_quota", "Decisions made before Kueue reserved quota (--decide-before-quota), by "
                                    "what happened: decided, released-expired (no quota within the hold), released-room (a "
                                    "Workload holding quota needed the room), retry-mismatch (quota reserved on another flavor or "
                                    "pod count), retry-released (quota reserved from Kueue's copy older than a release).",
                                    ["kind"], registry=r)
        self.quota_reparks = Counter("atoll_quota_reparks", "Of those, parked again without a decision when they held quota "
                                     "again (nothing they wait for changed), per flavor.", ["flavor"], registry=r)

    def set_waiting(self, counts: Mapping[str, int]) -> None:
        for reason in ("no-domain", "relax-pending", "owed-pods", "behind-gang", "config", "node-lost"):
            self.waiting.labels(reason).set(counts.get(reason, 0))
        for reason, n in counts.items():
            self.waiting.labels(reason).set(n)

    def set_waiting_bands(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Waiting Workloads by (reason, size band); a pair no longer counted drops to 0."""
        for labels in list(self._bands):
            if labels not in counts:
                self.waiting_by_band.labels(*labels).set(0)
        for labels, n in counts.items():
            self.waiting_by_band.labels(*labels).set(n)
        self._bands = set(counts) | self._bands

    def set_draining(self, flavor: str, nodes: int, domains: Mapping[str, int]) -> None:
        self.draining_nodes.labels(flavor).set(nodes)
        for level, n in domains.items():
            self.draining_domains.labels(flavor, level).set(n)

    def set_shortfalls(self, flavors: Sequence[str], shortfalls: Iterable[Shortfall]) -> None:
        """After a decision on ``flavors``: the owed pods without room in the ledger's last count of
        each (``shortfalls``: every flavor's, as ``Ledger.shortfalls_by_flavor`` keeps them)."""
        missing = {f: 0 for f in flavors}
        for s in shortfalls:
            if s.flavor in missing:
                missing[s.flavor] += s.missing
        for flavor, pods in missing.items():
            self.owed_without_room.labels(flavor).set(pods)
        if any(missing.values()):
            self.shortfall_decisions.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


Route = Callable[[Mapping[str, str]], tuple[int, str, bytes]]
"""A GET handler: the request's headers (names in lower case) → (status, content type, body)."""
Authorize = Callable[[str | None], tuple[int, str]]
"""The ``Authorization`` header (None when absent) → (200, who) or (401/403/500, why)."""


class _Handler(BaseHTTPRequestHandler):
    routes: Mapping[str, Route] = {}
    timeout = 10.0
    """Seconds a connection may stay silent (a scraper or probe that connects and sends nothing)."""

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        route = self.routes.get(self.path.split("?", 1)[0])
        code, ctype, body = route({k.lower(): v for k, v in self.headers.items()}) if route else (404, "text/plain", b"not found\n")
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        return


class HttpEndpoints:
    """``/metrics`` on one port; ``/healthz``, ``/readyz`` and ``/leader`` on another.

    A port of None is not served; 0 takes any free port (``ports`` says which). ``/readyz`` is
    ready on every replica whose caches serve (the leader, and a warm standby once synced);
    ``/leader`` answers 200 only on the replica that leads and decides. ``authorize`` guards
    ``/metrics`` (a bearer token checked by TokenReview and SubjectAccessReview), and ``tls``
    serves it over HTTPS; the health endpoints stay plain for the kubelet's probes."""

    def __init__(self, metrics: Metrics, *, alive: Callable[[], tuple[bool, str]], ready: Callable[[], tuple[bool, str]],
                 leader: Callable[[], tuple[bool, str]] | None = None, bind: str = "0.0.0.0", metrics_port: int | None = 8080,
                 health_port: int | None = 8081, authorize: Authorize | None = None, tls: ssl.SSLContext | None = None) -> None:
        def probe(check: Callable[[], tuple[bool, str]]) -> Route:
            def answer(_: Mapping[str, str]) -> tuple[int, str, bytes]:
                ok, why = check()
                return (200 if ok else 503), "text/plain", (why + "\n").encode()
            return answer

        def exposition(headers: Mapping[str, str]) -> tuple[int, str, bytes]:
            if authorize is not None:
                code, why = authorize(headers.get("authorization"))
                if code != 200:
                    return code, "text/plain", (why + "\n").encode()
            return 200, CONTENT_TYPE_LATEST, metrics.exposition()

        health: dict[str, Route] = {"/healthz": probe(alive), "/readyz": probe(ready)}
        if leader is not None:
            health["/leader"] = probe(leader)
        serving: dict[str, Route] = {"/metrics": exposition}
        plans: list[tuple[int, Mapping[str, Route], ssl.SSLContext | None]] = []
        if metrics_port is not None and metrics_port == health_port and metrics_port != 0:
            if tls is not None:
                raise ValueError(f"metrics port {metrics_port}: HTTPS metrics need a port of their own, not the health port's")
            plans.append((metrics_port, {**health, **serving}, None))
        else:
            if metrics_port is not None:
                plans.append((metrics_port, serving, tls))
            if health_port is not None:
                plans.append((health_port, health, None))
        self.servers: list[ThreadingHTTPServer] = []
        for port, routes, context in plans:
            handler = type("Handler", (_Handler,), {"routes": routes})
            server = ThreadingHTTPServer((bind, port), handler)
            if context is not None:
                # the handshake happens in the request's own thread, on its first read, not in the accept loop
                server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
            self.servers.append(server)
        self.roles = [{role for role, path in (("metrics", "/metrics"), ("health", "/healthz")) if path in routes} for _, routes, _ in plans]
        self._threads: list[threading.Thread] = []

    @property
    def ports(self) -> list[int]:
        return [int(s.server_address[1]) for s in self.servers]

    def port_of(self, role: str) -> int | None:
        """The port serving ``metrics`` or ``health`` (after 0 took a free one); None when not served."""
        for server, served in zip(self.servers, self.roles):
            if role in served:
                return int(server.server_address[1])
        return None

    def start(self) -> None:
        for server in self.servers:
            t = threading.Thread(target=server.serve_forever, name=f"http-{server.server_address[1]}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

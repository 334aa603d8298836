"""Prometheus metrics and the health endpoints, served over real HTTP on loopback."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import httpx

from admission.controller import HttpEndpoints, Metrics
from admission.controller._ledger import Shortfall


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_have_their_names_and_labels() -> None:
    m = Metrics()
    m.decisions.labels("admit").inc()
    m.decisions.labels("wait").inc(2)
    m.decision_latency.observe(0.004)
    m.set_waiting({"no-domain": 3})
    m.free_gpus.labels("gb200").set(288)
    m.fragmentation.labels("gb200").set(0.25)
    m.config_rejections.labels("configmap").inc()
    text = m.exposition().decode()
    for line in ('atoll_decisions_total{outcome="admit"} 1.0', 'atoll_decisions_total{outcome="wait"} 2.0',
                 "atoll_decision_latency_seconds_count 1.0", 'atoll_waiting_workloads{reason="no-domain"} 3.0',
                 'atoll_waiting_workloads{reason="relax-pending"} 0.0', 'atoll_free_gpus{flavor="gb200"} 288.0',
                 'atoll_fragmentation_index{flavor="gb200"} 0.25', 'atoll_config_rejections_total{source="configmap"} 1.0'):
        assert line in text, line


def shortfall_gauge(m: Metrics, flavor: str) -> float | None:
    return m.registry.get_sample_value("atoll_owed_pods_without_room", {"flavor": flavor})


def test_shortfalls_set_the_decided_flavors_gauge_and_count_the_decision() -> None:
    m = Metrics()
    m.set_shortfalls(["gb200"], [Shortfall("t/a", "main", "gb200", 2, 4, 8), Shortfall("t/b", "main", "gb200", 1, 2, 8)])
    assert shortfall_gauge(m, "gb200") == 3 and m.registry.get_sample_value("atoll_shortfall_decisions_total") == 1
    m.set_shortfalls(["gb200"], [])  # the pods bound: the flavor's domains have room again
    assert shortfall_gauge(m, "gb200") == 0 and m.registry.get_sample_value("atoll_shortfall_decisions_total") == 1
    # two flavors: the ledger counted each; a flavor with no shortfall in its count has room again
    m.set_shortfalls(["gb200"], [Shortfall("t/a", "main", "gb200", 2, 4, 8)])
    m.set_shortfalls(["gb200", "h100"], [Shortfall("t/c", "main", "h100", 1, 1, 2)])
    assert (shortfall_gauge(m, "gb200"), shortfall_gauge(m, "h100")) == (0, 1)
    assert m.registry.get_sample_value("atoll_shortfall_decisions_total") == 3
    m.set_shortfalls(["h100"], [Shortfall("t/a", "main", "gb200", 2, 4, 8)])  # another flavor's count says nothing of h100's room
    assert shortfall_gauge(m, "h100") == 0 and m.registry.get_sample_value("atoll_shortfall_decisions_total") == 3


def test_two_controllers_do_not_share_a_registry() -> None:
    a, b = Metrics(), Metrics()
    a.decisions.labels("admit").inc()
    assert b.registry.get_sample_value("atoll_decisions_total", {"outcome": "admit"}) is None


def test_endpoints_answer_and_report_health() -> None:
    m = Metrics()
    m.decisions.labels("reject").inc()
    state = {"alive": True, "ready": False}
    endpoints = HttpEndpoints(m, alive=lambda: (state["alive"], "worker ok"), ready=lambda: (state["ready"], "listing"),
                              bind="127.0.0.1", metrics_port=free_port(), health_port=free_port())
    endpoints.start()
    try:
        metrics_port, health_port = endpoints.ports
        r = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert r.status_code == 200 and 'atoll_decisions_total{outcome="reject"} 1.0' in r.text
        assert httpx.get(f"http://127.0.0.1:{health_port}/healthz").status_code == 200
        r = httpx.get(f"http://127.0.0.1:{health_port}/readyz")
        assert r.status_code == 503 and r.text.strip() == "listing"
        state.update(alive=False, ready=True)
        assert httpx.get(f"http://127.0.0.1:{health_port}/readyz").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{health_port}/healthz").status_code == 503
        assert httpx.get(f"http://127.0.0.1:{health_port}/metrics").status_code == 404
    finally:
        endpoints.stop()


def test_port_zero_takes_a_free_port_and_none_serves_nothing() -> None:
    endpoints = HttpEndpoints(Metrics(), alive=lambda: (True, "ok"), ready=lambda: (True, "ok"), bind="127.0.0.1", metrics_port=0,
                              health_port=0)
    endpoints.start()
    try:
        metrics_port, health_port = endpoints.port_of("metrics"), endpoints.port_of("health")
        assert metrics_port and health_port and metrics_port != health_port  # two free ports, not one shared
        assert httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{health_port}/healthz").status_code == 200
    finally:
        endpoints.stop()
    none = HttpEndpoints(Metrics(), alive=lambda: (True, "ok"), ready=lambda: (True, "ok"), metrics_port=None, health_port=None)
    assert none.servers == [] and none.port_of("metrics") is None


def test_leader_answers_apart_from_readiness() -> None:
    role = {"leading": False}
    endpoints = HttpEndpoints(Metrics(), alive=lambda: (True, "ok"), ready=lambda: (True, "standby: caches synced"),
                              leader=lambda: (role["leading"], "leader" if role["leading"] else "standby"), bind="127.0.0.1",
                              metrics_port=None, health_port=0)
    endpoints.start()
    try:
        base = f"http://127.0.0.1:{endpoints.port_of('health')}"
        assert httpx.get(f"{base}/readyz").status_code == 200 and httpx.get(f"{base}/leader").status_code == 503
        role["leading"] = True
        assert httpx.get(f"{base}/leader").status_code == 200
    finally:
        endpoints.stop()


def test_metrics_answer_only_what_authorize_allows() -> None:
    seen: list[str | None] = []

    def authorize(header: str | None) -> tuple[int, str]:
        seen.append(header)
        return {None: (401, "no token"), "Bearer good": (200, "prometheus")}.get(header, (403, "not allowed"))

    endpoints = HttpEndpoints(Metrics(), alive=lambda: (True, "ok"), ready=lambda: (True, "ok"), bind="127.0.0.1", metrics_port=0,
                              health_port=0, authorize=authorize)
    endpoints.start()
    try:
        url = f"http://127.0.0.1:{endpoints.port_of('metrics')}/metrics"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer bad"}).status_code == 403
        ok = httpx.get(url, headers={"Authorization": "Bearer good"})
        assert ok.status_code == 200 and "atoll_leader" in ok.text
        assert seen == [None, "Bearer bad", "Bearer good"]
        assert httpx.get(f"http://127.0.0.1:{endpoints.port_of('health')}/healthz").status_code == 200  # probes stay open
    finally:
        endpoints.stop()


def test_every_metric_is_listed_in_the_install_guide() -> None:
    guide = (Path(__file__).parents[3] / "docs" / "install.md").read_text()
    listed = set(re.findall(r"^\| `(atoll_\w+)", guide, re.MULTILINE))
    suffix = {"counter": "_total"}
    served = {f.name + suffix.get(f.type, "") for f in Metrics().registry.collect()}
    assert listed == served

"""Prometheus metrics and the health endpoints, served over real HTTP on loopback."""

from __future__ import annotations

import socket

import httpx

from admission.controller import HttpEndpoints, Metrics


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

"""Leader election on a real coordination.k8s.io/v1 Lease, with time on a ManualClock."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from admission.kube import CONFIGMAPS, LEASES, ApiRetrySettings, KubePort, LeaderElector, LeaderSettings, ManualClock, errors
from tests.admission.slow_review import SLOW_REVIEW, slow_review
from tests.chaos.proxy import FaultProxy
from tests.envtest import ApiServer

pytestmark = pytest.mark.apiserver

SETTINGS = LeaderSettings(lease_name="atoll-controller", lease_duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2)


def elector(kube_client: Any, namespace: str, identity: str, clock: ManualClock) -> LeaderElector:
    return LeaderElector(KubePort(kube_client), namespace=namespace, identity=identity, settings=SETTINGS, clock=clock)


def test_one_leader_and_a_standby_takes_over_after_expiry(kube_client: Any, namespace: str) -> None:
    clock = ManualClock()
    a, b = elector(kube_client, namespace, "replica-a", clock), elector(kube_client, namespace, "replica-b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    lease = KubePort(kube_client).get(LEASES, "atoll-controller", namespace)
    assert lease["spec"]["holderIdentity"] == "replica-a" and lease["spec"]["leaseDurationSeconds"] == 15

    clock.advance(10)
    assert a.try_acquire_or_renew()  # renewed: b saw the Lease change and restarts its count
    assert not b.try_acquire_or_renew()
    clock.advance(14)
    assert not b.try_acquire_or_renew()  # 14 s since b last saw a renewal: not expired yet
    clock.advance(2)  # a stopped renewing (crashed); 16 s > 15 s
    assert b.try_acquire_or_renew() and b.is_leader
    lease = KubePort(kube_client).get(LEASES, "atoll-controller", namespace)
    assert lease["spec"]["holderIdentity"] == "replica-b" and lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew() and not a.is_leader  # a comes back: b holds a fresh lease


def test_release_hands_over_at_once(kube_client: Any, namespace: str) -> None:
    clock = ManualClock()
    a, b = elector(kube_client, namespace, "replica-a", clock), elector(kube_client, namespace, "replica-b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    clock.advance(1.5)  # the released lease lasts one second
    assert b.try_acquire_or_renew()


def test_run_starts_and_stops_the_work(kube_client: Any, namespace: str) -> None:
    clock = ManualClock()
    a = elector(kube_client, namespace, "replica-a", clock)
    stop = threading.Event()
    calls: list[str] = []

    def started() -> None:
        calls.append("started")
        stop.set()

    a.run(stop, started, lambda: calls.append("stopped"))
    assert calls == ["started", "stopped"]
    assert KubePort(kube_client).get(LEASES, "atoll-controller", namespace)["spec"].get("holderIdentity") in (None, "")


def test_terms_count_tenures_and_validity_ends_before_a_standby_may_take_over(kube_client: Any, namespace: str) -> None:
    clock = ManualClock()
    a, b = elector(kube_client, namespace, "replica-a", clock), elector(kube_client, namespace, "replica-b", clock)
    assert a.try_acquire_or_renew() and a.term == 0 and a.valid()
    assert not b.try_acquire_or_renew() and b.term is None and not b.valid()
    clock.advance(9.9)
    assert a.valid()  # within the renew deadline of its last renewal
    clock.advance(0.2)
    assert not a.valid()  # 10.1 s: it may write no more, 4.9 s before b may take over
    clock.advance(5)
    assert b.try_acquire_or_renew() and b.term == 1 and b.valid()
    assert not a.try_acquire_or_renew() and a.term is None and not a.valid()


class _SlowPort(KubePort):
    """The Lease's answer comes back ``delay`` seconds after the request was sent."""

    def __init__(self, api: Any, clock: ManualClock, delay: float) -> None:
        super().__init__(api)
        self.clock, self.delay = clock, delay

    def replace(self, resource: Any, obj: Any) -> Any:
        out = super().replace(resource, obj)
        self.clock.advance(self.delay)
        return out


def test_validity_counts_from_when_the_renewal_was_sent_not_when_its_answer_came(kube_client: Any, namespace: str) -> None:
    clock = ManualClock()
    a = LeaderElector(_SlowPort(kube_client, clock, 0.0), namespace=namespace, identity="replica-a", settings=SETTINGS, clock=clock)
    assert a.try_acquire_or_renew()
    a.port.delay = 8.0  # type: ignore[attr-defined]
    clock.advance(1)
    assert a.try_acquire_or_renew()  # sent at t=1, answered at t=9: a standby counts from t=1 at the latest
    clock.advance(1.5)
    assert a.valid()  # t=10.5 < 1 + 10
    clock.advance(1)
    assert not a.valid()  # t=11.5: counted from the answer (t=9) it would still be valid for 7.5 s


def test_a_fenced_port_refuses_writes_but_not_reads(kube_client: Any, namespace: str) -> None:
    window = [10.0]
    port = KubePort(kube_client, fence=lambda: window[0])
    port.create(CONFIGMAPS, {"metadata": {"name": "fenced", "namespace": namespace}, "data": {"a": "1"}})
    window[0] = 0.0
    with pytest.raises(errors.Fenced, match="not the leader"):
        port.patch(CONFIGMAPS, "fenced", {"data": {"a": "2"}}, namespace)
    assert port.get(CONFIGMAPS, "fenced", namespace)["data"] == {"a": "1"}  # nothing was sent


def test_the_write_window_is_the_term_less_the_margin(kube_client: Any, namespace: str) -> None:
    clock = ManualClock()
    settings = SETTINGS.model_copy(update={"write_margin_seconds": 1.5})
    a = LeaderElector(KubePort(kube_client), namespace=namespace, identity="replica-a", settings=settings, clock=clock)
    assert a.write_window() == 0.0  # not leading: no write
    assert a.try_acquire_or_renew()
    assert a.write_window() == pytest.approx(10 - 1.5)
    clock.advance(8.4)
    assert a.write_window() == pytest.approx(0.1) and a.valid()
    clock.advance(0.2)
    assert a.write_window() < 0 and a.valid()  # still in its term, but a write could not end inside it


def test_the_write_margin_must_leave_room_to_write() -> None:
    with pytest.raises(ValueError, match="write_margin_seconds .* must be < renew_deadline_seconds"):
        LeaderSettings(renew_deadline_seconds=2, write_margin_seconds=2)


# ------------------------------------------------------------------ attempts bounded in real time

SLOW = 2.0
"""Seconds the proxy holds each request before the apiserver sees it (as a busy server's queue would)."""


@pytest.fixture
def slow_proxy(apiserver: ApiServer) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", apiserver.port, apiserver.ca_file, rate=1.0, faults=("slow",), slow_seconds=(SLOW, SLOW),
                    max_seconds=60) as proxy:
        yield proxy


def through(proxy: FaultProxy, apiserver: ApiServer) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = proxy.url
    cfg.api_key = {"authorization": f"Bearer {apiserver.token}"}
    return client.ApiClient(cfg)


def test_a_write_attempt_ends_before_the_term_and_the_server_never_sees_it(apiserver: Any, kube_client: Any, namespace: str,
                                                                            slow_proxy: FaultProxy) -> None:
    """A write sent with 0.8 s of term left, to a server that takes 2 s to get to it: the client
    gives up inside the term and the server drops it, instead of applying it after the term."""
    direct = KubePort(kube_client)
    direct.create(CONFIGMAPS, {"metadata": {"name": "late", "namespace": namespace}, "data": {"a": "1"}})
    ends = time.monotonic() + 0.8
    port = KubePort(through(slow_proxy, apiserver), ApiRetrySettings(backoffs=(0.05,), request_timeout=10.0),
                    fence=lambda: ends - time.monotonic())
    started = time.monotonic()
    with pytest.raises(errors.Fenced):  # the attempt timed out at the window's end; the retry was not sent
        port.patch(CONFIGMAPS, "late", {"data": {"a": "2"}}, namespace)
    assert time.monotonic() - started < 1.5
    time.sleep(SLOW + 0.5 - (time.monotonic() - started))  # past when the server would have applied it
    assert direct.get(CONFIGMAPS, "late", namespace)["data"] == {"a": "1"}
    assert slow_proxy.dropped == 1 and slow_proxy.timeline == []


def test_a_write_the_server_is_slow_to_get_to_ends_at_the_attempts_deadline_inside_the_server(
        apiserver: Any, kube_client: Any, namespace: str, tmp_path: Path) -> None:
    """A write sent with 0.8 s of term left, held 2 s inside the apiserver by an admission webhook,
    behind a proxy that does not pass the client's hang-up on (the server never learns the client
    left): the client gives up at 0.8 s, and the server, told that deadline, ends the write
    there instead of applying it at 2 s. Without the deadline the same write is applied."""
    direct = KubePort(kube_client)
    direct.create(CONFIGMAPS, {"metadata": {"name": "late", "namespace": namespace, "labels": {SLOW_REVIEW: namespace}},
                               "data": {"a": "1"}})

    def probe() -> None:
        direct.patch(CONFIGMAPS, "late", {"metadata": {"annotations": {"probe": str(time.monotonic())}}}, namespace)

    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["configmaps"]}]
    with slow_review(kube_client, tmp_path, namespace, rules, probe, lambda i: SLOW) as reviews, \
            FaultProxy("127.0.0.1", apiserver.port, apiserver.ca_file, rate=0.0, max_seconds=60) as proxy:
        ends = time.monotonic() + 0.8
        port = KubePort(through(proxy, apiserver), ApiRetrySettings(backoffs=(), request_timeout=10.0),
                        fence=lambda: ends - time.monotonic())
        with pytest.raises(errors.NetworkError):
            port.patch(CONFIGMAPS, "late", {"data": {"a": "2"}}, namespace)
        time.sleep(SLOW + 1.0)  # past the webhook's answer
        assert len(reviews) == 1  # the server did get to the write
        assert direct.get(CONFIGMAPS, "late", namespace)["data"] == {"a": "1"}
        assert [w.status for w in proxy.timeline if 200 <= w.status < 300] == []  # the server answered no success

        # the control: the same write with a deadline past the webhook's answer is applied
        KubePort(through(proxy, apiserver), ApiRetrySettings(backoffs=(), request_timeout=10.0)).patch(
            CONFIGMAPS, "late", {"data": {"a": "3"}}, namespace)
        assert len(reviews) == 2 and direct.get(CONFIGMAPS, "late", namespace)["data"] == {"a": "3"}


def test_a_renewal_round_ends_within_the_renew_deadline(apiserver: Any, namespace: str, slow_proxy: FaultProxy) -> None:
    """The elector's port as ``atoll run`` wires it: one attempt per call, bounded by the round's
    deadline. A leader whose renewals are stuck knows it by its renew deadline (not after a
    30 s request and its retries), and its late renewal never lands."""
    settings = LeaderSettings(lease_name="atoll-controller", lease_duration_seconds=3, renew_deadline_seconds=1.5,
                              retry_period_seconds=0.1, write_margin_seconds=0.2)
    lease_port = KubePort(through(slow_proxy, apiserver), ApiRetrySettings().model_copy(update={"backoffs": ()}))
    a = LeaderElector(lease_port, namespace=namespace, identity="replica-a", settings=settings)
    lease_port.budget = a.round_budget
    slow_proxy.enabled = False
    assert a.try_acquire_or_renew()
    renewed = time.monotonic()
    slow_proxy.enabled = True  # every request now waits 2 s in the server's queue
    with pytest.raises(errors.NetworkError):
        a.try_acquire_or_renew()
    assert time.monotonic() - renewed < settings.renew_deadline_seconds + 0.3
    assert not a.valid()
    time.sleep(SLOW + 0.3)
    assert slow_proxy.dropped == 1 and [w for w in slow_proxy.timeline if w.lease] == [w for w in slow_proxy.timeline]
    assert len(slow_proxy.timeline) == 1  # only the first, fast acquisition reached the server


def test_run_steps_down_within_the_renew_deadline_when_renewals_hang(apiserver: Any, namespace: str, slow_proxy: FaultProxy) -> None:
    settings = LeaderSettings(lease_name="atoll-controller", lease_duration_seconds=3, renew_deadline_seconds=1.5,
                              retry_period_seconds=0.1, write_margin_seconds=0.2)
    lease_port = KubePort(through(slow_proxy, apiserver), ApiRetrySettings().model_copy(update={"backoffs": ()}))
    a = LeaderElector(lease_port, namespace=namespace, identity="replica-a", settings=settings)
    lease_port.budget = a.round_budget
    slow_proxy.enabled = False
    stop, times = threading.Event(), {}

    def started() -> None:
        times["started"] = time.monotonic()
        slow_proxy.enabled = True

    thread = threading.Thread(target=a.run, args=(stop, started, lambda: times.setdefault("stopped", time.monotonic())), daemon=True)
    thread.start()
    thread.join(10)
    stop.set()
    assert not thread.is_alive() and "stopped" in times
    assert times["stopped"] - times["started"] < settings.renew_deadline_seconds + 0.5

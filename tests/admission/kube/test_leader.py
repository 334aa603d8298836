"""Leader election on a real coordination.k8s.io/v1 Lease, with time on a ManualClock."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from admission.kube import LEASES, KubePort, LeaderElector, LeaderSettings, ManualClock

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
    from admission.kube import CONFIGMAPS, errors

    allowed = [True]
    port = KubePort(kube_client, fence=lambda: allowed[0])
    port.create(CONFIGMAPS, {"metadata": {"name": "fenced", "namespace": namespace}, "data": {"a": "1"}})
    allowed[0] = False
    with pytest.raises(errors.Fenced, match="not the leader"):
        port.patch(CONFIGMAPS, "fenced", {"data": {"a": "2"}}, namespace)
    assert port.get(CONFIGMAPS, "fenced", namespace)["data"] == {"a": "1"}  # nothing was sent

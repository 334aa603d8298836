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

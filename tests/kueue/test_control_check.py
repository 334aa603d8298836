"""``atoll bench kueue --control-check``'s check against real Kueue (v0.19.2): it does no work and
answers at once, so its arm shows what Kueue charges any admission check. Answered once the
Workload holds quota, Kueue admits it in a second write of its own; answered as soon as listed,
before quota, Kueue admits it in the reservation's own write."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from admission.cli._bench_kueue_instant import CONTROLLER, INSTANT_CHECK, Answerer, activate
from admission.kube import KubePort
from tests.kueue.conftest import GROUP, VERSION, WAIT, History, Live, is_true, wait_for

pytestmark = [pytest.mark.apiserver, pytest.mark.kueue]

NS, CQ, FLAVOR = "bench-control", "bench-control-cq", "bench-control"


def _entry(wl: dict[str, Any]) -> dict[str, Any] | None:
    return next((a for a in (wl.get("status") or {}).get("admissionChecks") or [] if a.get("name") == INSTANT_CHECK), None)


def _cluster_queue(cpu: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": CQ},
            "spec": {"namespaceSelector": {}, "admissionChecksStrategy": {"admissionChecks": [{"name": INSTANT_CHECK, "onFlavors": [FLAVOR]}]},
                     "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]}}


@pytest.fixture
def control(live: Live) -> Iterator[Live]:
    """A ClusterQueue with no quota yet whose only check is the control check, and its LocalQueue."""
    kueue = {"apiVersion": f"{GROUP}/{VERSION}"}
    if not live.core.list_namespace(field_selector=f"metadata.name={NS}").items:  # kept for the next case: deleting one takes a while
        live.core.create_namespace({"metadata": {"name": NS}})
    live.custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {**kueue, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}})
    live.custom.create_cluster_custom_object(GROUP, VERSION, "admissionchecks", {
        **kueue, "kind": "AdmissionCheck", "metadata": {"name": INSTANT_CHECK}, "spec": {"controllerName": CONTROLLER}})
    activate(KubePort(live.client))
    live.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", _cluster_queue("0"))
    live.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "localqueues", {
        **kueue, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": CQ}})
    wait_for("the control ClusterQueue to be active", lambda: is_true(live.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ), "Active"))
    try:
        yield live
    finally:
        for wl in live.custom.list_namespaced_custom_object(GROUP, VERSION, NS, "workloads")["items"]:
            live.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "workloads", wl["metadata"]["name"])
        wait_for("the control Workloads gone", lambda: not live.custom.list_namespaced_custom_object(GROUP, VERSION, NS, "workloads")["items"])
        live.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "localqueues", "lq")
        live.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ)
        wait_for("the control ClusterQueue gone", lambda: not any(
            c["metadata"]["name"] == CQ for c in live.custom.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")["items"]))
        live.custom.delete_cluster_custom_object(GROUP, VERSION, "admissionchecks", INSTANT_CHECK)
        live.custom.delete_cluster_custom_object(GROUP, VERSION, "resourceflavors", FLAVOR)
        for plural, name in (("admissionchecks", INSTANT_CHECK), ("resourceflavors", FLAVOR)):  # Kueue's finalizers go first
            wait_for(f"{plural} {name} gone", lambda plural=plural, name=name: not any(
                o["metadata"]["name"] == name for o in live.custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]))


def _versions(history: History, name: str, pred: Any) -> dict[str, Any]:
    """The first recorded version of Workload ``name`` that ``pred`` accepts (waits for it)."""
    def probe() -> dict[str, Any] | None:
        with history.cv:
            return next((v for v in history.versions if v["metadata"]["name"] == name and pred(v)), None)
    return wait_for(f"{name}: the version looked for", probe, WAIT, 0.1)


@pytest.mark.parametrize("when", ["reserved", "listed"])
def test_the_control_check_answers_at_once_and_kueue_admits_through_it(control: Live, when: str) -> None:
    """With no quota the Workload waits; ``reserved`` leaves its entry Pending, ``listed`` answers
    it Ready before quota. Once quota is there Kueue admits it: ``listed`` in the reservation's
    own write (its first version holding quota is already Admitted), ``reserved`` in a later one,
    after the control check's Ready."""
    live = control
    answerer = Answerer(KubePort(live.client), NS, when, 1)
    thread = threading.Thread(target=answerer.run, daemon=True)
    name = f"w-{when}"
    with live.history(NS) as history:
        thread.start()
        try:
            live.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "workloads", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": name, "namespace": NS},
                "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.example.com/pause:1",
                                                               "resources": {"requests": {"cpu": "100m"}}}]}}}]}})
            listed = _versions(history, name, lambda v: _entry(v) is not None)
            assert not is_true(listed, "QuotaReserved")
            if when == "listed":
                ready = _versions(history, name, lambda v: (_entry(v) or {}).get("state") == "Ready")
                assert not is_true(ready, "QuotaReserved")  # answered before quota
            else:
                time.sleep(2.0)  # time enough to answer, were it to answer without quota
                assert (_entry(live.custom.get_namespaced_custom_object(GROUP, VERSION, NS, "workloads", name)) or {}).get("state") == "Pending"
            live.custom.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", CQ, {
                **_cluster_queue("1"), "metadata": {"name": CQ, "resourceVersion": live.custom.get_cluster_custom_object(
                    GROUP, VERSION, "clusterqueues", CQ)["metadata"]["resourceVersion"]}})
            reserved = _versions(history, name, lambda v: is_true(v, "QuotaReserved"))
            admitted = _versions(history, name, lambda v: is_true(v, "Admitted"))
            assert (_entry(admitted) or {}).get("state") == "Ready"
            if when == "listed":
                assert is_true(reserved, "Admitted")  # one write: reserved and admitted together
            else:
                assert not is_true(reserved, "Admitted") and (_entry(reserved) or {}).get("state") == "Pending"
                assert int(admitted["metadata"]["resourceVersion"]) > int(reserved["metadata"]["resourceVersion"])
        finally:
            answerer.stop.set()
            thread.join(timeout=20)

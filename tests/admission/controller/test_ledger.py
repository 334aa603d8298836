"""What the ledger owes per admitted PodSet: its count minus its pods running on a node minus its
pods that succeeded. A pod that failed or was deleted frees its node and its job controller
creates a replacement, so its slot is owed again until the replacement binds; a pod that
succeeded is not replaced and stays done. On the real apiserver, through the controller's list
and its watch, a new Workload is not given a failed pod's GPUs while its replacement is pending."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from admission.controller import ClusterCache, Ledger
from admission.controller._queueing import _at_floor
from admission.kube import PODS
from policies import PodSetSpec, Profile, decide
from tests.admission.controller.test_cache import CLIQUE, cache
from tests.admission.controller.test_double_booking import CHECK, admitted
from tests.admission.controller.test_racing_workloads import one_island_free
from tests.admission.controller.test_watch_loop import wait_until
from tests.admission.fabric import Fabric, planned, run
from topology import Level, NodeInfo, ResourceVector, Snapshot

POD = ResourceVector(gpu=4, cpu_milli=1000)
STRICT = Profile(requiredLevel=CLIQUE)


def pod(uid: str, node: str | None, phase: str = "Running", *, decision: str = "d-a") -> dict[str, Any]:
    """A 4-GPU pod of PodSet ``main`` (``decision``: the Atoll decision it carries; "" for none)."""
    meta: dict[str, Any] = {"uid": uid, "name": uid, "namespace": "team", "labels": {"kueue.x-k8s.io/podset": "main"}}
    if decision:
        meta["annotations"] = {"atoll.dev/decision-id": decision}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "4", "cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def wired() -> tuple[ClusterCache, Ledger]:
    """The cache and ledger as the controller wires them, on islands c0 (n0, n1) and c1 (n2, n3)
    of 4-GPU nodes: c1 is full of other pods, and Workload A (2 pods, island c0, planned n0 and
    n1) has both pods running where planned."""
    c = cache()
    ledger = Ledger(c.gpu_resource, bound=c.bound_pods, node_labels=c.node_labels, succeeded=c.succeeded_pods)
    c.pod_listener = ledger.pods_changed
    for i, node in enumerate(("n2", "n3")):
        c.upsert(PODS, pod(f"busy-{i}", node, decision=""))
    ledger.observe(admitted("a", {"n0": 1, "n1": 1}, island="c0"), [CHECK])
    for i, node in enumerate(("n0", "n1")):
        c.upsert(PODS, pod(f"a-{i}", node))
    return c, ledger


def owed(c: ClusterCache, ledger: Ledger) -> list[tuple[int, tuple[tuple[str, int], ...]]]:
    """(pods owed, planned nodes they prefer) per owing PodSet."""
    return [(o.pods, o.planned) for o in ledger.owed(c.snapshot("gpu"))]


def one_more_pod(c: ClusterCache, ledger: Ledger) -> str:
    """The outcome for a further Workload of one 4-GPU pod under the strict profile, on the free
    GPUs with the owed pods counted, as the decider counts them."""
    snap = c.snapshot("gpu").fork()
    ledger.apply(snap)
    return decide(snap, [PodSetSpec("main", 1, POD)], profile_name="strict", profile=STRICT, now=0.0).outcome


def test_a_failed_pods_slot_is_owed_again_until_its_replacement_binds() -> None:
    c, ledger = wired()
    assert owed(c, ledger) == [] and one_more_pod(c, ledger) == "wait"

    c.upsert(PODS, pod("a-0", "n0", "Failed"))
    assert owed(c, ledger) == [(1, (("n0", 1),))]  # owed again, and its replacement prefers the failed pod's planned node
    assert one_more_pod(c, ledger) == "wait"  # n0 is free, but not for a new Workload

    c.upsert(PODS, pod("a-2", None, "Pending"))  # the job controller's replacement, not bound yet
    assert owed(c, ledger) == [(1, (("n0", 1),))] and one_more_pod(c, ledger) == "wait"

    c.upsert(PODS, pod("a-2", "n0"))  # the replacement binds
    assert owed(c, ledger) == [] and one_more_pod(c, ledger) == "wait"


def test_a_deleted_pod_is_owed_again_until_its_replacement_binds() -> None:
    c, ledger = wired()
    c.delete(PODS, pod("a-1", "n1"))  # a node drain; also how the controller's watch reports a pod turning Failed
    assert owed(c, ledger) == [(1, (("n1", 1),))] and one_more_pod(c, ledger) == "wait"
    c.upsert(PODS, pod("a-2", "n1"))
    assert owed(c, ledger) == [] and one_more_pod(c, ledger) == "wait"


def test_a_succeeded_pod_is_done_even_once_deleted_until_its_workload_goes() -> None:
    c, ledger = wired()
    c.upsert(PODS, pod("a-0", "n0", "Succeeded"))
    assert owed(c, ledger) == [] and one_more_pod(c, ledger) == "admit"  # n0 is free and A owes nothing: a Job does not replace it

    c.delete(PODS, pod("a-0", "n0", "Succeeded"))  # garbage-collected while A still runs
    assert owed(c, ledger) == [] and one_more_pod(c, ledger) == "admit"

    finished = admitted("a", {"n0": 1, "n1": 1}, island="c0")
    finished["status"]["conditions"].append({"type": "Finished", "status": "True"})
    ledger.observe(finished, [CHECK])
    assert len(ledger) == 0
    # what the ledger remembered of A went with it: held again, A is counted from the pods that exist
    ledger.observe(admitted("a", {"n0": 1, "n1": 1}, island="c0"), [CHECK])
    assert owed(c, ledger) == [(1, (("n0", 1),))]


def test_succeeded_pods_keep_their_planned_slots() -> None:
    c = cache()
    ledger = Ledger(c.gpu_resource, bound=c.bound_pods, node_labels=c.node_labels, succeeded=c.succeeded_pods)
    c.pod_listener = ledger.pods_changed
    ledger.observe(admitted("a", {"n0": 1, "n1": 1, "n2": 1}, pods=3, island="c0"), [CHECK])
    c.upsert(PODS, pod("a-0", "n1", "Succeeded"))
    c.upsert(PODS, pod("a-1", "n3"))  # bound off plan: the last planned slot is released
    assert owed(c, ledger) == [(1, (("n0", 1),))]


# ----------------------------------------------------------------------------- on the real apiserver


def admit_first(fabric: Fabric, decide_now: Callable[[], Any]) -> tuple[dict[str, Any], list[str]]:
    """Workload ``first`` (2 pods × 4 GPUs) admitted on the one free island, its two pods created
    from its podSetUpdate and bound where planned; returns the podSetUpdate and the planned nodes."""
    fabric.submit("first", [("main", 2, 4)])
    decide_now()
    entry = fabric.entry("first")
    assert entry["state"] == "Ready", entry
    update = entry["podSetUpdates"][0]
    nodes = sorted(planned(entry))
    for i, node in enumerate(nodes):
        fabric.create_pod(f"first-{i}", 4, update, node_name=node)
    return update, nodes


@pytest.mark.apiserver
def test_a_mask_kept_for_the_flavor_is_not_read_for_its_speed_floor_view() -> None:
    """The ledger keeps each selector's usable nodes against ``eligible_token`` in the snapshot's
    shared cache; the speed floor's view (a fork without the slower nodes) shares that cache, so
    it must carry a token of its own or it reads the whole flavor's mask."""
    alloc = ResourceVector(4, 64000, 512000, 110)
    snap = Snapshot("gpu", [Level(CLIQUE)], [NodeInfo(name, {CLIQUE: "c0"}, alloc, ResourceVector(), perf=perf)
                                             for name, perf in (("fast", 1.0), ("slow", 0.5))])
    ledger = Ledger()
    assert ledger.domain_mask(snap, [(CLIQUE, "c0")]).tolist() == [True, True]
    fast = _at_floor(snap, 1.0)
    assert ledger.domain_mask(fast, [(CLIQUE, "c0")]).tolist() == [True, False]
    assert ledger.domain_mask(snap, [(CLIQUE, "c0")]).tolist() == [True, True]


def test_on_the_apiserver_a_failed_pods_gpus_wait_for_its_replacement(fabric: Fabric) -> None:
    fabric.install()
    one_island_free(fabric)
    ctrl = fabric.controller()
    update, nodes = admit_first(fabric, lambda: run(ctrl))
    ctrl.sync()  # the controller has seen both pods bound
    fabric.finish_pod("first-0", "Failed")
    fabric.create_pod("first-2", 4, update)  # the Job controller's replacement: pending, unbound

    fabric.submit("second", [("main", 1, 4)])
    (verdict,) = run(ctrl)
    assert (verdict.outcome, verdict.reserved_gpus) == ("wait", 4), verdict.message
    assert fabric.entry("second")["state"] == "Retry"
    assert [(o.pods, o.planned) for o in ctrl.ledger.owed(ctrl.cache.snapshot(fabric.flavor))] == [(1, ((nodes[0], 1),))]

    fabric.schedule_pod("first-2", nodes[0])  # the replacement binds where the failed pod ran
    fabric.finish_pod("first-1")  # the other pod succeeds: its GPUs are free and it is not owed
    fabric.requeue("second")
    (verdict,) = run(fabric.controller())  # a fresh controller lists the succeeded pod too
    assert (verdict.outcome, verdict.reserved_gpus) == ("admit", 0), verdict.message
    assert planned(fabric.entry("second")) == {nodes[1]: 1}


@pytest.mark.apiserver
def test_through_the_watch_a_failed_pod_is_owed_and_a_succeeded_one_is_done(fabric: Fabric) -> None:
    fabric.install()
    one_island_free(fabric)
    with fabric.running() as ctrl:
        update, nodes = admit_first(fabric, lambda: wait_until(lambda: fabric.entry("first")["state"] == "Ready"))
        uid = {f"first-{i}": fabric.core.read_namespaced_pod(f"first-{i}", fabric.ns).metadata.uid for i in range(2)}
        assert wait_until(lambda: all(u in ctrl.cache.pods for u in uid.values()))

        fabric.finish_pod("first-0", "Failed")  # the watch's field selector reports it DELETED
        fabric.create_pod("first-2", 4, update)
        assert wait_until(lambda: uid["first-0"] not in ctrl.cache.pods)
        fabric.submit("second", [("main", 1, 4)])
        assert wait_until(lambda: fabric.entry("second")["state"] != "Pending")
        assert fabric.entry("second")["state"] == "Retry"  # the failed pod's GPUs are owed to its replacement

        fabric.schedule_pod("first-2", nodes[0])
        fabric.finish_pod("first-1")  # stays in the watch, as a MODIFIED event
        uid["first-2"] = fabric.core.read_namespaced_pod("first-2", fabric.ns).metadata.uid
        assert wait_until(lambda: uid["first-1"] in ctrl.cache.succeeded and uid["first-2"] in ctrl.cache.pods)
        fabric.submit("third", [("main", 1, 4)])
        assert wait_until(lambda: fabric.entry("third")["state"] != "Pending")
        assert fabric.entry("third")["state"] == "Ready" and planned(fabric.entry("third")) == {nodes[1]: 1}

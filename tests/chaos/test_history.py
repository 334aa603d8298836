"""The term audit settles writes whose answer did not say (a 504, a hang-up, no answer) from the
server's record (``history``), not by time; checked on timelines of the server's own shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.chaos.history import Record, Revision, holds, written_key
from tests.chaos.proxy import Received
from tests.chaos.terms import AGENT, Settled, record_misses, settle_unknown, writes_outside_term

NS = "ns"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/atoll"


def _path(name: str) -> str:
    return f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/{name}/status?fieldManager=atoll&force=true"


def _entry(message: str) -> dict[str, Any]:
    return {"name": "atoll", "state": "Ready", "message": message}


def _apply(name: str, message: str) -> bytes:
    """A decision's apply body, as the controller sends it (with the precondition's resourceVersion)."""
    return json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                       "metadata": {"name": name, "namespace": NS, "resourceVersion": "3"},
                       "status": {"admissionChecks": [_entry(message)]}}).encode()


def _write(sent: float, answered: float | None, who: str, name: str, message: str, status: int, rv: int | None = None,
           path: str | None = None) -> Received:
    return Received(sent, answered, "PATCH", path or _path(name), AGENT + who, status, resource_version=rv, body=_apply(name, message))


def _lease_write(sent: float, answered: float | None, who: str, rv: int | None, status: int = 200) -> Received:
    return Received(sent, answered, "PUT", LEASE_PATH, AGENT + who, status, lease_holder=who if rv is not None else None,
                    lease_term=1 if who.endswith("a") else 2, resource_version=rv)


def _wl(name: str, rv: int, *messages: str, seen: float = 99.0) -> Revision:
    """A revision of Workload ``name`` holding Atoll's entry with the last of ``messages`` (none: no entry), beside Kueue's own check."""
    checks = [{"name": "kueue-own", "state": "Ready"}] + ([{**_entry(messages[-1]), "lastTransitionTime": "2026-01-01T00:00:00Z"}]
                                                          if messages else [])
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
           "metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv)}, "status": {"admissionChecks": checks}}
    return Revision(("workloads", NS, name), rv, "MODIFIED", obj, seen)


def _lease(rv: int, holder: str) -> Revision:
    obj = {"metadata": {"name": "atoll", "namespace": NS, "resourceVersion": str(rv)},
           "spec": {"holderIdentity": holder, "leaseTransitions": 1 if holder.endswith("a") else 2}}
    return Revision(("leases", NS, "atoll"), rv, "MODIFIED", obj, 99.0)


def _record(*revisions: Revision) -> Record:
    out: dict[tuple[str, str, str], list[Revision]] = {}
    for r in sorted(revisions, key=lambda r: r.resource_version):
        out.setdefault(r.key, []).append(r)
    return Record(out)


A, B = "chaos-x-a", "chaos-x-b"


def test_the_audit_settles_504s_hang_ups_and_lost_answers_from_the_servers_record() -> None:
    """A holds the Lease from revision 10, B takes it at revision 20 (sent at 2.0). Writes of A
    whose answer did not say count only if the server's record shows them applied after
    revision 20; the timing rule would have counted every one answered (or not) after 2.0."""
    a_holds, b_takes = _lease_write(0.0, 0.01, A, 10), _lease_write(2.0, 2.01, B, 20)
    writes = {
        "timeout_inside": _write(1.0, 2.5, A, "w1", "m1", 504),  # the server's 504, yet applied at 15: inside A's term
        "timeout_after": _write(1.9, 2.5, A, "w2", "m2", 504),  # applied at 22, after B's Lease write
        "timeout_never": _write(1.9, 2.5, A, "w3", "m3", 504),  # the deadline ended it: no revision holds it
        "hang_up_never": _write(1.9, 2.2, A, "w4", "m4", 0),  # the server hung up; w4 changed since, not to A's entry
        "hang_up_after": _write(1.9, 2.2, A, "w5", "m5", 0),  # hung up, applied at 24
        "lost_never": _write(1.95, None, A, "w6", "m6", 200),  # no answer ever came, and nothing applied
        "lost_inside": _write(1.5, None, A, "w7", "m7", 200),  # no answer, applied at 16
        "no_op": _write(1.9, 2.4, A, "w8", "m8", 503),  # w8 held A's entry already (12, watched at 1.2): nothing new at 23
        "others_revision": _write(1.9, 2.4, A, "w9", "m9", 504),  # revision 25 holds the same entry, but was B's answered write
        "uncovered": _write(1.9, 2.3, A, "c", "mc", 504, path=f"/api/v1/namespaces/{NS}/configmaps/c"),  # not in the record: by time
        "exact_after": _write(1.9, 2.4, A, "w11", "m11", 200, rv=21),  # answered at 21: after B's Lease write
    }
    b_same = _write(2.2, 2.3, B, "w9", "m9", 200, rv=25)
    record = _record(_lease(10, A), _lease(20, B), _wl("w1", 15, "m1"), _wl("w2", 22, "m2"), _wl("w3", 11), _wl("w4", 11),
                     _wl("w4", 26, "someone else's"), _wl("w5", 24, "m5"), _wl("w7", 16, "m7"), _wl("w8", 12, "m8", seen=1.2),
                     _wl("w8", 23, "m8"), _wl("w9", 25, "m9"), _wl("w11", 21, "m11"))
    timeline = [a_holds, b_takes, b_same, *writes.values()]

    found = writes_outside_term(timeline, "chaos-x-", record, NS)
    assert len(found) == 4, found
    assert sum("w2/status" in f and "applied at revision 22 (its answer: 504; the server's record) while the Lease named 'chaos-x-b'" in f
               for f in found) == 1
    assert sum("w5/status" in f and "applied at revision 24 (its answer: none; the server's record)" in f for f in found) == 1
    assert sum("w11/status" in f and "applied at revision 21 while the Lease named 'chaos-x-b'" in f for f in found) == 1
    assert sum("configmaps/c" in f and "answered 0.300s after 'chaos-x-b' sent its Lease write" in f for f in found) == 1
    assert settle_unknown(timeline, "chaos-x-", record) == Settled(unknown=10, applied=4, not_applied=5, unsettled=1)  # applied: w1 w2 w5 w7

    assert record_misses(timeline, "chaos-x-", record) == (2, [])  # w11 and B's w9 are in the record as answered
    wrong = _record(*[r for revs in record.revisions.values() for r in revs if r.key[2] != "w11"], _wl("w11", 21, "not m11"))
    assert record_misses(timeline, "chaos-x-", wrong)[1] == [f"PATCH {_path('w11')} answered at revision 21: the record's revision "
                                                             "does not hold what it set"]

    # without the record, the same timeline is judged by time: every unknown write overlapping B's takeover counts,
    # the 7 the record shows applied inside A's term (w1, w7) or never applied (w3, w4, w6, w8, w9) among them
    by_time = writes_outside_term(timeline, "chaos-x-")
    assert len(by_time) == 11, by_time
    assert sum(any(f"{w}/status" in f for w in ("w1", "w3", "w4", "w6", "w7", "w8", "w9")) for f in by_time) == 7


def test_the_lease_order_is_the_servers_record_a_takeover_whose_answer_was_lost_included() -> None:
    """B's takeover ended without an answer, so the proxy's timeline does not know it was
    applied (at 20); the record does, and A's write applied at 21 counts. A's renewal at 18,
    whose answer was lost too, keeps A's hold until then."""
    timeline = [_lease_write(0.0, 0.01, A, 10), _lease_write(1.0, None, A, None), _lease_write(2.0, 2.3, B, None, status=0),
                _write(1.5, 1.6, A, "w1", "m1", 200, rv=19), _write(2.4, 2.5, A, "w2", "m2", 200, rv=21)]
    record = _record(_lease(10, A), _lease(18, A), _lease(20, B), _wl("w1", 19, "m1"), _wl("w2", 21, "m2"))
    (found,) = writes_outside_term(timeline, "chaos-x-", record, NS)
    assert "w2/status?fieldManager=atoll&force=true applied at revision 21 while the Lease named 'chaos-x-b' (its Lease write at revision 20, term 2)" in found
    assert writes_outside_term(timeline, "chaos-x-") == []  # the answers alone never showed B's hold


def test_a_writes_body_is_held_by_the_object_it_made() -> None:
    """``holds``: a merge patch's null is an absent key; an apply's list item is found among the
    object's; the precondition's resourceVersion is not what the write set."""
    obj = {"metadata": {"name": "w", "resourceVersion": "9", "labels": {"a": "1"}},
           "status": {"admissionChecks": [{"name": "k", "state": "Ready"}, {"name": "atoll", "state": "Retry", "message": "m"}]}}
    assert holds(obj, {"metadata": {"name": "w", "resourceVersion": "3"}, "status": {"admissionChecks": [{"name": "atoll", "state": "Retry"}]}})
    assert not holds(obj, {"status": {"admissionChecks": [{"name": "atoll", "state": "Ready"}]}})
    assert holds(obj, {"metadata": {"labels": {"gone": None}}}) and not holds(obj, {"metadata": {"labels": {"a": None}}})
    assert not holds(obj, {"status": {"admissionChecks": {"name": "atoll"}}})  # a map is not a list


def test_a_write_names_the_object_it_addressed_a_creates_by_its_body() -> None:
    create = Received(0.0, 0.1, "POST", "/api/v1/namespaces/ns/events", AGENT + A, 201,
                      body=json.dumps({"metadata": {"name": "w.abc", "namespace": "ns"}}).encode())
    assert written_key(create) == ("events", "ns", "w.abc")
    assert written_key(_write(0.0, 0.1, A, "w", "m", 200)) == ("workloads", NS, "w")
    cluster = Received(0.0, 0.1, "PATCH", "/apis/kueue.x-k8s.io/v1beta2/admissionchecks/atoll/status?force=true", AGENT + A, 200)
    assert written_key(cluster) == ("admissionchecks", "", "atoll")


@pytest.mark.apiserver
def test_stopping_the_record_closes_its_client_so_no_connection_outlives_the_run(kube_client: Any, namespace: str) -> None:
    from kubernetes import client

    from admission.kube import KubePort
    from tests.chaos.history import History

    api = client.ApiClient(kube_client.configuration)
    history = History(KubePort(api), namespace, "atoll").start()
    assert history.settled(timeout=10.0)
    assert len(api.rest_client.pool_manager.pools) > 0  # it listed and watches over connections of its own
    history.stop()
    assert len(api.rest_client.pool_manager.pools) == 0  # closed: no socket left for the collector to warn about
    assert all(not t.is_alive() for t in history._threads)
    history.stop()  # the audit and the run's end both stop it

"""The term audit: did the apiserver apply a replica's write outside that replica's hold of
the Lease? It reads the fault proxy's ``timeline`` (``Received``: every write the server
received, with its answer), in the server's own order of revisions: the answer's, or, for a
write whose answer did not say (a 5xx, the server ending it without an answer, no answer at
all), the revision the server's own record shows it made (``history``: watches on the
apiserver), or that it made none.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass

from tests.chaos.history import Record, holds, written_key
from tests.chaos.proxy import Received

__all__ = ["AGENT", "Settled", "record_misses", "settle_unknown", "writes_answered_late", "writes_outside_term"]

AGENT = "atoll-chaos/"
"""User-Agent prefix of a replica's requests (then its identity): how the proxy's timeline names the sender."""


@dataclass(frozen=True, slots=True)
class _Lease:
    """One revision of the Lease: the holder it named from ``resource_version`` on."""

    resource_version: int
    lease_holder: str
    lease_term: int


def _ours(timeline: list[Received], identity_prefix: str) -> tuple[list[Received], list[Received]]:
    """The replicas' writes (User-Agent ``AGENT`` + identity starting with ``identity_prefix``),
    and their Lease writes the server accepted, in the server's order (by resourceVersion)."""
    mine = [w for w in timeline if w.agent.startswith(AGENT + identity_prefix)]
    leases = sorted((w for w in mine if w.lease and w.lease_holder is not None and w.resource_version is not None),
                    key=lambda w: w.resource_version or 0)
    return mine, leases


def _lease_order(leases: list[Received], record: Record | None, namespace: str | None) -> list[_Lease]:
    """The Lease's revisions in the server's order: those its answers gave, and with a record,
    every revision the watch saw (a renewal whose answer was lost but which the server applied
    included)."""
    out = {w.resource_version: _Lease(w.resource_version, w.lease_holder or "", w.lease_term or 0)
           for w in leases if w.resource_version is not None}
    if record is not None and namespace is not None:
        out.update({rv: _Lease(rv, holder, term) for rv, holder, term in record.leases(namespace)})
    return [out[rv] for rv in sorted(out)]


def _outside_by_time(w: Received, who: str, leases: list[Received]) -> str | None:
    """The timing rule, for a write whose revision is unknown: it must reach the server after
    the last Lease write answered before it names its sender, and be answered before any other
    replica's later Lease write was sent. Conservative: any overlap with a takeover counts."""
    end = w.answered if w.answered is not None else float("inf")
    by_answer = sorted(leases, key=lambda lease: lease.answered or 0.0)
    before = [lease for lease in by_answer if (lease.answered or 0.0) <= w.sent]
    if not before or before[-1].lease_holder != who:
        holder = before[-1].lease_holder if before else "nobody"
        return f"{who} {w.method} {w.path} reached the server while the Lease named {holder!r}"
    taken = [lease for lease in by_answer if lease.lease_holder != who and (lease.answered or 0.0) > (before[-1].answered or 0.0)
             and lease.sent < end]
    if not taken:
        return None
    when = ("got no answer; meanwhile" if w.answered is None else
            f"{'answered' if w.status else 'ended without an answer'} {end - taken[0].sent:.3f}s after")
    return f"{who} {w.method} {w.path} {when} {taken[0].lease_holder!r} sent its Lease write (term {taken[0].lease_term})"


def _changed(w: Received, timeline: list[Received]) -> bool:
    """Did the server change the object at ``w``'s revision? A write it applies gets a revision
    above every revision answered before the write reached it; an answer at or below one of
    those is the object as it already was (a no-op write: nothing applied)."""
    earlier = [x.resource_version for x in timeline
               if x.resource_version is not None and x.answered is not None and x.answered <= w.sent]
    return not earlier or (w.resource_version or 0) > max(earlier)


def _unknown(w: Received) -> bool:
    """A write whose answer does not say whether the server applied it: a 5xx (which may follow
    a commit; the server's own 504 when the request's deadline passed), the server ending it
    without an answer (``status`` 0), or no answer at all."""
    return w.answered is None or w.status == 0 or w.status >= 500


def writes_outside_term(timeline: list[Received], identity_prefix: str, record: Record | None = None,
                        namespace: str | None = None) -> list[str]:
    """Writes of replicas (User-Agent ``AGENT`` + identity starting with ``identity_prefix``) the
    apiserver applied outside their sender's hold of the Lease, in the server's own order: the
    last Lease revision before the write's revision must name the sender. So a write counts if
    the server applied it after another replica's Lease write (a takeover, or a release) or
    before its sender held the Lease at all; one answered late but applied inside its sender's
    hold does not (``writes_answered_late`` counts those). Writes the server refused (4xx)
    applied nothing; a no-op write (answered at a revision it did not make) neither.

    A write whose answer did not say (``_unknown``) is settled from the server's ``record`` of
    ``namespace`` (``history``: the revisions the watches delivered): the revision it made is
    judged as an answered one's; a write that made none applied nothing. Without a record, or
    for an object the record does not cover, it is judged by the conservative timing rule
    (``_outside_by_time``): the server's answer, or its hang-up, must come before another
    replica's Lease write was sent (no answer at all: never). With a record the Lease's order is
    the record's (every revision, a renewal whose answer was lost included).

    The order is exact on this test server, not on Kubernetes in general: the API calls
    resourceVersion opaque, but this kube-apiserver stores every object in one etcd, where an
    object's resourceVersion is the etcd revision of its last change, one counter for the
    whole store; two writes' resourceVersions order them as the server applied them."""
    mine, leases = _ours(timeline, identity_prefix)
    order = _lease_order(leases, record, namespace)
    out = []
    for w in mine:
        if w.lease or (w.answered is not None and 400 <= w.status < 500):
            continue
        who = w.agent.removeprefix(AGENT)
        if not _unknown(w):
            found = (_outside_by_revision(w, who, w.resource_version, order, timeline) if w.resource_version is not None
                     else _outside_by_time(w, who, leases))  # an answer without an object's revision
        elif record is not None and record.covers(w):
            made = record.landed(w, timeline)
            found = None if made is None else _outside_by_revision(w, who, made.resource_version, order, timeline, settled=True)
        else:
            found = _outside_by_time(w, who, leases)
        if found is not None:
            out.append(found)
    return out


def _outside_by_revision(w: Received, who: str, revision: int, order: list[_Lease], timeline: list[Received], *,
                         settled: bool = False) -> str | None:
    if not settled and not _changed(w, timeline):
        return None
    i = bisect.bisect_left([lease.resource_version for lease in order], revision)
    last = order[i - 1] if i else None
    if last is not None and last.lease_holder == who:
        return None
    holder = (last.lease_holder or "nobody") if last is not None else "nobody"
    since = f" (its Lease write at revision {last.resource_version}, term {last.lease_term})" if last is not None else ""
    how = f" (its answer: {w.status or 'none'}; the server's record)" if settled else ""
    return f"{who} {w.method} {w.path} applied at revision {revision}{how} while the Lease named {holder!r}{since}"


@dataclass(frozen=True, slots=True)
class Settled:
    """The replicas' writes whose answer did not say whether they were applied, settled from the
    server's record: ``applied`` made a revision, ``not_applied`` made none, ``unsettled`` were
    on objects the record does not cover (judged by time)."""

    unknown: int = 0
    applied: int = 0
    not_applied: int = 0
    unsettled: int = 0


def record_misses(timeline: list[Received], identity_prefix: str, record: Record) -> tuple[int, list[str]]:
    """The check on the matching itself: every write the server answered as applied (a 2xx at a
    revision it made) must be in the record at that revision, holding what it set. A miss
    means ``landed`` could call an applied write unapplied; the audit reports each. Returns how
    many answered writes were checked, and the misses."""
    mine, _ = _ours(timeline, identity_prefix)
    out, checked = [], 0
    for w in mine:
        if w.lease or w.resource_version is None or not 200 <= w.status < 300 or not record.covers(w) or not _changed(w, timeline):
            continue
        checked += 1
        rev = next((r for r in record.revisions.get(written_key(w) or ("", "", ""), []) if r.resource_version == w.resource_version), None)
        if rev is None or not holds(rev.object, json.loads(w.body or b"{}")):
            out.append(f"{w.method} {w.path} answered at revision {w.resource_version}: "
                       + ("no such revision in the record" if rev is None else "the record's revision does not hold what it set"))
    return checked, out


def settle_unknown(timeline: list[Received], identity_prefix: str, record: Record) -> Settled:
    mine, _ = _ours(timeline, identity_prefix)
    unknown = [w for w in mine if not w.lease and _unknown(w)]
    covered = [w for w in unknown if record.covers(w)]
    applied = sum(record.landed(w, timeline) is not None for w in covered)
    return Settled(len(unknown), applied, len(covered) - applied, len(unknown) - len(covered))


def writes_answered_late(timeline: list[Received], identity_prefix: str) -> int:
    """Writes the server applied inside their sender's hold of the Lease (or as no-ops) whose
    answer overlapped a takeover: the timing rule would count them, the server's revisions
    clear them."""
    mine, leases = _ours(timeline, identity_prefix)
    order = _lease_order(leases, None, None)
    late = 0
    for w in mine:
        if w.lease or w.resource_version is None or not 200 <= w.status < 300:
            continue
        who = w.agent.removeprefix(AGENT)
        late += _outside_by_time(w, who, leases) is not None and _outside_by_revision(w, who, w.resource_version, order, timeline) is None
    return late

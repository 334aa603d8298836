"""Atoll's writes to Kueue objects: one server-side apply of its own check entry per decision,
the wait state beside it, the Event on a change of state (and a Warning naming any Kueue
annotation the decision read but does not honour), the Retry that asks Kueue to requeue an
admitted Workload whose pod lost its node, and the AdmissionCheck's Active condition.

Every write is a server-side apply under Atoll's field manager, so it touches only what Atoll
owns (its entry of ``status.admissionChecks``, merged by name, and its ``atoll.dev/TopologyWaiting``
condition, merged by type); an unchanged entry is not written again. A decision's write carries
the ``metadata.resourceVersion`` of the Workload it was decided from, so the apiserver refuses it
(409, ``errors.Conflict``) if anything changed the Workload in between, e.g. Kueue's eviction write
(``prepareForEviction`` in Kueue's pkg/workload/evict/evict.go) or a new quota reservation. Kueue's
own check controllers write the same strict way; the caller reads again and decides again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog

from admission.controller._cache import ClusterCache
from admission.controller._decide import Verdict
from admission.controller._events import EventPoster
from admission.controller._ledger import Ledger
from admission.controller._records import rfc3339, truncate
from admission.controller._settings import Settings
from admission.controller._wait import waiting_condition
from admission.controller._workloads import check_entry
from admission.kube import ADMISSION_CHECKS, WORKLOADS, Clock, ClusterPort, Obj, errors, object_key
from policies import annotation_notes

__all__ = ["ANNOTATION_NOT_HONOURED", "EVENT_REASON", "REQUEUE_EVENT_REASON", "YIELD_EVENT_REASON", "StatusWriter"]

EVENT_REASON = {"Ready": ("Normal", "TopologyPlaced"), "Retry": ("Normal", "TopologyWaiting"), "Pending": ("Normal", "TopologyWaiting"),
                "Rejected": ("Warning", "TopologyRejected")}
REQUEUE_EVENT_REASON = "TopologyRequeued"
"""Warning Event reason when Atoll asks Kueue to requeue an admitted Workload (a pod lost its node)."""
YIELD_EVENT_REASON = "TopologyQuotaYielded"
"""Normal Event reason when a parked Workload is deactivated to give its quota back (``_yielding``)."""
ANNOTATION_NOT_HONOURED = "AnnotationNotHonoured"
"""Warning Event reason, beside the state's Event, when the decision read Kueue pod-template
annotations it does not honour (each named in the message)."""
_log = structlog.get_logger("atoll.status")


class StatusWriter:
    """Writes decisions and the AdmissionCheck condition; keeps the cache and ledger in step with
    what the server answered."""

    def __init__(self, port: ClusterPort, *, cache: ClusterCache, ledger: Ledger, settings: Settings, clock: Clock,
                 events: EventPoster, on_written: Callable[[str, str, float], None] | None = None) -> None:
        self.port = port
        self.cache = cache
        self.ledger = ledger
        self.settings = settings
        self.clock = clock
        self.events = events
        self.on_written = on_written

    def write(self, obj: Obj, verdict: Verdict, check_names: Iterable[str], extra: Iterable[dict[str, Any]] = ()) -> None:
        """Apply the verdict as Atoll's check entry, with the wait condition, in one write that
        holds only if ``obj`` is still the current Workload; nothing if unchanged. ``extra``: more
        of Atoll's conditions to apply with it (the queue manager's reservation and hold).

        Raises ``errors.Conflict`` when the Workload changed since ``obj`` was read."""
        status = self.prepare(obj, verdict, check_names, extra)
        if status is not None:
            names = frozenset(check_names)
            self.landed(obj, verdict, names, self._apply(obj, names, status))

    def prepare(self, obj: Obj, verdict: Verdict, check_names: Iterable[str], extra: Iterable[dict[str, Any]] = ()) -> dict[str, Any] | None:
        """The status ``write`` applies for this verdict; None when the Workload already says it."""
        meta = obj.get("metadata") or {}
        names = frozenset(check_names)
        current = check_entry(obj, names) or {}
        name = str(current.get("name"))
        now = self.clock.now()
        entry: dict[str, Any] = {"name": name, "state": verdict.state,
                                 "message": truncate(verdict.message, self.settings.decisions.message_max_chars) or verdict.state,
                                 "lastTransitionTime": rfc3339(now) if current.get("state") != verdict.state else current.get("lastTransitionTime")}
        if verdict.podset_updates:
            entry["podSetUpdates"] = verdict.podset_updates
        if verdict.state == "Retry":
            entry["requeueAfterSeconds"] = verdict.retry_after
        condition = waiting_condition(obj, verdict.outcome, now, meta.get("generation"))
        have = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == (condition or {}).get("type")), None)
        same = all(current.get(k) == entry.get(k) for k in ("state", "message", "podSetUpdates", "requeueAfterSeconds"))
        extra = list(extra)
        kept = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}
        same = same and all(all(kept.get(c["type"], {}).get(k) == c.get(k) for k in ("status", "reason", "message", "lastTransitionTime"))
                            for c in extra)
        if same and (condition is None or (have is not None and all(have.get(k) == condition.get(k)
                                                                   for k in ("status", "reason", "lastTransitionTime")))):
            return None

        status: dict[str, Any] = {"admissionChecks": [entry]}
        if condition is not None or extra:
            status["conditions"] = ([condition] if condition is not None else []) + extra
        return status

    def landed(self, obj: Obj, verdict: Verdict, names: frozenset[str], out: Obj) -> None:
        """``write``'s apply of ``obj``'s verdict answered ``out`` (taken by the cache and ledger): the Events."""
        current = check_entry(obj, names) or {}
        verdict.written = True
        if self.on_written is not None:
            self.on_written(object_key(obj), verdict.outcome, self.clock.monotonic())
        if current.get("state") != verdict.state:
            kind, reason = EVENT_REASON[verdict.state]
            involved = {"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": out.get("metadata") or {}}
            self.events.post(involved, kind, reason, verdict.message)
            unheeded = annotation_notes(verdict.notes)
            if unheeded:  # a Kueue manifest's annotation Atoll does not place by: never dropped without a word
                self.events.post(involved, "Warning", ANNOTATION_NOT_HONOURED, "Kueue topology annotations read but not honoured: "
                                 + "; ".join(unheeded))

    def booked(self, obj: Obj, status: dict[str, Any]) -> Obj:
        """``obj`` as it will read once ``status`` is applied (Atoll's entry replaced): what the
        ledger counts while the write is in flight."""
        want = status["admissionChecks"][0]
        st = dict(obj.get("status") or {})
        st["admissionChecks"] = [want if c.get("name") == want["name"] else c for c in st.get("admissionChecks") or []]
        return {**obj, "status": st}

    def requeue(self, obj: Obj, check_names: Iterable[str], message: str) -> None:
        """Set Atoll's entry of an admitted Workload to ``Retry`` so that Kueue evicts and requeues
        it: its workload controller evicts a Workload holding quota whose check is Retry
        (``reconcileCheckBasedEviction``, kubernetes-sigs/kueue pkg/controller/core/workload_controller.go).
        No ``requeueAfterSeconds``: Kueue would hold the eviction itself (and the quota) until it
        has passed (``_yielding`` says where), so it requeues at once, and the next decision waits
        (with the profile's backoff) if the cluster has no place yet. One conditional write, like
        a decision's; raises ``errors.Conflict`` when the Workload changed since ``obj`` was read."""
        names = frozenset(check_names)
        current = check_entry(obj, names) or {}
        entry: dict[str, Any] = {"name": str(current.get("name")), "state": "Retry", "lastTransitionTime": rfc3339(self.clock.now()),
                 "message": truncate(message, self.settings.decisions.message_max_chars)}
        out = self._apply(obj, names, {"admissionChecks": [entry]})
        self.events.post({"apiVersion": WORKLOADS.api_version, "kind": "Workload", "metadata": out.get("metadata") or {}},
                         "Warning", REQUEUE_EVENT_REASON, message)

    def _apply(self, obj: Obj, names: frozenset[str], status: dict[str, Any]) -> Obj:
        """Server-side apply of ``status`` (Atoll's entry first) under Atoll's field manager, with the
        resourceVersion ``obj`` was read at; the cache and ledger take the answer."""
        return self.took(obj, names, status, self.send(obj, status))

    def send(self, obj: Obj, status: dict[str, Any]) -> Obj:
        """The apply's round trip alone (no cache, no ledger): safe on a writer thread."""
        meta = obj.get("metadata") or {}
        ident = {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")}
        version = meta.get("resourceVersion")
        body = {"apiVersion": WORKLOADS.api_version, "kind": "Workload",
                "metadata": {**ident, **({"resourceVersion": version} if version else {})}, "status": status}
        return self.port.apply(WORKLOADS, body, field_manager=self.settings.decisions.field_manager, subresource="status")

    def took(self, obj: Obj, names: frozenset[str], status: dict[str, Any], out: Obj) -> Obj:
        """The apply answered ``out``: checked, then taken by the cache and ledger."""
        want = status["admissionChecks"][0]
        written = check_entry(out, [want["name"]]) or {}
        if written.get("state") != want["state"]:
            raise errors.ApiError(f"workload {object_key(obj)}: the apply returned check state {written.get('state')!r}, "
                                  f"expected {want['state']} (is admissionChecks merged by name on this apiserver?)")
        self.cache.upsert(WORKLOADS, out)
        self.ledger.observe(self.cache.objects[WORKLOADS][object_key(out)], names)
        return out

    def refresh_active(self, check_names: Iterable[str], *, config_error: str | None, config_seen: bool) -> bool:
        """Keep ``status.conditions[Active]`` of Atoll's AdmissionChecks true (false, with the
        reason, while no valid profiles document has ever been read). No write if unchanged.
        False when a write failed (the caller tries again later)."""
        ok = True
        cfg = self.settings.config
        if self.cache.profiles is not None:
            status, reason = "True", "Active"
            message = f"Atoll places Workloads with the profiles of ConfigMap {cfg.namespace}/{cfg.configmap}"
            if config_error:
                message += f"; its latest update was rejected (see its Events): {config_error.splitlines()[0]}"
        else:
            status, reason = "False", "ProfilesInvalid" if config_seen else "ProfilesMissing"
            message = config_error or "no profiles document yet"
        message = truncate(message, self.settings.decisions.message_max_chars)
        for name in sorted(check_names):
            ac = self.cache.objects[ADMISSION_CHECKS].get(name) or {}
            current = next((c for c in (ac.get("status") or {}).get("conditions") or [] if c.get("type") == "Active"), None)
            if current and (current.get("status"), current.get("reason"), current.get("message")) == (status, reason, message):
                continue
            since = current.get("lastTransitionTime") if current and current.get("status") == status else rfc3339(self.clock.now())
            body = {"apiVersion": ADMISSION_CHECKS.api_version, "kind": "AdmissionCheck", "metadata": {"name": name},
                    "status": {"conditions": [{"type": "Active", "status": status, "reason": reason, "message": message,
                                               "lastTransitionTime": since, "observedGeneration": (ac.get("metadata") or {}).get("generation", 1)}]}}
            try:
                out = self.port.apply(ADMISSION_CHECKS, body, field_manager=self.settings.decisions.field_manager, subresource="status")
                self.cache.upsert(ADMISSION_CHECKS, out)
                _log.info("admission check condition written", name=name, active=status, reason=reason)
            except errors.ApiError as exc:
                _log.error("admission check condition not written; will retry", name=name, error=str(exc))
                ok = False
        return ok

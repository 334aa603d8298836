"""AdmissionReview v1 in, AdmissionReview v1 out: pin each exact-enforcement pod at CREATE.

For a pod carrying ``atoll.dev/decision-id`` and ``atoll.dev/enforcement: exact``:

1. its slot: its rank, always (stable: a recreated pod with that rank takes the slot back, and no
   other pod asks for it, so it needs no claim); a pod without a rank takes the first free
   planned slot (``_pin``), free meaning held by no live pod of the same decision and PodSet (in
   the watch-fed cache, ``_cache``) and claimed by no other request whose pod is not stored yet
   (``_claims``: shared by all replicas through the apiserver);
2. its node: the node the slot's last pod ran on (a recreated pod goes back) or, for a slot's
   first pod, the slot's planned node; if that node is unhealthy for the pod (not Ready,
   cordoned, untolerated NoSchedule/NoExecute taint) or, for a recreated pod, full, a
   replacement inside the pod's domain (its nodeSelector): healthy, with room, nearest first
   (most labels shared with the lost node), then the tightest fit, then by name. This is
   Kueue's "hot swap" (KEP 2724, "Node failures": replace only the lost pods' node, inside the
   assigned domain) done at pod creation instead of in the Workload's topologyAssignment;
3. none: the pod is pinned to its lost node anyway (it waits there, holding nothing, and runs if
   the node recovers) and its Workload gets ``atoll.dev/RequeueRequested`` so the controller
   asks Kueue for a requeue (check state Retry: evict and requeue, Kueue's own answer to a
   node failure it cannot replace, ``NodeFailures``), with a warning to the pod's creator.

Pods without exact enforcement, and requests that are not a pod CREATE, are allowed unchanged.
A lock per decision and PodSet serializes the choice inside a process (fewer conflicting writes);
the claims serialize it across replicas. A review has one time budget (``_budget``): a share of
the webhook's timeout for everything it waits on; when it is spent the pod is refused (503) and
its controller creates it again.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from admission.kube import Clock, ClusterPort, Obj, SystemClock, errors
from admission.webhook._budget import review_budget, review_time_left
from admission.webhook._cache import WebhookCache
from admission.webhook._claims import SlotClaims
from admission.webhook._cluster import ClusterReader, Room
from admission.webhook._pin import (
    ANN_NODE,
    ANN_PREVIOUS,
    ANN_REPLACED,
    ANN_SLOT,
    ExactPod,
    PinError,
    choose_slot,
    is_live,
    pin_patch,
    read_exact_pod,
    slot_of,
    taken_slots,
)
from admission.webhook._settings import WebhookSettings
from topology import ResourceVector

__all__ = ["PinResult", "PodPinner", "ReviewError"]

_log = structlog.get_logger("atoll.webhook")
_REVIEW_VERSION = "admission.k8s.io/v1"
_STRIPES = 64


class ReviewError(ValueError):
    """The request is not an AdmissionReview v1 with a request: answered with HTTP 400."""


@dataclass
class PinResult:
    """What the webhook answers for one pod."""

    allowed: bool = True
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    message: str = ""
    code: int = 200
    node: str = ""
    slot: int | None = None
    replaced: str = ""


def _get(obj: Any, key: str, kind: type, where: str) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind):
        raise ReviewError(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _name(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def latest(before: list[Obj]) -> Obj | None:
    """The slot's most recent dead pod: the one no later pod of the slot names as its predecessor
    (``atoll.dev/previous-pod``; creation timestamps have one-second resolution, and a Job
    controller recreates faster), then by creation time and name."""
    named = {str(((p.get("metadata") or {}).get("annotations") or {}).get(ANN_PREVIOUS) or "") for p in before}
    heads = [p for p in before if _name(p) not in named] or before
    return max(heads, key=lambda p: (str((p.get("metadata") or {}).get("creationTimestamp") or ""), _name(p)), default=None)


class PodPinner:
    """Answers AdmissionReviews for pods; safe to call from many threads."""

    def __init__(self, port: ClusterPort, settings: WebhookSettings | None = None, clock: Clock | None = None,
                 cache: WebhookCache | None = None) -> None:
        """``cache``: a started one to share; without it the pinner makes its own, started at the
        first exact pod (a pod it leaves alone never touches the cluster) and stopped by ``close()``."""
        self.settings = settings or WebhookSettings()
        self.clock = clock or SystemClock()
        self._own_cache = cache is None
        self.cache = cache or WebhookCache(port, self.settings.resources())
        self._started = cache is not None
        self._start_lock = threading.Lock()
        self.reader = ClusterReader(port, self.settings.resources(), self.settings.field_manager, self.cache)
        self._locks = tuple(threading.Lock() for _ in range(_STRIPES))
        self._room_lock = threading.Lock()
        self.claims = SlotClaims(port, self.settings.namespace, self.settings.claims_lease, self.clock, self.settings.claim_seconds)

    @property
    def budget_seconds(self) -> float:
        """The whole review's budget: ``api_share`` of the webhook's timeout (the rest is margin
        for the answer's way back)."""
        return self.settings.timeout_seconds * self.settings.api_share

    def close(self) -> None:
        """Stop the cache this pinner made (a shared one is its owner's to stop)."""
        with self._start_lock:
            if self._own_cache and self._started:
                self.cache.stop()
                self._started = False

    def start(self, timeout: float) -> bool:
        """Start the cache now (not at the first exact pod) and wait up to ``timeout`` s for its first
        list; True once it has one."""
        with self._start_lock:
            if not self._started:
                self.cache.start()
                self._started = True
        return self.cache.wait_synced(timeout)

    def _cache_synced(self) -> bool:
        left = review_time_left()
        return self.start(self.budget_seconds if left is None else left)

    # ------------------------------------------------------------------ the review

    def review(self, body: bytes | Mapping[str, Any]) -> dict[str, Any]:
        """The AdmissionReview response for a request body; ``ReviewError`` when it is not one."""
        try:
            doc = json.loads(body) if isinstance(body, (bytes, bytearray)) else dict(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ReviewError(f"body: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise ReviewError("body: expected a JSON object (an AdmissionReview)")
        if doc.get("apiVersion") != _REVIEW_VERSION or doc.get("kind") != "AdmissionReview":
            raise ReviewError(f"apiVersion/kind: expected {_REVIEW_VERSION} AdmissionReview, got {doc.get('apiVersion')!r} {doc.get('kind')!r} "
                              "(set admissionReviewVersions: [v1] in the MutatingWebhookConfiguration)")
        request = _get(doc, "request", dict, "AdmissionReview")
        uid = _get(request, "uid", str, "request")
        with review_budget(self.clock, self.budget_seconds):
            result = self.admit(request)
        response: dict[str, Any] = {"uid": uid, "allowed": result.allowed}
        if result.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(result.patch).encode()).decode()
        if result.warnings:
            response["warnings"] = [w[:256] for w in result.warnings]  # the apiserver truncates longer ones
        if not result.allowed:
            response["status"] = {"code": result.code, "message": result.message}
        return {"apiVersion": _REVIEW_VERSION, "kind": "AdmissionReview", "response": response}

    def admit(self, request: Mapping[str, Any]) -> PinResult:
        """The answer for one admission request (already known to be well formed at the top level)."""
        resource = request.get("resource") or {}
        if (request.get("operation") != "CREATE" or resource.get("resource") != "pods" or resource.get("group", "") != ""
                or request.get("subResource")):
            return PinResult()
        pod = request.get("object")
        if not isinstance(pod, dict):
            raise ReviewError("request.object: expected the pod being created")
        try:
            exact = read_exact_pod(pod, str(request.get("namespace") or ""))
        except PinError as exc:
            return PinResult(warnings=[f"atoll: not pinned to a node, only to its domain: {exc}"])
        if exact is None:
            return PinResult()
        if ANN_NODE in ((pod.get("metadata") or {}).get("annotations") or {}):
            return PinResult()  # pinned already (a reinvocation): nothing to add
        if (pod.get("spec") or {}).get("nodeName"):
            return PinResult(warnings=["atoll: not pinned: the pod names its node itself (spec.nodeName)"])
        if not self._cache_synced():
            why = f" (last error: {self.cache.last_error})" if self.cache.last_error else ""
            _log.warning("cluster cache not synced; pod refused", pod=exact.display, decision=exact.decision_id, error=self.cache.last_error)
            return PinResult(allowed=False, code=503, message=f"atoll: cannot pin the pod to a planned node: the webhook has not read "
                                                              f"the cluster yet{why}; its controller will create it again")
        try:
            return self.pin(exact, pod, str(request.get("uid")), dry_run=request.get("dryRun") is True)
        except errors.ApiError as exc:
            _log.warning("cannot read cluster state; pod refused", pod=exact.display, decision=exact.decision_id, error=str(exc))
            return PinResult(allowed=False, code=503, message=f"atoll: cannot pin the pod to a planned node: {exc}; "
                                                              "its controller will create it again")

    # ------------------------------------------------------------------ pinning

    def _lock(self, key: tuple[str, str, str]) -> threading.Lock:
        """One of a fixed set of locks (bounded memory): pods of one decision and PodSet always share one."""
        return self._locks[hash(key) % _STRIPES]

    def pin(self, exact: ExactPod, pod: Obj, request_uid: str = "", *, dry_run: bool = False) -> PinResult:
        """Choose the pod's slot and node. A dry run (``sideEffects: NoneOnDryRun``) claims no slot
        and marks no Workload."""
        with self._lock((exact.namespace, exact.decision_id, exact.podset)):
            pods = self.reader.podset_pods(exact)
            how: list[str] = []
            if exact.rank is not None:
                # stable: the rank names one pod, so no other pod asks for its slot (no claim), and every
                # other pod of the slot came before it, live or not (the cache may not show a failure yet)
                slot, how = exact.rank, [f"rank {exact.rank}"]
                before = [p for p in pods if slot_of(p, len(exact.slots)) == slot and _name(p) != exact.name]
            else:
                taken = taken_slots(exact.slots, [p for p in pods if is_live(p)])

                def choose(unavailable: set[int]) -> int | None:
                    chosen, why = choose_slot(exact, unavailable)
                    how[:] = [why]
                    return chosen

                found = choose(taken) if dry_run else self.claims.claim(f"{exact.namespace}/{exact.decision_id}/{exact.podset}/", taken, choose)
                if found is None:
                    _log.warning("no free planned slot; pod left in its domain", pod=exact.display, decision=exact.decision_id, why=how[0])
                    return PinResult(warnings=[f"atoll: not pinned to a node: {how[0]}; the pod may run on any node of its domain"])
                slot = found
                before = [p for p in pods if not is_live(p) and slot_of(p, len(exact.slots)) == slot]
            with self._room_lock:  # a room given is noted before the next pod looks for one
                result = self._place(exact, pod, slot, before, dry_run=dry_run)
                if result.node and not dry_run:
                    self.cache.note_pin((exact.namespace, exact.decision_id, exact.podset, slot), result.node,
                                        self.reader.pod_requests(pod), self.clock.monotonic() + self.settings.claim_seconds)
        _log.info("pod pinned", pod=exact.display, decision=exact.decision_id, podset=exact.podset, slot=slot, how=how[0],
                  node=result.node, replaced=result.replaced or None, request=request_uid)
        return result

    def _place(self, exact: ExactPod, pod: Obj, slot: int, before: list[Obj], *, dry_run: bool) -> PinResult:
        planned = exact.slots[slot]
        last = latest(before)
        old = planned
        if last is not None:
            old = str(((last.get("metadata") or {}).get("annotations") or {}).get(ANN_NODE) or (last.get("spec") or {}).get("nodeName") or planned)
        skip = [str((p.get("metadata") or {}).get("name")) for p in before]
        need = self.reader.pod_requests(pod)
        problem = self.reader.health_problem(old, exact)
        if not problem and last is not None:  # a recreated pod: its node may have been given away meanwhile
            rooms = self.reader.rooms(exact, [old], replaced=old, skip=skip, own_slot_node=planned, own_slot=slot,
                                      now=self.clock.monotonic())
            if not rooms or not self.reader.fits(rooms[0], need):
                problem = f"node {old} has no room for the pod"
        annotations = {ANN_SLOT: str(slot), ANN_NODE: old}
        if last is not None:
            annotations[ANN_PREVIOUS] = _name(last)
        if not problem:
            return PinResult(patch=pin_patch(pod, old, annotations), node=old, slot=slot)
        pick = self._replacement(exact, old, need, skip, planned, slot)
        if pick is not None:
            annotations.update({ANN_NODE: pick.node, ANN_REPLACED: old})
            return PinResult(patch=pin_patch(pod, pick.node, annotations), node=pick.node, slot=slot, replaced=old,
                             warnings=[f"atoll: {problem}; pinned to replacement node {pick.node} in the same domain"])
        selector = ",".join(f"{k}={v}" for k, v in exact.node_selector) or "(none)"
        message = (f"pod {exact.display} (podset {exact.podset or '-'}, slot {slot}): {problem}, and no other node of its domain "
                   f"{selector} is healthy with room for it")
        if dry_run:
            asked = "a real request would mark its Workload for a requeue"
        else:
            try:
                workload = self.reader.request_requeue(exact, message, self.clock.now())
                asked = f"Workload {exact.namespace}/{workload} marked for a requeue" if workload else "no Workload found to mark for a requeue"
            except errors.ApiError as exc:  # the pod is still pinned; the mark is tried again by its next recreation
                asked = f"marking its Workload for a requeue failed: {exc}"
        _log.warning("no replacement node", pod=exact.display, decision=exact.decision_id, node=old, problem=problem, outcome=asked)
        return PinResult(patch=pin_patch(pod, old, annotations), node=old, slot=slot,
                         warnings=[f"atoll: {problem}; no replacement in domain {selector}; the pod waits for it; {asked}"])

    def _replacement(self, exact: ExactPod, old: str, need: ResourceVector, skip: list[str], planned: str, slot: int) -> Room | None:
        if not exact.node_selector:  # no domain recorded: any node would leave the flavor's fabric
            return None
        candidates = [n for n in self.reader.domain_nodes(exact) if n != old and not self.reader.health_problem(n, exact)]
        if not candidates:
            return None
        fitting = [r for r in self.reader.rooms(exact, candidates, replaced=old, skip=skip, own_slot_node=planned, own_slot=slot,
                                                now=self.clock.monotonic())
                   if self.reader.fits(r, need)]
        return min(fitting, key=lambda r: (-r.shared_labels, r.free.gpu - need.gpu, r.node), default=None)

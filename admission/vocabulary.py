"""Atoll's names on Kubernetes objects, in one place: the labels and annotations it writes or
reads, its Workload conditions, the controller names it registers under, and the names of Kueue's
own it reads or writes (``KUEUE_*``). The modules of admission/ that use a name import it from here,
so a rename is one edit and a grep for a name finds every use.

Two sets live in ``policies`` instead, since ``policies`` never imports admission/: Kueue's
topology annotations on a PodSet template (``kueue.x-k8s.io/podset-*-topology`` and the rest
``policies`` reads) and Atoll's ``atoll.dev/balanced-placement``; admission/ imports those from
``policies``."""

from __future__ import annotations

__all__ = [
    "ATTEMPTS",
    "BENCH_ARM",
    "BENCH_INSTANT_CONTROLLER",
    "BENCH_POOL",
    "CLASS",
    "CONTROLLER_NAME",
    "DECIDED_BEFORE_QUOTA",
    "DECISION_ID",
    "DECISION_SCHEMA",
    "DRAINING",
    "ENFORCEMENT",
    "FIRST_WAITED_AT",
    "FLAVOR",
    "GPU_PERF",
    "HELD_CONDITION",
    "KUEUE_JOB_UID",
    "KUEUE_PODSET",
    "KUEUE_POD_INDEX_OFFSET",
    "KUEUE_QUEUE_NAME",
    "KUEUE_WORKLOAD",
    "NEAR",
    "NEAR_LEVEL",
    "NEAR_MIN_BANDWIDTH_GBPS",
    "NODE",
    "PLANNED_NODES",
    "PREVIOUS_POD",
    "PROFILE",
    "QUOTA_YIELD",
    "QUOTA_YIELD_UNTIL",
    "REPLACED_NODE",
    "REQUEUE_CONDITION",
    "RESERVED_CONDITION",
    "SLOT",
    "SLOT_CLAIMS",
    "SPREAD_GROUP",
    "SPREAD_LEVEL",
    "SPREAD_MAX_PER_DOMAIN",
    "SPREAD_REPLICAS",
    "WAITING_CONDITION",
]

CONTROLLER_NAME = "atoll.dev/topology"
"""AdmissionCheck ``spec.controllerName`` Atoll serves, and the reporting component of its Events."""

DECISION_SCHEMA = "atoll.dev/decision/v1"
"""The ``schema`` of every decision record: its JSON Schema ships as
``admission/controller/decision-v1.schema.json``. Fields are added within v1 as optional; a field
removed, renamed or changed in meaning takes a new version."""

# ----------------------------------------------------------------------------- on pods (podSetUpdates)

DECISION_ID = "atoll.dev/decision-id"
"""Label and annotation Atoll's podSetUpdates put on a placed Workload's pods: which decision
placed them (the ledger counts bound pods by it; the exact-placement webhook selects on it)."""
PLANNED_NODES = "atoll.dev/planned-nodes"
"""Pod annotation: the planned nodes and pods per node (``encode_planned``)."""
ENFORCEMENT = "atoll.dev/enforcement"
"""Pod annotation ``exact`` when the flavor pins each pod to a planned node; absent under ``domain``."""
DECIDED_BEFORE_QUOTA = "atoll.dev/decided-before-quota"
"""Pod annotation: the flavor a decision made before Kueue reserved quota assumed
(``admission/controller/_before_quota.py``); read back at the reservation, also by a restarted
controller, to answer a reservation on another flavor with a Retry."""

# ----------------------------------------------------------------------------- on pods (the exact-placement webhook, at CREATE)

SLOT = "atoll.dev/slot"
"""Pod annotation the exact-placement webhook adds: the planned slot (0-based, in planned order) the pod holds."""
NODE = "atoll.dev/node"
"""Pod annotation the webhook adds: the node the pod is pinned to (its planned node or a replacement)."""
PREVIOUS_POD = "atoll.dev/previous-pod"
"""Pod annotation the webhook adds to a pod taking a slot whose last pod died: that pod's name."""
REPLACED_NODE = "atoll.dev/replaced-node"
"""Pod annotation the webhook adds when the pod goes to a replacement: the node it replaces."""

# ----------------------------------------------------------------------------- on pod templates (what users set)

PROFILE = "atoll.dev/profile"
"""Pod template annotation naming the profile to place the Workload with."""
CLASS = "atoll.dev/class"
"""Pod template annotation naming the workload class."""
NEAR = "atoll.dev/near"
"""Pod template annotation: the Workload to be placed near."""
NEAR_MIN_BANDWIDTH_GBPS = "atoll.dev/near-min-bandwidth-gbps"
"""Pod template annotation: the least bandwidth to that Workload."""
NEAR_LEVEL = "atoll.dev/near-level"
"""Pod template annotation: the topology level to share with that Workload."""

SPREAD_GROUP = "atoll.dev/spread-group"
"""Workload label (or pod template annotation): the service whose replicas, each its own
Workload, are spread over a level (``admission/controller/_spread.py``)."""
SPREAD_LEVEL = "atoll.dev/spread-level"
"""Pod template annotation: the topology level a spread group's replicas are spread over."""
SPREAD_MAX_PER_DOMAIN = "atoll.dev/spread-max-per-domain"
"""Pod template annotation: at most this many replicas of the group in one domain of the level (default 1)."""
SPREAD_REPLICAS = "atoll.dev/spread-replicas"
"""Pod template annotation: the service's replica count; a spread it can never meet is Rejected."""

# ----------------------------------------------------------------------------- on Workloads (Atoll's own state)

WAITING_CONDITION = "atoll.dev/TopologyWaiting"
"""Atoll's condition on ``Workload.status.conditions``: True since the first Retry of the current wait."""
REQUEUE_CONDITION = "atoll.dev/RequeueRequested"
"""Workload condition the webhook sets True when a pod lost its node and its domain has no
replacement with room; its message starts ``decision <id>:`` so a stale one is recognised."""
FIRST_WAITED_AT = "atoll.dev/first-waited-at"
"""Workload annotation written by older releases; ignored (the Workload's owner can write annotations)."""
ATTEMPTS = "atoll.dev/attempts"
"""Workload annotation written by older releases; ignored (the Workload's owner can write annotations)."""
RESERVED_CONDITION = "atoll.dev/TopologyReserved"
"""Workload condition, ``True`` while the gang holds a reservation; the message is the reservation."""
HELD_CONDITION = "atoll.dev/TopologyDomainHeld"
"""Workload condition, ``True`` while a domain is held for the gang as preempted victims leave."""
QUOTA_YIELD = "atoll.dev/quota-yield"
"""Workload annotation while Atoll keeps a parked Workload inactive (``spec.active=false``) to give
its quota back (``--park-waiting``): the Workload (namespace/name) it gave way to."""
QUOTA_YIELD_UNTIL = "atoll.dev/quota-yield-until"
"""Workload annotation beside ``QUOTA_YIELD`` written by older releases (epoch seconds by which they
reactivated it); removed on reactivation, no longer written or read."""

# ----------------------------------------------------------------------------- on Atoll's own objects

SLOT_CLAIMS = "atoll.dev/slot-claims"
"""Annotation on the webhook's claims Lease: slots handed to pods the apiserver has not stored
yet, ``{"ns/decision/podset/slot": expiry}`` (``admission/webhook/_claims.py``)."""
BENCH_INSTANT_CONTROLLER = "bench.atoll.dev/instant"
"""AdmissionCheck ``spec.controllerName`` of ``atoll bench kueue``'s control check, which answers
Ready at once (the bench's arm without Atoll's decision)."""

# ----------------------------------------------------------------------------- on nodes

BENCH_ARM = "atoll.dev/bench-arm"
"""Node label of ``atoll bench kueue``: which arm (Kueue TAS alone, or Kueue with Atoll) a KWOK node serves."""
BENCH_POOL = "atoll.dev/bench-pool"
"""Node label ``atoll bench controller`` gives its nodes (its ResourceFlavor selects on it)."""
GPU_PERF = "atoll.dev/gpu-perf"
"""Node annotation: the node's relative GPU speed (1.0 nominal)."""
DRAINING = "atoll.dev/draining"
"""Node label: ``true`` drains the node (no new placement lands on it; pods already running or
owed by admitted Workloads stay and finish); ``false`` or absent: not draining. A domain drains by
labelling every node of it (``kubectl label nodes -l <level label>=<domain> atoll.dev/draining=true``)."""
FLAVOR = "atoll.dev/flavor"
"""Node label the in-memory cluster's ResourceFlavors select on."""

# ----------------------------------------------------------------------------- Kueue's own, read or written as Kueue does

KUEUE_PODSET = "kueue.x-k8s.io/podset"
"""Pod label Kueue's Job integrations set: the PodSet the pod belongs to."""
KUEUE_WORKLOAD = "kueue.x-k8s.io/workload"
"""Pod annotation Kueue sets: the admitted Workload (pkg/controller/jobframework/reconciler.go)."""
KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
"""Job label naming its LocalQueue (``atoll place`` reads it from a Job or JobSet manifest)."""
KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"
"""Workload label Kueue sets: the uid of the Job that owns it (the KEP spreading annotation's default group)."""
KUEUE_POD_INDEX_OFFSET = "kueue.x-k8s.io/pod-index-offset"
"""Pod annotation Kueue sets on LeaderWorkerSet workers when the leader is a PodSet of its own: subtracted from a pod's rank."""

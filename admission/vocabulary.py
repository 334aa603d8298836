"""Atoll's names on Kubernetes objects, in one place: the labels and annotations it writes or
reads, its Workload condition, and the controller name it registers under. The modules that use a name import it from
here, so a rename is one edit and a grep for a name finds every use."""

from __future__ import annotations

__all__ = [
    "ATTEMPTS",
    "BENCH_POOL",
    "CLASS",
    "CONTROLLER_NAME",
    "DECISION_ID",
    "ENFORCEMENT",
    "FIRST_WAITED_AT",
    "FLAVOR",
    "GPU_PERF",
    "NEAR",
    "NEAR_LEVEL",
    "NEAR_MIN_BANDWIDTH_GBPS",
    "PLANNED_NODES",
    "PROFILE",
    "REQUEUE_CONDITION",
    "WAITING_CONDITION",
]

CONTROLLER_NAME = "atoll.dev/topology"
"""AdmissionCheck ``spec.controllerName`` Atoll serves, and the reporting component of its Events."""

# ----------------------------------------------------------------------------- on pods (podSetUpdates)

DECISION_ID = "atoll.dev/decision-id"
"""Label and annotation Atoll's podSetUpdates put on a placed Workload's pods: which decision
placed them (the ledger counts bound pods by it; the exact-placement webhook selects on it)."""
PLANNED_NODES = "atoll.dev/planned-nodes"
"""Pod annotation: the planned nodes and pods per node (``encode_planned``)."""
ENFORCEMENT = "atoll.dev/enforcement"
"""Pod annotation ``exact`` when the flavor pins each pod to a planned node; absent under ``domain``."""

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

# ----------------------------------------------------------------------------- on nodes

BENCH_POOL = "atoll.dev/bench-pool"
"""Node label ``atoll bench controller`` gives its nodes (its ResourceFlavor selects on it)."""
GPU_PERF = "atoll.dev/gpu-perf"
"""Node annotation: the node's relative GPU speed (1.0 nominal)."""
FLAVOR = "atoll.dev/flavor"
"""Node label the in-memory cluster's ResourceFlavors select on."""

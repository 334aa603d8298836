"""The public surface of each package (engine, policies, simulator, controller, queue manager,
webhook, cluster port, commands) is a sorted, importable ``__all__`` pinned here name by name, so any change to a
public surface shows up in review; admission/ keeps its one-way layering without import cycles."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[1]

EXPECTED = {
    "admission.cli": {
        "main",
    },
    "admission.controller": {
        "ANN_DECISION_ID", "ANN_ENFORCEMENT", "ANN_PLANNED_NODES", "DECISION_EVENT", "REQUEUE_CONDITION", "WAITING_CONDITION",
        "BoundPod", "ClusterCache", "CohortQuota", "ConfigSettings", "Controller", "CostSettings", "Decider", "DecisionRecord", "DecisionSettings",
        "EventPoster", "FlavorProblem", "HttpEndpoints", "KueueSettings", "Ledger", "Metrics", "MetricsAuthorizer", "OwedPods", "PodSetRecord",
        "Preemptor", "Recorder", "RequeueRequest", "Reservation", "ServeSettings", "Settings", "Shortfall", "Verdict", "Violation",
        "WatchSettings", "WhyNotRecord", "WorkloadError", "WorkloadView", "as_workload", "build_record", "check_entry", "check_invariant",
        "condition_true", "decode_planned", "describe", "encode_planned", "holds_reservation", "iso_time", "load_workload_file", "node_info",
        "parse_object", "parse_workload", "pod_usage", "read_spread", "read_wait_state", "record_problems", "requeue_request", "rfc3339", "waiting_condition",
        "yield_patch",
    },
    "admission.vocabulary": {
        "ATTEMPTS", "BENCH_ARM", "BENCH_POOL", "CLASS", "CONTROLLER_NAME", "DECIDED_BEFORE_QUOTA", "DECISION_ID", "DECISION_SCHEMA", "ENFORCEMENT", "FIRST_WAITED_AT", "FLAVOR", "GPU_PERF", "NEAR",
        "NEAR_LEVEL", "NEAR_MIN_BANDWIDTH_GBPS", "PLANNED_NODES", "PROFILE", "QUOTA_YIELD", "QUOTA_YIELD_UNTIL", "REQUEUE_CONDITION", "SPREAD_GROUP", "SPREAD_LEVEL",
        "SPREAD_MAX_PER_DOMAIN", "SPREAD_REPLICAS", "WAITING_CONDITION",
        "DRAINING",
        "BENCH_INSTANT_CONTROLLER", "HELD_CONDITION", "KUEUE_JOB_UID", "KUEUE_PODSET", "KUEUE_POD_INDEX_OFFSET", "KUEUE_QUEUE_NAME", "KUEUE_WORKLOAD",
        "NODE", "PREVIOUS_POD", "REPLACED_NODE", "RESERVED_CONDITION", "SLOT", "SLOT_CLAIMS",
    },
    "admission.kube": {
        "ADMISSION_CHECKS", "ApiRetrySettings", "CLUSTER_QUEUES", "CONFIGMAPS", "Clock", "ClusterPort", "EVENTS", "KUEUE_GROUP",
        "KUEUE_VERSION", "KubePort", "KubeWatch", "LEASES", "LOCAL_QUEUES", "LabelSelector", "LeaderElector", "LeaderSettings",
        "ListResult", "ManualClock", "NODES", "Obj", "PODS", "RESOURCE_FLAVORS", "Resource", "SystemClock", "TOPOLOGIES",
        "WORKLOADS", "WatchEvent", "WatchStream", "api_client_from_kubeconfig", "errors", "newer", "object_key",
        "parse_label_selector", "reflect",
    },
    "admission.kube.errors": {
        "ApiError", "BadRequest", "Conflict", "Fenced", "Forbidden", "Gone", "Invalid", "NetworkError", "NotFound", "OutOfTime",
        "Retryable", "ServerError", "TooManyRequests", "Unauthorized", "error_for_status", "parse_retry_after", "retry",
    },
    "admission.queue": {
        "Need", "WaitingRoom", "fits_now", "settle_givers",
        "Candidate", "Gang", "Plan", "QueueRules", "plan_preemption",
        "NO_HINTS", "REASONS", "SIZE_BANDS", "Block", "Held", "QueueHints", "draining_domains", "largest_block", "plain_reason", "size_band",
        "DomainOutlook", "Estimate", "Outlook", "OwedGang", "OwedGangs", "Reservation", "Reservations", "Running", "RuntimeEstimator", "WaitOrSpan",
        "choose_target", "domain_outlook", "free_at", "should_move", "soonest", "wake_freed", "wake_released", "wake_suspended", "weigh", "SpanPrices", "span_stamp",
        "MAX_AHEAD", "Queued", "QueuedStart", "Waiter", "queued_start",
        "QueueCost", "span_queue_cost", "ends_before_gang", "gang_start", "wait_basis",
    },
    "admission.simulator": {
        "CHECK_NAME", "GPU_PERF_TAIL", "LLAMA3_70B_FP16", "read_azure_llm", "serve_on", "DEFAULT_SIZE_MIX", "INVARIANT_KEYS", "PROFILES_NAMESPACE", "SOURCES",
        "AtollPolicy", "CohortError", "CohortShape", "Comparison", "CostError", "CostParams", "Job", "JobKind", "JobShape", "MemoryCluster",
        "NodeGroup", "NodeMix", "OpenbTrace", "Policy", "PolicyError", "PreparedWorkload", "RunFailed", "SimResult",
        "SimSettings", "Slicing", "SweepSpec", "SyntheticParams", "TraceError", "TraceFormat", "WorkloadSpec", "available_cores",
        "build_snapshots", "cluster_gpus", "cluster_objects", "compare", "comparison_json", "load_cohort",
        "format_comparison", "format_islands", "parse_link_model", "format_sweep", "format_table", "gather_records", "make_job", "make_policies", "offered_load", "parse_bandwidths",
        "parse_comm_fraction", "parse_loads", "parse_overlap", "prepare_workload", "profiles_for_cluster", "quantities",
        "read_itp", "read_openb", "read_openb_nodes", "read_trace", "run_sweep", "scale_load", "seeds_of",
        "simulate", "slice_workload", "sliced_jobs", "split_into_pods", "summarize", "summary_lines",
        "synthetic_jobs", "verdict", "verdict_lines", "with_gpu_perf", "workload_jobs", "workload_object", "write_plots",
        "write_sweep_plots",
        "ReservationCell", "format_reservations", "reservation_cell", "reservation_variants", "reservations_goal", "reservations_json",
    },
    "admission.webhook": {
        "ANN_NODE", "ANN_PREVIOUS", "ANN_REPLACED", "ANN_SLOT", "CaBundlePublisher", "CertError", "MUTATE_PATH",
        "MUTATING_WEBHOOK_CONFIGURATIONS", "PinResult", "PodPinner", "REQUEUE_CONDITION", "ReviewError", "ServingCert", "Webhook",
        "WebhookCache", "WebhookServer", "WebhookSettings", "ensure_serving_cert", "merge_ca_bundle", "pod_rank", "review_time_left",
        "service_hosts",
    },
    "policies": {
        "DEFAULT_FABRIC_LINK", "DEFAULT_LINKS", "GROUP_NAME", "PROFILES_KEY", "REQUIRED_TOPOLOGY", "SLICE_REQUIRED_TOPOLOGY", "SLICE_SIZE",
        "TOPOLOGY_SPREADING", "Decision",
        "FlavorSettings", "FragmentationSettings", "LevelOverrides", "LinkSettings", "Outcome", "PodSetSpec", "Profile",
        "ProfileLevelError", "ProfilesDocument", "ProfilesError", "RetrySettings", "SpreadSettings", "TopologyHints", "WaitState",
        "WorkloadClass", "annotation_notes", "annotation_problems", "decide", "group_problems", "is_spreading_json", "load_profiles", "load_profiles_file", "podset_spec",
        "profiles_from_configmap", "read_topology_annotations",
    },
    "topology": {
        "COLLECTIVE_CONSTANTS", "DEFAULT_COMM_FRACTION", "ETA_RING_NET", "ETA_RING_NVL", "LINK_MODELS", "MAX_CHANNELS",
        "Collective", "CommJob", "CostModel", "GangShape", "Island", "allreduce", "calibration_table", "default_comm_fraction",
        "default_model_gb", "ring_allreduce_s", "slowdown_from_ratio", "step_slowdown",
        "CPU", "DEFAULT_PERF_BAND", "GPU", "HOSTNAME_LABEL", "LIMITS", "MAX_COUNT", "MAX_SLICE_LAYERS", "MEMORY", "NODE_OPERATORS", "PERF_RANKS", "PODS",
        "RESOURCE_NAMES", "Backend", "ClusterModel", "ClusterModelError", "DomainVerdict", "FlavorModel", "GraphLink",
        "KueueNode", "Level", "LinkPlacement", "Mode", "NodeConstraint", "NodeInfo", "NodeModel", "NodeRequirement", "Placement", "PlacementError",
        "PlacementRequest", "PodSetPlacement", "PodSetRequest", "ResourceVector", "SliceLayer", "SlicePlacement", "Snapshot",
        "Spread", "Taint", "TaintModel", "Toleration", "bottleneck_bandwidth", "build_kueue_leaves", "check_accelerator_resource",
        "describe_validation_error", "describe_yaml_error", "fabric_graph", "fabric_path", "find_placement", "fragmentation_index", "island_free_gpus", "kueue_leaves_from_snapshot", "kueue_place",
        "load_cluster_model", "load_yaml_model", "never_fits", "node_is_healthy", "parse_amount", "parse_cpu_milli",
        "parse_label_int", "read_yaml_file", "read_yaml_text", "untolerated_taints",
    },
}

# Test infrastructure (not shipped): pinned the same way, outside the product packages.
TEST_INFRA = {
    "tests.envtest": {
        "APISERVER_VERSION", "ApiServer", "Binaries", "CONTROL_PLANE_VERSION", "EnvtestError", "JOBSET_FRAMEWORK", "JOBSET_VERSION", "KUEUE_CRD_FILES",
        "KUEUE_MANIFEST_SHA256", "KUEUE_NAMESPACE", "KUEUE_VERSION", "KWOK_NODE_ANNOTATION", "KWOK_VERSION", "KueueCluster",
        "MIN_GO", "UNCACHED_RESOURCE", "adapt_for_old_apiservers", "apiserver_cache_dir", "cache_dir", "control_plane_cache_dir",
        "download_kueue_crds", "ensure_binaries", "ensure_current", "ensure_kueue_crds", "find_binaries", "find_current",
        "go_module_dir", "install_kueue_crds", "kueue_crd_dir", "kueue_crd_files", "kueue_manifest_url", "kueue_module_dir",
    },
}
PINNED = {**EXPECTED, **TEST_INFRA}


@pytest.mark.parametrize("package", sorted(PINNED))
def test_public_names_are_pinned_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert set(exported) == PINNED[package], (f"{package}.__all__ changed: added {sorted(set(exported) - PINNED[package])}, "
                                              f"removed {sorted(PINNED[package] - set(exported))}")
    assert len(exported) == len(set(exported)), f"{package}.__all__ lists a name twice"
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n)) or exported == sorted(exported)
    for name in exported:
        assert hasattr(module, name), f"{package}.{name} is exported but not defined"


def test_every_public_module_is_pinned() -> None:
    """Each package of admission/, topology/ and policies/, and each module without a leading
    underscore, is pinned above; a package without ``__all__`` (``admission``) exports nothing."""
    public = set()
    for path in (p for top in ("admission", "topology", "policies") for p in (ROOT / top).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        elif parts[-1].startswith("_"):
            continue
        module = importlib.import_module(".".join(parts))
        if hasattr(module, "__all__"):
            public.add(".".join(parts))
        else:
            own = [n for n, v in vars(module).items() if not n.startswith("_") and n != "annotations" and not isinstance(v, ModuleType)]
            assert own == [], f"{module.__name__} defines public names without an __all__"
    assert public == set(EXPECTED)


def test_the_controller_and_port_load_nothing_heavy_until_asked() -> None:
    """``atoll place`` reads Workloads through the controller package: neither the kubernetes
    client nor the controller's loop may come with it (a fresh interpreter shows what loads)."""
    import subprocess
    import sys

    code = ("import sys, admission.controller._workloads; "
            "print(sorted(m for m in ('kubernetes', 'admission.controller._loop', 'admission.kube._client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"

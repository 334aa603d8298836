"""The public surface of each package (engine, simulator, controller, cluster port) is a sorted,
importable ``__all__``; admission/ keeps its one-way layering without import cycles."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "topology": {
        "HOSTNAME_LABEL", "Backend", "ClusterModel", "ClusterModelError", "DomainVerdict", "FlavorModel", "GraphLink",
        "Level", "NodeInfo", "Placement", "PlacementError", "PlacementRequest", "PodSetPlacement", "PodSetRequest",
        "ResourceVector", "Snapshot", "Spread", "Taint", "Toleration", "bottleneck_bandwidth", "fabric_graph", "fabric_path",
        "find_placement", "fragmentation_index", "island_free_gpus", "load_cluster_model", "never_fits", "node_is_healthy",
        "untolerated_taints",
    },
    "policies": {
        "DEFAULT_FABRIC_LINK", "DEFAULT_LINKS", "LinkSettings", "PROFILES_KEY", "Decision", "FlavorSettings", "FragmentationSettings", "Outcome", "PodSetSpec", "Profile",
        "ProfileLevelError", "ProfilesDocument", "ProfilesError", "RetrySettings", "SpreadSettings", "WaitState",
        "WorkloadClass", "decide", "load_profiles", "load_profiles_file", "profiles_from_configmap",
    },
    "admission.controller": {
        "ANN_DECISION_ID", "ANN_PLANNED_NODES", "ClusterCache", "Controller", "Decider", "DecisionRecord", "Ledger",
        "Recorder", "Settings", "Verdict", "WorkloadError", "check_entry", "condition_true", "parse_object", "parse_workload",
        "read_wait_state",
    },
    "admission.kube": {
        "WORKLOADS", "ApiRetrySettings", "ClusterPort", "KubePort", "LeaderElector", "LeaderSettings", "ManualClock",
        "errors", "newer", "object_key",
    },
    "admission.simulator": {
        "DEFAULT_COMM_FRACTION", "DEFAULT_SIZE_MIX", "CostModel", "Job", "JobKind", "JobShape", "NodeGroup", "NodeMix",
        "OpenbTrace", "PolicyError", "PreparedWorkload", "SimResult", "SimSettings", "SyntheticParams", "TraceError",
        "TraceFormat", "default_model_gb", "format_table", "make_job", "make_policies", "offered_load", "prepare_workload",
        "read_itp", "read_openb", "read_openb_nodes", "read_trace", "ring_allreduce_s", "scale_load", "simulate",
        "split_into_pods", "step_slowdown", "summarize", "synthetic_jobs",
    },
}


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_public_names_are_pinned_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert set(exported) >= EXPECTED[package], f"missing from {package}.__all__: {EXPECTED[package] - set(exported)}"
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n)) or exported == sorted(exported)
    for name in exported:
        assert hasattr(module, name), f"{package}.{name} is exported but not defined"


def test_the_controller_and_port_load_nothing_heavy_until_asked() -> None:
    """``atoll place`` reads Workloads through the controller package: neither the kubernetes
    client nor the controller's loop may come with it (a fresh interpreter shows what loads)."""
    import subprocess
    import sys

    code = ("import sys, admission.controller._workloads; "
            "print(sorted(m for m in ('kubernetes', 'admission.controller._loop', 'admission.kube._client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"

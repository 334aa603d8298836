"""The public surface of each engine package, and of the simulator, is a sorted, importable ``__all__``."""

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

"""Reading Workloads, Jobs and JobSets: counts, resources, annotations, and field-named errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from admission.controller import WorkloadError, load_workload_file, parse_object, parse_workload
from topology import ResourceVector, Toleration

EXAMPLES = Path(__file__).resolve().parents[3] / "config" / "workloads"


def workload(**ann: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "queueName": "lq",
            "podSets": [
                {"name": "prefill", "count": 2, "template": {"metadata": {"annotations": dict(ann)}, "spec": {
                    "containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": 4, "cpu": "8", "memory": "64Gi"}}},
                                   {"name": "side", "resources": {"requests": {"cpu": "500m"}}}],
                    "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "16"}}}]}}},
                {"name": "decode", "count": 4, "template": {"metadata": {"annotations": {}}, "spec": {
                    "nodeSelector": {"pool": "serving"},
                    "containers": [{"name": "b", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}},
            ],
        },
    }


def test_workload_podsets_resources_and_template_keys() -> None:
    view = parse_workload(workload())
    assert view.key == "ns/w" and view.local_queue == "ns/lq" and view.uid == "u-1"
    prefill, decode = view.podsets
    assert prefill.per_pod == ResourceVector(4, 16000, 65536, 0)  # init container's 16 CPUs dominate 8.5
    assert decode.per_pod == ResourceVector(gpu=2)  # limits stand in for requests
    assert view.templates["decode"].node_selector == {"pool": "serving"}


def test_admission_counts_and_flavors_win() -> None:
    obj = workload()
    obj["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "prefill", "count": 1, "flavors": {"nvidia.com/gpu": "gb200"}},
        {"name": "decode", "count": 4, "flavors": {"nvidia.com/gpu": "gb200"}}]}}
    view = parse_workload(obj)
    assert view.podsets[0].count == 1 and view.cluster_queue == "cq" and view.flavors == {"prefill": "gb200", "decode": "gb200"}


def test_annotations_profile_class_hints_and_links() -> None:
    obj = workload(**{"atoll.dev/profile": "strict", "atoll.dev/class": "inference",
                      "kueue.x-k8s.io/podset-required-topology": "nvidia.com/gpu.clique"})
    obj["spec"]["podSets"][1]["template"]["metadata"]["annotations"] = {
        "atoll.dev/near": "prefill", "atoll.dev/near-min-bandwidth-gbps": "400"}
    view = parse_workload(obj)
    assert view.profile == "strict" and view.workload_class == "inference"
    assert view.podsets[0].required_topology == "nvidia.com/gpu.clique"
    assert view.links[0].a == "prefill" and view.links[0].b == "decode" and view.links[0].min_bandwidth_gbps == 400


def _mutate(path: list[Any], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(workload())
    cur = obj
    for key in path[:-1]:
        cur = cur[key]
    if value is _DELETE:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return obj


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["spec", "podSets"], [], "spec.podSets: at least one PodSet"),
        (["spec", "podSets", 0, "count"], -1, "spec.podSets[0].count: must not be negative"),
        (["spec", "podSets", 0, "count"], 10**30, "spec.podSets[0].count: 1000000000000000000000000000000 exceeds the limit of 1000000 pods"),
        (["spec", "podSets", 0, "count"], "two", "spec.podSets[0].count: expected a whole number, got 'two'"),
        (["spec", "podSets", 1, "name"], "prefill", "names must be unique"),
        (["spec", "podSets", 0, "template", "spec", "containers"], [], "spec.podSets[0].template.spec.containers"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"], "1.5",
         "spec.podSets[0].template.spec.containers[0].resources.requests.nvidia.com/gpu"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "memory"], "lots",
         "containers[0].resources.requests.memory"),
        (["spec", "podSets", 0, "template", "metadata", "annotations"], {"atoll.dev/near": "ghost", "atoll.dev/near-level": "x"},
         "spec.podSets[0].template.metadata.annotations[atoll.dev/near]: 'ghost' is not another PodSet"),
        (["spec", "podSets", 0, "template", "metadata", "annotations"], {"atoll.dev/near": "decode"}, "set exactly one of"),
        (["spec", "podSets", 0, "template", "metadata", "annotations"], {"atoll.dev/near": "decode", "atoll.dev/near-min-bandwidth-gbps": "fast"},
         "is not a number"),
        (["spec", "podSets", 0, "template", "spec", "tolerations"], [{"key": "k", "operator": "In"}], "spec.podSets[0].template.spec.tolerations[0].operator: 'In' is not Equal or Exists"),
        (["spec", "podSets", 0, "template", "spec", "tolerations"], [{"key": "k", "effect": "NoRun"}], "spec.podSets[0].template.spec.tolerations[0].effect: 'NoRun' is not"),
        (["spec", "podSets", 0, "template", "spec", "tolerations"], [{"key": "k", "operator": "Exists", "value": "v"}], "tolerations[0].value: must be empty when operator is Exists"),
        (["spec", "podSets", 0, "template", "spec", "tolerations"], [{"value": "v"}], "tolerations[0].operator: must be Exists when key is empty"),
        (["spec", "podSets", 0, "template", "spec", "tolerations"], ["k"], "spec.podSets[0].template.spec.tolerations[0]: expected a mapping"),
        (["spec", "podSets", 0, "template", "spec", "tolerations"], {"key": "k"}, "spec.podSets[0].template.spec.tolerations: expected a list, got a mapping"),
        (["metadata", "name"], _DELETE, "metadata.name: required"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"], "1e30",
         "spec.podSets[0].template.spec.containers[0].resources.requests.nvidia.com/gpu: '1e30' exceeds the limit of 4096"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"], "²",
         "spec.podSets[0].template.spec.containers[0].resources.requests.nvidia.com/gpu: '²' is not a Kubernetes quantity"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"], "٤",
         "requests.nvidia.com/gpu: '٤' is not a Kubernetes quantity"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"], "1.2.3",
         "requests.nvidia.com/gpu: '1.2.3' is not a Kubernetes quantity"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"], float("inf"),
         "requests.nvidia.com/gpu: inf is not a finite quantity"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "cpu"], "1e30",
         "spec.podSets[0].template.spec.containers[0].resources.requests.cpu: '1e30' exceeds the limit"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "memory"], "9e99",
         "spec.podSets[0].template.spec.containers[0].resources.requests.memory: '9e99' exceeds the limit"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "cpu"], "1e999999",
         "requests.cpu: '1e999999' is out of range"),
        (["spec", "podSets", 0, "template", "spec", "containers"], [{"name": f"c{i}", "resources": {"requests": {"nvidia.com/gpu": 4096}}} for i in range(2)],
         "spec.podSets[0].template.spec.containers: the pod's gpu sum to 8192, above the limit of 4096"),
        (["spec", "podSets", 0, "template", "spec", "containers", 0, "resources", "requests", "pods"], "1e30",
         "requests.pods: '1e30' exceeds the limit of 1000000"),
        (["status"], {"admission": {"podSetAssignments": [{"name": "prefill", "count": 10**9}]}},
         "status.admission.podSetAssignments[0].count: 1000000000 exceeds the limit of 1000000 pods"),
        (["spec", "podSets", 0, "template", "metadata", "annotations"], {"atoll.dev/near": "decode", "atoll.dev/near-min-bandwidth-gbps": "²"},
         "atoll.dev/near-min-bandwidth-gbps]: '²' is not a number"),
        (["spec", "podSets", 0, "template", "metadata", "annotations"], {"atoll.dev/near": "decode", "atoll.dev/near-min-bandwidth-gbps": "nan"},
         "atoll.dev/near-min-bandwidth-gbps]: 'nan' is not a number"),
        (["spec", "podSets", 0, "template", "metadata", "annotations"], {"atoll.dev/near": "decode", "atoll.dev/near-min-bandwidth-gbps": "1e30"},
         "must be > 0 and at most 1e6 GB/s"),
    ],
)
def test_malformed_workloads_name_the_field(path: list[Any], value: Any, message: str) -> None:
    with pytest.raises(WorkloadError) as err:
        parse_workload(_mutate(path, value))
    assert message in str(err.value)


def test_count_zero_podset_has_nothing_to_place() -> None:
    obj = _mutate(["spec", "podSets", 0, "count"], 0)
    view = parse_workload(obj)
    assert [p.name for p in view.podsets] == ["decode"] and view.empty_podsets == ("prefill",)
    assert "prefill" in view.templates  # still known, for messages and conflicts


def test_job_with_parallelism_zero_has_nothing_to_place() -> None:
    job = {"kind": "Job", "metadata": {"name": "j", "namespace": "ns"}, "spec": {"parallelism": 0, "template": {"spec": {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}
    view = parse_object(job)
    assert view.podsets == () and view.empty_podsets == ("main",)


def test_pod_template_tolerations_reach_the_podset() -> None:
    obj = workload()
    obj["spec"]["podSets"][0]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists"},
        {"key": "dedicated", "value": "ml", "tolerationSeconds": 30}]
    prefill, decode = parse_workload(obj).podsets
    assert prefill.tolerations == (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"), Toleration("", "Exists"),
                                   Toleration("dedicated", "Equal", "ml", ""))
    assert decode.tolerations == ()


def test_podsets_must_agree_on_profile() -> None:
    obj = workload(**{"atoll.dev/profile": "strict"})
    obj["spec"]["podSets"][1]["template"]["metadata"]["annotations"] = {"atoll.dev/profile": "elastic"}
    with pytest.raises(WorkloadError, match="disagree on annotation atoll.dev/profile"):
        parse_workload(obj)


def test_examples_job_and_jobset() -> None:
    job = load_workload_file(EXAMPLES / "training-job.yaml")
    assert job.podsets[0].count == 16 and job.podsets[0].per_pod.gpu == 4 and job.local_queue == "team-a/research"
    graph = load_workload_file(EXAMPLES / "serving-graph.yaml")
    assert [p.name for p in graph.podsets] == ["prefill", "decode"] and graph.links[0].min_bandwidth_gbps == 400
    assert load_workload_file(EXAMPLES / "workload.yaml").podsets[0].required_topology == "nvidia.com/gpu.clique"


def test_unsupported_kind_and_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="kind: 'Deployment' is not supported"):
        parse_object({"kind": "Deployment", "metadata": {"name": "x"}, "spec": {}})
    bad = tmp_path / "w.yaml"
    bad.write_text("kind: [\n")
    with pytest.raises(WorkloadError, match="w.yaml: not valid YAML"):
        load_workload_file(bad)
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload_file(tmp_path / "missing.yaml")


@pytest.mark.parametrize("status", [True, {"conditions": "x", "admissionChecks": [1, None]}, {"conditions": None}])
def test_status_lookups_read_malformed_status_as_absent(status: Any) -> None:
    from admission.controller import check_entry, condition_true

    obj = {"metadata": {"name": "w"}, "status": status}
    assert check_entry(obj, ["atoll"]) is None and condition_true(obj, "QuotaReserved") is False

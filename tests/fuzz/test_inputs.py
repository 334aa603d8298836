"""Hostile input never crashes Atoll: each reader answers with its own error naming what is wrong,
or takes the input with a stated problem, and a decision is always a verdict.

``ATOLL_FUZZ_EXAMPLES`` sets the cases per test (``make fuzz`` runs 10,000 each); the default
keeps the suite fast.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from admission.controller import ClusterCache, Decider, Ledger, Settings, WorkloadError, node_info, parse_workload
from admission.kube import NODES, RESOURCE_FLAVORS, TOPOLOGIES
from admission.simulator import TraceError, read_itp
from policies import ProfilesError, load_profiles, profiles_from_configmap
from tests.fuzz.strategies import BLOCK, CLIQUE, GPU, itp_rows, nodes, profiles_documents, workloads

EXAMPLES = int(os.environ.get("ATOLL_FUZZ_EXAMPLES", "150"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 150,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


def _cache() -> ClusterCache:
    """A GB200-like flavor of four 4-GPU nodes in two cliques, mapped by a valid profiles document."""
    cache = ClusterCache(GPU)
    cache.set_profiles(load_profiles(yaml.safe_dump({
        "defaultProfile": "strict", "flavors": {"gb200": {"topology": "nvl72"}},
        "profiles": {"strict": {"requiredLevel": CLIQUE}, "elastic": {"preferredLevel": CLIQUE, "relaxAfterSeconds": 300}},
        "classes": {"training": {"perfFloor": 0.9}, "inference": {"spread": {"level": CLIQUE, "maxPerDomain": 1}}},
    })))
    cache.upsert(TOPOLOGIES, {"metadata": {"name": "nvl72"}, "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": CLIQUE}]}})
    cache.upsert(RESOURCE_FLAVORS, {"metadata": {"name": "gb200"}, "spec": {"nodeLabels": {"pool": "gb200"}}})
    for i in range(4):
        cache.upsert(NODES, {"metadata": {"name": f"n{i}", "labels": {"pool": "gb200", BLOCK: "b0", CLIQUE: f"c{i // 2}",
                                                                     "kubernetes.io/hostname": f"n{i}"}},
                             "spec": {}, "status": {"allocatable": {GPU: "4", "cpu": "64", "memory": "512Gi", "pods": "110"},
                                                    "conditions": [{"type": "Ready", "status": "True"}]}})
    return cache


DECIDER = Decider(_cache(), Ledger(GPU), Settings())


@fuzz
@given(workloads())
def test_a_workload_is_read_or_refused_naming_the_field(obj: dict[str, Any]) -> None:
    try:
        view = parse_workload(obj, gpu_resource=GPU)
    except WorkloadError as exc:
        assert str(exc).strip(), "a refusal must say what is wrong"
        return
    for spec in view.podsets:
        assert spec.count >= 0 and spec.per_pod.gpu >= 0


@fuzz
@given(workloads())
def test_every_workload_gets_a_verdict_never_an_exception(obj: dict[str, Any]) -> None:
    verdict = DECIDER.evaluate(obj, "fuzz", 1_800_000_000.0)
    assert verdict.outcome in ("admit", "wait", "reject")
    assert verdict.message.strip()
    if verdict.outcome == "reject":
        assert "Rejected" in verdict.message


@fuzz
@given(nodes())
def test_a_node_is_taken_or_left_out_with_its_problem(obj: dict[str, Any]) -> None:
    info, problem = node_info(obj, GPU)
    if info is None:
        assert problem and obj["metadata"]["name"] in problem
    else:
        assert info.allocatable.gpu >= 0 and info.perf > 0
        if problem:
            assert not info.ready and obj["metadata"]["name"] in problem


@fuzz
@given(profiles_documents())
def test_a_profiles_document_is_loaded_or_refused_with_the_configmap_named(doc: Any) -> None:
    try:
        text = yaml.safe_dump(doc)
    except yaml.YAMLError:
        return
    try:
        profiles_from_configmap({"profiles.yaml": text}, name="atoll-system/atoll-policies")
    except ProfilesError as exc:
        assert "atoll-system/atoll-policies" in str(exc)


def test_unsafe_yaml_tags_are_refused_not_executed() -> None:
    with pytest.raises(ProfilesError):
        load_profiles("defaultProfile: !!python/object/apply:os.system ['true']\n")


@fuzz
@given(rows=itp_rows.map(lambda r: [r]) | __import__("hypothesis").strategies.lists(itp_rows, max_size=4))
def test_an_itp_row_is_read_or_refused_naming_line_and_column(rows: list[tuple[str, str, str, str]], tmp_path_factory: Any) -> None:
    path = Path(tmp_path_factory.mktemp("itp")) / "trace.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["job_id", "submission_time", "duration", "num_gpu"])
        writer.writerows(rows)
    try:
        jobs = read_itp(path)
    except TraceError as exc:
        assert str(path) in str(exc)
        return
    assert len(jobs) == len(rows) and all(j.gpus >= 1 for j in jobs)

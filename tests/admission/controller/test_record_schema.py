"""The decision record's contract: ``schema: atoll.dev/decision/v1`` on every record, the shipped
JSON Schema every record meets, a compatibility pin that fails when a field is removed or
renamed without a version bump, and (on the real apiserver) the ledger's view and the blocking
Workloads in a waiting Workload's record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from admission import vocabulary
from admission.controller._records import DECISION_SCHEMA, DecisionRecord, PodSetRecord, WhyNotRecord
from admission.controller._schema import SCHEMA_FILE, decision_schema, record_problems
from tests.admission.fabric import Fabric, planned, run

ROOT = Path(__file__).resolve().parents[3]

V1_FIELDS: dict[str, set[str]] = {
    "": {"schema", "event", "decision_id", "time", "workload", "namespace", "uid", "local_queue", "cluster_queue", "flavor",
         "profile", "workload_class", "outcome", "check_state", "message", "placement", "why_not", "retry_after_seconds", "attempts",
         "relaxed", "latency_ms", "snapshot_generation", "reserved_gpus", "notes", "controller", "lease_term", "reason",
         "first_waited_at", "waited_seconds", "inputs"},
    "inputs": {"workload", "profiles", "resource_flavors", "topologies"},
    "$defs/podset": {"podset", "pods", "gpus_per_pod", "nodes", "domain_level", "domain_path", "islands", "island_level", "min_perf",
                     "max_perf", "bottleneck_gbps", "node_selector", "slices", "ledger"},
    "$defs/slice": {"index", "level", "domain", "pods", "nodes", "held", "held_by"},
    "$defs/why_not": {"podset", "level", "domain_path", "capacity_pods", "need_pods", "reason", "ledger"},
    "$defs/ledger": {"owed_pods", "reserved_gpus", "bound_gpus", "holders", "workloads"},
    "$defs/wait_or_span": {"flavor", "kind", "expected_wait_seconds", "wait_error_seconds", "wait_basis", "span_slowdown", "chose"},
}
"""The required fields of atoll.dev/decision/v1, per object, as released. Fields may be added in
v1 (optional, or required with every writer writing them); removing or renaming one breaks readers
and takes a new version, with a new pin beside this one."""


def _object(schema: dict[str, Any], where: str) -> dict[str, Any]:
    node = schema
    for part in [p for p in where.split("/") if p]:
        node = node[part] if part == "$defs" or part in node else node["properties"][part]
    return node


def test_the_version_is_v1_and_its_pin_holds() -> None:
    """A removed or renamed required field fails here unless the version changes too."""
    assert DECISION_SCHEMA == vocabulary.DECISION_SCHEMA == "atoll.dev/decision/v1", (
        "a new record version needs its own pin of required fields in this test (and a new schema file)")
    schema = decision_schema()
    assert schema["properties"]["schema"] == {"const": DECISION_SCHEMA, "description": "This schema's name and version."}
    for where, fields in V1_FIELDS.items():
        node = _object(schema, where)
        missing = fields - set(node["required"])
        assert not missing, f"{where or 'record'}: v1 fields {sorted(missing)} removed or renamed without a version bump"
        assert fields <= set(node["properties"]), f"{where or 'record'}: required but undeclared"
        assert node.get("additionalProperties", True) is not False, f"{where or 'record'}: v1 objects must accept added fields"


def test_the_schema_file_is_valid_json_schema_and_ships_in_the_package() -> None:
    Draft202012Validator.check_schema(decision_schema())
    assert (ROOT / "admission" / "controller" / SCHEMA_FILE).is_file()
    text = (ROOT / "pyproject.toml").read_text()
    assert '"admission.controller" = ["*.schema.json"]' in text
    assert SCHEMA_FILE in (ROOT / "README.md").read_text()


def _record(**kw: Any) -> dict[str, Any]:
    ledger = {"owed_pods": 2, "reserved_gpus": 8, "bound_gpus": 0, "holders": 1,
              "workloads": [{"workload": "ns/a", "owed_pods": 2, "reserved_gpus": 8, "bound_gpus": 0}]}
    rec = DecisionRecord("d1", "2026-11-24T00:00:00Z", "w", "ns", "uid", "ns/lq", "cq", "gb200", "strict", "", "admit", "Ready", "placed",
                         placement=(PodSetRecord("main", 2, 4, {"n0": 1, "n1": 1}, "clique", ["b0", "c0"], 1, "clique", 1.0, 1.0, 900.0,
                                                 {"clique": "c0"}, (), ledger),),
                         why_not=(WhyNotRecord("main", "clique", ["b0", "c1"], 0, 2, "fits 0 of 2 pods", ledger),),
                         lease_term=1, inputs={"workload": "12", "profiles": "7", "resource_flavors": {"gb200": "3"}, "topologies": {}})
    out = {"event": "decision", **rec.as_dict()}
    out.update(kw)
    return out


def test_a_record_meets_the_schema_and_a_broken_one_is_named_by_field() -> None:
    assert record_problems(_record()) == []
    assert record_problems(_record(extra_field_a_later_v1_adds={"any": 1})) == []  # added fields do not break v1 readers
    assert record_problems(_record(waited_seconds=-1)) == ["waited_seconds: -1 is less than the minimum of 0"]
    bad = _record()
    del bad["placement"][0]["ledger"]
    assert record_problems(bad) == ["placement.0: 'ledger' is a required property"]
    assert record_problems(_record(schema="atoll.dev/decision/v0")) == [
        "schema: 'atoll.dev/decision/v0' is not atoll.dev/decision/v1 (this atoll reads atoll.dev/decision/v1 only)"]
    old = _record()
    del old["schema"]
    assert record_problems(old)[0].startswith("schema: missing")


WEIGHED = {"flavor": "gb200", "kind": "span", "domain": "b0/c0", "expected_wait_seconds": 1200.0, "wait_error_seconds": 0.0,
           "wait_basis": "limits", "queued_ahead": None, "wait_weight": 1.0, "span_slowdown": 1.15, "expected_runtime_seconds": 3600.0,
           "runtime_error_seconds": 40.0, "runtime_basis": "learned", "span_cost_seconds": 540.0, "queue_cost_seconds": None, "chose": "span"}


def test_the_wait_or_span_field_is_optional_and_checked_when_present() -> None:
    """Records written before the field existed stay valid; a written one is checked by field."""
    assert record_problems(_record(wait_or_span=[WEIGHED])) == []
    assert record_problems(_record(wait_or_span=[{**WEIGHED, "expected_wait_seconds": None, "wait_basis": None, "chose": None}])) == []
    old = _record()
    del old["wait_or_span"]
    assert record_problems(old) == []
    assert record_problems(_record(wait_or_span=[{**WEIGHED, "chose": "both"}])) == [
        "wait_or_span.0.chose: 'both' is not one of ['wait', 'span', None]"]
    for basis in ("queue", "limits+queue", "learned+queue", "limits+learned+queue"):  # the queue ahead, added within v1
        assert record_problems(_record(wait_or_span=[{**WEIGHED, "wait_basis": basis, "queued_ahead": 2}])) == []
    assert record_problems(_record(wait_or_span=[{**WEIGHED, "wait_basis": "queue+limits"}]))[0].startswith(
        "wait_or_span.0.wait_basis: 'queue+limits' is not one of")
    missing = dict(WEIGHED)
    del missing["wait_basis"]
    assert record_problems(_record(wait_or_span=[missing])) == ["wait_or_span.0: 'wait_basis' is a required property"]


@pytest.mark.apiserver
def test_a_waiting_workloads_record_names_who_holds_each_losing_domain(fabric: Fabric) -> None:
    """Two one-island Workloads fill both islands of a block (one owed, one bound); the third waits,
    and its record names both as the holders, with the ledger's numbers, the inputs' versions and
    its wait; a later admit carries the whole wait."""
    fabric.install(nodes=False)
    for c in range(2):
        for i in range(2):
            fabric.add_node(0, c, i)
    ctrl = fabric.controller()
    fabric.submit("a", [("main", 2, 4)])
    fabric.submit("b", [("main", 2, 4)])
    assert [v.outcome for v in run(ctrl)] == ["admit", "admit"]
    entry_b = fabric.entry("b")
    decision_b = entry_b["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"]
    for i, node in enumerate(sorted(planned(entry_b))):  # B's pods bind: B holds its island by bound GPUs, A by owed pods
        fabric.bind_pod(f"b-{i}", node, 4, decision_id=decision_b)
    fabric.clock.advance(5)
    fabric.submit("c", [("main", 2, 4)])
    (verdict,) = run(ctrl)
    assert verdict.outcome == "wait", verdict.message
    rec = fabric.decision_records()[-1]
    assert rec["workload"] == "c" and record_problems(rec) == []
    assert rec["schema"] == "atoll.dev/decision/v1" and rec["reason"] == "no-domain"
    assert rec["waited_seconds"] == 0 and rec["first_waited_at"] == rec["time"]  # its first wait begins now
    holders = {w["domain_path"][-1]: w["ledger"] for w in rec["why_not"]}
    clique_a = next(c for c, led in holders.items() if led["owed_pods"])
    clique_b = next(c for c, led in holders.items() if led["bound_gpus"])
    assert holders[clique_a]["workloads"] == [{"workload": f"{fabric.ns}/a", "owed_pods": 2, "reserved_gpus": 8, "bound_gpus": 0}]
    assert holders[clique_b]["workloads"] == [{"workload": f"{fabric.ns}/b", "owed_pods": 0, "reserved_gpus": 0, "bound_gpus": 8}]
    assert holders[clique_a]["reserved_gpus"] == 8 and holders[clique_b]["owed_pods"] == 0
    inputs = rec["inputs"]
    assert str(inputs["workload"]).isdigit() and int(inputs["workload"]) < int(fabric.workload("c")["metadata"]["resourceVersion"])
    assert inputs["profiles"] and set(inputs["resource_flavors"]) == {fabric.flavor} and set(inputs["topologies"]) == {fabric.topology}

    fabric.finish("a")  # A's island frees; C is decided again after Kueue requeues it
    fabric.clock.advance(40)
    fabric.requeue("c")
    (verdict,) = run(ctrl)
    assert verdict.outcome == "admit", verdict.message
    admitted = fabric.decision_records()[-1]
    assert record_problems(admitted) == []
    assert admitted["waited_seconds"] >= 40 and admitted["first_waited_at"] == rec["first_waited_at"]
    (placed,) = admitted["placement"]
    assert placed["ledger"] == {"owed_pods": 0, "reserved_gpus": 0, "bound_gpus": 0, "holders": 0, "workloads": []}
    json.dumps(admitted)


def test_the_records_guide_names_every_field_of_the_schema() -> None:
    guide = (ROOT / "docs" / "records.md").read_text()
    schema = decision_schema()
    names = set(schema["properties"]) - {"schema", "event"}
    for where in ("$defs/podset", "$defs/ledger"):
        names |= set(_object(schema, where)["properties"])
    missing = sorted(n for n in names if f"`{n}`" not in guide and f"`{n}[]`" not in guide)
    assert missing == [], f"docs/records.md does not describe {missing}"


DECISION_WAIT_REASONS = ("no-domain", "relax-pending", "owed-pods", "behind-gang", "config", "node-lost")
"""The reasons a decision that waits writes in its record (and counts in ``atoll_waiting_workloads``)."""


def test_the_records_guide_and_the_schema_name_every_reason_a_waiting_record_carries() -> None:
    from admission.queue import REASONS

    guide = next(line for line in (ROOT / "docs" / "records.md").read_text().splitlines() if line.startswith("| `reason` |"))
    said = decision_schema()["properties"]["reason"]["description"]
    for reason in DECISION_WAIT_REASONS:
        assert reason in REASONS, reason  # explained in docs/queue.md's table of reasons
        assert f"`{reason}`" in guide, f"docs/records.md's reason row leaves out {reason}"
        assert reason in said, f"the schema's reason description leaves out {reason}"

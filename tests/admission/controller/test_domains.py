"""The decision record ``build_record`` writes names the Workload's queues as the schema wants
them: ``local_queue`` is ``namespace/queueName``, a string even for a Workload naming no
LocalQueue, and the record meets the shipped schema either way."""

from __future__ import annotations

import io
import json
from typing import Any

from admission.controller._cache import ClusterCache
from admission.controller._decide import Verdict
from admission.controller._domains import build_record
from admission.controller._records import Recorder
from admission.controller._schema import record_problems
from tests.kube_objects import workload

NOW = 1_780_000_000.0


def record_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The record of a wait decided on ``obj``, as the recorder writes it."""
    verdict = Verdict("wait", "waits for a domain", profile="strict", flavor="gb200", reason="no-domain", decision_id="d-1")
    out = io.StringIO()
    Recorder(out).record(build_record(obj, verdict, ClusterCache(), frozenset(), now=NOW, latency=0.001, attempts=1, controller="",
                                      term=None, profiles_rv=None))
    record: dict[str, Any] = json.loads(out.getvalue())
    assert record_problems(record) == [], record_problems(record)
    return record


def test_the_record_names_the_local_queue_and_a_workload_naming_none_gets_its_namespace_and_a_slash() -> None:
    assert record_of(workload("team-a", "w", [("main", 1, 4)], queue="train"))["local_queue"] == "team-a/train"
    unnamed = workload("team-a", "w", [("main", 1, 4)])
    del unnamed["spec"]["queueName"]
    assert record_of(unnamed)["local_queue"] == "team-a/"
    unnamed["spec"]["queueName"] = None  # a null written out: no queue either, not a queue called "None"
    assert record_of(unnamed)["local_queue"] == "team-a/"

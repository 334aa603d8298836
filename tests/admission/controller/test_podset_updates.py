"""What goes into podSetUpdates: a domain per PodSet (a serving graph gets two), nothing that
conflicts with the pod template, and Atoll touching only its own entry."""

from __future__ import annotations

import json

import pytest

from tests.admission.fabric import BLOCK, CLIQUE, Fabric, planned, run

pytestmark = pytest.mark.apiserver


def test_each_podset_gets_its_own_domain_within_the_link_bound(fabric: Fabric) -> None:
    fabric.install()
    near = {"atoll.dev/near": "prefill", "atoll.dev/near-level": BLOCK}
    fabric.submit("serve", [("prefill", 2, 4), ("decode", 2, 4)], podset_annotations={"decode": near})
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("serve")
    assert verdict.outcome == "admit" and [u["name"] for u in entry["podSetUpdates"]] == ["prefill", "decode"]
    prefill, decode = (u["nodeSelector"][CLIQUE] for u in entry["podSetUpdates"])
    assert prefill != decode and prefill[: prefill.rindex("c")] == decode[: decode.rindex("c")]  # two islands of one block
    assert set(planned(entry, "prefill")).isdisjoint(planned(entry, "decode"))
    ids = {u["annotations"]["atoll.dev/decision-id"] for u in entry["podSetUpdates"]}
    assert ids == {verdict.decision_id}
    assert [u["labels"] for u in entry["podSetUpdates"]] == [{"atoll.dev/decision-id": verdict.decision_id}] * 2  # what selects the pods


def test_template_selector_narrows_the_candidates_and_is_not_repeated(fabric: Fabric) -> None:
    fabric.install()
    pinned = fabric.clique(1, 0)
    fabric.submit("pinned", [("main", 2, 4)], node_selector={CLIQUE: pinned})
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("pinned")
    assert verdict.outcome == "admit" and all(n.startswith(pinned + "n") for n in planned(entry))
    assert "nodeSelector" not in entry["podSetUpdates"][0]  # the template already says it; additive only
    assert "|" not in entry["message"]


def test_conflicting_template_keys_are_not_written_and_said_so(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("copied", [("main", 2, 4)], podset_annotations={"main": {"atoll.dev/decision-id": "from-an-old-run"}})
    (verdict,) = run(fabric.controller())
    entry = fabric.entry("copied")
    update = entry["podSetUpdates"][0]
    assert entry["state"] == "Ready" and "atoll.dev/decision-id" not in update["annotations"]
    assert "atoll.dev/planned-nodes" in update["annotations"]
    assert "not writing annotation atoll.dev/decision-id" in entry["message"] and "already sets atoll.dev/decision-id=from-an-old-run" in entry["message"]


def test_atoll_owns_only_its_own_entry_and_condition(fabric: Fabric) -> None:
    fabric.install()
    ctrl = fabric.controller()
    fabric.submit("ok", [("main", 2, 4)])
    fabric.submit("huge", [("main", 9, 4)])  # 36 GPUs: more than the whole 32-GPU flavor, rejected
    run(ctrl)
    for name in ("ok", "huge"):
        (mine,) = [m for m in fabric.workload(name)["metadata"]["managedFields"] if m["manager"] == "atoll"]
        fields = mine["fieldsV1"]
        assert list(fields) == ["f:status"] and list(fields["f:status"]) == ["f:admissionChecks"]
        assert list(fields["f:status"]["f:admissionChecks"]) == ['k:' + json.dumps({"name": fabric.check}, separators=(",", ":"))]
    ac = fabric.custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "admissionchecks", fabric.check)
    (mine,) = [m for m in ac["metadata"]["managedFields"] if m["manager"] == "atoll"]
    assert list(mine["fieldsV1"]["f:status"]["f:conditions"]) == ['k:{"type":"Active"}']

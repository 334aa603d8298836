"""Slots, ranks and the JSON patch: which planned node a pod's labels point to, and a patch that
keeps every node constraint the pod already had."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admission.controller import encode_planned
from admission.webhook._pin import (
    ANN_NODE,
    ANN_SLOT,
    PinError,
    choose_slot,
    pin_patch,
    pod_rank,
    read_exact_pod,
    taken_slots,
)


def exact_pod(planned: str = "n0=2,n1=1", labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
              spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team", "generateName": "train-",
                     "labels": {"atoll.dev/decision-id": "abc123", "kueue.x-k8s.io/podset": "main", **(labels or {})},
                     "annotations": {"atoll.dev/decision-id": "abc123", "atoll.dev/enforcement": "exact",
                                     "atoll.dev/planned-nodes": planned, **(annotations or {})}},
        "spec": {"nodeSelector": {"nvidia.com/gpu.clique": "c0"}, "containers": [{"name": "c", "image": "i"}], **(spec or {})},
    }


def apply_adds(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add`` (the only op the webhook emits), enough to read the patched pod."""
    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "add"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for p in parts[:-1]:
            target = target[int(p)] if isinstance(target, list) else target[p]
        last = parts[-1]
        if isinstance(target, list):
            target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
        else:
            assert last not in target, f"add over an existing key {op['path']}"
            target[last] = op["value"]
    return out


def test_slots_expand_planned_nodes_in_order_and_rankless_pods_take_the_first_free() -> None:
    pod = read_exact_pod(exact_pod("n0=2,n1=1"))
    assert pod is not None and pod.slots == ("n0", "n0", "n1") and pod.rank is None
    assert choose_slot(pod, set())[0] == 0
    assert choose_slot(pod, {0})[0] == 1
    assert choose_slot(pod, {0, 1, 2}) == (None, "all 3 planned slots are held by live pods")


def test_compressed_planned_nodes_read_like_plain_ones() -> None:
    packed = encode_planned([(f"node-{i:04d}", 1) for i in range(400)], 4096)
    assert packed is not None and packed.startswith("zlib+b64:")
    pod = read_exact_pod(exact_pod(packed))
    assert pod is not None and pod.slots[399] == "node-0399"


@pytest.mark.parametrize(("labels", "annotations", "slots", "rank"), [
    ({"batch.kubernetes.io/job-completion-index": "2"}, {}, 4, 2),
    ({}, {"batch.kubernetes.io/job-completion-index": "3"}, 4, 3),  # before 1.28 the index was an annotation only
    ({"batch.kubernetes.io/job-completion-index": "4"}, {}, 4, None),  # out of range: greedy, as Kueue's ungater
    ({"batch.kubernetes.io/job-completion-index": "x"}, {}, 4, None),
    # JobSet: 2 replicated Jobs of 3 pods; Job 1, completion index 2 → rank 1*3+2
    ({"jobset.sigs.k8s.io/job-index": "1", "batch.kubernetes.io/job-completion-index": "2",
      "jobset.sigs.k8s.io/replicatedjob-replicas": "2"}, {}, 6, 5),
    ({"jobset.sigs.k8s.io/job-index": "1", "batch.kubernetes.io/job-completion-index": "2"}, {}, 6, None),  # replicas unknown
    # LeaderWorkerSet: a group of 4 in one PodSet, worker index 0..3
    ({"leaderworkerset.sigs.k8s.io/worker-index": "3"}, {}, 4, 3),
    # workers in a PodSet of their own (the leader is another): Kueue's offset annotation shifts them down
    ({"leaderworkerset.sigs.k8s.io/worker-index": "1"}, {"kueue.x-k8s.io/pod-index-offset": "1"}, 3, 0),
    ({}, {}, 4, None),
])
def test_rank_from_index_labels(labels: dict[str, str], annotations: dict[str, str], slots: int, rank: int | None) -> None:
    assert pod_rank(labels, annotations, slots) == rank


def test_a_ranked_pod_takes_its_slot_and_falls_back_when_a_live_pod_holds_it() -> None:
    pod = read_exact_pod(exact_pod("n0=2,n1=2", labels={"batch.kubernetes.io/job-completion-index": "2"}))
    assert pod is not None
    assert choose_slot(pod, {0}) == (2, "rank 2")
    assert choose_slot(pod, {0, 2})[0] == 1


def test_live_pods_hold_their_slots_and_bound_pods_without_one_hold_a_slot_of_their_node() -> None:
    slots = ("n0", "n0", "n1")
    slotted = {"metadata": {"annotations": {ANN_SLOT: "2"}}, "spec": {}}
    unslotted = {"metadata": {}, "spec": {"nodeName": "n0"}}
    stray = {"metadata": {}, "spec": {"nodeName": "elsewhere"}}
    assert taken_slots(slots, [slotted, unslotted, stray]) == {0, 2}


def test_pods_without_exact_enforcement_are_not_read() -> None:
    plain = exact_pod()
    del plain["metadata"]["annotations"]["atoll.dev/enforcement"]
    assert read_exact_pod(plain) is None
    assert read_exact_pod({"metadata": {"name": "x"}}) is None


@pytest.mark.parametrize(("planned", "fragment"), [
    (None, "missing"),
    ("n0=two", "is not node=pods"),
    ("zlib+b64:!!", "compressed value unreadable"),
    ("", "names no node"),
])
def test_unreadable_planned_nodes_name_the_annotation(planned: str | None, fragment: str) -> None:
    pod = exact_pod()
    if planned is None:
        del pod["metadata"]["annotations"]["atoll.dev/planned-nodes"]
    else:
        pod["metadata"]["annotations"]["atoll.dev/planned-nodes"] = planned
    with pytest.raises(PinError, match="atoll.dev/planned-nodes") as info:
        read_exact_pod(pod)
    assert fragment in str(info.value)


def test_a_decision_id_that_cannot_select_pods_is_named() -> None:
    """The id selects the decision's pods (a label selector): one that is no label value, from an
    annotation nobody validated, is refused before it reaches a selector."""
    pod = exact_pod()
    del pod["metadata"]["labels"]["atoll.dev/decision-id"]
    pod["metadata"]["annotations"]["atoll.dev/decision-id"] = "abc,kueue.x-k8s.io/podset"
    with pytest.raises(PinError, match=r"metadata\.labels\[atoll\.dev/decision-id\]: 'abc,kueue.x-k8s.io/podset' is not a label value"):
        read_exact_pod(pod)


HOST_IN_N1 = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}


def test_the_patch_adds_a_required_hostname_affinity_and_the_slot_annotations() -> None:
    pod = exact_pod()
    out = apply_adds(pod, pin_patch(pod, "n1", {ANN_SLOT: "2", ANN_NODE: "n1"}))
    terms = out["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [HOST_IN_N1]}]
    assert out["metadata"]["annotations"][ANN_SLOT] == "2" and out["metadata"]["annotations"][ANN_NODE] == "n1"
    assert out["spec"]["nodeSelector"] == pod["spec"]["nodeSelector"]  # the domain selector stays as Kueue wrote it


def test_every_existing_required_term_gets_the_hostname_and_preferred_terms_stay() -> None:
    user = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]},
        ]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [
            {"key": "fast", "operator": "Exists"}]}}],
    }, "podAntiAffinity": {"x": 1}}
    pod = exact_pod(spec={"affinity": copy.deepcopy(user)})
    out = apply_adds(pod, pin_patch(pod, "n1", {}))
    terms = out["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [{"key": "zone", "operator": "In", "values": ["a"]}, HOST_IN_N1]
    assert terms[1]["matchExpressions"] == [HOST_IN_N1] and terms[1]["matchFields"] == user["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][1]["matchFields"]
    assert out["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == user["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert out["spec"]["affinity"]["podAntiAffinity"] == {"x": 1}


def test_annotation_keys_are_escaped_as_json_pointers() -> None:
    pod = exact_pod()
    ops = pin_patch(pod, "n0", {"atoll.dev/slot": "0"})
    assert {"op": "add", "path": "/metadata/annotations/atoll.dev~1slot", "value": "0"} in ops

"""Hypothesis strategies for what users and the cluster hand Atoll: Workloads, Nodes, profiles
documents and trace rows, each mostly well-formed with hostile values mixed in where Atoll
reads a field (huge and non-ASCII numbers, wrong types, missing keys, unknown annotations)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

GPU = "nvidia.com/gpu"
CLIQUE, BLOCK = "nvidia.com/gpu.clique", "network.example.com/block"

# anything JSON can carry, small
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)

hostile_numbers = st.sampled_from(["1e30", "²", "٣", "-1", "0", "1.5", "abc", "", " 4", "4 ", "9" * 40, "0x10", "1Ki", "NaN", "inf"])
quantities = st.one_of(st.sampled_from(["1", "2", "4", "8", "500m", "16Gi", "1.5"]), hostile_numbers, st.integers(-5, 10**20), json_values)
label_keys = st.sampled_from([CLIQUE, BLOCK, "kubernetes.io/hostname", "pool", "zone", "", "a/b/c", "x" * 300])
label_values = st.one_of(st.sampled_from(["c0", "c1", "b0", "pool-a", ""]), st.text(max_size=20), json_values)


def maybe(value: st.SearchStrategy[Any], weird: st.SearchStrategy[Any] = json_values) -> st.SearchStrategy[Any]:
    """Mostly ``value``, sometimes anything."""
    return st.one_of(value, value, value, weird)


annotation_keys = st.sampled_from([
    "atoll.dev/profile", "atoll.dev/class", "atoll.dev/near", "atoll.dev/near-min-bandwidth-gbps", "atoll.dev/near-level",
    "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-slice-required-topology", "kueue.x-k8s.io/podset-slice-size", "kueue.x-k8s.io/podset-unconstrained-topology",
    "kueue.x-k8s.io/podset-group-name", "example.com/other",
])
annotation_values = st.one_of(st.sampled_from(["strict", "elastic", "training", "inference", "main", "workers", CLIQUE, BLOCK,
                                               "100", "-3", "true", ""]), hostile_numbers, st.text(max_size=30))


@st.composite
def containers(draw: st.DrawFn) -> Any:
    requests = draw(st.dictionaries(st.sampled_from([GPU, "cpu", "memory", "example.com/fpga"]), quantities, max_size=3))
    resources = draw(maybe(st.fixed_dictionaries({"requests": st.just(requests)}, optional={"limits": st.just(requests)})))
    return draw(maybe(st.lists(maybe(st.fixed_dictionaries({"name": st.just("c"), "resources": st.just(resources)})),
                               min_size=0, max_size=2)))


@st.composite
def node_affinity(draw: st.DrawFn) -> Any:
    expr = st.fixed_dictionaries({"key": maybe(label_keys), "operator": maybe(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist",
                                                                                              "Gt", "Lt", "Near"])),
                                  "values": maybe(st.lists(label_values, max_size=3))})
    terms = st.lists(maybe(st.fixed_dictionaries({"matchExpressions": maybe(st.lists(expr, max_size=2))})), max_size=2)
    return draw(maybe(st.fixed_dictionaries({"nodeAffinity": maybe(st.fixed_dictionaries(
        {"requiredDuringSchedulingIgnoredDuringExecution": maybe(st.fixed_dictionaries({"nodeSelectorTerms": terms}))}))})))


@st.composite
def pod_templates(draw: st.DrawFn) -> Any:
    spec: dict[str, Any] = {"containers": draw(containers())}
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(maybe(st.dictionaries(label_keys, label_values, max_size=2)))
    if draw(st.booleans()):
        spec["tolerations"] = draw(maybe(st.lists(maybe(st.fixed_dictionaries(
            {"key": maybe(st.sampled_from(["gpu", ""])), "operator": maybe(st.sampled_from(["Exists", "Equal", "Maybe"])),
             "effect": maybe(st.sampled_from(["NoSchedule", "NoExecute", "", "Sometimes"]))})), max_size=2)))
    if draw(st.booleans()):
        spec["affinity"] = draw(node_affinity())
    meta = {"annotations": draw(maybe(st.dictionaries(annotation_keys, annotation_values, max_size=4)))}
    return draw(maybe(st.fixed_dictionaries({"metadata": st.just(meta), "spec": st.just(spec)})))


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    """A v1beta2 Workload after quota reservation, as Kueue would hand it to Atoll — or worse."""
    names = draw(st.lists(maybe(st.sampled_from(["main", "workers", "leader", "decode"])), min_size=1, max_size=3))
    podsets = [draw(maybe(st.fixed_dictionaries({"name": st.just(n), "count": maybe(st.integers(0, 40), st.integers(-3, 2**63)),
                                                  "template": pod_templates()}))) for n in names]
    assignments = [draw(maybe(st.fixed_dictionaries({"name": st.just(n), "count": maybe(st.integers(0, 40)),
                                                     "flavors": maybe(st.dictionaries(st.sampled_from([GPU, "cpu"]),
                                                                                      st.sampled_from(["gb200", "other", ""]), max_size=2))})))
                   for n in names]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": draw(maybe(st.fixed_dictionaries({"name": st.just("w"), "namespace": st.just("team-a"), "uid": st.just("u-1")}))),
        "spec": draw(maybe(st.fixed_dictionaries({"queueName": maybe(st.just("lq")), "podSets": maybe(st.just(podsets))}))),
        "status": draw(maybe(st.fixed_dictionaries({
            "admission": maybe(st.fixed_dictionaries({"clusterQueue": st.just("cq"), "podSetAssignments": maybe(st.just(assignments))})),
            "conditions": st.just([{"type": "QuotaReserved", "status": "True"}]),
        }))),
    }


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, Any]:
    """A Node as the apiserver serves it: its schema fixes the types (labels and annotations are
    string maps, allocatable holds quantities), so the hostility is in the values."""
    text = st.text(max_size=20)
    labels = draw(st.dictionaries(label_keys, st.one_of(st.sampled_from(["c0", "c1", "b0", "pool-a", ""]), text), max_size=4))
    allocatable = draw(st.dictionaries(st.sampled_from([GPU, "cpu", "memory", "pods"]),
                                       st.sampled_from(["1", "4", "8", "0", "500m", "16Gi", "1.5", "1e30", "9" * 40, "1Ki", "-1"]),
                                       max_size=4))
    taints = draw(st.lists(st.fixed_dictionaries({"key": text, "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])},
                                                 optional={"value": text}), max_size=2))
    annotations = draw(st.dictionaries(st.sampled_from(["atoll.dev/gpu-perf", "other"]),
                                       st.one_of(st.sampled_from(["1.0", "0.9", "0", "-1", "11", "nan", "inf", "1e308"]), hostile_numbers, text),
                                       max_size=2))
    conditions = draw(st.lists(st.fixed_dictionaries({"type": st.sampled_from(["Ready", "DiskPressure"]),
                                                      "status": st.sampled_from(["True", "False", "Unknown"])}), max_size=2))
    return {"metadata": {"name": draw(st.sampled_from(["n0", "n1", "n2"])), "labels": labels, "annotations": annotations},
            "spec": {"unschedulable": draw(st.booleans()), "taints": taints},
            "status": {"allocatable": allocatable, "conditions": conditions}}


@st.composite
def profiles_documents(draw: st.DrawFn) -> Any:
    """A profiles document as data (dumped to YAML by the test), mostly the right shape."""
    level = maybe(st.sampled_from([CLIQUE, BLOCK, "kubernetes.io/hostname", ""]))
    seconds = maybe(st.integers(-10, 10**6), st.one_of(hostile_numbers, json_values))
    profile = st.fixed_dictionaries({}, optional={
        "requiredLevel": level, "preferredLevel": level, "maxSpanLevel": level, "relaxAfterSeconds": seconds,
        "retry": maybe(st.fixed_dictionaries({}, optional={"initialSeconds": seconds, "maxSeconds": seconds})),
        "fragmentation": maybe(st.fixed_dictionaries({}, optional={"bestFit": maybe(st.booleans()),
                                                                  "protectEmptyDomains": maybe(st.booleans()),
                                                                  "perfFirst": maybe(st.sampled_from(["all", "gangs", "pods"]))})),
    })
    return draw(maybe(st.fixed_dictionaries({}, optional={
        "defaultProfile": maybe(st.sampled_from(["strict", "elastic", "missing"])),
        "flavors": maybe(st.dictionaries(st.sampled_from(["gb200", ""]), maybe(st.fixed_dictionaries(
            {"topology": maybe(st.just("nvl72"))}, optional={"enforcement": maybe(st.sampled_from(["domain", "exact", "tight"]))})),
            max_size=1)),
        "profiles": maybe(st.dictionaries(st.sampled_from(["strict", "elastic", "x"]), maybe(profile), max_size=2)),
        "classes": maybe(st.dictionaries(st.sampled_from(["training", "inference"]), maybe(st.fixed_dictionaries({}, optional={
            "perfFloor": maybe(st.floats(-1, 2), hostile_numbers), "uniformPerf": maybe(st.booleans()),
            "spread": maybe(st.fixed_dictionaries({"level": level, "maxPerDomain": seconds}))})), max_size=2)),
        "queues": maybe(st.dictionaries(st.sampled_from(["team-a/research", "bad"]), st.sampled_from(["strict", "nope"]), max_size=2)),
    })))


itp_rows = st.tuples(
    maybe(st.sampled_from(["job-1", "job-2", ""]), st.text(max_size=6)),
    maybe(st.integers(0, 10**6).map(str), hostile_numbers),
    maybe(st.integers(0, 10**6).map(str), hostile_numbers),
    maybe(st.sampled_from(["1", "2", "8", "16", "64"]), hostile_numbers),
)

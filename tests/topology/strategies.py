"""Hypothesis strategies: random fabrics, usage and requests built as real snapshots."""

from __future__ import annotations

from hypothesis import strategies as st

from topology import GraphLink, Level, NodeInfo, PlacementRequest, PodSetRequest, ResourceVector, Snapshot, Spread, Taint, Toleration

LEVELS = ("zone", "spine", "clique")


@st.composite
def snapshots(draw: st.DrawFn, max_nodes: int = 60) -> Snapshot:
    num_levels = draw(st.integers(1, 3))
    labels = LEVELS[3 - num_levels:]
    fanout = [draw(st.integers(1, 4)) for _ in labels]
    gpus_per_node = draw(st.sampled_from([1, 2, 4, 8]))
    nodes = []
    paths: list[tuple[int, ...]] = [()]
    for f in fanout:
        paths = [p + (i,) for p in paths for i in range(f)]
    node_id = 0
    for path in paths:
        for _ in range(draw(st.integers(1, 5))):
            if node_id >= max_nodes:
                break
            used_gpu = draw(st.integers(0, gpus_per_node))
            nodes.append(
                NodeInfo(
                    name=f"node-{node_id:03d}",
                    labels={lab: "-".join(str(x) for x in path[: i + 1]) for i, lab in enumerate(labels)},
                    allocatable=ResourceVector(gpus_per_node, 64000, 512000, draw(st.integers(1, 16))),
                    used=ResourceVector(used_gpu, draw(st.integers(0, 64000)), 0, draw(st.integers(0, 2))),
                    ready=draw(st.booleans()) or draw(st.booleans()) or True if draw(st.integers(0, 9)) else False,
                    unschedulable=draw(st.integers(0, 19)) == 0,
                    taints=(Taint("gpu-broken"),) if draw(st.integers(0, 19)) == 0 else (),
                    perf=draw(st.sampled_from([0.8, 0.95, 1.0, 1.0, 1.05])),
                )
            )
            node_id += 1
    levels = [Level(lab, bw, 1.0) for lab, bw in zip(labels, (50.0, 100.0, 900.0)[3 - num_levels:])]
    return Snapshot("f", levels, nodes)


@st.composite
def podset_requests(draw: st.DrawFn, snapshot: Snapshot, name: str = "main") -> PodSetRequest:
    labels = list(snapshot.level_labels)
    gpu = draw(st.integers(0, 8))
    per_pod = ResourceVector(gpu, draw(st.sampled_from([0, 1000, 8000, 30000])), 0, 0)
    pods = draw(st.integers(1, 24))
    kind = draw(st.sampled_from(["required", "preferred", "none", "spread"]))
    floor = draw(st.sampled_from([0.0, 0.0, 0.9, 1.0]))
    uniform = draw(st.booleans())
    tol = (Toleration("gpu-broken", "Exists"),) if draw(st.integers(0, 3)) == 0 else ()  # lifts the drawn taint
    if kind == "required":
        return PodSetRequest(name, pods, per_pod, required_level=draw(st.sampled_from(labels)), perf_floor=floor, uniform_perf=uniform, tolerations=tol)
    if kind == "preferred":
        target = draw(st.integers(0, len(labels) - 1))
        span = draw(st.integers(0, target))
        return PodSetRequest(name, pods, per_pod, preferred_level=labels[target], max_span_level=labels[span], perf_floor=floor, uniform_perf=uniform, tolerations=tol)
    if kind == "spread":
        level = draw(st.integers(1, len(labels) - 1)) if len(labels) > 1 else 0
        scope = draw(st.sampled_from([None] + labels[:level]))
        return PodSetRequest(name, pods, per_pod, required_level=scope, spread=Spread(labels[level], draw(st.integers(1, 3))), perf_floor=floor, tolerations=tol)
    return PodSetRequest(name, pods, per_pod, perf_floor=floor, uniform_perf=uniform, tolerations=tol)


@st.composite
def placement_requests(draw: st.DrawFn, snapshot: Snapshot) -> PlacementRequest:
    first = draw(podset_requests(snapshot, "prefill"))
    links: tuple[GraphLink, ...] = ()
    if draw(st.booleans()):
        second = draw(podset_requests(snapshot, "decode"))
        if draw(st.booleans()):
            links = (GraphLink("prefill", "decode", max_level=draw(st.sampled_from(list(snapshot.level_labels)))),)
        return PlacementRequest((first, second), links, protect_empty_domains=draw(st.booleans()), best_fit=draw(st.booleans()))
    return PlacementRequest((first,), protect_empty_domains=draw(st.booleans()), best_fit=draw(st.booleans()))

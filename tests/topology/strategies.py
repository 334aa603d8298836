"""Hypothesis strategies: random fabrics, usage and requests built as real snapshots."""

from __future__ import annotations

from hypothesis import strategies as st

from topology import PERF_RANKS, GraphLink, Level, NodeInfo, PlacementRequest, PodSetRequest, ResourceVector, SliceLayer, Snapshot, Spread, Taint, Toleration

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
    band = draw(st.sampled_from([0.0, 0.03, 0.06, 0.2]))  # with the strategy's perf values: in band and out of it
    rank = draw(st.sampled_from(PERF_RANKS))
    tol = (Toleration("gpu-broken", "Exists"),) if draw(st.integers(0, 3)) == 0 else ()  # lifts the drawn taint
    if kind == "required":
        return PodSetRequest(name, pods, per_pod, required_level=draw(st.sampled_from(labels)), perf_floor=floor, uniform_perf=uniform, perf_band=band, perf_rank=rank, tolerations=tol)
    if kind == "preferred":
        target = draw(st.integers(0, len(labels) - 1))
        span = draw(st.integers(0, target))
        return PodSetRequest(name, pods, per_pod, preferred_level=labels[target], max_span_level=labels[span], perf_floor=floor, uniform_perf=uniform, perf_band=band, perf_rank=rank, tolerations=tol)
    if kind == "spread":
        level = draw(st.integers(1, len(labels) - 1)) if len(labels) > 1 else 0
        scope = draw(st.sampled_from([None] + labels[:level]))
        return PodSetRequest(name, pods, per_pod, required_level=scope, spread=Spread(labels[level], draw(st.integers(1, 3))), perf_floor=floor, tolerations=tol)
    return PodSetRequest(name, pods, per_pod, perf_floor=floor, uniform_perf=uniform, perf_band=band, perf_rank=rank, tolerations=tol)


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


@st.composite
def slice_layers(draw: st.DrawFn, snapshot: Snapshot, top: int) -> tuple[SliceLayer, ...]:
    """1-3 layers at strictly lower levels from ``top`` down, each size dividing the one above."""
    labels = list(snapshot.level_labels)
    candidates = list(range(top, len(labels)))
    count = draw(st.integers(1, min(3, len(candidates))))
    levels = sorted(draw(st.lists(st.sampled_from(candidates), min_size=count, max_size=count, unique=True)))
    sizes = [draw(st.integers(1, 6))]
    for _ in levels[1:]:
        sizes.append(draw(st.sampled_from([d for d in range(1, sizes[-1] + 1) if sizes[-1] % d == 0])))
    return tuple(SliceLayer(labels[lv], size) for lv, size in zip(levels, sizes))


@st.composite
def vocabulary_podsets(draw: st.DrawFn, snapshot: Snapshot, name: str = "main") -> PodSetRequest:
    """Sliced (multi-layer), unconstrained and balanced PodSets, the shapes Kueue's annotations ask for."""
    labels = list(snapshot.level_labels)
    per_pod = ResourceVector(draw(st.integers(0, 4)), draw(st.sampled_from([0, 1000, 30000])), 0, 0)
    kind = draw(st.sampled_from(["required", "preferred", "slice-only", "unconstrained"]))
    balanced = draw(st.booleans())
    floor = draw(st.sampled_from([0.0, 0.0, 0.9]))
    uniform = draw(st.booleans())
    band = draw(st.sampled_from([0.0, 0.03, 0.06, 0.2]))  # with the strategy's perf values: in band and out of it
    rank = draw(st.sampled_from(PERF_RANKS))
    target = draw(st.integers(0, len(labels) - 1))
    sliced = kind == "slice-only" or (kind != "unconstrained" and draw(st.booleans())) or (kind == "unconstrained" and draw(st.booleans()))
    slices = draw(slice_layers(snapshot, target if kind in ("required", "preferred") else 0)) if sliced else ()
    pods = (slices[0].size if slices else 1) * draw(st.integers(1, 8))
    common = dict(perf_floor=floor, uniform_perf=uniform, perf_band=band, perf_rank=rank, slices=slices, balanced=balanced)
    if kind == "required":
        return PodSetRequest(name, pods, per_pod, required_level=labels[target], **common)  # type: ignore[arg-type]
    if kind == "preferred":
        span = draw(st.integers(-1, target))
        return PodSetRequest(name, pods, per_pod, preferred_level=labels[target], max_span_level=labels[span] if span >= 0 else None,
                             **common)  # type: ignore[arg-type]
    if kind == "unconstrained":
        return PodSetRequest(name, pods, per_pod, unconstrained=True, **common)  # type: ignore[arg-type]
    return PodSetRequest(name, pods, per_pod, **common)  # type: ignore[arg-type]


@st.composite
def vocabulary_requests(draw: st.DrawFn, snapshot: Snapshot) -> PlacementRequest:
    """One or two vocabulary PodSets, or a leader + workers group sharing one domain."""
    protect, best_fit = draw(st.booleans()), draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:
        labels = list(snapshot.level_labels)
        level = labels[draw(st.integers(0, len(labels) - 1))]
        key = "required_level" if draw(st.booleans()) else "preferred_level"
        leader = PodSetRequest("leader", 1, ResourceVector(draw(st.integers(0, 2)), 1000, 0, 0), group="g", **{key: level})  # type: ignore[arg-type]
        workers = PodSetRequest("workers", draw(st.integers(1, 12)), ResourceVector(draw(st.integers(1, 4)), 0, 0, 0), group="g",
                                **{key: level})  # type: ignore[arg-type]
        return PlacementRequest((leader, workers), protect_empty_domains=protect, best_fit=best_fit)
    first = draw(vocabulary_podsets(snapshot, "a"))
    if draw(st.booleans()):
        return PlacementRequest((first, draw(vocabulary_podsets(snapshot, "b"))), protect_empty_domains=protect, best_fit=best_fit)
    return PlacementRequest((first,), protect_empty_domains=protect, best_fit=best_fit)

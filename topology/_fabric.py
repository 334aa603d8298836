"""A networkx view of a flavor's fabric, for path and bottleneck-bandwidth questions.

Not on the hot path: ``atoll explain``, reports and tests use it to ask "what link joins these
two nodes?" The graph is the topology tree: a root, one vertex per domain at every level, one
per node. The edge from a domain at level ``l`` to its child carries level ``l``'s link (the
bandwidth between two GPUs whose lowest common domain is at ``l``); edges from the root carry
the top level's link.
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from topology._snapshot import Snapshot

__all__ = ["ROOT", "bottleneck_bandwidth", "fabric_graph", "fabric_path"]

ROOT = ("(flavor)",)


def fabric_graph(snapshot: Snapshot) -> nx.Graph:
    """Vertices are label-value paths (tuples); nodes are the full paths ending in their name."""
    g = nx.Graph()
    g.add_node(ROOT, level=-1)
    for level in range(len(snapshot.levels)):
        bw = float(snapshot.bandwidth_gbps[max(level - 1, 0)])
        lat = float(snapshot.latency_us[max(level - 1, 0)])
        for path in snapshot.domain_values[level]:
            g.add_node(path, level=level)
            parent = path[:-1] if level > 0 else ROOT
            g.add_edge(parent, path, bandwidth_gbps=bw, latency_us=lat, level=level - 1)
    return g


def fabric_path(snapshot: Snapshot, a: str, b: str, graph: nx.Graph | None = None) -> list[tuple[str, ...]]:
    """The vertices from node ``a`` to node ``b`` through their lowest common domain."""
    g = graph if graph is not None else fabric_graph(snapshot)
    try:
        pa, pb = snapshot.paths[snapshot.node_index[a]], snapshot.paths[snapshot.node_index[b]]
    except KeyError as exc:
        raise KeyError(f"flavor {snapshot.flavor}: no node {exc.args[0]!r}") from None
    path: list[tuple[str, ...]] = nx.shortest_path(g, pa, pb)
    return path


def bottleneck_bandwidth(snapshot: Snapshot, nodes: Iterable[str], graph: nx.Graph | None = None) -> float:
    """The slowest link (GB/s per GPU) on any path between the given nodes; a ring all-reduce
    over them runs at this speed. A single node gives its intra-node link."""
    names = list(dict.fromkeys(nodes))
    if not names:
        raise ValueError("bottleneck_bandwidth needs at least one node")
    if len(names) == 1:
        return float(snapshot.bandwidth_gbps[snapshot.node_level])
    g = graph if graph is not None else fabric_graph(snapshot)
    first = names[0]
    worst = float("inf")
    for other in names[1:]:
        path = fabric_path(snapshot, first, other, g)
        worst = min(worst, min(g.edges[u, v]["bandwidth_gbps"] for u, v in zip(path, path[1:])))
    return worst

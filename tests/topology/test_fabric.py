"""The networkx view agrees with the finder's own bottleneck figures."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.topology.strategies import placement_requests, snapshots
from tests.topology.test_finder import CLIQUE, SPINE, fabric
from topology import bottleneck_bandwidth, fabric_graph, fabric_path, find_placement


def test_path_climbs_to_the_lowest_common_domain() -> None:
    snap = fabric()
    assert fabric_path(snap, "s0c0n0", "s0c0n1") == [("s0", "s0c0", "s0c0n0"), ("s0", "s0c0"), ("s0", "s0c0", "s0c0n1")]
    assert len(fabric_path(snap, "s0c0n0", "s1c0n0")) == 7  # node, island, spine, root, spine, island, node


def test_bottleneck_is_the_link_of_the_highest_level_crossed() -> None:
    snap = fabric()
    assert bottleneck_bandwidth(snap, ["s0c0n0"]) == 1800
    assert bottleneck_bandwidth(snap, ["s0c0n0", "s0c0n3"]) == 1800
    assert bottleneck_bandwidth(snap, ["s0c0n0", "s0c1n0"]) == 50
    with pytest.raises(KeyError, match="no node 'x'"):
        bottleneck_bandwidth(snap, ["s0c0n0", "x"])


def test_graph_has_one_vertex_per_domain() -> None:
    snap = fabric()
    g = fabric_graph(snap)
    assert g.number_of_nodes() == 1 + 2 + 8 + 32  # root, spines, islands, nodes
    assert g.nodes[("s0", "s0c0")]["level"] == snap.level_index(CLIQUE)
    assert snap.level_index(SPINE) == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_finder_bottleneck_matches_the_graph(data: st.DataObject) -> None:
    snap = data.draw(snapshots())
    placement = find_placement(snap, data.draw(placement_requests(snap)))
    if placement.fits:
        graph = fabric_graph(snap)
        for ps in placement.podsets:
            assert ps.bottleneck_gbps == bottleneck_bandwidth(snap, ps.nodes, graph)

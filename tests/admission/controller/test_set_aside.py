"""The set-aside after a conflict, on interned claims, leaves out the nodes the claim-by-claim
measure leaves out (the claim-by-claim version is kept here as the twin)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.controller._decide import Decider, _Holding
from admission.controller._invariant import Claim, ClaimSet
from topology import Level, NodeInfo, ResourceVector, Snapshot

NODES = 12  # 2 blocks × 2 cliques × 3 nodes


def fabric() -> Snapshot:
    nodes = [NodeInfo(f"n{i:02d}", {"block": f"b{i // 6}", "clique": f"c{i // 3}"}, ResourceVector(4, 8000, 65536, 8)) for i in range(NODES)]
    return Snapshot("f", [Level("block"), Level("clique")], nodes)


def domain(kind: int) -> np.ndarray:
    """0-11: one node; 12-15: a clique; 16-17: a block; 18: everything; above: the nodes of the
    bits of ``kind - 19`` (a selector on a label that cuts across cliques and blocks)."""
    mask = np.zeros(NODES, dtype=bool)
    if kind > 18:
        mask[[i for i in range(NODES) if (kind - 19) >> i & 1]] = True
    elif kind < 12:
        mask[kind] = True
    elif kind < 16:
        mask[(kind - 12) * 3:(kind - 12) * 3 + 3] = True
    elif kind < 18:
        mask[(kind - 16) * 6:(kind - 16) * 6 + 6] = True
    else:
        mask[:] = True
    return mask


def set_aside_one_by_one(snap: Snapshot, held: SimpleNamespace, exposed: Sequence[int], near: np.ndarray,
                         podsets: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """``Decider._set_aside`` as first written: one full mask per held claim."""
    out = near.copy()
    for e in exposed:
        out |= held.claims[e].mask
    if not held.claims:
        return out
    masks = np.stack([c.mask for c in held.claims])
    if any(level >= snap.node_level for level, _, _ in podsets):  # a one-node selector: away from wider claims' reach
        out |= masks[masks.sum(axis=1) > 1].any(axis=0)
    pods = np.array([c.pods for c in held.claims], dtype=np.int64)
    gpu = np.array([c.gpu for c in held.claims], dtype=np.int64)
    for level, want, g in sorted(set(podsets)):
        if level >= snap.node_level or g <= 0:
            continue
        starts = np.asarray([snap.domain_range(level, d)[0] for d in range(snap.num_domains(level))], dtype=np.int64)
        sizes = np.diff(np.append(starts, snap.num_nodes))
        slots = held.free_gpu // g
        room = np.add.reduceat(slots, starts)
        touch = np.add.reduceat(masks.astype(np.int64), starts, axis=1)                # claims × domains: nodes inside
        share = np.add.reduceat(masks * slots, starts, axis=1)                          # their slots there
        cost = (pods * -(-gpu // g))[:, None]
        spans = (touch > 0).sum(axis=1, keepdims=True) > 1
        need = np.where(touch > 0, np.where(spans, np.minimum(cost, share), cost), 0).sum(axis=0)
        narrower = ((touch > 0) & (touch < sizes[None, :]) & ~spans).any(axis=0)
        bad = narrower | (room - need < want)
        if bad.any():
            out |= bad[snap.node_dom[level]]
    return out



@settings(max_examples=500, deadline=None)
@given(free=st.lists(st.integers(0, 4), min_size=NODES, max_size=NODES),
       raw=st.lists(st.tuples(st.one_of(st.integers(0, 18), st.integers(19, 19 + 2**NODES - 1)), st.integers(1, 4), st.sampled_from([1, 2, 4])), min_size=1, max_size=8),
       exposed=st.lists(st.integers(0, 7), max_size=3), near=st.lists(st.booleans(), min_size=NODES, max_size=NODES),
       podsets=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 6), st.sampled_from([0, 1, 2, 4])), min_size=1, max_size=3))
def test_set_aside_on_interned_claims_matches_the_claim_by_claim_measure(free: list[int], raw: list[tuple[int, int, int]],
                                                                        exposed: list[int], near: list[bool],
                                                                        podsets: list[tuple[int, int, int]]) -> None:
    snap = fabric()
    claims = [Claim(f"w{i}", "main", pods, gpu, domain(kind)) for i, (kind, pods, gpu) in enumerate(raw)]
    free_gpu = np.array(free, dtype=np.int64)
    exposed = sorted({e for e in exposed if e < len(claims)})
    where = np.array(near, dtype=bool)
    levels = [(level, pods, gpu) for level, pods, gpu in podsets]  # 0 block, 1 clique, 2 the node level
    want = set_aside_one_by_one(snap, SimpleNamespace(claims=claims, free_gpu=free_gpu), exposed, where, levels)
    got = Decider._set_aside(snap, _Holding(ClaimSet.of(claims, NODES), free_gpu), exposed, where, levels)
    assert (got == want).all()

"""``exposed_claims`` on interned domains answers what the claim-by-claim formula answers: the
compact form is a speed-up, not a new rule. The claim-by-claim formula is kept here as the twin."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.controller._invariant import Claim, ClaimSet, exposed_claims


def exposed_one_by_one(free_gpu: np.ndarray, claims: Sequence[Claim], near: np.ndarray | None = None) -> list[int]:
    """``exposed_claims`` as first written: one full mask per claim, every measure per claim."""
    if not claims:
        return []
    masks = np.stack([c.mask for c in claims])
    pods = np.array([c.pods for c in claims], dtype=np.int64)
    gpu = np.array([c.gpu for c in claims], dtype=np.int64)
    live = (pods > 0) & (gpu > 0)
    sizes = masks.sum(axis=1)
    single = live & (sizes == 1)
    pinned = np.bincount(np.argmax(masks[single], axis=1), weights=(pods * gpu)[single],
                         minlength=free_gpu.size).astype(np.int64) if single.any() else np.zeros(free_gpu.size, dtype=np.int64)
    sizes_g = sorted({int(x) for x in gpu[live & ~single]})
    out: list[int] = []
    focus = range(len(claims)) if near is None else np.flatnonzero(masks[:, near].any(axis=1)).tolist()
    for d in focus:
        g = int(gpu[d])
        if not live[d] or not masks[d].any():
            continue
        here = masks[d]
        free = free_gpu[here]
        slots = free // g
        others = pinned[here] - (np.where(np.flatnonzero(here) == np.argmax(here), pods[d] * g, 0) if single[d] else 0)
        need = int(pods[d]) + int((slots - np.maximum(free - others, 0) // g).sum())
        cols = masks[:, here]                                    # every claim restricted to D
        inside = cols.sum(axis=1)
        wide = live & ~single & (inside > 0)
        wide[d] = False
        if wide.any():
            per_pod = -(-gpu // g)                               # ⌈g_e / g⌉ slots of d a pod of e can cost
            reach = pods * per_pod
            thief = wide & (sizes > inside)
            if thief.any():
                cols_i = cols.astype(np.int64)
                fit = np.zeros(len(claims), dtype=np.int64)
                for size in sizes_g:
                    rows = thief & (gpu == size)
                    if rows.any():
                        fit[rows] = cols_i[rows] @ (free // size)
                room = cols_i[thief] @ slots
                reach[thief] = np.minimum(np.minimum(pods[thief], fit[thief]) * per_pod[thief], room)
            need += int(reach[wide].sum())
        if need > int(slots.sum()):
            out.append(int(d))
    return out



def _domains(nodes: int) -> list[np.ndarray]:
    """Every node alone, cliques of 3, blocks of 6, the whole fabric, an empty domain, and a few that cut across."""
    out = []
    for size in (1, 3, 6, nodes):
        for start in range(0, nodes, size):
            mask = np.zeros(nodes, dtype=bool)
            mask[start:start + size] = True
            out.append(mask)
    out.append(np.zeros(nodes, dtype=bool))
    for picked in ((1, 4, 7, 10), (2, 3, 8), tuple(range(0, nodes, 2)), (0, 11)):  # selectors cutting across cliques
        mask = np.zeros(nodes, dtype=bool)
        mask[list(picked)] = True
        out.append(mask)
    return out


NODES = 12
DOMAINS = _domains(NODES)
raw_claims = st.lists(st.tuples(st.integers(0, len(DOMAINS) - 1), st.integers(0, 5), st.sampled_from([0, 1, 2, 4, 8])),
                      min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(free=st.lists(st.integers(0, 8), min_size=NODES, max_size=NODES), raw=raw_claims,
       near=st.one_of(st.none(), st.lists(st.booleans(), min_size=NODES, max_size=NODES)), split=st.integers(0, 12))
def test_interned_claims_expose_what_the_claim_by_claim_formula_exposes(free: list[int], raw: list[tuple[int, int, int]],
                                                                       near: list[bool] | None, split: int) -> None:
    free_gpu = np.array(free, dtype=np.int64)
    claims = [Claim(f"w{i}", "main", pods, gpu, DOMAINS[k]) for i, (k, pods, gpu) in enumerate(raw)]
    where = None if near is None else np.array(near, dtype=bool)
    expected = exposed_one_by_one(free_gpu, claims, where)
    assert exposed_claims(free_gpu, claims, where) == expected
    grown = ClaimSet.of(claims[:split], NODES).extend(claims[split:])  # held claims, then the new ones appended
    assert exposed_claims(free_gpu, grown, where) == expected
    held = ClaimSet.of(claims[:split], NODES)
    assert held.sizes is not None  # known sizes (as the ledger's book keeps them): the new rows stay a block of their own
    kept = held.extend(claims[split:])
    assert exposed_claims(free_gpu, kept, where) == expected
    for i, c in enumerate(claims):
        assert (grown.mask(i) == c.mask).all()


@settings(max_examples=300, deadline=None)
@given(free=st.lists(st.integers(0, 8), min_size=NODES, max_size=NODES), domain=st.integers(0, len(DOMAINS) - 1),
       gpu=st.sampled_from([1, 2, 4, 8]), inert=st.integers(0, 5), data=st.data())
def test_one_new_claim_that_fits_its_domain_is_never_exposed_when_nothing_else_is_live(free: list[int], domain: int, gpu: int,
                                                                                      inert: int, data: st.DataObject) -> None:
    """Why a decision with no live owed claims and one PodSet skips the robustness check."""
    free_gpu = np.array(free, dtype=np.int64)
    mask = DOMAINS[domain]
    room = int((free_gpu[mask] // gpu).sum())
    pods = data.draw(st.integers(0, room))  # the search placed them inside the domain
    held = ClaimSet.of([Claim(f"gone{i}", "main", 0, 0, np.zeros(NODES, dtype=bool)) for i in range(inert)], NODES)
    assert not held.any_live()
    new = Claim("new", "main", pods, gpu, mask)
    assert exposed_claims(free_gpu, held.extend([new]), mask) == []
    assert held.extend([new]).any_live() == (pods > 0 and bool(mask.any()))

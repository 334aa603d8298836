"""The ledger's book keeps ``place_owed``'s witness up to date: after any history of owed pods
coming and going, pods binding where others were planned and nodes changing, it answers what
``place_owed`` answers from scratch (placed, missing, used), with and without one Workload left
out; and its claims are the owed pods with GPUs on their domains (planned nodes when pinned)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.controller._book import Book, Entry
from admission.controller._invariant import Demand, place_owed
from topology import Level, NodeInfo, ResourceVector, Snapshot

NODES = 8


def fabric() -> Snapshot:
    nodes = [NodeInfo(f"n{i}", {"block": "b0", "clique": f"c{i // 4}"}, ResourceVector(4, 8000, 64 * 1024, 8)) for i in range(NODES)]
    return Snapshot("f", [Level("block"), Level("clique")], nodes)


entry_st = st.tuples(
    st.integers(0, 5),                                                                   # which Workload
    st.integers(1, 6),                                                                   # pods owed
    st.lists(st.tuples(st.integers(0, NODES - 1), st.integers(1, 3)), max_size=3),       # planned (node, pods)
    st.sampled_from([(0, 4), (0, 8), (4, 8), (0, 1), (5, 6), (0, 0)]),                    # domain [start, end)
    st.sampled_from([(1, 1000, 1024), (2, 500, 4096), (4, 2000, 8192), (0, 4000, 1024)]),  # per-pod gpu, cpu m, memory MiB
    st.booleans(),                                                                       # pinned to its planned nodes (exact)
)
step_st = st.one_of(
    st.tuples(st.just("put"), entry_st),
    st.tuples(st.just("drop"), st.integers(0, 5)),
    st.tuples(st.just("bind"), st.tuples(st.integers(0, NODES - 1), st.integers(1, 4))),
    st.tuples(st.just("cordon"), st.integers(0, NODES - 1)),
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step_st, min_size=1, max_size=25), exclude=st.one_of(st.none(), st.integers(0, 5)))
def test_the_book_answers_what_place_owed_answers_from_scratch(steps: list, exclude: int | None) -> None:
    snap = fabric()
    current: dict[tuple[str, str], Entry] = {}

    def resolve(key: tuple[str, str], on: Snapshot) -> Entry | None:
        e = current.get(key)
        if e is None:
            return None
        usable = e.demand.domain[on.eligible[e.demand.domain] != 0]
        allowed = set(usable.tolist())
        prefer = tuple((n, k) for n, k in e.demand.planned if n in allowed)
        return Entry(e.key, e.order, e.row, e.owed, Demand(e.owed, e.demand.shape, prefer, usable), e.gpu, e.exact,
                     sum(k for _, k in prefer))

    book = Book(resolve)
    for kind, arg in steps:
        if kind == "put":
            w, owed, planned, (lo, hi), (gpu, cpu, mem), exact = arg
            merged: dict[int, int] = {}
            for n, k in planned:
                merged[n] = merged.get(n, 0) + k
            key = (f"uid{w}", "main")
            shape = np.array([gpu, cpu, mem, 1], dtype=np.int64)
            demand = Demand(owed, shape, tuple(merged.items()), np.arange(lo, hi, dtype=np.int64))
            current[key] = Entry(key, (f"ns/w{w}", "main", f"uid{w}"), None, owed, demand, gpu, exact, 0)
            book.touch([key])
        elif kind == "drop":
            key = (f"uid{arg}", "main")
            current.pop(key, None)
            book.touch([key])
        elif kind == "bind":  # another Workload's pods bind: the node's free capacity drops
            node, gpus = arg
            snap.free[node] = np.maximum(snap.free[node] - np.array([gpus, gpus * 500, gpus * 4096, 1]), 0)
        else:  # a node leaves the fabric's usable set: domains change, the book resolves again
            snap.exclude(arg)
        uid = None if exclude is None else f"uid{exclude}"
        expected = [resolve(k, snap) for k in sorted(current, key=lambda k: current[k].order) if k[0] != uid]
        demands = [e.demand for e in expected if e is not None and e.owed > 0]
        placed, missing, used = place_owed(snap.free, demands)
        got = book.witness(snap, uid)
        assert [d.pods for d in got.demands] == [d.pods for d in demands]
        assert got.missing == missing
        assert got.placed == placed
        assert (got.used == used).all()
        claims = book.claims(snap, uid)
        live = sorted((claims.who[i], int(claims.pods[i]), int(claims.gpu[i]), claims.mask(i).tobytes())
                      for i in range(len(claims)) if claims.pods[i] > 0)
        want = []
        for e in expected:
            if e is None or e.owed <= 0 or e.gpu <= 0:
                continue
            mask = np.zeros(NODES, dtype=bool)
            mask[[n for n, _ in e.demand.planned] if e.exact and e.demand.planned else e.demand.domain] = True
            want.append(((e.order[0], e.order[1]), e.owed, e.gpu, mask.tobytes()))
        assert live == sorted(want)


def test_a_witness_is_answered_again_once_a_planned_node_fills_up() -> None:
    snap = fabric()
    key = ("uid0", "main")
    shape = np.array([2, 500, 4096, 1], dtype=np.int64)
    entry = Entry(key, ("ns/w0", "main", "uid0"), None, 2, Demand(2, shape, ((0, 2),), np.arange(0, 4)), 2, False, 2)
    book = Book(lambda k, on: entry if k == key else None)
    book.touch([key])
    first = book.witness(snap, None)
    assert first.placed == [[(0, 2)]] and book.witness(snap, None) is first  # nothing changed: the same answer
    snap.free[5] = 0  # a node nobody planned: still the same answer
    assert book.witness(snap, None) is first
    snap.free[0] = np.maximum(snap.free[0] - np.array([4, 2000, 4 * 4096, 1]), 0)  # the planned node fills up
    again = book.witness(snap, None)
    assert again.placed == [[(1, 2)]] == place_owed(snap.free, [entry.demand])[0]

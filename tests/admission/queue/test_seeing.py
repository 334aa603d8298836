"""Seeing the queue: size bands, the largest free block per domain with draining nodes told apart,
domains closed by a drain, and the sentence ``atoll queue`` prints."""

from __future__ import annotations

import numpy as np

from admission.queue import NO_HINTS, REASONS, Held, Need, draining_domains, largest_block, plain_reason, size_band
from topology import Level, NodeInfo, ResourceVector, Snapshot

SU, RACK = "network.example.com/su", "nvidia.com/gpu.clique"


def cluster(draining: set[str] = frozenset(), used: dict[str, int] | None = None) -> Snapshot:  # type: ignore[assignment]
    """2 SUs × 2 racks × 4 nodes × 4 GPUs."""
    used = used or {}
    nodes = [NodeInfo(n, {SU: f"u{u}", RACK: f"u{u}r{c}"}, ResourceVector(4, 1000, 1000, 10), ResourceVector(gpu=used.get(n, 0)),
                      draining=n in draining)
             for u in range(2) for c in range(2) for n in [f"u{u}r{c}n{i}" for i in range(4)]]
    return Snapshot("f", [Level(SU, 50), Level(RACK, 1800)], nodes)


def mask(snap: Snapshot, names: set[str]) -> np.ndarray:
    return np.asarray([n in names for n in snap.node_names], dtype=bool)


def test_size_bands_have_the_simulators_edges() -> None:
    assert [size_band(g) for g in (0, 1, 7, 8, 15, 16, 63, 64, 512)] == ["0", "1-7", "1-7", "8-15", "8-15", "16-63", "16-63", "64+", "64+"]


def test_largest_block_counts_whole_pods_on_open_nodes_and_sees_what_a_drain_closes() -> None:
    drained = {f"u1r1n{i}" for i in range(4)}
    used = {"u0r0n0": 4, "u0r0n1": 1, "u0r1n0": 4, "u0r1n1": 4, "u1r0n0": 3, "u1r0n1": 3, "u1r0n2": 3, "u1r0n3": 3}
    snap = cluster(drained, used)
    block = largest_block(snap, RACK, 4, mask(snap, drained))
    # u0r0: 2 whole 4-GPU pods free (n1 has 3 GPUs, not a pod); u0r1: 2; u1r0: none; u1r1: 4, but draining
    assert (block.pods, block.gpus, block.domain) == (2, 8, "u0/u0r0")
    assert block.pods_if_undrained == 4 and block.draining_domains == 1
    one = largest_block(snap, RACK, 1, mask(snap, drained))
    assert (one.pods, one.domain, one.pods_if_undrained) == (11, "u0/u0r0", 16)  # 0 + 3 + 4 + 4 one-GPU pods in u0r0
    flat = largest_block(snap, None, 4, mask(snap, drained))
    assert flat.pods == 4 and flat.pods_if_undrained == 8


def test_draining_domains_count_only_domains_closed_whole() -> None:
    snap = cluster()
    drained = {f"u1r1n{i}" for i in range(4)} | {"u0r0n0"}
    assert draining_domains(snap, mask(snap, drained)) == {SU: 0, RACK: 1}
    everything = set(snap.node_names[8:])
    assert draining_domains(snap, mask(snap, everything)) == {SU: 1, RACK: 2}


def test_plain_reason_says_need_block_drain_hold_and_start() -> None:
    drained = {f"u1r1n{i}" for i in range(4)}
    snap = cluster(drained, {"u0r0n0": 4, "u0r1n0": 4, "u1r0n0": 4})
    block = largest_block(snap, RACK, 4, mask(snap, drained))
    need = Need("f", RACK, 4, 4)
    text = plain_reason(need, block)
    assert text == "needs 16 GPUs (4 pods of 4) in one gpu.clique; the largest free block is 12 (u0/u0r0); it would fit if the 1 draining gpu.clique(s) were open"
    held = Held("f", RACK, "u0r1", expected_free_at=2100.0)
    text = plain_reason(need, block, held=held, expected_start=2400.0, now=0.0)
    assert text.endswith("; gpu.clique u0r1 is reserved for it and expected free in ~35 min; expected start in ~40 min")
    assert plain_reason(Need("f", None, 1, 2), largest_block(snap, None, 2, mask(snap, set()))).startswith("needs 2 GPUs in the flavor")


def test_every_reason_is_documented_and_the_default_hints_hold_nothing() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "queue.md").read_text()
    for reason in REASONS:
        assert f"`{reason}`" in doc, reason
    assert NO_HINTS.held("uid") is None and NO_HINTS.expected_start("uid") is None
    assert NO_HINTS.held_domains("f") == 0 and NO_HINTS.idle_held_gpus("f") == 0
    assert NO_HINTS.reservations("f") == (0, 0)

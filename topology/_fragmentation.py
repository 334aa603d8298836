"""Fragmentation index: how much free capacity is stranded in domains too small to use.

For a flavor, a domain level (the island level) and a reference gang of ``G`` GPUs::

    index = 1 − Σ_d floor(free_d / G)·G / Σ_d free_d

over healthy nodes, where ``free_d`` is the free GPU count of island ``d``. 0 means every
free GPU can serve a G-GPU gang inside one island; 1 means none can. 0 when nothing is free.
"""

from __future__ import annotations

import numpy as np

from topology._snapshot import Snapshot

__all__ = ["fragmentation_index", "island_free_gpus"]


def island_free_gpus(snapshot: Snapshot, level: int) -> np.ndarray:
    """Free GPUs per domain of ``level`` (healthy nodes only), in domain order."""
    free = np.where(snapshot.eligible.astype(bool), snapshot.free[:, 0], 0)
    pc = np.concatenate(([0], np.cumsum(free)))
    b = snapshot.bounds[snapshot.bptr[level]: snapshot.bptr[level + 1]]
    out: np.ndarray = pc[b[1:]] - pc[b[:-1]]
    return out


def fragmentation_index(snapshot: Snapshot, level: int | str, reference_gpus: int = 8) -> float:
    if reference_gpus < 1:
        raise ValueError(f"reference_gpus must be ≥ 1, got {reference_gpus}")
    lvl = snapshot.level_index(level) if isinstance(level, str) else level
    free = island_free_gpus(snapshot, lvl)
    total = int(free.sum())
    if total == 0:
        return 0.0
    usable = int(((free // reference_gpus) * reference_gpus).sum())
    return 1.0 - usable / total

"""Kueue slice annotations on simulated jobs, so Kueue's TAS and Atoll answer the same sliced request.

On NVL72 clusters a job larger than one island is written with ``podset-slice-required-topology:
nvidia.com/gpu.clique`` and ``podset-slice-size: 16``: it spans islands, but each slice of 16
pods keeps its all-reduce inside one island. ``slice_workload`` gives that request to every
training job of a prepared workload that no single domain of the slice level can hold on its
empty flavor and whose pod count is a multiple of the slice size. Every other job keeps its
request unsliced: jobs that fit one island (a slice would change nothing Kueue or Atoll could
place), jobs whose pod count the size does not divide (Kueue would refuse them), inference
(replicas are spread, not ganged) and flavors without the slice level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from admission.simulator._policies import JobShape, fits_one_domain
from admission.simulator._sim import PreparedWorkload
from topology import SliceLayer, Snapshot

__all__ = ["Slicing", "slice_workload", "sliced_jobs"]


@dataclass(frozen=True, slots=True)
class Slicing:
    """``--slice-level`` and ``--slice-size`` (pods per slice)."""

    level: str
    size: int

    def __post_init__(self) -> None:
        if not self.level:
            raise ValueError("--slice-level: give a topology level label, e.g. nvidia.com/gpu.clique")
        if self.size < 1:
            raise ValueError(f"--slice-size: must be ≥ 1 pod, got {self.size}")


def _sliced(snapshot: Snapshot, shape: JobShape, slicing: Slicing) -> JobShape:
    if (shape.kind != "training" or shape.slices or shape.pods % slicing.size or slicing.level not in snapshot.level_labels
            or fits_one_domain(snapshot, shape, slicing.level)):
        return shape
    return dataclasses.replace(shape, slices=(SliceLayer(slicing.level, slicing.size),))


def slice_workload(work: PreparedWorkload, slicing: Slicing, snapshots: Sequence[Snapshot]) -> PreparedWorkload:
    """``work`` with the slice request on every job larger than one domain of the slice level
    (module docstring), judged on ``snapshots`` (the empty flavors, in ``work``'s order); jobs keep
    their shape ids, so every policy sees the same jobs. ``ValueError`` naming the flag when no
    flavor has the slice level."""
    snaps = list(snapshots)
    if not any(slicing.level in s.level_labels for s in snaps):
        have = sorted({lb for s in snaps for lb in s.level_labels})
        raise ValueError(f"--slice-level: no flavor has level {slicing.level!r} (levels: {have})")
    shapes = tuple((f, _sliced(snaps[f], shape, slicing)) for f, shape in work.shapes)
    return dataclasses.replace(work, shapes=shapes)



def sliced_jobs(work: PreparedWorkload) -> int:
    """How many jobs of ``work`` carry a slice request."""
    sliced = [i for i, (_, shape) in enumerate(work.shapes) if shape.slices]
    return int(np.isin(work.shape, sliced).sum()) if sliced else 0

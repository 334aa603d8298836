"""Seeing the queue: why a waiting Workload waits, in plain words, per domain; size bands; the
hook that reservations and expected starts are read through.

Pure: it reads a snapshot and a ``Need`` and returns words and numbers. ``atoll queue`` and the
controller's metrics use it, so the reasons they show are the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from admission.queue._room import Need
from admission.vocabulary import DRAINING
from topology import Snapshot

__all__ = ["NO_HINTS", "REASONS", "SIZE_BANDS", "Block", "Held", "QueueHints", "draining_domains", "largest_block", "plain_reason",
           "size_band"]

SIZE_BANDS: tuple[tuple[int, int | None, str], ...] = ((1, 7, "1-7"), (8, 15, "8-15"), (16, 63, "16-63"), (64, None, "64+"))
"""GPU size bands (first GPU, last GPU or None, label), as the simulator reports waits."""

REASONS: Mapping[str, str] = {
    "no-domain": "no domain of the level the profile asks for has room for the Workload now; it waits for room to free",
    "relax-pending": "an elastic profile waits for one domain until its relax deadline, then may span domains",
    "owed-pods": "the only room is where pods of admitted Workloads are still owed; it waits until they bind",
    "behind-gang": "a gang ahead of it in Kueue's order is owed its turn (queueing.holdBehindGangs); it waits, parked, until that "
                   "gang holds quota (quota) or starts (start)",
    "draining": f"it would fit now if draining nodes (label {DRAINING}=true) took new placements; it waits for them "
                "or for other room",
    "config": "the configuration is broken (profiles document, flavor, Topology or node annotation); the message names the fix",
    "node-lost": "a node of its placement was lost; it waits to be placed again",
    "placeable": "Atoll would place it now; it is placed at its next decision (after its backoff, or when what it waits for changes)",
    "rejected": "Atoll would reject it now; the message says why",
    "quota": "Kueue has not reserved quota for it yet; Atoll decides after QuotaReserved",
    "evicting": "Kueue is evicting it; Atoll decides again after its next quota reservation",
}
"""Every reason ``atoll queue`` and ``atoll_waiting_workloads`` give, and what it means (the docs list them)."""


def size_band(gpus: int) -> str:
    """The size band of a Workload of ``gpus`` GPUs ("0" for none)."""
    for lo, hi, label in SIZE_BANDS:
        if gpus >= lo and (hi is None or gpus <= hi):
            return label
    return "0"


@dataclass(frozen=True, slots=True)
class Held:
    """A domain held for a waiting Workload: reserved for its gang, or kept while victims terminate."""

    flavor: str
    level: str
    domain: str
    expected_free_at: float | None = None
    kind: str = "reservation"


class QueueHints(Protocol):
    """What the queue manager knows beyond one decision: the domain held for a Workload and when
    it is expected to start, and per flavor how many domains are held and GPUs left idle by
    them. ``atoll queue`` and the metrics read these through the controller's ``queue_hints``."""

    def held(self, uid: str) -> Held | None: ...

    def expected_start(self, uid: str) -> float | None: ...

    def held_domains(self, flavor: str) -> int: ...

    def reservations(self, flavor: str) -> tuple[int, int]:
        """Reservations held on ``flavor``: (active, suspended)."""
        ...

    def idle_held_gpus(self, flavor: str) -> int: ...


class _NoHints:
    """Nothing held, no start known: the queue without reservations."""

    def held(self, uid: str) -> Held | None:
        return None

    def expected_start(self, uid: str) -> float | None:
        return None

    def held_domains(self, flavor: str) -> int:
        return 0

    def reservations(self, flavor: str) -> tuple[int, int]:
        return 0, 0

    def idle_held_gpus(self, flavor: str) -> int:
        return 0


NO_HINTS: QueueHints = _NoHints()


@dataclass(frozen=True, slots=True)
class Block:
    """The largest free block one domain of a level offers: pods of the asked size it fits now,
    its GPUs, its name, and the same measured with draining nodes counted as open."""

    pods: int
    gpus: int
    domain: str
    pods_if_undrained: int
    draining_domains: int


def largest_block(snapshot: Snapshot, level: str | None, gpus_per_pod: int, draining: npt.NDArray[np.bool_]) -> Block:
    """The domain of ``level`` (None: the whole flavor) with room for the most pods of
    ``gpus_per_pod`` GPUs on open nodes (``snapshot.eligible``), counted in whole pods per node;
    ``draining`` marks nodes closed only because they drain."""
    per = max(gpus_per_pod, 1)
    free = snapshot.free[:, 0]
    pods = np.where(snapshot.eligible != 0, free // per, 0)
    undrained = np.where((snapshot.eligible != 0) | draining, free // per, 0)
    if level is None or level not in snapshot.level_labels:
        return Block(int(pods.sum()), int(pods.sum()) * per, snapshot.flavor, int(undrained.sum()), int(draining.any()))
    lv = snapshot.level_index(level)
    best = (-1, 0, "")
    most_undrained = 0
    closed = 0
    for d in range(snapshot.num_domains(lv)):
        lo, hi = snapshot.domain_range(lv, d)
        n = int(pods[lo:hi].sum())
        if n > best[0]:
            best = (n, n * per, "/".join(snapshot.domain_path(lv, d)))
        most_undrained = max(most_undrained, int(undrained[lo:hi].sum()))
        closed += int(bool(draining[lo:hi].any()))
    return Block(max(best[0], 0), best[1], best[2], most_undrained, closed)


def draining_domains(snapshot: Snapshot, draining: npt.NDArray[np.bool_]) -> dict[str, int]:
    """Per level above the nodes, the domains every node of which drains (closed to new work)."""
    out: dict[str, int] = {}
    for lv, label in enumerate(snapshot.level_labels[: snapshot.node_level]):
        starts = np.asarray([snapshot.domain_range(lv, d)[0] for d in range(snapshot.num_domains(lv))], dtype=np.int64)
        if not starts.size:
            out[label] = 0
            continue
        open_nodes = np.add.reduceat((~draining).astype(np.int64), starts)
        out[label] = int((open_nodes == 0).sum())
    return out


def _level_name(level: str | None) -> str:
    return "domain of the flavor" if level is None else level.rsplit("/", 1)[-1]


def plain_reason(need: Need, block: Block, *, held: Held | None = None, expected_start: float | None = None, now: float = 0.0) -> str:
    """One sentence: what the Workload needs, the largest free block, draining domains in the way,
    the domain held for it and when it is expected free."""
    where = "in the flavor" if need.level is None else f"in one {_level_name(need.level)}"
    size = f"{need.gpus} GPUs" + (f" ({need.pods} pods of {need.gpus_per_pod})" if need.pods > 1 and need.gpus_per_pod > 1 else "")
    text = f"needs {size} {where}; the largest free block is {block.gpus}"
    if block.domain and need.level is not None:
        text += f" ({block.domain})"
    if block.pods_if_undrained >= need.pods > block.pods:
        text += f"; it would fit if the {block.draining_domains} draining {_level_name(need.level)}(s) were open"
    elif block.draining_domains:
        text += f"; {block.draining_domains} {_level_name(need.level)}(s) draining"
    if held is not None:
        text += f"; {held.level.rsplit('/', 1)[-1]} {held.domain} is {'reserved' if held.kind == 'reservation' else 'held'} for it"
        if held.expected_free_at is not None:
            text += f" and expected free in ~{_minutes(held.expected_free_at - now)}"
    if expected_start is not None:
        text += f"; expected start in ~{_minutes(expected_start - now)}"
    return text


def _minutes(seconds: float) -> str:
    m = max(0, round(seconds / 60))
    return f"{m} min" if m < 120 else f"{m / 60:.1f} h"

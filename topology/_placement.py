"""What the finder returns: chosen nodes per PodSet, the domain that holds them, and why-not."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DomainVerdict", "LinkPlacement", "Placement", "PodSetPlacement", "SlicePlacement"]


@dataclass(frozen=True, slots=True)
class DomainVerdict:
    """One candidate domain that was not chosen, and its numbers (pod-fit capacity vs need)."""

    podset: str
    level: str
    path: tuple[str, ...]
    capacity_pods: int
    need_pods: int
    reason: str

    def describe(self) -> str:
        return f"{'/'.join(self.path)}: {self.reason}"


@dataclass(frozen=True, slots=True)
class SlicePlacement:
    """One slice of a sliced PodSet: its pods, all inside the domain ``path`` of ``level``.

    Slices are numbered in topology path order (slice ``i`` holds the PodSet's pods
    ``i·size … (i+1)·size − 1`` when ranks are handed out in that order); a node may hold pods
    of two neighbouring slices of one domain."""

    index: int
    level: str
    path: tuple[str, ...]
    nodes: tuple[str, ...]
    pods_per_node: tuple[int, ...]

    @property
    def pods(self) -> int:
        return sum(self.pods_per_node)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form for ``atoll place``, decision records and planned-node annotations."""
        return {"index": self.index, "level": self.level, "domain": list(self.path), "pods": self.pods,
                "nodes": dict(zip(self.nodes, self.pods_per_node))}


@dataclass(frozen=True, slots=True)
class PodSetPlacement:
    """Where one PodSet goes. ``nodes`` are in topology path order."""

    name: str
    nodes: tuple[str, ...]
    pods_per_node: tuple[int, ...]
    domain_level: str
    """The lowest level whose single domain holds every chosen node."""
    domain_path: tuple[str, ...]
    """Label values from the top level down to ``domain_level``."""
    islands: int
    """How many domains of the requested (required or preferred) level the placement spans."""
    island_level: str
    min_perf: float
    max_perf: float
    bottleneck_gbps: float
    """Per-GPU bandwidth of the highest link the PodSet crosses (its lowest common domain)."""
    slices: tuple[SlicePlacement, ...] = ()
    """The outermost slice layer's slices, in path order; empty when no slices were asked for."""

    @property
    def pods(self) -> int:
        return sum(self.pods_per_node)


@dataclass(frozen=True, slots=True)
class LinkPlacement:
    """One graph edge as placed: the lowest level whose single domain holds both PodSets' nodes
    (the bottleneck the edge's traffic crosses), that level's per-GPU bandwidth and latency, and
    what the edge asked for."""

    a: str
    b: str
    level: str
    """The bottleneck level's label (``(flavor)`` when the two ends share no domain at any level)."""
    bandwidth_gbps: float
    latency_us: float
    asked: str
    """``≥ N GB/s`` or ``within LEVEL``."""

    def describe(self) -> str:
        return f"edge {self.a}->{self.b}: {self.bandwidth_gbps:g} GB/s per GPU, {self.latency_us:g} µs, across {self.level} (asked {self.asked})"

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form for ``atoll place``, decision records and ``atoll explain``."""
        return {"from": self.a, "to": self.b, "bottleneck_level": self.level, "bandwidth_gbps": self.bandwidth_gbps,
                "latency_us": self.latency_us, "asked": self.asked}


@dataclass(frozen=True, slots=True)
class Placement:
    """The finder's answer for a whole request: every PodSet placed, or none."""

    fits: bool
    podsets: tuple[PodSetPlacement, ...] = ()
    reason: str = ""
    why_not: tuple[DomainVerdict, ...] = field(default=())
    links: tuple[LinkPlacement, ...] = ()
    """Each graph edge of the request as placed, in request order (empty when it has none or does not fit)."""

    def podset(self, name: str) -> PodSetPlacement:
        for p in self.podsets:
            if p.name == name:
                return p
        raise KeyError(name)

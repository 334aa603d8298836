"""What a Workload asks of the fabric: PodSets and the links between them.

The model is shaped for every workload class Atoll serves: training gangs (required or
preferred level, perf floor, uniform perf), inference replicas (spread across a fault-domain
level), and serving graphs (prefill → decode links with a bandwidth floor or a level bound).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topology._affinity import NodeConstraint
from topology._model import Toleration
from topology._resources import ResourceVector

__all__ = ["DEFAULT_PERF_BAND", "MAX_SLICE_LAYERS", "PERF_RANKS", "GraphLink", "PlacementRequest", "PodSetRequest", "SliceLayer", "Spread"]

MAX_SLICE_LAYERS = 3
"""Slice layers one PodSet may ask for (Kueue's multi-layer slices allow 1 to 3)."""
DEFAULT_PERF_BAND = 0.01
"""``uniform_perf`` gangs ranked by reach (``perf_rank="reach"``): domains whose reach (the best
minimum perf the gang gets inside them) is within this share of the best reach count as equally
fast, and the best fit among them wins. Chosen by measurement (``docs/accelerators.md``): wider
bands traded more perf than fit gave back."""
PERF_RANKS = ("min", "reach")
"""How ``uniform_perf`` ranks the domains it may take: ``min`` (the default) by the minimum perf of
all their usable nodes, then perf spread, then fit; ``reach`` by the best minimum perf the gang
can get inside each, within ``perf_band``, then fit (``docs/accelerators.md`` says when each wins)."""


@dataclass(frozen=True, slots=True)
class Spread:
    """At most ``max_per_domain`` pods of the PodSet in any one domain of ``level``."""

    level: str
    max_per_domain: int = 1

    def __post_init__(self) -> None:
        if self.max_per_domain < 1:
            raise ValueError(f"spread.maxPerDomain must be ≥ 1, got {self.max_per_domain}")


@dataclass(frozen=True, slots=True)
class SliceLayer:
    """Cut the PodSet into groups of ``size`` pods, each group inside one domain of ``level``
    (Kueue's ``podset-slice-required-topology`` + ``podset-slice-size``, or one entry of
    ``podset-slice-required-topology-constraints``)."""

    level: str
    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"slice size must be ≥ 1, got {self.size}")


@dataclass(frozen=True, slots=True)
class PodSetRequest:
    """One PodSet: ``pods`` identical pods of ``per_pod`` resources.

    Level semantics (labels from the flavor's Topology, top → bottom):

    - ``required_level``: the whole PodSet in one domain of that level, or no placement.
    - ``preferred_level``: one domain of that level if one fits; otherwise span the fewest
      domains of that level under the lowest common parent, never above ``max_span_level``.
    - neither: preferred at the node level (fewest nodes, lowest common parent).

    ``tolerations`` are the pod template's own: nodes tainted beyond what the flavor tolerates
    become candidates when these tolerate every such taint. ``node_constraint`` is the pod
    template's nodeSelector and required node affinity: only the nodes it allows are candidates
    for this PodSet (other PodSets of the request keep their own).

    ``slices`` (outermost first, up to 3 layers, each level below the one before and each size
    dividing the one before): the PodSet is ``pods / slices[0].size`` slices, each wholly inside
    one domain of ``slices[0].level``; the slices together obey the required/preferred level,
    which must be at or above the slice level. ``unconstrained``: any nodes, least free first
    (no level). ``balanced``: a span gives each island the same share (±1 pod or slice).
    ``perf_rank`` (with ``uniform_perf``): ``min`` or ``reach`` (see ``PERF_RANKS``); ``perf_band``
    (with ``perf_rank="reach"``): reaches within this share of the best count as equal.
    ``group``: PodSets with the same group name share one domain of their (common) level.
    """

    name: str
    pods: int
    per_pod: ResourceVector
    required_level: str | None = None
    preferred_level: str | None = None
    max_span_level: str | None = None
    perf_floor: float = 0.0
    uniform_perf: bool = False
    perf_band: float = DEFAULT_PERF_BAND
    perf_rank: str = "min"
    spread: Spread | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_constraint: NodeConstraint | None = None
    slices: tuple[SliceLayer, ...] = ()
    unconstrained: bool = False
    balanced: bool = False
    group: str | None = None

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise ValueError(f"podSets[{self.name}].count must be ≥ 1, got {self.pods}")
        self._check_shape()
        if self.per_pod.gpu < 0 or self.per_pod.cpu_milli < 0 or self.per_pod.memory_mib < 0:
            raise ValueError(f"podSets[{self.name}]: per-pod resources must not be negative")
        if self.required_level and self.preferred_level:
            raise ValueError(f"podSets[{self.name}]: set required_level or preferred_level, not both")
        if not 0.0 <= self.perf_floor <= 10.0:
            raise ValueError(f"podSets[{self.name}].perfFloor must be within [0, 10], got {self.perf_floor}")
        if not 0.0 <= self.perf_band <= 0.5:
            raise ValueError(f"podSets[{self.name}].perfBand must be within [0, 0.5], got {self.perf_band}")
        if self.perf_rank not in PERF_RANKS:
            raise ValueError(f"podSets[{self.name}].perfRank must be one of {', '.join(PERF_RANKS)}, got {self.perf_rank!r}")

    def _check_shape(self) -> None:
        where = f"podSets[{self.name}]"
        if self.unconstrained and (self.required_level or self.preferred_level or self.spread):
            raise ValueError(f"{where}: unconstrained placement takes no required/preferred level and no spread")
        if self.slices:
            if len(self.slices) > MAX_SLICE_LAYERS:
                raise ValueError(f"{where}.slices: at most {MAX_SLICE_LAYERS} layers, got {len(self.slices)}")
            if self.spread is not None:
                raise ValueError(f"{where}: slices and spread cannot be combined")
            if self.group is not None:
                raise ValueError(f"{where}: slices and a PodSet group cannot be combined")
            for outer, inner in zip(self.slices, self.slices[1:]):
                if outer.size % inner.size:
                    raise ValueError(f"{where}.slices: size {inner.size} ({inner.level}) must evenly divide the parent layer size "
                                     f"{outer.size} ({outer.level})")
            if self.pods % self.slices[0].size:
                raise ValueError(f"{where}: count {self.pods} is not a multiple of the slice size {self.slices[0].size}")
        if self.group is not None and not (self.required_level or self.preferred_level):
            raise ValueError(f"{where}: a PodSet group needs a required or preferred level")

    @property
    def gpus(self) -> int:
        return self.pods * self.per_pod.gpu


@dataclass(frozen=True, slots=True)
class GraphLink:
    """Traffic between two PodSets (e.g. prefill → decode KV-cache transfer).

    The later-placed PodSet must sit inside the domain, at ``max_level`` or at the highest
    level whose link still gives ``min_bandwidth_gbps``, that holds the earlier one.
    """

    a: str
    b: str
    min_bandwidth_gbps: float | None = None
    max_level: str | None = None

    def __post_init__(self) -> None:
        if (self.min_bandwidth_gbps is None) == (self.max_level is None):
            raise ValueError(f"link {self.a}->{self.b}: set exactly one of minBandwidthGBps or maxLevel")
        if self.min_bandwidth_gbps is not None and self.min_bandwidth_gbps <= 0:
            raise ValueError(f"link {self.a}->{self.b}: minBandwidthGBps must be > 0")


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """All PodSets of one Workload, placed as one atomic decision in PodSet order."""

    podsets: tuple[PodSetRequest, ...]
    links: tuple[GraphLink, ...] = field(default=())
    protect_empty_domains: bool = False
    best_fit: bool = True
    """False: one-domain choices take the first fitting domain in path order (first fit)."""

    def __post_init__(self) -> None:
        if not self.podsets:
            raise ValueError("a placement request needs at least one PodSet")
        names = [p.name for p in self.podsets]
        if len(set(names)) != len(names):
            raise ValueError(f"podSets: names must be unique, got {names}")
        for link in self.links:
            for end in (link.a, link.b):
                if end not in names:
                    raise ValueError(f"link {link.a}->{link.b}: no PodSet named {end!r}")
        for group, members in self.groups().items():
            if len(members) < 2:
                raise ValueError(f"group {group!r}: needs at least 2 PodSets, got {[m.name for m in members]}")
            shapes = {(m.required_level, m.preferred_level) for m in members}
            if len(shapes) != 1:
                raise ValueError(f"group {group!r}: its PodSets must ask for the same required or preferred level, got "
                                 + ", ".join(f"{m.name}: {m.required_level or m.preferred_level}" for m in members))

    def groups(self) -> dict[str, list[PodSetRequest]]:
        """PodSet groups by name, members in request order."""
        out: dict[str, list[PodSetRequest]] = {}
        for p in self.podsets:
            if p.group is not None:
                out.setdefault(p.group, []).append(p)
        return out

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.podsets)

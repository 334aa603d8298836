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

__all__ = ["GraphLink", "PlacementRequest", "PodSetRequest", "Spread"]


@dataclass(frozen=True, slots=True)
class Spread:
    """At most ``max_per_domain`` pods of the PodSet in any one domain of ``level``."""

    level: str
    max_per_domain: int = 1

    def __post_init__(self) -> None:
        if self.max_per_domain < 1:
            raise ValueError(f"spread.maxPerDomain must be ≥ 1, got {self.max_per_domain}")


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
    """

    name: str
    pods: int
    per_pod: ResourceVector
    required_level: str | None = None
    preferred_level: str | None = None
    max_span_level: str | None = None
    perf_floor: float = 0.0
    uniform_perf: bool = False
    spread: Spread | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_constraint: NodeConstraint | None = None

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise ValueError(f"podSets[{self.name}].count must be ≥ 1, got {self.pods}")
        if self.per_pod.gpu < 0 or self.per_pod.cpu_milli < 0 or self.per_pod.memory_mib < 0:
            raise ValueError(f"podSets[{self.name}]: per-pod resources must not be negative")
        if self.required_level and self.preferred_level:
            raise ValueError(f"podSets[{self.name}]: set required_level or preferred_level, not both")
        if not 0.0 <= self.perf_floor <= 10.0:
            raise ValueError(f"podSets[{self.name}].perfFloor must be within [0, 10], got {self.perf_floor}")

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

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.podsets)

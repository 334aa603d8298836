"""The profiles document (ConfigMap ``atoll-policies``, key ``profiles.yaml``) as pydantic models.

Validation happens once, at load: a document that passes can be applied whole. Errors name the
key path as users wrote it (``profiles.strict.retry.maxSeconds``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_FABRIC_LINK",
    "DEFAULT_LINKS",
    "FlavorSettings",
    "LinkSettings",
    "FragmentationSettings",
    "Profile",
    "ProfilesDocument",
    "RetrySettings",
    "SpreadSettings",
    "WorkloadClass",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class RetrySettings(_Strict):
    """Backoff for Retry: ``initialSeconds · 2^attempt``, capped at ``maxSeconds``.

    Kueue adds no backoff of its own to an admission check's Retry, so Atoll owns it.
    """

    initial_seconds: int = Field(default=30, gt=0, alias="initialSeconds")
    max_seconds: int = Field(default=600, gt=0, alias="maxSeconds")

    @model_validator(mode="after")
    def _ordered(self) -> RetrySettings:
        if self.max_seconds < self.initial_seconds:
            raise ValueError(f"maxSeconds ({self.max_seconds}) must be ≥ initialSeconds ({self.initial_seconds})")
        return self

    def delay(self, attempt: int) -> int:
        return int(min(self.max_seconds, self.initial_seconds * 2 ** min(max(attempt, 0), 30)))


class FragmentationSettings(_Strict):
    best_fit: bool = Field(default=True, alias="bestFit")
    protect_empty_domains: bool = Field(default=False, alias="protectEmptyDomains")
    reference_gang_gpus: int = Field(default=8, gt=0, alias="referenceGangGPUs")
    """Gang size (GPUs) the fragmentation index is measured against."""


class Profile(_Strict):
    """A placement profile. Strict: ``requiredLevel`` (one domain or wait). Elastic:
    ``preferredLevel`` for up to ``relaxAfterSeconds`` of waiting, then a span of the fewest
    such domains, never above ``maxSpanLevel``."""

    required_level: str | None = Field(default=None, alias="requiredLevel")
    preferred_level: str | None = Field(default=None, alias="preferredLevel")
    max_span_level: str | None = Field(default=None, alias="maxSpanLevel")
    relax_after_seconds: int | None = Field(default=None, ge=0, alias="relaxAfterSeconds")
    retry: RetrySettings = RetrySettings()
    fragmentation: FragmentationSettings = FragmentationSettings()

    @model_validator(mode="after")
    def _one_mode(self) -> Profile:
        if self.required_level and self.preferred_level:
            raise ValueError("set requiredLevel (strict) or preferredLevel (elastic), not both")
        if self.required_level and (self.max_span_level or self.relax_after_seconds is not None):
            raise ValueError("maxSpanLevel and relaxAfterSeconds apply to elastic profiles (preferredLevel), not to requiredLevel")
        return self

    @property
    def strict(self) -> bool:
        return self.required_level is not None


class SpreadSettings(_Strict):
    level: str = Field(min_length=1)
    max_per_domain: int = Field(default=1, ge=1, alias="maxPerDomain")


class WorkloadClass(_Strict):
    perf_floor: float = Field(default=0.0, ge=0.0, le=10.0, alias="perfFloor")
    uniform_perf: bool = Field(default=False, alias="uniformPerf")
    spread: SpreadSettings | None = None


class LinkSettings(_Strict):
    """Per-GPU bandwidth and latency between two GPUs whose lowest common domain is at a level."""

    bandwidth_gbps: float = Field(gt=0, alias="bandwidthGBps")
    latency_us: float = Field(default=5.0, ge=0, alias="latencyUs")


class FlavorSettings(_Strict):
    topology: str = Field(min_length=1)
    """The Kueue Topology object whose levels describe this flavor's fabric."""
    enforcement: Literal["domain", "exact"] = "domain"
    links: dict[str, LinkSettings] = Field(default_factory=dict)
    """Link model per level label; levels not listed use Atoll's defaults (see DEFAULT_LINKS)."""


DEFAULT_LINKS: dict[str, tuple[float, float]] = {
    "kubernetes.io/hostname": (900.0, 1.0),   # NVLink 4 inside an HGX/DGX H100 node
    "nvidia.com/gpu.clique": (1800.0, 1.0),   # NVLink 5 inside a GB200 NVL72 rack
}
"""Defaults (GB/s per GPU, µs) by label; any other level is an InfiniBand NDR hop (50 GB/s, 5 µs)."""
DEFAULT_FABRIC_LINK = (50.0, 5.0)

_DEFAULT_PROFILES = {
    "strict": Profile(requiredLevel="nvidia.com/gpu.clique"),
    "elastic": Profile(preferredLevel="nvidia.com/gpu.clique", relaxAfterSeconds=300),
}


class ProfilesDocument(_Strict):
    default_profile: str = Field(default="elastic", alias="defaultProfile")
    flavors: dict[str, FlavorSettings] = Field(default_factory=dict)
    profiles: dict[str, Profile] = Field(default_factory=lambda: dict(_DEFAULT_PROFILES))
    classes: dict[str, WorkloadClass] = Field(default_factory=dict)
    queues: dict[str, str] = Field(default_factory=dict)
    """LocalQueue (``namespace/name``) or ClusterQueue name → profile."""

    @model_validator(mode="after")
    def _references(self) -> ProfilesDocument:
        if not self.profiles:
            raise ValueError("profiles: at least one profile is needed")
        if self.default_profile not in self.profiles:
            raise ValueError(f"defaultProfile: {self.default_profile!r} is not a profile (have {sorted(self.profiles)})")
        for queue, profile in self.queues.items():
            if profile not in self.profiles:
                raise ValueError(f"queues.{queue}: {profile!r} is not a profile (have {sorted(self.profiles)})")
        return self

    def profile_for(self, *, annotation: str | None, local_queue: str | None, cluster_queue: str | None) -> tuple[str, Profile]:
        """Pod-template annotation first, then the LocalQueue, the ClusterQueue, the default."""
        if annotation:
            if annotation not in self.profiles:
                raise KeyError(f"profile {annotation!r} does not exist (have {sorted(self.profiles)})")
            return annotation, self.profiles[annotation]
        for key in (local_queue, cluster_queue):
            if key and key in self.queues:
                name = self.queues[key]
                return name, self.profiles[name]
        return self.default_profile, self.profiles[self.default_profile]

"""The profiles document (ConfigMap ``atoll-policies``, key ``profiles.yaml``) as pydantic models.

Validation happens once, at load: a document that passes can be applied whole. Errors name the
key path as users wrote it (``profiles.strict.retry.maxSeconds``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from topology import DEFAULT_PERF_BAND, check_accelerator_resource

__all__ = [
    "DEFAULT_FABRIC_LINK",
    "DEFAULT_LINKS",
    "FlavorSettings",
    "FragmentationSettings",
    "LevelOverrides",
    "LinkSettings",
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
    perf_first: Literal["all", "gangs"] = Field(default="all", alias="perfFirst")
    """Which PodSets a class's ``uniformPerf`` ranks by speed before fit: ``all`` (the default),
    or ``gangs``, those of more than one pod only. A one-pod PodSet then takes the best-fitting
    domain (speed breaks ties; the class's ``perfFloor`` still applies), so small Workloads fill
    partly used islands and leave whole ones to the Workloads that need them (``docs/queue.md``)."""


class QueueingSettings(_Strict):
    """The queue manager's choices for a profile's waiting Workloads (all off by default).

    ``waitOrSpan`` (elastic profiles): span as soon as the expected wait for one domain exceeds
    the best span's expected extra run time under the cost model; ``relaxAfterSeconds`` stays the
    upper bound. ``reserveAfterSeconds``: a gang (more than one pod) that has waited this long
    reserves the domain with the fewest GPUs to drain; other Workloads land there only by
    backfill. ``maxReservationsPerFlavor`` bounds the reservations held on one flavor.
    ``reserveTarget``: ``fewestToDrain`` (the default) or ``soonestFree`` (the domain whose GPUs
    the gang needs are expected free first, ties by fewest to drain). ``retargetMarginSeconds``
    (``soonestFree`` only): a held reservation moves to the soonest-free domain when its own
    domain is now expected free more than this much later; unset, it never moves. ``reserveAt``:
    ``island`` (the default) reserves in one domain of the level the gang waits for one domain of;
    ``span`` makes a gang whose profile may span (``preferredLevel`` set) reserve in one domain of
    ``maxSpanLevel`` (the whole flavor without one), the nodes there expected free soonest, chosen
    again at each decision: the room its span will take, not an island it may never use.
    ``perfFloorByCost``: a Workload whose class ``perfFloor`` leaves it waiting takes a placement
    that only meets this lower floor when its expected extra run time (runtime × (slowdown − 1),
    the slowest GPU's stretch priced by the cost model) is less than the expected wait for one
    domain; the class floor stays the upper bound, as ``relaxAfterSeconds`` is for spans.
    ``perfFloorHoldSeconds`` (with ``perfFloorByCost``): the longest the class floor holds a
    waiting Workload; past it, the placement under the lower floor is taken whatever the costs
    say (unset: the costs decide alone). ``perfFloorIdle`` (with ``perfFloorByCost``): ``weigh``
    (the default) prices every placement under the floor as above; ``take`` takes at once one
    whose GPUs are all under the class floor (no GPU at the floor is slowed by it, and GPUs under
    the floor are ones no Workload the floor holds may use, so they idle otherwise), and weighs
    the rest (a gang mixing nodes above and below the floor, its slowest GPU pacing all).
    ``parkWaiting``: a Workload of this profile that waits
    for a domain is parked instead of sent to ``Retry``: Atoll's check stays ``Pending``, so Kueue
    keeps its quota, and it is decided again only when something it waits for can have changed;
    meanwhile it gives its quota back to a Workload waiting for quota (``docs/queue.md``). The
    controller's ``--park-waiting`` / ``--no-park-waiting`` (the simulator's ``--parking on|off``)
    override it for every profile.
    ``holdBehindGangs`` (with ``reserveAfterSeconds``): a gang that has waited
    ``reserveAfterSeconds`` since it was created (for quota or for a domain) is owed: a Workload of
    this profile behind it in Kueue's order in the same ClusterQueue waits (parked, reason
    ``behind-gang``) instead of taking quota or GPUs the gang needs. ``quota``: while the gang
    waits for quota; ``start``: until the gang starts. ``off`` (the default): never. A gang that
    is owed itself is never held; with it set, the reservation's ``reserveAfterSeconds`` counts
    from the Workload's creation, not its first decision. ``holdBehindGangsMinGPUs``: only a gang
    of at least this many GPUs is owed (0: any gang). ``holdBehindGangsBackfill``: a held Workload goes when it is expected to end (its
    ``maximumExecutionTimeSeconds``, else the runtime learned for its queue and size) before the
    gang is expected to have its GPUs (as the running Workloads' expected ends free them).
    ``waitCountsQueue``: the expected
    wait for one domain (both sides of ``waitOrSpan`` and of ``perfFloorByCost``) counts the
    Workloads queued ahead on the flavor (priority, then creation), which take the room before this
    one as it frees, instead of the room alone (``docs/queue.md``, "The queue ahead").
    ``spanCountsQueue``: ``waitOrSpan`` prices a span as its own extra run time plus what it costs
    the other Workloads in line: the delay to their expected starts with the span's GPUs held for
    its slowed runtime, against this Workload waiting its turn in line. ``domain``: the line is
    the Workloads waiting for a domain on the flavor; ``quota``: and those of its ClusterQueue
    still waiting for quota; ``off`` (the default): the span's own cost alone (``docs/queue.md``,
    "A span priced by the queue behind it").
    ``lendParked`` (with parking): a parked Workload of this profile that gave its quota back is
    reactivated, even while a Workload queued before the give still waits for quota, as soon as
    the placement its decision searched would succeed now (``fits``), or only when, besides, the
    quota free now covers it, so it starts without taking quota a waiter ahead could use
    (``starts``); it is then decided afresh. ``off`` (the default): never (``docs/queue.md``,
    "Lending parked quota").
    ``waitWeight`` (with ``waitOrSpan`` or ``perfFloorByCost``): the expected wait counts this
    many times in both comparisons, as the price of the GPUs a wait leaves idle, a cost the
    Workload's own delay does not show; 1 (the default) counts its own delay alone, and a
    larger weight spans, or takes slower GPUs, sooner (``docs/queue.md``, "A wait charged for
    the GPUs it leaves idle")."""

    wait_or_span: bool = Field(default=False, alias="waitOrSpan", strict=True)
    reserve_after_seconds: int | None = Field(default=None, ge=0, alias="reserveAfterSeconds")
    max_reservations_per_flavor: int = Field(default=1, ge=1, alias="maxReservationsPerFlavor")
    reserve_target: Literal["fewestToDrain", "soonestFree"] = Field(default="fewestToDrain", alias="reserveTarget")
    retarget_margin_seconds: int | None = Field(default=None, gt=0, alias="retargetMarginSeconds")
    reserve_at: Literal["island", "span"] = Field(default="island", alias="reserveAt")
    perf_floor_by_cost: float | None = Field(default=None, ge=0.0, le=10.0, alias="perfFloorByCost")
    perf_floor_hold_seconds: int | None = Field(default=None, ge=0, alias="perfFloorHoldSeconds")
    park_waiting: bool = Field(default=False, alias="parkWaiting", strict=True)
    perf_floor_idle: Literal["weigh", "take"] = Field(default="weigh", alias="perfFloorIdle")
    hold_behind_gangs: Literal["off", "quota", "start"] = Field(default="off", alias="holdBehindGangs")
    hold_min_gpus: int = Field(default=0, ge=0, alias="holdBehindGangsMinGPUs")
    hold_backfill: bool = Field(default=False, alias="holdBehindGangsBackfill", strict=True)
    wait_counts_queue: bool = Field(default=False, alias="waitCountsQueue", strict=True)
    span_counts_queue: Literal["off", "domain", "quota"] = Field(default="off", alias="spanCountsQueue")
    lend_parked: Literal["off", "fits", "starts"] = Field(default="off", alias="lendParked")
    wait_weight: float = Field(default=1.0, ge=1.0, le=100.0, alias="waitWeight")

    @model_validator(mode="after")
    def _idle_lowers_to(self) -> QueueingSettings:
        if self.perf_floor_idle == "take" and self.perf_floor_by_cost is None:
            raise ValueError("perfFloorIdle: take lowers the class floor to perfFloorByCost; set perfFloorByCost (e.g. 0.0)")
        if self.hold_behind_gangs != "off" and self.reserve_after_seconds is None:
            raise ValueError(f"holdBehindGangs: {self.hold_behind_gangs} holds Workloads behind a gang that has waited "
                             "reserveAfterSeconds; set reserveAfterSeconds (e.g. 1800)")
        if self.wait_weight != 1.0 and not self.wait_or_span and self.perf_floor_by_cost is None:
            raise ValueError(f"waitWeight: {self.wait_weight:g} weighs the wait against a span or slower GPUs; "
                             "set waitOrSpan: true or perfFloorByCost (e.g. 0.0), or leave waitWeight at 1")
        return self


_LEVEL_KEYS = (("requiredLevel", "required_level"), ("preferredLevel", "preferred_level"), ("maxSpanLevel", "max_span_level"))


class LevelOverrides(_Strict):
    """A profile's levels for one flavor (``profiles.<name>.flavors.<flavor>``). Heterogeneous
    clusters give each flavor its own Topology, so a level one flavor has another may lack: a
    field set here replaces the profile's for that flavor only; ``null`` removes it (e.g. no
    ``maxSpanLevel`` cap on a flavor without that level). Unset fields keep the profile's."""

    required_level: str | None = Field(default=None, alias="requiredLevel")
    preferred_level: str | None = Field(default=None, alias="preferredLevel")
    max_span_level: str | None = Field(default=None, alias="maxSpanLevel")


_FOR_FLAVOR: dict[tuple[int, str, tuple[str, ...], str], tuple[Profile, Profile | Exception]] = {}
"""``Profile.for_flavor``'s answers by profile identity (profiles are frozen; a copy is another
profile): asked twice on every decision."""


class Profile(_Strict):
    """A placement profile. Strict: ``requiredLevel`` (one domain or wait). Elastic:
    ``preferredLevel`` for up to ``relaxAfterSeconds`` of waiting, then a span of the fewest
    such domains, never above ``maxSpanLevel``.

    Heterogeneous clusters give each flavor its own Topology. A level field may therefore be a
    list of candidates, the first one the flavor's Topology has wins (``maxSpanLevel:
    [network.example.com/su, network.example.com/leaf]``), and ``flavors.<flavor>`` overrides
    the fields for one flavor by name. ``for_flavor`` gives the profile one flavor sees; until
    then each field holds its first candidate."""

    required_level: str | None = Field(default=None, alias="requiredLevel")
    preferred_level: str | None = Field(default=None, alias="preferredLevel")
    max_span_level: str | None = Field(default=None, alias="maxSpanLevel")
    relax_after_seconds: int | None = Field(default=None, ge=0, alias="relaxAfterSeconds")
    retry: RetrySettings = RetrySettings()
    fragmentation: FragmentationSettings = FragmentationSettings()
    balanced_placement: bool = Field(default=False, alias="balancedPlacement", strict=True)
    """A gang that must span islands is shared evenly over the fewest that allow it (64 pods over
    islands of 18: 16 × 4, not 18 + 18 + 18 + 10), as ``atoll.dev/balanced-placement: "true"``
    does for one PodSet: a ring runs at the pace of its most crowded link."""
    preempt_domain: Literal["off", "dry-run", "on"] = Field(default="off", alias="preemptDomain")
    """A gang that waits for one domain of its required level may clear the cheapest domain of
    lower-priority Workloads, as its ClusterQueue's preemption policy allows: ``on`` evicts them
    (Atoll's check to Retry), ``dry-run`` only records the plan, ``off`` (the default) neither."""

    @field_validator("preempt_domain", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        """YAML reads a bare ``on``/``off`` as a boolean: take it as the word it was."""
        return ("on" if value else "off") if isinstance(value, bool) else value
    flavors: dict[str, LevelOverrides] = Field(default_factory=dict)
    queueing: QueueingSettings = QueueingSettings()
    _name: str = PrivateAttr(default="profile")
    _candidates: dict[str, tuple[str, ...]] = PrivateAttr(default_factory=dict)
    """``for_flavor``'s answers (the model is frozen, so they never go stale)."""

    @model_validator(mode="wrap")
    @classmethod
    def _level_lists(cls, data: Any, handler: ModelWrapValidatorHandler[Profile]) -> Profile:
        """Keep a list of candidate levels aside; the field itself holds the first."""
        lists: dict[str, tuple[str, ...]] = {}
        if isinstance(data, dict):
            data = dict(data)
            for key, attr in _LEVEL_KEYS:
                for given in (key, attr):
                    value = data.get(given)
                    if isinstance(value, list):
                        if not value or not all(isinstance(v, str) and v for v in value):
                            raise ValueError(f"{key}: give a level, or a non-empty list of levels (the first the flavor has wins)")
                        lists[attr] = tuple(value)
                        data[given] = value[0]
        model = handler(data)
        if lists:
            model._candidates = {**model._candidates, **lists}
        return model

    @model_serializer(mode="wrap")
    def _dump_level_lists(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """Dump candidate lists as written, so a dumped document loads back the same."""
        data = handler(self)
        if isinstance(data, dict):
            for key, attr in _LEVEL_KEYS:
                name = key if info.by_alias else attr
                if attr in self._candidates and name in data:
                    data[name] = list(self._candidates[attr])
        return data

    @model_validator(mode="after")
    def _one_mode(self) -> Profile:
        if self.required_level and self.preferred_level:
            raise ValueError("set requiredLevel (strict) or preferredLevel (elastic), not both")
        if self.required_level and (self.max_span_level or self.relax_after_seconds is not None):
            raise ValueError("maxSpanLevel and relaxAfterSeconds apply to elastic profiles (preferredLevel), not to requiredLevel")
        if self.queueing.wait_or_span and not self.preferred_level:
            raise ValueError("queueing.waitOrSpan: weighs waiting for one preferredLevel domain against spanning; set preferredLevel, "
                             "or remove waitOrSpan")
        mode = ("requiredLevel",) if self.required_level else ("preferredLevel", "maxSpanLevel") if self.preferred_level else ("maxSpanLevel",)
        for flavor, overrides in self.flavors.items():
            for key, attr in _LEVEL_KEYS:
                if attr in overrides.model_fields_set and key not in mode:
                    raise ValueError(f"flavors.{flavor}.{key}: this profile sets {' and '.join(mode)} only; a flavor overrides "
                                     "those, it cannot switch the profile between strict and elastic")
            if "required_level" in overrides.model_fields_set and not overrides.required_level:
                raise ValueError(f"flavors.{flavor}.requiredLevel: a strict profile needs a level on every flavor")
            if "preferred_level" in overrides.model_fields_set and not overrides.preferred_level:
                raise ValueError(f"flavors.{flavor}.preferredLevel: an elastic profile needs a level on every flavor")
        return self

    @property
    def strict(self) -> bool:
        return self.required_level is not None

    def for_flavor(self, flavor: str, level_labels: Sequence[str], *, name: str | None = None) -> Profile:
        """This profile as ``flavor`` sees it: its ``flavors.<flavor>`` overrides applied, every
        level checked against the flavor's Topology (``level_labels``). Raises ``ProfileLevelError``
        naming the field (``profiles.elastic.flavors.a100.maxSpanLevel``) for a level still missing."""
        label = name or self._name
        key = (id(self), flavor, level_labels if type(level_labels) is tuple else tuple(level_labels), label)
        hit = _FOR_FLAVOR.get(key)
        if hit is None:
            try:
                answer: Profile | Exception = self._for_flavor(flavor, level_labels, label)
            except ValueError as exc:
                answer = exc
            if len(_FOR_FLAVOR) >= 1024:
                _FOR_FLAVOR.clear()
            hit = _FOR_FLAVOR[key] = (self, answer)  # the profile is held: no id is reused while it is here
        known = hit[1]
        if isinstance(known, Exception):
            raise known
        return known

    def _for_flavor(self, flavor: str, level_labels: Sequence[str], label: str) -> Profile:
        from policies._decision import ProfileLevelError  # defined beside decide(), which imports this module

        overrides = self.flavors.get(flavor)
        given = overrides.model_fields_set if overrides else set()
        update: dict[str, object] = {"flavors": {}}
        for key, attr in _LEVEL_KEYS:
            if attr in given:
                value = getattr(overrides, attr)
                if value and value not in level_labels:
                    raise ProfileLevelError(f"profiles.{label}.flavors.{flavor}.{key}: flavor {flavor} has no level {value!r} "
                                            f"(levels: {list(level_labels)})", wanted=(value,), levels=level_labels)
                update[attr] = value
                continue
            candidates = self._candidates.get(attr) or ((getattr(self, attr),) if getattr(self, attr) else ())
            found = next((c for c in candidates if c in level_labels), None)
            if candidates and found is None:
                what = f"level {candidates[0]!r}" if len(candidates) == 1 else f"level of {list(candidates)}"
                fix = " (or null: no cap)" if key == "maxSpanLevel" else ""
                raise ProfileLevelError(f"profiles.{label}.{key}: flavor {flavor} has no {what} (levels: {list(level_labels)}); "
                                        f"set profiles.{label}.flavors.{flavor}.{key} to one of them{fix}", wanted=candidates, levels=level_labels)
            update[attr] = found
        resolved = self.model_copy(update=update)
        resolved._name = label
        resolved._candidates = {}
        return resolved


class SpreadSettings(_Strict):
    level: str = Field(min_length=1)
    max_per_domain: int = Field(default=1, ge=1, alias="maxPerDomain")


class WorkloadClass(_Strict):
    perf_floor: float = Field(default=0.0, ge=0.0, le=10.0, alias="perfFloor")
    uniform_perf: bool = Field(default=False, alias="uniformPerf")
    perf_band: float = Field(default=DEFAULT_PERF_BAND, ge=0.0, le=0.5, alias="perfBand")
    """With ``perfRank: reach``: domains whose best gang minimum perf is within this share of the
    best count as equally fast, and the best fit among them wins."""
    perf_rank: Literal["min", "reach"] = Field(default="min", alias="perfRank")
    """With ``uniformPerf``: ``min`` (the default) ranks domains by the minimum perf of all their
    usable nodes; ``reach`` by the best minimum perf the gang can get inside each, within
    ``perfBand`` (``docs/accelerators.md`` gives the measurements that say when each wins)."""
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
    gpu_resource: str | None = Field(default=None, alias="gpuResource")
    """The accelerator resource this flavor's nodes offer and its pods request (``amd.com/gpu``,
    ``habana.ai/gaudi``, …); unset: the controller's ``--gpu-resource``."""

    @field_validator("gpu_resource")
    @classmethod
    def _accelerator_name(cls, value: str | None) -> str | None:
        return value if value is None else check_accelerator_resource(value)


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


class QueueRule(_Strict):
    """A queue's profile and what its Workloads may ask for instead. ``allowedProfiles`` and
    ``allowedClasses``, when set, are the only values the ``atoll.dev/profile`` and
    ``atoll.dev/class`` pod-template annotations may name on this queue; a Workload naming
    another is Rejected with the rule. Unset: any (the short form ``queue: profile`` is this)."""

    profile: str | None = None
    allowed_profiles: list[str] | None = Field(default=None, alias="allowedProfiles")
    allowed_classes: list[str] | None = Field(default=None, alias="allowedClasses")


class ProfilesDocument(_Strict):
    default_profile: str = Field(default="elastic", alias="defaultProfile")
    flavors: dict[str, FlavorSettings] = Field(default_factory=dict)
    profiles: dict[str, Profile] = Field(default_factory=lambda: dict(_DEFAULT_PROFILES))
    classes: dict[str, WorkloadClass] = Field(default_factory=dict)
    queues: dict[str, QueueRule] = Field(default_factory=dict)
    """LocalQueue (``namespace/name``) or ClusterQueue name → ``QueueRule``; a bare profile name
    (``team-a/research: strict``) is the rule with only ``profile`` set."""

    @field_validator("queues", mode="before")
    @classmethod
    def _short_queue_form(cls, queues: Any) -> Any:
        if isinstance(queues, dict):
            return {k: {"profile": v} if isinstance(v, str) else v for k, v in queues.items()}
        return queues

    @model_validator(mode="after")
    def _references(self) -> ProfilesDocument:
        for name, profile in self.profiles.items():
            profile._name = name  # so a level error names profiles.<name>.…
        if not self.profiles:
            raise ValueError("profiles: at least one profile is needed")
        if self.default_profile not in self.profiles:
            raise ValueError(f"defaultProfile: {self.default_profile!r} is not a profile (have {sorted(self.profiles)})")
        for queue, rule in self.queues.items():
            if rule.profile is not None and rule.profile not in self.profiles:
                key = f"queues.{queue}" + ("" if rule.model_fields_set == {"profile"} else ".profile")  # the short form has no .profile
                raise ValueError(f"{key}: {rule.profile!r} is not a profile (have {sorted(self.profiles)})")
            for name in rule.allowed_profiles or ():
                if name not in self.profiles:
                    raise ValueError(f"queues.{queue}.allowedProfiles: {name!r} is not a profile (have {sorted(self.profiles)})")
            for name in rule.allowed_classes or ():
                if name not in self.classes:
                    raise ValueError(f"queues.{queue}.allowedClasses: {name!r} is not a class (have {sorted(self.classes)})")
            if rule.profile is not None and rule.allowed_profiles is not None and rule.profile not in rule.allowed_profiles:
                raise ValueError(f"queues.{queue}.allowedProfiles: {rule.allowed_profiles} leaves out the queue's own profile {rule.profile!r}")
        return self

    def accelerators(self, default: str) -> tuple[str, ...]:
        """Every accelerator resource a flavor of this document offers: ``default`` (the
        controller's ``--gpu-resource``, for flavors that name none) first, then the others sorted."""
        return (default, *sorted({f.gpu_resource for f in self.flavors.values() if f.gpu_resource and f.gpu_resource != default}))

    def _rule(self, queue: str | None) -> QueueRule | None:
        return self.queues.get(queue) if queue else None

    def disallowed(self, *, profile: str | None, workload_class: str | None, local_queue: str | None,
                   cluster_queue: str | None) -> str | None:
        """Why a Workload's ``atoll.dev/profile`` or ``atoll.dev/class`` annotation breaks a rule
        of its LocalQueue or ClusterQueue (both bind), naming the rule; None when it breaks none."""
        for queue in (local_queue, cluster_queue):
            rule = self._rule(queue)
            if rule is None:
                continue
            if profile and rule.allowed_profiles is not None and profile not in rule.allowed_profiles:
                return (f"atoll.dev/profile={profile!r} is not allowed on queue {queue} (queues.{queue}.allowedProfiles: "
                        f"{', '.join(rule.allowed_profiles)}); remove the annotation or name an allowed profile")
            if workload_class and rule.allowed_classes is not None and workload_class not in rule.allowed_classes:
                allowed = ", ".join(rule.allowed_classes) or "none"
                return (f"atoll.dev/class={workload_class!r} is not allowed on queue {queue} (queues.{queue}.allowedClasses: "
                        f"{allowed}); remove the annotation or name an allowed class")
        return None

    def profile_for(self, *, annotation: str | None, local_queue: str | None, cluster_queue: str | None) -> tuple[str, Profile]:
        """Pod-template annotation first, then the LocalQueue, the ClusterQueue, the default."""
        if annotation:
            if annotation not in self.profiles:
                raise KeyError(f"profile {annotation!r} does not exist (have {sorted(self.profiles)})")
            return annotation, self.profiles[annotation]
        for key in (local_queue, cluster_queue):
            rule = self._rule(key)
            if rule is not None and rule.profile is not None:
                return rule.profile, self.profiles[rule.profile]
        return self.default_profile, self.profiles[self.default_profile]

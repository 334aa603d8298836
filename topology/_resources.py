"""Resource vectors and Kubernetes quantity parsing.

The hot path works on a fixed resource order so every array has the same shape:
``GPU, CPU (milli-cores), MEMORY (MiB), PODS``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "CPU",
    "GPU",
    "LIMITS",
    "MAX_COUNT",
    "MEMORY",
    "NUM_RESOURCES",
    "PODS",
    "RESOURCE_NAMES",
    "ResourceVector",
    "check_accelerator_resource",
    "parse_amount",
    "parse_count",
    "parse_cpu_milli",
    "parse_memory_mib",
]

GPU, CPU, MEMORY, PODS = 0, 1, 2, 3
NUM_RESOURCES = 4
RESOURCE_NAMES = ("gpu", "cpu_milli", "memory_mib", "pods")

MAX_COUNT = 1_000_000
"""Most pods one PodSet may ask for (and most pods a node may hold)."""
LIMITS = (4096, 10**9, 2**30, MAX_COUNT)
"""Sane upper bounds per resource, in hot-path units: 4096 GPUs, a million cores (in milli-cores),
1 PiB of memory (in MiB), a million pods. Anything above is a typo or an attack; bounding it
keeps every product in the finder (pods × per-pod amount) far inside int64."""

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_ACCELERATOR = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})+/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def check_accelerator_resource(value: str, field: str = "") -> str:
    """``value`` if it is an extended resource name an accelerator device plugin can offer
    (``vendor-domain/name``: ``nvidia.com/gpu``, ``amd.com/gpu``, ``habana.ai/gaudi``); else a
    ValueError (naming ``field`` when given; a pydantic validator leaves it to the location). Kubernetes' own names (``cpu``, ``kubernetes.io/...``) are refused."""
    domain, _, name = value.partition("/")
    if (not _ACCELERATOR.fullmatch(value) or len(domain) > 253 or len(name) > 63 or domain == "kubernetes.io"
            or domain.endswith(".kubernetes.io") or domain == "requests"):
        raise ValueError(f"{field + ': ' if field else ''}{value!r} is not an accelerator resource name: give the device plugin's extended resource, "
                         "vendor-domain/name (e.g. nvidia.com/gpu, amd.com/gpu, habana.ai/gaudi)")
    return value


# ASCII only: ``[0-9]`` (never ``\d``, which takes any Unicode digit); the whole string must match.
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?", re.ASCII)
_MAX_EXPONENT = 400
"""Exponents beyond this are not read at all (``1e999999`` would otherwise be parsed as infinity)."""
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def _parse_quantity(value: object, what: str) -> float:
    """A Kubernetes quantity ("4", "500m", "16Gi", 2) as a float in base units."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a quantity, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            raise ValueError(f"{what}: {value!r} is out of range") from None
    elif isinstance(value, str):
        known = _PARSED.get(value)
        if known is not None:  # every pod of a Job carries the same few strings
            return known
        match = _QUANTITY.fullmatch(value.strip())
        if not match:
            raise ValueError(f"{what}: {value!r} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)")
        exponent = re.search(r"[eE]([+-]?[0-9]+)$", match.group(1))
        if exponent and abs(int(exponent.group(1))) > _MAX_EXPONENT:
            raise ValueError(f"{what}: {value!r} is out of range")
        number = float(match.group(1))
        suffix = match.group(2)
        if suffix in _BINARY:
            number *= _BINARY[suffix]
        elif suffix:
            number *= _DECIMAL[suffix]
    else:
        raise ValueError(f"{what}: expected a quantity, got {type(value).__name__}")
    if not math.isfinite(number):
        raise ValueError(f"{what}: {value!r} is not a finite quantity")
    if number < 0:
        raise ValueError(f"{what}: {value!r} must not be negative")
    if isinstance(value, str):
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[value] = number
    return number


_PARSED: dict[str, float] = {}
"""Quantity strings already read (valid ones only; an invalid one raises with its field every time)."""
_PARSED_MAX = 4096


def _bounded(number: float, value: object, what: str, limit: int | None, unit: str) -> float:
    """``number`` (already in hot-path units) if within ``limit``; checked on the float, before any
    conversion, so a huge value never reaches ``int()`` or an int64 array."""
    if limit is not None and number > limit:
        raise ValueError(f"{what}: {value!r} exceeds the limit of {limit}{unit}")
    return number


def parse_amount(value: object, what: str, limit: int | None = None, unit: str = "") -> float:
    """A quantity in its base units (bytes, counts), bounded by ``limit`` in those units."""
    return _bounded(_parse_quantity(value, what), value, what, limit, unit)


def parse_cpu_milli(value: object, what: str = "cpu", limit: int | None = None) -> int:
    """CPU quantity in milli-cores (rounded up, as the kubelet accounts requests)."""
    number = _bounded(_parse_quantity(value, what) * 1000, value, what, limit, " milli-cores")
    return int(-(-number // 1))


def parse_memory_mib(value: object, what: str = "memory", limit: int | None = None) -> int:
    """Memory quantity in MiB (rounded up so a request is never under-counted)."""
    number = _bounded(_parse_quantity(value, what) / 2**20, value, what, limit, " MiB")
    return int(-(-number // 1))


def parse_count(value: object, what: str, limit: int | None = None) -> int:
    """An integer count (GPUs, pods); fractional counts are an error."""
    number = _bounded(_parse_quantity(value, what), value, what, limit, "")
    if number != int(number):
        raise ValueError(f"{what}: {value!r} must be a whole number")
    return int(number)


@dataclass(frozen=True, slots=True)
class ResourceVector:
    """Amounts of the four resources Atoll accounts, in hot-path units."""

    gpu: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    pods: int = 0

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.gpu, self.cpu_milli, self.memory_mib, self.pods)

    def __add__(self, other: ResourceVector) -> ResourceVector:
        return ResourceVector(self.gpu + other.gpu, self.cpu_milli + other.cpu_milli, self.memory_mib + other.memory_mib,
                              self.pods + other.pods)

    def scaled(self, factor: int) -> ResourceVector:
        return ResourceVector(self.gpu * factor, self.cpu_milli * factor, self.memory_mib * factor, self.pods * factor)

    @classmethod
    def from_kube(cls, resources: dict[str, object], gpu_resource: str | tuple[str, ...], what: str) -> ResourceVector:
        """Read a Kubernetes resource map (allocatable, requests); unknown keys are ignored. Every
        amount is bounded by ``LIMITS`` (the error names the field). ``gpu_resource`` may name
        several accelerator resources (one per flavor kind): the GPU column is their sum, so a
        node or pod counts the accelerator it has."""
        names = (gpu_resource,) if isinstance(gpu_resource, str) else gpu_resource
        gpu = 0
        for name in names:
            gpu += parse_count(resources.get(name, 0), f"{what}.{name}", LIMITS[GPU])
        return cls(
            gpu=gpu,
            cpu_milli=parse_cpu_milli(resources.get("cpu", 0), f"{what}.cpu", LIMITS[CPU]),
            memory_mib=parse_memory_mib(resources.get("memory", 0), f"{what}.memory", LIMITS[MEMORY]),
            pods=parse_count(resources.get("pods", 0), f"{what}.pods", LIMITS[PODS]),
        )

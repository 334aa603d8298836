"""Resource vectors and Kubernetes quantity parsing.

The hot path works on a fixed resource order so every array has the same shape:
``GPU, CPU (milli-cores), MEMORY (MiB), PODS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CPU",
    "GPU",
    "MEMORY",
    "NUM_RESOURCES",
    "PODS",
    "RESOURCE_NAMES",
    "ResourceVector",
    "parse_cpu_milli",
    "parse_memory_mib",
    "parse_count",
]

GPU, CPU, MEMORY, PODS = 0, 1, 2, 3
NUM_RESOURCES = 4
RESOURCE_NAMES = ("gpu", "cpu_milli", "memory_mib", "pods")

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def _parse_quantity(value: object, what: str) -> float:
    """A Kubernetes quantity ("4", "500m", "16Gi", 2) as a float in base units."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a quantity, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        match = _QUANTITY.match(str(value).strip())
        if not match:
            raise ValueError(f"{what}: {value!r} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)")
        number = float(match.group(1))
        suffix = match.group(2)
        if suffix in _BINARY:
            number *= _BINARY[suffix]
        elif suffix:
            number *= _DECIMAL[suffix]
    if number < 0:
        raise ValueError(f"{what}: {value!r} must not be negative")
    return number


def parse_cpu_milli(value: object, what: str = "cpu") -> int:
    """CPU quantity in milli-cores (rounded up, as the kubelet accounts requests)."""
    return int(-(-_parse_quantity(value, what) * 1000 // 1))


def parse_memory_mib(value: object, what: str = "memory") -> int:
    """Memory quantity in MiB (rounded up so a request is never under-counted)."""
    return int(-(-_parse_quantity(value, what) // 2**20))


def parse_count(value: object, what: str) -> int:
    """An integer count (GPUs, pods); fractional counts are an error."""
    number = _parse_quantity(value, what)
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
        return ResourceVector(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def scaled(self, factor: int) -> ResourceVector:
        return ResourceVector(*(a * factor for a in self.as_tuple()))

    @classmethod
    def from_kube(cls, resources: dict[str, object], gpu_resource: str, what: str) -> ResourceVector:
        """Read a Kubernetes resource map (allocatable, requests); unknown keys are ignored."""
        return cls(
            gpu=parse_count(resources.get(gpu_resource, 0), f"{what}.{gpu_resource}"),
            cpu_milli=parse_cpu_milli(resources.get("cpu", 0), f"{what}.cpu"),
            memory_mib=parse_memory_mib(resources.get("memory", 0), f"{what}.memory"),
            pods=parse_count(resources.get("pods", 0), f"{what}.pods"),
        )

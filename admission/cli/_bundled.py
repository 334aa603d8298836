"""Files that ship with Atoll: cluster models, the sample profiles, example workloads.

Commands accept either a path or a bundled name (``gb200-nvl72-superpod``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_DIR", "TRACES", "TRACES_DIR", "resolve_cluster", "resolve_profiles", "resolve_trace"]

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
DEFAULT_CLUSTER = "gb200-nvl72-superpod"
TRACES_DIR = Path(__file__).resolve().parents[1] / "simulator" / "traces"
"""Package data: public traces shipped with Atoll, each with its source and licence (README there)."""
TRACES = {"itp-cluster04": "msft_itp_cluster04_day00-14.csv"}
"""Bundled trace names and their files."""


def resolve_cluster(name_or_path: str | None) -> Path:
    """A cluster model path; a bare name means ``config/clusters/<name>.yaml``."""
    value = name_or_path or DEFAULT_CLUSTER
    path = Path(value)
    if path.exists() or path.suffix in (".yaml", ".yml") or "/" in value:
        return path
    return CONFIG_DIR / "clusters" / f"{value}.yaml"


def resolve_profiles(path: str | None) -> Path:
    return Path(path) if path else CONFIG_DIR / "profiles.yaml"


def resolve_trace(name_or_path: str | None) -> str | None:
    """A trace path; a bundled name (``itp-cluster04``) or a bundled file name means the copy
    shipped in the package (``TRACES_DIR``), unless a file of that name exists here."""
    if name_or_path is None or Path(name_or_path).exists():
        return name_or_path
    name = TRACES.get(name_or_path, name_or_path)
    bundled = TRACES_DIR / name
    return str(bundled) if "/" not in name_or_path and bundled.exists() else name_or_path

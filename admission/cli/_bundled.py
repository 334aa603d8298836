"""Files that ship with Atoll: cluster models, the sample profiles, example workloads.

Commands accept either a path or a bundled name (``gb200-nvl72-superpod``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_DIR", "resolve_cluster", "resolve_profiles"]

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
DEFAULT_CLUSTER = "gb200-nvl72-superpod"


def resolve_cluster(name_or_path: str | None) -> Path:
    """A cluster model path; a bare name means ``config/clusters/<name>.yaml``."""
    value = name_or_path or DEFAULT_CLUSTER
    path = Path(value)
    if path.exists() or path.suffix in (".yaml", ".yml") or "/" in value:
        return path
    return CONFIG_DIR / "clusters" / f"{value}.yaml"


def resolve_profiles(path: str | None) -> Path:
    return Path(path) if path else CONFIG_DIR / "profiles.yaml"

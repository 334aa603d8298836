"""Files that ship with Atoll: cluster models, the sample profiles, example workloads, scenarios
and the Kueue sample setups.

They live in the repo's top-level ``config/`` and are installed inside the package as
``admission/_config`` (``pyproject.toml`` maps one onto the other), so a non-editable install
has them too. Commands accept a path, a bundled name (``gb200-nvl72-superpod``), or a path the
docs write from the repo root (``config/workloads/training-job.yaml``), which resolves to the
bundled copy when no such file exists where the command runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from topology import ClusterModel, ClusterModelError

__all__ = ["CONFIG_DIR", "TRACES", "TRACES_DIR", "bundled_path", "model_profiles", "resolve_cluster", "resolve_profiles", "resolve_trace",
           "shown", "unreadable"]

_PACKAGE = Path(__file__).resolve().parents[1]
CONFIG_DIR = _PACKAGE / "_config" if (_PACKAGE / "_config").is_dir() else _PACKAGE.parent / "config"
"""The bundled files: inside the installed package, else the source tree's ``config/``."""
DEFAULT_CLUSTER = "gb200-nvl72-superpod"
TRACES_DIR = Path(__file__).resolve().parents[1] / "simulator" / "traces"
"""Package data: public traces shipped with Atoll, each with its source and licence (README there)."""
TRACES = {"itp-cluster04": "msft_itp_cluster04_day00-14.csv"}
"""Bundled trace names and their files."""


def bundled_path(value: str) -> Path:
    """``value`` as a path; a relative ``config/…`` path that does not exist here is the bundled file."""
    path = Path(value)
    if not path.exists() and not path.is_absolute() and path.parts[:1] == ("config",):
        bundled = CONFIG_DIR.joinpath(*path.parts[1:])
        if bundled.exists():
            return bundled
    return path


def resolve_cluster(name_or_path: str | None) -> Path:
    """A cluster model path; a bare name means ``config/clusters/<name>.yaml``, which must exist."""
    value = name_or_path or DEFAULT_CLUSTER
    path = bundled_path(value)
    if path.exists() or path.suffix in (".yaml", ".yml") or "/" in value:
        return path
    bundled = CONFIG_DIR / "clusters" / f"{value}.yaml"
    if not bundled.exists():
        names = ", ".join(sorted(p.stem for p in (CONFIG_DIR / "clusters").glob("*.yaml")))
        raise ClusterModelError(f"--cluster: {value!r} is neither a file nor a bundled cluster model; give a model file or one of {names}")
    return bundled


def model_profiles(cluster_path: Path, model: ClusterModel) -> Path | None:
    """The profiles document the cluster model names (``profiles:``, relative to the model file)."""
    return Path(os.path.normpath(cluster_path.parent / model.profiles)) if model.profiles else None


def resolve_profiles(path: str | None, cluster_path: Path | None = None, model: ClusterModel | None = None) -> Path:
    """``--profiles`` if given, else the cluster model's own, else the sample ``config/profiles.yaml``."""
    if path:
        return bundled_path(path)
    own = model_profiles(cluster_path, model) if cluster_path is not None and model is not None else None
    return own or CONFIG_DIR / "profiles.yaml"


def unreadable(flag: str, path: Path | None) -> str | None:
    """``--flag: PATH: cannot read: why`` when the file a flag gave cannot be opened, else None: the
    flag is named, since the path alone does not say which of several it was."""
    if path is None:
        return None
    try:
        with open(path, "rb"):
            return None
    except OSError as exc:
        return f"{flag}: {path}: cannot read: {exc.strerror or exc}"


def shown(path: Path) -> str:
    """A bundled file as the docs name it (``config/…``), any other file as given."""
    try:
        return "config/" + path.resolve().relative_to(CONFIG_DIR.resolve()).as_posix()
    except ValueError:
        return str(path)


def resolve_trace(name_or_path: str | None) -> str | None:
    """A trace path; a bundled name (``itp-cluster04``) or a bundled file name means the copy
    shipped in the package (``TRACES_DIR``), unless a file of that name exists here; a ``config/…``
    path (a synthetic stream's parameters) resolves as every ``config/…`` path does."""
    if name_or_path is None or Path(name_or_path).exists():
        return name_or_path
    if Path(name_or_path).parts[:1] == ("config",):
        return str(bundled_path(name_or_path))
    name = TRACES.get(name_or_path, name_or_path)
    bundled = TRACES_DIR / name
    return str(bundled) if "/" not in name_or_path and bundled.exists() else name_or_path

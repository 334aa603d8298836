"""Load and validate a profiles document from YAML text, a file or a ConfigMap's data."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from policies._profiles import ProfilesDocument

__all__ = ["PROFILES_KEY", "ProfilesError", "load_profiles", "load_profiles_file", "profiles_from_configmap"]

PROFILES_KEY = "profiles.yaml"


class ProfilesError(ValueError):
    """A profiles document is invalid; the message names the source, the key path and the problem."""


_ALIASES = {
    "default_profile": "defaultProfile", "required_level": "requiredLevel", "preferred_level": "preferredLevel",
    "max_span_level": "maxSpanLevel", "relax_after_seconds": "relaxAfterSeconds", "initial_seconds": "initialSeconds",
    "max_seconds": "maxSeconds", "best_fit": "bestFit", "protect_empty_domains": "protectEmptyDomains",
    "reference_gang_gpus": "referenceGangGPUs", "max_per_domain": "maxPerDomain", "perf_floor": "perfFloor",
    "uniform_perf": "uniformPerf",
}


def _path(loc: tuple[Any, ...]) -> str:
    parts = [str(_ALIASES.get(str(p), p)) for p in loc]
    return ".".join(parts) if parts else "(document)"


def load_profiles(text: str, source: str = PROFILES_KEY) -> ProfilesDocument:
    """Parse and validate; raise ``ProfilesError`` listing every problem with its key path."""
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ProfilesError(f"{source}: not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProfilesError(f"{source}: expected a mapping at the top (defaultProfile, flavors, profiles, classes, queues)")
    try:
        return ProfilesDocument.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            where = _path(err["loc"])
            got = err.get("input")
            shown = f" (got {got!r})" if err["type"] not in ("extra_forbidden", "value_error", "missing") and not isinstance(got, dict) else ""
            lines.append(f"{source}: {where}: {msg}{shown}")
        raise ProfilesError("\n".join(lines)) from exc


def load_profiles_file(path: str | Path) -> ProfilesDocument:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProfilesError(f"{path}: cannot read: {exc.strerror}") from exc
    return load_profiles(text, str(path))


def profiles_from_configmap(data: Mapping[str, str] | None, name: str = "atoll-policies") -> ProfilesDocument:
    """The document in a ConfigMap's ``data[profiles.yaml]``."""
    if not data or PROFILES_KEY not in data:
        raise ProfilesError(f"ConfigMap {name}: data.{PROFILES_KEY}: missing")
    return load_profiles(data[PROFILES_KEY], f"ConfigMap {name} {PROFILES_KEY}")

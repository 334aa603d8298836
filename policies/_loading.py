"""Load and validate a profiles document from YAML text, a file or a ConfigMap's data."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from policies._profiles import ProfilesDocument
from topology import describe_validation_error, read_yaml_text

__all__ = ["PROFILES_KEY", "ProfilesError", "load_profiles", "load_profiles_file", "profiles_from_configmap"]

PROFILES_KEY = "profiles.yaml"


class ProfilesError(ValueError):
    """A profiles document is invalid; the message names the source, the key path and the problem."""


def load_profiles(text: str, source: str = PROFILES_KEY) -> ProfilesDocument:
    """Parse and validate; raise ``ProfilesError`` listing every problem with its key path."""
    data = read_yaml_text(text, source, ProfilesError) if text.strip() else {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProfilesError(f"{source}: expected a mapping at the top (defaultProfile, flavors, profiles, classes, queues)")
    try:
        return ProfilesDocument.model_validate(data)
    except ValidationError as exc:
        raise ProfilesError(describe_validation_error(source, exc, data, ProfilesDocument)) from exc


def load_profiles_file(path: str | Path) -> ProfilesDocument:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfilesError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return load_profiles(text, str(path))


def profiles_from_configmap(data: Mapping[str, str] | None, name: str = "atoll-policies") -> ProfilesDocument:
    """The document in a ConfigMap's ``data[profiles.yaml]``."""
    if not data or PROFILES_KEY not in data:
        raise ProfilesError(f"ConfigMap {name}: data.{PROFILES_KEY}: missing")
    return load_profiles(data[PROFILES_KEY], f"ConfigMap {name} {PROFILES_KEY}")

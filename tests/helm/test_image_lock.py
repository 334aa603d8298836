"""The image's Python dependencies are pinned (helm/image/constraints.txt, written by lock.py), so
an image built tomorrow holds what the suite ran on today; both build recipes use the pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "helm" / "image"


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate((IMAGE / "constraints.txt").read_text().splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9._-]+)==([0-9][0-9A-Za-z.+!-]*)", line)
        assert m, f"constraints.txt:{n}: {line!r} is not NAME==VERSION"
        name = canonicalize_name(m[1])
        assert name not in pins, f"constraints.txt:{n}: {name} pinned twice"
        pins[name] = m[2]
    return pins


def test_every_runtime_dependency_is_pinned_to_a_version_pyproject_allows() -> None:
    pins = _pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is a runtime dependency but constraints.txt does not pin it (make image-lock)"
        assert req.specifier.contains(Version(pins[name]), prereleases=True), f"{name}=={pins[name]} breaks {spec!r}"


def test_no_test_only_dependency_is_pinned_into_the_image() -> None:
    pins = _pins()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    runtime = {canonicalize_name(Requirement(s).name) for s in
               tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    test_only = {canonicalize_name(Requirement(s).name) for s in extras.get("test", [])} - runtime
    assert not test_only & {"pytest", "hypothesis", "import-linter", "mypy", "ruff"} & set(pins)


def test_both_image_recipes_install_with_the_pins() -> None:
    assert '--constraint "$here/constraints.txt"' in (IMAGE / "build.sh").read_text()
    assert '"$(digest < "$here/constraints.txt")"' in (IMAGE / "build.sh").read_text()  # a new pin rebuilds the layer
    docker = (ROOT / "Dockerfile").read_text()
    assert "COPY helm/image/constraints.txt" in docker and "--constraint /tmp/constraints.txt" in docker

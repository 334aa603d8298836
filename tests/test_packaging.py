"""A non-editable install (``pip install .``, pipx) has everything the docs use: the wheel holds
every package and every file of ``config/`` (as ``admission/_config``), and the commands run from
it in a directory that is not the repo, reading the bundled models, profiles and examples."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
_NOT_SOURCE = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "dist", "out", ".pytest_cache", ".hypothesis",
                                     ".import_linter_cache", ".mypy_cache", "tests", "helm", "docs")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of the source tree (the copy keeps build/ out of the repo)."""
    src = tmp_path_factory.mktemp("src") / "atoll"
    shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out),
                           str(src)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (built,) = out.glob("atoll-*.whl")
    return built


def test_the_wheel_holds_every_package_and_every_bundled_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = sorted(p.parent.relative_to(ROOT).as_posix() for top in ("admission", "topology", "policies")
                      for p in (ROOT / top).rglob("__init__.py"))
    assert packages and [p for p in packages if f"{p}/__init__.py" not in names] == []
    bundled = sorted(p.relative_to(ROOT / "config").as_posix() for p in (ROOT / "config").rglob("*") if p.is_file())
    assert len(bundled) >= 20 and [f for f in bundled if f"admission/_config/{f}" not in names] == []


def test_commands_run_from_the_installed_wheel_outside_the_repo(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what pip installs for a pure-Python wheel
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = ("import sys, admission; from admission.cli import main; from admission.cli._bundled import CONFIG_DIR; "
              "print(admission.__file__, CONFIG_DIR, file=sys.stderr); sys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": str(site), "NUMBA_DISABLE_JIT": "1"}  # the kernels' first compile is not what this checks
    proc = subprocess.run([sys.executable, "-c", script, "place", "--workload", "config/workloads/training-job.yaml", "--cluster",
                           "dgx-h100-superpod", "--format", "json"], cwd=elsewhere, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    module, config_dir = proc.stderr.split()[:2]
    assert module.startswith(str(site)) and config_dir == str(site / "admission" / "_config")
    assert json.loads(proc.stdout)["outcome"] == "admit"
    proc = subprocess.run([sys.executable, "-c", script, "baseline", "kueue-bestfit", "config/scenarios/kueue-bestfit-required-rack.yaml"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode in (0, 1) and "fits" in json.loads(proc.stdout), proc.stderr[-2000:]

"""Write constraints.txt: Atoll's runtime dependencies, every one of them down to the leaves, at the
versions installed in this environment (the one the test suite ran on), so that the image holds
exactly what was tested rather than whatever the package index serves on the day of the build.

Run it from an environment where Atoll is installed: ``make image-lock``.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HEADER = """\
# Atoll's runtime dependencies, pinned to the versions the test suite ran on (all of them, down to
# the leaves). build.sh passes this file to pip as constraints; regenerate it with `make image-lock`
# after upgrading a dependency and running the suite.
"""


def closure(root: str = "atoll") -> dict[str, str]:
    """Every distribution ``root`` needs at run time (no extras), by canonical name, with its version."""
    seen: dict[str, str] = {}
    todo = [Requirement(r).name for r in md.requires(root) or [] if not _extra_only(Requirement(r))]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        dist = md.distribution(name)
        seen[name] = dist.version
        todo.extend(Requirement(r).name for r in dist.requires or [] if not _extra_only(Requirement(r)))
    return seen


def _extra_only(req: Requirement) -> bool:
    return req.marker is not None and not req.marker.evaluate({"extra": ""})


def main() -> int:
    pins = closure()
    text = HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
    Path(__file__).with_name("constraints.txt").write_text(text)
    print(f"lock.py: {len(pins)} distributions pinned", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

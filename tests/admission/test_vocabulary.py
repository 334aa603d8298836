"""Atoll's label, annotation and condition names are written once, in ``admission.vocabulary``;
every other module of admission/ uses the constant."""

from __future__ import annotations

import re
from pathlib import Path

from admission import vocabulary

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"""["'](atoll\.dev/[^"'\s]+)["']""")

WEBHOOK_OWN = {
    ("admission/webhook/_claims.py", "atoll.dev/slot-claims"),
    ("admission/webhook/_pin.py", "atoll.dev/node"),
    ("admission/webhook/_pin.py", "atoll.dev/previous-pod"),
    ("admission/webhook/_pin.py", "atoll.dev/replaced-node"),
    ("admission/webhook/_pin.py", "atoll.dev/slot"),
}
"""The exact-placement webhook's own pod annotations: each is written and read in its one
module, shared with no other (listed here so that a new literal anywhere still fails)."""


def test_atoll_names_are_spelled_out_only_in_the_vocabulary() -> None:
    found = set()
    for path in sorted((ROOT / "admission").rglob("*.py")):
        if path.name == "vocabulary.py":
            continue
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.add((path.relative_to(ROOT).as_posix(), name))
    assert found == WEBHOOK_OWN, f"spelled out outside admission/vocabulary.py: {sorted(found - WEBHOOK_OWN)}"


def test_the_vocabulary_names_each_value_once() -> None:
    values = [getattr(vocabulary, n) for n in vocabulary.__all__]
    assert len(values) == len(set(values)) and all(v.startswith("atoll.dev/") for v in values)
    assert {v for _, v in WEBHOOK_OWN}.isdisjoint(values)

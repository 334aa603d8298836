"""Atoll's label, annotation and condition names, and the names of Kueue's own it uses, are
written once: in ``admission.vocabulary``, or (for what ``policies`` reads, since ``policies``
never imports admission/) in ``policies/_annotations.py``. Every other module uses the constant."""

from __future__ import annotations

import re
from pathlib import Path

from admission import vocabulary

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"""["']((?:[a-z0-9-]+\.)*atoll\.dev/[^"'\s]+|kueue\.x-k8s\.io/(?!v\d)[^"'\s]+)["']""")
"""A quoted label, annotation, condition or controller name of Atoll's or Kueue's; an apiVersion
(``kueue.x-k8s.io/v1beta2``) is not a name."""
POLICIES_OWN = "policies/_annotations.py"


def _names_in(package: str) -> set[tuple[str, str]]:
    found = set()
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.add((path.relative_to(ROOT).as_posix(), name))
    return found


def test_the_pattern_finds_names_and_skips_api_versions() -> None:
    text = '''a = "atoll.dev/slot"; b = 'kueue.x-k8s.io/podset'; c = "bench.atoll.dev/instant"; d = "kueue.x-k8s.io/v1beta2"'''
    assert NAME.findall(text) == ["atoll.dev/slot", "kueue.x-k8s.io/podset", "bench.atoll.dev/instant"]


def test_atoll_and_kueue_names_are_spelled_out_only_in_the_vocabulary() -> None:
    found = {(path, name) for path, name in _names_in("admission") if path != "admission/vocabulary.py"}
    assert not found, f"spelled out outside admission/vocabulary.py: {sorted(found)}"


def test_the_engine_spells_out_only_the_names_policies_reads_and_none_of_the_vocabulary() -> None:
    found = _names_in("policies") | _names_in("topology")
    assert {path for path, _ in found} <= {POLICIES_OWN}, f"spelled out outside {POLICIES_OWN}: {sorted(found)}"
    values = {getattr(vocabulary, n) for n in vocabulary.__all__}
    assert not values & {name for _, name in found}, "a name spelled out both in the vocabulary and in policies"


def test_the_vocabulary_names_each_value_once() -> None:
    values = [getattr(vocabulary, n) for n in vocabulary.__all__]
    assert len(values) == len(set(values))
    assert all(NAME.fullmatch(f'"{v}"') for v in values)


def test_every_name_in_the_vocabulary_is_exported() -> None:
    constants = {n for n, v in vars(vocabulary).items() if n.isupper() and isinstance(v, str)}
    assert constants == set(vocabulary.__all__)


def test_the_webhook_writes_the_vocabulary_s_names() -> None:
    from admission import webhook
    from admission.webhook._claims import ANN_CLAIMS

    assert (webhook.ANN_SLOT, webhook.ANN_NODE, webhook.ANN_PREVIOUS, webhook.ANN_REPLACED, ANN_CLAIMS) == (
        "atoll.dev/slot", "atoll.dev/node", "atoll.dev/previous-pod", "atoll.dev/replaced-node", "atoll.dev/slot-claims")

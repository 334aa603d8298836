"""The example manifests for Kueue's vocabulary decide as their comments say, once each PodSet
is read with ``podset_spec`` from its pod-template annotations (the controller's reading)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from admission.controller import parse_object
from policies import Decision, decide, load_profiles_file, podset_spec
from tests.policies.test_vocabulary_decisions import CLIQUE, gb200

ROOT = Path(__file__).resolve().parents[2]
PROFILES = load_profiles_file(ROOT / "config/profiles.yaml")


def decide_example(name: str, profile: str) -> Decision:
    view = parse_object(yaml.safe_load((ROOT / "config/workloads" / name).read_text()))
    specs = [podset_spec(s.name, s.count, s.per_pod, view.templates[s.name].annotations, tolerations=s.tolerations,
                         node_constraint=s.node_constraint) for s in view.podsets]
    return decide(gb200(), specs, profile_name=profile, profile=PROFILES.profiles[profile], now=0.0)


@pytest.mark.parametrize("profile", ["strict", "elastic"])
def test_sliced_jobset_puts_one_slice_of_16_per_island(profile: str) -> None:
    d = decide_example("sliced-training-jobset.yaml", profile)
    assert d.outcome == "admit", d.message
    ps = d.placement.podsets[0]  # type: ignore[union-attr]
    assert [sl.pods for sl in ps.slices] == [16, 16] and all(sl.level == CLIQUE for sl in ps.slices)
    per_island = Counter(sl.path for sl in ps.slices)
    assert len(per_island) == 2


def test_leaderworkerset_group_shares_one_island() -> None:
    d = decide_example("leaderworkerset-group.yaml", "strict")
    assert d.outcome == "admit", d.message
    islands = {n.rsplit("-", 1)[0] for ps in d.placement.podsets for n in ps.nodes}  # type: ignore[union-attr]
    assert len(islands) == 1


def test_unconstrained_batch_takes_any_nodes() -> None:
    d = decide_example("unconstrained-batch.yaml", "strict")
    assert d.outcome == "admit" and d.request is not None and d.request.podsets[0].unconstrained

"""Every bundled profile document works with every bundled cluster model: each cluster model ×
each flavor × each profile document × each example workload, through ``atoll place``, gives a
decision (admit, wait or reject), never a configuration error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from admission.cli import main
from policies import load_profiles, load_profiles_file
from topology import load_cluster_model

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"
CLUSTERS = sorted((CONFIG / "clusters").glob("*.yaml"))
WORKLOADS = sorted((CONFIG / "workloads").glob("*.yaml"))


def _chart_document(tmp: Path) -> Path:
    text = yaml.safe_load((ROOT / "helm" / "atoll" / "values.yaml").read_text())["profiles"]["document"]
    path = tmp / "helm-values-profiles.yaml"
    path.write_text(text)
    return path


PROFILE_DOCUMENTS = ["config/profiles.yaml", "helm/atoll/values.yaml#profiles.document",
                     *sorted(str(p.relative_to(ROOT)) for p in (CONFIG / "kueue").glob("*/profiles.yaml"))]


def _document(name: str, tmp: Path) -> Path:
    return _chart_document(tmp) if name.startswith("helm/") else ROOT / name


def _flavors() -> list[tuple[str, str]]:
    return [(p.stem, f.name) for p in CLUSTERS for f in load_cluster_model(p).flavors]


def _combos() -> list[object]:
    out: list[object] = []
    for document in PROFILE_DOCUMENTS:
        for cluster, flavor in _flavors():
            out.append(pytest.param(document, cluster, flavor, id=f"{cluster}-{flavor}-{document}"))
    return out


def test_the_bundle_is_what_this_test_covers() -> None:
    assert len(CLUSTERS) >= 3 and len(WORKLOADS) >= 3 and len(PROFILE_DOCUMENTS) >= 2
    assert ("mixed-a100-h100", "a100") in _flavors() and ("mixed-a100-h100", "h100") in _flavors()


@pytest.mark.parametrize(("document", "cluster", "flavor"), _combos())
def test_every_profile_resolves_on_every_flavor(document: str, cluster: str, flavor: str, tmp_path: Path) -> None:
    doc = load_profiles_file(_document(document, tmp_path))
    model = load_cluster_model(CONFIG / "clusters" / f"{cluster}.yaml")
    levels = [spec.label for spec in model.flavor(flavor).level_specs()]
    for name, profile in doc.profiles.items():
        resolved = profile.for_flavor(flavor, levels, name=name)
        assert all(level in levels for level in (resolved.required_level, resolved.preferred_level, resolved.max_span_level) if level)


@pytest.mark.parametrize("workload", [p.name for p in WORKLOADS])
@pytest.mark.parametrize(("document", "cluster", "flavor"), _combos())
def test_atoll_place_decides_for_every_combination(cluster: str, flavor: str, document: str, workload: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["place", "--cluster", cluster, "--flavor", flavor, "--profiles", str(_document(document, tmp_path)),
                 "--workload", str(CONFIG / "workloads" / workload), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    answer = json.loads(out)
    for decision in answer.get("workloads", [answer]):  # a file of several Workloads answers each
        assert decision["outcome"] in ("admit", "wait", "reject") and decision["flavor"] == flavor
        assert "has no level" not in decision["message"], decision["message"]


def test_the_chart_document_is_the_one_the_chart_renders() -> None:
    text = yaml.safe_load((ROOT / "helm" / "atoll" / "values.yaml").read_text())["profiles"]["document"]
    assert load_profiles(text).default_profile


@pytest.mark.parametrize("name", ["costed", "costed-floor"])
def test_a_costed_profile_is_the_same_in_every_document_that_ships_it(name: str, tmp_path: Path) -> None:
    """The goal table measures ``config/profiles.yaml``'s costed profiles on every bundled cluster;
    a per-setup document that ships one under the same name must install what was measured."""
    measured = load_profiles_file(CONFIG / "profiles.yaml").profiles[name]
    shipping = {d: load_profiles_file(_document(d, tmp_path)).profiles.get(name) for d in PROFILE_DOCUMENTS}
    assert any(p is not None for d, p in shipping.items() if d != "config/profiles.yaml")
    assert {d: p for d, p in shipping.items() if p is not None and p != measured} == {}

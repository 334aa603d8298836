"""Cluster model files: the bundled ones load, bad ones name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from topology import ClusterModelError, ResourceVector, Snapshot, load_cluster_model
from topology._resources import parse_cpu_milli, parse_memory_mib

CLUSTERS = Path(__file__).resolve().parents[2] / "config" / "clusters"


@pytest.mark.parametrize(("name", "gpus", "nodes"), [("gb200-nvl72-superpod", 2304, 576), ("dgx-h100-superpod", 1024, 128)])
def test_bundled_models_have_the_documented_shape(name: str, gpus: int, nodes: int) -> None:
    flavor = load_cluster_model(CLUSTERS / f"{name}.yaml").flavor()
    snap = Snapshot(flavor.name, flavor.level_specs(), flavor.build_nodes(), node_level=flavor.node_level())
    assert snap.total_gpus() == gpus and snap.num_nodes == nodes
    assert not snap.excluded


def test_gb200_islands_are_racks_of_18_nodes() -> None:
    flavor = load_cluster_model(CLUSTERS / "gb200-nvl72-superpod.yaml").flavor()
    snap = Snapshot(flavor.name, flavor.level_specs(), flavor.build_nodes())
    clique = snap.level_index("nvidia.com/gpu.clique")
    sizes = {snap.domain_range(clique, d)[1] - snap.domain_range(clique, d)[0] for d in range(snap.num_domains(clique))}
    assert sizes == {18}
    assert snap.bandwidth_gbps[clique] == 1800


def test_mixed_model_has_two_flavors_and_perf_spread() -> None:
    model = load_cluster_model(CLUSTERS / "mixed-a100-h100.yaml")
    assert [f.name for f in model.flavors] == ["a100", "h100"]
    perf = [n.perf for n in model.flavor("a100").build_nodes()]
    assert min(perf) < 1.0 < max(perf)
    assert perf == [n.perf for n in model.flavor("a100").build_nodes()]  # deterministic
    with pytest.raises(ClusterModelError, match="no flavor 'tpu'"):
        model.flavor("tpu")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name: x\nflavors: []\n", "flavors"),
        ("name: x\nflavors:\n- name: a\n  topology: t\n  levels: [{label: r, bandwidthGBps: -1}]\n  nodes: [{name: n, allocatable: {cpu: 1}}]\n", "levels[0].bandwidthGBps"),
        ("name: x\nflavors:\n- name: a\n  topology: t\n  levels: [{label: r}]\n  nodes: [{name: n, allocatable: {cpu: lots}}]\n", "nodes[0].allocatable.cpu"),
        ("name: x\nflavors:\n- name: a\n  topology: t\n  levels: [{label: r}]\n", "a flavor needs generate or nodes"),
        ("name: x\nflavors:\n- name: a\n  topology: t\n  levels: [{label: r}]\n  nodes: [{name: n}]\n  colour: red\n", "flavors[a].colour"),
        ("name: x\nflavors:\n- name: a\n  topology: t\n  levels: [{label: r}]\n  nodes: [{name: n}]\n  perf: {distribution: normal, stddev: .inf}\n",
         "flavors[a].perf.stddev: expected a finite number"),
        ("- just a list\n", "expected a mapping"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_model_files_name_the_field(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ClusterModelError) as err:
        load_cluster_model(path)
    assert needle in str(err.value) and "bad.yaml" in str(err.value)


FLAVOR = "name: x\nflavors:\n- name: a\n  topology: t\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("  levels: [{label: 'rack id'}]\n  nodes: [{name: n}]\n",
         "flavors[a].levels[0].label: 'rack id' is not a Kubernetes label key: [prefix/]name"),
        ("  levels: [{label: r}]\n  nodeLabels: {'pool!': x}\n  nodes: [{name: n}]\n",
         "flavors[a].nodeLabels: 'pool!' is not a Kubernetes label key: [prefix/]name"),
        ("  levels: [{label: r}]\n  nodes: [{name: n, labels: {r: 'rack 1'}}]\n",
         "flavors[a].nodes[n].labels: r: 'rack 1' is not a Kubernetes label value: empty, or at most 63 letters"),
        ("  levels: [{label: r}]\n  nodes: [{name: n, labels: {example.com/r: " + "x" * 64 + "}}]\n",
         "flavors[a].nodes[n].labels: example.com/r: '" + "x" * 64 + "' is not a Kubernetes label value"),
    ],
)
def test_a_label_no_node_could_carry_is_one_line_naming_where(tmp_path: Path, text: str, line: str) -> None:
    """Before, a model with a label key or value Kubernetes refuses loaded, and placed onto nodes that cannot exist."""
    path = tmp_path / "bad.yaml"
    path.write_text(FLAVOR + text)
    with pytest.raises(ClusterModelError) as err:
        load_cluster_model(path)
    assert len(str(err.value).splitlines()) == 1 and str(err.value).startswith(f"{path}: {line}"), str(err.value)


def test_kubernetes_label_forms_are_taken(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(FLAVOR + "  levels: [{label: example.com/rack}, {label: kubernetes.io/hostname}]\n"
                    "  nodeLabels: {node.kubernetes.io/instance-type: p5.48xlarge, empty: ''}\n"
                    "  nodes: [{name: n, allocatable: {cpu: 1}, labels: {example.com/rack: r-1_a.b, kubernetes.io/hostname: n}}]\n")
    assert load_cluster_model(path).flavors[0].node_labels["empty"] == ""


def test_quantities() -> None:
    assert parse_cpu_milli("500m") == 500 and parse_cpu_milli(2) == 2000
    assert parse_memory_mib("1Gi") == 1024 and parse_memory_mib("1G") == 954
    assert ResourceVector.from_kube({"nvidia.com/gpu": "4", "pods": 3}, "nvidia.com/gpu", "x") == ResourceVector(4, 0, 0, 3)
    with pytest.raises(ValueError, match="x.nvidia.com/gpu"):
        ResourceVector.from_kube({"nvidia.com/gpu": "1.5"}, "nvidia.com/gpu", "x")

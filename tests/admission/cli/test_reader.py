"""The read-only cluster view ``atoll explain`` and ``atoll queue`` share: its flags and its failure."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from admission.cli._reader import add_cluster_args, read_only_controller


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_cluster_args(p)
    return p.parse_args(list(argv))


def test_the_flags_default_to_the_checks_and_configmaps_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATOLL_NAMESPACE", raising=False)
    args = _args()
    assert (args.namespace, args.configmap, args.admission_check, args.gpu_resource) == (
        "atoll-system", "atoll-policies", "atoll-topology", "nvidia.com/gpu")


def test_unloadable_credentials_give_none_and_one_line_naming_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    assert read_only_controller(_args("--kubeconfig", str(missing)), "atoll queue") is None
    assert capsys.readouterr().err == (f"atoll queue: cannot load cluster credentials ({missing}): no such file; "
                                       "give a kubeconfig file with --kubeconfig or $KUBECONFIG\n")
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    assert read_only_controller(_args("--kubeconfig", str(broken)), "atoll explain") is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"atoll explain: cannot load cluster credentials ({broken}): not valid YAML at line 2, column 1: " in err


def test_the_span_cost_comes_from_atoll_runs_flags_and_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """``atoll queue`` and ``atoll explain`` price a span with the settings ``atoll run`` takes."""
    from kubernetes.client import ApiClient

    monkeypatch.setenv("ATOLL_COST_OVERLAP", "0.5")
    monkeypatch.setenv("ATOLL_LINK_MODEL", "flat-ring")
    ctrl = read_only_controller(_args("--cost-comm-fraction", "0.2"), "atoll queue",
                                api_client=ApiClient())  # never called: nothing is listed here

    cost = ctrl.settings.cost
    assert (cost.link_model, cost.comm_fraction, cost.overlap) == ("flat-ring", 0.2, 0.5)
    assert ctrl.decider.span_cost.settings == cost

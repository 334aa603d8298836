"""``atoll bench collectives``: every published point with its prediction, and a non-zero exit on a miss."""

from __future__ import annotations

import json

import pytest

from admission.cli import main as atoll
from admission.cli._bench import COLLECTIVES_TOLERANCE


def test_collectives_json_prints_each_published_point_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert atoll(["bench", "collectives", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pass"] is True and report["tolerance"] == COLLECTIVES_TOLERANCE == 0.20
    assert len(report["points"]) == 12
    for point in report["points"]:
        assert {"source", "setup", "measured_gbps", "predicted_gbps"} <= point.keys()
        assert abs(point["predicted_gbps"] / point["measured_gbps"] - 1) <= 0.20
    assert set(report["constants"]) == {"eta_nvls", "eta_ring_nvl", "eta_ring_net", "eta_tree_net", "max_channels", "alpha_s",
                                        "tree_tuner_share"}


def test_collectives_fails_when_a_prediction_misses_its_measurement(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace

    from topology import _collectives

    off = replace(_collectives.MEASURED[1], measured_gbps=2000.0)  # a point the model cannot reach
    monkeypatch.setattr(_collectives, "MEASURED", (_collectives.MEASURED[0], off))
    assert atoll(["bench", "collectives"]) == 1
    out = capsys.readouterr().out
    assert "FAIL collectives: 1 of 2 published points within ±20 %" in out

"""``CostModel``: islands are found from the links, the ideal is the best split the flavor allows,
and a balanced span costs less than a lopsided one."""

from __future__ import annotations

import numpy as np
import pytest

from admission.cli._bundled import resolve_cluster
from admission.simulator._jobs import make_job
from admission.simulator._policies import JobShape
from admission.simulator._sim import build_snapshots
from topology import CostModel, ResourceVector, load_cluster_model


def snapshot(name: str):  # type: ignore[no-untyped-def]
    return build_snapshots(load_cluster_model(resolve_cluster(name)))[0]


def shape(pods: int, per_pod: int) -> JobShape:
    return JobShape(pods, ResourceVector(per_pod, 1000, 1024, 1), "training")


@pytest.mark.parametrize(("name", "label"), [("gb200-nvl72-superpod", "nvidia.com/gpu.clique"),
                                              ("dgx-h100-superpod", "nvidia.com/gpu.clique")])
def test_the_island_is_the_highest_level_as_fast_as_the_node(name: str, label: str) -> None:
    snap = snapshot(name)
    assert snap.level_labels[CostModel().island_level(snap)] == label


def test_a_job_bigger_than_an_island_is_ideal_on_an_even_split_and_pays_for_a_lopsided_one() -> None:
    snap = snapshot("gb200-nvl72-superpod")
    job = make_job("big", 0.0, 100.0, 128, 4)
    sh = shape(32, 4)
    cost = CostModel()
    even = np.r_[np.arange(0, 16), np.arange(18, 34)]  # 16 nodes in rack 0, 16 in rack 1 (same SU)
    uneven = np.r_[np.arange(0, 18), np.arange(18, 32)]  # 72 + 56 GPUs: both sides still fill the 16 channels
    lopsided = np.r_[np.arange(0, 18), np.arange(18, 30), np.arange(36, 38)]  # 72 + 48 + 8 GPUs: 8 channels
    ones = np.ones(32, dtype=np.int64)
    assert cost(snap, even, sh, job, ones) == pytest.approx(1.0)  # the unavoidable span is no slowdown
    assert cost(snap, uneven, sh, job, ones) == pytest.approx(1.0, abs=1e-3)
    assert 1.05 < cost(snap, lopsided, sh, job, ones) < 1.2
    far = np.r_[np.arange(0, 16), np.arange(288, 304)]  # the second rack across the spine (2:1)
    assert cost(snap, far, sh, job, ones) > 1.05


def test_the_flat_ring_charges_a_span_far_more_than_the_calibrated_model() -> None:
    snap = snapshot("gb200-nvl72-superpod")
    job = make_job("g", 0.0, 100.0, 16, 4)
    nodes = np.r_[np.arange(0, 2), np.arange(18, 20)]  # 2 + 2 nodes in two racks of one SU
    pods = np.ones(4, dtype=np.int64)
    calibrated = CostModel("calibrated")(snap, nodes, shape(4, 4), job, pods)
    flat = CostModel("flat-ring")(snap, nodes, shape(4, 4), job, pods)
    assert 1.0 < calibrated < 1.3 < 3.0 < flat
    with pytest.raises(ValueError, match="link_model: 'mesh'"):
        CostModel("mesh")

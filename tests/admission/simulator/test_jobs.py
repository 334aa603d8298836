"""Simulator jobs: the pod-shape rule for jobs larger than a node, defaults, and field checks."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from admission.simulator import Job, make_job, split_into_pods


@pytest.mark.parametrize(
    ("gpus", "per_node", "shape"),
    [
        (1, 8, (1, 1)), (5, 8, (1, 5)), (8, 8, (1, 8)),  # fits a node: one pod with every GPU
        (16, 8, (2, 8)), (128, 8, (16, 8)), (72, 4, (18, 4)),  # multiples: pods of one node's GPUs
        (12, 8, (2, 6)), (10, 8, (2, 5)), (24, 16, (2, 12)),  # not multiples: largest divisor that fits a node
        (13, 8, (13, 1)),  # a prime larger than a node: one GPU per pod, still exactly 13 GPUs
    ],
)
def test_split_into_pods_keeps_the_gpu_count_and_identical_pods(gpus: int, per_node: int, shape: tuple[int, int]) -> None:
    pods, per_pod = split_into_pods(gpus, per_node)
    assert (pods, per_pod) == shape
    assert pods * per_pod == gpus and per_pod <= per_node


@pytest.mark.parametrize(("gpus", "per_node"), [(0, 8), (-1, 8), (8, 0)])
def test_split_into_pods_rejects_nonsense(gpus: int, per_node: int) -> None:
    with pytest.raises(ValueError, match="must be ≥ 1"):
        split_into_pods(gpus, per_node)


def test_job_defaults_for_comm_and_gradient_size() -> None:
    train = make_job("t", 0.0, 10.0, 64, 8)
    assert (train.pods, train.gpus_per_pod, train.comm_fraction) == (8, 8, 0.1)
    assert train.model_gb == pytest.approx(2.0 * 8.0)  # 2 GB × √64
    assert make_job("one", 0.0, 10.0, 1, 8).comm_fraction == 0.0  # nothing to all-reduce
    assert make_job("inf", 0.0, 10.0, 8, 8, "inference").comm_fraction == 0.0
    assert make_job("given", 0.0, 10.0, 8, 8, comm_fraction=0.3, model_gb=1.5).model_gb == 1.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        train.gpus = 3  # type: ignore[misc]


def test_make_job_shares_cpu_and_memory_over_pods_rounding_up() -> None:
    job = make_job("j", 0.0, 1.0, 24, 8, cpu_milli=10_000, memory_mib=1001)
    assert (job.pods, job.cpu_milli_per_pod, job.memory_mib_per_pod) == (3, 3334, 334)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpus": 0, "pods": 1, "gpus_per_pod": 0}, "gpus must be ≥ 1"),
        ({"pods": 3}, "pods (3) × gpus_per_pod (8) must equal gpus (16)"),
        ({"duration_s": -1.0}, "duration_s must be ≥ 0"),
        ({"submit_s": math.inf}, "submit_s must be a finite number"),
        ({"kind": "batch"}, "kind must be one of training, inference"),
        ({"comm_fraction": 1.5}, "comm_fraction must be in [0, 1]"),
        ({"model_gb": -2.0}, "model_gb must be ≥ 0"),
        ({"id": ""}, "job id must not be empty"),
    ],
)
def test_job_rejects_inconsistent_fields(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"id": "j", "submit_s": 0.0, "duration_s": 1.0, "gpus": 16, "pods": 2, "gpus_per_pod": 8, "kind": "training"}
    with pytest.raises(ValueError, match=re.escape(message)):
        Job(**{**base, **kwargs})  # type: ignore[arg-type]

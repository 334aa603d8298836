"""Synthetic workloads: determinism per seed, the shape of the distributions, job invariants,
and parameter validation."""

from __future__ import annotations

import dataclasses
import re
from itertools import pairwise

import numpy as np
import pytest
from pydantic import ValidationError

from admission.simulator import DEFAULT_SIZE_MIX, Job, SyntheticParams, synthetic_jobs


def test_same_seed_same_jobs_other_seed_other_jobs() -> None:
    a = synthetic_jobs(2000, 7, 8)
    assert a == synthetic_jobs(2000, 7, 8)
    b = synthetic_jobs(2000, 8, 8)
    assert [j.submit_s for j in a] != [j.submit_s for j in b]
    assert [j.gpus for j in a] != [j.gpus for j in b]


def test_jobs_are_sorted_start_at_start_s_and_have_unique_ids() -> None:
    jobs = synthetic_jobs(500, 1, 8, SyntheticParams(start_s=1000.0))
    assert jobs[0].submit_s == 1000.0
    assert all(x.submit_s <= y.submit_s for x, y in pairwise(jobs))
    assert len({j.id for j in jobs}) == 500 and jobs[0].id == "syn-000000"
    assert synthetic_jobs(0, 1, 8) == []


def test_distributions_match_the_parameters_over_20k_jobs() -> None:
    params = SyntheticParams()
    jobs = synthetic_jobs(20_000, 42, 8, params)
    gpus = np.array([j.gpus for j in jobs], dtype=float)
    inference = np.array([j.kind == "inference" for j in jobs])

    # Expected size: training draws the whole mix, inference only sizes ≤ inference_max_gpus (8).
    mix = params.size_mix
    full = sum(g * w for g, w in mix.items()) / sum(mix.values())  # 7.93
    small = {g: w for g, w in mix.items() if g <= params.inference_max_gpus}
    small_mean = sum(g * w for g, w in small.items()) / sum(small.values())  # 2.65 / 0.85
    expected = (1 - params.inference_share) * full + params.inference_share * small_mean  # ≈ 6.97
    assert gpus.mean() == pytest.approx(expected, rel=0.07)  # standard error ≈ 1.7% of the mean
    assert inference.mean() == pytest.approx(params.inference_share, abs=0.015)
    assert (gpus == 1).mean() == pytest.approx(0.8 * 0.45 + 0.2 * 0.45 / 0.85, abs=0.015)
    assert gpus[inference].max() <= 8 and gpus.max() == 128
    assert set(gpus.astype(int)) <= set(mix)

    durations = np.array([j.duration_s for j in jobs])
    assert np.median(durations) == pytest.approx(params.duration_median_s, rel=0.05)
    assert np.std(np.log(durations)) == pytest.approx(params.duration_sigma, rel=0.05)
    gaps = np.diff([j.submit_s for j in jobs])
    assert gaps.mean() == pytest.approx(3600.0 / params.arrival_rate_per_hour, rel=0.03)
    assert np.std(gaps) / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: coefficient of variation 1


def test_jobs_are_valid_frozen_jobs_cut_into_node_sized_pods() -> None:
    params = SyntheticParams(comm_fraction=0.25)
    jobs = synthetic_jobs(3000, 5, 4, params)
    for j in jobs:
        assert type(j) is Job
        assert Job(*dataclasses.astuple(j)) == j  # the checked constructor accepts every field as drawn
        assert j.pods * j.gpus_per_pod == j.gpus and j.gpus_per_pod <= 4
        assert j.pods == (1 if j.gpus <= 4 else j.gpus // 4)
        assert j.comm_fraction == (0.25 if j.kind == "training" and j.gpus > 1 else 0.0)
        assert params.min_duration_s <= j.duration_s <= params.max_duration_s
    with pytest.raises(dataclasses.FrozenInstanceError):
        jobs[0].submit_s = 1.0  # type: ignore[misc]


def test_max_gpus_and_duration_clipping() -> None:
    params = SyntheticParams(max_gpus=16, duration_sigma=3.0, min_duration_s=600, max_duration_s=86400)
    jobs = synthetic_jobs(5000, 2, 8, params)
    assert max(j.gpus for j in jobs) == 16
    durations = [j.duration_s for j in jobs]
    assert min(durations) == 600 and max(durations) == 86400  # sigma 3 reaches both clips


def test_params_accept_camel_case_and_reject_bad_values() -> None:
    p = SyntheticParams.model_validate({"arrivalRatePerHour": 5, "sizeMix": {"2": 1, "4": 3}, "maxGPUs": 64, "inferenceShare": 0})
    assert p.size_mix == {2: 1.0, 4: 3.0} and p.max_gpus == 64
    assert SyntheticParams().size_mix == DEFAULT_SIZE_MIX
    bad = [
        ({"size_mix": {}}, "lists no GPU count"),
        ({"size_mix": {0: 1.0}}, "GPU count 0 must be ≥ 1"),
        ({"size_mix": {8: 0.0}}, "weights must not all be 0"),
        ({"size_mix": {16: 1.0}, "max_gpus": 8}, "no weight at or below maxGPUs (8)"),
        ({"size_mix": {16: 1.0}}, "no weight at or below inferenceMaxGPUs (8)"),
        ({"min_duration_s": 100, "max_duration_s": 10}, "maxDurationSeconds (10.0) must be ≥ minDurationSeconds (100.0)"),
        ({"arrival_rate_per_hour": 0}, "greater than 0"),
        ({"inference_share": 1.5}, "less than or equal to 1"),
    ]
    for fields, message in bad:
        with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
            SyntheticParams(**fields)  # type: ignore[arg-type]
    assert SyntheticParams(size_mix={16: 1.0}, inference_share=0).size_mix == {16: 1.0}


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="n must be ≥ 0"):
        synthetic_jobs(-1, 0, 8)
    with pytest.raises(ValueError, match="gpus_per_node must be ≥ 1"):
        synthetic_jobs(10, 0, 0)


def test_the_bundled_small_jobs_stream_spans_14_days_with_a_64_gpu_gang_about_every_8_hours() -> None:
    from pathlib import Path

    import yaml

    from admission.simulator import scale_load

    path = Path(__file__).resolve().parents[3] / "config/streams/small-jobs-with-gangs.yaml"
    params = SyntheticParams.model_validate(yaml.safe_load(path.read_text()))
    jobs = scale_load(synthetic_jobs(42_671, 0, 4, params), 2304, 0.95)
    span_h = (jobs[-1].submit_s - jobs[0].submit_s) / 3600
    gangs = sum(j.gpus == 64 for j in jobs)
    assert 13.5 * 24 < span_h < 14.5 * 24
    assert 7 < span_h / gangs < 9
    assert sum(j.gpus <= 8 for j in jobs) == len(jobs) - gangs


def test_a_priority_per_gpu_count_changes_no_draw_and_leaves_the_other_sizes_at_0() -> None:
    from pathlib import Path

    import yaml

    plain = SyntheticParams(size_mix={1: 50, 8: 20, 64: 0.5})
    ranked = SyntheticParams.model_validate({"sizeMix": {1: 50, 8: 20, 64: 0.5}, "priority": {64: 1000, 8: -3}})
    a, b = synthetic_jobs(3000, 5, 4, plain), synthetic_jobs(3000, 5, 4, ranked)
    assert [dataclasses.replace(j, priority=0) for j in b] == a  # the same jobs, only their priorities differ
    assert {(j.gpus, j.priority) for j in b} == {(1, 0), (8, -3), (64, 1000)}
    path = Path(__file__).resolve().parents[3] / "config/streams/small-jobs-with-priority-gangs.yaml"
    stream = synthetic_jobs(4000, 0, 4, SyntheticParams.model_validate(yaml.safe_load(path.read_text())))
    assert {j.priority for j in stream if j.gpus == 64} == {1000} and {j.priority for j in stream if j.gpus < 64} == {0}
    assert 10 <= sum(j.gpus == 64 for j in stream) <= 30  # about one job in 200


@pytest.mark.parametrize(("priority", "message"), [({48: 1}, "priority: GPU count 48 is not in sizeMix (1, 64)"),
                                                   ({64: "high"}, "GPU count 64: 'high' must be a whole number"),
                                                   ({64: 2**31}, "GPU count 64: 2147483648 must be a whole number in [-2147483648, 2147483647]")])
def test_a_bad_priority_is_refused_naming_the_field(priority: dict[int, object], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        SyntheticParams.model_validate({"sizeMix": {1: 1, 64: 1}, "priority": priority})


def test_a_job_priority_outside_kueues_int32_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("job 'x': priority must be a whole number in [-2147483648, 2147483647]")):
        Job("x", 0.0, 1.0, 1, 1, 1, "training", priority=2**31)

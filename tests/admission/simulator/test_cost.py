"""The cost model: ring all-reduce arithmetic, slowdown 1.0 on the ideal placement, monotone in
link bandwidth and GPU perf, a hand-computed case, and the no-all-reduce cases."""

from __future__ import annotations

from itertools import pairwise

import pytest

from admission.simulator import make_job
from topology import ring_allreduce_s, step_slowdown

NVLINK, NDR, PCIE = 900.0, 50.0, 63.0


def test_ring_allreduce_hand_computed() -> None:
    # 8 GB over 16 GPUs at 50 GB/s and 5 µs: 2·15/16 · 8/50 + 2·15 · 5e-6 = 0.3 + 0.00015 s
    assert ring_allreduce_s(8.0, 16, 50.0, 5.0) == pytest.approx(0.30015, rel=1e-12)
    assert ring_allreduce_s(8.0, 1, 50.0, 5.0) == 0.0


@pytest.mark.parametrize("gpus", [1, 2, 8, 16, 72, 512])
@pytest.mark.parametrize("kind", ["training", "inference"])
def test_ideal_placement_is_exactly_one(gpus: int, kind: str) -> None:
    job = make_job("j", 0.0, 100.0, gpus, 8, kind, comm_fraction=0.2 if kind == "training" else 0.0)  # type: ignore[arg-type]
    for bw, lat in [(NVLINK, 1.0), (1800.0, 0.5), (NDR, 5.0)]:
        assert step_slowdown(job, 1.0, bw, lat, bw, lat) == 1.0


def test_hand_computed_span_on_slow_gpus() -> None:
    # 16 GPUs, 8 GB of gradients, f = 0.2; ideal island link 900 GB/s, 1 µs; placed across NDR 50 GB/s, 5 µs;
    # slowest GPU at perf 0.8.
    #   A_ideal  = 2·15/16 · 8/900 + 2·15 · 1e-6 = 1/60 + 3e-5 = 0.016696666…
    #   A_actual = 2·15/16 · 8/50  + 2·15 · 5e-6 = 0.3 + 1.5e-4 = 0.30015
    #   slowdown = (1 − 0.2)/0.8 + 0.2 · 0.30015 / 0.016696666… = 1 + 0.2 · 17.97664… = 4.595329…
    job = make_job("j", 0.0, 3600.0, 16, 8, comm_fraction=0.2, model_gb=8.0)
    expected = 1.0 + 0.2 * (0.30015 / (1 / 60 + 3e-5))
    got = step_slowdown(job, 0.8, NDR, 5.0, NVLINK, 1.0)
    assert got == pytest.approx(expected, rel=1e-12)
    assert got == pytest.approx(4.5953, abs=1e-4)
    assert job.duration_s * got == pytest.approx(16543.18, abs=0.01)  # runtime = duration × slowdown


def test_monotone_in_bandwidth() -> None:
    job = make_job("j", 0.0, 100.0, 64, 8)
    values = [step_slowdown(job, 1.0, bw, 5.0, 1800.0, 0.5) for bw in (10.0, 25.0, NDR, PCIE, 400.0, NVLINK, 1800.0)]
    assert all(a > b for a, b in pairwise(values))
    assert values[-1] > 1.0  # the island bandwidth with a worse latency is still a little slower
    assert step_slowdown(job, 1.0, 1800.0, 0.5, 1800.0, 0.5) == 1.0


def test_monotone_in_perf_and_below_one_on_fast_gpus() -> None:
    job = make_job("j", 0.0, 100.0, 16, 8, comm_fraction=0.2)
    values = [step_slowdown(job, p, NDR, 5.0, NVLINK, 1.0) for p in (0.5, 0.7, 0.9, 1.0, 1.1, 1.3)]
    assert all(a > b for a, b in pairwise(values))
    # Fast GPUs on the ideal link: only compute speeds up: 1 + 0.8 · (1/1.25 − 1) = 0.84.
    assert step_slowdown(job, 1.25, NVLINK, 1.0, NVLINK, 1.0) == pytest.approx(0.84, rel=1e-12)


def test_no_all_reduce_for_one_gpu_or_inference() -> None:
    one = make_job("one", 0.0, 100.0, 1, 8, comm_fraction=0.5)
    inference = make_job("inf", 0.0, 100.0, 16, 8, "inference", comm_fraction=0.3)
    silent = make_job("silent", 0.0, 100.0, 16, 8, comm_fraction=0.0)
    for job in (one, inference, silent):
        assert step_slowdown(job, 0.8, 1.0, 50.0, NVLINK, 1.0) == pytest.approx(1.25)  # only 1 / perf
        assert step_slowdown(job, 1.0, 1.0, 50.0, NVLINK, 1.0) == 1.0


def test_gradient_size_matters_only_through_latency() -> None:
    big = make_job("big", 0.0, 1.0, 16, 8, comm_fraction=0.2, model_gb=100.0)
    small = make_job("small", 0.0, 1.0, 16, 8, comm_fraction=0.2, model_gb=0.001)
    assert step_slowdown(big, 1.0, NDR, 0.0, NVLINK, 0.0) == pytest.approx(step_slowdown(small, 1.0, NDR, 0.0, NVLINK, 0.0), rel=1e-12)
    # With latency, small messages are latency-bound: 5 µs vs 1 µs weighs more than 900 vs 50 GB/s.
    assert step_slowdown(small, 1.0, NDR, 5.0, NVLINK, 1.0) < step_slowdown(big, 1.0, NDR, 5.0, NVLINK, 1.0)
    no_bytes = make_job("zero", 0.0, 1.0, 16, 8, comm_fraction=0.2, model_gb=0.0)
    assert step_slowdown(no_bytes, 0.9, NDR, 5.0, NVLINK, 0.0) == pytest.approx(1 / 0.9)  # nothing to scale


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, NDR, 5.0, NVLINK, 1.0), "min_perf must be > 0"),
        ((1.0, 0.0, 5.0, NVLINK, 1.0), "link bandwidths must be > 0 GB/s"),
        ((1.0, NDR, 5.0, -1.0, 1.0), "link bandwidths must be > 0 GB/s"),
        ((1.0, NDR, -5.0, NVLINK, 1.0), "link latencies must be ≥ 0 µs"),
    ],
)
def test_bad_numbers_are_refused(args: tuple[float, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        step_slowdown(make_job("j", 0.0, 1.0, 16, 8), *args)


def test_overlap_hides_the_all_reduce_only_up_to_compute() -> None:
    import dataclasses

    # f = 0.1, a span 36× slower (1800 → 50 GB/s, no latency): A = 3.6, C = 0.9.
    job = make_job("j", 0.0, 3600.0, 16, 8, comm_fraction=0.1, model_gb=8.0)
    assert step_slowdown(job, 1.0, 50.0, 0.0, 1800.0, 0.0) == pytest.approx(0.9 + 3.6)
    half = dataclasses.replace(job, overlap=0.5)
    # step = C + A − min(o·A, C) = 0.9 + 3.6 − 0.9; ideal = 0.9 + 0.1 − 0.05
    assert step_slowdown(half, 1.0, 50.0, 0.0, 1800.0, 0.0) == pytest.approx(3.6 / 0.95)
    assert step_slowdown(half, 1.0, 1800.0, 0.0, 1800.0, 0.0) == 1.0
    # a small penalty is hidden entirely: 2× slower link, A = 0.2 ≤ C, half of it hidden
    assert step_slowdown(half, 1.0, 900.0, 0.0, 1800.0, 0.0) == pytest.approx((0.9 + 0.2 - 0.1) / 0.95)
    with pytest.raises(ValueError, match="overlap must be in"):
        make_job("j", 0.0, 1.0, 16, 8, overlap=1.5)


def test_cost_params_apply_by_size_and_class_and_to_named_levels() -> None:
    from admission.simulator._cost import CostError, CostParams, apply_bandwidths, apply_cost, parse_comm_fraction, parse_overlap
    from topology import ClusterModel

    params = CostParams(comm_fraction=parse_comm_fraction("8:0.05,64:0.1,*:0.15"), overlap=parse_overlap("training=0.5"),
                        bandwidth_gbps={"su": 400.0})
    jobs = [make_job(f"j{g}", 0.0, 1.0, g, 8) for g in (1, 8, 32, 128)] + [make_job("i", 0.0, 1.0, 4, 8, "inference")]
    out = apply_cost(jobs, params)
    assert [j.comm_fraction for j in out] == [0.0, 0.05, 0.1, 0.15, 0.0]
    assert [j.overlap for j in out] == [0.5, 0.5, 0.5, 0.5, 0.0]
    assert apply_cost(jobs, CostParams()) == jobs
    model = ClusterModel.model_validate({"name": "c", "flavors": [{"name": "f", "topology": "t", "levels": [
        {"label": "network.example.com/su", "bandwidthGBps": 50}, {"label": "kubernetes.io/hostname", "bandwidthGBps": 900}],
        "nodes": [{"name": "n", "labels": {"network.example.com/su": "a"}, "allocatable": {"nvidia.com/gpu": 8}}]}]})
    assert [lv.bandwidth_gbps for lv in apply_bandwidths(model, params).flavors[0].levels] == [400.0, 900.0]
    with pytest.raises(CostError, match="no level 'spine'"):
        apply_bandwidths(model, CostParams(bandwidth_gbps={"spine": 1.0}))


def test_link_model_is_parsed_and_named_in_the_description() -> None:
    from admission.simulator._cost import CostError, CostParams, parse_link_model

    assert parse_link_model("flat-ring") == "flat-ring"
    with pytest.raises(CostError, match="--link-model: 'mesh' is not one of calibrated, flat-ring"):
        parse_link_model("mesh")
    assert CostParams().describe().startswith("link model calibrated;")
    assert CostParams(link_model="flat-ring").describe().startswith("link model flat-ring;")


def test_slowdown_from_ratio_is_the_step_formula_for_any_link_model() -> None:
    from topology import slowdown_from_ratio

    gang = make_job("g", 0.0, 100.0, 16, 4)
    assert slowdown_from_ratio(gang, 1.0, 1.0) == 1.0
    assert slowdown_from_ratio(gang, 1.0, 3.0) == pytest.approx(1.0 + gang.comm_fraction * 2.0)
    assert slowdown_from_ratio(gang, 0.5, 1.0) == pytest.approx(1.0 + (1.0 - gang.comm_fraction))
    assert slowdown_from_ratio(make_job("one", 0.0, 100.0, 1, 4), 0.8, 50.0) == pytest.approx(1.25)

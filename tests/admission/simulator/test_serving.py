"""The serving cost model: KV bytes from the model's shape, the edge priced by the calibrated link
model, and FCFS queueing through prefill and the KV link."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from admission.simulator._serving import (
    GB200,
    KV_ALPHA_S,
    LLAMA3_70B_FP16,
    PREFILL_MFU,
    Requests,
    edge_between,
    read_azure_llm,
    replay,
)
from topology import ETA_RING_NET, ETA_RING_NVL, Level, NodeInfo, ResourceVector, Snapshot

SU, CLIQUE = "network.example.com/su", "nvidia.com/gpu.clique"


def fabric() -> Snapshot:
    nodes = [NodeInfo(f"r{r}n{n}", {SU: "u0", CLIQUE: f"r{r}"}, ResourceVector(4, 100_000, 100_000, 32)) for r in range(2) for n in range(2)]
    return Snapshot("gb200", [Level(SU, 50, 4), Level(CLIQUE, 1800, 1)], nodes)


def test_llama3_70b_fp16_holds_320_kib_of_kv_per_token() -> None:
    assert LLAMA3_70B_FP16.kv_bytes_per_token == 80 * 8 * 128 * 2 * 2 == 320 * 1024


def test_an_edge_inside_an_island_runs_on_nvlink_and_one_across_on_the_nics() -> None:
    snap = fabric()
    inside = edge_between(snap, ["r0n0"], ["r0n1"], 4, 4)
    across = edge_between(snap, ["r0n0"], ["r1n0"], 4, 4)
    assert (inside.level, inside.nvlink, inside.channels) == (CLIQUE, True, 4)
    assert inside.achieved_gbps == pytest.approx(4 * 900 * ETA_RING_NVL)  # one direction of 1.8 TB/s per GPU
    assert (across.level, across.nvlink) == (SU, False)
    assert across.achieved_gbps == pytest.approx(4 * 50 * ETA_RING_NET)
    tokens = np.array([1000.0])
    t_in, t_across = inside.transfer_s(tokens, LLAMA3_70B_FP16)[0], across.transfer_s(tokens, LLAMA3_70B_FP16)[0]
    assert t_across == pytest.approx(KV_ALPHA_S + 4e-6 + 1000 * 327_680 / (4 * 50 * ETA_RING_NET * 1e9))
    assert t_across > 10 * t_in


def test_requests_queue_first_come_first_served_through_prefill_and_the_link() -> None:
    snap = fabric()
    edge = edge_between(snap, ["r0n0"], ["r1n0"], 4, 4)
    reqs = Requests(np.array([0.0, 0.0, 10.0]), np.array([2000.0, 2000.0, 2000.0]), np.array([100.0, 100.0, 100.0]))
    got = replay(reqs, model=LLAMA3_70B_FP16, gpu=GB200, prefill_gpus=4, decode_gpus=4, edge=edge)
    prefill = 2000 * 2 * LLAMA3_70B_FP16.params / (4 * GB200.dense_fp16_flops * PREFILL_MFU)
    alone = prefill + got.kv_s[0] + got.tpot_s
    assert got.ttft_s[0] == pytest.approx(alone)
    assert got.ttft_s[1] == pytest.approx(alone + prefill)  # waited for the first one's prefill
    assert got.ttft_s[2] == pytest.approx(alone)  # arrived to an idle service
    assert got.tpot_s == pytest.approx(LLAMA3_70B_FP16.weight_bytes / (4 * GB200.hbm_gbps * 1e9 * 0.7))


def _azure() -> Path | None:
    from admission.cli._bench_serving import azure_trace

    try:
        return azure_trace()
    except FileNotFoundError:
        return None


needs_azure = pytest.mark.skipif(_azure() is None, reason="the Azure LLM trace is not in ../shared/traces (set ATOLL_TRACES_DIR)")


@needs_azure
def test_the_azure_window_reads_in_time_order() -> None:
    path = _azure()
    assert path is not None
    reqs = read_azure_llm(path, 2863)
    assert reqs.prompt.size == 2863 and reqs.arrival_s[0] == 0.0
    assert (np.diff(reqs.arrival_s) >= 0).all() and 540 < reqs.arrival_s[-1] < 600
    assert int(np.median(reqs.prompt)) > 500 and reqs.output.min() >= 1

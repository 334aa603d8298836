"""What a serving graph's placement costs its requests: TTFT and TPOT of a disaggregated
prefill/decode service, replayed from the Azure LLM inference trace.

The model (each constant below names what it rests on)

- **KV bytes per token** from the model's shape: layers × KV heads × head dim × 2 (K and V) ×
  bytes per value. Llama-3-70B (80 layers, 8 KV heads of 128, grouped-query attention; Meta's
  model card) at FP16: 80 × 8 × 128 × 2 × 2 B = 327,680 B = 320 KiB per token.
- **Prefill** is compute-bound (Splitwise, ISCA '24; DistServe, OSDI '24): 2 × parameters FLOPs
  per prompt token over the prefill pool's GPUs at ``PREFILL_MFU`` of their dense FP16 peak.
- **KV transfer** = ``KV_ALPHA_S`` + the edge's link latency + prompt tokens × KV bytes per
  token ÷ the edge's achieved bandwidth. The edge is where the placement put it: the lowest
  level whose one domain holds both pools (``LinkPlacement``). Inside one NVLink island each
  prefill GPU sends its tensor-parallel shard to a decode GPU at one direction of its NVLink
  (half the level's two-direction figure) × ``ETA_RING_NVL``; across islands each shard leaves
  through its GPU's own NIC at the crossed level's per-GPU figure (which holds that level's
  oversubscription) × ``ETA_RING_NET``, at most ``MAX_CHANNELS`` NICs (the calibrated link
  model, ``_collectives``). Channels = min(prefill GPUs, decode GPUs).
- **TPOT** from the decode pool: a decode step reads the weights once (memory-bound at batch
  sizes that fit; Splitwise §3): weights ÷ (decode GPUs × HBM bandwidth × ``DECODE_HBM_EFF``), plus,
  when the decode pool itself spans NVLink islands, two tensor-parallel all-reduces per layer,
  each paying the crossed level's latency.
- **Queueing**: one prefill instance serves requests first come, first served; the KV link
  carries one transfer at a time, in the same order. TTFT = queueing + prefill + KV transfer +
  one decode step.

Not modelled: batching of prefills, chunked prefill, KV compression, congestion from other
tenants' traffic on the same links, decode-side queueing (the pool is assumed to keep up).
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from topology import ETA_RING_NET, ETA_RING_NVL, MAX_CHANNELS, Snapshot

__all__ = [
    "DECODE_HBM_EFF",
    "GB200",
    "H100",
    "KV_ALPHA_S",
    "LLAMA3_70B_FP16",
    "PREFILL_MFU",
    "Accelerator",
    "Edge",
    "ModelShape",
    "Requests",
    "ServingResult",
    "edge_between",
    "read_azure_llm",
    "replay",
    "serve_on",
    "tpot_s",
]

PREFILL_MFU: Final = 0.5
"""Share of dense FP16 peak a prefill reaches (DistServe and Splitwise report prefill near the
compute roof; 40–60 % model FLOPs utilisation is typical of long prompts on H100-class GPUs)."""
DECODE_HBM_EFF: Final = 0.7
"""Share of HBM bandwidth a decode step reaches reading the weights (vLLM and TensorRT-LLM decode
kernels reach 60–80 % of peak HBM bandwidth at small batch)."""
KV_ALPHA_S: Final = 20e-6
"""Start-up of one KV transfer (RDMA or NVLink copy set-up, tens of µs)."""


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_value: int
    params: float
    hidden: int

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * self.kv_heads * self.head_dim * 2 * self.bytes_per_value

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_value


LLAMA3_70B_FP16: Final = ModelShape("Llama-3-70B FP16", layers=80, kv_heads=8, head_dim=128, bytes_per_value=2, params=70.6e9,
                                    hidden=8192)
"""Meta Llama 3 70B (model card: 80 layers, hidden 8192, 64 query heads, 8 KV heads, 70.6 B parameters)."""


@dataclass(frozen=True, slots=True)
class Accelerator:
    name: str
    dense_fp16_flops: float
    hbm_gbps: float


GB200: Final = Accelerator("GB200", 2.5e15, 8000.0)
"""NVIDIA GB200 NVL72 datasheet: 180 PFLOPS dense FP16/BF16 per 72 GPUs (2.5 PF each), HBM3e 8 TB/s per GPU."""
H100: Final = Accelerator("H100 SXM", 989e12, 3350.0)
"""NVIDIA H100 SXM datasheet: 989 TFLOPS dense FP16/BF16, HBM3 3.35 TB/s."""


@dataclass(frozen=True, slots=True)
class Edge:
    """A prefill → decode edge as placed: its bottleneck level, the per-channel bandwidth the
    KV transfer achieves there, how many channels run side by side, and the level's latency."""

    level: str
    link_gbps: float
    """The level's figure in the cluster model (per GPU; two-direction inside an NVLink island)."""
    channel_gbps: float
    channels: int
    latency_us: float
    nvlink: bool

    @property
    def achieved_gbps(self) -> float:
        return self.channel_gbps * self.channels

    def transfer_s(self, tokens: npt.NDArray[np.float64], model: ModelShape) -> npt.NDArray[np.float64]:
        return KV_ALPHA_S + self.latency_us * 1e-6 + tokens * model.kv_bytes_per_token / (self.achieved_gbps * 1e9)


def _island_level(snapshot: Snapshot) -> int:
    bw = snapshot.bandwidth_gbps
    lv = snapshot.node_level
    while lv > 0 and bw[lv - 1] >= bw[snapshot.node_level]:
        lv -= 1
    return lv


def _common_level(snapshot: Snapshot, nodes: Sequence[str]) -> int:
    idx = [snapshot.node_index[n] for n in nodes]
    lo, hi = min(idx), max(idx)
    for lv in range(snapshot.node_level, -1, -1):
        if snapshot.node_dom[lv, lo] == snapshot.node_dom[lv, hi]:
            return lv
    return -1


def edge_between(snapshot: Snapshot, prefill_nodes: Sequence[str], decode_nodes: Sequence[str], prefill_gpus: int,
                 decode_gpus: int) -> Edge:
    """The edge between two placed pools (node names), priced by the calibrated link model."""
    level = _common_level(snapshot, [*prefill_nodes, *decode_nodes])
    at = max(level, 0)
    island = _island_level(snapshot)
    label = snapshot.level_labels[level] if level >= 0 else "(flavor)"
    channels = max(1, min(prefill_gpus, decode_gpus))
    if level >= island:
        return Edge(label, float(snapshot.bandwidth_gbps[at]), float(snapshot.bandwidth_gbps[island]) / 2.0 * ETA_RING_NVL, channels,
                    float(snapshot.latency_us[at]), True)
    return Edge(label, float(snapshot.bandwidth_gbps[at]), float(snapshot.bandwidth_gbps[at]) * ETA_RING_NET, min(channels, MAX_CHANNELS),
                float(snapshot.latency_us[at]), False)


@dataclass(frozen=True, slots=True)
class Requests:
    """Request arrivals (seconds from the first), prompt and output tokens."""

    arrival_s: npt.NDArray[np.float64]
    prompt: npt.NDArray[np.float64]
    output: npt.NDArray[np.float64]


def read_azure_llm(path: Path, limit: int | None = None) -> Requests:
    """The Azure LLM inference trace 2023 (columns TIMESTAMP, ContextTokens, GeneratedTokens);
    ``limit``: its first requests only."""
    times, prompt, output = [], [], []
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
            raise ValueError(f"{path.name}: expected the header TIMESTAMP,ContextTokens,GeneratedTokens, got {header}")
        for line, row in enumerate(reader, start=2):
            if limit is not None and line - 2 >= limit:
                break
            try:
                stamp = dt.datetime.strptime(row[0][:26], "%Y-%m-%d %H:%M:%S.%f")
                times.append(stamp.timestamp())
                prompt.append(float(int(row[1])))
                output.append(float(int(row[2])))
            except (ValueError, IndexError) as exc:
                raise ValueError(f"{path.name} line {line}: {exc}") from None
    t = np.asarray(times)
    return Requests(t - t.min(), np.asarray(prompt), np.asarray(output))


@dataclass(frozen=True, slots=True)
class ServingResult:
    ttft_s: npt.NDArray[np.float64]
    kv_s: npt.NDArray[np.float64]
    tpot_s: float
    edge: Edge | None = None
    kv_budget_s: float = 0.0
    """One decode step of the pool packed in one island: a KV transfer longer than that delays the
    first token by more than one token's time."""


def tpot_s(model: ModelShape, gpu: Accelerator, decode_gpus: int, spans_islands_latency_us: float | None) -> float:
    """One decode step of the pool: the weights read once, plus cross-island all-reduce latency when it spans islands."""
    step = model.weight_bytes / (decode_gpus * gpu.hbm_gbps * 1e9 * DECODE_HBM_EFF)
    if spans_islands_latency_us is not None:
        step += 2 * model.layers * spans_islands_latency_us * 1e-6
    return step


def serve_on(snapshot: Snapshot, prefill_nodes: Sequence[str], decode_nodes: Sequence[str], requests: Requests, *, prefill_gpus: int,
             decode_gpus: int, model: ModelShape = LLAMA3_70B_FP16, gpu: Accelerator = GB200) -> ServingResult:
    """``replay`` on the edge between two placed pools (node names of ``snapshot``)."""
    edge = edge_between(snapshot, prefill_nodes, decode_nodes, prefill_gpus, decode_gpus)
    level = _common_level(snapshot, decode_nodes)
    cross = None if level >= _island_level(snapshot) else float(snapshot.latency_us[max(level, 0)])
    got = replay(requests, model=model, gpu=gpu, prefill_gpus=prefill_gpus, decode_gpus=decode_gpus, edge=edge, decode_cross_latency_us=cross)
    return ServingResult(got.ttft_s, got.kv_s, got.tpot_s, edge, tpot_s(model, gpu, decode_gpus, None))


def replay(requests: Requests, *, model: ModelShape, gpu: Accelerator, prefill_gpus: int, decode_gpus: int, edge: Edge,
           decode_cross_latency_us: float | None = None) -> ServingResult:
    """Every request through one prefill instance and the edge, first come first served."""
    prefill = requests.prompt * 2.0 * model.params / (prefill_gpus * gpu.dense_fp16_flops * PREFILL_MFU)
    kv = edge.transfer_s(requests.prompt, model)
    tpot = tpot_s(model, gpu, decode_gpus, decode_cross_latency_us)
    ttft = np.empty_like(prefill)
    prefill_free = link_free = 0.0
    for i in range(prefill.size):  # two FCFS servers in series: a plain loop is the clearest statement
        arrive = requests.arrival_s[i]
        done = max(arrive, prefill_free) + prefill[i]
        prefill_free = done
        sent = max(done, link_free) + kv[i]
        link_free = sent
        ttft[i] = sent + tpot - arrive
    return ServingResult(ttft, kv, tpot)

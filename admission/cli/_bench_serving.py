"""``atoll bench serving``: what a serving graph's placement is worth, replayed on real requests.

A busy GB200 NVL72 model (the bundled one) with training running: gangs drawn from the bundled
ITP trace's GPU counts fill it to 97 % of its GPUs, placed as ``atoll-elastic`` places them, then
random gangs end until the stated occupancy is left (so the free room is scattered as it is in
a cluster that has run for a while). On that state, one disaggregated serving Workload (the
bundled ``serving-graph.yaml``: prefill 1 pod × 4 GPUs, decode 2 pods × 2 GPUs, Llama-3-70B
FP16) is placed four ways:

- ``atoll-graph``: Atoll's bandwidth edge (``atoll.dev/near`` + ``near-min-bandwidth-gbps: 400``):
  one joint choice, decode inside the domain that gives prefill ≥ 400 GB/s; Retry when none has room.
- ``level-only``: Kueue's ``podset-group-name`` (both PodSets in one NVLink domain), falling back
  to each PodSet on its own preferred island when no domain holds both (Kueue's preferred
  topology: same domain or anywhere).
- ``kueue-bestfit``: Kueue's TAS as the simulator's ``kueue-bestfit`` policy has it
  (``topology._kueue_tas``): each PodSet with ``podset-preferred-topology`` at the NVLink level,
  placed in order, decode seeing prefill's pods as used; nothing ties the two PodSets together.
- ``count-only``: quota alone, each PodSet on any nodes (least free first, Kueue's unconstrained).

The first ten minutes (2,863 requests) of the Azure LLM inference trace 2023, conversation
service (Azure/AzurePublicDataset, CC BY 4.0; read from ``../shared/traces`` or
``$ATOLL_TRACES_DIR``, not shipped in the package) are replayed against each placement (``simulator._serving``). The table gives
p50 and p99 TTFT and the share of requests whose KV transfer exceeds the budget: one decode step
(a transfer longer than that delays the first token by more than the time of one token).
Exits 1 when ``atoll-graph``'s p99 TTFT is above another policy's in a row (on the seeds every
policy placed).

A second table (``--skip-mixed`` leaves it out) is the mixed pool: training at 60 % of the GPUs,
then 16 inference replicas of 8 GPUs at most one per rack, placed as Atoll places a spread
group's replicas (partly used racks first, empty racks protected) or into the emptiest racks,
or none; then 300 training gangs of 8 or more GPUs from the ITP trace arrive. It gives the
racks left wholly free and the share of those gangs placed in one NVLink island.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from admission.cli._args import Parser, counted

__all__ = ["BusyState", "busy_gb200", "main", "mixed_pool_table", "place_serving", "serving_table"]

AZURE_FILE = "azure_llm_conv_2023-11-16_before1845.csv"
AZURE_REQUESTS = 2863
"""The window replayed: the trace's first 2,863 requests, 18:15:46–18:25:46 (ten minutes)."""
ITP_FILE = "msft_itp_cluster04_day00-14.csv"
CLIQUE, SU = "nvidia.com/gpu.clique", "network.example.com/su"
POLICIES = ("atoll-graph", "level-only", "kueue-bestfit", "count-only")
OCCUPANCIES = "0.75,0.85,0.9"
FILL = 0.97
PREFILL, DECODE_PODS, DECODE_GPUS = 4, 2, 2


@dataclass
class BusyState:
    snapshot: Any
    gangs: list[list[tuple[str, int]]]
    """Each training gang's (node, GPUs) pairs."""


def _gang_request(gpus: int) -> Any:
    from topology import PlacementRequest, PodSetRequest, ResourceVector

    pods, per = (gpus // 4, 4) if gpus >= 4 and gpus % 4 == 0 else (1, gpus)
    return PlacementRequest((PodSetRequest("workers", pods, ResourceVector(gpu=per), preferred_level=CLIQUE, max_span_level=SU),),
                            protect_empty_domains=False)


def busy_gb200(occupancy: float, seed: int, sizes: Sequence[int], *, fill: float = FILL) -> BusyState:
    """The bundled GB200 model filled with training gangs to ``fill``, then drained at random to ``occupancy``."""
    from admission.cli._bundled import resolve_cluster
    from topology import ResourceVector, Snapshot, find_placement, load_cluster_model

    flavor = load_cluster_model(resolve_cluster("gb200-nvl72-superpod")).flavor("gb200")
    snap = Snapshot(flavor.name, flavor.level_specs(), flavor.build_nodes(), node_level=flavor.node_level())
    rng = np.random.default_rng(seed)
    total = snap.total_gpus()
    gangs: list[list[tuple[str, int]]] = []
    misses = 0
    while snap.free_gpus() > (1 - fill) * total and misses < 50:
        gpus = int(sizes[int(rng.integers(len(sizes)))])
        p = find_placement(snap, _gang_request(gpus), explain=False)
        if not p.fits:
            misses += 1
            continue
        per = p.podsets[0]
        held = [(n, k * (gpus // sum(per.pods_per_node))) for n, k in zip(per.nodes, per.pods_per_node)]
        for n, g in held:
            snap.reserve(n, ResourceVector(gpu=g))
        gangs.append(held)
    order = rng.permutation(len(gangs))
    ended = set()
    for i in order:
        if total - snap.free_gpus() <= occupancy * total:
            break
        for n, g in gangs[int(i)]:
            snap.release(n, ResourceVector(gpu=g))
        ended.add(int(i))
    return BusyState(snap, [g for i, g in enumerate(gangs) if i not in ended])


def place_serving(snapshot: Any, policy: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(prefill nodes, decode nodes) the policy gives the serving Workload, or None (it waits)."""
    from topology import GraphLink, PlacementRequest, PodSetRequest, ResourceVector, find_placement

    def podsets(**kw: Any) -> tuple[Any, Any]:
        return (PodSetRequest("prefill", 1, ResourceVector(gpu=PREFILL), **kw),
                PodSetRequest("decode", DECODE_PODS, ResourceVector(gpu=DECODE_GPUS), **kw))

    if policy == "atoll-graph":
        p = find_placement(snapshot, PlacementRequest(podsets(preferred_level=CLIQUE, max_span_level=SU),
                                                      (GraphLink("prefill", "decode", min_bandwidth_gbps=400),)), explain=False)
    elif policy == "level-only":
        p = find_placement(snapshot, PlacementRequest(podsets(required_level=CLIQUE, group="serving")), explain=False)
        if not p.fits:
            p = find_placement(snapshot, PlacementRequest(podsets(preferred_level=CLIQUE, max_span_level=SU)), explain=False)
    elif policy == "kueue-bestfit":
        return _kueue_bestfit(snapshot)
    elif policy == "count-only":
        p = find_placement(snapshot, PlacementRequest(podsets(unconstrained=True)), explain=False)
    else:
        raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
    if not p.fits:
        return None
    return p.podset("prefill").nodes, p.podset("decode").nodes


def _kueue_bestfit(snapshot: Any) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Both PodSets placed by Kueue's TAS model, each preferred at the NVLink level, in order:
    Kueue's leaves over the snapshot's nodes (one leaf per node), their free capacity the
    snapshot's, decode placed after prefill's pods are taken from it (as Kueue assumes a
    Workload's earlier PodSets)."""
    from topology import kueue_leaves_from_snapshot, kueue_place

    leaves = kueue_leaves_from_snapshot(snapshot, snapshot.level_labels)
    placed: list[tuple[str, ...]] = []
    for pods, gpus in ((1, PREFILL), (DECODE_PODS, DECODE_GPUS)):
        per_pod = {"gpu": gpus}
        result = kueue_place(leaves, pods, per_pod, mode="preferred", level=CLIQUE, topology_name=snapshot.flavor)
        if not result.fits:
            return None
        leaves.add_placement(result, per_pod)
        placed.append(tuple(sorted(str(snapshot.node_names[int(i)]) for i in result.leaf_indices)))
    return placed[0], placed[1]


def azure_trace() -> Path:
    """The Azure LLM inference trace (Azure/AzurePublicDataset, CC BY 4.0): ``$ATOLL_TRACES_DIR``,
    else ``../shared/traces`` beside the repository. It is not shipped in the package."""
    env = os.environ.get("ATOLL_TRACES_DIR")
    here = Path(env).expanduser() if env else _beside_checkout()
    if here is None:  # an installed package has no folder beside it worth guessing
        raise FileNotFoundError(f"{AZURE_FILE} not found: set ATOLL_TRACES_DIR to the folder holding the Azure LLM "
                                "inference trace 2023 (Azure/AzurePublicDataset)")
    path = here / AZURE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{AZURE_FILE} not found in {here}: put the Azure LLM inference trace 2023 "
                                "(Azure/AzurePublicDataset) there, or set ATOLL_TRACES_DIR to its folder")
    return path


def _beside_checkout(module: Path | None = None) -> Path | None:
    """``../shared/traces`` beside a source checkout (the folder holding ``pyproject.toml``), or
    None when Atoll runs from an installed package, whose parent is site-packages."""
    root = (module or Path(__file__)).resolve().parents[2]
    return root.parent / "shared" / "traces" if (root / "pyproject.toml").is_file() else None


def serving_table(occupancies: Sequence[float], seeds: Sequence[int]) -> dict[str, Any]:
    from admission.cli._bench_quality import traces_dir
    from admission.simulator import LLAMA3_70B_FP16, read_azure_llm, serve_on

    requests = read_azure_llm(azure_trace(), AZURE_REQUESTS)
    sizes = _itp_sizes(traces_dir() / ITP_FILE)
    rows = []
    budget = 0.0
    for occ in occupancies:
        per: dict[str, dict[str, Any]] = {p: {"ttft": {}, "kv": {}, "levels": [], "waits": 0} for p in POLICIES}
        for seed in seeds:
            state = busy_gb200(occ, seed, sizes)
            for policy in POLICIES:
                got = place_serving(state.snapshot, policy)
                if got is None:
                    per[policy]["waits"] += 1
                    continue
                result = serve_on(state.snapshot, got[0], got[1], requests, prefill_gpus=PREFILL, decode_gpus=DECODE_PODS * DECODE_GPUS)
                assert result.edge is not None
                per[policy]["ttft"][seed] = result.ttft_s
                per[policy]["kv"][seed] = result.kv_s
                per[policy]["levels"].append(f"{result.edge.level.rsplit('/', 1)[-1]}@{result.edge.achieved_gbps:.0f}GB/s")
                budget = result.kv_budget_s
        common = [s for s in seeds if all(s in per[p]["ttft"] for p in POLICIES)]
        row: dict[str, Any] = {"occupancy": occ, "seeds": len(seeds), "common_seeds": len(common), "kv_budget_ms": round(budget * 1e3, 2),
                               "policies": {}}
        for policy in POLICIES:
            d = per[policy]
            ttft = np.concatenate([d["ttft"][s] for s in common]) if common else np.zeros(0)
            kv = np.concatenate([d["kv"][s] for s in common]) if common else np.zeros(0)
            row["policies"][policy] = {
                "placed": len(d["ttft"]), "waits": d["waits"], "edges": sorted(set(d["levels"])),
                "ttft_p50_ms": round(float(np.percentile(ttft, 50)) * 1e3, 2) if ttft.size else None,
                "ttft_p99_ms": round(float(np.percentile(ttft, 99)) * 1e3, 2) if ttft.size else None,
                "kv_p99_ms": round(float(np.percentile(kv, 99)) * 1e3, 3) if kv.size else None,
                "kv_over_budget": round(float((kv > budget).mean()), 4) if kv.size else None,
            }
        rows.append(row)
    return {"requests": int(requests.prompt.size), "trace": AZURE_FILE, "model": LLAMA3_70B_FP16.name,
            "kv_bytes_per_token": LLAMA3_70B_FP16.kv_bytes_per_token, "rows": rows}


MIXED_OCCUPANCY = 0.6
MIXED_REPLICAS = 16
MIXED_GANGS = 300


def _spread_replicas(snapshot: Any, how: str) -> int:
    """``MIXED_REPLICAS`` inference replicas of 8 GPUs (4 pods × 2), at most one per NVLink rack;
    how many were placed. ``atoll``: each decided as Atoll decides a spread-group replica (the
    racks holding one left out; best fit with empty racks protected: partly used racks first).
    ``emptiest``: each in the emptiest rack that holds no replica yet (a spread that ignores fill)."""
    from topology import PlacementRequest, PodSetRequest, ResourceVector, find_placement

    clique = snapshot.level_index(CLIQUE)
    racks = range(snapshot.num_domains(clique))
    holding: set[int] = set()
    request = PlacementRequest((PodSetRequest("replica", 4, ResourceVector(gpu=2), required_level=CLIQUE),), protect_empty_domains=True)
    for _ in range(MIXED_REPLICAS):
        if how == "emptiest":
            free = {d: int(snapshot.free[slice(*snapshot.domain_range(clique, d)), 0].sum()) for d in racks if d not in holding}
            if not free:
                break
            keep = max(free, key=lambda d: (free[d], -d))
            out = [d for d in racks if d != keep]
        else:
            out = sorted(holding)
        work = snapshot.fork()
        for d in out:
            for i in range(*snapshot.domain_range(clique, d)):
                if work.eligible[i]:
                    work.exclude(i)
        p = find_placement(work, request, explain=False)
        if not p.fits:
            break
        ps = p.podsets[0]
        for n, k in zip(ps.nodes, ps.pods_per_node):
            snapshot.reserve(n, ResourceVector(gpu=2 * k))
        holding.add(snapshot.domain_of(clique, snapshot.node_index[ps.nodes[0]]))
    return len(holding)


def mixed_pool_table(seeds: Sequence[int]) -> dict[str, Any]:
    """The one-island share of training gangs that arrive after inference joined the pool: none,
    Atoll's spread (partly used racks first) and a spread into the emptiest racks."""
    from admission.cli._bench_quality import traces_dir
    from topology import ResourceVector, find_placement

    sizes = _itp_sizes(traces_dir() / ITP_FILE)
    gangs = [g for g in sizes if g >= 8]
    out: dict[str, Any] = {"occupancy": MIXED_OCCUPANCY, "replicas": MIXED_REPLICAS, "gangs": MIXED_GANGS, "rows": {}}
    for how in ("no inference", "atoll", "emptiest"):
        one = placed = replicas = empty = 0
        for seed in seeds:
            snap = busy_gb200(MIXED_OCCUPANCY, seed, sizes).snapshot
            if how != "no inference":
                replicas += _spread_replicas(snap, how)
            clique = snap.level_index(CLIQUE)
            empty += sum(1 for d in range(snap.num_domains(clique))
                         if (snap.free[slice(*snap.domain_range(clique, d)), 0] == snap.alloc[slice(*snap.domain_range(clique, d)), 0]).all())
            rng = np.random.default_rng(1000 + seed)
            for _ in range(MIXED_GANGS):
                gpus = int(gangs[int(rng.integers(len(gangs)))])
                p = find_placement(snap, _gang_request(gpus), explain=False)
                if not p.fits:
                    continue
                ps = p.podsets[0]
                placed += 1
                one += ps.islands == 1
                for n, k in zip(ps.nodes, ps.pods_per_node):
                    snap.reserve(n, ResourceVector(gpu=k * (gpus // ps.pods)))
        out["rows"][how] = {"replicas": replicas, "empty_racks": round(empty / len(seeds), 1), "placed": placed, "one_island": one,
                            "one_island_share": round(one / placed, 4) if placed else None}
    return out


def _itp_sizes(path: Any) -> list[int]:
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        return [int(r["num_gpu"]) for r in csv.DictReader(fh)]


def _misses(table: dict[str, Any]) -> list[str]:
    out = []
    for row in table["rows"]:
        ours = row["policies"]["atoll-graph"]["ttft_p99_ms"]
        for other in POLICIES[1:]:
            theirs = row["policies"][other]["ttft_p99_ms"]
            if ours is not None and theirs is not None and ours > theirs:
                out.append(f"occupancy {row['occupancy']:g}: atoll-graph p99 TTFT {ours} ms > {other} {theirs} ms")
    return out


def _print_table(table: dict[str, Any]) -> None:
    print(f"serving: {table['model']} ({table['kv_bytes_per_token'] / 1024:g} KiB KV per token), {table['requests']:,} requests of "
          f"{table['trace']}; prefill {PREFILL} GPUs, decode {DECODE_PODS}×{DECODE_GPUS} GPUs on a busy GB200 NVL72 with training")
    print(f"{'occupancy':>9}  {'policy':<13}  {'placed':>6}  {'waits':>5}  {'p50 TTFT ms':>11}  {'p99 TTFT ms':>11}  {'p99 KV ms':>9}  "
          f"{'KV>budget':>9}  edges")
    for row in table["rows"]:
        for policy, d in row["policies"].items():
            def num(v: Any, spec: str) -> str:
                return "-" if v is None else format(v, spec)
            print(f"{row['occupancy']:>9.2f}  {policy:<13}  {d['placed']:>6}  {d['waits']:>5}  {num(d['ttft_p50_ms'], '.2f'):>11}  "
                  f"{num(d['ttft_p99_ms'], '.2f'):>11}  {num(d['kv_p99_ms'], '.3f'):>9}  "
                  f"{num(None if d['kv_over_budget'] is None else 100 * d['kv_over_budget'], '.1f') + '%':>9}  {', '.join(d['edges'])}")
        print(f"{'':>9}  (TTFT and KV over the {row['common_seeds']} of {row['seeds']} seeds every policy placed; "
              f"KV budget one decode step = {row['kv_budget_ms']} ms)")


def _print_mixed(table: dict[str, Any], seeds: int) -> None:
    print(f"mixed pool: training at {table['occupancy']:g} of the GPUs, then {table['replicas']} inference replicas (8 GPUs, at most one "
          f"per rack), then {table['gangs']} training gangs of 8+ GPUs from the ITP trace; {counted(seeds, 'seed')}")
    print(f"{'inference':<13}  {'replicas':>8}  {'empty racks':>11}  {'gangs placed':>12}  {'one-island share':>16}")
    for how, r in table["rows"].items():
        share = "-" if r["one_island_share"] is None else f"{100 * r['one_island_share']:.1f}%"
        print(f"{how:<13}  {r['replicas']:>8}  {r['empty_racks']:>11}  {r['placed']:>12}  {share:>16}")


def main(argv: Sequence[str]) -> int:
    p = Parser(prog="atoll bench serving", description="a serving graph's placement replayed on the Azure LLM inference trace")
    p.add_argument("--occupancies", default=OCCUPANCIES, help=f"GPU occupancy by training, comma-separated (default {OCCUPANCIES})")
    p.add_argument("--seeds", type=int, default=5, help="busy states per occupancy (default 5)")
    p.add_argument("--skip-mixed", action="store_true", help="leave out the mixed-pool table (training gangs beside inference)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    try:
        occupancies = [float(x) for x in args.occupancies.split(",")]
    except ValueError:
        print(f"atoll bench serving: --occupancies: comma-separated shares from 0 to 0.97, got {args.occupancies!r}", file=sys.stderr)
        return 2
    if not occupancies or any(not 0.0 <= o <= FILL for o in occupancies) or args.seeds < 1:
        print(f"atoll bench serving: --occupancies: shares from 0 to {FILL}; --seeds: 1 or more", file=sys.stderr)
        return 2
    try:
        table = serving_table(occupancies, list(range(args.seeds)))
    except FileNotFoundError as exc:
        print(f"atoll bench serving: {exc}", file=sys.stderr)
        return 2
    misses = _misses(table)
    table["pass"] = not misses
    if not args.skip_mixed:
        table["mixed_pool"] = mixed_pool_table(list(range(args.seeds)))
    if args.format == "json":
        print(json.dumps(table, indent=2))
    else:
        _print_table(table)
        if "mixed_pool" in table:
            _print_mixed(table["mixed_pool"], args.seeds)
        print(("PASS" if not misses else "FAIL") + " serving: atoll-graph's p99 TTFT at or below every other policy's in every row"
              + ("" if not misses else ": " + "; ".join(misses)))
    return 0 if not misses else 1

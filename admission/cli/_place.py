"""``atoll place``: what-if placement of one Workload, Job or JobSet on a cluster model."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from admission.cli._bundled import resolve_cluster, resolve_profiles
from admission.controller._workloads import WorkloadError, load_workload_file
from policies import Decision, ProfileLevelError, ProfilesError, WaitState, decide, load_profiles_file
from topology import ClusterModelError, ResourceVector, Snapshot, load_cluster_model

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="atoll place", description="Where would this workload go? (no cluster needed)")
    p.add_argument("--cluster", default=None, help="cluster model file or bundled name (default gb200-nvl72-superpod)")
    p.add_argument("--workload", required=True, help="a Kueue Workload, Job or JobSet manifest (YAML)")
    p.add_argument("--profile", default=None, help="profile name (default: annotation, queue, then defaultProfile)")
    p.add_argument("--profiles", default=None, help="profiles document (default config/profiles.yaml)")
    p.add_argument("--flavor", default=None, help="flavor of the cluster model (default: the first)")
    p.add_argument("--waited", type=float, default=0.0, help="seconds the workload has already waited (elastic relaxation)")
    p.add_argument("--occupancy", type=float, default=0.0, help="fill nodes at random to this share of GPUs first (what-if)")
    p.add_argument("--seed", type=int, default=0, help="seed for --occupancy")
    p.add_argument("--format", choices=("table", "json"), default="table")
    return p


def _occupy(snapshot: Snapshot, share: float, seed: int) -> None:
    if share <= 0:
        return
    rng = np.random.default_rng(seed)
    for i in range(snapshot.num_nodes):
        gpus = int(snapshot.alloc[i, 0])
        used = int(rng.binomial(gpus, min(share, 1.0)))
        if used:
            snapshot.reserve(i, ResourceVector(gpu=used, pods=1))


def _as_json(decision: Decision, workload: str, flavor: str) -> dict[str, Any]:
    out: dict[str, Any] = {"workload": workload, "flavor": flavor, "profile": decision.profile,
                           "outcome": decision.outcome, "message": decision.message, "relaxed": decision.relaxed}
    if decision.outcome == "wait":
        out["retry_after_seconds"] = decision.retry_after_seconds
    placement = decision.placement
    if placement is not None and placement.fits:
        out["podsets"] = [
            {"name": ps.name, "domain_level": ps.domain_level, "domain_path": list(ps.domain_path), "islands": ps.islands,
             "island_level": ps.island_level, "min_perf": ps.min_perf, "bottleneck_gbps": ps.bottleneck_gbps,
             "nodes": dict(zip(ps.nodes, ps.pods_per_node))}
            for ps in placement.podsets
        ]
    if placement is not None:
        out["why_not"] = [{"podset": v.podset, "level": v.level, "path": list(v.path), "capacity_pods": v.capacity_pods,
                           "need_pods": v.need_pods, "reason": v.reason} for v in placement.why_not]
    return out


def _print_table(data: dict[str, Any]) -> None:
    print(f"workload  {data['workload']}  (flavor {data['flavor']}, profile {data['profile']})")
    print(f"decision  {data['outcome'].upper()}: {data['message']}")
    for ps in data.get("podsets", []):
        nodes = ps["nodes"]
        shown = ", ".join(f"{n}×{c}" for n, c in list(nodes.items())[:8]) + (f", … ({len(nodes)} nodes)" if len(nodes) > 8 else "")
        print(f"  podset {ps['name']}: {ps['domain_level']} = {'/'.join(ps['domain_path']) or '(whole flavor)'}; "
              f"{ps['islands']} {ps['island_level']} domain(s); min perf {ps['min_perf']:.2f}; link {ps['bottleneck_gbps']:g} GB/s")
        print(f"    nodes: {shown}")
    if data.get("why_not"):
        print("  other domains:")
        for v in data["why_not"]:
            print(f"    {v['podset']}: {'/'.join(v['path'])}: {v['reason']}")


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    try:
        model = load_cluster_model(resolve_cluster(args.cluster))
        flavor = model.flavor(args.flavor)
        doc = load_profiles_file(resolve_profiles(args.profiles))
        view = load_workload_file(args.workload, gpu_resource=flavor.gpu_resource)
        profile_name, profile = doc.profile_for(annotation=args.profile or view.profile, local_queue=view.local_queue, cluster_queue=None)
        wclass = None
        if view.workload_class:
            if view.workload_class not in doc.classes:
                raise WorkloadError(f"{args.workload}: annotation atoll.dev/class: {view.workload_class!r} is not a class (have {sorted(doc.classes)})")
            wclass = doc.classes[view.workload_class]
    except (ClusterModelError, ProfilesError, WorkloadError, KeyError) as exc:
        print(f"atoll place: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    if not view.podsets:
        data = {"workload": view.key, "flavor": flavor.name, "profile": profile_name, "outcome": "admit",
                "message": f"every PodSet has count 0 ({', '.join(view.empty_podsets)}); nothing to place", "relaxed": False}
        _emit(data, args.format)
        return 0
    snapshot = Snapshot(flavor.name, flavor.level_specs(), flavor.build_nodes(), node_level=flavor.node_level())
    _occupy(snapshot, args.occupancy, args.seed)
    now = 1_000_000.0
    wait = WaitState(first_waited_at=now - args.waited if args.waited > 0 else None)
    names = {p.name for p in view.podsets}
    links = [lk for lk in view.links if lk.a in names and lk.b in names]  # a count-0 PodSet has no place to be near
    try:
        # Each PodSet's nodeSelector and required node affinity travel inside view.podsets: the
        # finder restricts that PodSet's candidates exactly as it does for the controller.
        decision = decide(snapshot, view.podsets, profile_name=profile_name, profile=profile, now=now, wait=wait,
                          workload_class=wclass, links=links)
    except ProfileLevelError as exc:
        print(f"atoll place: {exc}", file=sys.stderr)
        return 2
    _emit(_as_json(decision, view.key, flavor.name), args.format)
    return 0


def _emit(data: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(data, indent=2))
    else:
        _print_table(data)

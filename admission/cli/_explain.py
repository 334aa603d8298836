"""``atoll explain NS/NAME``: why a Workload waits, or where it was placed and why, from the live cluster.

It lists the cluster once (read-only: nothing is written), rebuilds the ledger exactly as the
controller would, and evaluates the Workload against the current state.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import IO, Any

from admission.cli._args import Parser
from admission.cli._run import configure_logging, default_namespace

__all__ = ["main", "render"]


def render(report: dict[str, Any]) -> str:
    """A human reading of ``Controller.explain``."""
    lines = [f"Workload {report['workload']}  (ClusterQueue {report.get('cluster_queue') or '-'}, "
             f"quota {'reserved' if report.get('quota_reserved') else 'not reserved'})"]
    check = report.get("check")
    if check:
        lines.append(f"Check {check['name']}: {check['state']}"
                     + (f", requeue after {check['requeueAfterSeconds']}s" if check.get("requeueAfterSeconds") else ""))
        lines.append(f"  {check.get('message') or ''}")
    else:
        lines.append("No Atoll check entry on this Workload (its ClusterQueue does not use Atoll's AdmissionCheck, or quota is not reserved).")
    wait = report.get("wait_state") or {}
    if wait.get("attempts"):
        lines.append(f"Waited {wait['attempts']} time(s) since {wait.get('first_waited_at')}")
    for p in report.get("placement") or []:
        nodes = ", ".join(f"{n}×{k}" for n, k in p["planned_nodes"].items())
        sel = ", ".join(f"{k}={v}" for k, v in p["node_selector"].items()) or "(none)"
        lines.append(f"PodSet {p['podset']}: decision {p.get('decision_id')}, nodeSelector {sel}")
        lines.append(f"  planned: {nodes}")
    for f in report.get("flavors") or []:
        if "problem" in f:
            lines.append(f"Flavor {f['flavor']}: {f['problem']}")
            continue
        lines.append(f"Flavor {f['flavor']} (Topology {f['topology']}: {' > '.join(f['levels'])}): {f['healthy_nodes']}/{f['nodes']} nodes "
                     f"healthy, {f['free_gpus']}/{f['total_gpus']} GPUs free after {f['reserved_gpus']} reserved by "
                     f"{f['reservations']} admitted placement(s)")
        for reason, nodes in f["excluded"].items():
            shown = ", ".join(nodes[:8]) + (f" (+{len(nodes) - 8})" if len(nodes) > 8 else "")
            lines.append(f"  left out: {reason}: {shown}")
    now = report.get("now") or {}
    lines.append(f"Decision now: {now.get('outcome')}" + (f" (profile {now['profile']})" if now.get("profile") else ""))
    lines.append(f"  {now.get('message', '')}")
    for w in now.get("why_not") or []:
        lines.append(f"  not {'/'.join(w['domain_path'])} ({w['level']}): {w['reason']}")
    return "\n".join(lines)


def main(argv: Sequence[str], *, stdout: IO[str] | None = None, api_client: Any = None) -> int:
    p = Parser(prog="atoll explain", description="Why a Workload waits, or why it was placed where it was.")
    p.add_argument("workload", help="NAMESPACE/NAME")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None, help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument("--namespace", default=default_namespace(os.environ), help="namespace of the profiles ConfigMap (default: $ATOLL_NAMESPACE, else atoll-system)")
    p.add_argument("--configmap", default="atoll-policies")
    p.add_argument("--admission-check", default="atoll-topology", help="'*' for every Atoll check")
    p.add_argument("--gpu-resource", default="nvidia.com/gpu")
    p.add_argument("--format", choices=("text", "json"), default="text")
    args = p.parse_args(list(argv))
    out = stdout or sys.stdout
    if "/" not in args.workload:
        print(f"atoll explain: {args.workload!r}: expected NAMESPACE/NAME", file=sys.stderr)
        return 2

    from admission.controller import ConfigSettings, Controller, KueueSettings, Recorder, Settings
    from admission.kube import KubePort, api_client_from_kubeconfig
    from admission.kube.errors import ApiError

    configure_logging("warning")
    settings = Settings(kueue=KueueSettings(admission_check=None if args.admission_check in ("*", "") else args.admission_check,
                                            gpu_resource=args.gpu_resource),
                        config=ConfigSettings(namespace=args.namespace, configmap=args.configmap))
    try:
        api = api_client or api_client_from_kubeconfig(args.kubeconfig)
    except Exception as exc:  # noqa: BLE001 - any config failure ends here with its message
        print(f"atoll explain: cannot load cluster credentials: {exc}", file=sys.stderr)
        return 2
    controller = Controller(KubePort(api, settings.api), settings=settings, read_only=True, recorder=Recorder(sys.stderr))
    try:
        controller.sync()
        report = controller.explain(args.workload)
    except KeyError as exc:
        print(f"atoll explain: {exc.args[0]}", file=sys.stderr)
        return 1
    except ApiError as exc:
        print(f"atoll explain: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        json.dump(report, out, indent=2, default=str)
        out.write("\n")
    else:
        out.write(render(report) + "\n")
    return 0

"""``atoll queue``: the Workloads waiting on Atoll's check, and why, from the live cluster.

It lists the cluster once (read-only: nothing is written), rebuilds the ledger as the controller
would, and asks each waiting Workload's decision now, as ``atoll explain`` does for one.
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


def _waited(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def render(rows: Sequence[dict[str, Any]]) -> str:
    """A table: one line per Workload, then its reason in plain words."""
    if not rows:
        return "No Workload waits on Atoll's check."
    head = f"{'WORKLOAD':<40} {'GPUS':>5} {'PROFILE':<12} {'WAITED':>7} {'STATE':<8} {'REASON':<14} {'HELD':<20} START"
    lines = [head]
    for r in rows:
        held = r.get("held") or {}
        lines.append(f"{r['workload']:<40} {r['gpus']:>5} {r.get('profile') or '-':<12} {_waited(r['waited_seconds']):>7} "
                     f"{r.get('state') or '-':<8} {r['reason'] or '-':<14} {held.get('domain') or '-':<20} {r.get('expected_start') or '-'}")
        for words in r.get("words") or []:
            lines.append(f"    {words}")
    return "\n".join(lines)


def main(argv: Sequence[str], *, stdout: IO[str] | None = None, api_client: Any = None) -> int:
    p = Parser(prog="atoll queue", description="The Workloads waiting on Atoll's check, and why, per domain in plain words.")
    p.add_argument("--flavor", default=None, help="only Workloads assigned this ResourceFlavor")
    p.add_argument("--queue", default=None, help="only Workloads of this LocalQueue (NAME or NAMESPACE/NAME) or ClusterQueue")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None, help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument("--namespace", default=default_namespace(os.environ), help="namespace of the profiles ConfigMap (default: $ATOLL_NAMESPACE, else atoll-system)")
    p.add_argument("--configmap", default="atoll-policies")
    p.add_argument("--admission-check", default="atoll-topology", help="'*' for every Atoll check")
    p.add_argument("--gpu-resource", default="nvidia.com/gpu")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    out = stdout or sys.stdout

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
        print(f"atoll queue: cannot load cluster credentials: {exc}", file=sys.stderr)
        return 2
    controller = Controller(KubePort(api, settings.api), settings=settings, read_only=True, recorder=Recorder(sys.stderr))
    try:
        controller.sync()
        rows = controller.waiting_line(flavor=args.flavor, queue=args.queue)
    except ApiError as exc:
        print(f"atoll queue: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        json.dump(rows, out, indent=2, default=str)
        out.write("\n")
    else:
        out.write(render(rows) + "\n")
    return 0

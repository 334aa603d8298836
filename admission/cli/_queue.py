"""``atoll queue``: the Workloads waiting on Atoll's check, and why, from the live cluster.

It lists the cluster once (read-only: nothing is written), rebuilds the ledger as the controller
would, and asks each waiting Workload's decision now, as ``atoll explain`` does for one.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import IO, Any

from admission.cli._args import Parser
from admission.cli._reader import add_cluster_args, read_only_controller

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
    add_cluster_args(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    out = stdout or sys.stdout

    from admission.kube.errors import ApiError

    controller = read_only_controller(args, "atoll queue", api_client)
    if controller is None:
        return 2
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

"""``atoll yields``: the Workloads Atoll has deactivated to give their quota back, and ``--end`` to
reactivate them all.

A parked Workload (its profile's ``queueing.parkWaiting``, or ``--park-waiting``) may give its quota back by going inactive
(``spec.active=false`` with Atoll's ``atoll.dev/quota-yield`` annotations), and only a running
Atoll leader reactivates it. So before Atoll is uninstalled, or while it is down, an operator ends
them here (the chart's post-delete hook runs ``atoll yields --end`` unless ``parkWaiting`` is false). A Workload someone else deactivated carries no
such annotation and is never touched.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from admission.cli._args import Parser
from admission.cli._run import credentials_error
from admission.vocabulary import QUOTA_YIELD, QUOTA_YIELD_UNTIL

__all__ = ["main", "yielded"]


def yielded(items: Sequence[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """One row per Workload that carries Atoll's yield annotation, in name order."""
    rows = []
    for obj in items:
        meta = obj.get("metadata") or {}
        ann = meta.get("annotations") or {}
        if QUOTA_YIELD not in ann:
            continue
        try:
            until: float | None = float(ann.get(QUOTA_YIELD_UNTIL) or "")
        except ValueError:
            until = None
        rows.append({"workload": f"{meta.get('namespace')}/{meta.get('name')}", "waiter": ann[QUOTA_YIELD],
                     "active": (obj.get("spec") or {}).get("active", True) is not False,
                     "until_seconds": None if until is None else round(until - now, 1)})
    return sorted(rows, key=lambda r: r["workload"])


def _render(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "No Workload has given its quota back."
    lines = [f"{'WORKLOAD':<40} {'ACTIVE':<6} {'UNTIL':>8} GIVEN TO"]
    for r in rows:
        until = "-" if r["until_seconds"] is None else f"{r['until_seconds']:.0f}s"
        lines.append(f"{r['workload']:<40} {str(r['active']).lower():<6} {until:>8} {r['waiter']}")
    return "\n".join(lines)


def main(argv: Sequence[str], *, stdout: IO[str] | None = None, api_client: Any = None) -> int:
    p = Parser(prog="atoll yields", description="Workloads Atoll deactivated to give their quota back; --end reactivates them.")
    p.add_argument("--end", action="store_true", help="reactivate every one of them and remove Atoll's yield annotations")
    p.add_argument("--workload-namespace", default=None, help="only Workloads of this namespace (default: every namespace)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    out = stdout or sys.stdout

    from admission.controller import yield_patch
    from admission.kube import WORKLOADS, KubePort, api_client_from_kubeconfig, errors

    try:
        api = api_client or api_client_from_kubeconfig(args.kubeconfig)
    except Exception as exc:  # noqa: BLE001 - any config failure ends here with its message
        print(credentials_error("atoll yields", args.kubeconfig, exc), file=sys.stderr)
        return 2
    port = KubePort(api)
    try:
        items = port.list(WORKLOADS, namespace=args.workload_namespace).items
    except errors.ApiError as exc:
        print(f"atoll yields: {exc}", file=sys.stderr)
        return 1
    rows = yielded(items, time.time())
    failed = 0
    if args.end:
        by_key = {f"{(o.get('metadata') or {}).get('namespace')}/{(o.get('metadata') or {}).get('name')}": o for o in items}
        for r in rows:
            obj = by_key[r["workload"]]
            meta = obj.get("metadata") or {}
            try:
                port.patch(WORKLOADS, str(meta.get("name")), yield_patch(obj, None), namespace=meta.get("namespace"))
                r["active"], r["ended"] = True, True
            except errors.NotFound:
                r["ended"] = True  # gone meanwhile: nothing left to end
            except errors.ApiError as exc:  # a 409 too: it changed since the list; run the command again
                r["ended"], failed = False, failed + 1
                print(f"atoll yields: {r['workload']}: not reactivated: {exc}; run `atoll yields --end` again", file=sys.stderr)
    if args.format == "json":
        json.dump(rows, out, indent=2)
        out.write("\n")
    else:
        out.write(_render(rows) + "\n")
        if args.end:
            out.write(f"reactivated {sum(1 for r in rows if r.get('ended'))} of {len(rows)}\n")
    return 1 if failed else 0

"""``atoll explain NS/NAME``: why a Workload waits, or where it was placed and why, from the live cluster.

It lists the cluster once (read-only: nothing is written), rebuilds the ledger exactly as the
controller would, and evaluates the Workload against the current state. Two answers, kept apart:
the reason recorded at decision time (its decision record with ``--records``, else the check entry
the decision wrote on the Workload), then what Atoll would decide now, which today's state may
change (an admitted Workload's own placement may no longer fit beside what came since). The first
carries the controller's own numbers (a span's price is in the recorded message, and as data in the
record's ``wait_or_span``, printed as a ``weighed on`` line); the second
prices a span with the span-cost flags, or the same ``ATOLL_*`` variables, that ``atoll run`` takes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from admission.cli._args import Parser
from admission.cli._reader import add_cluster_args, read_only_controller

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
    lines.extend(_recorded(report.get("recorded")))
    lines.append("-- What Atoll would decide now, on today's cluster (not the decision it made then) --")
    now = report.get("now") or {}
    lines.append(f"Decision now: {now.get('outcome')}" + (f" (profile {now['profile']})" if now.get("profile") else ""))
    lines.append(f"  {now.get('message', '')}")
    if now.get("span_cost"):
        c = now["span_cost"]
        lines.append(f"  a span priced now with link model {c['link_model']}, comm fraction {c['comm_fraction']:g}, overlap {c['overlap']:g} "
                     "(--link-model/--cost-comm-fraction/--cost-overlap or ATOLL_*, as given to atoll run)")
    lines.extend(weighing_lines(now.get("wait_or_span")))
    for e in now.get("links") or []:
        lines.append(f"  edge {e['from']}->{e['to']}: {e['bandwidth_gbps']:g} GB/s per GPU, {e['latency_us']:g} µs, "
                     f"across {e['bottleneck_level']} (asked {e['asked']})")
    for w in now.get("why_not") or []:
        lines.append(f"  not {'/'.join(w['domain_path'])} ({w['level']}): {w['reason']}")
    return "\n".join(lines)


def _recorded(rec: dict[str, Any] | None) -> list[str]:
    """The reason recorded at decision time: from a decision record when one was found, else from
    the check entry the decision wrote on the Workload."""
    if not rec:
        return ["-- At decision time: nothing recorded (no Atoll check entry, no record given with --records) --"]
    what = rec.get("outcome") or rec.get("state")
    head = f"-- At decision time (from {rec['source']}): {what}"
    head += f", decision {rec['decision_id']}" if rec.get("decision_id") else ""
    head += f", {rec['time']}" if rec.get("time") else ""
    lines = [head + " --", f"  {rec.get('message') or ''}"]
    if rec.get("waited_seconds"):
        lines.append(f"  waited {float(rec['waited_seconds']):.0f}s by then" + (f" (reason: {rec['reason']})" if rec.get("reason") else ""))
    lines.extend(weighing_lines(rec.get("wait_or_span")))
    for w in rec.get("why_not") or []:
        held = [h.get("workload") for h in ((w.get("ledger") or {}).get("workloads") or [])]
        lines.append(f"  not {'/'.join(w.get('domain_path') or [])} ({w.get('level')}): {w.get('reason')}"
                     + (f"; held by {', '.join(map(str, held))}" if held else ""))
    return lines


def weighing_lines(entries: Sequence[dict[str, Any]] | None) -> list[str]:
    """One line per weighing of a record's (or a decision's) ``wait_or_span``, read from its fields."""
    out = []
    for w in entries or []:
        other = "slower GPUs" if w.get("kind") == "floor" else "span"
        wait = _seconds(w.get("expected_wait_seconds"))
        if wait != "unknown":
            wait += f" ± {_seconds(w.get('wait_error_seconds'))}"
            wait += f" for {w['domain']}" if w.get("domain") else ""
            wait += f" after {w['queued_ahead']} queued ahead" if w.get("queued_ahead") is not None else ""
            wait += f" (from {w['wait_basis']})" if w.get("wait_basis") else ""
        slowdown = w.get("span_slowdown")
        price = "unpriced" if slowdown is None else f"slowdown {float(slowdown):.3f}×"
        if slowdown is not None and w.get("span_cost_seconds") is not None:
            price += f" = +{_seconds(w['span_cost_seconds'])} on {_seconds(w.get('expected_runtime_seconds'))}"
            price += f" ({w['runtime_basis']})" if w.get("runtime_basis") else ""
        chose = w.get("chose") or ("perfFloorHoldSeconds decides" if other != "span" else "relaxAfterSeconds decides")
        out.append(f"  weighed on {w.get('flavor')}: wait {wait}; {other} {price}; chose {chose}")
    return out


def _seconds(value: Any) -> str:
    return "unknown" if value is None else f"{float(value):.0f}s"


def recorded_from(records_file: str, workload: str, decision_id: str | None) -> dict[str, Any] | None:
    """The record of the Workload's decision in ``records_file``: the one with ``decision_id``
    when given and present, else its latest; None when the file holds none of it."""
    from admission.cli._audit import read_records

    where: list[int] = []
    with open(records_file, encoding="utf-8") as fh:
        found = list(read_records(fh, None, where))
    ns, name = workload.split("/", 1)
    mine = [(r, line) for r, line in zip(found, where) if r.get("namespace") == ns and r.get("workload") == name]
    if not mine:
        return None
    exact = [m for m in mine if decision_id and m[0].get("decision_id") == decision_id]
    rec, line = exact[-1] if exact else max(mine, key=lambda m: (str(m[0].get("time")), m[1]))
    return {**rec, "source": f"the decision record on line {line} of {records_file}"}


def main(argv: Sequence[str], *, stdout: IO[str] | None = None, api_client: Any = None) -> int:
    p = Parser(prog="atoll explain", description="Why a Workload waits, or why it was placed where it was.")
    p.add_argument("workload", metavar="NAMESPACE/NAME", help="the Workload to explain")
    add_cluster_args(p)
    p.add_argument("--records", metavar="FILE", help="decision records (atoll run's log): show the reason recorded at decision time from "
                                                    "the Workload's record, with the holders of the domains it lost")
    p.add_argument("--format", choices=("text", "json"), default="text")
    args = p.parse_args(list(argv))
    out = stdout or sys.stdout
    if "/" not in args.workload:
        print(f"atoll explain: {args.workload!r}: expected NAMESPACE/NAME", file=sys.stderr)
        return 2
    from admission.cli._bundled import unreadable

    problem = unreadable("--records", Path(args.records) if args.records else None)  # before connecting: the input's own error first
    if problem:
        print(f"atoll explain: {problem}", file=sys.stderr)
        return 2

    from admission.kube.errors import ApiError

    controller = read_only_controller(args, "atoll explain", api_client)
    if controller is None:
        return 2
    try:
        controller.sync()
        report = controller.explain(args.workload)
    except KeyError as exc:
        print(f"atoll explain: {exc.args[0]}", file=sys.stderr)
        return 1
    except ApiError as exc:
        print(f"atoll explain: {exc}", file=sys.stderr)
        return 1
    if args.records:
        try:
            rec = recorded_from(args.records, args.workload, (report.get("recorded") or {}).get("decision_id"))
        except OSError as exc:
            print(f"atoll explain: --records {args.records}: cannot read: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if rec is None:
            print(f"atoll explain: --records {args.records}: no decision record of {args.workload}; showing its check entry",
                  file=sys.stderr)
        else:
            report["recorded"] = rec
    if args.format == "json":
        json.dump(report, out, indent=2, default=str)
        out.write("\n")
    else:
        out.write(render(report) + "\n")
    return 0

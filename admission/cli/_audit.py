"""``atoll audit``: query decision records (the JSON lines ``atoll run`` writes to stdout).

Lines that are not decision records (other logs, blank lines, text) are skipped, so the
controller's whole output, or ``kubectl logs`` of it, can be fed in as is.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

from admission.cli._args import Parser
from admission.controller import DECISION_EVENT

__all__ = ["filter_records", "main", "parse_since", "read_records"]

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """Epoch seconds from ``30m``/``2h``/``7d`` (ago) or an ISO 8601 time (UTC when no offset)."""
    m = _RELATIVE.match(text.strip())
    if m:
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since: {text!r} is neither a duration (30m, 2h, 7d) nor an ISO 8601 time (2026-05-01T12:00:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.timestamp()


def _epoch(record: dict[str, Any]) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(record.get("time", "")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def read_records(lines: Iterable[str], tally: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """The decision records among ``lines``; ``tally`` (when given) becomes ``[lines read, lines
    that held no record]``."""
    count = tally if tally is not None else [0, 0]
    count[:] = [0, 0]
    for line in lines:
        count[0] += 1
        line = line.strip()
        obj: Any = None
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                pass
        if isinstance(obj, dict) and obj.get("event") == DECISION_EVENT:
            yield obj
        else:
            count[1] += 1


def filter_records(records: Iterable[dict[str, Any]], *, workload: str | None = None, queue: str | None = None,
                   outcome: str | None = None, since: float | None = None) -> list[dict[str, Any]]:
    out = []
    for r in records:
        if workload and f"{r.get('namespace')}/{r.get('workload')}" != workload:
            continue
        if queue:
            local = str(r.get("local_queue", ""))
            if queue not in (local, local.split("/", 1)[-1], r.get("cluster_queue")):
                continue
        if outcome and r.get("outcome") != outcome:
            continue
        if since is not None:
            when = _epoch(r)
            if when is None or when < since:
                continue
        out.append(r)
    return out


def _placement(r: dict[str, Any]) -> str:
    parts = []
    for p in r.get("placement") or []:
        where = "/".join(p.get("domain_path") or []) or "(whole flavor)"
        parts.append(f"{p.get('podset')}→{where} ({len(p.get('nodes') or {})} nodes)")
    return ", ".join(parts) or "-"


def _table(records: Sequence[dict[str, Any]], out: IO[str]) -> None:
    header = ("TIME", "OUTCOME", "WORKLOAD", "QUEUE", "FLAVOR", "PROFILE", "PLACEMENT", "MS", "MESSAGE")
    rows = [header] + [(
        str(r.get("time", "")), str(r.get("outcome", "")), f"{r.get('namespace')}/{r.get('workload')}", str(r.get("local_queue", "")),
        str(r.get("flavor", "")), str(r.get("profile", "")), _placement(r), f"{float(r.get('latency_ms') or 0):.1f}",
        _short(str(r.get("message", "")), 100)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    for row in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] + "\n")


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def main(argv: Sequence[str], *, now: float | None = None, stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    p = Parser(prog="atoll audit", description="Query Atoll's decision records (JSON lines).")
    p.add_argument("file", nargs="?", default="-", help="records file, or - for stdin (default)")
    p.add_argument("--workload", help="NAMESPACE/NAME")
    p.add_argument("--queue", help="LocalQueue (NAMESPACE/NAME or NAME) or ClusterQueue")
    p.add_argument("--outcome", choices=("admit", "wait", "reject"))
    p.add_argument("--since", help="records at or after this time: 30m, 2h, 7d, or ISO 8601")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    out = stdout or sys.stdout
    if args.workload and "/" not in args.workload:
        print(f"atoll audit: --workload {args.workload!r}: expected NAMESPACE/NAME", file=sys.stderr)
        return 2
    try:
        since = parse_since(args.since, time.time() if now is None else now) if args.since else None
    except ValueError as exc:
        print(f"atoll audit: {exc}", file=sys.stderr)
        return 2
    tally = [0, 0]
    source = "stdin" if args.file == "-" else args.file
    try:
        if args.file == "-":
            src = stdin or sys.stdin
            if src.isatty():
                print("atoll audit: waiting for decision records on stdin (pipe them in: kubectl logs deploy/atoll | atoll audit; "
                      "or name a file); Ctrl-D ends the input", file=sys.stderr)
            records = list(read_records(src, tally))
        else:
            with open(args.file, encoding="utf-8") as fh:
                records = list(read_records(fh, tally))
    except OSError as exc:
        print(f"atoll audit: {source}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        print(f"atoll audit: {source}: not text (decision records are JSON lines)", file=sys.stderr)
        return 2
    if not records:
        lines = "no lines" if tally[0] == 0 else f"none of its {tally[0]:,} line{'s' if tally[0] != 1 else ''} held one"
        print(f"atoll audit: {source}: no decision records ({lines}); records are the JSON lines with "
              f"\"event\": \"{DECISION_EVENT}\" that the leader replica of atoll run writes", file=sys.stderr)
        return 1
    if tally[1]:
        print(f"atoll audit: {tally[1]:,} of {tally[0]:,} lines held no decision record (skipped)", file=sys.stderr)
    chosen = filter_records(records, workload=args.workload, queue=args.queue, outcome=args.outcome, since=since)
    if args.format == "json":
        json.dump(chosen, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        _table(chosen, out)
    return 0

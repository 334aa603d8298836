"""``atoll audit``: query decision records (the JSON lines ``atoll run`` writes to stdout).

Lines that are not decision records (other logs, blank lines, text) are skipped and counted, so
the controller's whole output, or ``kubectl logs`` of it, can be fed in as is. Every record is
checked against the shipped schema (``decision-v1.schema.json``): one that fails is named by line
and field, left out, and makes the exit status 1. ``--timeline`` reads one Workload's decisions
as a story: in order, the time waited per reason, and the Workloads holding what it needed.
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
from admission.cli._bundled import bundled_path
from admission.controller import DECISION_EVENT, record_problems
from admission.vocabulary import DECISION_SCHEMA

__all__ = ["check_records", "filter_records", "main", "parse_since", "read_records", "timeline"]

SCHEMA_FILE = "decision-v1.schema.json"

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


def read_records(lines: Iterable[str], tally: list[int] | None = None, where: list[int] | None = None,
                 skipped: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """The decision records among ``lines``; ``tally`` (when given) becomes ``[lines read, lines
    that held no record]``, ``where`` gets each record's line number, and ``skipped`` the first
    non-blank line that held none, said as ``line N: why: its start`` (what to show a reader who
    gave the wrong file)."""
    count = tally if tally is not None else [0, 0]
    count[:] = [0, 0]
    for line in lines:
        count[0] += 1
        line = line.strip()
        obj: Any = None
        why = "not a JSON object"
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError as exc:
                why = f"not JSON ({exc})"
        if isinstance(obj, dict) and obj.get("event") == DECISION_EVENT:
            if where is not None:
                where.append(count[0])
            yield obj
            continue
        count[1] += 1
        if skipped is not None and not skipped and line:
            if isinstance(obj, dict):
                why = f"\"event\" is {obj.get('event')!r}, not {DECISION_EVENT!r}"
            skipped.append(f"line {count[0]}: {why}: {_short(line, 80)}")


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


def check_records(records: Sequence[dict[str, Any]], lines: Sequence[int], err: IO[str], *, shown: int = 5) -> list[dict[str, Any]]:
    """The records that meet the schema; the others are counted on ``err``, the first ``shown``
    with their line and the field at fault."""
    good, bad = [], 0
    for rec, line in zip(records, lines):
        problems = record_problems(rec)
        if not problems:
            good.append(rec)
            continue
        bad += 1
        if bad <= shown:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            print(f"atoll audit: line {line}: not a valid {DECISION_SCHEMA} record: {problems[0]}{more}", file=err)
    if bad:
        print(f"atoll audit: {bad:,} of {len(records):,} records do not meet {DECISION_SCHEMA} (left out; the schema is "
              f"admission/controller/{SCHEMA_FILE})", file=err)
    return good


def _seconds(text: str) -> float | None:
    return _epoch({"time": text})


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _blockers(r: dict[str, Any]) -> list[str]:
    """The Workloads holding the losing domains of one decision, the most often named first."""
    seen: dict[str, int] = {}
    for w in r.get("why_not") or []:
        for h in ((w.get("ledger") or {}).get("workloads") or []):
            seen[str(h.get("workload"))] = seen.get(str(h.get("workload")), 0) + 1
    return sorted(seen, key=lambda k: (-seen[k], k))


def timeline(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One Workload's decisions in time order, the time waited per reason (from each wait to the
    next decision, the last wait to its record's own ``waited_seconds`` when nothing follows), and
    the Workloads that blocked it with the decisions that named them."""
    ordered = sorted(records, key=lambda r: (_epoch(r) or 0.0, str(r.get("decision_id"))))
    rows: list[dict[str, Any]] = []
    per_reason: dict[str, float] = {}
    blocked: dict[str, int] = {}
    for i, r in enumerate(ordered):
        who = _blockers(r)
        for w in who:
            blocked[w] = blocked.get(w, 0) + 1
        rows.append({"time": r.get("time"), "outcome": r.get("outcome"), "reason": r.get("reason") or "",
                     "waited_seconds": r.get("waited_seconds", 0.0), "attempts": r.get("attempts", 0), "decision_id": r.get("decision_id"),
                     "blocked_by": who, "message": r.get("message", "")})
        if r.get("outcome") != "wait":
            continue
        start, nxt = _epoch(r), (_epoch(ordered[i + 1]) if i + 1 < len(ordered) else None)
        if start is not None and nxt is not None:
            reason = str(r.get("reason") or "(none recorded)")
            per_reason[reason] = per_reason.get(reason, 0.0) + max(nxt - start, 0.0)
    last = ordered[-1] if ordered else {}
    total = float(last.get("waited_seconds") or 0.0)
    return {"workload": f"{last.get('namespace')}/{last.get('workload')}" if ordered else "", "decisions": rows,
            "waited_seconds": total, "waited_by_reason": per_reason, "blocked_by": blocked,
            "last_outcome": last.get("outcome")}


def _render_timeline(t: dict[str, Any], out: IO[str]) -> None:
    out.write(f"Workload {t['workload']}: {len(t['decisions'])} decision(s), last {t['last_outcome']}; "
              f"waited {_hms(t['waited_seconds'])} in all (as of its last decision)\n")
    header = ("TIME", "OUTCOME", "REASON", "WAITED", "BLOCKED BY", "MESSAGE")
    rows = [header] + [(str(d["time"]), str(d["outcome"]), d["reason"] or "-", _hms(float(d["waited_seconds"] or 0)),
                        ", ".join(d["blocked_by"][:3]) + (f" (+{len(d['blocked_by']) - 3})" if len(d["blocked_by"]) > 3 else "") or "-",
                        _short(str(d["message"]), 90)) for d in t["decisions"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    for row in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] + "\n")
    if t["waited_by_reason"]:
        out.write("Waited per reason (from each wait to the next decision): "
                  + ", ".join(f"{k} {_hms(v)}" for k, v in sorted(t["waited_by_reason"].items(), key=lambda kv: -kv[1])) + "\n")
    if t["blocked_by"]:
        out.write("Blocked by (decisions naming them as holders of a losing domain): "
                  + ", ".join(f"{k} ×{v}" for k, v in sorted(t["blocked_by"].items(), key=lambda kv: (-kv[1], kv[0]))) + "\n")


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
    p.add_argument("--timeline", action="store_true", help="with --workload: its decisions in order, time waited per reason, and who blocked it")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(list(argv))
    out = stdout or sys.stdout
    if args.workload and "/" not in args.workload:
        print(f"atoll audit: --workload {args.workload!r}: expected NAMESPACE/NAME", file=sys.stderr)
        return 2
    if args.timeline and not args.workload:
        print("atoll audit: --timeline needs --workload NAMESPACE/NAME (a timeline is one Workload's)", file=sys.stderr)
        return 2
    try:
        since = parse_since(args.since, time.time() if now is None else now) if args.since else None
    except ValueError as exc:
        print(f"atoll audit: {exc}", file=sys.stderr)
        return 2
    tally = [0, 0]
    where: list[int] = []
    skipped: list[str] = []
    source = "stdin" if args.file == "-" else args.file
    try:
        if args.file == "-":
            src = stdin or sys.stdin
            if src.isatty():
                print("atoll audit: waiting for decision records on stdin (pipe them in: kubectl logs deploy/atoll | atoll audit; "
                      "or name a file); Ctrl-D ends the input", file=sys.stderr)
            records = list(read_records(src, tally, where, skipped))
        else:
            with open(bundled_path(args.file), encoding="utf-8") as fh:  # config/records/… is found in the package too
                records = list(read_records(fh, tally, where, skipped))
    except OSError as exc:
        print(f"atoll audit: {source}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        print(f"atoll audit: {source}: not text (decision records are JSON lines)", file=sys.stderr)
        return 2
    if not records:
        lines = "no lines" if tally[0] == 0 else f"none of its {tally[0]:,} line{'s' if tally[0] != 1 else ''} held one"
        first = f"; first, {skipped[0]}" if skipped else ""
        print(f"atoll audit: {source}: no decision records ({lines}); records are the JSON lines with "
              f"\"event\": \"{DECISION_EVENT}\" that the leader replica of atoll run writes{first}", file=sys.stderr)
        return 1
    if tally[1]:
        print(f"atoll audit: {tally[1]:,} of {tally[0]:,} lines held no decision record (skipped)", file=sys.stderr)
    valid = check_records(records, where, sys.stderr)
    chosen = filter_records(valid, workload=args.workload, queue=args.queue, outcome=args.outcome, since=since)
    if args.timeline:
        if not chosen:
            print(f"atoll audit: no valid records of {args.workload} in {source}", file=sys.stderr)
            return 1
        t = timeline(chosen)
        if args.format == "json":
            json.dump(t, out, indent=2, ensure_ascii=False)
            out.write("\n")
        else:
            _render_timeline(t, out)
        return 1 if len(valid) < len(records) else 0
    if args.format == "json":
        json.dump(chosen, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        _table(chosen, out)
    return 1 if len(valid) < len(records) else 0

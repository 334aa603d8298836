"""``atoll audit``: decision records filtered by workload, queue, outcome and time, as a table or JSON."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest

from admission.cli._audit import filter_records, main, parse_since, read_records
from admission.controller import DecisionRecord, PodSetRecord, Recorder, WhyNotRecord, iso_time

NOW = 1_800_000_000.0


def record(name: str, outcome: str, *, ns: str = "team-a", queue: str = "research", cq: str = "gpu-cq", age: float = 0.0,
           message: str = "") -> DecisionRecord:
    placement = [PodSetRecord("main", 2, 4, {"n1": 1, "n2": 1}, "nvidia.com/gpu.clique", ["s0", "c3"], 1, "nvidia.com/gpu.clique",
                              1.0, 1.0, 1800.0)] if outcome == "admit" else []
    return DecisionRecord(
        decision_id=f"id-{name}", time=iso_time(NOW - age), workload=name, namespace=ns, uid=f"u-{name}", local_queue=f"{ns}/{queue}",
        cluster_queue=cq, flavor="gb200", profile="strict", workload_class="", outcome=outcome,
        check_state={"admit": "Ready", "wait": "Retry", "reject": "Rejected"}[outcome], message=message or f"{outcome} {name}",
        placement=placement, latency_ms=3.2, snapshot_generation=7)


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    out = io.StringIO()
    rec = Recorder(out)
    out.write("2026-05-01 12:00:00 [info] profiles document loaded\n")  # other log lines are skipped
    out.write('{"event": "api call failed, retrying", "attempt": "1/6"}\n')
    for r in (record("a", "admit", age=7200), record("b", "wait", age=600), record("c", "reject", ns="team-b", queue="infer", cq="other"),
              record("a", "admit", age=30)):
        rec.record(r)
    out.write("not json {\n")
    path = tmp_path / "atoll.log"
    path.write_text(out.getvalue())
    return path


def run(argv: list[str], stdin: str | None = None) -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv, now=NOW, stdin=io.StringIO(stdin) if stdin is not None else None, stdout=out)
    return code, out.getvalue()


def test_records_round_trip_and_other_lines_are_skipped(log_file: Path) -> None:
    records = list(read_records(log_file.read_text().splitlines()))
    assert [r["workload"] for r in records] == ["a", "b", "c", "a"]
    assert records[0]["placement"][0]["nodes"] == {"n1": 1, "n2": 1} and records[0]["snapshot_generation"] == 7


@pytest.mark.parametrize(("argv", "expected"), [
    ([], ["a", "b", "c", "a"]),
    (["--workload", "team-a/a"], ["a", "a"]),
    (["--queue", "team-b/infer"], ["c"]),
    (["--queue", "research"], ["a", "b", "a"]),
    (["--queue", "other"], ["c"]),
    (["--outcome", "admit"], ["a", "a"]),
    (["--since", "1h"], ["b", "c", "a"]),
    (["--since", iso_time(NOW - 60)], ["c", "a"]),
    (["--outcome", "admit", "--since", "15m"], ["a"]),
])
def test_filters(log_file: Path, argv: list[str], expected: list[str]) -> None:
    code, out = run([str(log_file), "--format", "json", *argv])
    assert code == 0
    assert [r["workload"] for r in json.loads(out)] == expected


def test_table_reads_like_a_table(log_file: Path) -> None:
    code, out = run([str(log_file), "--outcome", "admit"])
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["TIME", "OUTCOME", "WORKLOAD", "QUEUE"] and len(lines) == 3
    assert "team-a/a" in lines[1] and "main→s0/c3 (2 nodes)" in lines[1] and "admit" in lines[1]


def test_stdin_is_the_default(log_file: Path) -> None:
    code, out = run(["--format", "json", "--outcome", "reject"], stdin=log_file.read_text())
    assert code == 0 and [r["workload"] for r in json.loads(out)] == ["c"]


def test_bad_arguments_name_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([str(tmp_path / "missing.log")])[0] == 2
    assert "missing.log: cannot read" in capsys.readouterr().err
    assert run(["-", "--since", "yesterday"], stdin="")[0] == 2
    assert "neither a duration (30m, 2h, 7d) nor an ISO 8601 time" in capsys.readouterr().err
    assert run(["-", "--workload", "just-a-name"], stdin="")[0] == 2
    assert "expected NAMESPACE/NAME" in capsys.readouterr().err


def test_since_forms() -> None:
    assert parse_since("90s", NOW) == NOW - 90
    assert parse_since("2d", NOW) == NOW - 172800
    assert parse_since("2027-01-15T08:00:00", NOW) == parse_since("2027-01-15T08:00:00Z", NOW)
    assert filter_records([{"time": "garbage"}], since=0.0) == []


def test_a_file_without_records_says_how_many_lines_held_none_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "README.md"
    text.write_text("# a heading\n\nsome prose\n{\"event\": \"profiles loaded\"}\n")
    code, out = run([str(text)])
    assert code == 1 and out == ""
    err = capsys.readouterr().err
    assert f"atoll audit: {text}: no decision records (none of its 4 lines held one)" in err
    assert err.count("\n") == 1 and err.endswith("; first, line 1: not a JSON object: # a heading\n")
    text.write_text("\n{\"event\": \"profiles loaded\"}\n{\"event\": \"decision\", oops\n")
    assert run([str(text)]) == (1, "")
    assert capsys.readouterr().err.endswith("; first, line 2: \"event\" is 'profiles loaded', not 'decision': {\"event\": \"profiles loaded\"}\n")
    text.write_text("{\"event\": \"decision\", oops\n")
    assert run([str(text)]) == (1, "")
    assert "first, line 1: not JSON (Expecting property name enclosed in double quotes: line 1 column 23 (char 22)): " in capsys.readouterr().err
    code, out = run([], stdin="")
    assert code == 1 and "atoll audit: stdin: no decision records (no lines)" in capsys.readouterr().err


def test_skipped_lines_are_counted_beside_the_records(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run([str(log_file)])
    assert code == 0 and out.count("team-a/a") == 2
    assert capsys.readouterr().err == "atoll audit: 3 of 7 lines held no decision record (skipped)\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_on_stdin_is_told_what_audit_waits_for(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert main([], now=NOW, stdin=_Terminal(log_file.read_text()), stdout=out) == 0
    assert capsys.readouterr().err.startswith("atoll audit: waiting for decision records on stdin (pipe them in: kubectl logs")


def test_a_reader_that_goes_away_ends_audit_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = io.StringIO()
    rec = Recorder(out)
    for i in range(3000):  # far more than a pipe buffer holds
        rec.record(record(f"w{i}", "admit"))
    path = tmp_path / "atoll.log"
    path.write_text(out.getvalue())
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from admission.cli import main; sys.exit(main(sys.argv[1:]))",
                             "audit", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).parents[3])
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"TIME")
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.wait() == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_record_that_breaks_the_schema_is_named_by_line_and_field_and_fails_the_run(tmp_path: Path,
                                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    Recorder(out).record(record("a", "admit"))
    broken = json.loads(out.getvalue())
    del broken["waited_seconds"]
    unversioned = {k: v for k, v in json.loads(out.getvalue()).items() if k != "schema"}
    path = tmp_path / "mixed.log"
    path.write_text(out.getvalue() + "text\n" + json.dumps(broken) + "\n" + json.dumps(unversioned) + "\n")
    code, text = run([str(path), "--format", "json"])
    err = capsys.readouterr().err
    assert code == 1 and [r["workload"] for r in json.loads(text)] == ["a"]  # the valid record is still shown
    assert "line 3: not a valid atoll.dev/decision/v1 record: (record): 'waited_seconds' is a required property" in err
    assert "line 4: not a valid atoll.dev/decision/v1 record: schema: missing" in err
    assert "2 of 3 records do not meet atoll.dev/decision/v1" in err and "1 of 4 lines held no decision record" in err


def test_records_written_before_the_wait_or_span_field_are_read_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    weighed = {"flavor": "gb200", "kind": "span", "domain": "s0/c3", "expected_wait_seconds": 900.0, "wait_error_seconds": 0.0,
               "wait_basis": "limits", "span_slowdown": 1.2, "chose": "wait"}
    Recorder(out).record(dataclasses.replace(record("new", "wait"), wait_or_span=[weighed]))
    Recorder(out).record(record("old", "wait"))
    lines = out.getvalue().splitlines()
    old = json.loads(lines[1])
    del old["wait_or_span"]  # as a record written before the field existed
    path = tmp_path / "mixed.log"
    path.write_text(lines[0] + "\n" + json.dumps(old) + "\n")
    code, text = run([str(path), "--format", "json"])
    assert code == 0 and capsys.readouterr().err == ""
    got = {r["workload"]: r for r in json.loads(text)}
    assert got["new"]["wait_or_span"] == [weighed] and "wait_or_span" not in got["old"]


def _waiting(name: str, age: float, reason: str, blockers: list[str], waited: float) -> DecisionRecord:
    ledger = {"owed_pods": 2, "reserved_gpus": 8, "bound_gpus": 0, "holders": len(blockers),
              "workloads": [{"workload": b, "owed_pods": 2, "reserved_gpus": 8, "bound_gpus": 0} for b in blockers]}
    return dataclasses.replace(record(name, "wait", age=age), reason=reason, waited_seconds=waited, decision_id=f"id-{name}-{age}",
                               first_waited_at=iso_time(NOW - 3000),
                               why_not=[WhyNotRecord("main", "clique", ["s0", f"c{i}"], 0, 2, "fits 0 of 2 pods", ledger) for i in range(2)])


def test_timeline_orders_one_workloads_decisions_with_time_per_reason_and_its_blockers(tmp_path: Path) -> None:
    out = io.StringIO()
    rec = Recorder(out)
    admitted = dataclasses.replace(record("z", "admit", age=600), waited_seconds=2400.0, first_waited_at=iso_time(NOW - 3000),
                                   decision_id="id-z-admit")
    for r in (admitted, _waiting("z", 1800, "owed-pods", ["team-a/y"], 1200.0), _waiting("z", 3000, "no-domain", ["team-a/x", "team-a/y"], 0.0),
              record("other", "admit", age=100)):  # written out of order, and another Workload between
        rec.record(r)
    path = tmp_path / "z.log"
    path.write_text(out.getvalue())
    code, text = run([str(path), "--workload", "team-a/z", "--timeline", "--format", "json"])
    assert code == 0
    t = json.loads(text)
    assert [(d["outcome"], d["reason"]) for d in t["decisions"]] == [("wait", "no-domain"), ("wait", "owed-pods"), ("admit", "")]
    assert t["waited_by_reason"] == {"no-domain": 1200.0, "owed-pods": 1200.0} and t["waited_seconds"] == 2400.0
    assert t["blocked_by"] == {"team-a/y": 2, "team-a/x": 1}
    assert t["decisions"][0]["blocked_by"] == ["team-a/x", "team-a/y"]
    code, table = run([str(path), "--workload", "team-a/z", "--timeline"])
    assert code == 0 and table.startswith("Workload team-a/z: 3 decision(s), last admit; waited 40m00s in all")
    assert "Waited per reason (from each wait to the next decision): no-domain 20m00s, owed-pods 20m00s" in table
    assert "Blocked by (decisions naming them as holders of a losing domain): team-a/y ×2, team-a/x ×1" in table


def test_timeline_needs_a_workload(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([str(log_file), "--timeline"])[0] == 2
    assert "--timeline needs --workload NAMESPACE/NAME" in capsys.readouterr().err

"""``atoll explain NS/NAME`` on the live (real) apiserver: where and why a Workload was placed,
or why it waits; read-only."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import structlog

from admission.cli._explain import main
from tests.admission.fabric import CLIQUE, Fabric, planned, run

pytestmark = pytest.mark.apiserver


@pytest.fixture(autouse=True)
def _default_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()  # explain configures process-wide logging, as a command may


def explain(fabric: Fabric, name: str, fmt: str = "text") -> tuple[int, str]:
    out = io.StringIO()
    code = main([f"{fabric.ns}/{name}", "--namespace", fabric.ns, "--admission-check", fabric.check, "--format", fmt],
                stdout=out, api_client=fabric.api)
    return code, out.getvalue()


def test_placed_workload_shows_its_domain_and_nodes(fabric: Fabric) -> None:
    fabric.install()
    fabric.submit("train", [("main", 2, 4)])
    run(fabric.controller())
    entry = fabric.entry("train")
    rv = fabric.workload("train")["metadata"]["resourceVersion"]
    code, out = explain(fabric, "train", "json")
    report = json.loads(out)
    assert code == 0 and report["check"]["state"] == "Ready"
    (placed,) = report["placement"]
    assert placed["planned_nodes"] == planned(entry) and list(placed["node_selector"]) == [CLIQUE]
    (flavor,) = report["flavors"]
    assert flavor["reserved_gpus"] == 8 and flavor["free_gpus"] == 24 and flavor["nodes"] == 8
    assert fabric.workload("train")["metadata"]["resourceVersion"] == rv  # explain writes nothing


def test_waiting_workload_says_why(fabric: Fabric) -> None:
    fabric.add_nodes(blocks=1, cliques=2)
    fabric.add_node(0, 1, 2, unschedulable=True)
    fabric.install(nodes=False)
    for c in range(2):
        fabric.bind_pod(f"busy-{c}", fabric.node_name(0, c, 0), 2)
    fabric.submit("gang", [("main", 2, 4)])
    run(fabric.controller())
    code, out = explain(fabric, "gang")
    assert code == 0
    assert "Check " in out and ": Retry, requeue after 30s" in out
    assert "Decision now: wait (profile strict)" in out
    assert f"left out: cordoned: {fabric.node_name(0, 1, 2)}" in out
    assert "not " in out and "fits 1 of 2 pods" in out
    assert "Waited 1 time(s)" in out


def test_unknown_workload(fabric: Fabric, capsys: pytest.CaptureFixture[str]) -> None:
    fabric.install(nodes=False)
    code, _ = explain(fabric, "nobody")
    assert code == 1 and f"Workload {fabric.ns}/nobody not found" in capsys.readouterr().err


def test_render_shows_each_edge_of_the_decision_now() -> None:
    from admission.cli._explain import render

    report = {"workload": "inference/chat", "now": {"outcome": "admit", "message": "Placed", "links": [
        {"from": "prefill", "to": "decode", "bottleneck_level": "nvidia.com/gpu.clique", "bandwidth_gbps": 1800.0, "latency_us": 1.0,
         "asked": "≥ 400 GB/s"}]}}
    assert "edge prefill->decode: 1800 GB/s per GPU, 1 µs, across nvidia.com/gpu.clique (asked ≥ 400 GB/s)" in render(report)


def test_render_reads_the_weighing_from_the_records_field_not_its_message() -> None:
    from admission.cli._explain import render

    weighed = {"flavor": "gb200", "kind": "span", "domain": "b0/c1", "expected_wait_seconds": 3600.0, "wait_error_seconds": 0.0,
               "wait_basis": "limits", "span_slowdown": 1.0432, "span_cost_seconds": 86.4, "expected_runtime_seconds": 2000.0,
               "runtime_basis": "learned", "chose": "wait"}
    report = {"workload": "ns/gang", "recorded": {"source": "a record", "outcome": "wait", "message": "Waiting", "wait_or_span": [weighed]},
              "now": {"outcome": "wait", "message": "Waiting", "wait_or_span": [{**weighed, "expected_wait_seconds": None, "chose": None}]}}
    then, now = render(report).split("-- What Atoll would decide now")
    assert ("  weighed on gb200: wait 3600s ± 0s for b0/c1 (from limits); span slowdown 1.043× = +86s on 2000s (learned); "
            "chose wait") in then
    assert "  weighed on gb200: wait unknown; span slowdown 1.043× = +86s on 2000s (learned); chose relaxAfterSeconds decides" in now
    queued = {**weighed, "expected_wait_seconds": 7200.0, "wait_basis": "limits+queue", "queued_ahead": 2}
    lined = render({"workload": "ns/gang", "recorded": {"source": "a record", "outcome": "wait", "message": "Waiting", "wait_or_span": [queued]}})
    assert "  weighed on gb200: wait 7200s ± 0s for b0/c1 after 2 queued ahead (from limits+queue); span " in lined
    old = render({"workload": "ns/gang", "recorded": {"source": "an older record", "outcome": "wait", "message": "Waiting"}})
    assert "weighed on" not in old  # a record written before the field: nothing invented


def test_explain_prints_the_recorded_weighing_of_a_gang_that_spanned(fabric: Fabric, tmp_path: object) -> None:
    from pathlib import Path

    from tests.admission.controller.test_span_cost import LIMIT, one_clique_busy

    one_clique_busy(fabric)
    (verdict,) = run(fabric.controller())
    assert verdict.outcome == "admit"  # the default price: the span is cheaper than waiting (test_span_cost)
    records = Path(str(tmp_path)) / "atoll.log"
    records.write_text(fabric.records.getvalue())
    out = io.StringIO()
    code = main([f"{fabric.ns}/gang", "--namespace", fabric.ns, "--admission-check", fabric.check, "--records", str(records)],
                stdout=out, api_client=fabric.api)
    assert code == 0
    then = out.getvalue().split("-- What Atoll would decide now")[0]
    (weighed,) = [r for r in fabric.decision_records() if r["workload"] == "gang"][-1]["wait_or_span"]
    line = [x for x in then.splitlines() if x.startswith(f"  weighed on {fabric.flavor}: ")]
    assert line == [f"  weighed on {fabric.flavor}: wait {LIMIT}s ± 0s for {weighed['domain']} (from limits); span slowdown "
                    f"{weighed['span_slowdown']:.3f}× = +{weighed['span_cost_seconds']:.0f}s on "
                    f"{weighed['expected_runtime_seconds']:.0f}s (learned); chose span"]


def test_the_reason_recorded_at_decision_time_is_shown_apart_from_the_decision_now(fabric: Fabric, tmp_path: object) -> None:
    """An admitted Workload whose planned nodes other pods took since: its record says admit (with
    the losing domains as they were), while the decision now, on today's state, says otherwise."""
    from pathlib import Path

    fabric.add_nodes(blocks=1, cliques=2)
    fabric.install(nodes=False)
    fabric.submit("train", [("main", 2, 4)])
    run(fabric.controller())
    entry = fabric.entry("train")
    decision = entry["podSetUpdates"][0]["annotations"]["atoll.dev/decision-id"]
    for i, node in enumerate(fabric.node_name(0, c, n) for c in range(2) for n in range(2)):  # other pods fill every node since
        fabric.bind_pod(f"late-{i}", node, 4)
    records = Path(str(tmp_path)) / "atoll.log"
    records.write_text("not a record\n" + fabric.records.getvalue())

    code, plain = explain(fabric, "train")
    assert code == 0
    assert f"-- At decision time (from the Workload's check entry): Ready, decision {decision}" in plain
    out = io.StringIO()
    code = main([f"{fabric.ns}/train", "--namespace", fabric.ns, "--admission-check", fabric.check, "--records", str(records)],
                stdout=out, api_client=fabric.api)
    text = out.getvalue()
    assert code == 0
    then = text.index(f"-- At decision time (from the decision record on line 2 of {records}): admit, decision {decision}")
    now = text.index("-- What Atoll would decide now, on today's cluster (not the decision it made then) --")
    assert then < now and "Decision now: wait" in text[now:]
    (rec,) = fabric.decision_records()
    assert rec["why_not"]
    for w in rec["why_not"]:  # the losing domains as they were, in the recorded section
        assert f"  not {'/'.join(w['domain_path'])} ({w['level']}): {w['reason']}" in text[then:now]


def test_a_span_is_priced_now_with_atoll_runs_cost_flags_or_their_variables(fabric: Fabric, monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The controller runs with flat-ring: the decision now that explain prints gives the
    controller's price only when it is given the same setting (flag or ``ATOLL_LINK_MODEL``); left
    at the default it prices calibrated, and says which settings it priced with. A bad value is
    one line naming the flag."""
    from admission.controller import CostSettings
    from tests.admission.controller.test_span_cost import one_clique_busy, settings, slowdown_said

    one_clique_busy(fabric)
    ctrl = fabric.controller(settings=settings(fabric, CostSettings(link_model="flat-ring")))
    (verdict,) = run(ctrl)
    ctrl.stop()
    controllers = slowdown_said(verdict.message)

    def now(*extra: str) -> dict[str, object]:
        out = io.StringIO()
        code = main([f"{fabric.ns}/gang", "--namespace", fabric.ns, "--admission-check", fabric.check, "--format", "json", *extra],
                    stdout=out, api_client=fabric.api)
        assert code == 0
        return dict(json.loads(out.getvalue())["now"])

    default = now()
    assert default["span_cost"] == {"link_model": "calibrated", "comm_fraction": 0.1, "overlap": 0.0}
    assert slowdown_said(str(default["message"])) < controllers  # the default prices the span lower than the controller did
    flagged = now("--link-model", "flat-ring")
    assert flagged["span_cost"]["link_model"] == "flat-ring"  # type: ignore[index]
    assert slowdown_said(str(flagged["message"])) == controllers
    monkeypatch.setenv("ATOLL_LINK_MODEL", "flat-ring")
    assert slowdown_said(str(now()["message"])) == controllers
    _, text = explain(fabric, "gang")
    assert "a span priced now with link model flat-ring, comm fraction 0.1, overlap 0" in text
    monkeypatch.setenv("ATOLL_LINK_MODEL", "mesh")
    with pytest.raises(SystemExit) as exc:
        now()
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("{")]  # not a log line left by an earlier test
    assert exc.value.code == 2 and len(err) == 1 and "--link-model" in err[0] and "'mesh'" in err[0], err


def test_a_records_file_that_cannot_be_read_is_named_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    """The input's own error, one line naming the flag, not a cluster-credentials error that hides it."""
    assert main(["team-a/train", "--kubeconfig", "no-such-kubeconfig", "--records", "no-such-records.jsonl"]) == 2
    assert capsys.readouterr().err == "atoll explain: --records: no-such-records.jsonl: cannot read: No such file or directory\n"

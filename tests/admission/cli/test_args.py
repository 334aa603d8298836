"""Mistakes on the command line get one line naming the flag and the nearest real one, or what the flag takes."""

from __future__ import annotations

import pytest

from admission.cli import main


@pytest.mark.parametrize(("argv", "line"), [
    (["place", "--workload", "w.yaml", "--ocupancy", "0.5"],
     "atoll place: unrecognized arguments: --ocupancy 0.5; did you mean --occupancy? (atoll place --help lists the options)"),
    (["simulate", "--seed", "1", "--polices", "random"],
     "atoll simulate: unrecognized arguments: --polices random; did you mean --policies? (atoll simulate --help lists the options)"),
    (["audit", "--outcme=admit"],
     "atoll audit: unrecognized arguments: --outcme=admit; did you mean --outcome? (atoll audit --help lists the options)"),
    (["place", "--workload", "w.yaml", "--zzzzzz"], "atoll place: unrecognized arguments: --zzzzzz (atoll place --help lists the options)"),
    (["place"], "atoll place: the following arguments are required: --workload (atoll place --help lists the options)"),
    (["place", "--worklod", "w.yaml"],
     "atoll place: unrecognized arguments: --worklod; did you mean --workload? (atoll place --help lists the options)"),
    (["place", "--bogus"], "atoll place: unrecognized arguments: --bogus (atoll place --help lists the options)"),
    # a bad value: the flag, then what it takes (not argparse's "argument --seed: invalid int value")
    (["place", "--workload", "w.yaml", "--seed", "x"],
     "atoll place: --seed: expected a whole number ≥ 0, got 'x' (atoll place --help lists the options)"),
    (["place", "--workload", "w.yaml", "--waited", "forever"],
     "atoll place: --waited: expected a number, got 'forever' (atoll place --help lists the options)"),
    (["audit", "--outcome", "maybe"],
     "atoll audit: --outcome: expected one of 'admit', 'wait', 'reject', got 'maybe' (atoll audit --help lists the options)"),
    (["simulate", "--seed"], "atoll simulate: --seed: expected one argument (atoll simulate --help lists the options)"),
])
def test_a_misspelt_flag_or_bad_value_gets_one_line_naming_the_flag(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize(("argv", "line"), [
    (["baseline", "kueue-tas", "s.yaml"],
     "atoll baseline: BASELINE: expected one of 'kueue-bestfit', got 'kueue-tas' (atoll baseline --help lists the options)"),
    (["baseline"], "atoll baseline: the following arguments are required: BASELINE, SCENARIO (atoll baseline --help lists the options)"),
    (["explain"], "atoll explain: the following arguments are required: NAMESPACE/NAME (atoll explain --help lists the options)"),
])
def test_a_bad_positional_argument_is_named_once_as_the_usage_line_names_it(argv: list[str], line: str,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Not "baseline: baseline: …": the argument as usage shows it, then what it takes and what was given."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize(("argv", "takes"), [
    (["bench", "finder", "--reference-sample", "-3"], "--reference-sample: expected a whole number ≥ 1, got -3"),
    (["bench", "finder", "--seed", "-3"], "--seed: -3 is below 0; seeds start at 0"),
    (["bench", "finder", "--uniform-perf", "1.5"], "--uniform-perf: expected a number from 0 to 1, got 1.5"),
    (["bench", "simulate", "--load", "0"], "--load: expected a number > 0, got 0"),
    (["bench", "simulate", "--goal-seconds", "-3"], "--goal-seconds: expected a number ≥ 0, got -3"),
    (["bench", "controller", "--gpus-per-node", "0"], "--gpus-per-node: expected a whole number ≥ 1, got 0"),
    (["bench", "failover", "--standby-seconds", "-3"], "--standby-seconds: expected a number ≥ 0, got -3"),
    (["bench", "webhook", "--timeout-seconds", "31"], "--timeout-seconds: expected a whole number from 1 to 30, got 31"),
    (["bench", "decide", "--nodes", "5"], "--nodes: expected a whole number ≥ 18, got 5"),
    (["bench", "decide", "--pending", "0"], "--pending: expected a whole number ≥ 1, got 0"),
    (["bench", "decide", "--waiting", "-1"], "--waiting: expected a whole number ≥ 0, got -1"),
    (["bench", "decide", "--seed", "-3"], "--seed: -3 is below 0; seeds start at 0"),
    (["bench", "decide", "--goal-p99-ms", "-1"], "--goal-p99-ms: expected a number ≥ 0, got -1"),
    (["bench", "quality", "--loads", "0.8,high"], "--loads: 'high' is not a number (e.g. 0.85 or 0.7,0.85,1.0)"),
    (["bench", "quality", "--binding-loads", "-1"], "--binding-loads: must be > 0 (a share of cluster GPU capacity, e.g. 0.85), got -1"),
    (["bench", "quality", "--seeds", "0"], "--seeds: expected a whole number ≥ 1, got 0"),
    (["bench", "quality", "--workers", "-2"], "--workers: expected a whole number ≥ 1, got -2"),
    (["bench", "quality", "--yield-turn-lead", "-60"], "--yield-turn-lead: expected a number ≥ 0, got -60"),
])
def test_a_benchmark_refuses_a_bad_number_naming_the_flag_and_what_it_takes(argv: list[str], takes: str,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Each is checked when parsed: before, some ran into a traceback and others were taken (a negative timeout)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    prog = "atoll " + " ".join(argv[:2])
    assert capsys.readouterr().err == f"{prog}: {takes} ({prog} --help lists the options)\n"


def test_a_small_webhook_burst_fails_as_many_nodes_as_it_has_by_default(monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """--pods below the default 50 failed nodes is a run of its own, not an error about a flag not given."""
    import sys

    monkeypatch.setitem(sys.modules, "tests.envtest", None)  # stop where the control plane would start
    assert main(["bench", "webhook", "--pods", "5"]) == 1
    assert "run it from the root of a clone" in capsys.readouterr().err
    assert main(["bench", "webhook", "--pods", "5", "--failed-nodes", "6"]) == 2
    assert capsys.readouterr().err == "atoll bench webhook: --failed-nodes (6) must be at most --pods (5): only planned nodes fail\n"


@pytest.mark.parametrize(("flag", "line"), [("--policy", "atoll bench simulate: --policy: unknown policy 'fastest'; choose from"),
                                            ("--scheduler", "atoll bench simulate: --scheduler: 'fastest' is not one of least-allocated")])
def test_bench_simulate_names_its_own_flags(flag: str, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--policy and --scheduler, not the simulator's --policies or a bare field name."""
    assert main(["bench", "simulate", "--jobs", "10", flag, "fastest"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and len(err.splitlines()) == 1, err


def test_a_misspelt_command_gets_the_nearest_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulte"]) == 2
    assert capsys.readouterr().err == "atoll: unknown command 'simulte'; did you mean simulate? (atoll --help lists the commands)\n"


def test_an_input_error_on_a_cold_cache_is_one_line_without_the_compile_note(monkeypatch: pytest.MonkeyPatch,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import admission.cli

    monkeypatch.setattr(admission.cli, "kernels_cached", lambda: False)
    assert main(["place", "--workload", "no-such-workload.yaml"]) == 2
    err = capsys.readouterr().err
    assert "compiling" not in err
    assert err.count("\n") == 1


def test_the_compile_note_is_printed_at_the_first_compile_and_once(capsys: pytest.CaptureFixture[str]) -> None:
    import numba

    from admission.cli._args import announce_at_first_compile

    withdraw = announce_at_first_compile("atoll: compiling")
    assert capsys.readouterr().err == ""
    numba.njit(lambda x: x + 1)(1)  # a function of its own: compiled here, never cached
    numba.njit(lambda x: x + 2)(1)
    assert capsys.readouterr().err == "atoll: compiling\n"
    withdraw()  # after the note, withdrawing is a no-op


def test_a_withdrawn_compile_note_is_never_printed(capsys: pytest.CaptureFixture[str]) -> None:
    import numba

    from admission.cli._args import announce_at_first_compile

    announce_at_first_compile("atoll: compiling")()
    numba.njit(lambda x: x * 3)(1)
    assert capsys.readouterr().err == ""


def test_kernels_count_as_cached_once_numba_wrote_their_index(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from admission.cli import kernels_cached

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not kernels_cached()
    (tmp_path / "topology").mkdir()
    (tmp_path / "topology" / "_kernels._best_fit-153.py311.nbi").write_bytes(b"")
    assert kernels_cached()


@pytest.mark.parametrize(("n", "text"), [(0, "0 seeds"), (1, "1 seed"), (5, "5 seeds"), (12000, "12,000 seeds")])
def test_a_count_names_its_noun_in_the_singular_only_for_one(n: int, text: str) -> None:
    from admission.cli._args import counted

    assert counted(n, "seed") == text

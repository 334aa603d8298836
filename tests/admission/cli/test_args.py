"""Mistakes on the command line get one line naming the flag and the nearest real one."""

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
])
def test_a_misspelt_flag_gets_one_line_with_the_nearest_option(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err == line + "\n"


def test_a_misspelt_command_gets_the_nearest_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulte"]) == 2
    assert capsys.readouterr().err == "atoll: unknown command 'simulte'; did you mean simulate? (atoll --help lists the commands)\n"


def test_the_first_kernel_compile_is_announced(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import admission.cli

    monkeypatch.setattr(admission.cli, "kernels_cached", lambda: False)
    assert main(["place", "--workload", "config/workloads/training-job.yaml", "--occupancy", "2"]) == 2
    assert capsys.readouterr().err.startswith("atoll: compiling the placement kernels (about 20 s, once; later runs reuse the cache)\n")
    monkeypatch.setattr(admission.cli, "kernels_cached", lambda: True)
    assert main(["place", "--workload", "config/workloads/training-job.yaml", "--occupancy", "2"]) == 2
    assert "compiling" not in capsys.readouterr().err


def test_kernels_count_as_cached_once_numba_wrote_their_index(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from admission.cli import kernels_cached

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not kernels_cached()
    (tmp_path / "topology").mkdir()
    (tmp_path / "topology" / "_kernels._best_fit-153.py311.nbi").write_bytes(b"")
    assert kernels_cached()

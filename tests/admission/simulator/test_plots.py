"""The plots' own rules: each names the run it shows, titles fit, and no interval goes below 0 h."""

from __future__ import annotations

from admission.simulator._plots import _lower_errors, _suffix, _wrap


def test_a_plot_names_its_run() -> None:
    assert _suffix("gb200-nvl72-superpod", 3, 0.9) == " — gb200-nvl72-superpod — seed 3, load 0.9"
    assert _suffix("dgx", 0, None) == " — dgx — seed 0"  # a trace run has no load
    assert _suffix("", None, None) == ""


def test_error_bars_stop_at_zero_hours() -> None:
    assert _lower_errors([0.5, 0.0, 2.0, -0.1], [1.0, 0.3, 0.5, 0.2]) == [0.5, 0.0, 0.5, 0.0]


def test_long_titles_wrap_instead_of_running_off_the_figure() -> None:
    title = "mean wait (h) vs load, jobs every policy completed, 95 % interval over 5 seeds — gb200-nvl72-superpod"
    lines = _wrap(title).splitlines()
    assert len(lines) == 2 and all(len(line) <= 70 for line in lines) and " ".join(lines) == title

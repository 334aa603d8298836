"""PNG plots of a simulator run (matplotlib, Agg backend: no display needed).

- ``jct_cdf.png``: the JCT distribution per policy (log time axis).
- ``allocation.png``: allocated GPUs / cluster GPUs over time per policy.
- ``queue.png``: jobs waiting (queued or in backoff) over time per policy.
- ``islands.png``: per policy, each island's GPU occupancy at that run's busiest moment; rows are
  the islands' parent domains (e.g. scalable units), columns the islands inside them.
- ``jct_vs_load.png`` / ``wait_vs_load.png`` (a load sweep): common-set means with 95 % intervals.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from admission.simulator._sim import STATUS_DONE, SimResult

__all__ = ["write_plots", "write_sweep_plots"]

_MAX_POINTS = 4000


def _resample(times: npt.NDArray[np.float64], values: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """A step function sampled at ≤ ``_MAX_POINTS`` evenly spaced times (long runs stay light)."""
    if times.size <= _MAX_POINTS:
        return times, values
    grid = np.linspace(float(times[0]), float(times[-1]), _MAX_POINTS)
    idx = np.searchsorted(times, grid, side="right") - 1
    return grid, values[idx]


def _hours(t: npt.NDArray[np.float64], origin: float) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = (t - origin) / 3600.0
    return out


def _grid_matrix(grid: Mapping[str, Any]) -> tuple[npt.NDArray[np.float64], list[str]]:
    """Islands as rows by parent domain; cells are used/total (NaN pads ragged rows)."""
    parents: list[tuple[str, ...]] = [tuple(p) for p in grid["parents"]]
    rows: dict[tuple[str, ...], list[float]] = {}
    for parent, used, total in zip(parents, grid["used"], grid["total"]):
        rows.setdefault(parent, []).append(used / total if total else np.nan)
    width = max((len(r) for r in rows.values()), default=0)
    if len(rows) > 64 or width == 1:  # too many parents to read as rows: wrap the islands into a square
        flat = [v for r in rows.values() for v in r]
        width = int(np.ceil(np.sqrt(len(flat)))) or 1
        padded = flat + [np.nan] * (width * int(np.ceil(len(flat) / width)) - len(flat))
        return np.asarray(padded, dtype=float).reshape(-1, width), []
    mat = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows.values()):
        mat[i, : len(r)] = r
    return mat, [p[-1] if p else "(flavor)" for p in rows]


def _wrap(text: str, width: int = 70) -> str:
    """A title in lines that fit the figure (matplotlib cuts a long one at the edge)."""
    return textwrap.fill(text, width)


def _suffix(title: str, seed: int | None, load: float | None) -> str:
    """`` — cluster — seed 0, load 0.9``: what a plot of one run shows."""
    run = ", ".join(x for x in (f"seed {seed}" if seed is not None else "", f"load {load:g}" if load is not None else "") if x)
    return "".join(f" — {x}" for x in (title, run) if x)


def _lower_errors(ys: Sequence[float], err: Sequence[float]) -> list[float]:
    """The lower half of each interval, cut at 0: a time is never negative."""
    return [min(e, max(y, 0.0)) for e, y in zip(err, ys)]


PANELS_PER_ROW = 3
"""Island heat maps per row of ``islands.png``: one long strip of them shrinks every panel."""


def write_plots(results: Mapping[str, SimResult], out_dir: str | Path, *, title: str = "", seed: int | None = None,
                load: float | None = None) -> list[Path]:
    """Write the four PNGs into ``out_dir`` (created if missing); returns their paths. Each names
    the run it shows (``seed``, ``load``): a sweep plots its first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    origin = min((float(r.arrival[0]) for r in results.values() if r.arrival.size), default=0.0)
    paths: list[Path] = []
    suffix = _suffix(title, seed, load)

    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for name, r in results.items():
        jct = np.sort((r.end - r.arrival)[r.status == STATUS_DONE])
        if jct.size:
            ax.step(np.maximum(jct, 1.0), np.arange(1, jct.size + 1) / jct.size, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("share of jobs")
    ax.set_title(_wrap(f"JCT CDF{suffix}"))
    ax.grid(True, alpha=0.3)
    ax.legend()
    paths.append(out / "jct_cdf.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    for fname, label in (("allocation.png", "allocated GPUs (% of cluster)"), ("queue.png", "jobs waiting")):
        fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
        for name, r in results.items():
            series = 100.0 * r.allocated / max(r.total_gpus, 1) if fname == "allocation.png" else r.pending
            t, v = _resample(r.times, series)
            if t.size:
                ax.step(_hours(t, origin), v, where="post", label=name, linewidth=0.9)
        ax.set_xlabel("simulated time (h)")
        ax.set_ylabel(label)
        ax.set_title(_wrap(f"{label}{suffix}"))
        ax.grid(True, alpha=0.3)
        ax.legend()
        paths.append(out / fname)
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

    named = [(name, r) for name, r in results.items() if r.island_grid]
    panels = [(name, r, grid) for name, r in named for grid in r.island_grid]
    cols = max(min(len(panels), PANELS_PER_ROW), 1)
    rows = max(-(-len(panels) // cols), 1)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols + 1.2, 3.6 * rows + 0.8), squeeze=False, layout="constrained")
    image = None
    for i, (name, r, grid) in enumerate(panels):
        mat, labels = _grid_matrix(grid)
        ax = axes[i // cols][i % cols]
        image = ax.imshow(mat, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", interpolation="nearest")
        when = (r.busiest_time - origin) / 3600.0
        ax.set_title(f"{name}: {grid['flavor']} at {when:.1f} h", fontsize=10)
        ax.set_xlabel(f"island ({grid['level']}) within its domain", fontsize=9)
        if labels and len(labels) <= 16:
            ax.set_yticks(range(len(labels)), labels, fontsize=8)
        else:
            ax.set_yticks([])
    for j in range(len(panels), rows * cols):
        axes[j // cols][j % cols].set_axis_off()
    if not panels:
        axes[0][0].text(0.5, 0.5, "no island data recorded", ha="center", va="center")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="GPU occupancy of the island (0 = idle, 1 = full)")
    fig.suptitle(_wrap(f"island occupancy at the busiest moment{suffix}", 100), fontsize=11)
    paths.append(out / "islands.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def write_sweep_plots(comparisons: Sequence[Any], out_dir: str | Path, *, title: str = "") -> list[Path]:
    """``jct_vs_load.png`` and ``wait_vs_load.png``: per policy, the common-set mean over seeds
    against offered load, with the 95 % interval as error bars (``_compare.Comparison`` list)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cmps = [c for c in comparisons if c.load is not None]
    paths: list[Path] = []
    suffix = f" — {title}" if title else ""
    policies = list(cmps[0].policies) if cmps else []
    for fname, key, label in (("jct_vs_load.png", "mean_jct_s", "mean JCT (h)"), ("wait_vs_load.png", "mean_wait_s", "mean wait (h)")):
        fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
        for p in policies:
            xs = [c.load for c in cmps]
            ys = [c.figures[p][key].mean / 3600.0 for c in cmps]
            err = [0.0 if np.isnan(c.figures[p][key].half) else c.figures[p][key].half / 3600.0 for c in cmps]
            ax.errorbar(xs, ys, yerr=[_lower_errors(ys, err), err], marker="o", capsize=3, label=p)
        seeds = len(cmps[0].seeds) if cmps else 0
        ax.set_xlabel("offered load (share of cluster GPUs)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0.0)
        ax.set_title(_wrap(f"{label} vs load, jobs every policy completed, 95 % interval over {seeds} seeds{suffix}"), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        paths.append(out / fname)
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths

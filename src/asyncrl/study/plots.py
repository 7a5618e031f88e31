"""The study's pictures: learning curves against wall-clock time and env steps, and EPS bars.

Drawn with matplotlib's Agg backend (files only, no screen needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:
    from asyncrl.study.runs import StudyRun

MODE_STYLE = {"sync": "--", "async": "-"}


def plot_returns(
    runs: list[StudyRun], path: Path, x: str, title: str, target: float | None = None
) -> None:
    """One line per run: mean return of the last 20 episodes against seconds or env steps."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ks = list(dict.fromkeys(r.k for r in runs))
    for r in runs:
        xs = r.curve.wall_seconds if x == "wall" else r.curve.env_steps
        ax.plot(
            xs,
            r.curve.returns,
            MODE_STYLE.get(r.mode, "-"),
            color=colors[ks.index(r.k) % len(colors)],
            label=f"{r.mode} K={r.k}",
        )
    if target is not None:
        ax.axhline(target, color="grey", linewidth=0.8, linestyle=":", label=f"target {target:g}")
    ax.set_xlabel("wall-clock seconds" if x == "wall" else "env steps")
    ax.set_ylabel("mean return (last 20 episodes)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_eps_bars(runs: list[StudyRun], path: Path, title: str) -> None:
    """EPS per K, one bar per mode side by side."""
    ks = list(dict.fromkeys(r.k for r in runs))
    modes = list(dict.fromkeys(r.mode for r in runs))
    by = {(r.k, r.mode): r.summary["eps"] for r in runs}
    width = 0.8 / len(modes)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for j, mode in enumerate(modes):
        xs = [i + (j - (len(modes) - 1) / 2) * width for i in range(len(ks))]
        heights = [by.get((k, mode), 0.0) for k in ks]
        bars = ax.bar(xs, heights, width, label=mode)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(range(len(ks)), [f"K={k}" for k in ks])
    ax.set_ylabel("EPS = K / T (envs per second)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

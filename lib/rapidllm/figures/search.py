"""A search's result at a glance: the best objective per GPU count for each candidate, the Pareto front
across GPU counts marked, and every other top-k layout as a faint point (what the runners-up cost)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from rapidllm.figures.style import plt, save


def search_figure(df: pd.DataFrame, objective: str, title: str, stem: str | Path) -> list[Path]:
    """Objective against GPUs (log2 axis): one line per candidate through its groups' best layouts, filled
    markers on the Pareto front, small grey points for the other ranked layouts."""
    fig, ax = plt.subplots(layout="constrained", figsize=(6.4, 4.0))
    ax.scatter(df.gpus, df[objective], s=8, color="0.75", label="other top layouts", zorder=1)
    for label, grp in df[df.group_rank == 1].groupby("candidate", sort=True):
        grp = grp.sort_values("gpus")
        line, = ax.plot(grp.gpus, grp[objective], marker="o", mfc="white", label=f"{label}: best per GPU count",
                        zorder=2)
        front = grp[grp.pareto]
        ax.plot(front.gpus, front[objective], "o", color=line.get_color(), zorder=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel(objective)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    return save(fig, stem)

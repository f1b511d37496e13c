"""Predicted vs measured per validation suite (paper Figs 6-9 style)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.figures.style import plt, save


def predicted_vs_measured(rows: pd.DataFrame, title: str, unit: str, stem: str | Path) -> list[Path]:
    """Bars of measured and predicted per row, with the per-row error written above each pair."""
    ok = rows[rows.status == "ok"].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(ok) + 2), 4.0))
    x = np.arange(len(ok))
    ax.bar(x - 0.2, ok.measured, width=0.4, label="measured", color="#4c72b0")
    ax.bar(x + 0.2, ok.predicted, width=0.4, label="rapidllm", color="#dd8452")
    for xi, (p, e) in enumerate(zip(ok.predicted, ok.error_pct)):
        ax.annotate(f"{e:+.0f}%", (xi + 0.2, p), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, ok.label, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel(unit)
    mape = float(np.mean(np.abs(ok.error_pct))) if len(ok) else float("nan")
    ax.set_title(f"{title}: MAPE {mape:.1f}% over {len(ok)} rows")
    ax.legend()
    return save(fig, stem)

"""One-glance accuracy summary: MAPE per regime group and overall against the RAPID-LLM paper's figures."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.figures.style import plt, save

BASES = {"full": ("full basis (every published metric)", "#dd8452"),
         "paper": ("paper basis (the paper's one quantity per case)", "#4c72b0")}


def accuracy_summary(errors: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Grouped bars from errors.csv: all-rows MAPE per group with a paper target, and overall, on both
    bases; calibration (^) and held-out (v) MAPE as markers; the paper's MAPE as a black tick."""
    scored = errors[errors.scope.isin(["group", "overall"]) & errors.paper_mape_pct.notna()]
    names = list(dict.fromkeys(scored.sort_values(["scope", "name"], kind="stable").name))
    x = np.arange(len(names))
    fig, ax = plt.subplots(layout="constrained", figsize=(max(6.0, 1.3 * len(names) + 2), 4.2))
    width = 0.38
    for k, (basis, (label, color)) in enumerate(BASES.items()):
        sel = scored[scored.basis == basis].set_index(["name", "split"]).mape_pct
        offset = (k - 0.5) * width
        heights = [sel.get((n, "all"), np.nan) for n in names]
        ax.bar(x + offset, heights, width=width, color=color, label=label)
        for xi, h in zip(x + offset, heights):
            if np.isfinite(h):
                ax.annotate(f"{h:.1f}", (xi, 0.3), ha="center", va="bottom", fontsize=7, color="white")
        for split, marker in (("calibration", "^"), ("held_out", "v")):
            ax.plot(x + offset, [sel.get((n, split), np.nan) for n in names], marker, color="k", ms=4,
                    label=f"{split.replace('_', '-')} rows" if k == 0 else None, ls="none")
    target = scored.groupby("name").paper_mape_pct.first()
    ax.hlines([target[n] for n in names], x - 2 * width / 2 - 0.05, x + 2 * width / 2 + 0.05, colors="k", lw=2,
              label="RAPID-LLM paper")
    ax.set_xticks(x, [n.replace("_", "\n", 1) for n in names], fontsize=8)
    ax.set_ylabel("MAPE [%]")
    ax.set_title("Validation accuracy per regime against the RAPID-LLM paper (results/validation/errors.csv)", fontsize=9)
    ax.legend(fontsize=7, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    return save(fig, stem)

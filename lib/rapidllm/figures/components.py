"""Component figures: GEMM model ablation (paper Fig 10), nccl-tests bus bandwidth, nanotron memory."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.figures.style import plt, save
from rapidllm.validate.metrics import mape, mape_of


def gemm_ablation(errors: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Time-weighted and plain MAPE of the roofline vs the tile model, per reference set and dtype."""
    groups = [(s, d) for s, d in errors[["set", "dtype"]].drop_duplicates().itertuples(index=False)]
    table = errors.set_index(["set", "dtype", "model"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=False)
    x = np.arange(len(groups))
    for ax, metric, title in ((axes[0], "mape_time_weighted", "time-weighted MAPE"), (axes[1], "mape", "MAPE")):
        for offset, model, color in ((-0.2, "roofline", "#8c8c8c"), (0.2, "tile", "#dd8452")):
            vals = [100 * table.loc[(s, d, model), metric] for s, d in groups]
            ax.bar(x + offset, vals, width=0.4, label=model, color=color)
            for xi, v in zip(x, vals):
                ax.annotate(f"{v:.1f}", (xi + offset, v), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, [f"{s}\n{d}" for s, d in groups], fontsize=8)
        ax.set_ylabel("%")
        ax.set_title(title)
    axes[0].legend()
    fig.suptitle("GEMM operator model vs measured kernels (A100 Nsight Compute, H100 XLA)")
    return save(fig, stem)


def collective_busbw(rows: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Bus bandwidth vs message size per device: nccl-tests on one 8-GPU NVSwitch node against the simulator."""
    devices = list(dict.fromkeys(rows.device))
    fig, axes = plt.subplots(1, len(devices), figsize=(6 * len(devices), 4), squeeze=False)
    for ax, device in zip(axes[0], devices):
        d = rows[rows.device == device]
        ax.plot(d.bytes, d.measured_busbw / 1e9, "o-", label="nccl-tests (measured)")
        ax.plot(d.bytes, d.predicted_busbw / 1e9, "s--", label="rapidllm simulator")
        scored = d[d.scored]
        scored_mape = mape_of(scored.error_pct)
        ax.set(xscale="log", xlabel="all-reduce size (bytes)", ylabel="bus bandwidth (GB/s)",
               title=f"8x {device}: MAPE {scored_mape:.1f}% for >= 1 MiB ({len(scored)} rows)")
        ax.legend()
    return save(fig, stem)


def memory_scatter(rows: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Predicted vs measured allocated memory of the nanotron Success rows (log-log, per model family)."""
    ok = rows[rows.status == "Success"]
    fig, ax = plt.subplots(figsize=(5, 5))
    for fam, g in ok.groupby("family"):
        ax.scatter(g.measured_gib, g.predicted_gib, s=12, label=f"{fam:g}B")
    lo, hi = 0.8 * ok.measured_gib.min(), 1.2 * ok.measured_gib.max()
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="measured max_memory_allocated (GiB)", ylabel="predicted (GiB)",
           title=f"nanotron H100 memory: MAPE {mape(ok.predicted_gib, ok.measured_gib):.1f}% ({len(ok)} rows)")
    ax.legend(title="model", fontsize=7)
    return save(fig, stem)

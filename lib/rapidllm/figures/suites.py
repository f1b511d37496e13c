"""Predicted vs measured per validation suite (paper Figs 6-9 style), with published peers beside ours."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.figures.style import plt, save
from rapidllm.validate.metrics import mape_of, on_basis

UNITS = {"step_time_s": "s", "e2e_latency_s": "s", "ttft_s": "s", "itl_s": "s", "tokens_per_s": "tokens/s",
         "mfu": "MFU", "hfu": "HFU", "peak_memory_bytes": "B"}


def _mape(ok: pd.DataFrame) -> float:
    return mape_of(ok.error_pct)


def _pairs(ax, ok: pd.DataFrame, metric: str) -> None:
    x = np.arange(len(ok))
    ax.bar(x - 0.2, ok.measured, width=0.4, label="measured", color="#4c72b0")
    ax.bar(x + 0.2, ok.predicted, width=0.4, label="rapidllm", color="#dd8452")
    cal = ok.calibration.astype(bool).to_numpy()
    for xi, (p, e, c) in enumerate(zip(ok.predicted, ok.error_pct, cal)):
        ax.annotate(f"{e:+.0f}%" + ("*" if c else ""), (xi + 0.2, p), ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x, ok.label, rotation=60, ha="right", fontsize=6)
    ax.set_ylabel(f"{metric} [{UNITS.get(metric, '')}]")
    if metric in ("step_time_s", "e2e_latency_s", "ttft_s", "tokens_per_s") and len(ok) and \
            ok.measured.max() / max(ok.measured.min(), 1e-30) > 50:
        ax.set_yscale("log")
    ax.set_title(f"{metric}: MAPE {_mape(ok):.1f}% over {len(ok)} (* = calibration row)", fontsize=8)


def _peers(ax, ours: float, paper: dict) -> None:
    names, values, colors = ["rapidllm (paper basis)"], [ours], ["#dd8452"]
    if "mape_pct" in paper:
        names.append("RAPID-LLM (paper)"), values.append(paper["mape_pct"]), colors.append("#55a868")
    for k, v in paper.get("peers", {}).items():
        names.append(k), values.append(v), colors.append("#8c8c8c")
    y = np.arange(len(names))
    ax.barh(y, values, color=colors)
    for yi, v in zip(y, values):
        ax.annotate(f"{v:.1f}%", (v, yi), va="center", fontsize=7, xytext=(2, 0), textcoords="offset points")
    ax.set_yticks(y, names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("MAPE [%]")
    ax.set_title("published peers (same regime)", fontsize=8)


def predicted_vs_measured(rows: pd.DataFrame, title: str, unit: str | None, stem: str | Path,
                          paper: dict | None = None, max_bars: int = 60) -> list[Path]:
    """One panel of measured/predicted bar pairs per metric (signed error above each pair) and a panel of
    MAPE beside the paper's RAPID-LLM figure and the published peers, compared on the paper's basis (the
    quantity it scores per case). Suites with more rows than `max_bars` get a predicted-vs-measured scatter
    instead of bars."""
    ok = rows[rows.status == "ok"].dropna(subset=["predicted"]).reset_index(drop=True)
    metrics = list(dict.fromkeys(ok.metric)) if "metric" in ok and len(ok) else ["value"]
    widest = max([len(ok[ok.metric == m]) for m in metrics] + [1]) if "metric" in ok else len(ok)
    width = max(7.0, min(0.3 * widest, 18.0) + 4.0)
    fig, axes = plt.subplots(1, len(metrics) + 1, layout="constrained", figsize=(width * (1 + 0.6 * (len(metrics) - 1)), 4.2),
                             gridspec_kw={"width_ratios": [3] * len(metrics) + [1.4]})
    for ax, metric in zip(axes[:-1], metrics):
        sel = ok[ok.metric == metric].reset_index(drop=True) if "metric" in ok else ok
        if len(sel) > max_bars:
            ax.loglog(sel.measured, sel.predicted, ".", ms=3, color="#dd8452")
            lo, hi = float(min(sel.measured.min(), sel.predicted.min())), float(max(sel.measured.max(), sel.predicted.max()))
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_xlabel(f"measured {metric}"), ax.set_ylabel(f"predicted {metric}")
            ax.set_title(f"{metric}: MAPE {_mape(sel):.1f}% over {len(sel)}", fontsize=8)
        else:
            _pairs(ax, sel, metric)
    axes[0].legend(fontsize=7)
    full, on_paper = on_basis(ok, "full"), on_basis(ok, "paper")
    _peers(axes[-1], _mape(on_paper), paper or {})
    skipped = int((rows.status != "ok").sum())
    basis = "" if len(on_paper) == len(ok) == len(full) else \
        f"; paper basis {_mape(on_paper):.1f}% over {len(on_paper)}"
    fig.suptitle(f"{title}: MAPE {_mape(full):.1f}% over {len(full)} entries{basis}"
                 + (f" ({skipped} row{'s' * (skipped != 1)} not scored: see the suite CSV)" if skipped else ""),
                 fontsize=9)
    return save(fig, stem)

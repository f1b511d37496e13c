"""Figures of the paper's case studies (§6.1-6.4, Figs 12-15): one function per study, each drawn from the
study's sweep summary and its table (rapidllm.validate.case_studies)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.figures.style import plt, save
from rapidllm.validate.case_studies import (BASE_3D, BASE_25D, FC, FC_TOTAL, HDR, MESH, NDR, TORUS, fault_slowdowns,
                                            feasible)

FABRIC_LABEL = {NDR: "NDR 400 Gb/s per GPU", HDR: "HDR 200 Gb/s per GPU"}
FABRIC_COLOR = {NDR: "#4c72b0", HDR: "#dd8452"}
FAULT_COLOR = {"soft-25": "#55a868", "hard": "#8172b2", "soft-75": "#c44e52"}


def superpod(summary: pd.DataFrame, table: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Fig 12 analog: best mapping's step time per GPU count on each fabric (with ideal scaling from the
    smallest count), scaling efficiency, and every feasible mapping's step time relative to NDR's best."""
    ok = feasible(summary)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    for net in (NDR, HDR):
        t = table[(table.network == net) & table.best_step_time_s.notna()].sort_values("world")
        ax.plot(t.world, t.best_step_time_s, "o-", color=FABRIC_COLOR[net], label=FABRIC_LABEL[net])
        for _, r in t.iterrows():
            if net == HDR:
                ax.annotate(f"{r.best_over_ndr:.2f}x", (r.world, r.best_step_time_s), fontsize=7,
                            textcoords="offset points", xytext=(4, 6))
    first = table[(table.network == NDR) & table.best_step_time_s.notna()].sort_values("world").iloc[0]
    w = np.array(sorted(table.world.unique()))
    ax.plot(w, first.best_step_time_s * first.world / w, "k:", lw=1, label="ideal (from smallest)")
    ax.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="best step time (s)",
           title="best mapping per GPU count (HDR / NDR annotated)")
    _gpu_ticks(ax, w)
    ax.legend(fontsize=8)
    ax = axes[1]
    for net in (NDR, HDR):
        t = table[(table.network == net) & table.scaling_efficiency.notna()].sort_values("world")
        ax.plot(t.world, t.scaling_efficiency, "o-", color=FABRIC_COLOR[net], label=FABRIC_LABEL[net])
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    ax.set(xscale="log", xlabel="GPUs", ylabel="scaling efficiency",
           title="scaling efficiency vs the smallest GPU count")
    _gpu_ticks(ax, w)
    ax = axes[2]
    best_ndr = table[table.network == NDR].set_index("world").best_step_time_s
    for k, net in enumerate((NDR, HDR)):
        f = ok[ok.network == net]
        x = np.log2(f.world) + (k - 0.5) * 0.3
        jitter = (np.arange(len(f)) % 7 - 3) * 0.02
        ax.scatter(x + jitter, f.step_time_s / f.world.map(best_ndr), s=5, alpha=0.5, color=FABRIC_COLOR[net],
                   label=f"{FABRIC_LABEL[net]} ({len(f)} feasible)")
    ax.set(yscale="log", xlabel="GPUs", ylabel="step time / NDR's best", title="every memory-feasible mapping")
    ax.set_xticks(np.log2(w), [str(x) for x in w])
    ax.legend(fontsize=8)
    fig.suptitle("§6.1 Llama-3.1-405B training on DGX H100 SuperPOD-style clusters: NDR vs HDR inter-node fabric")
    return save(fig, stem)


def _gpu_ticks(ax: "plt.Axes", w: np.ndarray) -> None:
    """GPU counts as plain tick labels on a log axis (no minor-tick clutter)."""
    ax.minorticks_off()
    ax.set_xticks(w, [str(x) for x in w])


def faults(summary: pd.DataFrame, table: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Fig 13 analog: slowdown of every fault placement per layout and fault kind (box + points), layouts
    ordered by fault-free step time (printed under each)."""
    f = fault_slowdowns(summary)
    free = table.drop_duplicates("config").set_index("config").fault_free_step_time_s.sort_values()
    kinds = ["soft-25", "hard", "soft-75"]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    for i, config in enumerate(free.index):
        for k, kind in enumerate(kinds):
            vals = f[(f.config == config) & (f.meta_fault_kind == kind)].slowdown_pct.to_numpy()
            x = i + (k - 1) * 0.27
            ax.boxplot([vals], positions=[x], widths=0.22, showfliers=False, patch_artist=True,
                       boxprops={"facecolor": FAULT_COLOR[kind], "alpha": 0.35},
                       medianprops={"color": "k"})
            ax.scatter(np.full(len(vals), x), vals, s=6, color=FAULT_COLOR[kind],
                       label=kind if i == 0 else None, zorder=3)
            ax.plot([x], [vals.mean()], marker="D", color="k", ms=3, zorder=4)
    ax.set_xticks(range(len(free)), [f"{c}\n{s:.1f} s fault-free" for c, s in free.items()], fontsize=8)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0)
    ax.set(ylabel="slowdown vs fault-free (%)",
           title="§6.2 Llama-3.1-70B, 96 A100, 2D torus (TP x CP) + chain (DP, PP): one fault on each torus cable\n"
                 "soft-25 / soft-75: 25% / 75% of its bandwidth lost; hard: removed, traffic rerouted; diamond = mean")
    ax.legend(title="fault", fontsize=8)
    return save(fig, stem)


def topology(summary: pd.DataFrame, table: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Fig 14 analog: speedup of each richer fabric's best layout over the mesh's best, per model and mode
    (a missing bar: no memory-feasible layout), with the best layouts printed on the bars."""
    groups = list(table[["model", "mode"]].drop_duplicates().itertuples(index=False, name=None))
    nets = [(TORUS, "2D torus, same link bandwidth", "#55a868"),
            (FC, "fully connected, matched per-GPU injection", "#4c72b0"),
            (FC_TOTAL, "fully connected, matched mesh total", "#8172b2")]
    t = table.set_index(["model", "mode", "network"])
    fig, ax = plt.subplots(figsize=(max(12.0, 2.3 * len(groups)), 4.8))
    x = np.arange(len(groups))
    for k, (net, label, color) in enumerate(nets):
        vals = [t.speedup_over_mesh.get((m, d, net), np.nan) for m, d in groups]
        ax.bar(x + (k - 1) * 0.27, np.nan_to_num(vals), width=0.25, color=color, label=label)
        for xi, v, (m, d) in zip(x, vals, groups):
            if np.isfinite(v):
                ax.annotate(f"{v:.2f}x  {t.best_mapping.get((m, d, net), '')}", (xi + (k - 1) * 0.27, 0.05),
                            ha="center", va="bottom", fontsize=7, rotation=90, color="white")
    for xi, (m, d) in zip(x, groups):
        if not np.isfinite(t.get("best_time_s", pd.Series(dtype=float)).get((m, d, MESH), np.nan)):
            ax.annotate("no memory-feasible\nlayout on 20 x 80 GB", (xi, 0.05), ha="center", fontsize=7)
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    ax.set_xticks(x, [f"{m} {d}\nmesh best:\n{t.best_mapping.get((m, d, MESH), '-')}" for m, d in groups], fontsize=8)
    ax.set_ylim(0, max(1.3, 1.15 * float(np.nanmax(table.speedup_over_mesh.to_numpy(dtype=float)))))
    ax.set(ylabel="speedup over the 4 x 5 mesh (best layouts)",
           title="§6.3 20 H100-class GPUs on a wafer: topology vs the 2D mesh (750 GB/s links); "
                 "training: step time, inference: request latency")
    ax.legend(fontsize=8, loc="upper center", ncol=3)
    return save(fig, stem)


LEFT = ["3d-160gb", "3d-2x-fabric", "3d-160gb-2x-fabric"]
RIGHT = ["3d-throttled-73", "3d-4x-latency", "3d-skew-2x"]


def hbm(summary: pd.DataFrame, table: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Fig 15 analog: best-layout throughput of each variant over the 80 GB 2.5D H100's best, per GPU count;
    left the design choices that complement the 3D stack, right the non-idealities (both with the 3D
    baseline)."""
    worlds = sorted(table.world.unique())
    t = table.set_index(["variant", "world"]).over_h100_2_5d
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
    for ax, variants, title in ((axes[0], [BASE_3D, *LEFT], "design choices with the 3D stack"),
                                (axes[1], [BASE_3D, *RIGHT], "non-idealities of the 3D baseline")):
        x = np.arange(len(worlds))
        width = 0.8 / len(variants)
        for k, (v, c) in enumerate(zip(variants, colors)):
            vals = [t.get((v, w), np.nan) for w in worlds]
            ax.bar(x + (k - (len(variants) - 1) / 2) * width, vals, width=width, color=c, label=v)
            for xi, val in zip(x, vals):
                ax.annotate(f"{val:.2f}", (xi + (k - (len(variants) - 1) / 2) * width, val), ha="center",
                            va="bottom", fontsize=6)
        ax.axhline(1.0, color="k", lw=0.8, ls=":")
        ax.set_xticks(x, [str(w) for w in worlds])
        ax.set(xlabel="GPUs", title=title)
        ax.legend(fontsize=7)
    axes[0].set_ylabel(f"throughput / best {BASE_25D} (80 GB)")
    fig.suptitle("§6.4 GLM-4.5-Air inference on H100-like GPUs with 3D-stacked HBM (3x bandwidth), hierarchical rings")
    return save(fig, stem)


DRAW = {"superpod": superpod, "faults": faults, "topology": topology, "hbm": hbm}

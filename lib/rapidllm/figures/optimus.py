"""Figures of the Optimus-extension studies (docs/optimus-studies.md), one function per table."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.figures.style import plt, save

COLORS = {"a100-sxm4-80gb": "#4c72b0", "h100-sxm5-80gb": "#dd8452", "b200": "#55a868"}


def flash_gpt2(t: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Predicted against published FlashAttention speedups for GPT-2 on 8 A100s."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    rows = []
    for r in t.sort_values(["model", "seq_len"]).itertuples(index=False):
        rows.append((f"{r.model.split('-')[1]} {r.seq_len // 1024}k\nsame length", r.speedup_flash,
                     r.published_speedup_same_length))
        rows.append((f"{r.model.split('-')[1]} {r.seq_len // 1024}k\nvs Megatron 1k", r.speedup_vs_megatron_1k,
                     r.published_speedup_vs_megatron_1k))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [p for _, p, _ in rows], 0.4, label="rapidllm", color="#dd8452")
    ax.bar(x + 0.2, [m for _, _, m in rows], 0.4, label="FlashAttention paper (Tables 2, 4)", color="#4c72b0")
    ax.set_xticks(x, [lab for lab, _, _ in rows], fontsize=6, rotation=90)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set(ylabel="speedup over Megatron (unfused) attention",
           title="GPT-2 training on 8x A100: FlashAttention speedup")
    ax.legend(fontsize=8)
    return save(fig, stem)


def flash_batch(t: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Speedup over unfused attention against the per-GPU micro-batch on each GPU generation (full
    recompute, where every micro-batch fits): FA-2 solid, FA-3 dashed."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    full = t[t.recompute == "full"]
    for hw, g in full.groupby("hardware"):
        g = g.sort_values("micro_batch")
        ax.plot(g.micro_batch, g.speedup_flash, "o-", color=COLORS.get(hw, "k"), label=f"{hw} FA-2")
        if "speedup_flash3" in g and hw != "a100-sxm4-80gb":
            ax.plot(g.micro_batch, g.speedup_flash3, "s--", color=COLORS.get(hw, "k"), label=f"{hw} FA-3")
    ax.set(xscale="log", xlabel="micro-batch per GPU (sequences of 1k)", ylabel="step speedup over unfused",
           title="GPT-2 medium, 8 GPUs, full recompute")
    ax.legend(fontsize=7)
    return save(fig, stem)


def flash_long(t: pd.DataFrame, kernels: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Left: step-time speedups at 8k-32k. Right: absolute kernel times against the published H100 kernels."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for hw, g in t.groupby("hardware"):
        g = g.sort_values("seq_len")
        for impl, style in (("flash", "o-"), ("flash3", "s--")):
            col = f"speedup_{impl}"
            if col in g and g[col].notna().any():
                a.plot(g.seq_len, g[col], style, color=COLORS.get(hw, "k"), label=f"{hw} {impl}")
    a.set(xscale="log", xlabel="sequence length", ylabel="step speedup over unfused (+selective recompute)",
          title="GPT-2 medium training, 8 GPUs")
    a.set_xticks(sorted(t.seq_len.unique()), [f"{s // 1024}k" for s in sorted(t.seq_len.unique())])
    a.minorticks_off()
    a.legend(fontsize=7)
    k = kernels.reset_index(drop=True)
    x = np.arange(len(k))
    b.bar(x - 0.2, k.predicted_s * 1e3, 0.4, label="rapidllm", color="#dd8452")
    b.bar(x + 0.2, k.measured_s * 1e3, 0.4, label="published (FA-3 paper Figs 5-6)", color="#4c72b0")
    b.set_xticks(x, [f"{kern}\n{pas[:3]}{' causal' if causal else ''}\n{s // 1024}k"
                     for kern, pas, causal, s in zip(k.kernel, k["pass"], k.causal, k.seq_len)], fontsize=6,
                 rotation=90)
    b.set(yscale="log", ylabel="kernel time (ms)", title="H100 attention kernels, 16 heads x 128, batch x seq = 16k")
    b.legend(fontsize=7)
    return save(fig, stem)


def moe(t: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Left: compute time per step against the number of experts. Right: all-to-all share against bandwidth."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    tok = t[t.dispatcher == "alltoall"]
    g = tok.groupby("experts").compute_time_s.mean()
    a.plot(g.index, g.values, "o-")
    a.set(xscale="log", xlabel="experts", ylabel="compute time per step (s)", ylim=(0, 1.2 * g.max()),
          title="compute stays flat as experts grow (top-1)")
    for (disp, e), g in t.groupby(["dispatcher", "experts"]):
        g = g.sort_values("inter_node_gbps")
        b.plot(g.inter_node_gbps, 100 * g.a2a_share, "o-" if disp == "alltoall" else "s--",
               color=plt.cm.viridis(np.log2(e) / 7.5), label=f"E={e} {disp}")
    b.set(xscale="log", xlabel="inter-node bandwidth per GPU (Gb/s)", ylabel="exposed all-to-all share of step (%)",
          title="64 A100s, 1.3B+MoE, ep = min(E, 64)")
    b.legend(fontsize=6, ncol=2)
    return save(fig, stem)


def topology(t: pd.DataFrame, stem: str | Path) -> list[Path]:
    """TTFT and inter-token latency per topology and batch at equal off-GPU bandwidth."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    tops = list(dict.fromkeys(t.topology))
    batches = sorted(t.batch.unique())
    x = np.arange(len(batches))
    w = 0.8 / len(tops)
    panels = ((axes[0], "ttft_s", "time to first token (s)"), (axes[1], "itl_s", "inter-token latency (ms)"))
    for ax, col, name in panels:
        for i, top in enumerate(tops):
            g = t[t.topology == top].set_index("batch").reindex(batches)
            scale = 1e3 if col == "itl_s" else 1.0
            ax.bar(x + (i - (len(tops) - 1) / 2) * w, g[col] * scale, w, label=top)
        ax.set_xticks(x, [f"batch {b}" for b in batches])
        ax.set(ylabel=name)
    axes[0].legend(fontsize=7)
    fig.suptitle("Llama-2-70B inference, TP 8 on 8 A100s, 300 GB/s off-GPU per GPU in every topology")
    return save(fig, stem)


def cost_designs(t: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Time against package cost for every HBM design, training and inference, Pareto front marked."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (wl, g) in zip(axes, t.groupby("workload", sort=False)):
        ok = g[g.status == "ok"]
        ax.scatter(ok.package_usd, ok.time_s, c="#4c72b0", zorder=3)
        front = ok[ok.pareto].sort_values("package_usd")
        ax.plot(front.package_usd, front.time_s, "r--", lw=1, label="Pareto front")
        for r in ok.itertuples(index=False):
            ax.annotate(r.label, (r.package_usd, r.time_s), fontsize=7, textcoords="offset points",
                        xytext=(3, -10) if r.label == "a100" else (3, 3))
        for r in g[g.status != "ok"].itertuples(index=False):
            ax.axvline(r.package_usd, color="0.8", lw=0.8)
            ax.annotate(f"{r.label}: OOM", (r.package_usd, ax.get_ylim()[0]), fontsize=6, rotation=90, color="0.5")
        unit = "step" if wl == "training" else "batch of 8 requests"
        ax.set(xlabel="package cost (USD)", ylabel=f"time per {unit} (s)",
               title=f"GPT-3 175B {wl} ({'1024 GPUs' if wl == 'training' else '8 GPUs, TP 8'})")
        ax.legend(fontsize=7)
    fig.suptitle("A100-like designs with 2-8 HBM2e stacks")
    return save(fig, stem)


def tornado(t: pd.DataFrame, stem: str | Path, top: int = 15) -> list[Path]:
    """The A100 unit cost at -25% and +25% of each cost input, largest swing on top."""
    g = t.head(top).iloc[::-1]
    base = float(t.baseline.iloc[0])
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(g) + 1.2))
    y = np.arange(len(g))
    ax.barh(y, g.low - base, left=base, color="#4c72b0", label="input -25%")
    ax.barh(y, g.high - base, left=base, color="#dd8452", label="input +25%")
    ax.axvline(base, color="k", lw=0.8)
    ax.set_yticks(y, g.parameter, fontsize=7)
    stable = t.best_design_low.nunique() == 1 and (t.best_design_low == t.best_design_high).all()
    ax.set(xlabel="A100 unit cost (USD, package + NRE per unit)",
           title=f"Sensitivity of the A100 unit cost ({base:,.0f} USD); best design unchanged: "
                 f"{'yes' if stable else 'no'}")
    ax.legend(fontsize=7)
    return save(fig, stem)

"""The Optimus-extension studies (docs/optimus-studies.md): pipeline summaries -> comparison tables.

Each function takes a study's `summary.parquet` and `cases.parquet` (the inlined case of every row, for
inputs the flat columns do not carry: attention kernel, network, the hardware's cost section) and returns
one table whose every number sits beside its inputs, plus the published value where there is one.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.cost.config import cost_from_mapping
from rapidllm.cost.package import package_cost
from rapidllm.cost.price import add_cost_columns
from rapidllm.cost.sensitivity import perturbed, tornado
from rapidllm.ops.attention import attention_backward, attention_forward
from rapidllm.units import parse_quantity
from rapidllm.validate.kernels import load_hardware


def load_study(summary: str | Path, cases: str | Path) -> pd.DataFrame:
    """Summary rows with the inlined case mapping of each (`case`) and its attention kernel (`impl`)."""
    s = pd.read_parquet(summary)
    c = pd.read_parquet(cases)[["index", "case_json"]]
    df = s.merge(c, on="index", how="left")
    df["case"] = [json.loads(j) for j in df.pop("case_json")]
    df["impl"] = [c.get("attention_impl", "flash") for c in df.case]
    return df


def _pairs(df: pd.DataFrame, keys: list[str], base: str = "naive") -> pd.DataFrame:
    """One row per `keys` with each kernel's status, step time and tokens/s side by side, and speedups over
    `base` (NaN where either side has no prediction: infeasible rows keep their status)."""
    wide = df.set_index([*keys, "impl"])[["status", "step_time_s", "tokens_per_s"]].unstack("impl")
    wide.columns = [f"{v}_{impl}" for v, impl in wide.columns]
    wide = wide.reset_index()
    for impl in sorted(set(df.impl) - {base}):
        wide[f"speedup_{impl}"] = wide[f"step_time_s_{base}"] / wide[f"step_time_s_{impl}"]
    return wide


def flash_gpt2(summary: str | Path, cases: str | Path, reference: str | Path) -> pd.DataFrame:
    """GPT-2 small/medium: FA-2 over unfused attention at the same length, and FlashAttention at L over
    Megatron at 1k per token trained (the FlashAttention paper's Table 4 form), against the published."""
    df = load_study(summary, cases)
    t = _pairs(df, ["model", "hardware", "seq_len", "micro_batch", "global_batch", "dp"])
    ref = pd.read_csv(reference)
    days = ref.set_index(["model", "seq_len", "implementation"]).training_days
    t["published_speedup_same_length"] = [days.get((m, s, "megatron"), np.nan) / days.get((m, s, "flash"), np.nan)
                                          for m, s in zip(t.model, t.seq_len)]
    base_tps = t[t.seq_len == 1024].set_index("model").tokens_per_s_naive
    t["speedup_vs_megatron_1k"] = t.tokens_per_s_flash / t.model.map(base_tps)
    t["published_speedup_vs_megatron_1k"] = [days.get((m, 1024, "megatron"), np.nan) / days.get((m, s, "flash"), np.nan)
                                             for m, s in zip(t.model, t.seq_len)]
    for kind in ("same_length", "vs_megatron_1k"):
        pred = t.speedup_flash if kind == "same_length" else t.speedup_vs_megatron_1k
        t[f"error_pct_{kind}"] = 100.0 * (pred / t[f"published_speedup_{kind}"] - 1.0)
    return t


def flash_sweep(summary: str | Path, cases: str | Path) -> pd.DataFrame:
    """Speedup of each fused kernel over unfused attention per device, length, micro-batch and (when the
    study crosses it for both kernels alike) recompute; otherwise each kernel's recompute is a column."""
    df = load_study(summary, cases)
    keys = ["hardware", "network", "model", "seq_len", "micro_batch", "global_batch"]
    per_impl = df.groupby("impl").recompute.agg(lambda r: tuple(sorted(set(r))))
    if len(set(per_impl)) == 1:
        return _pairs(df, [*keys, "recompute"])
    out = _pairs(df, keys)
    for impl, modes in per_impl.items():
        out[f"recompute_{impl}"] = "/".join(modes)
    return out


KERNEL = {"forward": attention_forward, "backward": attention_backward}


def flash_kernels(reference: str | Path, extrapolate_to: tuple[int, ...] = (32768,)) -> pd.DataFrame:
    """Absolute attention kernel times on H100 (datasheet peaks, as the kernel tests) against the published
    FA-2 / FA-3 measurements; the published rates become times as FLOPs / rate. Rows at `extrapolate_to`
    lengths have no measurement (published figures stop at 16k): predictions only."""
    hw = load_hardware("h100-sxm5-80gb")
    ref = pd.read_csv(reference)
    extra = ref[ref.seq_len == ref.seq_len.max()].copy()
    rows = [ref.assign(tflops=ref.tflops.astype(float))]
    for s in extrapolate_to:
        rows.append(extra.assign(seq_len=s, batch=1, tflops=np.nan))
    t = pd.concat(rows, ignore_index=True)
    out = []
    for r in t.to_dict("records"):
        p = KERNEL[r["pass"]](hw, int(r["batch"]), int(r["heads"]), int(r["heads"]), int(r["seq_len"]),
                              int(r["seq_len"]), int(r["head_dim"]), int(r["head_dim"]), causal=bool(r["causal"]),
                              impl=r["kernel"])
        measured = p.flops / (r["tflops"] * 1e12) if not math.isnan(r["tflops"]) else np.nan
        out.append({"device": hw.name, "kernel": r["kernel"], "pass": r["pass"], "causal": bool(r["causal"]),
                    "seq_len": r["seq_len"], "batch": r["batch"], "heads": r["heads"], "head_dim": r["head_dim"],
                    "flops": p.flops, "hbm_bytes": p.hbm_bytes, "kv_reread_bytes": p.kv_reread_bytes,
                    "predicted_s": p.time_s, "measured_s": measured, "predicted_tflops": p.flops / p.time_s / 1e12,
                    "measured_tflops": r["tflops"], "error_pct": 100.0 * (p.time_s / measured - 1.0)})
    return pd.DataFrame(out)


def _inter_node_gbps(case: dict) -> float:
    """Per-GPU bandwidth of the outermost network dimension, Gb/s per direction."""
    return parse_quantity(case["network"]["dimensions"][-1]["link_bandwidth"], "bandwidth") * 8 / 1e9


def moe(summary: str | Path, cases: str | Path) -> pd.DataFrame:
    """Compute time and the exposed-communication share of the step (tp = pp = 1, DP reduction overlapped:
    the exposed part is the EP all-to-all) per experts, inter-node bandwidth and all-to-all volume model."""
    df = load_study(summary, cases)
    df["experts"] = [c["model"]["moe"]["experts"] for c in df.case]
    df["capacity_factor"] = [c["model"]["moe"].get("capacity_factor", 1.0) for c in df.case]
    df["dispatcher"] = [c["parallelism"].get("moe_dispatcher", "alltoall") for c in df.case]
    df["inter_node_gbps"] = [_inter_node_gbps(c) for c in df.case]
    df["a2a_share"] = df.exposed_comm_s / df.step_time_s
    cols = ["model", "hardware", "network", "world", "ep", "experts", "capacity_factor", "dispatcher",
            "inter_node_gbps", "seq_len", "global_batch", "micro_batch", "status", "step_time_s", "compute_time_s",
            "exposed_comm_s", "bubble_s", "a2a_share", "tokens_per_s"]
    return df[cols].sort_values(["dispatcher", "experts", "inter_node_gbps"]).reset_index(drop=True)


def topology(summary: str | Path, cases: str | Path) -> pd.DataFrame:
    """Inference latency per intra-node topology at equal off-GPU bandwidth."""
    df = load_study(summary, cases)
    dims = [c["network"]["dimensions"][0] for c in df.case]
    df["topology"] = [d["topology"] for d in dims]
    df["link_gbytes_per_s"] = [parse_quantity(d["link_bandwidth"], "bandwidth") / 1e9 for d in dims]
    df["links_per_gpu"] = df.topology.map({"ring": 2, "mesh": 4, "switch": 1, "fully_connected": 7})
    df["off_gpu_gbytes_per_s"] = df.link_gbytes_per_s * df.links_per_gpu
    cols = ["model", "hardware", "network", "topology", "links_per_gpu", "link_gbytes_per_s", "off_gpu_gbytes_per_s",
            "tp", "batch", "prompt_tokens", "output_tokens", "status", "ttft_s", "itl_s", "e2e_latency_s",
            "tokens_per_s"]
    return df[cols].reset_index(drop=True)


def _with_cost(df: pd.DataFrame) -> pd.DataFrame:
    """Cost columns from each row's own (inline) hardware cost section."""
    costs = {c["hardware"]["name"]: cost_from_mapping(c["hardware"], c["hardware"]["name"]) for c in df.case}
    df = add_cost_columns(df, costs)
    pkg = {n: package_cost(h.package) for n, h in costs.items()}
    df["package_usd"] = df.hardware.map({n: b.package_usd for n, b in pkg.items()})
    df["unit_usd"] = df.hardware.map({n: b.unit_usd for n, b in pkg.items()})
    df["interposer_mm2"] = df.hardware.map({n: h.package.interposer_area_mm2 for n, h in costs.items()})
    return df


def pareto(cost: np.ndarray, time: np.ndarray, rel: float = 1e-9) -> np.ndarray:
    """True where no other point is at most as costly and at most as slow, and better in one (NaN: False).
    Values within `rel` of each other count as equal: two designs with the same memory system, written in
    different units, time the same up to the last bits, which must not put the dearer one on the front."""
    ok = ~(np.isnan(cost) | np.isnan(time))
    front = np.zeros(len(cost), bool)
    for i in np.flatnonzero(ok):
        c_tol, t_tol = rel * abs(cost[i]), rel * abs(time[i])
        dominated = (ok & (cost <= cost[i] + c_tol) & (time <= time[i] + t_tol)
                     & ((cost < cost[i] - c_tol) | (time < time[i] - t_tol)))
        front[i] = not dominated.any()
    return front


def cost_designs(train: tuple[str | Path, str | Path], infer: tuple[str | Path, str | Path]) -> pd.DataFrame:
    """Time per training step and per inference batch against package cost for every HBM design, the
    Pareto front of each, and `cost_x_time`: unit cost x the geometric mean of the two times relative to
    the A100 (training and inference weighted equally; lower is better)."""
    frames = []
    for workload, (summary, cases) in (("training", train), ("inference", infer)):
        df = _with_cost(load_study(summary, cases))
        df["workload"] = workload
        df["time_s"] = df.step_time_s if workload == "training" else df.e2e_latency_s
        df["stacks"] = [c["hardware"]["cost"]["package"]["hbm"]["stacks"] for c in df.case]
        df["sites"] = [c["hardware"]["cost"]["package"]["hbm"]["sites"] for c in df.case]
        df["hbm_gib"] = [parse_quantity(c["hardware"]["hbm_capacity"], "bytes") / 2**30 for c in df.case]
        df["hbm_tbytes_per_s"] = [parse_quantity(c["hardware"]["hbm_bandwidth"], "bandwidth") / 1e12 for c in df.case]
        df["pareto"] = pareto(df.package_usd.to_numpy(float), df.time_s.to_numpy(float))
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    ref = out[out.label == "a100"].set_index("workload").time_s
    rel = out.time_s / out.workload.map(ref)
    both = rel.groupby(out.label).transform(
        lambda r: math.sqrt(r.prod()) if r.notna().all() and len(r) == 2 else np.nan)
    out["cost_x_time"] = out.unit_usd * both
    cols = ["label", "workload", "hardware", "stacks", "sites", "hbm_gib", "hbm_tbytes_per_s", "interposer_mm2",
            "model", "world", "tp", "pp", "dp", "status", "reason", "time_s", "tokens_per_s", "package_usd", "unit_usd",
            "usd_per_gpu_hour", "usd_per_step", "usd_per_million_tokens", "pareto", "cost_x_time"]
    return out[cols]


def cost_tornado(designs: pd.DataFrame, train_cases: str | Path, delta: float = 0.25) -> pd.DataFrame:
    """+-delta on every cost input of the A100 baseline: its unit cost, and which HBM design the
    `cost_x_time` ranking picks (the study's conclusion) at each end."""
    cases = pd.read_parquet(train_cases)
    hw = {json.loads(j)["hardware"]["name"]: json.loads(j)["hardware"] for j in cases.case_json}
    rel = designs.drop_duplicates("label").set_index("hardware").cost_x_time / designs.drop_duplicates(
        "label").set_index("hardware").unit_usd
    rel = rel.dropna()
    base = hw["a100-like"]

    def unit(hc) -> float:
        return package_cost(hc.package).unit_usd

    rows = tornado(base, unit, delta)
    for r in rows:
        for end, factor in (("low", 1 - delta), ("high", 1 + delta)):
            scores = {}
            for name in rel.index:
                scores[name] = unit(perturbed(hw[name], r["parameter"], factor)) * rel[name]
            r[f"best_design_{end}"] = min(scores, key=scores.get)
    return pd.DataFrame(rows)


def run(study: str, inputs: dict[str, str], outputs: dict[str, str]) -> None:
    """One study: its tables to `outputs` CSVs and its figures to the PNG paths (PDF beside each)."""
    from rapidllm.figures import optimus as fig
    from rapidllm.pipeline.io import write_table

    def stem(key: str) -> Path:
        return Path(outputs[key]).with_suffix("")

    if study == "flash_gpt2":
        t = flash_gpt2(inputs["summary"], inputs["cases"], inputs["reference"])
        fig.flash_gpt2(t, stem("png"))
    elif study == "flash_batch":
        t = flash_sweep(inputs["summary"], inputs["cases"])
        fig.flash_batch(t, stem("png"))
    elif study == "flash_long":
        t = flash_sweep(inputs["summary"], inputs["cases"])
        kernels = flash_kernels(inputs["reference"])
        write_table(kernels, outputs["kernels"])
        fig.flash_long(t, kernels, stem("png"))
    elif study == "moe":
        t = moe(inputs["summary"], inputs["cases"])
        fig.moe(t, stem("png"))
    elif study == "topology":
        t = topology(inputs["summary"], inputs["cases"])
        fig.topology(t, stem("png"))
    elif study == "cost":
        t = cost_designs((inputs["train_summary"], inputs["train_cases"]),
                         (inputs["infer_summary"], inputs["infer_cases"]))
        tor = cost_tornado(t, inputs["train_cases"])
        write_table(tor, outputs["tornado"])
        fig.cost_designs(t, stem("png"))
        fig.tornado(tor, stem("tornado_png"))
    else:
        raise ValueError(f"unknown Optimus study {study!r}")
    write_table(t, outputs["table"])

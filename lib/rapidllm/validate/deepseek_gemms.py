"""DeepSeek's training trace (profile-data train.json) GEMM by GEMM against the operator model: the evidence
behind the profile check's GEMM category (validate/deepseek_profile.py, docs/mla.md).

The trace marks DualPipe's pieces with profiler ranges: attn(F), mlp(F), mlp(B), mlp(W), attn(W). Each
GEMM kernel is placed in the range that launched it (its `correlation` id leads to the CUDA runtime call,
whose thread and time fall inside the range); the attention backward runs on the autograd thread, outside
every range. Within one occurrence of a range the GEMMs launch in a fixed order, which `LAYOUT` names after
the model's operators. A label's time per layer is the busy time of its kernels in one occurrence (the
routed experts' eight wgrads run in pairs on two streams), averaged over the chunk's 4 layers. The trace
is not kept in the repository: `python -m rapidllm.validate.deepseek_gemms train.json`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd

from rapidllm.ops.price import price_case
from rapidllm.spec.paths import project_root
from rapidllm.validate import deepseek
from rapidllm.validate.deepseek_profile import busy_time, gemm_slowdown, kernel_category, print_table

BACKWARD = "attn(B)"          # kernels launched outside every range: the attention backward (autograd thread)
# GEMM kernels of one layer per range, in launch order (train.json: FP8 unless marked; MLA's q_a and kv_a
# are two kernels where the model fuses them into qkv; the router's two backward GEMMs are BF16 cuBLAS).
LAYOUT: dict[str, list[str]] = {
    "attn(F)": ["qkv", "qkv", "q_up", "kv_up", "o_proj", "router"],
    "mlp(F)": ["shared_up", "expert_up", "expert_down", "shared_down"],
    BACKWARD: ["router backward", "router backward", "o_proj_dgrad", "q_up recompute", "kv_up recompute",
               "q_up_dgrad", "kv_up_dgrad", "qkv_dgrad", "qkv_dgrad"],
    "attn(W)": ["o_proj_wgrad", "kv_up_wgrad", "q_up_wgrad", "qkv_wgrad", "qkv_wgrad"],
    "mlp(B)": ["shared_down_dgrad", "expert_down_dgrad", "expert_up_dgrad", "shared_up_dgrad"],
    "mlp(W)": ["shared_down_wgrad"] + ["expert wgrads"] * 8 + ["shared_up_wgrad"],
}
# The model operators (name, phase) of the layer_moe section each label stands for.
MODEL_OPS: dict[str, list[tuple[str, str]]] = {
    **{n: [(n, "fwd")] for n in LAYOUT["attn(F)"] + LAYOUT["mlp(F)"]},
    "q_up recompute": [("q_up", "recompute")], "kv_up recompute": [("kv_up", "recompute")],
    "router backward": [("router_dgrad", "bwd"), ("router_wgrad", "bwd")],
    "expert wgrads": [("expert_down_wgrad", "bwd"), ("expert_up_wgrad", "bwd")],
    **{n: [(n, "bwd")] for n in ("o_proj_dgrad", "q_up_dgrad", "kv_up_dgrad", "qkv_dgrad", "o_proj_wgrad",
                                 "kv_up_wgrad", "q_up_wgrad", "qkv_wgrad", "shared_down_dgrad", "expert_down_dgrad",
                                 "expert_up_dgrad", "shared_up_dgrad", "shared_down_wgrad", "shared_up_wgrad")},
}


def trace_gemms(path: str | Path) -> pd.DataFrame:
    """Microseconds per layer of each GEMM label of `LAYOUT` in a train.json-like trace (mean over the
    occurrences of its range); ValueError when a range holds another number of GEMMs than `LAYOUT` says."""
    events = json.loads(Path(path).read_text())["traceEvents"]
    ranges = [e for e in events if e.get("cat") == "user_annotation" and e["name"] in LAYOUT]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}

    def range_of(kernel: dict) -> str:
        launch = launches.get(kernel["args"].get("correlation"))
        for r in ranges:
            if launch and r["tid"] == launch["tid"] and r["ts"] <= launch["ts"] <= r["ts"] + r["dur"]:
                return r["name"]
        return BACKWARD

    runs: list[tuple[str, list[dict]]] = []
    for k in sorted((e for e in events if e.get("cat") == "kernel" and kernel_category(e["name"]) == "gemm"),
                    key=lambda e: e["ts"]):
        where = range_of(k)
        if not runs or runs[-1][0] != where:
            runs.append((where, []))
        runs[-1][1].append(k)
    per_layer: dict[str, list[float]] = defaultdict(list)
    for where, kernels in runs:
        labels = LAYOUT[where]
        if len(kernels) != len(labels):
            raise ValueError(f"{path}: {len(kernels)} GEMM kernels in one {where} range; expected {len(labels)}")
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for label, k in zip(labels, kernels):
            spans[label].append((float(k["ts"]), float(k["ts"]) + float(k["dur"])))
        for label, v in spans.items():
            per_layer[label].append(busy_time(v))
    return pd.DataFrame([{"gemm": label, "measured_us": sum(v) / len(v)} for label, v in per_layer.items()])


def gemm_breakdown(path: str | Path) -> pd.DataFrame:
    """Each GEMM label: GFLOP, trace microseconds and TFLOP/s on the SMs DeepEP leaves, the model's time on
    those SMs with TE-style BF16-output wgrads (`fp8_recipe: tensorwise`) and as DeepSeek runs them
    (`blockwise`), and the error of the latter."""
    row = pd.read_csv(project_root() / deepseek.TRAINING_CSV).iloc[0]
    case = deepseek.v3_training_case(row, "fp8")
    scale = gemm_slowdown(case)

    def layer(c) -> dict[tuple[str, str], tuple[float, float]]:
        ops = price_case(c)
        g = ops[(ops.section == "layer_moe") & (ops.kind == "gemm")]
        return {(n, p): (t * c_ * 1e6 * scale, f * c_) for n, p, t, c_, f in
                zip(g["name"], g["phase"], g["time_s"], g["count"], g["flops"])}

    blockwise, tensorwise = layer(case), layer(dataclasses.replace(case, fp8_recipe="tensorwise"))
    out = trace_gemms(path)
    ops = out.gemm.map(MODEL_OPS)
    out["gflop"] = [sum(blockwise[k][1] for k in ks) / 1e9 for ks in ops]
    out["tflops"] = out.gflop / out.measured_us * 1e3          # GFLOP per us = 1000 TFLOP/s
    out["model_tensorwise_us"] = [sum(tensorwise[k][0] for k in ks) for ks in ops]
    out["model_us"] = [sum(blockwise[k][0] for k in ks) for ks in ops]
    out["error_pct"] = 100.0 * (out.model_us / out.measured_us - 1.0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rapidllm.validate.deepseek_gemms",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("trace", help="profile-data's train.json")
    args = parser.parse_args(argv)
    print_table(gemm_breakdown(args.trace))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

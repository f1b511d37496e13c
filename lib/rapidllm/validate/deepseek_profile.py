"""DeepSeek's published training profile (github.com/deepseek-ai/profile-data, train.json) against the
operator model, kernel category by category (a component check, held apart from the calibration).

The trace is one DualPipe pair of chunks on one H800 of DeepSeek-V3's pre-training layout (EP 64, TP 1,
sequence 4096, FP8 GEMMs, balanced routing simulated): the forward of one 4096-token micro-batch and the
backward of another, each over 4 MoE layers, overlapped with DeepEP's all-to-alls. The busy time of each
kernel category over the trace (the union of its kernels' intervals; two streams run GEMMs at once) divided
by the 4 layers gives one layer's forward + backward on the compute stream(s); the model's `layer_moe`
section of the same case (`deepseek.v3_training_case`, precision fp8, fp8_recipe blockwise) gives the same
sums. `summarize_trace` rebuilds validation/references/profile_deepseek_v3_train_h800.csv
from the trace (`python -m rapidllm.validate.deepseek_profile --trace train.json`); the trace itself (3 MB)
is not kept in the repository. DeepSeek's prefill.json and decode.json are not compared: the snapshot of
the repository available here lists them but does not hold their contents.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from rapidllm.engine.composer import dispatcher_sms
from rapidllm.ops.price import price_case
from rapidllm.spec.case import Case
from rapidllm.spec.paths import project_root
from rapidllm.validate import deepseek

PROFILE_CSV = "validation/references/profile_deepseek_v3_train_h800.csv"
CHUNK_LAYERS = 4          # "Each chunk contains 4 MoE layers" (profile-data README)
COMPARED = ("attn_fwd", "attn_bwd", "gemm")


def kernel_category(name: str) -> str:
    """The category of one CUDA kernel of the trace, by its name."""
    if "FlashAttnBwd" in name:
        return "attn_bwd"
    if "flash::compute_attn" in name:
        return "attn_fwd"
    if "GemmKernel" in name or "xmma_gemm" in name:
        return "gemm"
    if "dpsk::ep::" in name:
        return "ep_comm"
    return "other"


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals: the time at least one of them runs."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def summarize_trace(path: str | Path, layers: int = CHUNK_LAYERS) -> pd.DataFrame:
    """Microseconds per layer of each kernel category in a PyTorch-profiler (Chrome) trace: the summed
    kernel durations and the busy time (the union of the kernels' intervals). They differ where a category
    ran on two streams at once: the routed experts' weight-gradient GEMMs run in pairs on streams 7 and 23,
    sharing the same SMs, so each one's duration includes the other's work and the sum counts it twice."""
    events = json.loads(Path(path).read_text())["traceEvents"]
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("cat") == "kernel":
            t = float(e["ts"])
            spans.setdefault(kernel_category(e["name"]), []).append((t, t + float(e["dur"])))
    return pd.DataFrame([{"category": c, "summed_us_per_layer": round(sum(b - a for a, b in v) / layers, 1),
                          "measured_us_per_layer": round(busy_time(v) / layers, 1)}
                         for c, v in sorted(spans.items())])


def gemm_slowdown(case: Case) -> float:
    """The trace's GEMMs are persistent kernels launched with 112 CTAs ("varsm"): they ran on the SMs that
    DeepEP's kernels left free (`composer.dispatcher_sms`, 20 of the H800's 132), so the operator model's
    whole-GPU GEMM time is scaled by sm_count / (sm_count - those SMs)."""
    sms = case.hardware.sm_count
    return sms / (sms - dispatcher_sms(case))


def model_categories() -> dict[str, float]:
    """Model microseconds per layer (one forward, its recompute and one backward of a 4096-token
    micro-batch, FP8 GEMMs) of each compared category, on the report's training case: the GEMMs on the
    SMs DeepEP leaves (`gemm_slowdown`); the attention kernels carry no such evidence in the trace and are
    compared as priced."""
    row = pd.read_csv(project_root() / deepseek.TRAINING_CSV).iloc[0]
    case = deepseek.v3_training_case(row, "fp8")
    ops = price_case(case)
    layer = ops[ops.section == "layer_moe"]
    t = layer.time_s * layer["count"] * 1e6
    return {"attn_fwd": float(t[layer.name == "attn"].sum()), "attn_bwd": float(t[layer.name == "attn_bwd"].sum()),
            "gemm": float(t[layer.kind == "gemm"].sum()) * gemm_slowdown(case)}


def profile_check() -> pd.DataFrame:
    """Measured and predicted microseconds per layer for the compared categories, and the error."""
    ref = pd.read_csv(project_root() / PROFILE_CSV).set_index("category")
    model = model_categories()
    rows = [{"category": c, "measured_us": float(ref.loc[c, "measured_us_per_layer"]), "predicted_us": model[c]}
            for c in COMPARED]
    rows.append({"category": "sum", "measured_us": sum(r["measured_us"] for r in rows),
                 "predicted_us": sum(r["predicted_us"] for r in rows)})
    out = pd.DataFrame(rows)
    out["error_pct"] = 100.0 * (out.predicted_us / out.measured_us - 1.0)
    return out


def print_table(frame: pd.DataFrame) -> None:
    """A comparison table as this module's and `deepseek_gemms`' command lines print it."""
    with pd.option_context("display.width", 200, "display.precision", 1):
        print(frame.to_string(index=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rapidllm.validate.deepseek_profile",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--trace", help="summarize this train.json instead of comparing")
    args = parser.parse_args(argv)
    print_table(summarize_trace(args.trace) if args.trace else profile_check())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

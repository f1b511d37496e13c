"""Component checks against DeepSeek's published figures, held apart from the calibration (nothing here
is fitted; the H800 carries the H100's frozen constants, config/hardware/h800.yaml).

FlashMLA (validation/references/kernel_flashmla_h800.csv): the absorbed MLA decode kernel on H800 SXM5,
"up to" 3000 GB/s when memory-bound and 580 (Feb 2025) / 660 (Apr 2025) TFLOP/s when compute-bound, over
the grid of FlashMLA's benchmark (batch 128, 4k-16k cached tokens, 16-128 query heads, 1-2 query tokens,
one 576-dim latent head whose first 512 dims are V). The attention model prices every grid point
(`impl="flash3"`, kv_shared) at datasheet utilization, as the other kernel checks (docs/operator-model.md),
and the best achieved bandwidth / FLOP rate over the grid is compared with the published maximum, both
counted with FlashMLA's own byte and FLOP formulas (tests/test_flash_mla.py). Twice: at the datasheet
clock (1830 MHz) and at the ~1600 MHz the FlashMLA authors report their H800 throttled to (deep-dive of
2025-04-22); the second is the scored one.

DeepSeek-V3 pre-training (validation/references/training_deepseek_v3_h800.csv): 180K H800 GPU hours per
trillion tokens = 1543 tokens/s per GPU, on the report's layout (2048 H800, PP 16, EP 64 over 8 nodes,
ZeRO-1 DP 128, no TP, sequence 4096, global batch 15360). DualPipe is priced as the merged 1F1B
forward/backward with the EP all-to-alls beside the other micro-batch's compute (moe_a2a_overlap), the
nearest schedule the engine has. The report trains with FP8 GEMMs but keeps attention, norms, embedding,
output head and gating in BF16/FP32 (§3.3.1), which is what `precision: fp8` prices (docs/fp8.md), with its
fine-grained scaling (§3.3.2) as `fp8_recipe: blockwise` (FP8 wgrads accumulate into the FP32 main
gradient); the all-BF16 prediction is shown beside it.

DeepSeek-V3/R1 online inference (validation/references/inference_deepseek_v3_h800.csv; DeepSeek's "Inference
System Overview", 2025-03-01): per-H800-node throughput, prefill on EP 32 and decode on EP 144, both with
DP attention and 32 redundant experts, FP8 GEMMs, MTP speculative decoding, two overlapped micro-batches
(DeepSeek's dual micro-batch overlap, in both phases; engine/microbatch.py). Prefill: the profile-data
operating point (4K prompts, 16K tokens per GPU) against the published rate less its on-disk cache hits
(those tokens are not computed). Decode: a disaggregated decode instance at the published mean KV length
with the concurrency the published figures imply (per-GPU rate / per-sequence speed), at the published MTP
acceptance bounds; the scored figure is tokens/s per node, equivalently the per-sequence speed.
"""
from __future__ import annotations

import argparse

import pandas as pd

from rapidllm.ops.attention import decode_attention
from rapidllm.prediction import evaluate
from rapidllm.spec.case import Case, resolve_case
from rapidllm.spec.named import resolve_named
from rapidllm.spec.paths import project_root
from rapidllm.validate.kernels import load_hardware

FLASHMLA_CSV = "validation/references/kernel_flashmla_h800.csv"
TRAINING_CSV = "validation/references/training_deepseek_v3_h800.csv"
INFERENCE_CSV = "validation/references/inference_deepseek_v3_h800.csv"
# Megatron-Core --recompute-modules equivalent of DeepSeek-V3 §3.3.2 (recompute all RMSNorms and the MLA
# up-projections in backward) plus the experts' activation, which DeepSeek keeps in FP8 instead.
V3_RECOMPUTE = ["layernorm", "mla_up_proj", "moe_act"]


def _ints(cell: object) -> list[int]:
    return [int(v) for v in str(cell).split(";")]


def flashmla_grid(row: pd.Series, clock_mhz: float | None = None) -> pd.DataFrame:
    """Model time, achieved GB/s and TFLOP/s (FlashMLA's formulas) at every point of a reference row's
    benchmark grid on the H800 at datasheet utilization, at `clock_mhz` if given."""
    hw = load_hardware("h800", "datasheet")
    if clock_mhz:
        hw = hw.at_clock(clock_mhz * 1e6)
    b, hkv, d, dv = int(row.batch), int(row.heads_kv), int(row.d_qk), int(row.d_v)
    out = []
    for sk in _ints(row.seqlens_k):
        for hq in _ints(row.heads_q):
            for sq in _ints(row.tokens_q):
                p = decode_attention(hw, b, hq, hkv, sk, d, dv, dtype=row["dtype"], impl="flash3", kv_shared=True,
                                     q_len=sq)
                flops = 2.0 * sq * b * sk * hq * (d + dv)
                nbytes = 2.0 * (b * sk * hkv * d + b * sq * hq * d + b * sq * hq * dv)
                out.append({"seqlen_k": sk, "heads_q": hq, "tokens_q": sq, "time_us": p.time_s * 1e6,
                            "gb_per_s": nbytes / p.time_s / 1e9, "tflops": flops / p.time_s / 1e12,
                            "bound": "memory" if p.hbm_s >= p.time_s - hw.launch_overhead_s - 1e-12 else "compute"})
    return pd.DataFrame(out)


def flashmla_check() -> pd.DataFrame:
    """One row per published FlashMLA figure: measured, the model's best over the grid at the datasheet
    clock and at the reported clock, and the error at the reported clock (the scored number)."""
    ref = pd.read_csv(project_root() / FLASHMLA_CSV)
    column = {"achieved_bandwidth": "gb_per_s", "achieved_tflops": "tflops"}
    rows = []
    for _, r in ref.iterrows():
        datasheet = flashmla_grid(r)[column[r.metric]].max()
        clocked = flashmla_grid(r, float(r.sm_clock_mhz))[column[r.metric]].max()
        rows.append({"release": r.release, "regime": r.regime, "unit": r.unit, "measured": float(r.value),
                     "predicted_datasheet_clock": datasheet, "predicted_reported_clock": clocked,
                     "error_pct": 100.0 * (clocked / r.value - 1.0)})
    return pd.DataFrame(rows)


def v3_training_case(row: pd.Series, precision: str) -> Case:
    """The DeepSeek-V3 report's pre-training layout as a case (DualPipe -> merged 1F1B with overlapped
    EP all-to-alls; DeepEP dispatch, node-limited routing from the model file; its MTP depth)."""
    model, _ = resolve_named("model", row.model, TRAINING_CSV, "model")
    mapping = {
        "model": dict(model, mtp_depth=int(row.mtp_depth)), "hardware": "h800", "network": "h800-ib", "precision": precision,
        "attention_impl": "flash3", **({"fp8_recipe": "blockwise"} if precision == "fp8" else {}),
        "workload": {"mode": "training", "seq_len": int(row.seq_len), "global_batch": int(row.global_batch),
                     "micro_batch": 1},
        "parallelism": {"tp": int(row.tp), "pp": int(row.pp), "dp": int(row.dp), "ep": int(row.ep),
                        "zero": int(row.zero), "schedule": "1f1b", "moe_a2a_overlap": True,
                        "moe_dispatcher": "deepep", "recompute": "selective", "recompute_modules": V3_RECOMPUTE},
    }
    return resolve_case(mapping, TRAINING_CSV)


def v3_training_check() -> pd.DataFrame:
    """Published tokens/s per GPU against the BF16 and FP8 predictions of the report's layout."""
    ref = pd.read_csv(project_root() / TRAINING_CSV)
    rows = []
    for _, r in ref.iterrows():
        rec = {"model": r.model, "measured_tokens_per_s_per_gpu": float(r.tokens_per_s_per_gpu_derived)}
        for precision in ("bf16", "fp8"):
            out = evaluate(v3_training_case(r, precision))
            tokens = int(r.global_batch) * int(r.seq_len)
            rec[f"predicted_{precision}"] = tokens / out["step_time_s"] / int(r.gpus) if out["status"] == "ok" else None
            rec[f"peak_memory_gib_{precision}"] = out["peak_memory_bytes"] / 2**30
        rec["error_pct_bf16"] = 100.0 * (rec["predicted_bf16"] / rec["measured_tokens_per_s_per_gpu"] - 1.0)
        rec["error_pct_fp8"] = 100.0 * (rec["predicted_fp8"] / rec["measured_tokens_per_s_per_gpu"] - 1.0)
        rows.append(rec)
    return pd.DataFrame(rows)


def v3_inference_case(row: pd.Series, acceptance: float, microbatches: int = 2) -> Case:
    """One phase of DeepSeek's online deployment as a case: tp 1, attention data-parallel over the EP
    group (dp = ep), the redundant experts, DeepEP dispatch, FP8 GEMMs with BF16 MLA, the V3 checkpoint's
    one MTP module drafting one token, and the two overlapped micro-batches DeepSeek runs in both phases
    (`microbatches` 1: without them). Prefill: batch of whole prompts per GPU; decode: a disaggregated
    decode instance holding `concurrency_per_gpu_derived` sequences at the mean KV length."""
    model, _ = resolve_named("model", row.model, INFERENCE_CSV, "model")
    drafts = int(row.draft_tokens)
    if row.phase == "prefill":
        workload = {"mode": "inference", "batch": int(row.tokens_per_gpu) // int(row.prompt_tokens),
                    "prompt_tokens": int(row.prompt_tokens), "output_tokens": 1}
    else:
        workload = {"mode": "inference", "batch": 1, "concurrency": int(row.concurrency_per_gpu_derived),
                    "serving": "disaggregated", "prompt_tokens": int(row.mean_kv_length), "output_tokens": 2}
    mapping = {
        "model": dict(model, mtp_depth=drafts), "hardware": "h800", "network": "h800-ib", "precision": "fp8",
        "attention_impl": "flash3",
        "workload": dict(workload, draft_tokens=drafts, draft_acceptance=acceptance),
        "parallelism": {"tp": 1, "dp": int(row.dp_attention), "ep": int(row.ep),
                        "redundant_experts": int(row.redundant_experts), "moe_dispatcher": "deepep",
                        "microbatch_overlap": microbatches},
    }
    return resolve_case(mapping, INFERENCE_CSV)


def inference_system_check() -> pd.DataFrame:
    """Per-node tokens/s of each phase at both published MTP acceptance bounds, against the published
    figure (prefill: less the cache hits, which are not computed); scored with the two overlapped
    micro-batches DeepSeek runs, shown beside the same case without them."""
    ref = pd.read_csv(project_root() / INFERENCE_CSV)
    rows = []
    for _, r in ref.iterrows():
        bounds = [float(r.acceptance_low)] + ([float(r.acceptance_high)] if r.phase == "decode" else [])
        for acceptance in bounds:          # prefill drafts once per prompt: acceptance does not enter
            rec: dict = {"phase": r.phase, "acceptance": acceptance}
            for microbatches, tag in ((2, ""), (1, "_no_overlap")):
                out = evaluate(v3_inference_case(r, acceptance, microbatches))
                if r.phase == "prefill":
                    measured = float(r.computed_tokens_per_s_per_node_derived)
                    predicted = r.gpus_per_node * int(r.tokens_per_gpu) / out["ttft_s"]
                    per_sequence = None
                else:
                    measured = float(r.published_tokens_per_s_per_node)
                    predicted = r.gpus_per_node * int(r.concurrency_per_gpu_derived) / out["itl_s"]
                    per_sequence = 1.0 / out["itl_s"]
                rec.update({"measured_per_node": measured, f"predicted_per_node{tag}": predicted,
                            f"error_pct{tag}": 100.0 * (predicted / measured - 1.0)})
                if not tag:
                    rec.update(predicted_tokens_per_s_per_sequence=per_sequence,
                               peak_memory_gib=out["peak_memory_bytes"] / 2**30)
            rows.append(rec)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rapidllm.validate.deepseek", description=__doc__.split("\n")[0])
    parser.add_argument("--skip-training", action="store_true", help="only the FlashMLA kernel and inference checks")
    args = parser.parse_args(argv)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.precision", 2):
        print(flashmla_check().to_string(index=False))
        print(inference_system_check().to_string(index=False))
        if not args.skip_training:
            print(v3_training_check().to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

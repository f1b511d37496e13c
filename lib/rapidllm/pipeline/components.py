"""Component validation stages: GEMM kernels (Fig 10), nccl-tests collectives, nanotron/MPT memory,
DeepSeek's published figures (FlashMLA decode on H800, DeepSeek-V3 pre-training rate).

Each writes a per-row CSV and a small error table; the figures read those tables. GEMM kernels are priced
from the datasheet alone (utilization 1.0): the end-to-end calibrated constants absorb effects that are not
kernel efficiency. Collectives use each device's frozen network constant. Nothing is fitted on scored rows.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from rapidllm.validate.nccl import MIN_BYTES, TABLES, nccl_rows, network_utilization
from rapidllm.pipeline.io import write_table
from rapidllm.validate.calibrate import collective_calibration_rows
from rapidllm.validate import deepseek, deepseek_profile, kernels
from rapidllm.validate.memory import validate_mpt, validate_nanotron


def run_gemm_validation(rows_out: str | Path, errors_out: str | Path) -> pd.DataFrame:
    frames = []
    for set_name in kernels.SETS:
        df, _ = kernels.validate_set(set_name, "datasheet")
        frames.append(df.assign(set=set_name))
    rows = pd.concat(frames, ignore_index=True)
    write_table(rows, rows_out)
    table = kernels.summary("datasheet")
    write_table(table, errors_out)
    return table


def run_collective_validation(rows_out: str | Path) -> pd.DataFrame:
    """nccl-tests all-reduce on 8x A100 and 8x H100 NVSwitch nodes vs the link-queue simulator, each at its
    device's frozen network constant."""
    frames = []
    for device in TABLES:
        rows = nccl_rows(device, network_utilization(device))
        calibration = {r.nbytes for r in collective_calibration_rows(rows)}
        frames.append(pd.DataFrame([{"device": device, "bytes": r.nbytes, "measured_s": r.measured_s,
                                     "predicted_s": r.predicted_s, "measured_busbw": r.measured_busbw,
                                     "predicted_busbw": r.predicted_busbw, "error_pct": 100.0 * r.error,
                                     "scored": r.nbytes >= MIN_BYTES, "calibration": r.nbytes in calibration}
                                    for r in rows]))
    table = pd.concat(frames, ignore_index=True)
    write_table(table, rows_out)
    return table


def run_memory_validation(references: str | Path, rows_out: str | Path, summary_out: str | Path) -> dict:
    """nanotron Success-row memory MAPE and Success/OOM accuracy; every MPT FSDP row must fit."""
    ref = Path(references)
    nano = validate_nanotron(ref / "training_nanotron_h100_sample.csv")
    mpt = validate_mpt(ref / "training_mpt_fsdp_h100.csv")
    write_table(nano["rows"], rows_out)
    conf = nano["confusion"]
    summary = pd.DataFrame([
        {"check": "nanotron_memory_mape_pct_calibration", "value": nano["mape_calibration"],
         "rows": nano["n_success"] - nano["n_held_out"]},
        {"check": "nanotron_memory_mape_pct_held_out", "value": nano["mape_held_out"], "rows": nano["n_held_out"]},
        *({"check": f"fitted_{k}", "value": v, "rows": 0} for k, v in nano["constants"].items()),
        {"check": "nanotron_oom_accuracy_pct", "value": 100.0 * nano["accuracy"], "rows": nano["n_classified"]},
        *({"check": f"confusion_{a}_predicted_{p}", "value": float(conf.loc[a, p]), "rows": 0}
          for a in conf.index for p in conf.columns),
        {"check": "mpt_rows_predicted_feasible", "value": float(mpt.feasible.sum()), "rows": len(mpt)},
    ])
    write_table(summary, summary_out)
    return nano


def run_deepseek_validation(out: str | Path) -> pd.DataFrame:
    """FlashMLA's published decode rates, DeepSeek-V3's pre-training tokens/s per GPU, its online inference
    tokens/s per node and its training profile's per-layer kernel times against the model
    (validate/deepseek.py, validate/deepseek_profile.py), one table: check, published, predicted, error."""
    fm = deepseek.flashmla_check()
    rows = [{"check": f"flashmla_{r.release}_{r.regime}", "unit": r.unit, "measured": r.measured,
             "predicted": r.predicted_reported_clock, "error_pct": r.error_pct} for r in fm.itertuples()]
    for r in deepseek.v3_training_check().itertuples():
        for precision in ("bf16", "fp8"):
            predicted = getattr(r, f"predicted_{precision}")
            rows.append({"check": f"{r.model}_pretraining_{precision}", "unit": "tokens/s per GPU",
                         "measured": r.measured_tokens_per_s_per_gpu, "predicted": predicted,
                         "error_pct": getattr(r, f"error_pct_{precision}")})
    for r in deepseek.inference_system_check().itertuples():
        suffix = f"_acceptance_{r.acceptance:.2f}" if r.phase == "decode" else ""
        for tag in ("", "_no_overlap"):          # scored: DeepSeek's two overlapped micro-batches
            rows.append({"check": f"deepseek-v3_{r.phase}_per_node{suffix}{tag}", "unit": "tokens/s per node",
                         "measured": r.measured_per_node, "predicted": getattr(r, f"predicted_per_node{tag}"),
                         "error_pct": getattr(r, f"error_pct{tag}")})
    for r in deepseek_profile.profile_check().itertuples():
        rows.append({"check": f"deepseek-v3_train_profile_{r.category}", "unit": "us per layer",
                     "measured": r.measured_us, "predicted": r.predicted_us, "error_pct": r.error_pct})
    table = pd.DataFrame(rows)
    write_table(table, out)
    return table

"""Memory-model validation: nanotron H100 sweep (peak allocated, Success vs OOM) and llm-foundry MPT FSDP.

What nanotron's `Mem Alloc (GB)` measures: torch.cuda.max_memory_allocated() / 2**30 written by
log_throughput at an early iteration; nanotron's `log_memory` (called after train_batch_iter for the first
iterations) calls torch.cuda.reset_peak_memory_stats(), so the logged peak covers gradient sync, clipping
and the optimizer step only, not the activation peak (Mem Res keeps the cached activation blocks). It is
therefore compared with the model's optimizer-phase bytes of pipeline stage 0 (the logging rank), while
Success vs OOM is decided by the full peak of the worst stage against HBM capacity. `Mem Res (GB)`
(max_memory_reserved after the same reset) still holds the cached activation blocks, so it bounds stage 0's
allocated fwd/bwd peak from above unless the allocator released cached blocks to retry a failed cudaMalloc
(runs near capacity); the rows report both and `reserved_residual` their median relative gap.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rapidllm.memory.model import memory_for_case
from rapidllm.memory.state import FRAMEWORKS, NANOTRON, Conventions, nanotron_stage_layers, stage_params
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import HardwareSpec
from rapidllm.spec.layout import Parallelism, TrainingWorkload
from rapidllm.spec.model import ModelSpec
from rapidllm.spec.named import resolve_named
from rapidllm.spec.network import NetworkSpec
from rapidllm.validate.metrics import mape

GiB = 2**30
# nanotron (accumulate_grad_in_fp32, ZeroDistributedOptimizer): fp32 master weights live in the gradient
# accumulator for every parameter (sharded only by ZeRO-3, which nanotron lacks), DDP keeps bf16 grads;
# the loss upcasts the logits (cast_to_fp32 block) beside the bf16 logits, and the vocab-parallel cross
# entropy shifts them into the probabilities it saves and later turns into their gradient in place: one fp32
# vocab-sized copy in the forward, none in the backward (memory/state.py NANOTRON). The three
# step-phase constants (STEP_CONSTANTS) are fitted on a declared calibration subset of the Success rows
# (every 4th row of each model family, ordered by job id: 25 %) and scored on the other 75 %.
STEP_CONSTANTS = ("zero_step_bytes", "step_hidden_bytes", "runtime_allocated")
CALIBRATION_EVERY = 4
# Shape columns a row publishes for itself (a family mixes GQA variants and vocabularies; OOM rows publish
# none and take the family's shape).
ROW_SHAPE = {"kv_heads": "num_kv_heads", "vocab": "vocab_size"}


def _specs(hardware: str, network: str) -> tuple[HardwareSpec, NetworkSpec]:
    hw_m, hw_src = resolve_named("hardware", hardware, "validate.memory", "hardware")
    net_m, net_src = resolve_named("network", network, "validate.memory", "network")
    return HardwareSpec.from_mapping(hw_m, hw_src), NetworkSpec.from_mapping(net_m, net_src)


def family_shapes(df: pd.DataFrame) -> dict[float, dict[str, Any]]:
    """Model shape per num_params family from its Success rows; ffn solved from the total parameters of a
    row with the family's most common KV-head count (a family holds GQA variants: the 80B rows run 64 and 8
    KV heads). A row that publishes its own KV-head count and vocabulary keeps them (ROW_SHAPE)."""
    out = {}
    for fam, g in df[df.status == "Success"].groupby("num_params"):
        r = g[g.num_kv_heads == g.num_kv_heads.mode().iloc[0]].iloc[0]
        h, layers, heads = int(r.hidden_size), int(r.num_layers), int(r.num_heads)
        kv, vocab = int(r.num_kv_heads), int(r.vocab_size)
        tied = str(r.tie_word_embeddings) == "True"
        total = _human(r["Total Params"])
        attn = 2 * h * h + 2 * kv * (h // heads) * h
        rest = total - vocab * h * (1 if tied else 2) - layers * (attn + 2 * h) - h
        ffn = int(round(rest / (3 * h * layers) / 256) * 256)
        out[fam] = dict(name=f"nanotron-{fam:g}b", hidden=h, layers=layers, heads=heads, kv_heads=kv,
                        head_dim=h // heads, ffn=ffn, vocab=vocab, tied_embeddings=tied, max_seq_len=4096)
    return out


def _human(x: Any) -> float:
    s = str(x)
    scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    return float(s[:-1]) * scale[s[-1]] if s[-1] in scale else float(s)


def nanotron_case(row: pd.Series, shapes: dict, hw: HardwareSpec, net: NetworkSpec,
                  step: dict[str, float] | None = None) -> tuple[Case, Conventions]:
    own = {key: int(row[col]) for key, col in ROW_SHAPE.items() if col in row and pd.notna(row[col])}
    model = ModelSpec(**{**shapes[row.num_params], **own})
    dp, tp, pp, mbs = int(row.dp), int(row.tp), int(row.pp), int(row.mbs)
    par = Parallelism(dp=dp, tp=tp, pp=pp, sp=True, zero=int(row.zero_stage), fp32_grad_accum=True)
    work = TrainingWorkload(seq_len=int(row.seq_len), global_batch=dp * mbs * int(row.batch_accum), micro_batch=mbs)
    case = Case(model=model, hardware=hw, network=net, workload=work, parallelism=par, name=str(row["name"]))
    conv = dataclasses.replace(NANOTRON, **(step or {}))
    return case, dataclasses.replace(conv, stage_layers=row_stage_layers(row, case, conv))


def row_stage_layers(row: pd.Series, case: Case, conv: Conventions) -> tuple[int, ...]:
    """nanotron's split of the row's layout; where a rank's share ends exactly on a block boundary the tie
    can fall either way (`nanotron_stage_layers`), and a row that publishes rank 0's parameter count
    (`Local Params`, Success rows only) is given the split whose stage 0 holds that many; OOM rows publish
    none and take the split nanotron's source makes."""
    m, pp = case.model, case.parallelism.pp
    split = nanotron_stage_layers(m, pp)
    tie = nanotron_stage_layers(m, pp, close_on_tie=True)
    local = row.get("Local Params")
    if tie == split or pd.isna(local):
        return split
    def gap(layers: tuple[int, ...]) -> float:
        return abs(stage_params(case, 0, dataclasses.replace(conv, stage_layers=layers)).total - _human(local))
    return tie if gap(tie) < gap(split) else split


def calibration_mask(success: pd.DataFrame) -> np.ndarray:
    """Declared, stratified calibration subset: every 4th Success row of each family by job id."""
    rank = success.groupby("num_params")["job_id"].rank(method="first").astype(int) - 1
    return (rank % CALIBRATION_EVERY == 0).to_numpy()


def fit_step_constants(cases: list[tuple[Case, Conventions]], measured: np.ndarray) -> dict[str, float]:
    """Least squares on relative error: the stage-0 optimizer-phase bytes are linear in the three constants."""
    def phase(case: Case, conv: Conventions, values: tuple[float, float, float]) -> float:
        conv = dataclasses.replace(conv, **dict(zip(STEP_CONSTANTS, values)))
        return memory_for_case(case, conv, stage=0).optimizer_phase
    base = np.array([phase(c, v, (0.0, 0.0, 0.0)) for c, v in cases])
    unit = np.eye(3)
    features = np.array([[phase(c, v, tuple(unit[j])) - b for j in range(3)] for (c, v), b in zip(cases, base)])
    weights = 1.0 / measured
    coef, *_ = np.linalg.lstsq(features * weights[:, None], (measured - base) * weights, rcond=None)
    return dict(zip(STEP_CONSTANTS, (float(x) for x in coef)))


def validate_nanotron(path: str | Path) -> dict[str, Any]:
    """(a) MAPE of optimizer-phase allocated memory on Success rows, calibration and held-out apart;
    (b) Success/OOM accuracy of the worst stage's full peak against HBM."""
    df = pd.read_csv(path)
    shapes = family_shapes(df)
    hw, net = _specs("h100-sxm5-80gb", "dgx-h100")
    success = df[df.status == "Success"].reset_index(drop=True)
    calib = calibration_mask(success)
    cal_cases = [nanotron_case(r, shapes, hw, net) for _, r in success[calib].iterrows()]
    step = fit_step_constants(cal_cases, success[calib]["Mem Alloc (GB)"].to_numpy() * GiB)
    calib_jobs = set(success[calib].job_id)
    rows = []
    for _, r in df[df.status != "Other"].iterrows():
        case, conv = nanotron_case(r, shapes, hw, net, step)
        rank0 = memory_for_case(case, conv, stage=0)
        worst = memory_for_case(case, conv)
        rows.append(dict(name=r["name"], family=r.num_params, status=r.status, dp=r.dp, tp=r.tp, pp=r.pp,
                         mbs=r.mbs, zero=r.zero_stage, measured_gib=r["Mem Alloc (GB)"],
                         predicted_gib=rank0.optimizer_phase / GiB, peak_gib=worst.peak / GiB,
                         reserved_gib=r["Mem Res (GB)"], stage0_allocated_gib=(rank0.peak - rank0.framework) / GiB,
                         predicted_ok=worst.feasible, calibration=r.job_id in calib_jobs))
    out = pd.DataFrame(rows)
    ok = out[out.status == "Success"]
    actual = out.status == "Success"
    confusion = pd.crosstab(actual.map({True: "Success", False: "OOM"}),
                            out.predicted_ok.map({True: "fits", False: "OOM"}))
    held = ok[~ok.calibration]
    return dict(rows=out, mape=mape(ok.predicted_gib, ok.measured_gib), n_success=len(ok),
                mape_calibration=mape(ok[ok.calibration].predicted_gib, ok[ok.calibration].measured_gib),
                mape_held_out=mape(held.predicted_gib, held.measured_gib), n_held_out=len(held), constants=step,
                accuracy=float((out.predicted_ok == actual).mean()), n_classified=len(out), confusion=confusion,
                reserved_residual=float(((ok.reserved_gib - ok.stage0_allocated_gib).abs() / ok.reserved_gib).median()))




def validate_mpt(path: str | Path) -> pd.DataFrame:
    """Every llm-foundry MPT FSDP row ran; report each row's predicted peak and feasibility."""

    df = pd.read_csv(path)
    hw, net = _specs("h100-sxm5-80gb", "dgx-h100")
    out = []
    for _, r in df.iterrows():
        m_map, src = resolve_named("model", f"mpt-{r.model}", "validate.memory", "model")
        model = dataclasses.replace(ModelSpec.from_mapping(m_map, src), max_seq_len=int(r.seq_len))
        n = int(r.num_gpus)
        par = Parallelism(dp=n, fsdp="full_shard", recompute="full" if bool(r.activation_checkpointing) else "none")
        work = TrainingWorkload(seq_len=int(r.seq_len), global_batch=int(r.global_batch_size_seqs),
                                micro_batch=int(r.micro_batch_size))
        res = memory_for_case(Case(model=model, hardware=hw, network=net, workload=work, parallelism=par),
                              FRAMEWORKS["llm-foundry"])
        out.append(dict(model=r.model, seq_len=r.seq_len, gpus=n, mbs=r.micro_batch_size,
                        checkpointing=r.activation_checkpointing, peak_gib=res.peak / GiB, feasible=res.feasible))
    return pd.DataFrame(out)

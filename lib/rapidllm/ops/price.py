"""Price every operator of a case: the `price` stage of the pipeline.

A case becomes sections (one layer of each kind, the first/last pipeline stage extras, the optimizer
step, and for inference prefill plus the first and last decode step); each section lists its operators
for one micro-batch on one rank with a time per launch. The engine multiplies sections by how often
they run, so pricing stays independent of the schedule.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from rapidllm.ops import workload as wl
from rapidllm.ops.attention import attention_backward, attention_forward
from rapidllm.ops.gemm import price_gemms
from rapidllm.ops.operators import ATTENTION, GEMM, Operator
from rapidllm.ops.params import parameter_counts
from rapidllm.ops.roofline import roofline_times
from rapidllm.spec.case import Case, InferenceWorkload

OPERATOR_COLUMNS = ["section", "name", "kind", "phase", "count", "flops", "bytes", "out_bytes",
                    "batch", "m", "n", "k", "time_s"]


def local_parameters(case: Case) -> float:
    """Parameters held by one rank before ZeRO/FSDP sharding (TP/PP/EP split; embeddings counted once)."""
    p = case.parallelism
    c = parameter_counts(case.model)
    dense = (c.attention + c.dense_mlp + c.shared_experts + c.norms) / (p.tp * p.pp)
    experts = c.experts / (p.tp * p.pp * p.ep)
    return dense + experts + (c.embedding + c.lm_head) / p.tp / (2 if p.pp > 1 else 1)


def _layer_sections(case: Case, shard: wl.Shard, prefix: str, training: bool) -> list[tuple[str, Operator]]:
    model, out = case.model, []
    kinds = {"dense": False}
    if model.moe:
        kinds = {"moe": True} if model.moe_layer_count() == model.layers else {"dense": False, "moe": True}
    for kind, is_moe in kinds.items():
        if training:
            ops = wl.layer_training(model, shard, is_moe, case.parallelism.recompute)
        else:
            ops = wl.layer_forward(model, shard, is_moe)
        out += [(f"{prefix}layer_{kind}", o) for o in ops]
    return out


def case_sections(case: Case) -> list[tuple[str, Operator]]:
    """(section, operator) pairs of a case, in execution order within each section."""
    model = case.model
    if case.training:
        shard = wl.training_shard(case)
        out = _layer_sections(case, shard, "", True)
        emb = wl.embedding_forward(model, shard)
        head = wl.head_forward(model, shard)
        out += [("first_stage", o) for o in emb + [b for o in emb for b in wl.backward_of(o)]]
        out += [("last_stage", o) for o in head + [b for o in reversed(head) for b in wl.backward_of(o)]]
        out.append(("optimizer", wl.optimizer_step(local_parameters(case) / _optimizer_shards(case), 16.0)))
        return out
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    out = []
    for prefix, shard in (("prefill_", wl.prefill_shard(case)), ("decode_first_", wl.decode_shard(case, w.prompt_tokens)),
                          ("decode_last_", wl.decode_shard(case, w.prompt_tokens + w.output_tokens - 1))):
        out += _layer_sections(case, shard, prefix, False)
        out += [(f"{prefix}head", o) for o in wl.embedding_forward(model, shard) + wl.head_forward(model, shard)]
    return out


def _optimizer_shards(case: Case) -> int:
    p = case.parallelism
    return p.dp if (p.zero >= 1 or p.fsdp != "none") else 1


def operator_times(case: Case, ops: list[Operator], method: str = "tiles") -> np.ndarray:
    """Seconds per launch: the GEMM tile model and FlashAttention kernels, or the plain roofline.

    Pointwise operators are priced by the roofline either way; `method="roofline"` is the Fig 10 ablation.
    """
    hw, dtype = case.hardware, case.precision
    times = roofline_times(hw, ops, dtype)
    if method == "roofline":
        return times
    gemm_idx = [i for i, o in enumerate(ops) if o.kind == GEMM]
    if gemm_idx:
        shapes = np.array([ops[i].gemm for i in gemm_idx], dtype=np.int64)
        priced = price_gemms(hw, shapes[:, 0], shapes[:, 1], shapes[:, 2], shapes[:, 3], dtype)
        times[gemm_idx] = priced.time_s
    for i, o in enumerate(ops):
        if o.kind == ATTENTION and o.attention is not None:
            a = o.attention
            fn = attention_backward if o.phase == "bwd" else attention_forward
            kwargs = {} if o.phase == "bwd" else {"training": case.training}
            times[i] = fn(hw, a.batch, a.q_heads, a.kv_heads, a.q_len, a.kv_len, a.head_dim_qk, a.head_dim_v,
                          a.causal, dtype, case.attention_impl, **kwargs).time_s
    return times


def price_case(case: Case, method: str = "tiles") -> pd.DataFrame:
    """One row per operator launch shape with its time per launch."""
    pairs = case_sections(case)
    ops = [o for _, o in pairs]
    times = operator_times(case, ops, method)
    rows = []
    for (section, o), t in zip(pairs, times):
        b, m, n, k = o.gemm if o.gemm else (0, 0, 0, 0)
        rows.append((section, o.name, o.kind, o.phase, o.count, o.flops, o.bytes, o.out_bytes, b, m, n, k, float(t)))
    return pd.DataFrame(rows, columns=OPERATOR_COLUMNS)

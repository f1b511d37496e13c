"""FLOP accounting for MFU and HFU.

MFU (model FLOPs utilization, Chowdhery et al. 2022, PaLM App. B): model FLOPs per step = tokens x
(6·N_active + 12·L·s·H·d_head) with attention not halved for causality (MLA: 6·L·s·H·(d_qk + d_v)),
divided by step time x GPUs x dense peak of the precision. HFU (hardware FLOPs utilization) counts the
FLOPs actually executed, recomputation included, from the priced operator list.
"""
from __future__ import annotations

from rapidllm.ops.params import active_parameters
from rapidllm.spec.case import Case, TrainingWorkload


def model_flops_per_step(case: Case) -> float:
    w, m = case.workload, case.model
    assert isinstance(w, TrainingWorkload)
    tokens = w.global_batch * w.seq_len
    non_embedding = active_parameters(m) - (m.vocab * m.hidden if not m.tied_embeddings else 0)
    attention = 12.0 * m.layers * w.seq_len * m.heads * m.head_dim
    if m.attention == "mla" and m.mla:              # scores over d_qk = nope + rope, values over d_v
        attention = 6.0 * m.layers * w.seq_len * m.heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim
                                                            + m.mla.v_head_dim)
    return tokens * (6.0 * non_embedding + 6.0 * m.vocab * m.hidden + attention)


def utilization(flops: float, step_time_s: float, case: Case) -> float:
    peak = case.hardware.peak_flops(case.precision) * case.parallelism.world
    return flops / (step_time_s * peak) if step_time_s > 0 else 0.0

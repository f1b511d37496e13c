"""Decode attention as per-query-head kernels run it (`decode_attention: per_head`).

Serving engines of 2023 ran the generation step's attention with one CTA per (sequence, query head, key
split), not one per KV head: TensorRT-LLM's masked multi-head attention before XQA (grid = num_heads x
batch x seq_len_tile, `mmha_launch_kernel_ex` in decoderMaskedMultiheadAttentionLaunch.h; each block
reads the cache of head `hi / num_heads_q_kv_ratio`, decoderMaskedMultiheadAttentionTemplate.h), the
FasterTransformer kernel it came from, and vLLM's PagedAttention v1/v2 (grid = num_heads x num_seqs x
partitions). For a GQA model the q heads of a group therefore each stream their KV head's cache: group x
the bytes a grouped kernel (FlashAttention's split-KV decode, FlashInfer, TensorRT-LLM's XQA, FlashMLA)
reads once. The group's CTAs are adjacent in the grid and run in the same wave at the same pace, so the
re-reads are L2 hits (`attention._hbm_rereads`) and the step is bound by L2 bandwidth instead of HBM.
Their dot products run on the CUDA cores with FP32 accumulation (`MMHA_USE_FP32_ACUM_FOR_FMA`), not on
tensor cores. TensorRT-LLM's XQA kernel (v0.8, 2024) shares one load among the group; NVIDIA's own
announcement measured 1.9-2.4x more Llama-70B throughput with it at 128/2048 tokens (blog "New XQA-kernel
provides 2.4x more Llama-70B throughput within the same latency budget"). For MHA (group 1) both kernels
read the cache once and price within a few percent of each other (tests/test_decode_per_head.py).
"""
from __future__ import annotations

from rapidllm.ops.attention import (VEC_OPS_FWD, AttentionPrice, _check, _hbm_rereads, _load_bandwidth,
                                    _softmax_s, _wave_factor, _widen_s, block_rows, kv_splits)
from rapidllm.spec.hardware import DTYPE_BYTES, HardwareSpec


def per_head_decode(hw: HardwareSpec, batch: int, q_heads: int, kv_heads: int, kv_len: int,
                    head_dim_qk: int, head_dim_v: int, dtype: str = "bf16", kv_dtype: str | None = None
                    ) -> AttentionPrice:
    """One decode step (one query token per sequence) of per-query-head kernels on one rank, over a cache of
    `kv_dtype` (default `dtype`); an FP8 cache is widened on the CUDA cores by every CTA that reads it.

    Grid batch x q_heads, split over the keys like the grouped kernels when it leaves SMs idle
    (`attention.kv_splits`: TensorRT-LLM's multi-block mode); HBM reads each KV head's cache once (the
    group's CTAs hit L2 for the rest), L2 serves group x that; the math is 2 x (d_qk + d_v) FLOPs per
    (query head, key) on the FP32 CUDA cores plus the softmax; time = launch + max(math, HBM, L2).
    """
    group = _check(q_heads, kv_heads, "flash")
    b, kb = DTYPE_BYTES[dtype], DTYPE_BYTES[kv_dtype or dtype]
    kv_head = kv_len * (head_dim_qk + head_dim_v) * kb            # one sequence's cache of one KV head
    ctas = batch * q_heads
    rows = block_rows(hw, max(head_dim_qk, head_dim_v), dtype, 4)
    splits = kv_splits(hw, ctas, kv_len, rows)
    ctas *= splits
    l2_reads = float(batch) * q_heads * kv_head
    # the group's CTAs stream their key range at the same pace: L2 holds the window between the leading
    # and the lagging one (a key block each), not the whole range, as for the grouped kernel's query blocks
    reads = _hbm_rereads(hw, ctas, group, kv_head / splits, kv_head * min(rows, kv_len) / kv_len)
    kv_hbm = float(batch) * kv_heads * kv_head * reads
    hbm = kv_hbm + float(batch) * q_heads * (head_dim_qk + head_dim_v) * b
    if splits > 1:              # fp32 partial outputs and log-sum-exps, written then read back to combine
        hbm += float(batch) * q_heads * splits * (head_dim_v + 1) * 4 * 2
    pairs = float(batch) * q_heads * kv_len
    flops = 2.0 * pairs * (head_dim_qk + head_dim_v)
    compute_s = flops / hw.vector_flops
    vector_s = compute_s + _softmax_s(hw, pairs, VEC_OPS_FWD)
    if kb != b:                 # each query head's CTA widens the FP8 elements it reads
        vector_s += _widen_s(hw, l2_reads / kb)
    math_s = vector_s * _wave_factor(hw, ctas)
    hbm_s = hbm / min(hw.hbm_bandwidth * hw.utilization.hbm, _load_bandwidth(hw, ctas))
    t = hw.launch_overhead_s + max(math_s, hbm_s, (l2_reads + hbm - kv_hbm) / hw.l2_bandwidth)
    return AttentionPrice(t, flops, hbm, compute_s, hbm_s, 1, l2_reads)

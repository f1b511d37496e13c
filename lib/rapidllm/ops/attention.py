"""Attention as composite kernels: FlashAttention (forward/backward), naive attention, decode.

FlashAttention keeps the score tile on chip, so its HBM traffic is Q, O and K/V only — but K and V are
re-read once per query block (FlashAttention-1 analysis, Dao et al. 2022, Thm 2: Theta(N^2 d^2 / M)
accesses for SRAM size M), which the Optimus-extension review (§major-1) asks to be counted explicitly.
We count every re-read (`kv_reread_bytes`, block size from shared memory) and charge it to HBM unless the
K/V of the heads a wave is working on fits in L2, in which case a wave's re-reads are L2 hits. Naive
attention writes the score matrix S and the probabilities P to HBM and reads them back.
Head shapes: MHA (kv_heads == q_heads), GQA/MQA (fewer kv heads, shared by a group of q heads),
MLA (head_dim_qk != head_dim_v; `kv_shared=True` for the absorbed form whose V is a slice of the cached
latent K). Timing: launch + max(math, HBM, L2), math = tensor MMAs + softmax on the vector/SFU units.
`impl="flash"` is the FlashAttention-2 kernel: the softmax is not overlapped with the MMAs; its mma.sync
operands come from shared memory through registers, loads that add to the math on Hopper (FA-2 runs its
sm_80 code there: no TMA, no wgmma) and overlap it on sm_80; on Hopper mma.sync also reaches only 2/3 of
the dense peak. `impl="flash3"` is a Hopper-native kernel (FlashAttention-3, Shah et al. 2024; cuDNN's
fused attention and TensorRT-LLM's sm90 context kernels are built the same way): warpgroup wgmma at the
full tensor rate, reading shared memory directly. Its ping-pong scheduling overlaps one warpgroup's
softmax with another's MMAs (§3.1-3.2), but crediting that overlap in full prices the H100 forward at
~950 TFLOP/s against the measured 595-648 (Fig. 5), so the softmax still adds to the MMAs here: a
conservative 550 TFLOP/s at 2k-16k, between FA-2 (370 measured) and the measured FA-3. Both skip fully
masked tiles and compute a tile the causal diagonal crosses in full.
`impl="flash_triton"` is the 2023 Triton FlashAttention kernel llm-foundry ran (`attn_impl: triton`): its own
grid, 128 x 128 tiles and unpipelined loads on this model's MMA, softmax and shared-memory terms
(ops/attention_triton.py).
Context parallelism (`cp` > 1, causal) splits the sequence into 2·cp chunks and gives rank i chunks i and
2·cp−1−i (Megatron-Core / Transformer Engine's load-balanced layout), so every rank does 1/cp of the
causal work instead of the last rank doing almost a full q_len x kv_len rectangle.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rapidllm.ops.gemm import price_gemms
from rapidllm.spec.hardware import DTYPE_BYTES, HardwareSpec

IMPLS = ("flash", "flash3", "flash_triton", "naive")
MAX_BLOCK = 128          # register-file limit on the query block (FA2 uses 64-128)
VEC_OPS_FWD = 8.0        # scale, running max, subtract, sum (4 fp32 ops = 8 FLOP-equivalents of an FMA rate)
VEC_OPS_BWD = 12.0       # recompute P (scale, subtract) and dS = P * (dP - D) (3 ops), 6 FLOP-equivalents x2
# FP8 KV-cache elements an SM widens to 16 bits per clock where the kernel dequantizes before a 16-bit MMA:
# the packed PTX conversion cvt.rn.f16x2.e4m3x2 gives two elements per instruction lane (TensorRT-LLM XQA,
# cpp/kernels/xqa/mha.cu + mhaUtils.cuh `convertKCacheWordToF16`), on the conversion pipe of 16 results per
# clock per SM (CUDA C++ Programming Guide, arithmetic-instruction throughput table, "all other type
# conversions", compute capability 8.x-9.0). BF16 activations take a longer sequence there, not priced.
FP8_WIDEN_PER_SM_CLOCK = 2 * 16.0
# Fraction of the dense tensor peak the legacy warp-level mma.sync reaches, by compute-capability major.
# Hopper's peak needs the warpgroup wgmma instruction; mma.sync (all FlashAttention-2 uses) reaches about
# 2/3 of it (Shah et al. 2024, §2.2, after the microbenchmarks of Luo et al. 2024, arXiv:2402.13499).
# Other generations: mma.sync is the native path (sm_80) or unmeasured (sm_100), so no cap is assumed.
LEGACY_MMA_FRACTION = {9: 2.0 / 3.0}
# FlashAttention-2's mma.sync reads both operands from shared memory into registers (ldmatrix) once per warp
# that uses them. Forward (hdim 128: 128-query blocks, 4 warps along the queries): every warp reads the K
# and V tiles, 4·(d_qk + d_v)/128 elements per score. Backward (hdim 128 with >= 144 KiB of shared memory:
# 64 queries x 128 keys, 8 warps; S and dP on a 2 x 4 warp grid, dK and dV on 4 x 2, dQ on 2 x 4; P and dS
# go through shared memory to be read transposed) per (64 x 128) tile, in elements, see fa2_bwd_smem_elements.
# Block shapes and warp grids: flash-attn 2's launch configuration for head dim 128 (Dao 2023).
FA2_FWD_WARPS, FA2_FWD_QUERIES = 4, 128
FA2_BWD_QUERIES, FA2_BWD_KEYS = 64, 128


@dataclass(frozen=True)
class AttentionPrice:
    """Seconds, tensor FLOPs and HBM bytes of one attention kernel (plus the terms that bound it)."""
    time_s: float
    flops: float
    hbm_bytes: float
    compute_s: float = 0.0
    hbm_s: float = 0.0
    block: int = 0                   # query block (forward) / key block (backward) rows
    kv_reread_bytes: float = 0.0     # every K/V (forward) or Q/dO (backward) block load, L2 hits included


def visible_pairs(q_len: int, kv_len: int, causal: bool) -> float:
    """(query, key) pairs the mask leaves visible; causal queries are the last q_len positions of kv_len."""
    if not causal:
        return float(q_len) * kv_len
    q = min(q_len, kv_len)
    return float(q) * (kv_len - q) + q * (q + 1) / 2.0 + float(q_len - q) * kv_len


def executed_pairs(q_len: int, kv_len: int, causal: bool, q_block: int, k_block: int) -> float:
    """Pairs the tensor cores actually compute: FlashAttention skips fully masked tiles but computes a tile
    the causal diagonal crosses in full and masks it (FA-2, Dao 2023, §3.1), so each query block runs up
    to the key block holding its last query's last visible key."""
    if not causal or q_len > kv_len:
        return visible_pairs(q_len, kv_len, causal)
    starts = np.arange(0, q_len, q_block)
    rows = np.minimum(q_block, q_len - starts)
    last_key = kv_len - q_len + starts + rows          # queries are the last q_len positions of kv_len
    keys = np.minimum(kv_len, np.ceil(last_key / k_block) * k_block)
    return float(np.dot(rows, keys))


def rank_pairs(q_len: int, kv_len: int, causal: bool, cp: int, q_block: int, k_block: int
               ) -> tuple[float, float]:
    """(visible, executed) pairs of one rank. With load-balanced context parallelism (causal, cp > 1,
    q_len = kv_len / cp) the rank holds the first and the last of 2·cp chunks: each chunk's queries are
    the last positions of its own prefix, which visible_pairs/executed_pairs already describe."""
    if cp > 1 and causal and q_len * cp == kv_len and q_len % 2 == 0:
        c = q_len // 2
        chunks = ((c, c), (c, kv_len))
    else:
        chunks = ((q_len, kv_len),)
    return (sum(visible_pairs(q, kv, causal) for q, kv in chunks),
            sum(executed_pairs(q, kv, causal, q_block, k_block) for q, kv in chunks))


def block_rows(hw: HardwareSpec, head_dim: int, dtype: str, tiles: int) -> int:
    """Block rows that fit in shared memory: FlashAttention's B = M / (tiles * d), capped, power of two."""
    m = hw.limits.max_shared_memory_per_block / DTYPE_BYTES[dtype]
    b = min(MAX_BLOCK, int(m // (tiles * head_dim)))
    return max(16, 2 ** int(math.log2(max(b, 1))))


def kv_math(hw: HardwareSpec, dtype: str, kv_dtype: str, impl: str) -> tuple[str, bool]:
    """(MMA input type, whether the cache is widened on the CUDA cores first) of an attention kernel reading
    a `kv_dtype` cache with `dtype` queries. An FP8 cache (TensorRT-LLM FP8_KV_CACHE, vLLM / SGLang
    --kv-cache-dtype fp8, per-tensor scales): Hopper-native kernels quantize Q to FP8 and run both products
    as FP8 wgmma (TensorRT-LLM XQA's mha_sm90.cu: MathElem is the cache type, `F16QToF8Converter`; vLLM's
    FlashAttention-3 backend: "queries are quantized to FP8"), so no widening; the others (XQA's mha.cu on
    sm_80-sm_89 and wherever QGMMA is off, vLLM's and FlashInfer's decode) widen each K/V element to 16 bits
    in registers and run the 16-bit MMA at the activation type ("dequantized on-the-fly in the MHA/MQA
    kernel", TensorRT-LLM docs, gpt-attention "INT8/FP8 KV Caches")."""
    if kv_dtype == dtype:
        return dtype, False
    if impl == "flash3" and kv_dtype in hw.tensor_flops:
        return kv_dtype, False
    return dtype, True


def _widen_s(hw: HardwareSpec, elements: float) -> float:
    """Seconds the CUDA cores of the whole device take to widen `elements` FP8 cache elements to 16 bits."""
    return elements / (FP8_WIDEN_PER_SM_CLOCK * hw.sm_count * hw.clock_hz)


def _softmax_s(hw: HardwareSpec, elements: float, vec_ops: float) -> float:
    """Score-element work on the CUDA cores: vec_ops FLOP-equivalents plus one exp on the SFUs, whose rate is
    the device's own (`HardwareSpec.exp_per_sm_clock`, not a ratio to the FP32 rate)."""
    return elements * (vec_ops / hw.vector_flops + 1.0 / (hw.exp_per_sm_clock * hw.sm_count * hw.clock_hz))


def flash_mma_flops(hw: HardwareSpec, dtype: str, impl: str = "flash") -> float:
    """Tensor FLOP/s of the kernel's MMAs: the calibrated peak, for FlashAttention-2 capped where mma.sync
    is not the instruction that reaches the datasheet peak (Hopper)."""
    if impl == "flash3":
        return hw.peak_flops(dtype) * hw.utilization.compute
    return hw.peak_flops(dtype) * hw.utilization.compute * LEGACY_MMA_FRACTION.get(_major(hw), 1.0)


def fa2_bwd_smem_elements(dqk: int, dv: int) -> float:
    """Shared-memory elements FlashAttention-2's backward moves per score: operand reads of its five
    products (each operand once per warp row or column of the product's warp grid) plus P, dS, Q and dO
    written to shared memory, over one 64 x 128 tile."""
    m, n = FA2_BWD_QUERIES, FA2_BWD_KEYS
    s = 4 * m * dqk + 2 * n * dqk            # S = Q K^T: Q read by 4 warp columns, K by 2 warp rows
    dp = 4 * m * dv + 2 * n * dv             # dP = dO V^T
    dv_ = 2 * n * m + 4 * m * dv             # dV = P^T dO: P^T by 2 warp columns, dO by 4 warp rows
    dk = 2 * n * m + 4 * m * dqk             # dK = dS^T Q
    dq = 4 * m * n + 2 * n * dqk             # dQ = dS K: dS by 4 warp columns, K by 2 warp rows
    writes = 2 * m * n + m * (dqk + dv)      # P and dS, the Q and dO tiles
    return (s + dp + dv_ + dk + dq + writes) / (m * n)


def _math_s(hw: HardwareSpec, impl: str, mma_s: float, softmax_s: float, smem_bytes: float,
                ctas: int) -> float:
    """Math time of a FlashAttention kernel. FA-2 on Hopper runs its sm_80 code: without TMA and wgmma
    nothing overlaps the operand loads with the MMAs or the softmax (Shah et al. 2024, §1-2: FA-2 reaches
    35% of the H100), so the three add; on sm_80, its native target, warps hide the loads behind the MMAs.
    flash3 reads operands straight from shared memory (wgmma) and is priced on math alone."""
    math = mma_s + softmax_s
    if impl == "flash":
        smem_s = smem_bytes / (hw.smem_bandwidth_per_sm * hw.sm_count)
        math = math + smem_s if _major(hw) in LEGACY_MMA_FRACTION else max(math, smem_s)
    return math * _wave_factor(hw, ctas)


def _major(hw: HardwareSpec) -> int:
    return int(hw.compute_capability.split(".")[0]) if hw.compute_capability else 0


def _hbm_rereads(hw: HardwareSpec, ctas: int, span: int, head_bytes: float,
                 block_bytes: float) -> float:
    """How many times each streamed head is read from HBM when `span` CTAs each read it.

    The CTAs of one wave that share a head (block index fastest in the grid) start together and stream
    the head at the same pace, so L2 must hold only the window between the leading and the lagging CTA
    (at most one block per CTA sharing it). If the windows of the heads in flight fit in L2, the wave's
    re-reads are L2 hits; otherwise every read misses.
    """
    wave = min(ctas, hw.sm_count)                    # one attention CTA per SM (shared memory bound)
    heads_in_flight = max(1, math.ceil(wave / span))
    if heads_in_flight * min(head_bytes, min(span, wave) * block_bytes) <= hw.l2_size:
        return float(math.ceil(span / wave))
    return float(span)


def _wave_factor(hw: HardwareSpec, ctas: int) -> float:
    """Partial-last-wave inflation of the math time (one CTA per SM)."""
    return math.ceil(ctas / hw.sm_count) * hw.sm_count / ctas if ctas else 1.0


def _check(q_heads: int, kv_heads: int, impl: str) -> int:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, not {impl!r}")
    if kv_heads < 1 or q_heads % kv_heads:
        raise ValueError(f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})")
    return q_heads // kv_heads


def _naive(hw, batch, q_heads, kv_heads, q_len, kv_len, dqk, dv, dtype, backward) -> AttentionPrice:
    """Unfused attention: batched GEMMs priced by the tile model; S and P round-trip through HBM."""
    b, bh = DTYPE_BYTES[dtype], batch * q_heads
    shapes = ([(bh, q_len, kv_len, dqk), (bh, q_len, dv, kv_len)] if not backward else
              [(bh, q_len, kv_len, dv), (bh, kv_len, dv, q_len), (bh, q_len, dqk, kv_len), (bh, kv_len, dqk, q_len)])
    g = price_gemms(hw, *[[s[i] for s in shapes] for i in range(4)], dtype)
    scores = float(bh) * q_len * kv_len          # masking is applied after a full QK^T GEMM
    # forward: softmax reads S, writes P; backward: dS = P * (dP - D) reads P and dP, writes dS
    pw_bytes = scores * b * (2 if not backward else 3)
    pw_s = hw.launch_overhead_s + max(pw_bytes / (hw.hbm_bandwidth * hw.utilization.hbm),
                                      _softmax_s(hw, scores, VEC_OPS_BWD if backward else VEC_OPS_FWD))
    return AttentionPrice(time_s=float(g.time_s.sum()) + pw_s, flops=float(g.flops.sum()),
                          hbm_bytes=float(g.hbm_bytes.sum()) + pw_bytes, compute_s=float(g.compute_s.sum()),
                          hbm_s=float(g.hbm_s.sum()) + pw_bytes / (hw.hbm_bandwidth * hw.utilization.hbm))


def attention_forward(hw: HardwareSpec, batch: int, q_heads: int, kv_heads: int, q_len: int, kv_len: int,
                      head_dim_qk: int, head_dim_v: int, causal: bool = True, dtype: str = "bf16",
                      impl: str = "flash", kv_shared: bool = False, training: bool = True, cp: int = 1,
                      kv_dtype: str | None = None) -> AttentionPrice:
    """Forward attention of one rank; `training` adds the log-sum-exp the backward pass needs. `kv_dtype`:
    the element type K and V are read in (a decode step's FP8 cache, `kv_math`); default `dtype`."""
    group = _check(q_heads, kv_heads, impl)
    if impl == "naive":
        return _naive(hw, batch, q_heads, kv_heads, q_len, kv_len, head_dim_qk, head_dim_v, dtype, False)
    if impl == "flash_triton":       # imported here: attention_triton builds on this module's terms
        from rapidllm.ops.attention_triton import triton_forward
        return triton_forward(hw, batch, q_heads, q_len, kv_len, head_dim_qk, head_dim_v, causal, dtype,
                              training, cp)
    b = DTYPE_BYTES[dtype]
    kv_dtype = kv_dtype or dtype
    kb = DTYPE_BYTES[kv_dtype]
    # shared memory holds the Q, K, V and O tiles; with kv_shared V is a slice of the K tile (FlashMLA
    # keeps a 64 x 576 Q tile and two 64 x 576 K/V stages, its output in registers): three tiles
    br = block_rows(hw, max(head_dim_qk, head_dim_v), dtype, 3 if kv_shared else 4)
    visible, executed = rank_pairs(q_len, kv_len, causal, cp, max(br // group, 1), br)
    pairs = batch * q_heads * visible
    flops = 2.0 * pairs * (head_dim_qk + head_dim_v)
    # the q heads of a GQA group are packed into the rows of one block (decode: one CTA per kv head)
    n_qb = math.ceil(q_len * group / br)
    ctas = batch * kv_heads * n_qb
    vis = pairs / (float(batch) * q_heads * q_len * kv_len)               # share of K/V a block reads
    kv_head = kv_len * (head_dim_qk if kv_shared else head_dim_qk + head_dim_v) * kb
    reread = float(batch) * kv_heads * n_qb * kv_head * vis
    kv_hbm = batch * kv_heads * kv_head * vis * _hbm_rereads(hw, ctas, n_qb, kv_head, kv_head * br / kv_len)
    hbm = kv_hbm + float(batch) * q_heads * q_len * ((head_dim_qk + head_dim_v) * b + (4 if training else 0))
    splits = 1 if training else kv_splits(hw, ctas, kv_len, br)   # serving kernels split a small grid's keys
    if splits > 1:              # fp32 partial outputs and log-sum-exps, written then read back to combine
        hbm += float(batch) * q_heads * q_len * splits * (head_dim_v + 1) * 4 * 2
        ctas *= splits
    run = batch * q_heads * executed
    mma, widen = kv_math(hw, dtype, kv_dtype, impl)
    compute = 2.0 * run * (head_dim_qk + head_dim_v) / flash_mma_flops(hw, mma, impl)
    smem = run * FA2_FWD_WARPS * (head_dim_qk + head_dim_v) / FA2_FWD_QUERIES * kb
    vector_s = _softmax_s(hw, run, VEC_OPS_FWD)
    if widen:                   # every K/V element a CTA loads, widened in registers before its 16-bit MMA
        vector_s += _widen_s(hw, reread / kb)
    math_s = _math_s(hw, impl, compute, vector_s, smem, ctas)
    rate = hw.hbm_bandwidth * hw.utilization.hbm
    hbm_s = hbm / (rate if training else min(rate, _load_bandwidth(hw, ctas)))
    t = hw.launch_overhead_s + max(math_s, hbm_s, (reread + hbm - kv_hbm) / hw.l2_bandwidth)
    return AttentionPrice(t, flops, hbm, compute, hbm_s, br, reread)


def kv_splits(hw: HardwareSpec, ctas: int, kv_len: int, block: int) -> int:
    """Key-range splits of a serving attention kernel whose (sequence, kv head, query block) grid leaves SMs
    idle: Flash-Decoding (Dao et al. 2023, "Flash-Decoding for long-context inference"; flash-attn's split-KV
    forward, whose heuristic keeps one split once the grid covers 80% of the SMs), TensorRT-LLM's
    multi-block mode and FlashInfer split the keys so the grid fills the SMs, at most one split per key
    block and 128 in all (flash-attn's cap). The fp32 partial results are charged as HBM traffic; their
    reduction is not a second launch, as in TensorRT-LLM's multi-block kernels, where the last block to
    finish combines them (an atomic counter). flash-attn and FlashInfer launch a separate combine kernel."""
    if ctas >= 0.8 * hw.sm_count:
        return 1
    return max(1, min(math.ceil(hw.sm_count / ctas), math.ceil(kv_len / block), 128))


def _load_bandwidth(hw: HardwareSpec, ctas: int) -> float:
    """Bytes/s a grid of `ctas` attention CTAs (one per SM) can pull: each SM's share of the L2 bandwidth,
    so a grid on a few SMs cannot stream the cache at the full HBM rate."""
    return min(ctas, hw.sm_count) * hw.l2_bandwidth / hw.sm_count


def attention_backward(hw: HardwareSpec, batch: int, q_heads: int, kv_heads: int, q_len: int, kv_len: int,
                       head_dim_qk: int, head_dim_v: int, causal: bool = True, dtype: str = "bf16",
                       impl: str = "flash", kv_shared: bool = False, cp: int = 1) -> AttentionPrice:
    """Backward attention of one rank (FlashAttention-2 order: CTAs own key blocks and stream Q, dO, dQ past them).

    Five GEMM-like products (S, dP, dV, dK, dQ) = 2.5x the forward math; plus the D = rowsum(dO*O)
    preprocessing pass. dQ is accumulated in fp32 (read + write) once per key block.
    """
    _check(q_heads, kv_heads, impl)
    if impl == "naive":
        return _naive(hw, batch, q_heads, kv_heads, q_len, kv_len, head_dim_qk, head_dim_v, dtype, True)
    if impl == "flash_triton":
        from rapidllm.ops.attention_triton import triton_backward
        return triton_backward(hw, batch, q_heads, q_len, kv_len, head_dim_qk, head_dim_v, causal, dtype, cp)
    b = DTYPE_BYTES[dtype]
    dqk, dv = head_dim_qk, head_dim_v
    bc = block_rows(hw, max(dqk, dv), dtype, 8)                            # K, V, dK, dV blocks stay on chip
    visible, executed = rank_pairs(q_len, kv_len, causal, cp, bc, bc)
    pairs = batch * q_heads * visible
    flops = 2.0 * pairs * (2 * dqk + 3 * dv)         # S, dQ, dK use d_qk; dP, dV use d_v
    n_kb = math.ceil(kv_len / bc)
    ctas = batch * q_heads * n_kb                                          # one CTA per (q head, key block)
    vis = pairs / (float(batch) * q_heads * q_len * kv_len)
    # per q head streamed past every key block: Q, dO (dtype), lse + D (fp32), dQ accumulator (fp32 r+w)
    q_head = q_len * ((dqk + dv) * b + 8 + 2 * dqk * 4)
    reread = float(batch) * q_heads * n_kb * q_head * vis
    q_hbm = batch * q_heads * q_head * vis * _hbm_rereads(hw, ctas, n_kb, q_head, q_head * bc / q_len)
    kv_once = float(batch) * kv_heads * kv_len * (dqk + dv) * b * 2      # read K, V; write dK, dV
    if kv_shared:
        kv_once = float(batch) * kv_heads * kv_len * dqk * b * 2
    pre = float(batch) * q_heads * q_len * (2 * dv * b + 4)               # D = rowsum(dO * O)
    dq_out = float(batch) * q_heads * q_len * dqk * b                      # fp32 dQ -> dtype
    hbm = q_hbm + kv_once + pre + dq_out
    run = batch * q_heads * executed
    compute = 2.0 * run * (2 * dqk + 3 * dv) / flash_mma_flops(hw, dtype, impl)
    smem = run * fa2_bwd_smem_elements(dqk, dv) * b
    math_s = _math_s(hw, impl, compute, _softmax_s(hw, run, VEC_OPS_BWD), smem, ctas)
    hbm_s = hbm / (hw.hbm_bandwidth * hw.utilization.hbm)
    t = 3 * hw.launch_overhead_s + max(math_s, hbm_s, (reread + hbm - q_hbm) / hw.l2_bandwidth)
    return AttentionPrice(t, flops, hbm, compute, hbm_s, bc, reread)


def decode_attention(hw: HardwareSpec, batch: int, q_heads: int, kv_heads: int, kv_len: int,
                     head_dim_qk: int, head_dim_v: int, dtype: str = "bf16", impl: str = "flash",
                     kv_shared: bool = False, q_len: int = 1, kv_dtype: str | None = None) -> AttentionPrice:
    """One decode step: q_len new tokens per sequence attend to a KV cache of kv_len (read once per group),
    stored in `kv_dtype` (default `dtype`)."""
    return attention_forward(hw, batch, q_heads, kv_heads, q_len, kv_len, head_dim_qk, head_dim_v,
                             causal=q_len > 1, dtype=dtype, impl=impl, kv_shared=kv_shared, training=False,
                             kv_dtype=kv_dtype)


def attention(hw: HardwareSpec, batch: int, q_heads: int, kv_heads: int, q_len: int, kv_len: int,
              head_dim_qk: int, head_dim_v: int, causal: bool, dtype: str, impl: str,
              backward: bool = False) -> AttentionPrice:
    """The brief's uniform entry point: forward (or backward) attention of one layer on one device."""
    fn = attention_backward if backward else attention_forward
    return fn(hw, batch, q_heads, kv_heads, q_len, kv_len, head_dim_qk, head_dim_v, causal, dtype, impl)

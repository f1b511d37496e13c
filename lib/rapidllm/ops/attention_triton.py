"""The 2023 Triton FlashAttention kernel (llm-foundry's `attn_impl: triton`), priced by the FlashAttention tile model.

Why a kernel of its own: llm-foundry's MPT benchmarks (scripts/train/benchmarking/submit_benchmarks.py at
b2a43a14, `--attn_impl` default 'triton', line 144, written into the model config at line 305; the runs
install llm-foundry v0.3.0, line 401) ran `llmfoundry/models/layers/flash_attn_triton.py` (v0.3.0 = 54cbb8bd,
unchanged since 4c94c207; a copy of Dao-AILab/flash-attention eff9fe6b `flash_attn/flash_attn_triton.py`
with `triton_pre_mlir` imports), compiled by the legacy (pre-MLIR) Triton of vchiley/triton branch
`triton_pre_mlir_sm90` (86c7fe23). Line numbers below are that file's at v0.3.0. What the source fixes:

- Tiles: BLOCK_M = BLOCK_N = 128 in the forward (L623, L640) and in both backward configs (L491-492);
  causal masking skips whole tiles (forward loop ends at the diagonal block, L129; backward starts at it,
  L302) and computes the diagonal tile in full, as `executed_pairs` counts.
- Grids: forward (ceil(seqlen_q / 128), batch x heads) (L625). Backward: two autotuned configs (L489-501):
  SEQUENCE_PARALLEL False, one program per (batch, head) looping over every key block (L548-566) with dQ
  read, updated and written per tile (L442-461); SEQUENCE_PARALLEL True, one program per (key block,
  batch, head) (L567-584, grid L695-696) adding dQ with fp32 atomics (L462-471). The autotuner times both
  on the first call per (seqlen_q/32, seqlen_k/32, bias type, causal, head dim) and keeps the faster
  (triton_pre_mlir runtime/autotuner.py L65-79), so the backward is the faster of the two prices.
- No software pipelining: num_stages=1 (forward L642, backward L491-492) turns the pipeline pass off
  (lib/codegen/transform/pipeline.cc L114-115), and a program's fp32 accumulators (forward acc_o and qk,
  backward dk and dv: 2 x 128 x 128 x 4 B over 8 warps = 128 registers per thread, num_warps 8 for head
  dim > 64, L624 and L491-492) leave one program per SM (65,536 registers). So nothing overlaps a tile's
  global loads with its MMAs: the tile stream adds to the math instead of hiding behind it, and every load
  an MMA waits for costs one memory latency per tile (K and V forward; Q and dO backward, and the dQ read
  without atomics).
- Three more kernels run one after another around the backward kernel (`side_kernel_bytes`): D =
  rowsum(dO * O) (L667-673), the zeroing of the fp32 dQ accumulator by both configs' pre-hook (L485-492)
  and its copy into dQ (L720); each is its own pass over HBM and adds to the backward.
- GQA/MQA: llm-foundry repeats K and V to every query head before the call (llmfoundry/models/layers/
  attention.py L403-413 at v0.3.0), so the kernel runs as multi-head attention.

The MMAs, the softmax and the shared-memory operand traffic are the FlashAttention-2 model's (legacy
mma.sync: generator.cc selects the sm_80 m16n8k16 path for sm >= 80, so the Hopper mma.sync cap applies).
"""
from __future__ import annotations

import math

from rapidllm.ops import attention as fa
from rapidllm.ops.gemm import memory_latency_s
from rapidllm.spec.hardware import DTYPE_BYTES, HardwareSpec

BLOCK = 128            # BLOCK_M = BLOCK_N, forward and backward (flash_attn_triton.py L491-492, L623)
FWD_WAITED_LOADS = 2   # K before QK^T (L135), V before PV (L190)
BWD_WAITED_LOADS = 2   # Q before QK^T (L358), dO before dV (L404); + dQ (L444) without atomics


def _exposed_s(hw: HardwareSpec, tiles: float, programs: int, stream_bytes: float, waited_loads: int) -> float:
    """Time a non-pipelined kernel spends loading, on its busiest SM (one program per SM): its share of the
    tile stream at one SM's share of the L2 bandwidth, plus one memory latency per waited load per tile.
    The wave factor spreads both over the SMs the grid occupies (a grid smaller than the GPU leaves the
    other SMs' L2 share unused)."""
    wave = fa._wave_factor(hw, programs)
    return wave * (stream_bytes / hw.l2_bandwidth + tiles / hw.sm_count * waited_loads * memory_latency_s(hw))


def _check_dims(dqk: int, dv: int) -> None:
    if dqk != dv or dqk > 128:
        raise ValueError(f"flash_triton needs equal query/key/value head dims of at most 128 (flash_attn_triton.py "
                         f"L591-593), not {dqk}/{dv}")


def triton_forward(hw: HardwareSpec, batch: int, q_heads: int, q_len: int, kv_len: int, dqk: int, dv: int,
                   causal: bool, dtype: str, training: bool, cp: int) -> fa.AttentionPrice:
    """Forward of one rank: grid (query blocks, batch x heads), 128 x 128 tiles, loads exposed."""
    _check_dims(dqk, dv)
    b = DTYPE_BYTES[dtype]
    visible, executed = fa.rank_pairs(q_len, kv_len, causal, cp, BLOCK, BLOCK)
    flops = 2.0 * batch * q_heads * visible * (dqk + dv)
    n_qb = math.ceil(q_len / BLOCK)
    programs = batch * q_heads * n_qb
    vis = executed / (float(q_len) * kv_len)          # share of K/V (Q/dO) the loops read, diagonal tiles whole
    kv_head = kv_len * (dqk + dv) * b
    reread = float(batch) * q_heads * n_qb * kv_head * vis
    kv_hbm = batch * q_heads * kv_head * vis * fa._hbm_rereads(hw, programs, n_qb, kv_head, (dqk + dv) * b * BLOCK)
    hbm = kv_hbm + float(batch) * q_heads * q_len * ((dqk + dv) * b + (4 if training else 0))
    run = batch * q_heads * executed
    compute = 2.0 * run * (dqk + dv) / fa.flash_mma_flops(hw, dtype, "flash")
    smem = run * fa.FA2_FWD_WARPS * (dqk + dv) / fa.FA2_FWD_QUERIES * b
    math_s = fa._math_s(hw, "flash", compute, fa._softmax_s(hw, run, fa.VEC_OPS_FWD), smem, programs)
    load_s = _exposed_s(hw, run / BLOCK**2, programs, reread + hbm - kv_hbm, FWD_WAITED_LOADS)
    hbm_s = hbm / (hw.hbm_bandwidth * hw.utilization.hbm)
    t = hw.launch_overhead_s + max(math_s + load_s, hbm_s)
    return fa.AttentionPrice(t, flops, hbm, compute, hbm_s, BLOCK, reread)


def _backward(hw: HardwareSpec, batch: int, q_heads: int, q_len: int, kv_len: int, dqk: int, dv: int,
              causal: bool, dtype: str, cp: int, sequence_parallel: bool) -> fa.AttentionPrice:
    """One backward config: SEQUENCE_PARALLEL programs per (key block, batch, head), else per (batch, head)."""
    _check_dims(dqk, dv)
    b = DTYPE_BYTES[dtype]
    visible, executed = fa.rank_pairs(q_len, kv_len, causal, cp, BLOCK, BLOCK)
    flops = 2.0 * batch * q_heads * visible * (2 * dqk + 3 * dv)
    n_kb = math.ceil(kv_len / BLOCK)
    programs = batch * q_heads * (n_kb if sequence_parallel else 1)
    vis = executed / (float(q_len) * kv_len)          # share of K/V (Q/dO) the loops read, diagonal tiles whole
    # per head streamed past every key block: Q, dO (dtype), lse + D (fp32), dQ accumulator (fp32 r+w)
    q_head = q_len * ((dqk + dv) * b + 8 + 2 * dqk * 4)
    reread = float(batch) * q_heads * n_kb * q_head * vis
    if sequence_parallel:       # key blocks of one head side by side in a wave, as FlashAttention-2's grid
        passes = fa._hbm_rereads(hw, programs, n_kb, q_head, q_head * BLOCK / q_len)
    else:                       # one program streams its head n_kb times: L2 must hold every head in flight
        passes = 1.0 if min(programs, hw.sm_count) * q_head <= hw.l2_size else float(n_kb)
    q_hbm = batch * q_heads * q_head * vis * passes
    kv_once = float(batch) * q_heads * kv_len * (dqk + dv) * b * 2       # read K, V; write dK, dV
    hbm = q_hbm + kv_once
    run = batch * q_heads * executed
    compute = 2.0 * run * (2 * dqk + 3 * dv) / fa.flash_mma_flops(hw, dtype, "flash")
    smem = run * fa.fa2_bwd_smem_elements(dqk, dv) * b
    math_s = fa._math_s(hw, "flash", compute, fa._softmax_s(hw, run, fa.VEC_OPS_BWD), smem, programs)
    waited = BWD_WAITED_LOADS + (0 if sequence_parallel else 1)
    load_s = _exposed_s(hw, run / BLOCK**2, programs, reread + hbm - q_hbm, waited)
    hbm_s = hbm / (hw.hbm_bandwidth * hw.utilization.hbm)
    side = side_kernel_bytes(batch, q_heads, q_len, dqk, dv, b)
    t = 4 * hw.launch_overhead_s + side / (hw.hbm_bandwidth * hw.utilization.hbm) + max(math_s + load_s, hbm_s)
    return fa.AttentionPrice(t, flops, hbm + side, compute, hbm_s, BLOCK, reread)


def side_kernel_bytes(batch: int, q_heads: int, q_len: int, dqk: int, dv: int, b: int) -> float:
    """HBM bytes of the three kernels `_flash_attn_backward` launches around the backward kernel, one after
    another on the stream, so they add to it: D = rowsum(dO * O) (`_bwd_preprocess_do_o_dot`, L667-673,
    reads O and dO, writes D in fp32), the autotuner's pre-hook zeroing the fp32 dQ accumulator
    (`init_to_zero('DQ')`, L485-492) and `dq.copy_(dq_accum)` (L720: reads fp32, writes the input dtype)."""
    rows = float(batch) * q_heads * q_len
    return rows * (2 * dv * b + 4) + rows * dqk * 4 + rows * dqk * (4 + b)


def triton_backward(hw: HardwareSpec, batch: int, q_heads: int, q_len: int, kv_len: int, dqk: int, dv: int,
                    causal: bool, dtype: str, cp: int) -> fa.AttentionPrice:
    """Backward of one rank: the faster of the two autotuned configs, as the autotuner keeps."""
    return min((_backward(hw, batch, q_heads, q_len, kv_len, dqk, dv, causal, dtype, cp, sp) for sp in (False, True)),
               key=lambda p: p.time_s)

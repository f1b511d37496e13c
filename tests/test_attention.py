"""Attention composite kernels: FLOP counts, HBM byte accounting, head layouts, decode."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from rapidllm.ops.attention import (attention, attention_backward, attention_forward, block_rows, kv_splits,
                                    decode_attention, executed_pairs, rank_pairs, visible_pairs)
from rapidllm.spec.hardware import HardwareSpec
from rapidllm.validate.kernels import load_hardware
from test_gemm_kernel import make_hw


def test_visible_pairs():
    assert visible_pairs(4, 4, False) == 16
    assert visible_pairs(4, 4, True) == 10            # lower triangle incl. diagonal
    assert visible_pairs(1, 100, True) == 100          # a decode query sees the whole cache
    assert visible_pairs(2, 10, True) == 9 + 10


def test_forward_flops_and_causal_halving():
    hw = make_hw()
    full = attention_forward(hw, 2, 32, 32, 4096, 4096, 128, 128, causal=False)
    assert full.flops == 4 * 2 * 32 * 4096 * 4096 * 128
    half = attention_forward(hw, 2, 32, 32, 4096, 4096, 128, 128, causal=True)
    assert half.flops / full.flops == pytest.approx(0.5, rel=1e-3)
    assert half.time_s < 0.6 * full.time_s
    bwd = attention_backward(hw, 2, 32, 32, 4096, 4096, 128, 128, causal=False)
    assert bwd.flops == pytest.approx(2.5 * full.flops)


def test_kv_reread_once_per_query_block():
    """FlashAttention-1 accounting: every query block loads all (visible) K and V."""
    hw = make_hw()
    L, d = 8192, 128
    br = block_rows(hw, d, "bf16", 4)
    assert 16 <= br <= 128 and br & (br - 1) == 0
    p = attention_forward(hw, 1, 16, 16, L, L, d, d, causal=False)
    assert p.block == br
    assert p.kv_reread_bytes == pytest.approx(16 * (L / br) * L * 2 * d * 2)
    # compulsory traffic: Q, K, V read once, O written once, plus the fp32 log-sum-exp
    compulsory = 16 * L * d * 2 * 4 + 16 * L * 4
    assert p.hbm_bytes >= compulsory * (1 - 1e-9)
    # with no L2 every re-read comes from HBM
    no_l2 = attention_forward(replace(hw, l2_size=0.0), 1, 16, 16, L, L, d, d, causal=False)
    assert no_l2.hbm_bytes == pytest.approx(p.kv_reread_bytes + 16 * L * (2 * d * 2 + 4))
    assert no_l2.time_s >= p.time_s
    # smaller shared memory -> smaller blocks -> more re-reads
    small = replace(hw, limits=replace(hw.limits, max_shared_memory_per_block=32 * 1024))
    assert attention_forward(small, 1, 16, 16, L, L, d, d, causal=False).kv_reread_bytes > p.kv_reread_bytes


def test_flash_beats_naive_and_moves_fewer_bytes():
    hw = make_hw()
    for L in (1024, 4096, 16384):
        f = attention_forward(hw, 4, 32, 32, L, L, 128, 128, True, "bf16", "flash")
        n = attention_forward(hw, 4, 32, 32, L, L, 128, 128, True, "bf16", "naive")
        assert f.time_s < n.time_s and f.hbm_bytes < n.hbm_bytes
        # naive writes S and reads it back (plus P): at least 2 * B*H*L^2 * bytes
        assert n.hbm_bytes >= 2 * 4 * 32 * L * L * 2
    fb = attention_backward(hw, 4, 32, 32, 4096, 4096, 128, 128, True, "bf16", "flash")
    nb = attention_backward(hw, 4, 32, 32, 4096, 4096, 128, 128, True, "bf16", "naive")
    assert fb.time_s < nb.time_s


def test_gqa_mqa_mla_shapes():
    hw = make_hw()
    mha = decode_attention(hw, 8, 32, 32, 8192, 128, 128)
    gqa = decode_attention(hw, 8, 32, 8, 8192, 128, 128)
    mqa = decode_attention(hw, 8, 32, 1, 8192, 128, 128)
    # decode reads the KV cache once per kv head: bytes scale with kv_heads
    cache = 8 * 8192 * 256 * 2
    assert mha.hbm_bytes == pytest.approx(32 * cache, rel=0.01)
    assert gqa.hbm_bytes == pytest.approx(8 * cache, rel=0.02)
    assert mha.time_s > gqa.time_s > mqa.time_s
    assert mha.flops == gqa.flops == mqa.flops
    # MLA (absorbed): one latent head of 512 + 64 rope dims, V is a slice of the cached latent
    mla = decode_attention(hw, 8, 128, 1, 8192, 576, 512, kv_shared=True)
    ctas = 8 * -(-128 // mla.block)                       # sequences x query blocks of the 128 packed heads
    splits = kv_splits(hw, ctas, 8192, mla.block)         # too few CTAs for the SMs: keys split
    partials = 8 * 128 * splits * (512 + 1) * 4 * 2       # fp32 partial outputs + lse, written and read back
    assert splits > 1
    assert mla.hbm_bytes == pytest.approx(8 * 8192 * 576 * 2 + 8 * 128 * (576 + 512) * 2 + partials, rel=1e-3)
    assert mla.flops == 2 * 8 * 128 * 8192 * (576 + 512)
    # MLA training shapes: d_qk = 192, d_v = 128
    f = attention_forward(hw, 1, 128, 128, 4096, 4096, 192, 128, causal=False)
    assert f.flops == 2 * 128 * 4096 * 4096 * (192 + 128)
    with pytest.raises(ValueError):
        attention_forward(hw, 1, 32, 5, 128, 128, 64, 64)
    with pytest.raises(ValueError):
        attention_forward(hw, 1, 32, 8, 128, 128, 64, 64, impl="sparse")


def test_decode_is_bandwidth_bound_and_uniform_entry_point():
    hw = make_hw()
    d = decode_attention(hw, 64, 32, 8, 4096, 128, 128)
    assert d.hbm_s > d.compute_s
    assert d.time_s == pytest.approx(hw.launch_overhead_s + d.hbm_bytes / hw.hbm_bandwidth, rel=0.05)
    a = attention(hw, 1, 32, 8, 2048, 2048, 128, 128, True, "bf16", "flash")
    assert a == attention_forward(hw, 1, 32, 8, 2048, 2048, 128, 128, True, "bf16", "flash")
    assert attention(hw, 1, 32, 8, 2048, 2048, 128, 128, True, "bf16", "flash", backward=True).time_s > a.time_s


def test_long_context_scales_quadratically():
    hw = make_hw()
    t1 = attention_forward(hw, 1, 32, 8, 8192, 8192, 128, 128).time_s
    t2 = attention_forward(hw, 1, 32, 8, 16384, 16384, 128, 128).time_s
    assert 3.5 < t2 / t1 < 4.3


# FlashAttention-2 on H100 SXM5, head dim 128, 16 heads, batch x seq = 16k, non-causal forward, TFLOP/s:
# Shah et al. 2024 (FlashAttention-3), Fig. 5. seq: measured.
FA2_H100_FWD = {4096: 368.0, 8192: 370.0, 16384: 370.0}


def h100() -> HardwareSpec:
    return load_hardware("h100-sxm5-80gb")         # datasheet peaks, utilization 1.0


def test_causal_flops_closed_form():
    """Causal forward = 4·b·h·d·s(s+1)/2 (→ 4bhs²d/2), backward = 2.5x forward, on any device."""
    hw = h100()
    b, h, s, d = 2, 16, 8192, 128
    f = attention_forward(hw, b, h, h, s, s, d, d, causal=True)
    assert f.flops == 4 * b * h * d * s * (s + 1) / 2
    assert f.flops == pytest.approx(4 * b * h * s * s * d / 2, rel=2 / s)
    bwd = attention_backward(hw, b, h, h, s, s, d, d, causal=True)
    assert bwd.flops == pytest.approx(2.5 * f.flops)


def test_executed_pairs_round_the_causal_diagonal_up_to_tiles():
    assert executed_pairs(512, 512, False, 128, 128) == visible_pairs(512, 512, False)
    # four query blocks of 128 run 1, 2, 3, 4 key blocks of 128
    assert executed_pairs(512, 512, True, 128, 128) == 128 * 128 * (1 + 2 + 3 + 4)
    assert executed_pairs(1, 100, True, 128, 128) == visible_pairs(1, 100, True)
    for s in (100, 1000, 4096, 65536):
        assert visible_pairs(s, s, True) <= executed_pairs(s, s, True, 128, 64) <= s * s
    hw = h100()
    short = attention_forward(hw, 32, 16, 16, 512, 512, 128, 128, causal=True)
    full = attention_forward(hw, 32, 16, 16, 512, 512, 128, 128, causal=False)
    assert short.time_s > 0.6 * full.time_s          # diagonal tiles are a quarter of the causal work here


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from([1, 2, 4, 8]),
       st.integers(1, 20000), st.sampled_from([64, 128, 256]), st.booleans(), st.booleans())
def test_never_faster_than_the_datasheet_roofline(batch, kv_heads, group, q_len, d, causal, backward):
    """No attention kernel beats its FLOPs at the dense peak or its compulsory Q/K/V/O traffic at full HBM
    bandwidth, on the real H100 spec at utilization 1.0."""
    hw = h100()
    q_heads = kv_heads * group
    p = attention(hw, batch, q_heads, kv_heads, q_len, q_len, d, d, causal, "bf16", "flash", backward=backward)
    compulsory = 2.0 * batch * (q_heads + kv_heads) * q_len * d * 2
    assert p.time_s >= p.flops / hw.peak_flops("bf16")
    assert p.time_s >= compulsory / hw.hbm_bandwidth


def test_exp_runs_at_16_per_sm_clock_not_a_fixed_share_of_fp32():
    """FA-2 runs exp and MMA one after the other: one exp per score at 16/clk/SM (H100: 3.9 T exp/s, though
    its FP32 rate per SM doubled over A100's) plus the MMAs at the dense peak bound the time."""
    hw = h100()
    s = 8192
    p = attention_forward(hw, 1, 32, 32, s, s, 16, 16, causal=False)
    exp_rate = 16 * hw.sm_count * hw.clock_hz
    assert exp_rate == pytest.approx(3.87e12, rel=0.01)
    assert p.time_s >= 32 * s * s / exp_rate + p.flops / hw.peak_flops("bf16")


def test_fa2_mma_sync_cap_applies_to_hopper_only():
    hw = h100()
    big = (4, 16, 16, 8192, 8192, 128, 128, False)
    hopper = attention_forward(hw, *big)
    assert hopper.flops / hopper.time_s <= 2 / 3 * hw.peak_flops("bf16")
    ampere_style = attention_forward(replace(hw, compute_capability="8.0"), *big)
    assert ampere_style.time_s < hopper.time_s


@pytest.mark.parametrize("seq", sorted(FA2_H100_FWD))
def test_fa2_h100_forward_matches_published_kernel_rate(seq):
    """Within 20% of the measured FA-2 forward on H100 at datasheet peaks (the model predicted ~655
    TFLOP/s, +77%, before exp throughput and the mma.sync ceiling were modelled; 430, +16%, before the
    shared-memory operand loads; 297, -20%, with them)."""
    p = attention_forward(h100(), 16384 // seq, 16, 16, seq, seq, 128, 128, causal=False)
    assert p.flops / p.time_s / 1e12 == pytest.approx(FA2_H100_FWD[seq], rel=0.20)


# Same figures (Shah et al. 2024, Figs. 5-6, FlashAttention-2 on H100 SXM5, head dim 128): causal forward
# and backward TFLOP/s (causal FLOPs halved). seq: (causal forward, backward).
FA2_H100_CAUSAL_FWD_BWD = {2048: (298.0, 291.0), 8192: (333.0, 318.0), 16384: (335.0, 322.0)}


@pytest.mark.parametrize("seq", sorted(FA2_H100_CAUSAL_FWD_BWD))
def test_fa2_h100_causal_forward_and_backward_match_published_rates(seq):
    """With the shared-memory operand traffic added to the MMAs (FA-2 on Hopper overlaps neither), the
    causal forward is within 15% and the backward within 25% of the measured kernels (before: +27% and
    +37% at 16k, the backward bound by L2 alone)."""
    hw, args = h100(), (16384 // seq, 16, 16, seq, seq, 128, 128)
    causal = attention_forward(hw, *args, causal=True)
    bwd = attention_backward(hw, *args, causal=False)
    fwd_meas, bwd_meas = FA2_H100_CAUSAL_FWD_BWD[seq]
    assert causal.flops / causal.time_s / 1e12 == pytest.approx(fwd_meas, rel=0.15)
    assert bwd.flops / bwd.time_s / 1e12 == pytest.approx(bwd_meas, rel=0.25)


def test_fa2_shared_memory_loads_add_on_hopper_and_hide_on_ampere():
    """The same kernel on the same device spec: Hopper's FA-2 path adds the operand loads to the math, an
    sm_80 device overlaps the two, so the Hopper copy is slower by more than the mma.sync ceiling (1.5x)
    alone can explain."""
    hw = h100()
    args = (2, 16, 16, 8192, 8192, 128, 128)
    hopper = attention_backward(hw, *args)
    ampere_style = attention_backward(replace(hw, compute_capability="8.0"), *args)
    assert hopper.time_s > ampere_style.time_s * 1.5


# Same figure (Shah et al. 2024, Fig. 5, head dim 128, non-causal forward, batch x seq = 16k, 16 heads):
# the Hopper-native kernels. seq: (FlashAttention-3, cuDNN) TFLOP/s.
HOPPER_NATIVE_H100_FWD = {2048: (625.0, 617.0), 4096: (638.0, 609.0), 8192: (646.0, 600.0), 16384: (648.0, 595.0)}


@pytest.mark.parametrize("seq", sorted(HOPPER_NATIVE_H100_FWD))
def test_flash3_h100_forward_matches_published_kernel_rates(seq):
    """flash3 (wgmma, softmax not overlapped) within 20% of both measured Hopper-native kernels; FA-2 stays
    below both (its measured 370 TFLOP/s is ~60% of theirs)."""
    hw = h100()
    args = (16384 // seq, 16, 16, seq, seq, 128, 128)
    p = attention_forward(hw, *args, causal=False, impl="flash3")
    for measured in HOPPER_NATIVE_H100_FWD[seq]:
        assert p.flops / p.time_s / 1e12 == pytest.approx(measured, rel=0.20)
    fa2 = attention_forward(hw, *args, causal=False, impl="flash")
    assert fa2.time_s > p.time_s


def test_flash3_differs_from_flash2_only_by_the_hopper_mma_cap():
    """Off Hopper there is no mma.sync ceiling to lift: both kernels price alike, forward and backward."""
    ampere_style = replace(h100(), compute_capability="8.0")
    args = (2, 16, 4, 8192, 8192, 128, 128)
    for fn in (attention_forward, attention_backward):
        assert fn(ampere_style, *args, impl="flash3") == fn(ampere_style, *args, impl="flash")
        assert fn(h100(), *args, impl="flash3").time_s <= fn(h100(), *args, impl="flash").time_s


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_context_parallel_ranks_share_the_causal_work_evenly(cp):
    """Load-balanced CP (chunks i and 2cp-1-i on rank i): a rank sees exactly 1/cp of the causal pairs,
    while the last contiguous chunk alone would see almost a full q_len x kv_len rectangle."""
    s = 32768
    visible, executed = rank_pairs(s // cp, s, True, cp, 128, 128)
    assert visible * cp == pytest.approx(visible_pairs(s, s, True), rel=1e-12)
    assert visible <= executed <= visible * 1.02
    assert visible_pairs(s // cp, s, True) > 1.7 * visible * (1 - 1 / cp)
    hw = h100()
    balanced = attention_forward(hw, 1, 16, 2, s // cp, s, 128, 128, causal=True, cp=cp)
    whole = attention_forward(hw, 1, 16, 2, s, s, 128, 128, causal=True)
    assert balanced.flops * cp == pytest.approx(whole.flops, rel=1e-9)
    assert whole.time_s / cp <= balanced.time_s < 1.1 * whole.time_s / cp

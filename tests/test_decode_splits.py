"""Serving attention on a grid too small for the SMs (ops/attention.py: kv_splits, _load_bandwidth): the
keys are split so the grid fills the device (Flash-Decoding, TensorRT-LLM multi-block mode), and a grid on
a few SMs streams the cache at those SMs' share of the L2 bandwidth, not at the full HBM rate."""
import pytest

from rapidllm.ops.attention import attention_forward, decode_attention, kv_splits
from rapidllm.validate.kernels import load_hardware


def test_split_count():
    hw = load_hardware("h100-sxm5-80gb", "datasheet")
    assert kv_splits(hw, 132, 8192, 128) == 1          # the grid already covers the SMs
    assert kv_splits(hw, 106, 8192, 128) == 1          # >= 80% of them
    assert kv_splits(hw, 2, 8192, 128) == 64           # ceil(132 / 2)
    assert kv_splits(hw, 2, 300, 128) == 3             # at most one split per key block
    assert kv_splits(hw, 1, 10**6, 128) == 128         # flash-attn's cap


def test_one_sequence_one_kv_head_streams_at_the_device_rate():
    """Batch 1 on one kv head (70B-class GQA at TP 8): the split kernel reads a 32k-token cache about as
    fast per sequence as a full batch does; unsplit, one CTA on one SM would take over 50x longer."""
    hw = load_hardware("h100-sxm5-80gb", "datasheet")
    one = decode_attention(hw, 1, 8, 1, 32768, 128, 128)
    full = decode_attention(hw, 132, 8, 1, 32768, 128, 128)
    assert one.time_s < 2.0 * full.time_s / 132
    assert one.time_s > full.time_s / 132


def test_few_ctas_are_held_to_their_share_of_the_l2_bandwidth():
    hw = load_hardware("h100-sxm5-80gb", "datasheet")
    p = decode_attention(hw, 1, 16, 2, 256, 128, 128)             # 2 kv heads x 2 key blocks = 4 CTAs
    assert p.hbm_s == pytest.approx(p.hbm_bytes / (4 * hw.l2_bandwidth / hw.sm_count))
    # training forwards are not split (their grids fill the GPU) and keep the device rate
    t = attention_forward(hw, 1, 16, 2, 256, 256, 128, 128, causal=True, training=True)
    assert t.hbm_s == pytest.approx(t.hbm_bytes / hw.hbm_bandwidth)

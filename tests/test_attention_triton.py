"""flash_triton: the 2023 Triton FlashAttention kernel's grid, autotuned backward and unpipelined loads."""
from __future__ import annotations

from dataclasses import replace

import pytest

from rapidllm.ops import attention_triton as ft
from rapidllm.ops.attention import attention_backward, attention_forward
from rapidllm.ops.gemm import memory_latency_s
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.validate.kernels import load_hardware
from test_gemm_kernel import make_hw


def test_backward_on_a_partial_grid_takes_sms_over_programs_longer():
    """Without sequence parallelism one program per (batch, head) runs every key block of its head: 33
    programs on 132 SMs take as long as 132 programs doing 4x the work, i.e. SMs / (batch x heads) = 4x a
    full grid's time for the same work (L2 large enough that every head is read once in both grids)."""
    hw = make_hw(sm_count=132, l2_size=1e12)
    args = (8192, 8192, 128, 128, True, "bf16", 1)
    part = ft._backward(hw, 1, 33, *args, sequence_parallel=False)
    full = ft._backward(hw, 4, 33, *args, sequence_parallel=False)
    bw = hw.hbm_bandwidth * hw.utilization.hbm
    # the launches and the three kernels around the backward kernel (their bytes scale with the batch)
    part_main = part.time_s - 4 * hw.launch_overhead_s - ft.side_kernel_bytes(1, 33, 8192, 128, 128, 2) / bw
    full_main = full.time_s - 4 * hw.launch_overhead_s - ft.side_kernel_bytes(4, 33, 8192, 128, 128, 2) / bw
    assert part.hbm_s < part_main                                        # math and loads bind, not HBM
    assert full.flops == pytest.approx(4 * part.flops, rel=1e-12)
    assert part_main == pytest.approx(full_main, rel=1e-9)


def test_backward_side_kernels_add_their_passes():
    """D = rowsum(dO * O) (reads O, dO; writes fp32 D), zeroing the fp32 dQ accumulator and copying it to
    bf16 dQ run as their own kernels (flash_attn_triton.py L667-673, L485-492, L720 at v0.3.0): per query
    row and head 2·2d + 4 + 4d + (4 + 2)d bytes, added to the backward kernel with one launch each."""
    hw = make_hw(l2_size=1e12)
    rows, d = 2 * 16 * 2048, 128
    assert ft.side_kernel_bytes(2, 16, 2048, d, d, 2) == rows * (4 * d + 4 + 4 * d + 6 * d)
    p = ft._backward(hw, 2, 16, 2048, 2048, d, d, True, "bf16", 1, sequence_parallel=True)
    no_side = p.time_s - ft.side_kernel_bytes(2, 16, 2048, d, d, 2) / (hw.hbm_bandwidth * hw.utilization.hbm)
    assert p.time_s > no_side > 4 * hw.launch_overhead_s + max(p.compute_s, p.hbm_s)


def test_autotuner_keeps_the_sequence_parallel_backward_at_long_sequence():
    """MPT-7B at 64k tokens, micro-batch 1 (32 heads): the (batch, head) grid would fill 32 of 132 SMs;
    the autotuner's other config (one program per key block) fills them, and is the one priced."""
    hw = load_hardware("h100-sxm5-80gb")
    args = (1, 32, 65536, 65536, 128, 128, True, "bf16", 1)
    chosen = ft.triton_backward(hw, *args)
    per_head = ft._backward(hw, *args, sequence_parallel=False)
    per_block = ft._backward(hw, *args, sequence_parallel=True)
    assert chosen.time_s == per_block.time_s
    assert per_head.time_s > 3.0 * per_block.time_s


@pytest.mark.parametrize("device", ["a100-sxm4-80gb", "h100-sxm5-80gb"])
@pytest.mark.parametrize("batch,heads,kv_heads,seq,d", [(8, 32, 32, 2048, 128), (1, 32, 32, 65536, 128),
                                                        (4, 16, 16, 4096, 64), (2, 32, 8, 8192, 128),
                                                        (1, 64, 8, 1024, 128), (16, 12, 12, 512, 64)])
def test_never_faster_than_flashattention2(device, batch, heads, kv_heads, seq, d):
    """Same MMA, softmax and shared-memory terms as FA-2, but loads that add to the math, K/V repeated
    to every query head and a grid of its own: never cheaper, forward or backward."""
    hw = load_hardware(device)
    args = (hw, batch, heads, kv_heads, seq, seq, d, d, True, "bf16")
    assert attention_forward(*args, "flash_triton").time_s >= attention_forward(*args, "flash").time_s
    assert attention_backward(*args, "flash_triton").time_s >= attention_backward(*args, "flash").time_s


def test_unpipelined_forward_adds_tile_stream_and_latency_to_the_math():
    """num_stages=1, one program per SM: forward = launch + math + stream / L2 + tiles x 2 latencies per SM
    (full waves: 108 x 8 programs), checked against the same kernel with the loads removed."""
    hw = make_hw(l2_size=1e12)
    batch, heads, seq, d = 1, 27, 4096, 128          # 27 x 32 query blocks = 864 programs = 8 waves of 108
    p = attention_forward(hw, batch, heads, heads, seq, seq, d, d, True, "bf16", "flash_triton")
    tiles = heads * sum(i + 1 for i in range(seq // 128))                # causal: up to the diagonal tile
    stream = heads * (seq // 128) * seq * 2 * d * 2 * ((seq + 128) / 2 / seq) + heads * seq * (2 * d * 2 + 4)
    no_loads = replace(hw, l2_bandwidth=1e30, memory_latency_s=1e-30)
    bare = attention_forward(no_loads, batch, heads, heads, seq, seq, d, d, True, "bf16", "flash_triton")
    expected = bare.time_s + stream / hw.l2_bandwidth + tiles / hw.sm_count * 2 * memory_latency_s(hw)
    assert p.time_s == pytest.approx(expected, rel=1e-6)


def test_head_dims_the_kernel_refuses():
    """flash_attn_triton.py asserts equal q/k/v head dims of at most 128 (L591-593)."""
    with pytest.raises(ValueError, match="flash_triton"):
        attention_forward(make_hw(), 1, 16, 16, 1024, 1024, 192, 128, True, "bf16", "flash_triton")
    with pytest.raises(ValueError, match="flash_triton"):
        attention_backward(make_hw(), 1, 16, 16, 1024, 1024, 256, 256, True, "bf16", "flash_triton")


def test_case_with_a_head_dim_the_kernel_refuses_is_bad_input():
    """An MLA model under flash_triton is refused at the spec, naming the file and key."""
    case = {"model": "deepseek-v2-lite", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
            "attention_impl": "flash_triton", "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8,
                                                           "micro_batch": 1}, "parallelism": {"dp": 8}}
    with pytest.raises(SpecError, match=r"x\.yaml: attention_impl: flash_triton"):
        resolve_case(case, "x.yaml")


def test_search_refuses_flash_triton_on_mla_per_row():
    """A search space offering flash_triton over an MLA model: those layouts are invalid rows under
    `attention_impl` (`search.space`, `check_attention`), the same layouts under flash stay valid: no
    traceback from the kernel's price."""
    from rapidllm.search import load_search
    from rapidllm.search.space import layouts
    loaded = load_search({"name": "mla-triton", "model": "deepseek-v2-lite", "hardware": "h100-sxm5-80gb",
                          "network": "dgx-h100", "gpus": 8,
                          "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16},
                          "space": {"attention_impl": ["flash", "flash_triton"], "tp": [1], "pp": [1], "cp": [1],
                                    "ep": [8], "zero": [0], "recompute": ["none"], "micro_batch": [1]}})
    rows = {lay.key[-1]: lay for lay in layouts(loaded, loaded.candidates[0], 8)}
    assert rows["flash"].case is not None and not rows["flash"].reason
    assert rows["flash_triton"].case is None
    assert rows["flash_triton"].reason.startswith("attention_impl: flash_triton")

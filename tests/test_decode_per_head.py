"""Per-query-head decode kernels (`decode_attention: per_head`, ops/attention_per_head.py): 2023 serving
engines' masked MHA streams a GQA group's KV cache once per query head through L2 (HBM reads it once), and
the case key is checked like every other: inference decode steps of non-MLA models without drafts."""
import copy
import random
from pathlib import Path

import pytest

from rapidllm import predict
from rapidllm.ops.attention import decode_attention
from rapidllm.ops.attention_per_head import per_head_decode
from rapidllm.search.spec import load_search
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.validate.kernels import load_hardware

SERVE = {"model": "llama2-70b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "fp16",
         "attention_impl": "flash3", "framework": "tensorrt-llm", "parallelism": {"tp": 4},
         "workload": {"mode": "inference", "batch": 256, "prompt_tokens": 128, "output_tokens": 2048}}


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm5-80gb", "spec")


def test_group_reads_its_cache_once_per_query_head_through_l2(h100):
    """Full grid (no key splits): HBM bytes equal the grouped kernel's (the cache once), L2 serves group x
    the grouped kernel's reads, and the step is bound by L2 in closed form."""
    batch, q_heads, kv_heads, kv, d = 64, 16, 2, 4096, 128
    grouped = decode_attention(h100, batch, q_heads, kv_heads, kv, d, d, "fp16")
    per_head = per_head_decode(h100, batch, q_heads, kv_heads, kv, d, d, "fp16")
    assert per_head.hbm_bytes == pytest.approx(grouped.hbm_bytes)
    assert per_head.kv_reread_bytes == pytest.approx(8 * grouped.kv_reread_bytes)
    cache = batch * kv_heads * kv * 2 * d * 2
    l2_s = (8 * cache + batch * q_heads * 2 * d * 2) / h100.l2_bandwidth
    assert per_head.time_s == pytest.approx(h100.launch_overhead_s + l2_s)
    assert per_head.time_s > 2.0 * grouped.time_s


def test_long_context_is_still_read_once_from_hbm(h100):
    """The group's CTAs stream their keys at the same pace, so L2 holds a key block per CTA, not the
    whole head: at 8k-32k tokens HBM still reads the cache once and the step stays L2-bound, linear in the
    context (whole heads as the window made Llama-2-70B TP 4 jump from 2.2x to 8x the grouped kernel at 8k)."""
    batch, q_heads, kv_heads, d = 64, 16, 2, 128
    for kv in (8192, 32768):
        grouped = decode_attention(h100, batch, q_heads, kv_heads, kv, d, d, "fp16")
        per_head = per_head_decode(h100, batch, q_heads, kv_heads, kv, d, d, "fp16")
        assert per_head.hbm_bytes == pytest.approx(grouped.hbm_bytes)
        l2_s = (8 * batch * kv_heads * kv * 2 * d * 2 + batch * q_heads * 2 * d * 2) / h100.l2_bandwidth
        assert per_head.time_s == pytest.approx(h100.launch_overhead_s + l2_s)


def test_mha_prices_like_the_grouped_kernel(h100):
    """Group 1: both kernels read the cache once and are HBM-bound (the per-head math on CUDA cores hides)."""
    a100 = load_hardware("a100-sxm4-80gb", "spec")
    for hw in (h100, a100):
        grouped = decode_attention(hw, 32, 32, 32, 2048, 128, 128, "fp16")
        per_head = per_head_decode(hw, 32, 32, 32, 2048, 128, 128, "fp16")
        assert per_head.time_s == pytest.approx(grouped.time_s, rel=0.03)


def test_never_faster_on_a_full_grid(h100):
    """Where neither kernel splits the keys, per-query-head loads only add reads: never faster."""
    rng = random.Random(7)
    for _ in range(200):
        kv_heads = rng.choice([1, 2, 4, 8])
        q_heads = kv_heads * rng.choice([1, 2, 4, 8, 16])
        batch = max(rng.choice([8, 32, 128, 512]), -(-h100.sm_count // kv_heads))
        kv, d = rng.choice([64, 512, 4096, 32768]), rng.choice([64, 128])
        grouped = decode_attention(h100, batch, q_heads, kv_heads, kv, d, d, "bf16")
        assert per_head_decode(h100, batch, q_heads, kv_heads, kv, d, d, "bf16").time_s >= grouped.time_s


def test_gqa_serving_slows_and_mha_does_not():
    """Llama-2-70B (GQA 8) at batch 256 decodes slower per token with per-head kernels; Llama-2-7B (MHA)
    at batch 16 within 1%; prefill (TTFT) untouched."""
    grouped = predict(SERVE)
    per_head = predict({**SERVE, "decode_attention": "per_head"})
    assert per_head.itl_s > 1.2 * grouped.itl_s
    assert per_head.ttft_s == grouped.ttft_s
    mha = {**SERVE, "model": "llama2-7b", "parallelism": {"tp": 1},
           "workload": {**SERVE["workload"], "batch": 16}}
    assert predict({**mha, "decode_attention": "per_head"}).itl_s == pytest.approx(predict(mha).itl_s, rel=0.01)


def test_case_key_is_checked_and_hashed_only_when_set():
    base = resolve_case(copy.deepcopy(SERVE), "test")
    assert resolve_case({**copy.deepcopy(SERVE), "decode_attention": "grouped"}, "test").case_id == base.case_id
    assert resolve_case({**copy.deepcopy(SERVE), "decode_attention": "per_head"}, "test").case_id != base.case_id
    training = {**copy.deepcopy(SERVE), "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8},
                "decode_attention": "per_head"}
    with pytest.raises(SpecError, match="test: decode_attention: per_head is the attention kernel of inference"):
        resolve_case(training, "test")
    mla = {**copy.deepcopy(SERVE), "model": "deepseek-v2-lite", "parallelism": {"tp": 1},
           "decode_attention": "per_head"}
    with pytest.raises(SpecError, match="uses MLA.*allowed: grouped"):
        resolve_case(mla, "test")
    with pytest.raises(SpecError, match="decode_attention"):
        resolve_case({**copy.deepcopy(SERVE), "decode_attention": "mmha"}, "test")
    encoder = {**copy.deepcopy(SERVE), "model": "dinov3-vit7b16", "parallelism": {"tp": 1},
               "workload": {"mode": "inference", "batch": 8, "prompt_tokens": 256, "output_tokens": 0},
               "decode_attention": "per_head"}
    with pytest.raises(SpecError, match="test: decode_attention: per_head is the attention kernel of inference"):
        resolve_case(encoder, "test")


def test_draft_tokens_need_the_grouped_kernel():
    """A GQA model with an MTP module (inline mapping) verifying a draft per step: per-query-head kernels
    take one query token per sequence, so the case is refused in one line; grouped is accepted."""
    import yaml

    model = yaml.safe_load((Path(__file__).parents[1] / "config/models/llama3.1-8b.yaml").read_text())
    drafted = {**copy.deepcopy(SERVE), "model": {**model, "mtp_depth": 1}, "parallelism": {"tp": 1},
               "workload": {"mode": "inference", "batch": 8, "prompt_tokens": 128, "output_tokens": 64,
                            "draft_tokens": 1, "draft_acceptance": 0.8}}
    assert resolve_case(drafted, "test").decode_attention == "grouped"
    with pytest.raises(SpecError, match="test: decode_attention: per-query-head decode kernels take one query"):
        resolve_case({**drafted, "decode_attention": "per_head"}, "test")


def test_search_specs_carry_the_key():
    spec = {"name": "s", "model": "llama2-70b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
            "workload": {"mode": "inference", "prompt_tokens": 128, "output_tokens": 128}, "gpus": 4,
            "decode_attention": "per_head", "space": {"batch": [8]}}
    assert {c.base.decode_attention for c in load_search(spec).candidates} == {"per_head"}

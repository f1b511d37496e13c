"""Encoder models (causal: false; DINOv3 ViT-7B/16 in the §6.3 topology study): bidirectional attention does
twice the score / PV work of causal attention, the ViT's size matches its publication, its inference is one
forward pass with no KV cache, and the new model fields leave every other case's id unchanged."""
from __future__ import annotations

import dataclasses

import pytest

from rapidllm.explore.timeline import timeline
from rapidllm.ops import attention as att
from rapidllm.ops import workload as wl
from rapidllm.ops.params import parameter_counts
from rapidllm.prediction import predict
from rapidllm.spec.case import resolve_case
from rapidllm.spec.model import ModelSpec
from rapidllm.spec.named import resolve_named

H100 = "h100-sxm5-80gb"
# A small encoder: 2 layers of width 512, 8 heads of 64, patch 16, like the ViT in shape only.
TINY = dict(name="tiny-vit", hidden=512, layers=2, heads=8, ffn=1024, vocab=0, norm="layernorm", bias=True,
            causal=False, patch_size=16)


def _vit() -> ModelSpec:
    mapping, where = resolve_named("model", "dinov3-vit7b16", "test", "model")
    return ModelSpec.from_mapping(mapping, where)


def _case(model, workload: dict, par: dict | None = None):
    return resolve_case({"model": model, "hardware": H100, "network": "wafer-mesh", "workload": workload,
                         "parallelism": par or {}}, "test")


def test_vit_7b_parameter_count_matches_published() -> None:
    """DINOv3's model card: 6,716M. Tolerance 1M: half the published rounding step (0.5M) plus the terms
    the count knowingly gets wrong (Q/K/V biases the release lacks, +0.49M; CLS / register / mask tokens
    and LayerScale left out, -0.35M)."""
    m = _vit()
    assert (m.hidden, m.layers, m.heads, m.head_dim, m.ffn, m.patch_size, m.causal) == (4096, 40, 32, 128, 8192, 16, False)
    assert abs(parameter_counts(m).total - 6.716e9) <= 1e6
    assert parameter_counts(m).lm_head == 0
    assert parameter_counts(m).embedding == (3 * 16 * 16 + 1) * 4096       # the patch projection only


@pytest.mark.parametrize("n", [64, 261, 1000])
def test_bidirectional_attention_flops_twice_causal_closed_form(n: int) -> None:
    """Score and PV FLOPs of one head over n tokens: bidirectional 2·n²·(d_qk + d_v); causal counts the
    n(n+1)/2 visible pairs, so the ratio is 2n/(n+1) (2 up to the diagonal). The backward is 2.5x either."""
    hw = _case("llama3.1-8b", {"mode": "training", "seq_len": 1024, "global_batch": 1}).hardware
    b, h, d = 3, 4, 64
    for fn, per_pair in ((att.attention_forward, 2 * (d + d)), (att.attention_backward, 2 * (2 * d + 3 * d))):
        full = fn(hw, b, h, h, n, n, d, d, causal=False).flops
        causal = fn(hw, b, h, h, n, n, d, d, causal=True).flops
        assert full == b * h * n * n * per_pair
        assert causal == b * h * n * (n + 1) / 2 * per_pair
        assert full / causal == pytest.approx(2 * n / (n + 1), rel=1e-12)


def test_bidirectional_runs_every_tile_causal_skips_the_masked_ones() -> None:
    """FlashAttention block skipping: with square blocks of B and n = k·B, causal executes the k(k+1)/2
    tiles on and below the diagonal in full, bidirectional all k² of them."""
    n, blk = 1024, 128
    k = n // blk
    assert att.executed_pairs(n, n, False, blk, blk) == n * n
    assert att.executed_pairs(n, n, True, blk, blk) == blk * blk * k * (k + 1) / 2


def test_encoder_operator_list_prices_full_attention() -> None:
    """The operator model of the ViT's layer: its `attn` operator has twice the FLOPs of the same layer
    made causal, every other operator is the same, and the head is the final norm alone (no vocabulary)."""
    vit = _case(TINY, {"mode": "training", "seq_len": 261, "global_batch": 2})
    dec = dataclasses.replace(vit, model=dataclasses.replace(vit.model, causal=True))
    enc_ops = {o.name: o for o in wl.layer_forward(vit.model, wl.training_shard(vit), False)}
    dec_ops = {o.name: o for o in wl.layer_forward(dec.model, wl.training_shard(dec), False)}
    assert not enc_ops["attn"].attention.causal and dec_ops["attn"].attention.causal
    assert enc_ops["attn"].flops == 2 * dec_ops["attn"].flops == 2 * 8 * 261 * 261 * 2 * 64
    assert {n: o.flops for n, o in enc_ops.items() if n != "attn"} == {n: o.flops for n, o in dec_ops.items() if n != "attn"}
    assert [o.name for o in wl.head_forward(vit.model, wl.training_shard(vit))] == ["final_norm"]
    assert [o.name for o in wl.embedding_forward(vit.model, wl.training_shard(vit))] == ["patch_embed"]


def test_encoder_inference_is_one_forward_pass() -> None:
    """output_tokens 0: latency = TTFT = the prefill pass, no ITL, no KV cache, and the rate counts the
    tokens encoded (batch x prompt_tokens per latency)."""
    case = _case(TINY, {"mode": "inference", "batch": 4, "prompt_tokens": 261, "output_tokens": 0}, {"tp": 2})
    p = predict(case)
    assert p.feasible
    assert p.e2e_latency_s == p.ttft_s == p.step_time_s > 0
    assert p.itl_s == 0.0 and p.memory.kv_cache == 0.0
    assert p.tokens_per_s == pytest.approx(4 * 261 / p.e2e_latency_s)
    base = predict(case, engine="baseline")                     # the alpha-beta ablation agrees on the form
    assert base.e2e_latency_s == base.ttft_s > 0 and base.itl_s == 0.0
    passes = {e["name"] for e in timeline(predict(case, trace=True))["traceEvents"] if e.get("cat") == "request"}
    assert passes == {"prefill"}                                # the timeline draws the one pass


def test_new_model_fields_keep_existing_case_ids() -> None:
    """causal and patch_size hash only when set away from their defaults: a decoder's id does not change
    when they are written out, and an encoder's differs from the same shape made causal."""
    base = {"mode": "training", "seq_len": 1024, "global_batch": 1}
    mapping, _ = resolve_named("model", "llama3.1-8b", "test", "model")
    plain = _case(dict(mapping), base)
    explicit = _case({**mapping, "causal": True, "patch_size": 0}, base)
    assert plain.case_id == explicit.case_id
    enc = _case(TINY, base)
    assert enc.case_id != _case({**TINY, "causal": True}, base).case_id

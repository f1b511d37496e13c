"""FP8 as Transformer Engine runs it (ops/workload.py, docs/fp8.md): under `precision: fp8` only the GEMMs
take FP8 inputs; attention, norms, residuals and every collective stay BF16; each FP8 GEMM pays a
memory-bound cast of its BF16 input (and the backward its incoming gradient), the weights one cast per step.
Serving keeps FP8 weights but a BF16 KV cache (TensorRT-LLM's default)."""
import copy

import pytest

from rapidllm.graph.comm_nodes import communication_nodes
from rapidllm.memory.model import memory_for_case
from rapidllm.ops import workload as wl
from rapidllm.ops.price import price_case
from rapidllm.prediction import evaluate
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError

TINY = {"name": "tiny", "hidden": 1024, "layers": 4, "heads": 8, "kv_heads": 8, "ffn": 4096, "vocab": 8000,
        "mlp": "gated", "position": "rope", "norm": "rmsnorm", "tied_embeddings": True, "max_seq_len": 2048}
TRAIN = {"model": TINY, "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
         "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8, "micro_batch": 2},
         "parallelism": {"dp": 2, "tp": 2, "sp": True, "zero": 1}}
SERVE = {"model": TINY, "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
         "workload": {"mode": "inference", "batch": 4, "prompt_tokens": 512, "output_tokens": 64},
         "parallelism": {"tp": 2}}


def _pair(base: dict):
    out = {}
    for prec in ("bf16", "fp8"):
        case = resolve_case({**copy.deepcopy(base), "precision": prec}, "test")
        out[prec] = (case, price_case(case))
    return out


def _time(ops, mask) -> float:
    return float((ops.time_s * ops["count"])[mask].sum())


def test_training_gemms_fp8_everything_else_bf16():
    (c16, o16), (c8, o8) = _pair(TRAIN).values()
    fp8 = o8.name.map(wl.fp8_gemm) & (o8.kind == "gemm")
    main = o8[fp8 & o8.section.str.startswith("layer_")]
    assert _time(o8, fp8 & (o8.section == "layer_dense")) < 0.8 * _time(o16, (o16.kind == "gemm") & (o16.section == "layer_dense"))
    assert len(main) and _time(o8, o8.kind == "attention") == _time(o16, o16.kind == "attention")
    head = o8.name.str.startswith("lm_head")       # the output head stays BF16: the same time as in BF16
    assert _time(o8, head) == _time(o16, o16.name.str.startswith("lm_head"))
    kept = o16[(o16.kind == "pointwise") & (o16.section != "optimizer")].name
    assert list(o8[o8.name.isin(kept)].bytes) == list(o16[o16.name.isin(kept)].bytes)
    # collectives move the same BF16 bytes
    assert [(n.axis, n.op, n.nbytes) for n in communication_nodes(c8)] == \
           [(n.axis, n.op, n.nbytes) for n in communication_nodes(c16)]


def test_scaling_casts_priced_as_memory_bound_kernels():
    _, (c8, o8) = _pair(TRAIN).values()
    casts = o8[o8.name.str.endswith("_fp8_cast") & (o8.section == "layer_dense")]
    # one per FP8 forward GEMM and per dgrad: qkv, o_proj, mlp_up, mlp_down, twice
    assert sorted(casts.name) == sorted(f"{g}{d}_fp8_cast" for g in ("qkv", "o_proj", "mlp_up", "mlp_down")
                                        for d in ("", "_dgrad"))
    qkv = o8[(o8.name == "qkv") & (o8.section == "layer_dense")].iloc[0]
    cast = casts[casts.name == "qkv_fp8_cast"].iloc[0]
    assert cast.bytes == 4 * qkv.m * qkv.k                  # 2 B read, FP8 copy + transpose written
    hw = c8.hardware
    assert cast.time_s == pytest.approx(cast.bytes / (hw.hbm_bandwidth * hw.utilization.hbm) + hw.launch_overhead_s)
    weights = o8[o8.name == "fp8_weight_cast"]
    assert len(weights) == 1 and weights.iloc[0].section == "optimizer"


def test_fp8_step_faster_but_not_twice():
    (c16, _), (c8, _) = _pair(TRAIN).values()
    r16, r8 = evaluate(c16), evaluate(c8)
    assert r8["step_time_s"] < r16["step_time_s"] < 2.0 * r8["step_time_s"]
    # TE keeps BF16 weights (FP32 master in the optimizer): the same state memory as BF16
    assert memory_for_case(c8).weights == memory_for_case(c16).weights


def test_serving_fp8_weights_bf16_kv_cache():
    (c16, o16), (c8, o8) = _pair(SERVE).values()
    m16, m8 = memory_for_case(c16), memory_for_case(c8)
    # FP8 checkpoints quantize the blocks' linear layers only: the (tied) embedding, 8000 x 1024 / tp 2, stays BF16
    embedding = TINY["vocab"] * TINY["hidden"] / 2
    assert m8.weights == pytest.approx((m16.weights - 2 * embedding) / 2 + 2 * embedding)
    assert m8.kv_cache == m16.kv_cache
    assert not o8.name.str.contains("fp8_cast").any()      # static scales, quantization fused into producers
    dec = o8.section.str.startswith("decode_last_layer")
    assert _time(o8, dec & (o8.kind == "attention")) == _time(o16, o16.section.str.startswith("decode_last_layer")
                                                              & (o16.kind == "attention"))
    assert _time(o8, dec & (o8.kind == "gemm")) < _time(o16, o16.section.str.startswith("decode_last_layer")
                                                        & (o16.kind == "gemm"))


def test_blockwise_recipe_prices_only_the_fp8_wgrads_as_accumulating():
    """`fp8_recipe: blockwise` (DeepSeek-V3's fine-grained FP8): the FP8 weight-gradient GEMMs accumulate
    into the FP32 main gradient (D = C + A @ B), so each is slower by its FP32 epilogue and nothing else
    changes; the default (tensorwise) keeps every case id; the key needs precision fp8."""
    tensorwise = resolve_case({**copy.deepcopy(TRAIN), "precision": "fp8"}, "test")
    blockwise = resolve_case({**copy.deepcopy(TRAIN), "precision": "fp8", "fp8_recipe": "blockwise"}, "test")
    named = resolve_case({**copy.deepcopy(TRAIN), "precision": "fp8", "fp8_recipe": "tensorwise"}, "test")
    assert named.case_id == tensorwise.case_id != blockwise.case_id
    o_t, o_b = price_case(tensorwise), price_case(blockwise)
    wgrad = o_t.name.str.endswith("_wgrad") & o_t.name.map(wl.fp8_gemm) & (o_t.kind == "gemm")
    assert wgrad.sum() >= 4
    assert (o_b.time_s[wgrad] > o_t.time_s[wgrad]).all()
    assert (o_b.time_s[~wgrad] == o_t.time_s[~wgrad]).all()
    with pytest.raises(SpecError, match="test: fp8_recipe: .*allowed: fp8_recipe only with precision fp8"):
        resolve_case({**copy.deepcopy(TRAIN), "fp8_recipe": "blockwise"}, "test")
    with pytest.raises(SpecError, match="fp8_recipe"):
        resolve_case({**copy.deepcopy(TRAIN), "precision": "fp8", "fp8_recipe": "mxfp8"}, "test")

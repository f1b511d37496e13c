"""llm-foundry's eager backward kernels and torch FSDP's gradient passes (ops/foundry.py), in closed form on
a small MPT-shaped model: biases on, LayerNorm, plain GELU MLP of 4h, MHA, one FlatParameter per block."""
from dataclasses import replace

import pytest

from rapidllm.engine.composer import gradient_buckets, sharded_layer_bytes
from rapidllm.graph.comm_nodes import communication_nodes
from rapidllm.ops.price import local_parameters, price_case
from rapidllm.prediction import evaluate
from rapidllm.spec.case import resolve_case

H, FFN, B, S = 512, 2048, 2, 1024
MPT = {"name": "tiny-mpt", "hidden": H, "layers": 2, "heads": 4, "kv_heads": 4, "ffn": FFN, "vocab": 8192,
       "mlp": "plain", "attention": "mha", "position": "learned", "norm": "layernorm", "bias": True,
       "tied_embeddings": True, "max_seq_len": S}
ADDED = {"qkv_bias_grad", "o_proj_bias_grad", "mlp_up_bias_grad", "mlp_down_bias_grad", "norm1_param_grad",
         "norm2_param_grad", "qkv_grad_cat", "fsdp_grad_flatten", "fsdp_grad_cast", "fsdp_grad_predivide"}


def _case(framework: str, dp: int = 8):
    return resolve_case({"model": MPT, "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "bf16",
                         "framework": framework, "attention_impl": "flash_triton",
                         "workload": {"mode": "training", "seq_len": S, "global_batch": B * dp, "micro_batch": B},
                         "parallelism": {"dp": dp, "fsdp": "full_shard"}}, "test")


def _layer(case) -> dict[str, float]:
    ops = price_case(case)
    ops = ops[ops.section == "layer_dense"]
    return dict(zip(ops.name, ops.bytes))


def test_added_backward_bytes_in_closed_form():
    """Per layer and micro-batch of T = b·s tokens (bf16, 2 B): the bias reductions read the output gradient
    of Wqkv (3h), out_proj (h), up (4h) and down (h); each LayerNorm's dgamma/dbeta kernel reads dY and X;
    the split backward reads and writes the 3h QKV gradient; each residual's backward is one add (2 reads,
    1 write). FSDP: the flat-gradient concatenation reads and writes 2 B per parameter, the cast to fp32
    reads 2 and writes 4, the pre-divide reads and writes 4; a layer holds 12h² + 13h parameters."""
    T, b = B * S, 2
    got = _layer(_case("llm-foundry"))
    assert ADDED <= set(got)
    assert got["qkv_bias_grad"] + got["o_proj_bias_grad"] + got["mlp_up_bias_grad"] + got["mlp_down_bias_grad"] \
        == T * (3 * H + H + FFN + H) * b
    assert got["norm1_param_grad"] == got["norm2_param_grad"] == 2 * T * H * b
    assert got["qkv_grad_cat"] == 2 * T * 3 * H * b
    assert got["residual1_bwd"] == got["residual2_bwd"] == 3 * T * H * b
    params = 12 * H * H + 13 * H
    assert (got["fsdp_grad_flatten"], got["fsdp_grad_cast"], got["fsdp_grad_predivide"]) == \
        (4 * params, 6 * params, 8 * params)


def test_only_llm_foundry_cases_get_them():
    """A Megatron case of the same shape keeps the generic list: none of the kernels, residual backward at
    1.5x the forward add, and bf16 reduce-scatters; llm-foundry's reduce in fp32 (Composer's 'DEFAULT')."""
    megatron, foundry = _case("megatron"), _case("llm-foundry")
    got = _layer(megatron)
    assert not ADDED & set(got)
    assert got["residual1_bwd"] == pytest.approx(1.5 * got["residual1"])
    (mg, ms), (fg, fs) = sharded_layer_bytes(megatron), sharded_layer_bytes(foundry)
    assert fg == mg and fs == 2 * ms
    assert evaluate(foundry)["step_time_s"] > evaluate(megatron)["step_time_s"]


def test_no_fsdp_passes_without_sharding():
    """On one rank nothing is sharded or reduced: the eager kernels stay, the FSDP passes go."""
    got = _layer(_case("llm-foundry", dp=1))
    assert "qkv_grad_cat" in got and not {n for n in got if n.startswith("fsdp_")}


def test_shard_grad_op_reduces_in_fp32_too():
    """Composer's 'DEFAULT' mixed precision sets FSDP's reduce dtype whatever the sharding strategy, so under
    shard_grad_op (no per-layer gathers: the gradients go in buckets) the buckets carry 4 B per parameter,
    twice a Megatron case's bf16, as the fp32 cast the layer prices implies."""
    def buckets(framework: str):
        case = _case(framework)
        case = replace(case, parallelism=replace(case.parallelism, fsdp="shard_grad_op"))
        return gradient_buckets(case, 1)
    mg, fd = buckets("megatron"), buckets("llm-foundry")
    assert mg.op == fd.op == "reduce_scatter" and fd.count == mg.count
    assert fd.nbytes == 2 * mg.nbytes and fd.gather_bytes == mg.gather_bytes


def test_baseline_dp_nodes_reduce_in_fp32_too():
    """The alpha-beta baseline's DP reduce-scatter (graph/comm_nodes.py) carries 4 B per parameter for
    llm-foundry under FSDP, as the engine's per-layer reduce-scatters do, and 2 B for Megatron."""
    def dp_reduce(case) -> float:
        return sum(n.nbytes for n in communication_nodes(case) if n.axis == "dp" and n.op == "reduce_scatter")
    foundry, megatron = _case("llm-foundry"), _case("megatron")
    assert dp_reduce(foundry) == pytest.approx(2.0 * dp_reduce(megatron))
    assert dp_reduce(foundry) == pytest.approx(4.0 * local_parameters(foundry))

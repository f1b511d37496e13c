"""Backward kernels llm-foundry's MPT training launches beyond the generic layer list (`framework: llm-foundry`).

llm-foundry v0.3.0 (54cbb8bd, the version its H100 MPT benchmark installed) builds the MPT block from eager
PyTorch modules and trains it under Composer's torch FSDP, one FlatParameter per MPTBlock. Autograd runs
each module's backward as its own kernels and FSDP makes passes over each layer's flat gradient; the generic
operator list (ops/workload.py: GEMM dgrad/wgrad, a pointwise backward at 1.5x its forward) holds neither.
Line numbers are llm-foundry's at v0.3.0 unless a file of another project is named.

Per micro-batch and layer, on the compute stream:
- Bias gradients. MPT keeps biases (configuration_mpt.py L58 `no_bias=False`; the benchmark's
  scripts/train/yamls/pretrain/mpt-*.yaml do not set it; `bias: true` in config/models/mpt-*.yaml).
  nn.Linear adds the bias in the GEMM's epilogue (addmm) in the forward; in the backward autograd reduces
  the output gradient over the tokens to the bias shape, one reduction reading the m x n output gradient of
  each biased projection (Wqkv, out_proj, up_proj, down_proj: attention.py L484-488, L511-515, ffn.py L35-45).
- LayerNorm parameter gradients. LPLayerNorm is torch's layer_norm on the (already bf16) input (norm.py
  L39-53); PyTorch's CUDA backward writes dX in one kernel and reduces dgamma/dbeta in a second one that reads
  dY and X again (aten/src/ATen/native/cuda/layer_norm_kernel.cu, GammaBetaBackward).
- The QKV gradient concatenation. The fused Wqkv output is split into views (attention.py L533-540, viewed
  per head at L398-400); the Triton kernel's backward writes dq, dk, dv into buffers of their own
  (flash_attn_triton.py L827-829), so autograd's split backward concatenates them into the Wqkv output
  gradient: one read and one write of it.
- Residual adds (blocks.py L111, L116). The backward of x + f(x) passes the gradient through; the gradient
  of x is the sum of its two consumers' gradients, one add (2 reads, 1 write) like the forward add, where
  the generic list prices 1.5x that.
And after the layer's backward (torch.distributed.fsdp in torch 2.1, the benchmark image
mosaicml/pytorch:2.1.0_cu121; `_runtime_utils.py`, functions named as there):
- The layer's gradient is assembled into its FlatParameter's: the parameters are views of the flat
  parameter (`FlatParamHandle._use_unsharded_views` splits it), so autograd's split backward concatenates
  their gradients, one read and one write of the layer's gradient in the parameter dtype.
- Composer reduces the gradients in fp32 (`REDUCE_BYTES`), so `_post_backward_hook` casts the bf16
  gradient to fp32 before the reduce-scatter, which carries 4 B per parameter (engine/composer.py
  `sharded_layer_bytes` asks `reduce_bytes`).
- `_reduce_grad` divides the unsharded gradient in place by `_get_gradient_predivide_factor(world)` (> 1
  for every world size >= 2) before the reduce-scatter: one read and one write at the reduce dtype.
The cast and the division run on FSDP's post-backward stream; they are priced in series with the compute:
the next layer's Hopper GEMM kernels hold one CTA per SM with most of its shared memory, so the other
stream's kernels take the SMs in turns between GEMM CTAs rather than beside them (an upper bound where
they find idle SMs). torch's code is cited by function (torch 2.1's files were not at hand; the functions
are the same in the later versions read). Smaller passes are left out: FSDP's bf16 copy of the fp32 shard
before each all-gather and the post-divide and accumulation of the gradient shard (1/dp of a layer each).
"""
from __future__ import annotations

from dataclasses import replace

from rapidllm.ops.operators import GEMM, POINTWISE, Operator
from rapidllm.ops.params import attention_params, mlp_params, moe_layer_params, norm_params
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES

# Composer 0.16's FSDP mixed precision by default (`fsdp_config.setdefault('mixed_precision', 'DEFAULT')`,
# composer/trainer/dist_strategy.py L143 at v0.16.4; llm-foundry v0.3.0 requires composer >= 0.16.3, < 0.17,
# setup.py L50) maps 'DEFAULT' to bf16 parameters and an fp32 reduce dtype (mosaic_fsdp_utils.py L87-90).
# The H100 benchmark ran it (its table's mp_mode column; the launcher writes 'DEFAULT', submit_benchmarks.py
# L268 and L335 at b2a43a14). 'PURE' (bf16 reduce) is another run and is not modelled.
REDUCE_BYTES = 4
# the layer's projections with a bias when the model has biases (the QKV one also with `qkv_bias`)
BIASED = ("qkv", "o_proj", "mlp_up", "mlp_down")
REDUCE_FLOPS = 1.0      # one add per element read


def _pass(name: str, elements: float, b: int, reads: float, writes: float) -> Operator:
    return Operator(name=name, kind=POINTWISE, phase="bwd", flops=REDUCE_FLOPS * elements,
                    bytes=(reads + writes) * elements * b, dtype_bytes=b)


def layer_kernels(case: Case, ops: list[Operator], is_moe: bool) -> list[Operator]:
    """One layer's training operators (`workload.layer_training`) with llm-foundry's backward kernels in
    place: each inserted after the operator whose output it reads, the FSDP passes at the end."""
    m = case.model
    fwd = {o.name: o for o in ops if o.phase == "fwd"}
    after: dict[str, list[Operator]] = {}
    for name in BIASED:
        o = fwd.get(name)
        if o is not None and o.kind == GEMM and o.gemm and (m.bias or (name == "qkv" and m.qkv_bias)):
            g, rows, n, _ = o.gemm
            after.setdefault(f"{name}_wgrad", []).append(_pass(f"{name}_bias_grad", g * rows * n, o.dtype_bytes, 1, 0))
    if m.norm == "layernorm":
        for name in ("norm1", "norm2"):
            if name in fwd:
                after.setdefault(f"{name}_bwd", []).append(
                    _pass(f"{name}_param_grad", fwd[name].bytes / 2 / fwd[name].dtype_bytes, fwd[name].dtype_bytes, 2, 0))
    qkv = fwd.get("qkv")
    if qkv is not None and qkv.gemm and m.attention != "mla":
        g, rows, n, _ = qkv.gemm
        after.setdefault("attn_bwd", []).append(_pass("qkv_grad_cat", g * rows * n, qkv.dtype_bytes, 1, 1))
    out: list[Operator] = []
    for o in ops:
        if o.phase == "bwd" and o.backward_of in ("residual1", "residual2"):
            o = replace(o, bytes=fwd[o.backward_of].bytes)         # the gradient accumulation add
        out.append(o)
        out += after.get(o.name, [])
    return out + fsdp_gradient_passes(case, is_moe)


def layer_parameters(case: Case, is_moe: bool) -> float:
    """Parameters of one layer in one rank's FlatParameter (TP / EP shares), as FSDP unshards them."""
    m, p = case.model, case.parallelism
    if is_moe and m.moe:
        shared, experts = moe_layer_params(m)
        mlp = shared / p.tp + experts / (p.ep * p.expert_tp)
    else:
        mlp = mlp_params(m, m.ffn) / p.tp
    return attention_params(m) / p.tp + mlp + m.norms_per_layer * norm_params(m)


def fsdp_gradient_passes(case: Case, is_moe: bool) -> list[Operator]:
    """torch FSDP's passes over one layer's unsharded gradient per micro-batch (none without FSDP over
    two or more ranks): the flat-gradient concatenation, the cast to a float32 reduce dtype, the pre-divide."""
    p = case.parallelism
    if p.fsdp == "none" or p.dp < 2:
        return []
    n, wb = layer_parameters(case, is_moe), DTYPE_BYTES[case.weight_precision]
    reduce_b = reduce_bytes(case)
    out = [_pass("fsdp_grad_flatten", n, wb, 1, 1)]
    if reduce_b != wb:
        out.append(replace(_pass("fsdp_grad_cast", n, 1, wb, reduce_b), dtype_bytes=reduce_b))
    return out + [replace(_pass("fsdp_grad_predivide", n, reduce_b, 1, 1), dtype_bytes=reduce_b)]


def reduce_bytes(case: Case) -> int:
    """Bytes per gradient element llm-foundry's FSDP reduce-scatters: Composer's fp32 reduce dtype, or the
    weights' own dtype when they are fp32 already."""
    return max(REDUCE_BYTES, DTYPE_BYTES[case.weight_precision])

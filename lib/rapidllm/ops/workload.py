"""Workload -> per-rank operator lists for one transformer layer, the embedding/head and the optimizer.

Shapes follow Megatron-style sharding (Shoeybi et al. 2019; Korthikanti et al. 2023): TP splits heads
and FFN columns, SP splits the sequence around norms and residuals, CP splits queries while keys/values
cover the whole sequence, EP places experts (over ep x etp ranks, each expert's FFN split over etp; in
inference EP may live inside the TP group, etp = tp / ep, on the tokens that group holds).
Backward GEMMs are the data-gradient (dX = dY·Wᵀ) and weight-gradient (dW = Xᵀ·dY) products of every
forward GEMM.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from rapidllm.ops.moe_routing import eplb_rank_loads
from rapidllm.ops.operators import ATTENTION, GEMM, POINTWISE, AttentionShape, Operator
from rapidllm.ops.params import IMAGE_CHANNELS
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES
from rapidllm.spec.layout import InferenceWorkload, TrainingWorkload
from rapidllm.spec.model import ModelSpec

# FLOPs per element of common pointwise kernels (rough, they are bandwidth bound anyway).
NORM_FLOPS, ACT_FLOPS, ROPE_FLOPS = 5.0, 8.0, 6.0
# The hidden state entering a layer (or the head): what an operator with no `inputs` reads. Residual adds
# name it so the memory liveness walk (memory/liveness.py) frees each tensor after its real last reader.
LAYER_INPUT = "<layer input>"


@dataclass(frozen=True)
class Shard:
    """Everything that sizes one rank's slice of a layer."""
    tokens: int          # tokens entering the layer on this rank (batch x local sequence)
    batch: int
    q_len: int           # queries per sequence on this rank
    kv_len: int          # keys per sequence attended to
    tp: int
    sp: bool
    ep: int
    dtype_bytes: int
    etp: int                 # expert tensor parallelism (training: 1 or tp; inference: tp or tp / ep)
    causal: bool
    decode: bool = False
    hot_expert_factor: float = 1.0
    last_token_logits: bool = False   # inference: the LM head runs on each sequence's last position only
    cp: int = 1                       # context parallelism: q_len = kv_len / cp in load-balanced chunks
    redundant_experts: int = 0        # inference: extra routed-expert replicas over the ep ranks (EPLB)
    draft_tokens: int = 0             # decode: drafts verified per sequence (q_len = 1 + draft_tokens)
    ep_in_tp: bool = False            # inference: the ep ranks are the TP group's and share its tokens
    cache_bytes: int = 0              # inference: bytes per KV-cache element when not dtype_bytes (FP8 cache)

    @property
    def ep_sources(self) -> int:
        """EP ranks routing distinct tokens to the experts: all ep, or one TP group's worth when EP lives
        inside the TP group (every rank of it holds the same tokens)."""
        return 1 if self.ep_in_tp else self.ep

    @property
    def moe_tokens(self) -> int:
        return moe_tokens(self.tokens, self.tp, self.etp, self.sp)

    @property
    def kv_bytes(self) -> int:
        """Bytes of one cached K or V element (`Case.kv_precision`)."""
        return self.cache_bytes or self.dtype_bytes


def moe_tokens(tokens: int, tp: int, etp: int, sp: bool) -> int:
    """Tokens one rank routes to the experts, from the TP-gathered `tokens` of a layer.

    With SP and etp < tp the expert TP group (etp of the tp ranks) gathers only its own sequence shards:
    Megatron-Core with etp 1 routes each rank's s/tp SP shard, where etp = tp routes the gathered sequence.
    """
    return tokens * etp // tp if sp else tokens


def _gemm(name: str, phase: str, m: int, n: int, k: int, b: int, inputs: tuple[str, ...] = (),
          count: int = 1, backward_of: str = "", groups: int = 1) -> Operator:
    """One GEMM launch; `groups` > 1 is a grouped GEMM (one launch over that many equal m x n x k problems)."""
    return Operator(name=name, kind=GEMM, phase=phase, flops=2.0 * groups * m * n * k,
                    bytes=float(b * groups * (m * k + k * n + m * n)), out_bytes=float(b * groups * m * n),
                    count=count, gemm=(groups, m, n, k), inputs=inputs, backward_of=backward_of, dtype_bytes=b)


def _pointwise(name: str, phase: str, elements: float, b: int, reads: float, writes: float, flops_per: float,
               inputs: tuple[str, ...] = (), count: int = 1) -> Operator:
    return Operator(name=name, kind=POINTWISE, phase=phase, flops=flops_per * elements,
                    bytes=(reads + writes) * elements * b, out_bytes=writes * elements * b, count=count, inputs=inputs, dtype_bytes=b)


def _heads(model: ModelSpec, tp: int) -> tuple[int, int]:
    """(query heads, kv heads) per TP rank; KV heads are replicated when tp exceeds them."""
    return model.heads // tp, max(model.kv_heads // tp, 1)


def attention_forward(model: ModelSpec, s: Shard) -> list[Operator]:
    """Norm, QKV projection, rotary, attention core, output projection, residual."""
    if model.attention == "mla" and model.mla:
        return mla_forward(model, s, absorbed=s.decode)
    h, b, T = model.hidden, s.dtype_bytes, s.tokens
    qh, kvh = _heads(model, s.tp)
    d = model.head_dim
    ops = [
        _pointwise("norm1", "fwd", _norm_elements(model, s), b, 1, 1, NORM_FLOPS),
        _gemm("qkv", "fwd", T, (qh + 2 * kvh) * d, h, b, inputs=("norm1",)),
    ]
    if model.position == "rope":
        rope = _pointwise("rope", "fwd", T * (qh + kvh) * d, b, 1, 1, ROPE_FLOPS, inputs=("qkv",))
        if s.kv_bytes != b:     # the kernel that rotates K writes it to an FP8 cache, quantized in its epilogue
            out = float(T * d * (qh * b + kvh * s.kv_bytes))
            rope = replace(rope, bytes=T * (qh + kvh) * d * b + out, out_bytes=out)
        ops.append(rope)
    return ops + _core_and_output(model, s, qh, kvh, d, d, ("qkv",))


def mla_forward(model: ModelSpec, s: Shard, absorbed: bool) -> list[Operator]:
    """Multi-head latent attention (DeepSeek-V2 §2.1, V3 §2.1.1) on one TP rank.

    Down projections (one fused GEMM, as SGLang's fused_qkv_a_proj and vLLM run them): hidden -> query
    latent (q_lora_rank; without one, the per-head queries directly) + key-value latent (kv_lora_rank) +
    the decoupled rotary key (qk_rope_head_dim, shared by all heads). Frameworks replicate the latent
    projections on every TP rank (vLLM/SGLang ReplicatedLinear, Megatron-Core "duplicated"): the latent
    is not split, only the heads are, so TP divides neither these GEMMs nor the latent KV cache.
    Expanded form (training, prefill; `absorbed=False`): up projections give each head its query
    (nope + rope dims) and its key/value (nope + v dims) and attention runs as MHA with d_qk = nope + rope,
    d_v = v over kv_len keys. Absorbed form (decode, as FlashMLA, SGLang and vLLM run it): W_UK is folded
    into the query (a per-head q_nope -> latent GEMM) and W_UV after the attention (latent -> v per head),
    so attention is MQA over the cached latent: one kv head of d_qk = kv_lora_rank + rope, whose first
    kv_lora_rank dims are also V (d_v = kv_lora_rank). A naive decode (`absorbed=False` with q_len 1)
    up-projects the whole cached latent every step, as the reference Hugging Face implementation does.
    """
    a, h, b, T = model.mla, model.hidden, s.dtype_bytes, s.tokens
    assert a is not None
    qh = model.heads // s.tp
    d_qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    q_down = a.q_lora_rank or qh * d_qk
    ops = [
        _pointwise("norm1", "fwd", _norm_elements(model, s), b, 1, 1, NORM_FLOPS),
        _gemm("qkv", "fwd", T, q_down + a.kv_lora_rank + a.qk_rope_head_dim, h, b, inputs=("norm1",)),
        _pointwise("latent_norm", "fwd", T * ((a.q_lora_rank or 0) + a.kv_lora_rank), b, 1, 1, NORM_FLOPS,
                   inputs=("qkv",)),
    ]
    q = "qkv"
    if a.q_lora_rank:
        ops.append(_gemm("q_up", "fwd", T, qh * d_qk, a.q_lora_rank, b, inputs=("latent_norm",)))
        q = "q_up"
    ops.append(_pointwise("rope", "fwd", T * (qh + 1) * a.qk_rope_head_dim, b, 1, 1, ROPE_FLOPS, inputs=(q,)))
    if absorbed:
        ops.append(_gemm("q_absorb", "fwd", T, a.kv_lora_rank, a.qk_nope_head_dim, b, inputs=(q,), groups=qh))
        core = _core_and_output(model, s, qh, 1, a.kv_lora_rank + a.qk_rope_head_dim, a.kv_lora_rank,
                                ("q_absorb", "latent_norm"), kv_shared=True, v_absorb=a.v_head_dim)
        return ops + core
    kv_rows = T if not s.decode else s.batch * s.kv_len
    ops.append(_gemm("kv_up", "fwd", kv_rows, qh * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, b,
                     inputs=("latent_norm",)))
    return ops + _core_and_output(model, s, qh, qh, d_qk, a.v_head_dim, (q, "kv_up"))


def _norm_elements(model: ModelSpec, s: Shard) -> float:
    """Elements of a pre-norm or residual: the layer's tokens, sequence-sharded under SP."""
    return s.tokens * model.hidden / (s.tp if s.sp else 1)


def _core_and_output(model: ModelSpec, s: Shard, qh: int, kvh: int, d_qk: int, d_v: int,
                     inputs: tuple[str, ...], kv_shared: bool = False, v_absorb: int = 0) -> list[Operator]:
    """Attention core over (q heads, kv heads, d_qk, d_v), the absorbed value up-projection when
    `v_absorb` (MLA decode: latent -> v_absorb dims per head), output projection and residual."""
    h, b, T = model.hidden, s.dtype_bytes, s.tokens
    shape = AttentionShape(batch=s.batch, q_heads=qh, kv_heads=kvh, q_len=s.q_len, kv_len=s.kv_len,
                           head_dim_qk=d_qk, head_dim_v=d_v, causal=s.causal and not s.decode, cp=s.cp,
                           kv_shared=kv_shared, decode=s.decode)
    attn_flops = 2.0 * s.batch * qh * s.q_len * s.kv_len * (d_qk + d_v)
    if shape.causal:
        attn_flops *= 0.5
    kv_width = d_qk if kv_shared else d_qk + d_v
    kb = s.kv_bytes if s.decode else b          # a prefill attends to its own K and V, not to the cache
    attn_bytes = s.batch * (b * qh * s.q_len * (d_qk + d_v) + kb * kvh * s.kv_len * kv_width)
    ops = [Operator(name="attn", kind=ATTENTION, phase="fwd", flops=attn_flops, bytes=float(attn_bytes),
                    out_bytes=float(b * T * qh * d_v), attention=shape, inputs=inputs, dtype_bytes=b)]
    out, width = "attn", qh * d_v
    if v_absorb:
        ops.append(_gemm("v_absorb", "fwd", T, v_absorb, d_v, b, inputs=("attn",), groups=qh))
        out, width = "v_absorb", qh * v_absorb
    return ops + [
        _gemm("o_proj", "fwd", T, h, width, b, inputs=(out,)),
        _pointwise("residual1", "fwd", _norm_elements(model, s), b, 2, 1, 1.0, inputs=(LAYER_INPUT, "o_proj")),
    ]


def mlp_forward(model: ModelSpec, s: Shard, ffn: int, prefix: str, tokens: int | None = None,
                groups: int = 1, shards: int | None = None, source: str = "norm2") -> list[Operator]:
    """Up (+gate), activation, down projections of one MLP of width ffn, split over `shards` ranks (TP),
    reading the tensor `source` (the routed experts read the permuted tokens).

    `groups` > 1 runs that many such MLPs (the local experts, `tokens` each) as grouped GEMMs and one
    activation kernel over all of them, as Megatron-Core's --moe-grouped-gemm and TensorRT-LLM's MoE do.
    """
    h, b = model.hidden, s.dtype_bytes
    T = s.tokens if tokens is None else tokens
    f = ffn // (s.tp if shards is None else shards)
    up_n = 2 * f if model.mlp == "gated" else f
    return [
        _gemm(f"{prefix}_up", "fwd", T, up_n, h, b, inputs=(source,), groups=groups),
        _pointwise(f"{prefix}_act", "fwd", T * f * groups, b, 2 if model.mlp == "gated" else 1, 1, ACT_FLOPS,
                   inputs=(f"{prefix}_up",)),
        _gemm(f"{prefix}_down", "fwd", T, h, f, b, inputs=(f"{prefix}_act",), groups=groups),
    ]


def expert_load(model: ModelSpec, s: Shard) -> tuple[int, int]:
    """(tokens per active local expert, active local experts) on the busiest EP rank.

    Balanced routing gives every expert tokens·top_k/E of the EP group's tokens (each of the ep ranks
    routes `moe_tokens`; with EP inside the TP group they are the same tokens, routed once: `ep_sources`).
    A hot expert carries hot_expert_factor x the mean and the others share the rest, so the total is
    conserved; the rank holding it receives hot + (local - 1) x rest. A grouped GEMM pools the tiles of all
    its experts, so that total, spread over the experts that receive any token, prices it. With few tokens (decode) some experts get none and their weights are not read: each of the
    N routed tokens picks top_k of E experts, so an expert is missed by all of them with probability
    (1 - top_k/E)^N. With redundant replicas (inference, DeepSeek's EPLB) a rank holds (E + redundant) / ep
    slots and the busiest one's load is where `eplb_rank_loads` places it.
    """
    moe = model.moe
    assert moe is not None
    group_tokens = s.moe_tokens * s.ep_sources * moe.top_k
    local = (moe.experts + s.redundant_experts) // s.ep
    if s.redundant_experts:
        # the busiest rank as EPLB places the experts + redundant slots (ops/moe_routing.eplb_rank_loads)
        busiest = max(eplb_rank_loads(moe.experts, s.redundant_experts, s.ep, s.hot_expert_factor)) \
            * group_tokens / moe.experts
    else:
        hot = min(group_tokens / moe.experts * s.hot_expert_factor, group_tokens)
        rest = (group_tokens - hot) / max(moe.experts - 1, 1)
        busiest = hot + (local - 1) * rest
    hit = 1.0 - (1.0 - moe.top_k / moe.experts) ** (s.moe_tokens * s.ep_sources)
    active = min(local, max(1, round(1 + (local - 1) * hit)))
    return max(math.ceil(busiest / active - 1e-9), 1), active


def layer_forward(model: ModelSpec, s: Shard, moe_layer: bool) -> list[Operator]:
    """Attention block, then the dense MLP or the MoE block, each closed by its residual add (a parallel
    block, `model.block`, instead: `parallel_block`).

    `inputs` is the layer's data flow: the permute reads the normed tokens and the routing, the routed
    experts the permuted tokens, the unpermute (combine) the experts' output and the routing weights, the
    second residual add the first one's output, the combined experts and the shared experts' output. The
    memory liveness walk frees every tensor after its last reader, so a tensor no operator names would stay
    alive to the end of the layer."""
    h, b = model.hidden, s.dtype_bytes
    norm_elems = s.tokens * h / (s.tp if s.sp else 1)
    ops = attention_forward(model, s)
    if model.block == "parallel":
        return parallel_block(model, s, ops)
    ops.append(_pointwise("norm2", "fwd", norm_elems, b, 1, 1, NORM_FLOPS, inputs=("residual1",)))
    if moe_layer and model.moe:
        moe, T = model.moe, s.moe_tokens
        ops.append(_gemm("router", "fwd", T, moe.experts, h, b, inputs=("norm2",)))
        ops.append(_pointwise("permute", "fwd", T * moe.top_k * h, b, 1, 1, 0.0, inputs=("norm2", "router")))
        per_expert, active = expert_load(model, s)
        ops += mlp_forward(model, s, moe.expert_ffn, "expert", tokens=per_expert, groups=active, shards=s.etp,
                           source="permute")
        mlp_out: tuple[str, ...] = ("unpermute",)
        if moe.shared_experts:
            ops += mlp_forward(model, s, (moe.shared_expert_ffn or moe.expert_ffn) * moe.shared_experts, "shared")
            mlp_out += ("shared_down",)
        # the combine: each token's top_k expert outputs read, weighted by the router and summed into one
        # hidden vector (T x h written, not T x top_k x h)
        ops.append(_pointwise("unpermute", "fwd", T * h, b, moe.top_k, 1, 2.0 * moe.top_k,
                              inputs=("expert_down", "router")))
    else:
        ops += mlp_forward(model, s, model.ffn, "mlp")
        mlp_out = ("mlp_down",)
    ops.append(_pointwise("residual2", "fwd", norm_elems, b, 2, 1, 1.0, inputs=("residual1",) + mlp_out))
    return ops


def parallel_block(model: ModelSpec, s: Shard, attention: list[Operator]) -> list[Operator]:
    """A parallel block, y = x + Attn(LN(x)) + MLP(LN(x)), from the attention operators of a sequential one.

    The MLP reads the attention's norm (`parallel_norms` 1: GPT-J, Falcon-7B) or a second norm of the
    same layer input, computed beside the first as Falcon-40B's ln_attn / ln_mlp and GPT-NeoX's
    input_layernorm / post_attention_layernorm are (2), so it does not wait for attention. Under TP both
    branches end in row-parallel GEMMs whose partial sums are added first (`residual1`, at the unreduced
    width: vLLM's FalconDecoderLayer `mlp_output += attention_output`, GPT-NeoX's bias_dropout_add of the
    two outputs) and reduced once (graph/templates.py); `residual2` then adds the layer input. Same GEMMs,
    attention and activation as the sequential block; one norm fewer with one norm."""
    h, b = model.hidden, s.dtype_bytes
    norm_elems = _norm_elements(model, s)
    ops = [o for o in attention if o.name != "residual1"]
    source = "norm1"
    if model.parallel_norms == 2:
        ops.insert(1, _pointwise("norm2", "fwd", norm_elems, b, 1, 1, NORM_FLOPS))   # reads the layer input
        source = "norm2"
    ops += mlp_forward(model, s, model.ffn, "mlp", source=source)
    ops.append(_pointwise("residual1", "fwd", s.tokens * h, b, 2, 1, 1.0, inputs=("o_proj", "mlp_down")))
    ops.append(_pointwise("residual2", "fwd", norm_elems, b, 2, 1, 1.0, inputs=(LAYER_INPUT, "residual1")))
    return ops


def backward_of(op: Operator) -> list[Operator]:
    """Backward operators of one forward operator (GEMM: dgrad + wgrad; attention: FA2 backward)."""
    if op.kind == GEMM:
        g, m, n, k = op.gemm  # type: ignore[misc]
        b = op.dtype_bytes
        dgrad = _gemm(f"{op.name}_dgrad", "bwd", m, k, n, b, count=op.count, backward_of=op.name, groups=g)
        wgrad = _gemm(f"{op.name}_wgrad", "bwd", k, n, m, b, count=op.count, backward_of=op.name, groups=g)
        return [dgrad, wgrad]
    if op.kind == ATTENTION:
        # FlashAttention-2 backward: 2.5x the forward matmul FLOPs (recomputes S, then dV, dP, dQ, dK).
        return [replace(op, name=f"{op.name}_bwd", phase="bwd", flops=2.5 * op.flops, bytes=2.0 * op.bytes,
                        backward_of=op.name, inputs=())]
    return [replace(op, name=f"{op.name}_bwd", phase="bwd", flops=op.flops, bytes=op.bytes * 1.5,
                    backward_of=op.name, inputs=())]


# Forward operators of each Megatron-Core --recompute-modules name ("x_" matches the prefix x_): the
# attention core, both norms, the dense MLP, the experts' activation, the whole MoE block (router, token
# permutes, experts, shared experts; its all-to-alls run again too), the shared experts and MLA's latent
# norms, up projections and rotary embedding (mla_up_proj; DeepSeek-V3 §3.3.2 recomputes them too).
RECOMPUTE_MODULES: dict[str, tuple[str, ...]] = {
    "core_attn": ("attn",),
    "layernorm": ("norm1", "norm2"),
    "mlp": ("mlp_",),
    "moe_act": ("expert_act",),
    "moe": ("router", "permute", "unpermute", "expert_", "shared_"),
    "shared_experts": ("shared_",),
    "mla_up_proj": ("latent_norm", "q_up", "kv_up", "rope"),
}


def recomputed(name: str, recompute: str, modules: tuple[str, ...] = ("core_attn",)) -> bool:
    """Whether backward re-runs the forward operator `name`: every one under full recompute, those of the
    named modules under selective."""
    if recompute == "full":
        return True
    if recompute != "selective":
        return False
    keys = (k for m in modules for k in RECOMPUTE_MODULES[m])
    return any(name == k or (k.endswith("_") and name.startswith(k)) for k in keys)


def layer_training(model: ModelSpec, s: Shard, moe_layer: bool, recompute: str,
                   modules: tuple[str, ...] = ("core_attn",)) -> list[Operator]:
    """Forward, recompute and backward operators of one layer for one micro-batch."""
    fwd = layer_forward(model, s, moe_layer)
    again = [replace(o, phase="recompute") for o in fwd if recomputed(o.name, recompute, modules)]
    bwd = [b for o in reversed(fwd) for b in backward_of(o)]
    return fwd + again + bwd


# FP8 as Transformer Engine runs it (TE user guide, "Using FP8 with Transformer Engine"; Micikevicius et
# al. 2022, arXiv:2209.05433): only the GEMMs of TE's Linear / LayerNormLinear / GroupedLinear modules take
# FP8 inputs (E4M3 forward, E5M2 gradients, per-tensor scales); everything else stays BF16. The MoE router
# (Megatron-Core's TopKRouter is a plain torch linear) and the output head (Megatron's output_layer is not
# a TE module; DeepSeek-V3 §3.3.1 keeps head and gating in BF16; TensorRT-LLM / ModelOpt FP8 checkpoints
# leave lm_head unquantized) are BF16 GEMMs. NVFP4 checkpoints quantize only the linear layers of the
# blocks, so under `precision: fp4` the same two stay BF16 (docs/fp4.md).
HIGH_PRECISION_GEMMS = ("router", "lm_head")
# FP8 cast of one element in training: read it in BF16 (2 B), write the FP8 copy and its transpose (1 B
# each; Hopper's FP8 wgmma takes only K-major operands, so TE's fused cast-transpose emits both, the
# transpose for the weight-gradient GEMM). The amax of the tensor is reduced in the same pass.
CAST_READ_BYTES, CAST_WRITE_BYTES, CAST_FLOPS = 2, 2, 3.0


def fp8_gemm(name: str) -> bool:
    """Whether a GEMM (forward, dgrad or wgrad) runs in FP8 under `precision: fp8` (in FP4 under `fp4`)."""
    return not name.removesuffix("_dgrad").removesuffix("_wgrad").endswith(HIGH_PRECISION_GEMMS)


def fp8_cast(name: str, phase: str, elements: float, count: int = 1) -> Operator:
    """One TE cast-transpose kernel (with its amax): memory bound, priced by the roofline."""
    return _pointwise(f"{name}_fp8_cast", phase, elements, 1, CAST_READ_BYTES, CAST_WRITE_BYTES, CAST_FLOPS,
                      count=count)


def with_fp8_casts(ops: list[Operator]) -> list[Operator]:
    """Training operators with TE's per-tensor scaling casts: before every FP8 forward (or recomputed)
    GEMM its BF16 input X (m x k), before every FP8 dgrad the incoming gradient dY (the dgrad's own m x k);
    the wgrad reuses the transposes of both, so it needs none. Weights are cast once per step
    (`fp8_weight_cast`): Megatron-Core passes TE's is_first_microbatch, which caches the FP8 weights over the
    micro-batches of a step."""
    out: list[Operator] = []
    for o in ops:
        if o.kind == GEMM and o.gemm and fp8_gemm(o.name) and not o.name.endswith("_wgrad"):
            g, m, _, k = o.gemm
            out.append(fp8_cast(o.name, o.phase, float(g * m * k), o.count))
        out.append(o)
    return out


def fp8_weight_cast(weights: float) -> Operator:
    """The per-step cast of a rank's BF16 GEMM weights to FP8 (and their transposes), in the step section."""
    return replace(fp8_cast("weights", "optimizer", weights), name="fp8_weight_cast")


def training_shard(case: Case) -> Shard:
    w, p = case.workload, case.parallelism
    assert isinstance(w, TrainingWorkload)
    s_local = w.seq_len // p.cp
    return Shard(tokens=w.micro_batch * s_local, batch=w.micro_batch, q_len=s_local, kv_len=w.seq_len,
                 tp=p.tp, sp=p.sp, ep=p.ep, etp=p.expert_tp, dtype_bytes=DTYPE_BYTES[case.activation_precision],
                 causal=case.model.causal,
                 hot_expert_factor=case.moe_hot_expert_factor, cp=p.cp)


def prefill_shard(case: Case) -> Shard:
    w, p = case.workload, case.parallelism
    assert isinstance(w, InferenceWorkload)
    return Shard(tokens=w.batch * w.prompt_tokens, batch=w.batch, q_len=w.prompt_tokens, kv_len=w.prompt_tokens,
                 tp=p.tp, sp=False, ep=p.ep, etp=p.expert_tp, dtype_bytes=DTYPE_BYTES[case.activation_precision],
                 causal=case.model.causal, hot_expert_factor=case.moe_hot_expert_factor, last_token_logits=True,
                 redundant_experts=p.redundant_experts, draft_tokens=w.draft_tokens, ep_in_tp=p.ep_in_tp(False),
                 cache_bytes=DTYPE_BYTES[case.kv_precision])


def decode_shard(case: Case, context: int) -> Shard:
    """One decode step with `context` tokens already in the KV cache; with speculative decoding each
    sequence brings its last token and the draft tokens to verify (q_len = 1 + draft_tokens)."""
    w, p = case.workload, case.parallelism
    assert isinstance(w, InferenceWorkload)
    q = w.step_queries
    return Shard(tokens=w.batch * q, batch=w.batch, q_len=q, kv_len=context + q, tp=p.tp, sp=False, ep=p.ep,
                 etp=p.expert_tp, dtype_bytes=DTYPE_BYTES[case.activation_precision], causal=False, decode=True,
                 hot_expert_factor=case.moe_hot_expert_factor, last_token_logits=True,
                 redundant_experts=p.redundant_experts, draft_tokens=w.draft_tokens, ep_in_tp=p.ep_in_tp(False),
                 cache_bytes=DTYPE_BYTES[case.kv_precision])


def head_forward(model: ModelSpec, s: Shard) -> list[Operator]:
    """Final norm, LM head GEMM (vocab split by TP) and softmax/cross-entropy, on the last stage.

    Training needs logits at every position for the loss. Inference needs them only at each sequence's
    last position (the next token), so serving engines gather those rows before the LM head (TensorRT-LLM
    unless context logits are requested, vLLM's logits processor) and sample instead of taking a loss.
    Speculative decoding needs them at every verified position of a decode step, and runs the MTP modules
    after the head (prefill: over the prompt, for the first draft; decode: over the step's tokens), each
    drafting one token per sequence from its own head pass (`mtp_forward`)."""
    if not s.last_token_logits:
        ops = _head(model, s, s.tokens, "cross_entropy", 1)
        return ops + [o for depth in range(1, model.mtp_depth + 1) for o in mtp_forward(model, s, depth, ops)]
    ops = _head(model, s, s.tokens if s.decode else s.batch, "sampling", 0)
    if not s.draft_tokens:
        return ops
    draft = _head(model, s, s.batch, "sampling", 0)
    return ops + [o for depth in range(1, s.draft_tokens + 1) for o in mtp_forward(model, s, depth, draft)]


def _head(model: ModelSpec, s: Shard, rows: int, last: str, writes: int) -> list[Operator]:
    """Final norm over the shard's tokens, the LM head over `rows` of them, then `last` (loss or sampling)."""
    h, b = model.hidden, s.dtype_bytes
    final_norm = _pointwise("final_norm", "fwd", s.tokens * h, b, 1, 1, NORM_FLOPS)
    if not model.vocab:          # an image encoder's output is the normed features (task heads not modelled)
        return [final_norm]
    v = model.vocab // s.tp
    return [
        final_norm,
        _gemm("lm_head", "fwd", rows, v, h, b, inputs=("final_norm",)),
        _pointwise(last, "fwd", rows * v, 4, 1, writes, 5.0, inputs=("lm_head",)),
    ]


def mtp_forward(model: ModelSpec, s: Shard, depth: int, head: list[Operator]) -> list[Operator]:
    """One multi-token-prediction module (DeepSeek-V3 §2.2; the drafter in speculative decoding): RMSNorm
    of the previous depth's hidden state and of the next token's embedding, their concatenation projected
    2h -> h, one transformer layer (MoE where the model has experts), and the shared output head with its
    own loss (training) or sampling (inference).
    Runs on the last pipeline stage after the main head (where DeepSeek-V3 places it, §3.2.1)."""
    h, b = model.hidden, s.dtype_bytes
    p = f"mtp{depth}_"
    ops = [_pointwise(p + "norms", "fwd", 2 * s.tokens * h, b, 1, 1, NORM_FLOPS),
           _gemm(p + "proj", "fwd", s.tokens, h, 2 * h, b, inputs=(p + "norms",))]
    # the module's layer reads the projection, its head the layer's output
    for o, source in [(o, "proj") for o in layer_forward(model, s, moe_layer=model.moe is not None)] + \
            [(o, "residual2") for o in head]:
        inputs = tuple(p + (source if n == LAYER_INPUT else n) for n in o.inputs or (LAYER_INPUT,))
        ops.append(replace(o, name=p + o.name, inputs=inputs))
    return ops


def embedding_forward(model: ModelSpec, s: Shard) -> list[Operator]:
    """Token-embedding gather on the first stage (reads one row per token); for a vision transformer the
    patch embedding instead, one GEMM from the 3·p² pixels of each patch to hidden (the strided convolution
    ViTs write it as), every rank computing it whole."""
    if model.patch_size:
        return [_gemm("patch_embed", "fwd", s.tokens, model.hidden, IMAGE_CHANNELS * model.patch_size ** 2,
                      s.dtype_bytes)]
    return [_pointwise("embedding", "fwd", s.tokens * model.hidden, s.dtype_bytes, 1, 1, 0.0)]


def optimizer_step(local_params: float, state_bytes_per_param: float) -> Operator:
    """Adam: read weights, grads, moments; write weights and moments (~ state bytes x 2 per parameter)."""
    return Operator(name="optimizer", kind=POINTWISE, phase="optimizer", flops=12.0 * local_params,
                    bytes=2.0 * state_bytes_per_param * local_params)

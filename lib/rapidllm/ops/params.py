"""Parameter counts of a model, total and per component, from its shape alone.

Used by the memory model (weights, gradients, optimizer state), by MFU (6·N·tokens) and by the model
library test that checks every named model against its published size.
"""
from __future__ import annotations

from dataclasses import dataclass

from rapidllm.caches import current
from rapidllm.spec.model import ModelSpec

IMAGE_CHANNELS = 3       # RGB input of a vision transformer's patch embedding


@dataclass(frozen=True)
class ParamCounts:
    embedding: int          # token (+ learned position) embedding, or a ViT's patch projection
    lm_head: int            # 0 when tied to the embedding
    attention: int          # all layers
    dense_mlp: int          # all dense layers
    experts: int            # routed experts, all MoE layers
    shared_experts: int     # shared experts + routers, all MoE layers
    norms: int
    attention_replicated: int = 0   # part of `attention` every TP rank holds whole (MLA's latent projections)
    mtp: int = 0                    # multi-token-prediction modules: not in `total`, as published totals

    @property
    def total(self) -> int:
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp + self.experts
                + self.shared_experts + self.norms)

    @property
    def with_mtp(self) -> int:
        return self.total + self.mtp


def attention_params(m: ModelSpec) -> int:
    """One layer's attention projections (and biases)."""
    h = m.hidden
    if m.attention == "mla" and m.mla:
        a = m.mla
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.heads * qk_head
        else:
            q = h * m.heads * qk_head
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv += a.kv_lora_rank * m.heads * (a.qk_nope_head_dim + a.v_head_dim)
        return q + kv + m.heads * a.v_head_dim * h
    params = h * (m.q_dim + 2 * m.kv_dim) + m.q_dim * h
    if m.qkv_bias or m.bias:
        params += m.q_dim + 2 * m.kv_dim
    if m.bias:
        params += h
    return params


def replicated_attention_params(m: ModelSpec) -> int:
    """One layer's attention parameters that tensor parallelism does not split: MLA's down projections to
    the query and key-value latents (with the decoupled rotary key) and their norms, which vLLM/SGLang
    (ReplicatedLinear) and Megatron-Core ("duplicated") keep whole on every TP rank. 0 otherwise."""
    if not (m.attention == "mla" and m.mla):
        return 0
    a = m.mla
    q = m.hidden * a.q_lora_rank + a.q_lora_rank
    return q + m.hidden * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank


def moe_layer_params(m: ModelSpec) -> tuple[int, int]:
    """(shared experts + router, routed experts) of one MoE layer."""
    assert m.moe is not None
    shared_ffn = m.moe.shared_expert_ffn or m.moe.expert_ffn
    return (m.moe.shared_experts * mlp_params(m, shared_ffn) + m.hidden * m.moe.experts,
            m.moe.experts * mlp_params(m, m.moe.expert_ffn))


def mtp_params(m: ModelSpec) -> tuple[int, int]:
    """(dense, routed-expert) parameters of the model's multi-token-prediction modules (DeepSeek-V3 §2.2):
    per module a 2h -> h projection, norms of the embedding, of the hidden state and before the shared
    head, and one transformer layer (an MoE layer where the model has experts); embedding and output
    head are shared with the main model."""
    if not m.mtp_depth:
        return 0, 0
    dense = 2 * m.hidden * m.hidden + 3 * norm_params(m) + attention_params(m) + m.norms_per_layer * norm_params(m)
    experts = 0
    if m.moe:
        shared, experts = moe_layer_params(m)
        dense += shared
    else:
        dense += mlp_params(m, m.ffn)
    return m.mtp_depth * dense, m.mtp_depth * experts


def mlp_params(m: ModelSpec, ffn: int) -> int:
    """One MLP (dense layer or one expert) of width ffn."""
    mats = 3 if m.mlp == "gated" else 2
    params = mats * m.hidden * ffn
    if m.bias:
        params += (2 if m.mlp == "gated" else 1) * ffn + m.hidden
    return params


def norm_params(m: ModelSpec) -> int:
    return m.hidden * (2 if m.norm == "layernorm" else 1)


def parameter_counts(m: ModelSpec) -> ParamCounts:
    """The counts of `m`, kept per model object (`Caches.param_counts`): a sweep's cases share a few
    models, and pricing each case's optimizer rows asked for them three times (~25 ms per sweep-1000)."""
    return current().param_counts.of((m,), lambda: _parameter_counts(m))


def _parameter_counts(m: ModelSpec) -> ParamCounts:
    moe_layers = m.moe_layer_count()
    dense_layers = m.layers - moe_layers
    embedding = m.vocab * m.hidden + (m.max_seq_len * m.hidden if m.position == "learned" else 0)
    if m.patch_size:             # patch projection (3·p² -> hidden) and its bias
        embedding += (IMAGE_CHANNELS * m.patch_size ** 2 + 1) * m.hidden
    experts = shared = 0
    if m.moe:
        shared_one, experts_one = moe_layer_params(m)
        experts, shared = moe_layers * experts_one, moe_layers * shared_one
    return ParamCounts(
        embedding=embedding,
        lm_head=0 if m.tied_embeddings else m.vocab * m.hidden,
        attention=m.layers * attention_params(m),
        dense_mlp=dense_layers * mlp_params(m, m.ffn),
        experts=experts,
        shared_experts=shared,
        norms=(m.norms_per_layer * m.layers + 1) * norm_params(m),
        attention_replicated=m.layers * replicated_attention_params(m),
        mtp=sum(mtp_params(m)),
    )


def active_parameters(m: ModelSpec) -> int:
    """Parameters touched per token: routed experts count top_k of experts."""
    c = parameter_counts(m)
    if not m.moe:
        return c.total
    return c.total - c.experts + c.experts * m.moe.top_k // m.moe.experts

"""Parameter counts of a model, total and per component, from its shape alone.

Used by the memory model (weights, gradients, optimizer state), by MFU (6·N·tokens) and by the model
library test that checks every named model against its published size.
"""
from __future__ import annotations

from dataclasses import dataclass

from rapidllm.spec.model import ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    embedding: int          # token (+ learned position) embedding
    lm_head: int            # 0 when tied to the embedding
    attention: int          # all layers
    dense_mlp: int          # all dense layers
    experts: int            # routed experts, all MoE layers
    shared_experts: int     # shared experts + routers, all MoE layers
    norms: int

    @property
    def total(self) -> int:
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp + self.experts
                + self.shared_experts + self.norms)


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
    moe_layers = m.moe_layer_count()
    dense_layers = m.layers - moe_layers
    embedding = m.vocab * m.hidden + (m.max_seq_len * m.hidden if m.position == "learned" else 0)
    experts = shared = 0
    if m.moe:
        experts = moe_layers * m.moe.experts * mlp_params(m, m.moe.expert_ffn)
        shared_ffn = m.moe.shared_expert_ffn or m.moe.expert_ffn
        shared = moe_layers * (m.moe.shared_experts * mlp_params(m, shared_ffn) + m.hidden * m.moe.experts)
    return ParamCounts(
        embedding=embedding,
        lm_head=0 if m.tied_embeddings else m.vocab * m.hidden,
        attention=m.layers * attention_params(m),
        dense_mlp=dense_layers * mlp_params(m, m.ffn),
        experts=experts,
        shared_experts=shared,
        norms=(2 * m.layers + 1) * norm_params(m),
    )


def active_parameters(m: ModelSpec) -> int:
    """Parameters touched per token: routed experts count top_k of experts."""
    c = parameter_counts(m)
    if not m.moe:
        return c.total
    return c.total - c.experts + c.experts * m.moe.top_k // m.moe.experts

"""Model spec: the transformer's shape, SI-free (all integers)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rapidllm.spec.errors import SpecError


@dataclass(frozen=True)
class MoESpec:
    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    shared_expert_ffn: int = 0      # 0 -> expert_ffn
    layer_freq: int = 1             # every layer_freq-th layer is MoE
    first_dense_layers: int = 0     # leading dense layers (DeepSeek/GLM style)
    capacity_factor: float = 1.0
    # Group-limited (node-limited) routing, config.json's n_group / topk_group (DeepSeek-V2 §2.1.2,
    # DeepSeek-V3 §2.1.2): the experts form `expert_groups` equal groups and a token's top_k experts come
    # from at most `group_limit` of them (0: no limit). With one group per node, at most M nodes per token.
    expert_groups: int = 1
    group_limit: int = 0

    @property
    def groups_per_token(self) -> int:
        """Expert groups a token may reach: group_limit, or all of them without a limit."""
        return self.group_limit or self.expert_groups

    def is_moe_layer(self, index: int) -> bool:
        return index >= self.first_dense_layers and (index - self.first_dense_layers) % self.layer_freq == 0


@dataclass(frozen=True)
class MLASpec:
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0            # 0 -> full-rank query projection


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    mlp: str = "gated"
    attention: str = "mha"
    position: str = "rope"
    norm: str = "rmsnorm"
    bias: bool = False
    qkv_bias: bool = False
    tied_embeddings: bool = False
    max_seq_len: int = 4096
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    published_params: float | None = None
    # Multi-token prediction modules (DeepSeek-V3 §2.2): each adds one transformer layer (MoE where the
    # model has experts), a 2h -> h projection and two norms, sharing the embedding and the output head,
    # and one more LM-head pass and loss per training step. 0: none. Not counted in published totals.
    mtp_depth: int = 0
    # Attention mask: True (decoder, each token sees its prefix) or False (encoder: bidirectional, every
    # token sees the whole sequence, e.g. a ViT; no KV cache, its inference is one forward pass).
    causal: bool = True
    # Image patch side in pixels: > 0 for a vision transformer, whose tokens are patches of an RGB image
    # embedded by one linear projection (3·p² -> hidden) instead of a vocabulary lookup. 0: token input.
    patch_size: int = 0
    # Transformer block: "sequential", y = x' + MLP(LN(x')) with x' = x + Attn(LN(x)), or "parallel",
    # y = x + Attn(LN(x)) + MLP(LN(x)) (GPT-J, GPT-NeoX-20B, PaLM, Falcon; docs/operator-model.md, "Parallel
    # blocks"). `parallel_norms`: the norms of a parallel block, 1 shared by both branches (GPT-J,
    # Falcon-7B) or 2, one per branch over the same input (Falcon-40B/180B, GPT-NeoX-20B's untied norms).
    block: str = "sequential"
    parallel_norms: int = 1

    # Fields added after case ids were first published: omitted from `case_id`'s hash while they hold their
    # default, so every case that does not use them keeps its id (spec/case.py `_plain`).
    HASH_OMITTED_DEFAULTS = ("causal", "patch_size", "block", "parallel_norms")

    @property
    def norms_per_layer(self) -> int:
        """Norms of one transformer layer: two in a sequential block, `parallel_norms` in a parallel one."""
        return self.parallel_norms if self.block == "parallel" else 2

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def cp_kv_dim(self) -> int:
        """Key and value values per token a context-parallel rank gathers: 2·kv_dim, or for MLA the
        up-projected per-head keys (nope + rope) and values that Megatron-Core / Transformer Engine pass
        to the attention core."""
        if self.attention == "mla" and self.mla:
            a = self.mla
            return self.heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim)
        return 2 * self.kv_dim

    def moe_layer_count(self) -> int:
        return sum(self.moe.is_moe_layer(i) for i in range(self.layers)) if self.moe else 0

    @classmethod
    def from_mapping(cls, m: dict[str, Any], source: str) -> "ModelSpec":
        heads = m["heads"]
        attention = m.get("attention", "gqa" if m.get("kv_heads", heads) != heads else "mha")
        kv_heads = m.get("kv_heads", 1 if attention == "mqa" else heads)
        head_dim = m.get("head_dim", m["hidden"] // heads)
        if "head_dim" not in m and m["hidden"] % heads:
            raise SpecError.at(source, "heads", f"hidden {m['hidden']} is not divisible by heads {heads}; give head_dim")
        if heads % kv_heads:
            raise SpecError.at(source, "kv_heads", f"heads {heads} must be a multiple of kv_heads {kv_heads}")
        if attention == "mla" and "mla" not in m:
            raise SpecError.at(source, "mla", "attention 'mla' needs an mla mapping (kv_lora_rank, ...)")
        moe = MoESpec(**m["moe"]) if m.get("moe") else None
        if moe and moe.top_k > moe.experts:
            raise SpecError.at(source, "moe.top_k", f"top_k {moe.top_k} exceeds experts {moe.experts}")
        if moe and moe.experts % moe.expert_groups:
            raise SpecError.at(source, "moe.expert_groups",
                               f"experts {moe.experts} must be a multiple of expert_groups {moe.expert_groups}")
        if moe and moe.group_limit > moe.expert_groups:
            raise SpecError.at(source, "moe.group_limit",
                               f"group_limit {moe.group_limit} exceeds expert_groups {moe.expert_groups}")
        if moe and moe.groups_per_token * moe.experts // moe.expert_groups < moe.top_k:
            raise SpecError.at(source, "moe.group_limit",
                               f"group_limit {moe.group_limit} groups hold fewer than top_k {moe.top_k} experts")
        if m["vocab"] == 0 and not m.get("patch_size"):
            raise SpecError.at(source, "vocab", "0 (no token embedding or output head) needs patch_size > 0 "
                               "(an image encoder's tokens are patches); a token model needs vocab >= 1")
        if m.get("mtp_depth") and (m["vocab"] == 0 or m.get("causal") is False):
            raise SpecError.at(source, "mtp_depth", "multi-token prediction predicts later tokens of a causal "
                               "model through its output head; allowed with causal: false or vocab 0: 0")
        if m.get("block") == "parallel" and moe:
            raise SpecError.at(source, "block", "'parallel' (attention and MLP side by side) is modelled for dense "
                               "models only; allowed with moe: sequential")
        if "parallel_norms" in m and m.get("block") != "parallel":
            raise SpecError.at(source, "parallel_norms", "applies to block: parallel only; "
                               "a sequential block has one norm before attention and one before the MLP")
        return cls(
            name=m["name"], hidden=m["hidden"], layers=m["layers"], heads=heads, kv_heads=kv_heads,
            head_dim=head_dim, ffn=m["ffn"], vocab=m["vocab"], mlp=m.get("mlp", "gated"),
            attention=attention, position=m.get("position", "rope"), norm=m.get("norm", "rmsnorm"),
            bias=m.get("bias", False), qkv_bias=m.get("qkv_bias", False),
            tied_embeddings=m.get("tied_embeddings", False), max_seq_len=m.get("max_seq_len", 4096),
            moe=moe, mla=MLASpec(**m["mla"]) if m.get("mla") else None,
            published_params=m.get("published_params"), mtp_depth=m.get("mtp_depth", 0),
            causal=m.get("causal", True), patch_size=m.get("patch_size", 0),
            block=m.get("block", "sequential"), parallel_norms=m.get("parallel_norms", 1),
        )

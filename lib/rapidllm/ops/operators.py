"""The operator record every pricer and the memory walk share.

An Operator is one kernel launch on one rank (after TP/SP/CP/EP sharding), repeated `count` times. GEMMs
carry (batch, m, n, k); attention carries its head and length shape; pointwise operators carry bytes and
FLOPs directly. `out_bytes` is the activation it produces (for the memory liveness walk) and `saved`
says whether the backward pass keeps it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

GEMM, ATTENTION, POINTWISE = "gemm", "attention", "pointwise"


@dataclass(frozen=True)
class AttentionShape:
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim_qk: int
    head_dim_v: int
    causal: bool
    cp: int = 1               # context-parallel ranks sharing the sequence in load-balanced chunks
    kv_shared: bool = False   # V is a slice of the cached K (MLA's absorbed decode over the latent)
    decode: bool = False      # a generation step's attention (its own kernel: `Case.decode_attention`)


@dataclass(frozen=True)
class Operator:
    name: str                 # e.g. "qkv", "attn", "mlp_down", "expert_up"
    kind: str                 # gemm | attention | pointwise
    phase: str                # fwd | bwd | recompute | optimizer
    flops: float              # per launch
    bytes: float              # HBM bytes per launch at the roofline (compulsory traffic)
    out_bytes: float = 0.0    # activation bytes produced per launch
    count: int = 1            # launches per layer (e.g. local experts)
    gemm: tuple[int, int, int, int] | None = None     # (batch, m, n, k)
    attention: AttentionShape | None = None
    backward_of: str = ""     # for bwd ops, the forward operator they differentiate
    inputs: tuple[str, ...] = field(default_factory=tuple)   # forward data dependencies (names)
    dtype_bytes: int = 2      # element size of inputs and outputs

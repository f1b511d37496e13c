"""Tensor-parallel communication overlap as Transformer Engine's userbuffers run it (Megatron-Core
--tp-comm-overlap).

Without it, a sequence-parallel layer waits for the all-gather before its column-parallel GEMM and for
the reduce-scatter after its row-parallel GEMM. With it (Transformer Engine `initialize_ub` defaults,
transformer_engine/pytorch/module/base.py, TE 1.x-2.x):

- *ring exchange* (qkv and fc1 forward, proj and fc2 input gradient): the all-gather is split into tp
  chunks passed around the TP ring by the copy engines (no SMs), and the GEMM runs chunk by chunk on the
  chunk already present. The first chunk is local, so nothing waits for it; chunk k needs k transfers:
  T = G/tp + (tp-1) x max(G/tp, one ring step).
- *pipeline* (proj and fc2 forward): the GEMM is split into 4 chunks (`num_splits`) and each chunk's
  output is reduce-scattered by a 16-SM kernel (`num_sm`) while the next chunk computes on the other SMs
  (`set_sm_margin`: the GEMM runs on S - 16 SMs throughout). The first chunk has nothing to hide behind
  and the last chunk's reduce-scatter is always exposed: a two-stage pipeline,
  T = a + b + 3 x max(a, b), a = G x S / (S - 16) / 4, b = the reduce-scatter of one chunk.
- *bulk* (qkv and fc1 backward): the re-gather of the input for the weight gradient beside the
  input-gradient GEMM, and that GEMM's reduce-scatter beside the weight-gradient GEMM. Without userbuffers
  Megatron and TE already launch both asynchronously beside the same GEMMs (graph/templates.py), so the
  templates keep them as they are; neither the NCCL kernels nor the bulk userbuffers' 16 SMs are charged.

Only the dense layers' TE linears take part: an MoE block's gather before the router belongs to the token
dispatcher. A ring step is priced as one step of the simulated ring all-gather (the same bytes over the
same links, tp - 1 steps); a pipelined chunk's reduce-scatter at its own size (its per-call latency counts
once per chunk). The overlap is applied by giving the collective node the time it holds its consumer
beyond the GEMM's own time, T - G, so the templates, streams and attribution stay as they are.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from rapidllm.graph.templates import COMM, COMPUTE, Template

UB_SMS = 16          # TE initialize_ub default num_sm of the pipeline and bulk methods
UB_SPLITS = 4        # TE initialize_ub default num_splits of the pipeline method
RING_CONSUMERS = frozenset({"qkv", "mlp_up", "o_proj_dgrad", "mlp_down_dgrad"})
PIPELINE_PRODUCERS = frozenset({"o_proj", "mlp_down"})


def ring_exchange_time(gemm_s: float, step_s: float, tp: int) -> float:
    """GEMM with its all-gather as a ring exchange: tp chunks, the first local, each later chunk waiting
    for its transfer (copy engines: the GEMM keeps every SM)."""
    return gemm_s / tp + (tp - 1) * max(gemm_s / tp, step_s)


def pipelined_rs_time(gemm_s: float, chunk_rs_s: float, sm_share: float, splits: int = UB_SPLITS) -> float:
    """GEMM in `splits` chunks on a share of the SMs, each chunk's reduce-scatter behind the next chunk:
    a two-stage pipeline whose first GEMM chunk and last reduce-scatter cannot overlap."""
    a = gemm_s / sm_share / splits
    return a + chunk_rs_s + (splits - 1) * max(a, chunk_rs_s)


def overlap_durations(t: Template, compute_s: Sequence[float], comm_s: Callable[[str, str, float], float],
                      tp: int, sm_count: int) -> dict[int, float]:
    """Per TP collective node of a template that userbuffers overlap, the time it holds its consumer
    beyond the GEMM's own time (T - G of the module docstring)."""
    if tp < 2:
        return {}
    durations = [0.0] * len(t.nodes)
    it = iter(compute_s)
    for i, n in enumerate(t.nodes):
        if n.kind == COMPUTE:
            durations[i] = float(next(it))
    share = (sm_count - UB_SMS) / sm_count
    out: dict[int, float] = {}
    for i, n in enumerate(t.nodes):
        if n.kind != COMM or n.axis != "tp":
            continue
        if n.op == "all_gather":
            consumer = next((j for j in range(i + 1, len(t.nodes)) if i in t.nodes[j].deps), None)
            if consumer is not None and t.nodes[consumer].name in RING_CONSUMERS:
                g = durations[consumer]
                step = comm_s("tp", "all_gather", n.nbytes) / (tp - 1)
                out[i] = ring_exchange_time(g, step, tp) - g
        elif n.op == "reduce_scatter" and n.deps and t.nodes[n.deps[0]].name in PIPELINE_PRODUCERS:
            g = durations[n.deps[0]]
            chunk = comm_s("tp", "reduce_scatter", n.nbytes / UB_SPLITS)
            out[i] = pipelined_rs_time(g, chunk, share) - g
    return out

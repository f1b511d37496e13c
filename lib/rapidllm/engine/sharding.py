"""How ZeRO-3 and FSDP full_shard issue the per-layer collectives of a sharded model (issue 22, item 3).

Both gather a layer's parameters before its forward and again before its backward, and reduce-scatter
its gradients after the backward (the bytes: `composer.sharded_layer_bytes`). They differ in how many
collectives carry those bytes, which is what the per-call latency of a collective over hundreds of ranks
multiplies:
- PyTorch FSDP (`fsdp: full_shard`) flattens every wrapped unit into one FlatParameter, and llm-foundry,
  HF Accelerate and torchtitan wrap each transformer block: one all-gather and one reduce-scatter per
  layer (torch.distributed.fsdp, FlatParamHandle).
- DeepSpeed ZeRO stage 3 (`zero: 3`) fetches parameters submodule by submodule (PartitionedParameter-
  Coordinator.fetch_sub_module issues one coalesced all-gather per module's parameters), so a layer costs
  one all-gather per module holding weights: one per weight GEMM of the layer, every expert its own
  module. Gradients are reduced in buckets of `reduce_bucket_size` elements (default 5e8, DeepSpeed
  configuration docs), so a layer pays its share of a bucket's reduce-scatter, or several of them.
Norm weights are below DeepSpeed's persistence threshold (1e5 elements) and small either way; their bytes
stay in the layer's total.
"""
from __future__ import annotations

from collections.abc import Sequence

from rapidllm.engine.comm_cost import CommCost
from rapidllm.memory.model import layer_kinds
from rapidllm.ops import workload as wl
from rapidllm.ops.operators import GEMM
from rapidllm.spec.case import Case

DS_REDUCE_BUCKET = 5e8        # DeepSpeed reduce_bucket_size default, elements


def layer_gathers(case: Case, is_moe: bool) -> float:
    """All-gathers one layer of a kind issues per pass (a whole number): 1 under FSDP, the modules holding
    weights under DeepSpeed ZeRO-3 (the layer's forward weight GEMMs; a grouped expert GEMM counts each
    expert)."""
    if case.parallelism.fsdp == "full_shard":
        return 1.0
    shard = wl.training_shard(case)
    return sum(o.gemm[0] * o.count for o in wl.layer_forward(case.model, shard, is_moe) if o.kind == GEMM and o.gemm)


def gather_groups(case: Case) -> float:
    """All-gathers per layer, `layer_gathers` averaged over the layer kinds (exactly 1 under FSDP)."""
    if case.parallelism.fsdp == "full_shard":
        return 1.0
    return sum(share * layer_gathers(case, is_moe) for is_moe, share in layer_kinds(case))


def scatter_groups(case: Case, layer_params: float) -> float:
    """Reduce-scatters per layer: 1 under FSDP; under DeepSpeed the layer's share of 5e8-element buckets
    (below 1 when a bucket holds several layers)."""
    return 1.0 if case.parallelism.fsdp == "full_shard" else layer_params / DS_REDUCE_BUCKET


def layer_collectives(case: Case, gather_bytes: float, scatter_bytes: float, layer_params: float
                      ) -> tuple[tuple[float, float], tuple[float, float]]:
    """((collectives, bytes each) of the all-gather, (collectives, bytes each) of the reduce-scatter) per layer."""
    g, s = gather_groups(case), scatter_groups(case, layer_params)
    return (g, gather_bytes / g), (s, scatter_bytes / s)


def scatter_calls(case: Case, grads: Sequence[float], bucket: float) -> list[list[float]]:
    """Bytes of the reduce-scatters one backward pass launches after each of its layers, given the layers'
    gradient bytes in the order the backward produces them and `bucket`, the bytes of one reduce-scatter as
    `layer_collectives` prices it (what a Chakra trace of the pass writes, `engine/chakra.py`).

    FSDP reduce-scatters each layer's gradients after the layer's backward: one call per layer, of its own
    bytes. DeepSpeed fills buckets in gradient order and reduces one as soon as it is full, after the layer
    that fills it (several after a layer larger than a bucket); its backward epilogue reduces the partial
    bucket left after the pass's last layer (ZeRO stage >= 2 reduces at every micro-batch, not only at the
    accumulation boundary: DeepSpeedEngine.allreduce_gradients). So the bytes are the engine's and every full
    call has the size the engine prices; a pass of n layers makes ceil(n x s) calls, where the engine counts
    n x s (the partial bucket as its fraction of a full call)."""
    if case.parallelism.fsdp == "full_shard":
        return [[b] for b in grads]
    calls: list[list[float]] = []
    held = 0.0
    for b in grads:
        held += b
        here: list[float] = []
        while held >= bucket * (1 - 1e-9):
            here.append(bucket)
            held -= bucket
        calls.append(here)
    if calls and held > bucket * 1e-9:
        calls[-1].append(held)
    return calls


def layer_comm_seconds(case: Case, cost: CommCost, stage: int, gather_bytes: float, scatter_bytes: float,
                       layer_params: float) -> tuple[float, float]:
    """(all-gather, reduce-scatter) seconds per layer: the collectives back to back on the DP stream."""
    (g, gb), (s, sb) = layer_collectives(case, gather_bytes, scatter_bytes, layer_params)
    return g * cost.time("dp", "all_gather", gb, stage), s * cost.time("dp", "reduce_scatter", sb, stage)

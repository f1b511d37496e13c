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

The prefetched collectives overlap the layer's compute, but not for free: an NCCL collective is a kernel
with one CTA per channel, resident on its SM for the whole call (it spins on its peers' flags), so the
compute that overlaps it runs on the remaining SMs (`nccl_sm_share`, `overlapped_layer_seconds`).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rapidllm.engine.comm_cost import CommCost
from rapidllm.memory.model import layer_kinds
from rapidllm.ops import workload as wl
from rapidllm.ops.operators import GEMM
from rapidllm.spec.case import Case

DS_REDUCE_BUCKET = 5e8        # DeepSpeed reduce_bucket_size default, elements
# NCCL collective channels (one CTA each) of a communicator on 8-GPU NVSwitch nodes with a NIC per GPU: 24
# within a node, 16 across nodes. NCCL's ring search (src/graph/search.cc, ncclTopoCompute) takes one
# channel per NIC across nodes (8, not duplicated: ncclTopoDupChannels skips per-channel bandwidths under
# 50 GB/s on sm > 80) and 6 NVLink channels within a node (duplicated to 12); connect.cc (ncclTopoPostset)
# doubles both. The NCCL INIT lines of 8 x H100 (p5.48xlarge) read "24 coll channels" on one node and "16
# coll channels" on two (aws-samples awsome-distributed-training, nccl-tests expected results).
NCCL_NODE_CHANNELS = 24
NCCL_MULTINODE_CHANNELS = 16


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


def nccl_sm_share(case: Case, cost: CommCost) -> float:
    """Fraction of a GPU's SMs the data-parallel collectives hold while they run: their channels (one
    resident CTA each, NCCL_NODE_CHANNELS inside an NVLink node, NCCL_MULTINODE_CHANNELS across nodes) over
    the device's SMs. A GEMM CTA needs most of an SM's registers and shared memory, so it does not share
    an SM with an NCCL CTA: overlapped compute proceeds on the rest."""
    spans_nodes = any(d > 0 for d in cost.dims("dp"))
    channels = NCCL_MULTINODE_CHANNELS if spans_nodes else NCCL_NODE_CHANNELS
    return min(channels / case.hardware.sm_count, 1.0)


def overlapped_layer_seconds(span: np.ndarray | float, compute: np.ndarray | float, comm: np.ndarray | float,
                             share: float) -> np.ndarray | float:
    """Seconds of a layer whose `compute` (inside a replayed `span`) overlaps `comm` seconds of collectives
    started with it that hold `share` of the SMs: while they run the compute progresses at 1 - share, so it
    is delayed by share x (the time it spends beside them, at most comm), and the layer ends no earlier
    than the collectives: max(comm, span + share x min(comm, compute / (1 - share))). Exact when the
    layer's compute runs first beside them and the rest of its span (exposed TP collectives) after; an
    upper bound otherwise. share 0 gives max(comm, span)."""
    beside = np.minimum(comm, np.asarray(compute) / max(1.0 - share, 1e-3))
    slowed = span + share * beside
    return np.where(comm > slowed, comm, slowed)

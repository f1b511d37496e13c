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
# NCCL collective channels (one CTA each) of a communicator on NVSwitch nodes with a NIC per GPU. Within a
# node 24: NCCL's ring search (src/graph/search.cc, ncclTopoCompute) finds 6 NVLink channels, which
# ncclTopoDupChannels duplicates to 12 and connect.cc (ncclTopoPostset) doubles. Across nodes the search
# finds one channel per NIC that the communicator's GPUs on a node bring; ncclTopoDupChannels duplicates them
# when a channel runs at 25 GB/s or more, except on sm > 80 below 50 GB/s with more than 4 channels; then
# connect.cc doubles them (at most MAXCHANNELS, 32). A channel's speed is the step of NCCL's inter-node speed
# array at or below the NIC's bandwidth: 24 GB/s on HDR (no duplication), 48 on NDR, and on sm_100 80 or more
# from an 80 GB/s NIC. So 8 GPUs of a DGX node in the group give 16 (HDR or NDR), 1 gives 2 (HDR) or 4 (NDR on
# Hopper). The NCCL INIT lines of 8 x H100 (p5.48xlarge) read "24 coll channels" on one node and "16 coll
# channels" on two (aws-samples awsome-distributed-training, nccl-tests expected results).
NCCL_NODE_CHANNELS = 24
NCCL_MAX_CHANNELS = 32
NCCL_DUP_NIC = 30e9           # NIC bytes/s from which a channel's speed step is >= 25 GB/s (30; 24 below it;
                              # sm_80's array also has a 28 step, which NICs of 28-30 GB/s would reach)
NCCL_FAST_NIC = 80e9          # NIC bytes/s from which an sm_100 channel runs at >= 50 GB/s (sm_80/90 stop at 48)


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


def nccl_channels(case: Case, cost: CommCost) -> int:
    """Collective channels of the data-parallel communicator: NCCL_NODE_CHANNELS when it stays inside a node
    (the network's first dimension), else as NCCL's search, duplication and connect steps give them from
    the NICs its GPUs bring to a node (one per GPU: fewer than the node's when tp, cp or ep ranks fill it)
    and the NICs' bandwidth (the constants above)."""
    dims = cost.dims("dp")
    if not any(d > 0 for d in dims):
        return NCCL_NODE_CHANNELS
    net = case.network
    group, node = cost.groups("dp", 0)[0], net.dimensions[0].size
    nics = sum(r // node == group[0] // node for r in group)
    nic_bw = min(net.dimensions[d].link_bandwidth for d in dims if d > 0)
    cc = float(case.hardware.compute_capability or 9.0)          # unknown: as Hopper
    dup = nic_bw >= NCCL_DUP_NIC and (cc <= 8.0 or nics <= 4 or (cc >= 10.0 and nic_bw >= NCCL_FAST_NIC))
    return min(2 * nics * (2 if dup else 1), NCCL_MAX_CHANNELS)


def nccl_sm_share(case: Case, cost: CommCost) -> float:
    """Fraction of a GPU's SMs the data-parallel collectives hold while they run: their channels (one
    resident CTA each, `nccl_channels`) over the device's SMs. A GEMM CTA needs most of an SM's registers
    and shared memory, so it does not share an SM with an NCCL CTA: overlapped compute proceeds on the rest."""
    return min(nccl_channels(case, cost) / case.hardware.sm_count, 1.0)


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

"""DeepSpeed's PipelineEngine as Megatron-DeepSpeed runs it (`framework: deepspeed`; docs/deepspeed.md).

What differs from Megatron-LM's own 1F1B schedule, each from DeepSpeed's source (v0.5.4-v0.6.x; line
numbers of v0.5.8):
- Sends and receives are separate blocking `dist.send` / `dist.recv` calls (runtime/pipe/p2p.py L48-86), in
  TrainSchedule's order (pipe/schedule.py L205-219): before a forward the stage receives the activation and
  then sends the gradient of its previous backward; before a backward it sends the activation of its
  previous forward and then receives the gradient. Megatron batches the pair into one
  `batch_isend_irecv`; here the second transfer waits for the first (`PipelineInputs.p2p_serial`).
- With tp > 1 the activation and its gradient go as a `PartitionedTensor` over the TP group (pipe/engine.py
  L131-132, L634-654, L952-989): each rank sends a small LongTensor of partition metadata (`to_meta`,
  runtime/utils.py L733-748) and then its 1/tp slice, two blocking sends; the receiver all-gathers the
  slices (`full`, utils.py L703-731: the same bytes as Megatron's scatter/gather, composer.p2p_gather_bytes).
- The stage's own output is dropped after the forward send and all-gathered again from its slices before
  the backward (pipe/engine.py L703-711, every stage but the last): one TP all-gather per backward that
  Megatron does not run (`backward_regather_seconds`).
- Gradients are reduced after the pipeline flush in buckets of 5e8 elements (`MEMORY_OPT_ALLREDUCE_SIZE`,
  runtime/engine.py L73; ZeRO-1: `reduce_bucket_size`, zero/constants.py L68): `BUCKET_ELEMENTS`. ZeRO-1
  reduces each bucket with one `dist.reduce` per owning rank (zero/stage2.py L945), priced as the
  reduce-scatter they add up to.
"""
from __future__ import annotations

from rapidllm.engine.comm_cost import CommCost
from rapidllm.spec.case import Case

BUCKET_ELEMENTS = 5e8          # MEMORY_OPT_ALLREDUCE_SIZE = ZeRO's reduce_bucket_size default
HIDDEN_DIMS = 3                # the hidden states a stage sends: [seq, micro-batch, hidden]


def runs_pipeline_engine(case: Case) -> bool:
    return case.framework == "deepspeed"


def meta_bytes(tp: int) -> float:
    """Bytes of `PartitionedTensor.to_meta`: int64 [ndim, *shape, num_parts, rank, *partition (tp + 1)]."""
    return 8.0 * (1 + HIDDEN_DIMS + 2 + tp + 1)


def meta_send_seconds(case: Case, cost: CommCost, stage: int) -> float:
    """The metadata send that precedes every partitioned pipeline send (tp > 1), else 0."""
    tp = case.parallelism.tp
    return cost.time("pp", "send_recv", meta_bytes(tp), stage) if tp > 1 else 0.0


def backward_regather_seconds(case: Case, cost: CommCost, gather_bytes: float, stage: int) -> float:
    """The TP all-gather that restores a stage's partitioned output before its backward (not the last stage)."""
    if case.parallelism.tp <= 1 or stage == case.parallelism.pp - 1 or not gather_bytes:
        return 0.0
    return cost.time("tp", "all_gather", gather_bytes, stage)

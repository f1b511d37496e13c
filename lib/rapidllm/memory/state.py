"""Persistent per-rank state: weights, gradients and optimizer state of one pipeline stage.

Parameters are placed the Megatron way: transformer layers split over pipeline stages, the token
embedding on the first stage, final norm and LM head on the last (a tied head keeps its own copy of the
embedding there when pp > 1), everything divided by TP except the routed experts, which are divided by
EP x ETP (expert tensor parallelism) and replicated over the expert-data-parallel group. Mixed-precision Adam
(Rajbhandari et al. 2020) keeps half-precision weights (2 B) and gradients (2 B, or a 4 B fp32
accumulation buffer), fp32 master weights (4 B) and two fp32 moments (8 B), or 2 + 4 B under `optimizer_state:
bf16` (Apex DistributedFusedAdam dtype bf16, Megatron-Core's precision-aware optimizer). ZeRO-1 shards the optimizer
state over the data-parallel group, ZeRO-2 (FSDP shard_grad_op) also the gradients, ZeRO-3 (FSDP
full_shard) also the weights. `Conventions` records where a framework departs from that (e.g. nanotron
keeps full fp32 master weights under ZeRO-1); they are per framework, never per case.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from rapidllm.ops.params import attention_params, mlp_params, mtp_params, norm_params, replicated_attention_params
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES
from rapidllm.spec.model import ModelSpec


@dataclass(frozen=True)
class Conventions:
    """Framework conventions the memory model follows (defaults: the ZeRO paper / Megatron-LM)."""
    master_shard_stage: int = 1        # ZeRO stage from which fp32 master weights are sharded
    ddp_half_grads: bool = False       # DDP keeps half-precision grads beside the fp32 accumulator (zero 0)
    zero_step_bytes: float = 6.0       # step buffers per sharded parameter (fp32 grad shard + half gather)
    step_hidden_bytes: float = 0.0     # bytes x micro_batch x seq x hidden alive in the optimizer phase
    runtime_allocated: float = 0.0     # allocator-visible runtime buffers (workspaces), bytes
    dropout: bool = False              # dropout masks stored for backward (Korthikanti et al. count them)
    fused_loss: bool = False           # fused cross entropy: keeps bf16 logits, gradient written in place
    loss_fp32_copies: int = 0          # extra fp32 vocab-sized copies alive in the loss's forward (upcast logits)
    loss_grad_in_place: bool = False   # the loss's backward writes the gradient into its saved probabilities
    sp_keep_gathered: bool = False     # SP: backward keeps the all-gathered GEMM input (no re-gather)
    unfused_glu: bool = False          # act(gate) * up as separate autograd ops: act(gate) saved too
    kv_copy: bool = False              # MHA keeps a separate [K, V] copy beside the QKV tensor
    sp_gather_buffers: int = 0         # hidden-sized SP all-gather buffers kept for the whole run (tp > 1)
    stage_layers: tuple[int, ...] | None = None   # layers per pipeline stage; None = even split
    process_groups: tuple[str, ...] = ()          # NCCL groups a rank runs collectives on (memory/communicators.py)
    communicator_bytes: tuple[float, float] = (0.0, 0.0)   # NCCL device bytes of a 2-rank / larger communicator


ZERO_PAPER = Conventions()
# Conventions a case selects with its `framework` key. llm-foundry trains with flash-attn's fused
# (in-place) cross entropy (loss_fn: fused_crossentropy in its MPT pretrain YAMLs).
# nanotron (accumulate_grad_in_fp32, ZeroDistributedOptimizer; evidence in validate/memory.py and docs/memory.md):
# fp32 master weights in the gradient accumulator for every parameter (only ZeRO-3, which nanotron lacks,
# would shard them), bf16 DDP grads beside it, one fp32 vocab-sized copy in the loss's forward and its
# gradient written into the saved softmax, its unfused SwiGLU, MHA K/V copy (memory/liveness.py) and two
# persistent SP all-gather buffers (`MemoryBuffer`), and its cost-balanced pipeline split (`conventions`);
# sources in docs/comm-overlap.md ("nanotron OOM classification"). Its rank holds NCCL communicators for
# torch's default group (the barriers of parallel/context.py's group set-up), its own world group (barriers,
# all_gather_object), tp, dp, pp (parameter count) and mp (gradient-norm clipping) groups, one per pipeline
# neighbour and the tied embedding's first/last-stage group (trainer.py, clip_grads.py, tied_parameters.py;
# groups over the same ranks are one, memory/communicators.py), each priced at the A100 measurement memory/communicators.py cites (docs/memory.md). The three step-phase
# constants are the ones validate/memory.py fits on the declared calibration rows of the nanotron H100 sweep
# (every 4th Success row per family), frozen here so a case with `framework: nanotron` gets the validated
# numbers; tests/test_usability.py refits and compares.
NANOTRON = Conventions(master_shard_stage=3, ddp_half_grads=True, loss_fp32_copies=1, loss_grad_in_place=True,
                       unfused_glu=True, kv_copy=True, sp_gather_buffers=2,
                       process_groups=("default", "world", "tp", "dp", "pp", "pp_p2p", "mp", "tied_embedding"),
                       communicator_bytes=(544 * 2**20, 688 * 2**20),
                       zero_step_bytes=6.050759395974681, step_hidden_bytes=4.017121051172019,
                       runtime_allocated=70553281.27234423)
# DeepSpeed's ZeRO-1 keeps the ZeRO paper's state (it is that paper's implementation; docs/deepspeed.md).
FRAMEWORKS = {"megatron": ZERO_PAPER, "llm-foundry": Conventions(fused_loss=True), "tensorrt-llm": ZERO_PAPER,
              "nanotron": NANOTRON, "deepspeed": ZERO_PAPER}


def nanotron_stage_layers(m: ModelSpec, pp: int, close_on_tie: bool = False) -> tuple[int, ...]:
    """nanotron's pipeline split (src/nanotron/models/base.py `build_model`, llama.py
    `get_block_compute_costs`): a decoder block costs 4·heads·d_qkv·h + 3·ffn·h whatever the KV-head count,
    the LM head vocab·h, every other block 0; a block goes to the current rank, which is closed once the
    cumulative cost *exceeds* `total * ((rank + 1) / pp)`. When a rank's share ends exactly on a block
    boundary (the 1.34B sweep model: its head costs exactly four decoder blocks) the next block still goes to
    that rank; `close_on_tie` closes it there instead (the split some of the sweep's runs report: rank 0's
    `Local Params`, validate/memory.py)."""
    d = m.hidden // m.heads
    layer_cost = 4 * m.heads * d * m.hidden + 3 * m.ffn * m.hidden
    costs = np.cumsum([layer_cost] * m.layers + [m.vocab * m.hidden])
    counts, rank = [0] * pp, 0
    for i in range(m.layers):
        counts[rank] += 1
        share = costs[-1] * ((rank + 1) / pp)
        if rank < pp - 1 and (costs[i] > share or (close_on_tie and costs[i] == share)):
            rank += 1
    return tuple(counts)


def conventions(case: Case) -> Conventions:
    """The memory conventions of a case's `framework` (nanotron's with its own pipeline split)."""
    conv = FRAMEWORKS[case.framework]
    if case.framework == "nanotron":
        conv = replace(conv, stage_layers=nanotron_stage_layers(case.model, case.parallelism.pp))
    return conv


@dataclass(frozen=True)
class StageParams:
    """Parameters one rank of a pipeline stage holds after TP/PP/EP partitioning (before ZeRO)."""
    dense: float        # replicated across the data-parallel group
    experts: float      # routed experts, replicated over the edp = dp*cp*tp/(ep*etp) ranks
    layers: int

    @property
    def total(self) -> float:
        return self.dense + self.experts


@dataclass(frozen=True)
class StateBytes:
    weights: float
    gradients: float
    optimizer: float
    step_transient: float     # extra bytes alive only during the optimizer step
    gathered_layer: float     # ZeRO-3/FSDP: one layer's full weights materialized transiently


def stage_layer_counts(case: Case, conv: Conventions = ZERO_PAPER) -> tuple[int, ...]:
    """Transformer layers per pipeline stage: the framework's split if it has its own, else the case's
    (`Parallelism.stage_layers`: even as possible, earlier chunks take any remainder)."""
    m, pp = case.model, case.parallelism.pp
    if conv.stage_layers is not None:
        assert len(conv.stage_layers) == pp and sum(conv.stage_layers) == m.layers
        return conv.stage_layers
    return case.parallelism.stage_layers(m.layers)


def layer_params(model: ModelSpec, tp: int, expert_shards: int) -> tuple[float, float]:
    """(dense, routed-expert) parameters of one average transformer layer on one rank: dense split over
    tp, routed experts over expert_shards = ep x etp."""
    replicated = replicated_attention_params(model)        # MLA latents: whole on every TP rank
    dense = (attention_params(model) - replicated) / tp + replicated + model.norms_per_layer * norm_params(model)
    experts = 0.0
    if model.moe:
        moe, frac = model.moe, model.moe_layer_count() / model.layers
        shared_ffn = moe.shared_expert_ffn or moe.expert_ffn
        dense += frac * (moe.shared_experts * mlp_params(model, shared_ffn) / tp + model.hidden * moe.experts)
        dense += (1 - frac) * mlp_params(model, model.ffn) / tp
        experts = frac * moe.experts * mlp_params(model, moe.expert_ffn) / expert_shards
    else:
        dense += mlp_params(model, model.ffn) / tp
    return dense, experts


def stage_params(case: Case, stage: int, conv: Conventions = ZERO_PAPER) -> StageParams:
    """Parameters of one rank of `stage` (embedding first, head last, tied head duplicated when pp > 1;
    routed experts with their redundant replicas, `Case.expert_replication`)."""
    m, p = case.model, case.parallelism
    layers = stage_layer_counts(case, conv)[stage]
    dense_l, expert_l = layer_params(m, p.tp, p.expert_tp * p.ep)
    embed, head = stage_embedding_head(case, stage)
    dense = layers * dense_l + embed
    if stage == p.pp - 1:
        dense += norm_params(m)
    dense += head
    experts = layers * expert_l
    if stage == p.pp - 1 and m.mtp_depth:             # DeepSeek-V3 keeps its MTP module on the last stage
        mtp_dense, mtp_experts = mtp_params(m)
        dense += mtp_dense / p.tp
        experts += mtp_experts / (p.expert_tp * p.ep)
    return StageParams(dense=dense, experts=experts * case.expert_replication, layers=layers)


def stage_embedding_head(case: Case, stage: int) -> tuple[float, float]:
    """(token embedding, output head) parameters of one rank of `stage`: the embedding on the first stage,
    the head on the last (a tied head again when pp > 1), 0 elsewhere; the weights serving keeps at
    `Case.embedding_precision`."""
    m, p = case.model, case.parallelism
    embed = m.vocab * m.hidden / p.tp + (m.max_seq_len * m.hidden if m.position == "learned" else 0)
    head = stage == p.pp - 1 and (not m.tied_embeddings or p.pp > 1)
    return (embed if stage == 0 else 0.0), (m.vocab * m.hidden / p.tp if head else 0.0)


def all_stage_params(case: Case, conv: Conventions = ZERO_PAPER) -> list[StageParams]:
    """`stage_params` of every stage, once per distinct stage kind: its layer count, whether it holds the
    embedding (first) and the head (last); the middle stages of a deep pipeline are alike."""
    seen: dict[tuple[int, bool, bool], StageParams] = {}
    out = []
    counts, pp = stage_layer_counts(case, conv), case.parallelism.pp
    for s in range(pp):
        key = (counts[s], s == 0, s == pp - 1)
        if key not in seen:
            seen[key] = stage_params(case, s, conv)
        out.append(seen[key])
    return out


def zero_stage(case: Case) -> int:
    """Effective ZeRO stage: FSDP full_shard is 3, shard_grad_op is 2."""
    p = case.parallelism
    return 3 if p.fsdp == "full_shard" else 2 if p.fsdp == "shard_grad_op" else p.zero


def state_bytes(case: Case, stage: int = 0, conv: Conventions = ZERO_PAPER) -> StateBytes:
    """Weights, gradients, optimizer state and step/gather transients of one rank of `stage`."""
    p = case.parallelism
    sp = stage_params(case, stage, conv)
    z = zero_stage(case)
    wb = float(DTYPE_BYTES[case.weight_precision])
    half = wb if wb < 4 else 0.0
    dp_dense = p.dp * p.cp
    dp_expert = p.edp

    def sharded(nbytes: float, from_stage: int) -> float:
        if z < from_stage:
            return nbytes * sp.total
        return nbytes * (sp.dense / dp_dense + sp.experts / dp_expert)

    weights = sharded(wb, 3)
    state = p.optimizer_state_bytes          # one master weight or one Adam moment (`optimizer_state`)
    if wb >= 4:                     # fp32 training: no master copy, 4 B grads, two moments
        grads, optim = sharded(4.0, 2), sharded(2 * state, 1)
    else:
        gb = 4.0 if p.fp32_grad_accum else wb
        grads = sharded(gb, 2)
        if p.fp32_grad_accum and conv.ddp_half_grads and z == 0 and dp_dense > 1:
            grads += half * sp.total
        optim = sharded(state, max(conv.master_shard_stage, 1)) + sharded(2 * state, 1)
    step = conv.zero_step_bytes * (sp.dense / dp_dense + sp.experts / dp_expert) if z >= 1 else 0.0
    gathered = 0.0
    if z >= 3 and sp.layers:
        per_layer = sp.total / sp.layers
        gathered = 2 * per_layer * wb * (1 - 1 / dp_dense)   # current layer + prefetched next one
    return StateBytes(weights, grads, optim, step, gathered)

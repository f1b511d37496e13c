"""Liveness-based per-rank memory of a case: `memory_for_case(case) -> MemoryResult`.

Training: persistent state of each pipeline stage (memory/state.py), plus a walk over the stage's
schedule (GPipe, 1F1B, interleaved 1F1B) in which every forward of a micro-batch adds the activations
the layer walk says backward needs (memory/liveness.py, over the operator model's own lists) and every
backward frees them; the transient working set of the running forward/backward, ZeRO-3/FSDP layer
gathers and allocator-visible runtime buffers sit on top. Inference: weights, the KV cache after the last
generated token (GQA: KV heads per TP rank; MLA: the compressed latent plus the rope key) of the sequences
held (a serving engine's admission over every stage: memory/kv_pool.py) and the largest prefill working set. The framework overhead outside the allocator is hw.framework_memory (one constant
per device, documented in config/hardware), plus the NCCL communicators a framework's conventions name beyond
the one it budgets (memory/communicators.py). The reported stage is the one with the highest peak.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from rapidllm.caches import current
from rapidllm.jit import njit
from rapidllm.memory.closed_form import MemoryResult
from rapidllm.memory.communicators import communicator_memory
from rapidllm.memory.kv_pool import admit, reserved_tokens
from rapidllm.memory.liveness import LayerLiveness, forward_working_set, layer_liveness
from rapidllm.memory.state import (
    ZERO_PAPER,
    Conventions,
    StateBytes,
    stage_embedding_head,
    stage_layer_counts,
    stage_params,
    state_bytes,
)
from rapidllm.memory.state import conventions as framework_conventions
from rapidllm.ops import workload as wl
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES
from rapidllm.spec.layout import InferenceWorkload, TrainingWorkload
from rapidllm.spec.schedule import action_order, schedule_code


def layer_kinds(case: Case) -> list[tuple[bool, float]]:
    """(is_moe, fraction of layers) for the layer kinds of the model."""
    m = case.model
    if not m.moe:
        return [(False, 1.0)]
    frac = m.moe_layer_count() / m.layers
    return [(k, f) for k, f in ((False, 1 - frac), (True, frac)) if f > 0]


def training_liveness(case: Case, conv: Conventions = ZERO_PAPER) -> tuple[LayerLiveness, LayerLiveness]:
    """(average transformer layer, LM head) liveness for one micro-batch on one rank."""
    p, flash = case.parallelism, case.attention_impl != "naive"
    shard = wl.training_shard(case)
    stored = fwd = bwd = inp = 0.0
    for is_moe, frac in layer_kinds(case):
        lv = layer_liveness(wl.layer_forward(case.model, shard, is_moe), flash, p.recompute, conv.dropout,
                            conv.sp_keep_gathered and p.sp, p.recompute_modules, case.precision == "fp8",
                            conv.unfused_glu, conv.kv_copy)
        stored += frac * lv.stored
        inp += frac * lv.input_bytes
        fwd, bwd = max(fwd, lv.forward_peak), max(bwd, lv.backward_peak)
    head = layer_liveness(wl.head_forward(case.model, shard), flash, "none", False,
                          loss_grad_in_place=conv.loss_grad_in_place)
    logits_bf16 = 2.0 * shard.tokens * case.model.vocab / p.tp
    if conv.fused_loss:
        grad_h = 2.0 * shard.tokens * case.model.hidden
        head = LayerLiveness(head.stored - logits_bf16, 0.0, grad_h, head.input_bytes)
    if conv.loss_fp32_copies:
        logits = 4.0 * shard.tokens * case.model.vocab / p.tp * conv.loss_fp32_copies
        head = LayerLiveness(head.stored, head.forward_peak + logits, head.backward_peak, head.input_bytes)
    return LayerLiveness(stored, fwd, bwd, inp), head


def shared_training_liveness(case: Case, conv: Conventions) -> tuple[LayerLiveness, LayerLiveness]:
    """`training_liveness` memoized in `Caches.liveness` under every input it reads (the model, the layer
    shard, the attention kernel, the recompute settings, sp, FP8 saved inputs and the conventions): a sweep's
    layouts that differ only in dp or pp share it."""
    p = case.parallelism
    key = (case.model, wl.training_shard(case), case.attention_impl != "naive", p.recompute, p.recompute_modules,
           p.sp, case.precision == "fp8", conv)
    table = current().liveness
    hit = table.get(key)
    return hit if hit is not None else table.put(key, training_liveness(case, conv))


@dataclass(frozen=True)
class WalkInputs:
    """What the activation walk of one stage needs: bytes each forward stores per model chunk, the head's
    extra bytes (last stage), and the transient peaks of a forward and a backward on top of what is held."""
    last: bool
    chunks: int
    per_chunk: float
    head_stored: float
    fwd_extra: float
    bwd_extra: float


def walk_inputs(case: Case, stage: int, layer: LayerLiveness, head: LayerLiveness, layers: int) -> WalkInputs:
    """The per-chunk quantities of `stage`: what `_walk_peak` walks (and its Python reference in tests/)."""
    p = case.parallelism
    last = stage == p.pp - 1
    v = p.chunks_per_stage
    chunk_layers = layers / v
    per_chunk = chunk_layers * (layer.input_bytes if p.recompute == "full" else layer.stored)
    return WalkInputs(last, v, per_chunk, head.stored if last else 0.0,
                      max(layer.forward_peak, head.forward_peak if last else 0.0),
                      max(layer.backward_peak, head.backward_peak if last else 0.0))


@njit(cache=True, work=lambda code, pp, stage, m, v, *rest: 2 * m * v)
def _walk_peak(code: int, pp: int, stage: int, m: int, v: int, last: bool, per_chunk: float,
               head_stored: float, fwd_extra: float, bwd_extra: float) -> float:
    """`activation_peak_reference`'s loop over the stage's schedule (`spec.schedule.action_order`); `max` is
    spelled as "replace only when strictly greater", as Python's builtin does."""
    direction, index = action_order(code, pp, stage, m, v)
    held = 0.0
    peak = 0.0
    for k in range(len(direction)):
        i = index[k]
        extra = head_stored if (last and (i % v == v - 1)) else 0.0
        if direction[k] == 0:
            cand = held + fwd_extra
            if cand > peak:
                peak = cand
            held += per_chunk + extra
        else:
            cand = held + bwd_extra
            if cand > peak:
                peak = cand
            held -= per_chunk + extra
    if held > peak:
        peak = held
    return peak


@njit(cache=True, work=lambda code, pp, m, v, stages, *rest: 2 * m * v * len(stages))
def _stage_peaks(code: int, pp: int, m: int, v: int, stages: np.ndarray, kinds: np.ndarray, last: np.ndarray,
                 per_chunk: np.ndarray, head_stored: np.ndarray, fwd_extra: np.ndarray, bwd_extra: np.ndarray,
                 gathered: np.ndarray, persistent: np.ndarray, step: np.ndarray, runtime: float,
                 buffers: float, framework: np.ndarray) -> tuple[int, float]:
    """Position in `stages` of the first stage with the highest peak, and its activation bytes. Stage
    `stages[q]` is of kind `kinds[q]` (the per-kind arrays: `walk_inputs`, the state's gathered layer,
    persistent bytes, optimizer-step transient and memory outside the allocator; `buffers`: activation-phase
    buffers alike on every stage, such as nanotron's SP gather buffers). Activations and peak are
    `MemoryResult`'s own sums in its order (`max` as Python's builtin decides), so the chosen stage and its
    bytes are the ones a `MemoryResult` per stage and `max(..., key=peak)` give."""
    best, best_peak, best_acts = 0, 0.0, 0.0
    for q in range(len(stages)):
        k = kinds[q]
        acts = _walk_peak(code, pp, stages[q], m, v, last[k], per_chunk[k], head_stored[k], fwd_extra[k],
                          bwd_extra[k]) + gathered[k] + runtime + buffers
        top = step[k] if step[k] > acts else acts
        peak = persistent[k] + top + framework[k]
        if q == 0 or peak > best_peak:
            best, best_peak, best_acts = q, peak, acts
    return best, best_acts


@functools.lru_cache(maxsize=1024)
def _stage_kinds(counts: tuple[int, ...], stages: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """For `stages` of a pipeline whose stages hold `counts` layers: the stages as an array, the index of
    each one's kind (layer count, first, last) in order of first appearance, and the first stage of each
    kind. Read-only arrays, shared by every case of one split."""
    kinds: dict[tuple[int, bool, bool], int] = {}
    of_stage = [kinds.setdefault((counts[s], s == 0, s == len(counts) - 1), len(kinds)) for s in stages]
    first = tuple(stages[of_stage.index(k)] for k in range(len(kinds)))
    arrays = np.array(stages, dtype=np.int64), np.array(of_stage, dtype=np.int64)
    for a in arrays:
        a.flags.writeable = False
    return (*arrays, first)


def shared_state_bytes(case: Case, conv: Conventions, counts: tuple[int, ...],
                       stages: tuple[int, ...]) -> list[StateBytes]:
    """`state_bytes(case, s, conv)` of each of `stages`, memoized in `Caches.stage_states` under everything
    `memory.state.stage_params` and `state_bytes` read: the model, the conventions, the stored weights'
    type, the expert replication, the layer split (`counts`), the stages and the parallel sizes and
    sharding settings; not recompute or the workload, so the cases of one layout that differ in those
    (sweep-1000: 4 per layout and model) share it."""
    p = case.parallelism
    key = (case.model, conv, case.weight_precision, case.expert_replication, counts, stages, p.dp, p.cp, p.tp,
           p.pp, p.ep, p.expert_tp, p.zero, p.fsdp, p.fp32_grad_accum, p.optimizer_state)
    table = current().stage_states
    hit = table.get(key)
    if hit is None:
        hit = table.put(key, [state_bytes(case, s, conv) for s in stages])
    return hit


def _training_memory(case: Case, stages: list[int], conv: Conventions, layer: LayerLiveness,
                     head: LayerLiveness, state: StateBytes | None) -> MemoryResult:
    """Memory of the stage of `stages` with the highest peak. State bytes and walk inputs are computed once
    per stage kind (the middle stages of a deep pipeline hold the same state; `state`: that of
    `stages[0]` when the caller has it), and every stage's schedule walk runs in one kernel call."""
    hw, p, w = case.hardware, case.parallelism, case.workload
    assert isinstance(w, TrainingWorkload)
    counts = stage_layer_counts(case, conv)
    stage_arr, of_stage, first = _stage_kinds(counts, tuple(stages))
    states = shared_state_bytes(case, conv, counts, first) if state is None else \
        [state, *(state_bytes(case, s, conv) for s in first[1:])]
    walks = [walk_inputs(case, s, layer, head, counts[s]) for s in first]
    hidden = conv.step_hidden_bytes * w.micro_batch * w.seq_len * case.model.hidden
    steps = [st.step_transient + conv.runtime_allocated + hidden for st in states]
    outside = [hw.framework_memory + communicator_memory(case, s, conv.process_groups, conv.communicator_bytes)
               for s in first]                                    # memory outside the caching allocator
    col = lambda values: np.array(values, dtype=np.float64)       # noqa: E731
    v = p.chunks_per_stage
    gather = (conv.sp_gather_buffers * DTYPE_BYTES[case.activation_precision] * w.micro_batch * w.seq_len
              * case.model.hidden if p.tp > 1 and p.sp else 0.0)      # persistent SP all-gather buffers
    q, acts = _stage_peaks(schedule_code(p.schedule, p.pp, v), p.pp, max(w.microbatches(p.dp), 1), v,
                           stage_arr, of_stage,
                           np.array([x.last for x in walks]), col([x.per_chunk for x in walks]),
                           col([x.head_stored for x in walks]), col([x.fwd_extra for x in walks]),
                           col([x.bwd_extra for x in walks]), col([st.gathered_layer for st in states]),
                           col([st.weights + st.gradients + st.optimizer + 0.0 for st in states]), col(steps),
                           float(conv.runtime_allocated), float(gather), col(outside))
    k = int(of_stage[q])
    st = states[k]
    return MemoryResult(st.weights, st.gradients, st.optimizer, float(acts), 0.0, outside[k],
                        hw.hbm_capacity, step_transient=steps[k], stage=stages[q])


def kv_cache_per_token(case: Case) -> float:
    """KV-cache bytes per token per layer on one TP rank (GQA/MQA: KV heads; MLA: latent + rope key), at the
    cache's element type (`Case.kv_precision`: 1 B under `kv_cache_precision: fp8`; the per-tensor scales,
    one per layer, are not counted)."""
    m, p = case.model, case.parallelism
    if m.attention == "mla" and m.mla:
        width = m.mla.kv_lora_rank + m.mla.qk_rope_head_dim
    else:
        width = 2 * max(m.kv_heads // p.tp, 1) * m.head_dim
    return width * DTYPE_BYTES[case.kv_precision]


def _head_working_set(ops: list) -> float:
    """The head's forward working set in inference, the main head and each MTP module (`mtp{k}_...`) apart:
    a module hands the next only its hidden state, so its layer's tensors are freed before the next runs
    (one walk over them all would also hold the main head's hidden state through every module)."""
    groups: dict[str, list] = {}
    for o in ops:
        groups.setdefault(o.name.split("_", 1)[0] if o.name.startswith("mtp") else "", []).append(o)
    return max(forward_working_set(g) for g in groups.values())


def _inference_stage(case: Case, stage: int, conv: Conventions) -> tuple[float, float, float]:
    """(weights, activations, KV-cache bytes per held token of one sequence) of an inference stage."""
    m, p, w = case.model, case.parallelism, case.workload
    assert isinstance(w, InferenceWorkload)
    sp = stage_params(case, stage, conv)
    wb, eb = DTYPE_BYTES[case.weight_precision], DTYPE_BYTES[case.embedding_precision]
    weights = sp.total * wb + sum(stage_embedding_head(case, stage)) * (eb - wb)   # FP4: BF16 embedding, head
    shard = wl.prefill_shard(case)
    work = max(forward_working_set(wl.layer_forward(m, shard, is_moe)) for is_moe, _ in layer_kinds(case))
    if stage == p.pp - 1:
        work = max(work, _head_working_set(wl.head_forward(m, shard)))
    return weights, work + conv.runtime_allocated, kv_cache_per_token(case) * sp.layers


def _inference_memory(case: Case, stages: list[int], conv: Conventions) -> MemoryResult:
    """The inference stage of `stages` with the highest peak: weights, the KV cache after the last generated
    token of the sequences held, the largest prefill working set. An encoder (causal: false) keeps no cache:
    a layer's K and V live in its forward working set only. Static batching holds its batch; a serving engine
    (concurrency > batch; steady_state, simulated or a disaggregated decode instance) the sequences it admits
    (memory/kv_pool.py), decided over every stage whichever are asked for."""
    m, hw, w = case.model, case.hardware, case.workload
    assert isinstance(w, InferenceWorkload)
    serving = w.concurrency > w.batch
    parts = {s: _inference_stage(case, s, conv) for s in (range(case.parallelism.pp) if serving else stages)}
    held, admission = max(w.batch, w.concurrency), None
    if serving:
        tokens = reserved_tokens(w.prompt_tokens, w.output_tokens)
        admission = admit(w, [(hw.hbm_capacity - weights - work - hw.framework_memory, per_token * tokens)
                              for weights, work, per_token in parts.values()])
        held = admission.sequences if admission.kv_sequences >= w.batch else w.batch
    out = []
    for s in stages:
        weights, work, per_token = parts[s]
        kv = per_token * held * (w.prompt_tokens + w.output_tokens) * m.causal
        out.append(MemoryResult(weights, 0.0, 0.0, work, kv, hw.framework_memory, hw.hbm_capacity, stage=s,
                                admission=admission, batch=w.batch))
    return max(out, key=lambda r: r.peak)


def memory_for_case(case: Case, conventions: Conventions | None = None, stage: int | None = None,
                    liveness: tuple[LayerLiveness, LayerLiveness] | None = None,
                    state: StateBytes | None = None) -> MemoryResult:
    """Per-rank memory of `stage` (default: the pipeline stage with the highest peak), under the case's
    framework conventions unless others are given. `liveness`: `training_liveness(case, conventions)` when
    the caller has it already (it depends on the layer shard only, so a search shares it across layouts);
    `state`: `state_bytes(case, stage, conventions)` of the one `stage` asked for, likewise (it depends on
    the parameters' placement only)."""
    conventions = conventions or framework_conventions(case)
    stages = range(case.parallelism.pp) if stage is None else [stage]
    assert state is None or stage is not None
    if case.training:
        layer, head = liveness or shared_training_liveness(case, conventions)
        return _training_memory(case, list(stages), conventions, layer, head, state)
    return _inference_memory(case, list(stages), conventions)

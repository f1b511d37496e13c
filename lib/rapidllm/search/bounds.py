"""Cheap lower bounds on a layout's times, from its priced operators alone (no network, no graph).

Why they are bounds (docs/search.md, "Why pruning is safe"): the engine replays each layer template with its
compute nodes in one stream, so a template's span is at least the sum of its operators' times (time per
launch x launches, the priced table's `time_s x count`); collectives, p2p sends, the optimizer step and
waits only add. Training: every stage runs its m micro-batches' forwards and backwards one after another,
so the step is at least m x (forward + backward compute) of a stage; the first task a stage runs needs that
micro-batch's forwards on every earlier model chunk (at least one chunk on each earlier stage), and its
last task is followed by that micro-batch's backwards through them, which adds their compute (the
pipeline fill and drain). Inference: TTFT is at least the prefill's compute through all layers, ITL the mean of
the first and last decode step's compute. A factor (1 - 1e-9) absorbs the different order of the float
additions. Bounds exist for training and for static-batching inference without the two-micro-batch
overlap; other cases get none.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from rapidllm.engine.metrics import model_flops_per_step, utilization
from rapidllm.graph.schedules import interleaving
from rapidllm.ops.price import case_sections, operator_times
from rapidllm.spec.case import Case, InferenceWorkload, TrainingWorkload

SLACK = 1.0 - 1e-9
KINDS = ("dense", "moe")


@dataclass(frozen=True)
class ShardWork:
    """Compute seconds per micro-batch of one rank's layer shard, by section and part: `fwd[section]`
    (forward phase) and `bwd[section]` (recompute + backward phases)."""
    fwd: dict[str, float]
    bwd: dict[str, float]


def shard_work(case: Case) -> ShardWork:
    """Sum `time per launch x launches` of the case's operators per section: forward, and recompute +
    backward. The same operators and times as `price_case`'s table (`case_sections`, `operator_times`),
    without building the table: a search bounds hundreds of shards and simulates few of them."""
    pairs = case_sections(case)
    times = operator_times(case, [o for _, o in pairs])
    fwd: dict[str, float] = defaultdict(float)
    bwd: dict[str, float] = defaultdict(float)
    for (section, op), t in zip(pairs, times.tolist()):
        if op.phase == "fwd":
            fwd[section] += t * op.count
        elif op.phase in ("bwd", "recompute"):
            bwd[section] += t * op.count
    return ShardWork(dict(fwd), dict(bwd))


def _layers_of_kind(case: Case) -> dict[str, int]:
    m = case.model
    moe = m.moe_layer_count()
    return {"dense": m.layers - moe, "moe": moe}


def stage_compute(case: Case, work: ShardWork) -> tuple[np.ndarray, np.ndarray]:
    """[pp, chunks] forward and backward compute per micro-batch of each model chunk, placed as the engine
    places them (`engine/composer.py: _chunk_times`: layers by the pipeline split, each kind in its model-wide
    share, embedding on the first chunk, LM head on the last)."""
    p, layers = case.parallelism, case.model.layers
    split = np.array(p.stage_chunk_layers(layers), dtype=float)
    per_layer_f = sum(n / layers * work.fwd.get(f"layer_{k}", 0.0) for k, n in _layers_of_kind(case).items())
    per_layer_b = sum(n / layers * work.bwd.get(f"layer_{k}", 0.0) for k, n in _layers_of_kind(case).items())
    f, b = split * per_layer_f, split * per_layer_b
    f[0, 0] += work.fwd.get("first_stage", 0.0)
    b[0, 0] += work.bwd.get("first_stage", 0.0)
    f[-1, -1] += work.fwd.get("last_stage", 0.0)
    b[-1, -1] += work.bwd.get("last_stage", 0.0)
    return f, b


def stage_profile(case: Case, work: ShardWork) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([pp] forward + backward compute per micro-batch of each stage; [pp] the same summed over the stages
    before it; [pp] the smallest chunk's forward plus the smallest chunk's backward, summed over the stages
    before it): all a training bound needs besides m and the chunks in use. Depends on the shard and the
    pipeline split only, so a search computes it once per (shard, pp, virtual stages)."""
    f, b = stage_compute(case, work)
    per_stage = (f + b).sum(axis=1)
    smallest = f.min(axis=1) + b.min(axis=1)
    before = lambda x: np.concatenate(([0.0], np.cumsum(x)[:-1]))      # noqa: E731
    return per_stage, before(per_stage), before(smallest)


def training_step_bound(case: Case, work: ShardWork,
                        profile: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> float:
    """A lower bound on the training step time (seconds): for every stage, its m micro-batches' compute in
    series, plus the fill and drain in front of and behind it. Whichever task a stage runs first, the same
    micro-batch's forward has passed every earlier model chunk, at least one chunk on each earlier stage;
    whichever it runs last, that micro-batch's backward still passes them. Without interleaving (or when
    the engine merges a stage's chunks) that is the earlier stages' whole per-micro-batch compute, with it
    their smallest chunk's."""
    p, w = case.parallelism, case.workload
    assert isinstance(w, TrainingWorkload)
    m = max(w.microbatches(p.dp), 1)
    per_stage, earlier_all, earlier_chunk = profile if profile is not None else stage_profile(case, work)
    earlier = earlier_all if interleaving(p.schedule, p.pp, p.virtual_stages, m) == 1 else earlier_chunk
    return float((earlier + m * per_stage).max()) * SLACK


def forward_compute(case: Case, work: ShardWork, prefix: str) -> float:
    """Compute of one inference forward pass through every layer and the head (all stages in turn)."""
    total = sum(n * work.fwd.get(f"{prefix}layer_{k}", 0.0) for k, n in _layers_of_kind(case).items())
    return total + work.fwd.get(f"{prefix}head", 0.0)


def optimistic_record(case: Case, work: ShardWork,
                      profile: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, Any] | None:
    """The record's time and rate columns at their bounds (times low, rates high), or None where no bound
    is derived (in-flight batching)."""
    w = case.workload
    if isinstance(w, TrainingWorkload):
        step = training_step_bound(case, work, profile)
        if step <= 0:
            return None
        return {"step_time_s": step, "tokens_per_s": w.global_batch * w.seq_len / step,
                "mfu": utilization(model_flops_per_step(case), step, case)}
    assert isinstance(w, InferenceWorkload)
    if w.concurrency > w.batch or case.parallelism.microbatch_overlap > 1:
        return None            # two overlapped micro-batches price other (half-batch) operators than `work`
    ttft = forward_compute(case, work, "prefill_") * SLACK
    itl = 0.5 * (forward_compute(case, work, "decode_first_") + forward_compute(case, work, "decode_last_")) * SLACK
    e2e = ttft + max(w.output_tokens - 1, 0) * itl       # output_tokens 0: an encoder's forward pass
    if e2e <= 0:
        return None
    return {"ttft_s": ttft, "itl_s": itl, "e2e_latency_s": e2e, "step_time_s": e2e,
            "tokens_per_s": w.rate_tokens / e2e}

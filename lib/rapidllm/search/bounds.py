"""Cheap lower bounds on a layout's times, from its priced operators alone (no network, no graph).

Why they are bounds (docs/search.md, "Why pruning is safe"): the engine replays each layer template with its
compute nodes in one stream, so a template's span is at least the sum of its operators' times (time per
launch x launches, the priced table's `time_s x count`); collectives, p2p sends, the optimizer step and
waits only add. Training: every stage runs its m micro-batches' forwards and backwards one after another,
so the step is at least m x (forward + backward compute) of a stage; the first task a stage runs needs that
micro-batch's forwards on every earlier model chunk (at least one chunk on each earlier stage), and its
last task is followed by that micro-batch's backwards through them, which adds their compute (the
pipeline fill and drain). Inference: TTFT is at least the prefill's compute through all layers, ITL the mean of
the first and last decode step's compute over the tokens a step emits (`tokens_per_step`: 1 without
speculative decoding). A factor (1 - 1e-9) absorbs the different order of the float
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
from rapidllm.spec.case import Case
from rapidllm.spec.layout import InferenceWorkload, TrainingWorkload

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


def stage_compute(case: Case, work: ShardWork, floor: tuple[float, float] = (0.0, 0.0)
                  ) -> tuple[np.ndarray, np.ndarray]:
    """[pp, chunks] forward and backward time per micro-batch of each model chunk, placed as the engine
    places them (`engine/composer.py: _chunk_times`: layers by the pipeline split, each kind in its model-wide
    share, embedding on the first chunk, LM head on the last). `floor` = (forward, backward) seconds a layer
    takes at least besides its compute (ZeRO-3 / FSDP full_shard: the next layer's parameter gather, and the
    gather plus the gradient reduce-scatter; `layer_floor`): a layer costs max(compute, floor) and a chunk
    with layers exposes one floor more, whatever its layer kinds (the chunk's first gather), as the composer
    charges at least (it adds the compute the collectives' NCCL CTAs slow, `sharding.overlapped_layer_seconds`, which only
    lengthens a layer, so this stays a lower bound)."""
    p, layers = case.parallelism, case.model.layers
    split = np.array(p.stage_chunk_layers(layers), dtype=float)
    if split.shape[1] != chunks_used(case):        # the engine runs a stage's chunks as one
        split = split.sum(axis=1, keepdims=True)
    f, b = np.zeros_like(split), np.zeros_like(split)
    for kind, n in _layers_of_kind(case).items():
        if not n:
            continue
        share = split * (n / layers)
        f += share * max(work.fwd.get(f"layer_{kind}", 0.0), floor[0])
        b += share * max(work.bwd.get(f"layer_{kind}", 0.0), floor[1])
    f += (split > 0) * floor[0]
    b += (split > 0) * floor[1]
    f[0, 0] += work.fwd.get("first_stage", 0.0)
    b[0, 0] += work.bwd.get("first_stage", 0.0)
    f[-1, -1] += work.fwd.get("last_stage", 0.0)
    b[-1, -1] += work.bwd.get("last_stage", 0.0)
    return f, b


Profile = tuple[np.ndarray, np.ndarray, np.ndarray]


def chunks_used(case: Case) -> int:
    """Model chunks per stage the engine runs: the virtual stages only where the schedule interleaves."""
    p, w = case.parallelism, case.workload
    m = max(w.microbatches(p.dp), 1) if isinstance(w, TrainingWorkload) else 1
    return interleaving(p.schedule, p.pp, p.virtual_stages, m)


def stage_profile(case: Case, work: ShardWork, floor: tuple[float, float] = (0.0, 0.0)) -> Profile:
    """([pp] forward + backward time per micro-batch of each stage; [pp] the fill before each stage: the
    forwards of the smallest chunk of every earlier stage; [pp] the backwards of those chunks; a stage run as
    one chunk is its own smallest): all a training bound needs besides m and the step's tail. Depends on the
    shard, the pipeline split in use and the floor only, so a search computes it once per (shard, pp, chunks
    used, floor) and bounds every micro-batch count from it."""
    f, b = stage_compute(case, work, floor)
    return (f + b).sum(axis=1), _before(f.min(axis=1)), _before(b.min(axis=1))


def _before(x: np.ndarray) -> np.ndarray:
    """x summed over the stages before each stage."""
    return np.concatenate(([0.0], np.cumsum(x)[:-1]))


def training_step_bound(case: Case, work: ShardWork, profile: Profile | None = None,
                        tail: np.ndarray | None = None) -> float:
    """A lower bound on the training step time (seconds): `step_bound` at the case's micro-batches per step."""
    p, w = case.parallelism, case.workload
    assert isinstance(w, TrainingWorkload)
    return step_bound(profile if profile is not None else stage_profile(case, work), max(w.microbatches(p.dp), 1),
                      tail)


def step_bound(profile: Profile, m: int, tail: np.ndarray | None = None) -> float:
    """A lower bound on the step time of m micro-batches over the stages of `profile`. Stage s: whichever
    task it runs first, the same micro-batch's forward has passed every earlier model chunk (at least one
    chunk on each earlier stage: the fill F[s]); its m micro-batches' work runs in series (m W[s]); its last
    task's micro-batch then goes backward through the stages before it, and every stage s' <= s reached that
    way still runs its `tail[s']` (`step_tail`: the last gradient bucket, the optimizer, the parameter
    gather) after it. So the step is at least max over s of F[s] + m W[s] + max over s' <= s of (backward of
    stages s'..s-1 + tail[s']). Without interleaving (or when the engine merges a stage's chunks) the earlier
    stages count whole, with it by their smallest chunk; without a tail this is the fill + work + drain bound
    (the backward before each stage, B[s]: the running maximum of -B[s] is 0, B being 0 at the first stage and
    growing)."""
    per_stage, fill, back = profile
    drain = back if tail is None else back + np.maximum.accumulate(tail - back)
    return float((fill + m * per_stage + drain).max()) * SLACK


def training_record(case: Case, step: float, flops: float | None = None) -> dict[str, Any] | None:
    """A training record's time and rate columns at a step time bound, or None where there is none.
    `flops`: `model_flops_per_step(case)` when the caller has it (it depends on the model, the global batch
    and the sequence length only); the rates depend on the case's world, hardware and precision besides."""
    if step <= 0:
        return None
    w = case.workload
    assert isinstance(w, TrainingWorkload)
    flops = model_flops_per_step(case) if flops is None else flops
    return {"step_time_s": step, "tokens_per_s": w.global_batch * w.seq_len / step,
            "mfu": utilization(flops, step, case)}


def forward_compute(case: Case, work: ShardWork, prefix: str) -> float:
    """Compute of one inference forward pass through every layer and the head (all stages in turn)."""
    total = sum(n * work.fwd.get(f"{prefix}layer_{k}", 0.0) for k, n in _layers_of_kind(case).items())
    return total + work.fwd.get(f"{prefix}head", 0.0)


def optimistic_record(case: Case, work: ShardWork, profile: Profile | None = None,
                      tail: np.ndarray | None = None) -> dict[str, Any] | None:
    """The record's time and rate columns at their bounds (times low, rates high), or None where no bound
    is derived (in-flight batching). `profile` and `tail` as `training_step_bound` takes them."""
    w = case.workload
    if isinstance(w, TrainingWorkload):
        return training_record(case, training_step_bound(case, work, profile, tail))
    assert isinstance(w, InferenceWorkload)
    if w.concurrency > w.batch or case.parallelism.microbatch_overlap > 1:
        return None            # two overlapped micro-batches price other (half-batch) operators than `work`
    ttft = forward_compute(case, work, "prefill_") * SLACK
    # a speculative decode step emits tokens_per_step tokens per sequence (engine/inference.py)
    itl = 0.5 * (forward_compute(case, work, "decode_first_") + forward_compute(case, work, "decode_last_")) \
        * SLACK / w.tokens_per_step
    e2e = ttft + max(w.output_tokens - 1, 0) * itl       # output_tokens 0: an encoder's forward pass
    if e2e <= 0:
        return None
    return {"ttft_s": ttft, "itl_s": itl, "e2e_latency_s": e2e, "step_time_s": e2e,
            "tokens_per_s": w.rate_tokens / e2e}

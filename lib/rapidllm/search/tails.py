"""The network-aware part of a training layout's bound: the layer templates' replayed spans, what every
pipeline stage must still run after its last task, and what a ZeRO-3 / FSDP full_shard layer takes besides
its compute.

The compute-only bound (search/bounds.py) misses the data-parallel traffic that dominates large clusters:
with hundreds of replicas a step ends with the last gradient bucket, the optimizer and a sharded
optimizer's parameter all-gather, one after another, and a ZeRO-3 layer waits for its parameter gather.
These terms are the very collective times the engine charges, from the same `CommCost` (one network
simulation per distinct collective, memoized in the active `Caches` and reused when the layout is then
simulated), placed where the pipeline graph (`graph/pipeline_dag.py`) puts them:
- a stage's optimizer node depends on its last task and on the last gradient bucket of its queue; every
  bucket follows a piece of a last-micro-batch backward, and the buckets queue one behind the other, so
  when the stage's last task is a backward of the last micro-batch (1F1B and interleaved 1F1B), the
  optimizer starts at least one bucket after that task ends (all buckets x chunks after it without
  overlap_grad_reduce);
- the optimizer runs for its priced time scaled by the stage's share of the parameters, and the parameter
  all-gather of a sharded optimizer (without overlap_param_gather) follows it whole;
- a ZeRO-3 layer costs at least max(its span, the gather) forward and max(span, gather + reduce-scatter)
  backward, plus one exposed gather per chunk (`engine/composer.py: _chunk_times`, which also charges the
  compute the collectives' SMs slow: `sharding.overlapped_layer_seconds`, never below this max);
- a layer's span is its template replayed with its collectives (exposed TP / CP / EP communication), which
  is what the pipeline's tasks last.
The gradient buckets and gather are `engine/composer.gradient_buckets`, the engine's own sizing; tests/test_search.py
checks the refined bound against the simulation on every feasible layout of its spaces. Only symmetric
(fault-free) networks get the refinement: with faults every stage's collectives differ.
"""
from __future__ import annotations

import functools

import numpy as np

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import (
    gradient_buckets,
    replay_all,
    sharded_layer_bytes,
    sharded_layer_params,
    stage_parameters,
)
from rapidllm.engine.sharding import layer_comm_seconds
from rapidllm.graph.schedules import interleaving, schedule_code, stage_actions_array
from rapidllm.graph.templates import ops_view, shared_case_templates
from rapidllm.ops.price import operator_times, price_table, step_sections
from rapidllm.search.bounds import ShardWork
from rapidllm.spec.case import Case
from rapidllm.spec.layout import TrainingWorkload


def refinable(case: Case) -> bool:
    """Training on a fault-free network: the only cases `step_tail` and `layer_floor` apply to."""
    return isinstance(case.workload, TrainingWorkload) and not case.network.faults


@functools.lru_cache(maxsize=4096)
def ends_with_last_backward(schedule: str, pp: int, m: int, v: int) -> bool:
    """True when every stage's last action is a backward of the last micro-batch (it then carries the last
    gradient buckets)."""
    code = schedule_code(schedule, pp, v)
    for s in range(pp):
        backward, _, micro = stage_actions_array(code, pp, s, m, v)
        if backward[-1] != 1 or micro[-1] != m - 1:
            return False
    return True


def optimizer_seconds(case: Case) -> float:
    """The priced optimizer section of one rank (time per launch x launches), before the stage scaling."""
    ops = [op for section, op in step_sections(case) if section == "optimizer"]
    times = operator_times(case, ops)
    return float(sum(t * op.count for t, op in zip(times.tolist(), ops)))


def param_gather(case: Case) -> bool:
    """True when a sharded optimizer's parameter all-gather follows the optimizer whole (ZeRO-1/2 or FSDP
    shard_grad_op over dp x cp > 1, without overlap_param_gather)."""
    p = case.parallelism
    return p.dp_cp > 1 and (p.zero in (1, 2) or p.fsdp == "shard_grad_op") and not p.overlap_param_gather


def step_tail(case: Case, cost: CommCost, gather: bool = True, optimizer_s: float | None = None) -> np.ndarray:
    """[pp] seconds each stage still runs after its last task: the last gradient bucket (or all of them
    without overlap_grad_reduce), the optimizer, and (with `gather`) a sharded optimizer's parameter
    all-gather: a whole stage's weights to every data-parallel rank, the costliest collective to simulate
    on a large cluster, so a search asks for it last. `optimizer_s`: `optimizer_seconds(case)` when the
    caller has it (it depends on the candidate and the parameters' placement only)."""
    p, w = case.parallelism, case.workload
    assert isinstance(w, TrainingWorkload)
    m = max(w.microbatches(p.dp), 1)
    v = interleaving(p.schedule, p.pp, p.virtual_stages, m)
    params, _ = stage_parameters(case)
    tail = (optimizer_seconds(case) if optimizer_s is None else optimizer_s) * (params / params.mean())
    grads = gradient_buckets(case, v)
    if grads.op:
        bucket_s = cost.time("dp", grads.op, grads.nbytes, 0)
        if not p.overlap_grad_reduce:
            tail = tail + grads.count * v * bucket_s
        elif ends_with_last_backward(p.schedule, p.pp, m, v):
            tail = tail + bucket_s
        if gather and param_gather(case):
            tail = tail + cost.time("dp", "all_gather", grads.gather_bytes, 0)
    return tail


def template_spans(case: Case, cost: CommCost) -> ShardWork | None:
    """Per section, the replayed span of one micro-batch's forward and of its recompute + backward: the
    layer templates with their TP / CP / EP collectives, as `engine/composer.py: replay_all` replays them
    (one symmetric replay; the first / last stage extras hold no collective, so their span is their
    compute). A function of the layer shard and of the groups its collectives contend with (tp, cp, dp, pp,
    ep), not of ZeRO, the schedule or the virtual stages. None under moe_a2a_overlap, where the engine
    shortens a span by the all-to-all time the partner action hides."""
    if case.parallelism.moe_a2a_overlap:
        return None
    view = ops_view(price_table(case))          # the engine's own table and templates (engine/composer.py)
    replayed = replay_all(case, view, shared_case_templates(case, view), cost, -1)
    fwd: dict[str, float] = {}
    bwd: dict[str, float] = {}
    for (section, part), result in replayed.results.items():
        if part in ("fwd", "extra_fwd"):
            fwd[section] = result.span
        elif part in ("bwd", "extra_bwd"):
            bwd[section] = result.span
    return ShardWork(fwd, bwd)


def layer_floor(case: Case, cost: CommCost) -> tuple[float, float]:
    """(forward, backward) seconds a layer takes at least whatever its compute: ZeRO-3 / FSDP full_shard's
    parameter gather, and gather + gradient reduce-scatter; (0, 0) for other layouts."""
    gather_bytes, scatter_bytes = sharded_layer_bytes(case)
    if not gather_bytes:
        return 0.0, 0.0
    g, s = layer_comm_seconds(case, cost, 0, gather_bytes, scatter_bytes, sharded_layer_params(case))
    return g, g + s

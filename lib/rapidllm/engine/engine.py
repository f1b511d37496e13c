"""The event-driven engine: replay a case's graph on the network simulator and explain the step time.

Training: layer templates are replayed once per distinct shape (per stage only when faults break
symmetry), composed into chunk times, and the pipeline DAG (schedule x stages x micro-batches, p2p sends,
gradient buckets, optimizer) is replayed by a longest-path pass. The step splits exactly into
compute + exposed communication + bubble on the critical stage (docs/engine.md):
- compute: pure operator time on that stage (optimizer included);
- exposed communication: in-task waits for collectives (TP/SP/CP/EP/FSDP), waits for a p2p transfer
  (up to its duration), waits for gradient buckets before the optimizer and the parameter gather after it;
- bubble: the rest, i.e. waiting for another stage's work.
`engine="baseline"` selects the congestion-unaware alpha-beta composition (the ablation).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from rapidllm.engine import baseline
from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import TrainingPlan, training_plan
from rapidllm.engine.inference import Adjust, InferenceRecord, inference_record
from rapidllm.engine.metrics import hardware_flops_per_step, model_flops_per_step, utilization
from rapidllm.engine.replay import critical_stage, longest_path, relax, relax_split
from rapidllm.graph.comm_nodes import communication_nodes
from rapidllm.graph.pipeline_dag import (
    GRAD,
    OPT,
    P2P,
    PARAM,
    TASK,
    PipelineGraph,
    PipelineInputs,
    build_pipeline,
    pipeline_shape,
)
from rapidllm.graph.templates import Template
from rapidllm.jit import njit
from rapidllm.memory.closed_form import VERDICT_KEYS, MemoryResult
from rapidllm.ops.price import OperatorTable, as_frame
from rapidllm.spec.case import Case
from rapidllm.spec.layout import TrainingWorkload

if TYPE_CHECKING:
    import pandas as pd

ENGINES = ("event", "baseline")


@njit(cache=True, work=lambda stage, kind, finish: 2 * len(stage))
def _critical_nodes(stage: np.ndarray, kind: np.ndarray, finish: np.ndarray) -> tuple[int, np.ndarray]:
    """The critical stage (`critical_stage` of the stages' last finishes, NaN-propagating like
    np.maximum.at) and its tasks and optimizer step in node order, in two passes over the nodes."""
    n_stages = 1
    for i in range(len(stage)):
        if stage[i] + 1 > n_stages:
            n_stages = stage[i] + 1
    ends = np.zeros(n_stages)
    for i in range(len(stage)):
        s, f = stage[i], finish[i]
        if not np.isnan(ends[s]) and (np.isnan(f) or f > ends[s]):
            ends[s] = f
    crit = critical_stage(ends)
    count = 0
    for i in range(len(stage)):
        if stage[i] == crit and (kind[i] == TASK or kind[i] == OPT):
            count += 1
    mine = np.empty(count, np.int64)
    count = 0
    for i in range(len(stage)):
        if stage[i] == crit and (kind[i] == TASK or kind[i] == OPT):
            mine[count] = i
            count += 1
    return crit, mine


@njit(cache=True)
def exposed_part(dep_kind: int, gap: float, dep_dur: float) -> float:
    """How much of an idle gap before a task is exposed communication, given the node that released the
    task last: a wait for an incoming p2p transfer up to that transfer's duration, a wait for gradient
    buckets or the parameter gather in full; the rest of the gap is bubble (waiting for another stage)."""
    if dep_kind == P2P:
        return min(gap, dep_dur)
    if dep_kind == GRAD or dep_kind == PARAM:
        return gap
    return 0.0


@njit(cache=True)
def _gaps(start: np.ndarray, finish: np.ndarray, crit_kind: np.ndarray, crit_dur: np.ndarray,
          exposed: float) -> tuple[float, float, float]:
    """Walk the critical stage's tasks in order (their starts and finishes, and the kind and duration of
    the node that released each, TASK where none did): idle gaps become exposed p2p/gradient waits or
    bubble."""
    bubble = 0.0
    prev_end = 0.0
    for q in range(len(start)):
        gap = start[q] - prev_end
        prev_end = finish[q]
        if gap <= 0:
            continue
        part = exposed_part(crit_kind[q], gap, crit_dur[q])
        exposed += part
        bubble += gap - part
    return exposed, bubble, prev_end


def _split(step: float, s: int, compute: np.ndarray, dur: np.ndarray, start: np.ndarray, finish: np.ndarray,
           crit_kind: np.ndarray, crit_dur: np.ndarray) -> dict[str, float]:
    """The breakdown from the critical stage s's tasks and optimizer step in node order (their compute
    seconds, durations, starts, finishes, and what released each: `_gaps`)."""
    exposed, bubble, prev_end = _gaps(start, finish, crit_kind, crit_dur, float((dur - compute).sum()))
    exposed += step - prev_end                      # parameter gather after the optimizer, other stages
    return {"step_time_s": step, "compute_time_s": float(compute.sum()), "exposed_comm_s": exposed,
            "bubble_s": bubble, "critical_stage": s}


def _released_by(crit: np.ndarray, kind: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kind and duration of each binding dependency in `crit` (TASK and 0.0 where there is none)."""
    has = crit >= 0
    return np.where(has, kind[crit], np.int8(TASK)).astype(np.int8), np.where(has, dur[crit], 0.0)


def attribute(g: PipelineGraph, start: np.ndarray, finish: np.ndarray, crit: np.ndarray) -> dict[str, float]:
    """Split the step on the critical stage into compute, exposed communication and bubble."""
    step = float(finish.max()) if len(finish) else 0.0
    s, mine = _critical_nodes(g.stage, g.kind, np.asarray(finish, np.float64))
    kind, dur = np.asarray(g.kind, np.int8), np.asarray(g.dur, np.float64)
    return _split(step, s, g.compute[mine], dur[mine], np.asarray(start, np.float64)[mine],
                  np.asarray(finish, np.float64)[mine], *_released_by(np.asarray(crit, np.int64)[mine], kind, dur))


def pipeline_split(x: PipelineInputs) -> tuple[dict[str, float], int]:
    """`attribute` of the inputs' pipeline DAG and its longest path, and the DAG's node count, without the
    DAG in node order where its shape has a Kahn-ordered form (`graph.pipeline_dag.RankedShape`): one pass
    fills and relaxes it front to back (`relax_split`), and only the critical stage's nodes are gathered.
    Gradient-bucket counts are a replay parameter here (`pipeline_shape(..., share_buckets=True)`), so cases
    that differ only in bucket count share one shape. The same numbers as `build_pipeline`, `longest_path`
    and `attribute` (tests/test_engine_fast.py)."""
    for share in (True, False):
        found = pipeline_shape(x, share_buckets=share)
        if found is None or found[0].ranked is None:
            g, start, finish, crit = replay_pipeline(x)
            return attribute(g, start, finish, crit), len(g)
        shape, values, reps = found
        r = shape.ranked
        n = r.nodes
        step, s, ambiguous, *nodes = relax_split(values, n.src, n.csrc, n.pieces, n.hid, n.oth, r.succ_ptr, r.succ,
                                                 n.stage, n.kind, r.mine_ptr, r.mine, r.link, reps, r.chain)
        if not ambiguous:           # else a tie that Kahn order decides: the DAG's own shape (reps 1)
            break
    nodes_count = len(n.src) + 2 * r.blocks * (reps - 1)
    return _split(float(step), int(s), *nodes), nodes_count     # Python numbers, as numba boxes them


def replay_pipeline(x: PipelineInputs) -> tuple[PipelineGraph, np.ndarray, np.ndarray, np.ndarray]:
    """The pipeline DAG of the inputs and every node's start, finish and binding dependency."""
    g = build_pipeline(x)
    start, finish, crit = relax(g.dur, *g.order) if g.order is not None else \
        longest_path(g.dur, g.dep_ptr, g.dep_idx)
    return g, start, finish, crit


@dataclass
class TrainingReplay:
    """Everything one training-step replay computed: the collective costs, the plan (replayed templates,
    pipeline inputs), the pipeline DAG and every node's start, finish and binding dependency. What a
    timeline draws (`predict(..., trace=True)`); the prediction itself keeps only the attribution."""
    case: Case
    cost: CommCost
    plan: TrainingPlan
    graph: PipelineGraph
    start: np.ndarray
    finish: np.ndarray
    crit: np.ndarray


def replay_training(case: Case, ops: pd.DataFrame | OperatorTable, overlap: bool = True,
                    templates: list[Template] | None = None) -> TrainingReplay:
    """Price the collectives, replay the templates, build the pipeline DAG and run its longest path."""
    cost = CommCost(case)
    plan = training_plan(case, ops, cost, overlap, templates)
    g, start, finish, crit = replay_pipeline(plan.inputs)
    return TrainingReplay(case, cost, plan, g, start, finish, crit)


@dataclass
class TrainingRecord:
    """A training step's record (its fields are the keys, in order, `record_keys`): the split of the step
    on the critical stage (`_split`), utilization, throughput, the inference timings at 0 and the size of
    the replay."""
    step_time_s: float
    compute_time_s: float
    exposed_comm_s: float
    bubble_s: float
    critical_stage: int
    mfu: float
    hfu: float
    tokens_per_s: float
    ttft_s: float
    itl_s: float
    e2e_latency_s: float
    graph_nodes: int
    network_events_simulated: float
    network_events_flattened: float


def training_record(case: Case, ops: pd.DataFrame | OperatorTable, overlap: bool = True, templates: list[Template] | None = None,
                     trace: bool = False) -> dict:
    """The training record; with trace=True also the replay itself under the key "schedule" (without it,
    the pipeline is replayed for its breakdown only: `pipeline_split`)."""
    if trace:
        r = replay_training(case, ops, overlap, templates)
        cost, plan, nodes = r.cost, r.plan, len(r.graph)
        rec = attribute(r.graph, r.start, r.finish, r.crit)
    else:
        cost = CommCost(case)
        plan = training_plan(case, ops, cost, overlap, templates)
        rec, nodes = pipeline_split(plan.inputs)
    w = case.workload
    assert isinstance(w, TrainingWorkload)
    step = rec["step_time_s"]
    hw_flops = hardware_flops_per_step(case, plan.flops_hw, plan.flops_recompute)
    rec = vars(TrainingRecord(**rec, mfu=utilization(model_flops_per_step(case), step, case),
                              hfu=utilization(hw_flops, step, case),
                              tokens_per_s=w.global_batch * w.seq_len / step if step > 0 else 0.0,
                              ttft_s=0.0, itl_s=0.0, e2e_latency_s=0.0, graph_nodes=nodes,
                              network_events_simulated=float(cost.simulated),
                              network_events_flattened=float(cost.flattened_events())))
    if trace:
        rec["schedule"] = r
    return rec


def simulate(case: Case, ops: pd.DataFrame | OperatorTable, memory: MemoryResult, engine: str = "event", overlap: bool = True,
            adjust: Adjust | None = None, templates: list[Template] | None = None, trace: bool = False) -> dict:
    """Prediction plus memory as one flat record with the stable snake_case keys of the README.

    `adjust` rewrites operator times (measured-timing replay, what-if) before the replay. trace=True adds
    the replay under "schedule" (a `TrainingReplay`, or an `InferenceReplay` for static batching; None
    where there is none: the baseline engine, serving) for timelines; the numbers are the same either way.
    """
    ops = adjust(as_frame(ops)) if adjust else ops
    if engine == "baseline":
        rec = baseline.compose(case, as_frame(ops), memory, communication_nodes(case))
        return {**rec, "schedule": None} if trace else rec
    if engine != "event":
        raise ValueError(f"unknown engine {engine!r}; allowed: {', '.join(ENGINES)}")
    rec = training_record(case, ops, overlap, templates, trace) if case.training else \
        inference_record(case, ops, overlap, adjust, trace, memory.admission)
    rec.update(memory.verdict())
    return rec


def record_keys(training: bool, engine: str = "event") -> tuple[str, ...]:
    """The keys of `simulate`'s record of a case of this mode on this engine, in order: the fields of the
    record its builder fills, then the memory verdict. What a table pads a row without a prediction to."""
    kind = baseline.Prediction if engine == "baseline" else TrainingRecord if training else InferenceRecord
    return (*(f.name for f in fields(kind)), *VERDICT_KEYS)

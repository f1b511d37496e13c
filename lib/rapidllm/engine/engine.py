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

import numpy as np
import pandas as pd
from numba import njit

from rapidllm.engine import baseline
from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import training_plan
from rapidllm.engine.inference import Adjust, replay_inference
from rapidllm.engine.metrics import model_flops_per_step, utilization
from rapidllm.engine.replay import longest_path
from rapidllm.graph.comm_nodes import communication_nodes
from rapidllm.graph.pipeline_dag import (
    GRAD,
    OPT,
    P2P,
    PARAM,
    TASK,
    PipelineGraph,
    build_pipeline,
)
from rapidllm.graph.templates import Template
from rapidllm.memory.closed_form import MemoryResult
from rapidllm.spec.case import Case, TrainingWorkload

ENGINES = ("event", "baseline")


@njit(cache=True)
def _stage_ends(stage: np.ndarray, finish: np.ndarray, n_stages: int) -> np.ndarray:
    """Last finish per stage (NaN-propagating like np.maximum.at)."""
    ends = np.zeros(n_stages)
    for i in range(len(stage)):
        s, f = stage[i], finish[i]
        if not np.isnan(ends[s]) and (np.isnan(f) or f > ends[s]):
            ends[s] = f
    return ends


@njit(cache=True)
def _gaps(mine: np.ndarray, start: np.ndarray, finish: np.ndarray, crit: np.ndarray, kind: np.ndarray,
          dur: np.ndarray, exposed: float) -> tuple[float, float, float]:
    """Walk the critical stage's tasks in order: idle gaps become exposed p2p/gradient waits or bubble."""
    bubble = 0.0
    prev_end = 0.0
    for q in range(len(mine)):
        i = mine[q]
        gap = start[i] - prev_end
        prev_end = finish[i]
        if gap <= 0:
            continue
        c = crit[i]
        k = kind[c] if c >= 0 else TASK
        if k == P2P:
            part = min(gap, dur[c])
        elif k == GRAD or k == PARAM:
            part = gap
        else:
            part = 0.0
        exposed += part
        bubble += gap - part
    return exposed, bubble, prev_end


def attribute(g: PipelineGraph, start: np.ndarray, finish: np.ndarray, crit: np.ndarray) -> dict[str, float]:
    """Split the step on the critical stage into compute, exposed communication and bubble."""
    step = float(finish.max()) if len(finish) else 0.0
    n_stages = int(g.stage.max()) + 1 if len(g.stage) else 1
    ends = _stage_ends(g.stage, np.asarray(finish, np.float64), n_stages) if len(g.stage) else np.zeros(1)
    s = int(np.argmax(ends))
    mine = np.flatnonzero((g.stage == s) & ((g.kind == TASK) | (g.kind == OPT)))
    compute = float(g.compute[mine].sum())
    exposed = float((g.dur[mine] - g.compute[mine]).sum())
    exposed, bubble, prev_end = _gaps(mine.astype(np.int64), np.asarray(start, np.float64), np.asarray(finish, np.float64),
                                      np.asarray(crit, np.int64), np.asarray(g.kind, np.int8), np.asarray(g.dur, np.float64),
                                      exposed)
    exposed += step - prev_end                      # parameter gather after the optimizer, other stages
    return {"step_time_s": step, "compute_time_s": compute, "exposed_comm_s": exposed, "bubble_s": bubble,
            "critical_stage": s}


def replay_training(case: Case, ops: pd.DataFrame, overlap: bool = True, templates: list[Template] | None = None) -> dict:
    cost = CommCost(case)
    plan = training_plan(case, ops, cost, overlap, templates)
    g = build_pipeline(plan.inputs)
    start, finish, crit = longest_path(g.dur, g.dep_ptr, g.dep_idx)
    rec = attribute(g, start, finish, crit)
    w = case.workload
    assert isinstance(w, TrainingWorkload)
    step = rec["step_time_s"]
    rec.update(mfu=utilization(model_flops_per_step(case), step, case), hfu=utilization(plan.flops_hw, step, case),
               tokens_per_s=w.global_batch * w.seq_len / step if step > 0 else 0.0,
               ttft_s=0.0, itl_s=0.0, e2e_latency_s=0.0, graph_nodes=len(g),
               network_events_simulated=float(cost.simulated),
               network_events_flattened=float(cost.flattened_events()))
    return rec


def simulate(case: Case, ops: pd.DataFrame, memory: MemoryResult, engine: str = "event", overlap: bool = True,
            adjust: Adjust | None = None, templates: list[Template] | None = None) -> dict:
    """Prediction plus memory as one flat record with the stable snake_case keys of the README.

    `adjust` rewrites operator times (measured-timing replay, what-if) before the replay.
    """
    ops = adjust(ops) if adjust else ops
    if engine == "baseline":
        return baseline.compose(case, ops, memory, communication_nodes(case))
    if engine != "event":
        raise ValueError(f"unknown engine {engine!r}; allowed: {', '.join(ENGINES)}")
    rec = replay_training(case, ops, overlap, templates) if case.training else replay_inference(case, ops, overlap, adjust)
    rec.update(peak_memory_bytes=memory.peak, feasible=memory.feasible, infeasible_reason=memory.reason)
    return rec

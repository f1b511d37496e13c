"""Plain-Python references of fast (numba, cached or vectorized) library paths: their specifications.

Every numba kernel has a plain-Python reference in the tests; the tests compare the library's fast
paths against these bit for bit. (The pipeline-graph builder's Python form stays in the library: it is
also the fallback for schedules the numba builder does not take.)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

from rapidllm.engine.comm_cost import CommCost
from rapidllm.graph.pipeline_dag import GRAD, OPT, P2P, PARAM, TASK, PipelineGraph
from rapidllm.memory.closed_form import MemoryResult
from rapidllm.memory.communicators import communicator_memory
from rapidllm.memory.liveness import LayerLiveness
from rapidllm.memory.model import shared_training_liveness, walk_inputs
from rapidllm.memory.state import conventions, stage_layer_counts, state_bytes
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES
from rapidllm.spec.layout import TrainingWorkload


def attribute_reference(g: PipelineGraph, start: np.ndarray, finish: np.ndarray, crit: np.ndarray) -> dict[str, float]:
    """The plain-Python `attribute` (the specification of the numba one; tests/test_engine_fast.py)."""
    step = float(finish.max()) if len(finish) else 0.0
    ends = np.zeros(int(g.stage.max()) + 1 if len(g.stage) else 1)
    np.maximum.at(ends, g.stage, finish)
    s = int(np.argmax(ends))
    mine = np.flatnonzero((g.stage == s) & ((g.kind == TASK) | (g.kind == OPT)))
    compute = float(g.compute[mine].sum())
    exposed = float((g.dur[mine] - g.compute[mine]).sum())
    bubble = 0.0
    prev_end = 0.0
    for i in mine:
        gap = float(start[i]) - prev_end
        prev_end = float(finish[i])
        if gap <= 0:
            continue
        c = int(crit[i])
        k = g.kind[c] if c >= 0 else TASK
        part = min(gap, float(g.dur[c])) if k == P2P else (gap if k in (GRAD, PARAM) else 0.0)
        exposed += part
        bubble += gap - part
    exposed += step - prev_end                      # parameter gather after the optimizer, other stages
    return {"step_time_s": step, "compute_time_s": compute, "exposed_comm_s": exposed, "bubble_s": bubble,
            "critical_stage": s}


def schedule_actions_reference(schedule: str, pp: int, stage: int, m: int, v: int = 1) -> list[tuple[str, int]]:
    """The stage's ordered ('F'|'B', index) actions, as the memory walk counts them (`spec.schedule.action_order`
    for v = 1 under GPipe, which is the only GPipe the memory walk sees)."""
    if pp == 1 or schedule == "gpipe":
        if pp == 1:
            return [a for i in range(m) for a in (("F", i), ("B", i))]
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    total = m * v
    warm = min((pp - stage - 1) * 2 + (v - 1) * pp if v > 1 else pp - stage - 1, total)
    acts = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while b < total:
        if f < total:
            acts.append(("F", f))
            f += 1
        acts.append(("B", b))
        b += 1
    return acts


def _virtual_reference(k: int, pp: int, v: int, forward: bool) -> tuple[int, int]:
    """(chunk, micro-batch) of the k-th virtual micro-batch of a stage under interleaving."""
    group, within = divmod(k, pp * v)
    chunk = within // pp
    if not forward:
        chunk = v - 1 - chunk
    return chunk, group * pp + within % pp


def stage_actions_reference(schedule: str, pp: int, stage: int, m: int, v: int = 1) -> list[tuple[str, int, int]]:
    """Ordered (kind, chunk, micro-batch) actions of `stage` (`graph.schedules.stage_actions`)."""
    if pp == 1:
        return [a for i in range(m) for a in (("F", 0, i), ("B", 0, i))]
    if schedule == "gpipe":
        return [("F", c, i) for c in range(v) for i in range(m)] + \
               [("B", c, i) for c in reversed(range(v)) for i in range(m)]
    if v == 1:
        warm = min(pp - stage - 1, m)
        out: list[tuple[str, int, int]] = [("F", 0, i) for i in range(warm)]
        for i in range(m - warm):
            out += [("F", 0, warm + i), ("B", 0, i)]
        out += [("B", 0, i) for i in range(m - warm, m)]
        return out
    total = m * v
    warm = min((pp - stage - 1) * 2 + (v - 1) * pp, total)
    out = [("F", *_virtual_reference(k, pp, v, True)) for k in range(warm)]
    f = warm
    for b in range(total):
        if f < total:
            out.append(("F", *_virtual_reference(f, pp, v, True)))
            f += 1
        out.append(("B", *_virtual_reference(b, pp, v, False)))
    return out


def activation_peak_reference(case: Case, stage: int, layer: LayerLiveness, head: LayerLiveness,
                    layers: int) -> float:
    """The Python walk `memory.model._walk_peak` reproduces bit for bit (kept for tests/test_sweep_speed_equivalence.py)."""
    p, w = case.parallelism, case.workload
    assert isinstance(w, TrainingWorkload)
    x = walk_inputs(case, stage, layer, head, layers)
    v = x.chunks
    held = peak = 0.0
    for kind, i in schedule_actions_reference(p.schedule, p.pp, stage, max(w.microbatches(p.dp), 1), v):
        extra = x.head_stored if (x.last and (i % v == v - 1)) else 0.0
        if kind == "F":
            peak = max(peak, held + x.fwd_extra)
            held += x.per_chunk + extra
        else:
            peak = max(peak, held + x.bwd_extra)
            held -= x.per_chunk + extra
    return max(peak, held)


def training_memory_reference(case: Case) -> MemoryResult:
    """`memory_for_case` of a training case as it was first written: a `MemoryResult` per pipeline stage
    (activations from `activation_peak_reference`), the one with the highest peak (the first on a tie)."""
    conv = conventions(case)
    layer, head = shared_training_liveness(case, conv)
    hw, w, p = case.hardware, case.workload, case.parallelism
    gather = (conv.sp_gather_buffers * DTYPE_BYTES[case.activation_precision] * w.micro_batch * w.seq_len
              * case.model.hidden if p.tp > 1 and p.sp else 0.0)      # nanotron's persistent SP gather buffers
    out = []
    for stage in range(case.parallelism.pp):
        layers = stage_layer_counts(case, conv)[stage]
        st = state_bytes(case, stage, conv)
        acts = (activation_peak_reference(case, stage, layer, head, layers) + st.gathered_layer
                + conv.runtime_allocated + gather)
        step = (st.step_transient + conv.runtime_allocated
                + conv.step_hidden_bytes * w.micro_batch * w.seq_len * case.model.hidden)
        outside = hw.framework_memory + communicator_memory(case, stage, conv.process_groups,
                                                            conv.communicator_bytes)
        out.append(MemoryResult(st.weights, st.gradients, st.optimizer, acts, 0.0, outside,
                                hw.hbm_capacity, step_transient=step, stage=stage))
    return max(out, key=lambda r: r.peak)


def case_id_reference(case: Case) -> str:
    """`case_id` through `dataclasses.asdict` (the original definition, kept for tests), less the fields
    added later that enter the hash only when set (HASH_OMITTED_DEFAULTS in spec/)."""
    d = case.to_dict()
    d.pop("name")
    for part in ("model", "hardware", "parallelism", "workload"):  # fields added later hash only when set (spec/)
        spec = getattr(case, part)
        for f in dataclasses.fields(spec):
            if f.name in getattr(spec, "HASH_OMITTED_DEFAULTS", ()) and getattr(spec, f.name) == f.default:
                d[part].pop(f.name)
    for f in dataclasses.fields(case):                 # and the case's own (fp8_recipe)
        if f.name in getattr(case, "HASH_OMITTED_DEFAULTS", ()) and getattr(case, f.name) == f.default:
            d.pop(f.name)
    blob = json.dumps(d, sort_keys=True, default=list, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def groups_reference(cost: CommCost, axis: str, stage: int = -1) -> list[tuple[int, ...]]:
    """`groups` rank by rank through RankMapping.group_ranks (the definition; tests compare)."""
    m, p = cost.mapping, cost.case.parallelism
    stages = range(p.pp) if stage < 0 else [stage]
    stride = m.stride("pp")
    out = []
    for s in stages:
        ranks = range(s * stride, (s + 1) * stride) if m.order[-1] == "pp" else \
            [r for r in range(m.world) if m.parallel_coords(r)["pp"] == s]
        if axis == "pp":
            out += [(r, r + stride) for r in ranks if s + 1 < p.pp]
        elif axis == "ep":
            ranks, etp = sorted(ranks), p.expert_tp      # Megatron-Core's expert grid: etp, ep, edp
            for b in range(0, len(ranks), p.ep * etp):
                out += [tuple(ranks[b + j + k * etp] for k in range(p.ep)) for j in range(etp)]
        elif axis == "dp":                  # the gradient group: every rank that differs only in dp and cp
            def key(r: int) -> tuple:
                c = m.parallel_coords(r)
                return tuple(v for a, v in sorted(c.items()) if a not in ("dp", "cp"))
            out += sorted({tuple(sorted(q for q in ranks if key(q) == key(r))) for r in ranks})
        else:
            out += sorted({tuple(m.group_ranks(axis, r)) for r in ranks})
    return out


def longest_path_reference(dur: np.ndarray, dep_ptr: np.ndarray, dep_idx: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`engine.replay.longest_path`: nodes in Kahn order (first-in first-out); a node starts when its last
    dependency finishes, and its binding dependency is the first to reach that time. A cycle leaves NaN."""
    n = len(dur)
    deps = [[int(d) for d in dep_idx[dep_ptr[i]:dep_ptr[i + 1]]] for i in range(n)]
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ds in enumerate(deps):
        for d in ds:
            succ[d].append(i)
    waiting = [len(ds) for ds in deps]
    ready = [i for i in range(n) if waiting[i] == 0]
    start, finish, crit = [0.0] * n, [0.0] * n, [-1] * n
    done = 0
    while done < len(ready):
        i = ready[done]
        done += 1
        finish[i] = start[i] + float(dur[i])
        for j in succ[i]:
            if crit[j] < 0 and finish[i] >= start[j] or finish[i] > start[j]:
                start[j], crit[j] = finish[i], i
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    out = np.array(finish) if done == n else np.full(n, np.nan)
    return np.array(start), out, np.array(crit, dtype=np.int64)


def dense_route_ids_reference(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`network.routing._dense_route_ids`: route ids number the distinct (src, dst) pairs in ascending
    src * n + dst order."""
    keys = [int(s) * n + int(d) for s, d in zip(src, dst)]
    uniq = sorted(set(keys))
    rank = {k: r for r, k in enumerate(uniq)}
    return np.array([rank[k] for k in keys], dtype=np.int32), np.array(uniq, dtype=np.int64)


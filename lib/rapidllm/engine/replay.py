"""Replay graphs: a template in Python (tens of nodes) and the pipeline DAG in numba (up to ~10^6 nodes).

Both follow one rule: a node starts when its dependencies have finished and its stream is free. Compute
nodes of a rank run on that rank's compute stream in program order; a communication node occupies the
channels (network dimensions) its group spans, first come first served in emission order, so collectives
that share a dimension queue behind each other while compute and other dimensions proceed.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rapidllm.graph.kahn import kahn_order
from rapidllm.graph.pipeline_dag import TASK
from rapidllm.graph.templates import COMPUTE, Template
from rapidllm.jit import njit


@dataclass(frozen=True)
class TemplateResult:
    span: float          # first start to last finish of one instance
    compute: float       # sum of compute-node durations
    comm: float          # sum of communication-node durations
    start: np.ndarray
    finish: np.ndarray

    @property
    def exposed(self) -> float:
        return self.span - self.compute


def replay_template(t: Template, compute_s: Sequence[float], comm_s: Callable[[str, str, float], float],
                    channels: Callable[[str], tuple[int, ...]], overlap: bool = True,
                    comm_override: dict[int, float] | None = None,
                    sm_share: Callable[[str], float] | None = None) -> TemplateResult:
    """Replay one template; compute_s lists the compute nodes' durations in order.

    overlap=False serializes every communication node on the compute stream (the no-overlap ablation).
    comm_override gives some communication nodes (by index) another duration than comm_s's: the time a
    collective fused into its GEMM holds the consumer (engine/tp_overlap.py).
    sm_share(axis) is the fraction of the SMs a running collective of that axis holds (DeepEP's normal
    kernels): compute progresses at 1 - (sum over running collectives) of its rate meanwhile. None: none.
    """
    n = len(t.nodes)
    start, finish = [0.0] * n, [0.0] * n          # Python floats: the same doubles, without numpy scalar costs
    stream, chan_free = 0.0, {}
    it = iter(compute_s)
    compute = comm = 0.0
    holding: list[tuple[float, float, float]] = []      # (start, finish, share) of SM-holding collectives
    for i, node in enumerate(t.nodes):
        ready = max((finish[d] for d in node.deps), default=0.0)
        if node.kind == COMPUTE:
            dur = float(next(it))
            start[i] = max(ready, stream)
            if holding:
                holding = [h for h in holding if h[1] > start[i]]
            finish[i] = stream = _slowed_finish(start[i], dur, holding) if holding else start[i] + dur
            compute += dur
            continue
        dur = comm_override[i] if comm_override and i in comm_override else comm_s(node.axis, node.op, node.nbytes)
        chans = channels(node.axis)
        s = max([ready] + [chan_free.get(c, 0.0) for c in chans])
        if not overlap:
            s = max(s, stream)
        start[i], finish[i] = s, s + dur
        for c in chans:
            chan_free[c] = finish[i]
        if not overlap:
            stream = finish[i]
        share = sm_share(node.axis) if sm_share else 0.0
        if share > 0.0 and dur > 0.0:
            holding.append((s, s + dur, share))
        comm += dur
    start_a, finish_a = np.array(start), np.array(finish)
    span = float(finish_a.max() - start_a.min()) if n else 0.0
    return TemplateResult(span, compute, comm, start_a, finish_a)


def _slowed_finish(t: float, work: float, holding: list[tuple[float, float, float]]) -> float:
    """Finish of `work` seconds of compute started at t while the collectives in `holding` (each known
    before the compute starts: a collective launches after the compute it follows) hold their SM shares."""
    bounds = sorted({b for s, f, _ in holding for b in (s, f) if b > t})
    for b in bounds + [np.inf]:
        rate = max(1.0 - sum(sh for s, f, sh in holding if s <= t < f), 1e-3)
        if work <= (b - t) * rate:
            return t + work / rate
        work -= (b - t) * rate
        t = b
    return t


@njit(cache=True)
def longest_path(dur: np.ndarray, dep_ptr: np.ndarray, dep_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start, finish and binding dependency (-1: none) of every node of a DAG (Kahn order)."""
    succ_ptr, succ, order, count = kahn_order(dep_ptr, dep_idx)
    return relax(dur, succ_ptr, succ, order, count)


@njit(cache=True, work=lambda dur, succ_ptr, succ, order, count: len(dur) + len(succ))
def relax(dur: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray, order: np.ndarray,
          count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`longest_path` over a `kahn_order` computed before (graphs of one shape share it): a node starts
    when its last dependency finishes, its binding dependency is the first to reach that time; a cycle
    (count below the node count) leaves every finish NaN."""
    n = len(dur)
    start = np.zeros(n)
    finish = np.zeros(n)
    crit = np.full(n, -1, np.int64)
    for h in range(count):
        i = order[h]
        finish[i] = start[i] + dur[i]
        for k in range(succ_ptr[i], succ_ptr[i + 1]):
            j = succ[k]
            if finish[i] > start[j] or crit[j] < 0:
                if finish[i] >= start[j]:
                    start[j] = finish[i]
                    crit[j] = i
    if count < n:
        finish[:] = np.nan          # a cycle: the caller's graph is wrong
    return start, finish, crit


@njit(cache=True)
def critical_stage(ends: np.ndarray) -> int:
    """The stage whose last finish is the latest, the first on a tie; the first NaN one if any (np.argmax)."""
    crit = 0
    for s in range(len(ends)):
        if np.isnan(ends[s]):
            return s
        if ends[s] > ends[crit]:
            crit = s
    return crit


@njit(cache=True)
def _note_finish(f: float, latest: float, seen_nan: bool) -> tuple[float, bool]:
    """One finish of a piece or bucket before the last (`relax_split`): (the latest finish so far, whether
    any was NaN); a NaN finish is remembered, not compared."""
    if np.isnan(f):
        return latest, True
    return (f if f > latest else latest), seen_nan


@njit(cache=True, work=lambda values, src, csrc, pieces, hid, oth, succ_ptr, succ, stage, kind, mine_ptr, mine,
      link, reps, chain: len(src) + len(succ) + 2 * reps * len(mine))
def relax_split(values: np.ndarray, src: np.ndarray, csrc: np.ndarray, pieces: np.ndarray, hid: np.ndarray,
                oth: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray, stage: np.ndarray, kind: np.ndarray,
                mine_ptr: np.ndarray, mine: np.ndarray, link: np.ndarray, reps: int, chain: bool
                ) -> tuple[float, int, bool, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`relax` over a DAG renumbered in Kahn order (`graph.pipeline_dag._ranked`), in one pass front to
    back, its durations made on the way with `graph.pipeline_dag._fill`'s operations; then what the
    attribution reads: the step (the last finish; NaN if any is), the critical stage (`critical_stage` of
    each stage's last finish, NaN-propagating as `engine._critical_nodes` takes it) and, for its tasks and
    optimizer step in node order (`mine`), compute seconds, durations, starts, finishes, and the kind and
    duration of the node that released each (TASK and 0.0 where none did).

    Shared gradient buckets (`link` not empty: `graph.pipeline_dag._bucket_links`): a bucketed task stands
    for `reps` pieces in a chain and its bucket node for `reps` buckets, piece k's bucket after piece k and
    (`chain`) after bucket k - 1; both are replayed in place with the relaxation's own operations (a start
    is the largest finish of the dependencies that is not NaN, else 0), their successors see the last
    piece and the last bucket, and the critical stage's rows list every piece. Which dependency released a
    node is the first in Kahn order among those that finish last, and Kahn order differs between the
    shared shape and the DAG with `reps` pieces; it decides a number only where two dependencies other than
    the previous task tie, differ in kind or duration (what `engine._gaps` reads) and the task waits: the
    third value, True there, asks the caller for the DAG's own shape. False otherwise (and always where
    link is empty)."""
    n = len(src)
    blocked = len(link) > 0
    n_stages = len(mine_ptr) - 1
    start = np.zeros(n)
    dur = np.empty(n)
    crit = np.full(n, -1, np.int32)
    tie = np.zeros(n, np.bool_)
    ends = np.zeros(n_stages)
    step = finish_max = 0.0
    nan = False
    for h in range(n):
        span = values[src[h]]
        if hid[h] >= 0:
            span -= min(values[hid[h]], values[oth[h]])
        lk = link[h] if blocked else -1
        d = span / (reps if lk == -2 else pieces[h])
        dur[h] = d
        s = stage[h]
        if lk == -1:
            f = start[h] + d
        else:                                  # the pieces or buckets before the last: finishes of their own
            inner_max = -np.inf
            inner_nan = False
            if lk == -2:                       # pieces: each starts when the one before finishes
                f = start[h] + d
                for _ in range(reps - 1):
                    inner_max, inner_nan = _note_finish(f, inner_max, inner_nan)
                    f = (f if f >= 0.0 else 0.0) + d
            else:                              # buckets: after their piece and the bucket before
                ts, td = start[lk], dur[lk]
                fp = ts + td
                b = start[h]                   # its other dependencies (the task's edge is not relaxed)
                if fp > b:
                    b = fp
                f = b + d
                for _ in range(reps - 1):
                    inner_max, inner_nan = _note_finish(f, inner_max, inner_nan)
                    fp = (fp if fp >= 0.0 else 0.0) + td
                    b = fp if fp > 0.0 else 0.0
                    if chain and f > b:
                        b = f
                    f = b + d
            if inner_nan:
                nan = True
                ends[s] = np.nan
            if inner_max > finish_max:
                finish_max = inner_max
            if not np.isnan(ends[s]) and inner_max > ends[s]:
                ends[s] = inner_max
        if np.isnan(f):
            nan = True
        elif h == 0 or f > finish_max:
            finish_max = f
        if not np.isnan(ends[s]) and (np.isnan(f) or f > ends[s]):
            ends[s] = f
        for k in range(succ_ptr[h], succ_ptr[h + 1]):
            j = succ[k]
            if lk == -2 and link[j] == h:
                continue                       # a bucket node reads its task's start itself
            if f > start[j] or crit[j] < 0:
                if f >= start[j]:
                    start[j] = f
                    crit[j] = h
            elif f == start[j] and crit[j] != h and (kind[h] != kind[crit[j]] or d != dur[crit[j]]):
                tie[j] = True                  # tied with a dependency the attribution tells apart
    if n:
        step = np.nan if nan else finish_max
    s = critical_stage(ends)
    rows = mine[mine_ptr[s]:mine_ptr[s + 1]]
    k = len(rows)
    if blocked:
        for q in range(len(rows)):
            if link[rows[q]] == -2:
                k += reps - 1
    comp_m, dur_m, start_m, finish_m, cdur = np.empty(k), np.empty(k), np.empty(k), np.empty(k), np.zeros(k)
    ckind = np.full(k, TASK, np.int8)
    ambiguous = False
    r = 0
    for q in range(len(rows)):
        h = rows[q]
        split = blocked and link[h] == -2      # a bucketed task: its pieces, the first one here
        d = dur[h]
        comp = values[csrc[h]] / (reps if split else pieces[h])
        dur_m[r] = d
        comp_m[r] = comp
        start_m[r] = start[h]
        f = start[h] + d                       # its finish (the first piece's when split)
        finish_m[r] = f
        c = crit[h]
        if c >= 0:
            ckind[r] = kind[c]
            cdur[r] = dur[c]
        if tie[h] and not (start[h] - (finish_m[r - 1] if r > 0 else 0.0) <= 0):     # `_gaps` reads it
            ambiguous = True
        r += 1
        if split:
            for _ in range(reps - 1):
                released = f >= 0.0
                sp = f if released else 0.0
                f = sp + d
                dur_m[r] = d
                comp_m[r] = comp
                start_m[r] = sp
                finish_m[r] = f
                if released:
                    cdur[r] = d
                r += 1
    return step, s, ambiguous and reps > 1, comp_m, dur_m, start_m, finish_m, ckind, cdur

"""The pipeline graph: stages x chunks x micro-batches under a schedule, as one DAG.

Homogeneity again: all data-parallel replicas and all ranks of a TP/CP group behave alike, so one node
per (stage, chunk, micro-batch, direction) stands for every rank of that stage; its duration is the
replayed layer templates of the chunk. Point-to-point sends between stages, the data-parallel gradient
buckets of the last micro-batch (overlapped with the rest of backward, Megatron's overlap_grad_reduce),
the optimizer step and the parameter all-gather of a sharded optimizer are nodes of their own.
Streams: one compute stream per stage; channels per (stage, network dimension[, direction]).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rapidllm.graph.schedules import stage_actions

TASK, P2P, GRAD, OPT, PARAM = 0, 1, 2, 3, 4
KIND_NAMES = ("task", "p2p", "grad", "optimizer", "param_gather")


@dataclass
class PipelineInputs:
    schedule: str
    pp: int
    v: int
    m: int
    f_span: np.ndarray                 # [pp, v] seconds per forward of one chunk (one micro-batch)
    f_compute: np.ndarray              # [pp, v] pure compute part of it
    b_span: np.ndarray                 # [pp, v] backward (recompute included)
    b_compute: np.ndarray
    p2p_fwd: np.ndarray                # [pp] send from stage s to the next stage
    p2p_bwd: np.ndarray                # [pp] send from stage s to the previous stage
    buckets: int = 0                   # gradient buckets per chunk, reduced during the last micro-batch
    bucket_s: float = 0.0              # seconds per bucket collective
    optimizer_s: np.ndarray = field(default_factory=lambda: np.zeros(1))   # [pp]
    param_gather_s: float = 0.0        # all-gather of updated parameters (sharded optimizer)
    pp_dims: tuple[int, ...] = ()
    dp_dims: tuple[int, ...] = ()


@dataclass
class PipelineGraph:
    dur: np.ndarray
    compute: np.ndarray                # pure compute seconds in a node (tasks, optimizer)
    kind: np.ndarray
    stage: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray

    def __len__(self) -> int:
        return len(self.dur)


def _consumer(kind: str, s: int, c: int, i: int, pp: int, v: int) -> tuple[str, int, int, int] | None:
    if kind == "F":
        if s + 1 < pp:
            return ("F", s + 1, c, i)
        return ("F", 0, c + 1, i) if c + 1 < v else None
    if s > 0:
        return ("B", s - 1, c, i)
    return ("B", pp - 1, c - 1, i) if c > 0 else None


def build_pipeline(x: PipelineInputs) -> PipelineGraph:
    """Nodes in per-stage program order; cross-stage dependencies through the p2p nodes."""
    dur: list[float] = []
    comp: list[float] = []
    kind: list[int] = []
    stage: list[int] = []
    deps: list[list[int]] = []
    entry: dict[tuple[str, int, int, int], int] = {}
    incoming: dict[tuple[str, int, int, int], int] = {}

    def add(d: float, c: float, k: int, s: int, dp: list[int]) -> int:
        dur.append(d), comp.append(c), kind.append(k), stage.append(s), deps.append(dp)
        return len(dur) - 1

    grad_keys = [(d, "dp") for d in x.dp_dims]     # own queue: a small p2p send never waits behind a bucket
    for s in range(x.pp):
        prev, chan = -1, {}

        def on_channels(node: int, keys: list) -> None:
            for key in keys:
                if key in chan:
                    deps[node].append(chan[key])
                chan[key] = node

        for a, c, i in stage_actions(x.schedule, x.pp, s, x.m, x.v):
            fwd = a == "F"
            span = x.f_span[s, c] if fwd else x.b_span[s, c]
            cpu = x.f_compute[s, c] if fwd else x.b_compute[s, c]
            pieces = x.buckets if (not fwd and i == x.m - 1 and x.buckets and x.bucket_s > 0) else 1
            first = -1
            for _ in range(pieces):
                prev = add(span / pieces, cpu / pieces, TASK, s, [prev] if prev >= 0 else [])
                first = prev if first < 0 else first
                if pieces > 1:
                    on_channels(add(x.bucket_s, 0.0, GRAD, s, [prev]), grad_keys)
            entry[(a, s, c, i)] = first
            nxt = _consumer(a, s, c, i, x.pp, x.v)
            t = (x.p2p_fwd if fwd else x.p2p_bwd)[s]
            if nxt is not None:
                node = add(float(t), 0.0, P2P, s, [prev])
                on_channels(node, [(d, "f" if fwd else "b") for d in x.pp_dims])
                incoming[nxt] = node
        opt_deps = [prev] + [chan[k] for k in grad_keys if k in chan]
        opt = add(float(x.optimizer_s[s]), float(x.optimizer_s[s]), OPT, s, opt_deps)
        if x.param_gather_s > 0:
            on_channels(add(x.param_gather_s, 0.0, PARAM, s, [opt]), grad_keys)
    for key, node in incoming.items():
        deps[entry[key]].append(node)
    ptr = np.zeros(len(dur) + 1, np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    idx = np.fromiter((j for d in deps for j in d), np.int64, count=int(ptr[-1]))
    return PipelineGraph(np.asarray(dur, float), np.asarray(comp, float), np.asarray(kind, np.int8),
                         np.asarray(stage, np.int32), ptr, idx)

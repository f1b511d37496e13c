"""Name the nodes of a replayed pipeline DAG, for timelines.

The pipeline graph stores only what the longest path needs (durations, kinds, stages, dependencies). A
timeline also wants to say which (direction, chunk, micro-batch) a task is, and which action a send or a
gradient bucket belongs to. Both builders emit a stage's nodes contiguously in its program order
(`graph.schedules.stage_actions`): the task pieces of one action (a last backward split into gradient
buckets alternates task, bucket, task, ...), then its send, and after the last action the optimizer and
the parameter gather. So a task node starts a new action unless it directly follows a bucket of the
same stage; every other node belongs to the action before it. Nothing here changes a number.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rapidllm.graph.pipeline_dag import GRAD, KIND_NAMES, OPT, P2P, PARAM, TASK, PipelineGraph, PipelineInputs
from rapidllm.graph.schedules import stage_actions

__all__ = ["GRAD", "KIND_NAMES", "OPT", "P2P", "PARAM", "TASK", "NodeLabel", "node_labels"]


@dataclass(frozen=True)
class NodeLabel:
    """The action a node belongs to: direction "F" / "B" ("" for the optimizer and the parameter gather),
    model chunk, micro-batch, and which piece of the action's task it is (0-based, of `pieces`)."""
    direction: str
    chunk: int
    micro_batch: int
    piece: int = 0
    pieces: int = 1


def node_labels(x: PipelineInputs, g: PipelineGraph) -> list[NodeLabel]:
    """One label per node of `g` (built from `x`), in node order.

    Raises ValueError when the graph does not follow the builders' emission order (a bug, not bad input).
    """
    labels: list[NodeLabel | None] = [None] * len(g)
    kind, stage = np.asarray(g.kind), np.asarray(g.stage)
    for s in range(x.pp):
        nodes = np.flatnonzero(stage == s)
        actions = list(stage_actions(x.schedule, x.pp, s, x.m, x.v))
        k, piece, prev_kind = -1, 0, -1
        for n in nodes.tolist():
            if kind[n] == TASK:
                if prev_kind == GRAD:
                    piece += 1
                else:
                    k, piece = k + 1, 0
                a, c, i = actions[k]
                labels[n] = NodeLabel(a, c, i, piece)
            elif kind[n] in (OPT, PARAM) or k < 0:
                labels[n] = NodeLabel("", -1, -1)
            else:
                a, c, i = actions[k]
                labels[n] = NodeLabel(a, c, i, piece)
            prev_kind = kind[n]
        if k + 1 != len(actions):
            raise ValueError(f"stage {s}: {k + 1} task groups in the graph, {len(actions)} scheduled actions")
    pieces: dict[tuple[int, str, int, int], int] = {}
    for n, lab in enumerate(labels):
        if lab is not None and kind[n] == TASK:
            key = (int(stage[n]), lab.direction, lab.chunk, lab.micro_batch)
            pieces[key] = max(pieces.get(key, 0), lab.piece + 1)
    out = []
    for n, lab in enumerate(labels):
        assert lab is not None
        total = pieces.get((int(stage[n]), lab.direction, lab.chunk, lab.micro_batch), 1)
        out.append(NodeLabel(lab.direction, lab.chunk, lab.micro_batch, lab.piece, total))
    return out

"""What a pipeline schedule name means: the order in which one stage runs its forwards and backwards.

GPipe runs all forwards then all backwards; 1F1B (PipeDream-Flush, Narayanan et al. 2021) warms up with
p-s-1 forwards then alternates one forward, one backward; interleaved 1F1B (Megatron-LM's virtual pipeline)
warms up with 2(p-s-1) + (v-1)p forwards of model chunks, then alternates. This order is written once,
here; the memory walk (memory/model.py) and the pipeline graph (graph/schedules.py) both read it, and
tests/reference_impls.py restates it in plain Python for the tests.
"""
from __future__ import annotations

import numpy as np

from rapidllm.jit import njit

# Which branch of the order applies (`schedule_code`).
ONE_STAGE, GPIPE, ONE_F_ONE_B, INTERLEAVED = 0, 1, 2, 3


def schedule_code(schedule: str, pp: int, v: int) -> int:
    """The order's branch for a schedule name, pp stages and v model chunks per stage."""
    if pp == 1:
        return ONE_STAGE
    if schedule == "gpipe":
        return GPIPE
    return ONE_F_ONE_B if v == 1 else INTERLEAVED


@njit(cache=True, work=lambda code, pp, stage, m, v: 2 * m * v)
def action_order(code: int, pp: int, stage: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """Stage `stage`'s actions in order as (direction, index) arrays: direction 0 = forward, 1 = backward;
    index = which of the stage's forwards (or backwards) it is, counting from 0. A forward index is a
    micro-batch (one stage, 1F1B), chunk x m + micro-batch (GPipe) or a virtual micro-batch (interleaved:
    chunks walk micro-batches in groups of pp); graph/schedules.py maps it to (chunk, micro-batch)."""
    n = 2 * m if code == ONE_STAGE else 2 * m * v
    d = np.empty(n, np.int64)
    idx = np.empty(n, np.int64)
    k = 0
    if code == ONE_STAGE:
        for i in range(m):
            d[k], idx[k] = 0, i
            d[k + 1], idx[k + 1] = 1, i
            k += 2
    elif code == GPIPE:
        for i in range(m * v):
            d[k], idx[k] = 0, i
            k += 1
        for i in range(m * v):
            d[k], idx[k] = 1, i
            k += 1
    else:
        total = m * v
        warm = (pp - stage - 1) * 2 + (v - 1) * pp if code == INTERLEAVED else pp - stage - 1
        warm = min(warm, total)
        for i in range(warm):
            d[k], idx[k] = 0, i
            k += 1
        f = warm
        for b in range(total):
            if f < total:
                d[k], idx[k] = 0, f
                k += 1
                f += 1
            d[k], idx[k] = 1, b
            k += 1
    return d[:k], idx[:k]

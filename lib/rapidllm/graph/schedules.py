"""Pipeline schedules: the ordered (kind, chunk, micro-batch) actions each stage runs.

GPipe runs all forwards then all backwards; 1F1B (PipeDream-Flush, Narayanan et al. 2021) warms up with
p-s-1 forwards then alternates; interleaved 1F1B splits each stage into v model chunks and walks
micro-batches in groups of p (Megatron-LM's virtual-pipeline order). The engine needs only the order per
stage: the dependencies between stages follow from (chunk, micro-batch).
"""
from __future__ import annotations

import numpy as np
from numba import njit

Action = tuple[str, int, int]      # ("F" | "B", chunk, micro-batch)


def _virtual(k: int, pp: int, v: int, forward: bool) -> tuple[int, int]:
    """(chunk, micro-batch) of the k-th virtual micro-batch of a stage under interleaving."""
    group, within = divmod(k, pp * v)
    chunk = within // pp
    if not forward:
        chunk = v - 1 - chunk
    return chunk, group * pp + within % pp


def stage_actions(schedule: str, pp: int, stage: int, m: int, v: int = 1) -> list[Action]:
    """Ordered actions of `stage`; v > 1 only for the interleaved schedule (needs m % pp == 0)."""
    if pp == 1:
        return [a for i in range(m) for a in (("F", 0, i), ("B", 0, i))]
    if schedule == "gpipe":
        return [("F", c, i) for c in range(v) for i in range(m)] + \
               [("B", c, i) for c in reversed(range(v)) for i in range(m)]
    if v == 1:
        warm = min(pp - stage - 1, m)
        out: list[Action] = [("F", 0, i) for i in range(warm)]
        for i in range(m - warm):
            out += [("F", 0, warm + i), ("B", 0, i)]
        out += [("B", 0, i) for i in range(m - warm, m)]
        return out
    total = m * v
    warm = min((pp - stage - 1) * 2 + (v - 1) * pp, total)
    out = [("F", *_virtual(k, pp, v, True)) for k in range(warm)]
    f = warm
    for b in range(total):
        if f < total:
            out.append(("F", *_virtual(f, pp, v, True)))
            f += 1
        out.append(("B", *_virtual(b, pp, v, False)))
    return out


def interleaving(schedule: str, pp: int, virtual_stages: int, m: int) -> int:
    """Model chunks per stage actually used (interleaving needs pp > 1 and m divisible by pp)."""
    if schedule == "interleaved" and pp > 1 and virtual_stages > 1 and m % pp == 0:
        return virtual_stages
    return 1


# ---- array form for the numba pipeline builder (graph/pipeline_dag.py) --------------------------------------
# Schedule codes: which branch of `stage_actions` applies. Actions come back as three int64 arrays
# (direction 0 = F / 1 = B, chunk, micro-batch), in the same order as `stage_actions`.
ONE_STAGE, GPIPE, ONE_F_ONE_B, INTERLEAVED = 0, 1, 2, 3


def schedule_code(schedule: str, pp: int, v: int) -> int:
    if pp == 1:
        return ONE_STAGE
    if schedule == "gpipe":
        return GPIPE
    return ONE_F_ONE_B if v == 1 else INTERLEAVED


@njit(cache=True)
def stage_actions_array(code: int, pp: int, stage: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`stage_actions` as arrays (direction, chunk, micro-batch); `code` from `schedule_code`."""
    n = 2 * m if code == ONE_STAGE else 2 * m * v
    d = np.empty(n, np.int64)
    ch = np.empty(n, np.int64)
    mb = np.empty(n, np.int64)
    k = 0
    if code == ONE_STAGE:
        for i in range(m):
            d[k], ch[k], mb[k] = 0, 0, i
            d[k + 1], ch[k + 1], mb[k + 1] = 1, 0, i
            k += 2
    elif code == GPIPE:
        for c in range(v):
            for i in range(m):
                d[k], ch[k], mb[k] = 0, c, i
                k += 1
        for c in range(v - 1, -1, -1):
            for i in range(m):
                d[k], ch[k], mb[k] = 1, c, i
                k += 1
    elif code == ONE_F_ONE_B:
        warm = min(pp - stage - 1, m)
        for i in range(warm):
            d[k], ch[k], mb[k] = 0, 0, i
            k += 1
        for i in range(m - warm):
            d[k], ch[k], mb[k] = 0, 0, warm + i
            d[k + 1], ch[k + 1], mb[k + 1] = 1, 0, i
            k += 2
        for i in range(m - warm, m):
            d[k], ch[k], mb[k] = 1, 0, i
            k += 1
    else:
        total = m * v
        warm = min((pp - stage - 1) * 2 + (v - 1) * pp, total)
        f = 0
        for f in range(warm):
            group, within = divmod(f, pp * v)
            d[k], ch[k], mb[k] = 0, within // pp, group * pp + within % pp
            k += 1
        f = warm
        for b in range(total):
            if f < total:
                group, within = divmod(f, pp * v)
                d[k], ch[k], mb[k] = 0, within // pp, group * pp + within % pp
                k += 1
                f += 1
            group, within = divmod(b, pp * v)
            d[k], ch[k], mb[k] = 1, v - 1 - within // pp, group * pp + within % pp
            k += 1
    return d[:k], ch[:k], mb[:k]

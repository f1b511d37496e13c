"""Pipeline schedules as the pipeline graph needs them: the ordered (kind, chunk, micro-batch) actions each
stage runs.

The order itself (GPipe, 1F1B, interleaved 1F1B) is `spec.schedule.action_order`, shared with the memory
walk; this module maps each action's index to the model chunk and micro-batch it works on. The engine needs
only the order per stage: the dependencies between stages follow from (chunk, micro-batch).
"""
from __future__ import annotations

import numpy as np

from rapidllm.jit import njit
from rapidllm.spec.schedule import GPIPE, INTERLEAVED, ONE_F_ONE_B, ONE_STAGE, action_order, schedule_code

__all__ = ["GPIPE", "INTERLEAVED", "ONE_F_ONE_B", "ONE_STAGE", "Action", "interleaving", "schedule_code",
           "stage_actions", "stage_actions_array"]

Action = tuple[str, int, int]      # ("F" | "B", chunk, micro-batch)


def stage_actions(schedule: str, pp: int, stage: int, m: int, v: int = 1) -> list[Action]:
    """Ordered actions of `stage`; v > 1 only for the interleaved schedule (needs m % pp == 0)."""
    d, ch, mb = stage_actions_array(schedule_code(schedule, pp, v), pp, stage, m, v)
    return [("B" if x else "F", c, i) for x, c, i in zip(d.tolist(), ch.tolist(), mb.tolist())]


def interleaving(schedule: str, pp: int, virtual_stages: int, m: int) -> int:
    """Model chunks per stage actually used (interleaving needs pp > 1 and m divisible by pp)."""
    if schedule == "interleaved" and pp > 1 and virtual_stages > 1 and m % pp == 0:
        return virtual_stages
    return 1


@njit(cache=True, work=lambda code, pp, stage, m, v: 2 * m * v)
def stage_actions_array(code: int, pp: int, stage: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`stage_actions` as arrays (direction 0 = F / 1 = B, chunk, micro-batch); `code` from `schedule_code`."""
    d, idx = action_order(code, pp, stage, m, v)
    ch = np.zeros(len(d), np.int64)
    mb = idx.copy()
    if code == GPIPE:
        for k in range(len(d)):
            c = idx[k] // m
            ch[k] = v - 1 - c if d[k] == 1 else c
            mb[k] = idx[k] % m
    elif code == INTERLEAVED:
        for k in range(len(d)):
            group, within = divmod(idx[k], pp * v)
            c = within // pp
            ch[k] = v - 1 - c if d[k] == 1 else c
            mb[k] = group * pp + within % pp
    return d, ch, mb

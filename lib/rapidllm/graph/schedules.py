"""Pipeline schedules: the ordered (kind, chunk, micro-batch) actions each stage runs.

GPipe runs all forwards then all backwards; 1F1B (PipeDream-Flush, Narayanan et al. 2021) warms up with
p-s-1 forwards then alternates; interleaved 1F1B splits each stage into v model chunks and walks
micro-batches in groups of p (Megatron-LM's virtual-pipeline order). The engine needs only the order per
stage: the dependencies between stages follow from (chunk, micro-batch).
"""
from __future__ import annotations

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

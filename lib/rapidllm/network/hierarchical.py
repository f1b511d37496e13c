"""Hierarchical multi-dimensional collectives (innermost dimension first).

all_reduce over a group spanning dimensions d0 < d1 < ...: reduce-scatter along d0 (ring within each d0
line of the group), all_reduce of the 1/n0 shard across the remaining dimensions (recursively), all-gather
along d0. reduce_scatter: d0 then the rest; all_gather: the rest then d0. Stages are joined per rank and
chunk (collectives.sequence), so chunks pipeline across stages. Groups that are not a full sub-grid of the
fabric fall back to a flat ring.
"""
from __future__ import annotations

from rapidllm.network.collectives import Schedule, concat, ring_collective, sequence
from rapidllm.network.topology import Topology


def _split(topo: Topology, ranks: list[int], d: int) -> tuple[list[list[int]], list[list[int]]] | None:
    """(inner groups along d, outer groups with fixed d-coordinate), or None if not a full sub-grid."""
    inner: dict[tuple, list[int]] = {}
    outer: dict[int, list[int]] = {}
    for r in ranks:
        c = topo.coords(r)
        inner.setdefault(c[:d] + c[d + 1:], []).append(r)
        outer.setdefault(c[d], []).append(r)
    ins = [sorted(g, key=lambda r: topo.coords(r)[d]) for _, g in sorted(inner.items())]
    outs = [g for _, g in sorted(outer.items())]
    if len({len(g) for g in ins}) != 1 or len({len(g) for g in outs}) != 1:
        return None
    if len(ins) * len(ins[0]) != len(ranks):
        return None
    return ins, outs


def spanned(topo: Topology, ranks: list[int]) -> list[int]:
    cs = [topo.coords(r) for r in ranks]
    return [d for d in range(len(topo.sizes)) if len({c[d] for c in cs}) > 1]


def hierarchical(op: str, topo: Topology, ranks: list[int], nbytes: float, chunks: int) -> Schedule:
    """Schedule for `op` in {all_reduce, reduce_scatter, all_gather} over a multi-dimensional group."""
    if op not in ("all_reduce", "reduce_scatter", "all_gather"):
        raise ValueError(f"hierarchical does not implement {op}")
    dims = spanned(topo, ranks)
    if len(dims) <= 1:
        return ring_collective(op, ranks, nbytes, chunks)
    parts = _split(topo, ranks, dims[0])
    if parts is None:
        return ring_collective(op, ranks, nbytes, chunks)
    ins, outs = parts
    n0 = len(ins[0])
    shard = nbytes / n0

    def inner(kind: str) -> Schedule:
        return concat([ring_collective(kind, g, nbytes, chunks) for g in ins])

    def outer(kind: str) -> Schedule:
        return concat([hierarchical(kind, topo, g, shard, chunks) for g in outs])

    if op == "all_reduce":
        return sequence(sequence(inner("reduce_scatter"), outer("all_reduce")), inner("all_gather"))
    if op == "reduce_scatter":
        return sequence(inner("reduce_scatter"), outer("reduce_scatter"))
    return sequence(outer("all_gather"), inner("all_gather"))

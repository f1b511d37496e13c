"""Hierarchical multi-dimensional collectives (innermost dimension first).

all_reduce over a group spanning dimensions d0 < d1 < ...: reduce-scatter along d0 (ring within each d0
line of the group), all_reduce of the 1/n0 shard across the remaining dimensions (recursively), all-gather
along d0. reduce_scatter: d0 then the rest; all_gather: the rest then d0. Stages are joined per rank and
chunk (collectives.sequence), so chunks pipeline across stages. Groups that are not a full sub-grid of the
fabric fall back to a flat ring.
"""
from __future__ import annotations

import math

import numpy as np

from rapidllm.network.collectives import Schedule, concat, ring_collective, sequence
from rapidllm.network.topology import Topology


def rank_coords(topo: Topology, ranks) -> np.ndarray:
    """(len(ranks), dims) coordinates, innermost dimension first: `topo.coords` for every rank at once."""
    r = np.asarray(ranks, dtype=np.int64).reshape(-1)
    sizes = np.asarray(topo.sizes, dtype=np.int64)
    strides = np.array([math.prod(topo.sizes[:d]) for d in range(len(topo.sizes))], dtype=np.int64)
    return (r[:, None] // strides[None, :]) % sizes[None, :]


def _split(topo: Topology, ranks, d: int, coords: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray] | None:
    """(inner groups along d, outer groups with fixed d-coordinate) as (groups, members) rank matrices, or
    None if not a full sub-grid. Inner groups are ordered by their other coordinates (lexicographically,
    innermost first) with members by coordinate d; outer groups by coordinate d with members in `ranks`
    order (stable sorts throughout, as the rank-by-rank definition `_split_reference`)."""
    r = np.asarray(ranks, dtype=np.int64).reshape(-1)
    c = rank_coords(topo, r) if coords is None else coords
    others = [i for i in range(c.shape[1]) if i != d]
    order = np.lexsort([c[:, d]] + [c[:, i] for i in reversed(others)])
    key = c[order][:, others]
    change = np.flatnonzero((key[1:] != key[:-1]).any(axis=1)) + 1
    sizes_in = np.diff(np.concatenate(([0], change, [len(r)])))
    oorder = np.argsort(c[:, d], kind="stable")
    od = c[oorder, d]
    ochange = np.flatnonzero(od[1:] != od[:-1]) + 1
    sizes_out = np.diff(np.concatenate(([0], ochange, [len(r)])))
    if np.any(sizes_in != sizes_in[0]) or np.any(sizes_out != sizes_out[0]):
        return None
    return r[order].reshape(len(sizes_in), -1), r[oorder].reshape(len(sizes_out), -1)


def _split_reference(topo: Topology, ranks: list[int], d: int) -> tuple[list[list[int]], list[list[int]]] | None:
    """`_split` rank by rank (the definition; tests compare)."""
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


def _spanned(coords: np.ndarray) -> list[int]:
    if not len(coords):
        return []
    return np.flatnonzero((coords != coords[0]).any(axis=0)).tolist()


def spanned(topo: Topology, ranks) -> list[int]:
    """Dimensions along which the ranks' coordinates differ."""
    return _spanned(rank_coords(topo, ranks))


def spanned_grid(coords: np.ndarray) -> tuple[list[int], list[int]] | None:
    """(dimensions spanned, innermost first; the group's size along each) when a group, given by its rank
    coordinates, spans several dimensions as a full sub-grid of them, which the hierarchical schedule runs
    over stage by stage; None otherwise (one dimension, or not a sub-grid: the schedule is a flat ring)."""
    dims = _spanned(coords)
    if len(dims) < 2:
        return None
    sizes = [len(np.unique(coords[:, d])) for d in dims]
    return (dims, sizes) if math.prod(sizes) == len(coords) else None


def hierarchical(op: str, topo: Topology, ranks: list[int], nbytes: float, chunks: int) -> Schedule:
    """Schedule for `op` in {all_reduce, reduce_scatter, all_gather} over a multi-dimensional group."""
    if op not in ("all_reduce", "reduce_scatter", "all_gather"):
        raise ValueError(f"hierarchical does not implement {op}")
    coords = rank_coords(topo, ranks)
    dims = _spanned(coords)
    if len(dims) <= 1:
        return ring_collective(op, ranks, nbytes, chunks)
    parts = _split(topo, ranks, dims[0], coords)
    if parts is None:
        return ring_collective(op, ranks, nbytes, chunks)
    ins, outs = parts
    n0 = len(ins[0])
    shard = nbytes / n0

    def inner(kind: str) -> Schedule:
        return concat([ring_collective(kind, g, nbytes, chunks) for g in ins])

    def outer(kind: str) -> Schedule:
        if len(dims) == 2:      # an outer group varies along dims[1] alone: hierarchical() would give its ring
            return concat([ring_collective(kind, g, shard, chunks) for g in outs])
        return concat([hierarchical(kind, topo, g, shard, chunks) for g in outs])

    if op == "all_reduce":
        return sequence(sequence(inner("reduce_scatter"), outer("all_reduce")), inner("all_gather"))
    if op == "reduce_scatter":
        return sequence(inner("reduce_scatter"), outer("reduce_scatter"))
    return sequence(outer("all_gather"), inner("all_gather"))

"""Build an N-dimensional fabric link by link into plain numpy arrays.

Node ids: ranks are 0..n_ranks-1 (a rank's per-dimension coordinates are its id decoded innermost
dimension first); switch nodes follow, numbered dimension by dimension, line by line (see `switch_node`).
A *line* of dimension d is the set of ranks that agree on every coordinate except d; each line gets its
own copy of the dimension's base topology. Every link is directed; physical cables are two links.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rapidllm.spec.errors import SpecError
from rapidllm.spec.network import (DEFAULT_CHUNK_BYTES, DimensionSpec, FatTreePlan, FaultSpec, NetworkSpec,
                                   grid_shape, line_cables)

__all__ = ["TOPOLOGIES", "Topology", "build_topology", "apply_faults", "grid_shape"]

TOPOLOGIES = ("ring", "fully_connected", "switch", "mesh", "torus", "kingmesh", "fat_tree")


@dataclass
class Topology:
    """Links as parallel arrays (src, dst, bandwidth B/s, latency s, dimension, alive) plus naming helpers."""

    name: str
    dims: tuple[DimensionSpec, ...]
    sizes: tuple[int, ...]
    n_ranks: int
    n_nodes: int
    src: np.ndarray
    dst: np.ndarray
    bandwidth: np.ndarray
    latency: np.ndarray
    dim: np.ndarray
    alive: np.ndarray
    switches: dict[tuple[int, str, int, int], int] = field(default_factory=dict)
    switch_labels: dict[int, str] = field(default_factory=dict)
    fat_tree: dict[int, dict] = field(default_factory=dict)   # dim -> {leaf_of: {rank: leaf},
    #                                                                port_of: {rank: down-port of its leaf}, spines: [...]}
    link_of: dict[tuple[int, int], int] = field(default_factory=dict)
    chunk_bytes: float = DEFAULT_CHUNK_BYTES   # the network's collective chunk size (NetworkSpec.chunk_bytes)
    # rank -> coordinates asked so far (routing asks them several times per route)
    _coords: dict[int, tuple[int, ...]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_links(self) -> int:
        return len(self.src)

    def coords(self, rank: int) -> tuple[int, ...]:
        """Per-dimension coordinates of `rank`, innermost dimension first."""
        hit = self._coords.get(rank)
        if hit is None:
            out, r = [], int(rank)
            for s in self.sizes:
                out.append(r % s)
                r //= s
            hit = self._coords[rank] = tuple(out)
        return hit

    def rank_of(self, coords: tuple[int, ...] | list[int]) -> int:
        rank, stride = 0, 1
        for c, s in zip(coords, self.sizes):
            rank += c * stride
            stride *= s
        return rank

    def line_of(self, rank: int, d: int) -> int:
        """Index of the dimension-d line holding `rank` (other coordinates flattened, innermost first)."""
        c = list(self.coords(rank))
        del c[d]
        sizes = [s for i, s in enumerate(self.sizes) if i != d]
        line, stride = 0, 1
        for ci, s in zip(c, sizes):
            line += ci * stride
            stride *= s
        return line

    def with_coord(self, rank: int, d: int, value: int) -> int:
        c = list(self.coords(rank))
        c[d] = value
        return self.rank_of(c)

    def switch_node(self, dim: int, kind: str = "switch", index: int = 0, line: int = 0) -> int:
        """Global node id of a switch: kind 'switch' (one per line), 'leaf' or 'spine' (fat tree).

        Spines are shared by all lines of their dimension (use line=0); leaves are per line when the fat
        tree is rail-optimized and shared (line=0) otherwise.
        """
        key = (dim, kind, line, index)
        if key not in self.switches:
            known = sorted({(k[0], k[1]) for k in self.switches})
            raise KeyError(f"no {kind} {index} on line {line} of dimension {dim}; switches exist for {known}")
        return self.switches[key]

    def node_name(self, node: int) -> str:
        if node < self.n_ranks:
            return f"rank {node}"
        return f"{self.switch_labels.get(node, 'switch')} (node {node})"

    def link_name(self, link: int) -> str:
        d = int(self.dim[link])
        return (f"{self.node_name(int(self.src[link]))} -> {self.node_name(int(self.dst[link]))} "
                f"[{self.dims[d].name} {self.dims[d].topology}]")


class _Builder:
    def __init__(self) -> None:
        self.src: list[int] = []
        self.dst: list[int] = []
        self.bw: list[float] = []
        self.lat: list[float] = []
        self.dim: list[int] = []

    def both(self, a: int, b: int, bw: float, lat: float, d: int) -> None:
        for s, t in ((a, b), (b, a)):
            self.src.append(s)
            self.dst.append(t)
            self.bw.append(bw)
            self.lat.append(lat)
            self.dim.append(d)


def _line_members(sizes: tuple[int, ...], d: int) -> list[list[int]]:
    """All dimension-d lines, each as the global rank ids ordered by their coordinate in d."""
    stride = math.prod(sizes[:d])
    inner, outer = stride, math.prod(sizes[d + 1:])
    lines = []
    for o in range(outer):
        for i in range(inner):
            base = o * stride * sizes[d] + i
            lines.append([base + k * stride for k in range(sizes[d])])
    return lines


def _add_switch(topo_sw: dict, labels: dict, key: tuple[int, str, int, int], label: str, next_id: int) -> int:
    topo_sw[key] = next_id
    labels[next_id] = label
    return next_id


def build_topology(net: NetworkSpec) -> Topology:
    """All links of every dimension, with the network's faults applied (see docs/network.md)."""
    sizes = tuple(d.size for d in net.dimensions)
    if any(s <= 0 for s in sizes):
        raise SpecError(f"network {net.name!r}: a dimension's size is unresolved ('auto'); call sized_for(world)")
    n_ranks = math.prod(sizes)
    b = _Builder()
    switches: dict[tuple[int, str, int, int], int] = {}
    labels: dict[int, str] = {}
    fat: dict[int, dict] = {}
    nxt = n_ranks
    for d, dim in enumerate(net.dimensions):
        if dim.topology not in TOPOLOGIES:
            raise SpecError(f"network {net.name!r}: {dim.name}: unknown topology {dim.topology!r}; "
                            f"allowed: {', '.join(TOPOLOGIES)}")
        lines = _line_members(sizes, d)
        bw, lat, n = dim.link_bandwidth, dim.latency_s, dim.size
        if dim.topology == "fat_tree":
            nxt = _build_fat_tree(b, d, dim, lines, switches, labels, fat, nxt)
            continue
        try:
            cables = line_cables(dim.topology, n, dim.shape)
        except SpecError as err:
            raise SpecError(f"{dim.name}: {err}") from None
        for li, m in enumerate(lines):
            if dim.topology == "switch":
                s = _add_switch(switches, labels, (d, "switch", li, 0), f"{dim.name} switch line {li}", nxt)
                nxt += 1
                for r in m:
                    b.both(r, s, bw, lat, d)
            for i, j in cables:
                b.both(m[i], m[j], bw, lat, d)
    topo = Topology(
        name=net.name, dims=net.dimensions, sizes=sizes, n_ranks=n_ranks, n_nodes=nxt,
        src=np.array(b.src, dtype=np.int32), dst=np.array(b.dst, dtype=np.int32),
        bandwidth=np.array(b.bw, dtype=np.float64), latency=np.array(b.lat, dtype=np.float64),
        dim=np.array(b.dim, dtype=np.int32), alive=np.ones(len(b.src), dtype=bool),
        switches=switches, switch_labels=labels, fat_tree=fat, chunk_bytes=net.chunk_bytes)
    topo.link_of = dict(zip(zip(topo.src.tolist(), topo.dst.tolist()), range(len(topo.src))))
    apply_faults(topo, net.faults)
    return topo


def _build_fat_tree(b: _Builder, d: int, dim: DimensionSpec, lines: list[list[int]], switches: dict,
                    labels: dict, fat: dict, nxt: int) -> int:
    """Two-level fat tree: ranks -> leaves -> spines, non-blocking (leaf uplinks sum to its downlinks).

    rail_optimized (or a single line): each line (rail) has its own leaves, `leaf_size` ranks each.
    Otherwise leaves are shared: leaf j holds every line's ranks whose coordinate lies in one block of
    leaf_size // lines. Spines (default: one per leaf) are shared by all lines; with one leaf per rail and
    no explicit spines there are none.
    """
    n_lines = len(lines)
    plan = FatTreePlan.of(dim, n_lines)
    rail, per_leaf, n_spine = plan.rail, plan.per_leaf, plan.spines
    leaf_of: dict[int, int] = {}
    port_of: dict[int, int] = {}
    leaves: set[int] = set()
    for li, m in enumerate(lines):
        for k, r in enumerate(m):
            key = (d, "leaf", li if rail else 0, k // per_leaf)
            if key not in switches:
                _add_switch(switches, labels, key, f"{dim.name} leaf {key[3]}" + (f" rail {li}" if rail else ""), nxt)
                nxt += 1
            leaf = switches[key]
            leaf_of[r] = leaf
            port_of[r] = k % per_leaf if rail else (k % per_leaf) * n_lines + li
            leaves.add(leaf)
            b.both(r, leaf, dim.link_bandwidth, dim.latency_s, d)
    spines = []
    for s in range(n_spine):
        spines.append(_add_switch(switches, labels, (d, "spine", 0, s), f"{dim.name} spine {s}", nxt))
        nxt += 1
    # every uplink is a cable of the switch's design: a leaf built for `design` ranks splits their bandwidth
    # over the spines (non-blocking when full), and a partly populated leaf (the last scalable unit of a
    # fabric that is not a whole number of them) keeps those full-rate cables; scaling them by the ranks
    # attached made one flow out of a 4-node leaf of a 20-spine tree run at 1/5 of its NIC rate
    design = per_leaf * (1 if rail else n_lines)
    for leaf in sorted(leaves):
        for sp in spines:
            b.both(leaf, sp, dim.link_bandwidth * design / n_spine, dim.latency_s, d)
    fat[d] = {"leaf_of": leaf_of, "port_of": port_of, "spines": spines}
    return nxt


def cables_of(topo: Topology, node: int) -> list[tuple[int, int]]:
    """(peer, dimension) of every cable at `node`, by peer id: what a fault may name as [node, peer]."""
    return sorted({t: int(topo.dim[i]) for (s, t), i in topo.link_of.items() if s == node}.items())


def _cables_of(topo: Topology, node: int, most: int = 6) -> str:
    """'; rank 0's cables: [0, 64] to nvlink switch line 0, ...' for a fault error: a command-line user has
    no other way to find the id of a rank's switch (docs/network.md numbers them, but by formula)."""
    peers = [t for t, _ in cables_of(topo, node)]
    if not peers:
        return ""
    shown = ", ".join(f"[{node}, {t}] to {topo.switch_labels.get(t, f'rank {t}')}" for t in peers[:most])
    more = f" and {len(peers) - most} more" if len(peers) > most else ""
    return f"; {topo.node_name(node)}'s cables: {shown}{more}"


def apply_faults(topo: Topology, faults: tuple[FaultSpec, ...] | list[FaultSpec]) -> None:
    """Soft faults scale bandwidth and add latency; hard faults mark links dead. Both directions of a cable."""
    for k, f in enumerate(faults):
        a, c = f.link
        hits = [i for i in (topo.link_of.get((a, c)), topo.link_of.get((c, a)))
                if i is not None and (f.dimension is None or int(topo.dim[i]) == f.dimension)]
        if not hits:
            switches = (f"switches {topo.n_ranks}..{topo.n_nodes - 1}" if topo.n_nodes > topo.n_ranks
                        else "no switches")
            raise SpecError(f"network {topo.name!r}: faults.{k}: link [{a}, {c}] does not exist; endpoints are "
                            f"global node ids (ranks 0..{topo.n_ranks - 1}, {switches}){_cables_of(topo, a)}; "
                            "see docs/network.md")
        for i in hits:
            if f.failed:
                topo.alive[i] = False
            else:
                topo.bandwidth[i] *= f.bandwidth_factor
                topo.latency[i] += f.extra_latency_s

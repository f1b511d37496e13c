"""Rank <-> parallel coordinates <-> per-dimension network coordinates.

A rank's parallel coordinates (tp, cp, ep, dp, pp) are flattened in the network's `axis_order`, innermost
(fastest varying) first, giving the rank id; the rank id decoded with the dimension sizes (innermost first)
gives one coordinate per network dimension (RAPID-LLM §4.2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rapidllm.spec.errors import SpecError
from rapidllm.spec.network import NetworkSpec

AXES = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True)
class RankMapping:
    """Parallel layout on a network. `parallel` maps axis -> size (missing axes are 1)."""

    network: NetworkSpec
    parallel: dict[str, int]

    def __post_init__(self) -> None:
        bad = [a for a in self.parallel if a not in AXES]
        if bad:
            raise SpecError(f"unknown parallel axes {bad}; allowed: {', '.join(AXES)}")
        if self.world > self.network.total_size:
            raise SpecError(f"network {self.network.name!r} holds {self.network.total_size} ranks but the "
                            f"parallel layout needs {self.world}")

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(self.network.axis_order) + tuple(a for a in AXES if a not in self.network.axis_order)

    @property
    def world(self) -> int:
        return math.prod(self.size(a) for a in AXES)

    def size(self, axis: str) -> int:
        return int(self.parallel.get(axis, 1))

    def stride(self, axis: str) -> int:
        s = 1
        for a in self.order:
            if a == axis:
                return s
            s *= self.size(a)
        raise KeyError(axis)

    def rank(self, coords: dict[str, int]) -> int:
        """Rank id of the given parallel coordinates (missing axes are 0)."""
        return sum(int(coords.get(a, 0)) * self.stride(a) for a in self.order)

    def parallel_coords(self, rank: int) -> dict[str, int]:
        out = {}
        for a in self.order:
            out[a] = rank % self.size(a)
            rank //= self.size(a)
        return out

    def dim_coords(self, rank: int) -> tuple[int, ...]:
        """One coordinate per network dimension, innermost first."""
        out = []
        for d in self.network.dimensions:
            out.append(rank % d.size)
            rank //= d.size
        return tuple(out)

    def group_ranks(self, axis: str, rank: int) -> list[int]:
        """Ranks of `rank`'s `axis` group (same coordinates on every other axis), ordered by axis coordinate."""
        c = self.parallel_coords(rank)
        base = rank - c[axis] * self.stride(axis)
        return [base + k * self.stride(axis) for k in range(self.size(axis))]

    def stage_ranks(self, stage: int) -> np.ndarray:
        """Ranks of pipeline stage `stage`, ascending."""
        stride = self.stride("pp")
        if self.order[-1] == "pp":
            return np.arange(stage * stride, (stage + 1) * stride, dtype=np.int64)
        everyone = np.arange(self.world, dtype=np.int64)
        return everyone[(everyone // stride) % self.size("pp") == stage]

    def expert_groups(self, stage: int, ep: int, etp: int = 1) -> list[tuple[int, ...]]:
        """Expert-parallel groups of a stage. EP is carved out of the stage's tp x cp x dp ranks, so it is not
        an axis of the mapping: Megatron-Core's expert grid orders them etp, ep, edp, innermost first, so the
        ep ranks of a group lie `etp` apart in the stage (with etp = tp: one per TP group, the same TP rank
        of ep data-parallel replicas; with etp 1: consecutive ranks). Groups by block of ep x etp, then by
        expert-TP rank."""
        ranks = self.stage_ranks(stage).tolist()
        block = ep * etp
        return [tuple(ranks[b + j:b + block:etp]) for b in range(0, len(ranks), block) for j in range(etp)]

    def group_dimensions(self, axis: str, rank: int = 0) -> tuple[int, ...]:
        """Network dimensions (indices, innermost first) the `axis` group of `rank` spans."""
        return dims_spanned(self.network, self.group_ranks(axis, rank))


def dims_spanned(network: NetworkSpec, ranks: list[int]) -> tuple[int, ...]:
    """Dimensions in which the given ranks' coordinates differ."""
    sizes = [d.size for d in network.dimensions]
    coords = []
    for r in ranks:
        c = []
        for s in sizes:
            c.append(r % s)
            r //= s
        coords.append(c)
    return tuple(d for d in range(len(sizes)) if len({c[d] for c in coords}) > 1)

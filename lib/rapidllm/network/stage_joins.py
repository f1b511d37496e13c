"""The barriers between two stages of a collective (`collectives.sequence(first, second)`): which arrivals of
the first stage each barrier waits for and which barrier each transfer of the second waits for, listed
(`IndexJoin`, any two stages) or derived from the rings' shapes (`RingJoin`, ring stages at thousands of ranks,
without per-transfer arrays); and the ring geometry they share with collectives.py and the simulator
(`successors`). Plain numpy; network/decompose.py and network/plan.py read the joins' barrier times."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from rapidllm.network.collectives import Schedule


def successors(groups: np.ndarray) -> np.ndarray:
    """Destination of every ring position: `np.roll(groups, -1, axis=-1)` (rings along the last axis), without
    roll's argument handling (the simulator asks it for every ring it routes)."""
    return np.concatenate((groups[..., 1:], groups[..., :1]), axis=-1)


@dataclass(frozen=True, eq=False)
class Join:
    """The barriers of `sequence(first, second)`: barrier b is (rank uniq[b] // k, chunk uniq[b] % k), the
    sorted keys of second's (source, chunk); it waits for first's arrivals into its rank and chunk, and
    every transfer of `second` from that rank and chunk waits for it. `IndexJoin` lists the arrivals,
    `RingJoin` derives them from the rings' shapes. Transfer and barrier indices are int32, as dependency
    ids."""
    k: int
    uniq: np.ndarray

    @property
    def nb(self) -> int:
        """Barriers."""
        return len(self.uniq)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bar_ptr, bar_idx, inv): barrier b waits for first's transfers bar_idx[bar_ptr[b]:bar_ptr[b+1]]
        (ascending ids); transfer i of `second` waits for barrier inv[i]."""
        raise NotImplementedError

    def barriers(self, f1: np.ndarray, release: np.ndarray) -> np.ndarray:
        """Barrier times given first's finish times `f1` (in C order: decompose.simulate's `by_rows`): each
        its release, or the max of its arrivals' finish times (a max: exact in floating point, whatever
        the order it is taken in)."""
        raise NotImplementedError

    def second_release(self, release: np.ndarray | float, bars: np.ndarray) -> np.ndarray:
        """Release of every transfer of `second` (in C order): the max of its own (`release`, per transfer
        or one for all) and its barrier's time."""
        raise NotImplementedError

    def same(self, other: Join) -> bool:
        """Equal joins apart from the ranks (decompose.run_replicated's parts): equal index arrays."""
        a, b = self.arrays(), other.arrays()
        return (np.array_equal(self.uniq % self.k, other.uniq % other.k)
                and all(np.array_equal(x, y) for x, y in zip(a, b)))

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays a plan keeps alive with it (network/plan.py)."""
        return sum(a.nbytes for a in vars(self).values() if isinstance(a, np.ndarray))


@dataclass(frozen=True, eq=False)
class IndexJoin(Join):
    """A join with its arrivals listed (`Join.arrays`)."""
    bar_ptr: np.ndarray
    bar_idx: np.ndarray
    inv: np.ndarray

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.bar_ptr, self.bar_idx, self.inv

    def barriers(self, f1: np.ndarray, release: np.ndarray) -> np.ndarray:
        bars = release.copy()
        has = np.diff(self.bar_ptr) > 0
        if np.any(has):                  # segments are non-empty where has
            arrivals = np.ravel(f1)[self.bar_idx]
            bars[has] = np.maximum(bars[has], np.maximum.reduceat(arrivals, self.bar_ptr[:-1][has]))
        return bars

    def second_release(self, release: np.ndarray | float, bars: np.ndarray) -> np.ndarray:
        return np.maximum(release, bars[self.inv])


@dataclass(frozen=True, eq=False)
class RingJoin(Join):
    """A join of ring stages (`ring_joint`) kept as shapes: O(ranks x chunks) numbers where the listed
    arrivals and the second stage's barrier of every transfer are O(ranks x steps x chunks) (tens of
    millions at thousands of ranks). Unit u = (ring, chunk, position) of the first stage, numbered
    (ring * c1 + chunk) * n1 + position, is the only ring position sending into its rank: its transfers,
    one per step, are a barrier's arrivals. Ring k, chunk c, step t, position p is transfer
    ((k * chunks + c) * steps + t) * n + p (collectives.RingSchedule)."""
    unit: np.ndarray            # [nb] the first stage's unit sending into barrier b, -1: none
    first_shape: tuple          # (m1, c1, s1, n1): rings, chunks, steps, ranks of the first stage
    unit_inv: np.ndarray        # [m2, c2, n2] barrier of the second stage's ring k, chunk c, position p
    steps2: int                 # s2: steps of the second stage (its transfers wait alike at every step)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        _, _, s1, n1 = self.first_shape
        m2, c2, n2 = self.unit_inv.shape
        found = self.unit >= 0
        bar_ptr = np.zeros(self.nb + 1, dtype=np.int64)
        bar_ptr[1:] = np.cumsum(np.where(found, s1, 0))
        u = self.unit[found].astype(np.int64)
        start = ((u // n1) * s1 * n1 + u % n1).astype(np.int32)     # the unit's first transfer
        bar_idx = (start[:, None] + np.arange(0, s1 * n1, n1, dtype=np.int32)[None, :]).ravel()
        inv = np.broadcast_to(self.unit_inv.reshape(m2, c2, 1, n2), (m2, c2, self.steps2, n2)).ravel()
        return bar_ptr, bar_idx, inv

    def barriers(self, f1: np.ndarray, release: np.ndarray) -> np.ndarray:
        m1, c1, s1, n1 = self.first_shape
        # per unit, over its steps (a broadcast over the rings, decompose's replicas, stays one)
        latest = f1.reshape(m1, c1, s1, n1).max(axis=2).ravel()
        bars = release.copy()
        has = self.unit >= 0
        bars[has] = np.maximum(bars[has], latest[self.unit[has]])
        return bars

    def second_release(self, release: np.ndarray | float, bars: np.ndarray) -> np.ndarray:
        """As `Join.second_release`; with one release for all, a read-only broadcast over the steps, shape
        (m2, c2, s2, n2) (C order: transfer order; network/plan.py `rows`), made whole only for the rings
        a kernel runs."""
        m2, c2, n2 = self.unit_inv.shape
        shape = (m2, c2, self.steps2, n2)
        if not isinstance(release, np.ndarray):     # every step of a position waits for the same barrier
            return np.broadcast_to(np.maximum(release, bars[self.unit_inv])[:, :, None, :], shape)
        out = np.empty(shape)
        np.maximum(release.reshape(shape), bars[self.unit_inv][:, :, None, :], out=out)
        return out.ravel()

    def same(self, other: Join) -> bool:
        if not isinstance(other, RingJoin):
            return super().same(other)
        return (self.first_shape == other.first_shape and self.steps2 == other.steps2
                and np.array_equal(self.unit, other.unit) and np.array_equal(self.unit_inv, other.unit_inv)
                and np.array_equal(self.uniq % self.k, other.uniq % other.k))


def index_join(first: Schedule, second: Schedule) -> IndexJoin:
    """The join of `sequence(first, second)` from the stages' arrays."""
    k = int(max(first.chunk.max(), second.chunk.max())) + 1
    uniq, inv = np.unique(second.src.astype(np.int64) * k + second.chunk, return_inverse=True)
    fkey = first.dst.astype(np.int64) * k + first.chunk
    order = np.argsort(fkey, kind="stable")
    lo = np.searchsorted(fkey[order], uniq, side="left")
    hi = np.searchsorted(fkey[order], uniq, side="right")
    bar_ptr = np.zeros(len(uniq) + 1, dtype=np.int64)
    bar_ptr[1:] = np.cumsum(hi - lo)
    cnt = hi - lo                       # segments [lo, hi) are disjoint and ascending: gather them at once
    bar_idx = order[np.arange(int(cnt.sum())) + np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)].astype(np.int32)
    return IndexJoin(k, uniq, bar_ptr, bar_idx, inv.ravel().astype(np.int32))


def ring_joint(g1: np.ndarray, s1: int, c1: int, g2: np.ndarray, s2: int, c2: int) -> RingJoin | None:
    """The join of a first stage of rings `g1` ((m1, n1) groups, s1 steps, c1 chunks) and a second of rings
    `g2`, from these shapes alone, when every rank is the destination of at most one ring position of the
    first (then a barrier's arrivals are that position's transfers of its chunk, one per step, ascending:
    `RingJoin`); else None. network/plan.py recomputes it for other chunk counts."""
    dst = successors(g1).astype(np.int64).ravel()          # destination of each ring position
    if len(np.unique(dst)) != dst.size:
        return None
    k = max(c1, c2)
    (m1, n1), (m2, n2) = g1.shape, g2.shape
    keys = g2.astype(np.int64)[:, None, :] * k + np.arange(c2, dtype=np.int64)[None, :, None]   # (m2, c2, n2)
    uniq, unit_inv = np.unique(keys, return_inverse=True)
    # first's arrivals: unit (ring, chunk, position) with key dst * k + chunk
    fkeys = (dst.reshape(m1, 1, n1) * k + np.arange(c1, dtype=np.int64)[None, :, None]).ravel()
    order = np.argsort(fkeys)                                        # keys are distinct
    at = np.minimum(np.searchsorted(fkeys[order], uniq), fkeys.size - 1)
    unit = np.where(fkeys[order][at] == uniq, order[at], -1).astype(np.int32)
    return RingJoin(k, uniq, unit, (m1, c1, s1, n1), unit_inv.astype(np.int32).reshape(m2, c2, n2), s2)

"""Decompose collectives into point-to-point chunk schedules (plain arrays).

A schedule is a list of transfers in dependency order: transfer i moves nbytes[i] from rank src[i] to rank
dst[i] and may start only after every transfer in dep_idx[dep_ptr[i]:dep_ptr[i+1]] (all earlier ids) has
arrived. `chunk[i]` tells which of the C pipelined chunks the transfer carries. Sizes follow nccl-tests:
S is the per-rank buffer for all_reduce/broadcast/send_recv, the full (gathered) buffer for
reduce_scatter/all_gather, and the total a rank sends for all_to_all.

Algorithms (Thakur et al. 2005 for ring, direct and halving-doubling; Sanders et al. 2009 / NCCL for the
double binary tree). Each chunk runs the whole algorithm on S/C bytes; chunks pipeline through the FCFS
link queues.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rapidllm.jit import njit
from rapidllm.network.stage_joins import Join, RingJoin, index_join, ring_joint, successors


@dataclass
class Schedule:
    src: np.ndarray      # int32 rank ids
    dst: np.ndarray      # int32
    nbytes: np.ndarray   # float64
    chunk: np.ndarray    # int32
    dep_ptr: np.ndarray  # int64, len n+1
    dep_idx: np.ndarray  # int32, every entry < its transfer's id

    def __len__(self) -> int:
        return len(self.src)

    def deps(self, i: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[i]:self.dep_ptr[i + 1]]

    def check(self) -> None:
        """Raise ValueError unless every dependency points to an earlier transfer."""
        owner = np.repeat(np.arange(len(self.src)), np.diff(self.dep_ptr))
        if len(self.dep_ptr) != len(self.src) + 1 or np.any(self.dep_idx < 0) or np.any(self.dep_idx >= owner):
            raise ValueError("schedule dependencies must point to earlier transfers")


def from_lists(src: list[int], dst: list[int], nbytes: list[float], chunk: list[int],
               deps: list[list[int]]) -> Schedule:
    ptr = np.zeros(len(src) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    idx = np.array([j for d in deps for j in d], dtype=np.int32)
    return Schedule(np.array(src, dtype=np.int32), np.array(dst, dtype=np.int32),
                    np.array(nbytes, dtype=np.float64), np.array(chunk, dtype=np.int32), ptr, idx)


def empty() -> Schedule:
    return from_lists([], [], [], [], [])


def concat(parts: list[Schedule]) -> Schedule:
    """Independent schedules side by side (dependency ids shifted). A single part is returned as is (so a
    lazy RingSchedule keeps its fast path). Several parts give a `Deferred` schedule whose arrays are built
    field by field when read; parts of equal length are remembered as `_parts`, so `decompose.simulate`
    can simulate one of identical copies without building the whole, and lazy rings of one shape as
    `_rings` (`ring_shape`), so the simulator runs contending rings on its ring kernel."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty()
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    if type(first) is RingSchedule and not first.overridden:
        shape = (len(first.group), first.steps, first.chunks, first.size)
        if all(type(p) is RingSchedule and not p.overridden
               and (len(p.group), p.steps, p.chunks, p.size) == shape for p in parts):
            groups = np.stack([p.group for p in parts])
            out = Deferred(sum(len(p) for p in parts),
                           lambda name: _ring_groups_field(groups, first.steps, first.chunks, first.size, name))
            out._parts = tuple(parts)
            out._rings = (groups, first.steps, first.chunks, first.size)
            return out
    out = Deferred(sum(len(p) for p in parts), lambda name: _concat_field(parts, name))
    if all(len(p) == len(first) for p in parts):
        out._parts = tuple(parts)
    return out


def _concat_field(parts: list[Schedule], name: str) -> np.ndarray:
    """One array of the concatenation (the dtypes of `Schedule`; dependency ids shifted by the transfers
    and pointers by the dependencies before each part)."""
    if name == "dep_ptr":
        shift = np.cumsum([0] + [len(p.dep_idx) for p in parts[:-1]])
        return np.concatenate([np.zeros(1, np.int64)] + [p.dep_ptr[1:] + np.int64(d) for p, d in zip(parts, shift)]
                              ).astype(np.int64, copy=False)
    if name == "dep_idx":
        off = np.cumsum([0] + [len(p) for p in parts[:-1]])
        return np.concatenate([p.dep_idx.astype(np.int64) + np.int64(o) for p, o in zip(parts, off)]
                              ).astype(np.int32)
    dtype = np.float64 if name == "nbytes" else np.int32
    return np.concatenate([np.asarray(getattr(p, name)) for p in parts]).astype(dtype, copy=False)


def sequence(first: Schedule, second: Schedule) -> Schedule:
    """`second` after `first`, per rank and chunk: a zero-byte local barrier at (r, c) waits for every
    arrival of `first` into r for chunk c, and every transfer of `second` from r for chunk c waits for it."""
    if not len(first) or not len(second):
        return concat([first, second])
    ringed = _ring_joint(first, second)
    join = ringed or index_join(first, second)
    built: list[Schedule] = []

    def make(name: str) -> np.ndarray:
        if not built:
            built.append(_joined(first, second, join))
        return getattr(built[0], name)

    out = Deferred(len(first) + join.nb + len(second), make)
    # the stages and their join, for `decompose.simulate`
    out._sequence = (first, second, join)
    # the rings' (groups, steps) of both stages when the join came from them (network/plan.py: plans for
    # other chunk counts recompute it with ring_joint)
    a, b = ring_shape(first), ring_shape(second)
    out._joint_shapes = ((a[0], a[1]), (b[0], b[1])) if ringed else None
    return out


def _ring_joint(first: Schedule, second: Schedule) -> RingJoin | None:
    """The join from the ring shapes (ring_shape) of both stages, without their per-transfer arrays
    (`ring_joint`); None unless both stages are lazy rings and ring_joint applies."""
    a, b = ring_shape(first), ring_shape(second)
    if a is None or b is None:
        return None
    return ring_joint(a[0], a[1], a[2], b[0], b[1], b[2])


def _joined(first: Schedule, second: Schedule, join: Join) -> Schedule:
    """The arrays of `sequence(first, second)`: first, then the barriers, then second."""
    k, uniq = join.k, join.uniq
    bar_ptr, bar_idx, inv = join.arrays()
    bars = Schedule((uniq // k).astype(np.int32), (uniq // k).astype(np.int32), np.zeros(len(uniq)),
                    (uniq % k).astype(np.int32), bar_ptr, bar_idx - len(first))   # concat adds len(first)
    head = concat([first, bars])
    off, n2 = len(head), len(second)
    own = np.diff(second.dep_ptr)
    ptr = np.zeros(n2 + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(own + 1)
    idx = np.empty(int(ptr[-1]), dtype=np.int64)
    idx[np.arange(len(second.dep_idx)) + np.repeat(np.arange(n2), own)] = second.dep_idx
    idx[ptr[1:] - 1] = len(first) + inv - off      # relative to `second`; concat adds `off`
    tail = Schedule(second.src, second.dst, second.nbytes, second.chunk, ptr, idx.astype(np.int32))
    return concat([head, tail])


def _chain_ids(n: int, steps: int, chunks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c, t, p = np.meshgrid(np.arange(chunks), np.arange(steps), np.arange(n), indexing="ij")
    return c.ravel(), t.ravel(), p.ravel()


_FIELDS = ("src", "dst", "nbytes", "chunk", "dep_ptr", "dep_idx")
PER_CHUNK = "per_chunk"      # a traced ring size's last division: by its ranks times the chunk count


class Deferred(Schedule):
    """A schedule of known length whose arrays are built by `make(name)` when first read (and then kept).

    `concat` and `sequence` return one: `decompose.simulate` reads their parts and stages instead, so a
    collective it simulates piece by piece never builds its whole arrays. Assigning a field replaces it;
    `dataclasses.replace` gives a plain Schedule.
    """

    def __new__(cls, *args: Any, **kw: Any) -> Schedule:
        if len(args) + len(kw) == len(_FIELDS):   # dataclasses.replace / Schedule-style construction
            return Schedule(*args, **kw)
        return super().__new__(cls)

    def __init__(self, length: int, make: Callable[[str], np.ndarray]) -> None:  # noqa: D107 (no super: lazy)
        object.__setattr__(self, "_n", int(length))
        object.__setattr__(self, "_make", make)
        object.__setattr__(self, "overridden", False)

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"Deferred(transfers={self._n})"

    @property
    def materialized(self) -> bool:
        """True once any per-transfer array has been built or assigned."""
        return any(name in self.__dict__ for name in _FIELDS)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _FIELDS:
            object.__setattr__(self, "overridden", True)

    def __getattr__(self, name: str) -> Any:
        """A field not built yet (Python asks only for attributes missing from the instance): build and keep
        it, so that every later read is a plain attribute read."""
        if name not in _FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self._make(name)
        object.__setattr__(self, name, value)
        return value


class RingSchedule(Deferred):
    """A ring schedule kept as its shape (group, steps, chunks, bytes per transfer).

    Reads like any Schedule: the per-transfer arrays are built on first access (read-only, cached). The
    simulator runs an unmaterialized RingSchedule on `simulator.ring_kernel`, which needs none of them
    (a 1024-rank, 4-chunk all-reduce has 8.4 M transfers). Assigning a field replaces it, and the schedule
    is then simulated from its arrays like any other.
    """

    def __init__(self, group: np.ndarray, steps: int, chunks: int, size: float) -> None:  # noqa: D107
        object.__setattr__(self, "group", np.ascontiguousarray(group, dtype=np.int32))
        object.__setattr__(self, "steps", int(steps))
        object.__setattr__(self, "chunks", int(chunks))
        object.__setattr__(self, "size", float(size))
        # a traced size's divisions (network/plan.py), so a plan can size this ring for other byte counts
        object.__setattr__(self, "recipe", getattr(size, "recipe", None))
        super().__init__(self.chunks * self.steps * len(self.group), self._build)

    def __repr__(self) -> str:
        return (f"RingSchedule(n={len(self.group)}, steps={self.steps}, chunks={self.chunks}, "
                f"size={self.size!r}, transfers={len(self)})")

    def _build(self, name: str) -> np.ndarray:
        g, steps, chunks = self.group, self.steps, self.chunks
        n = len(g)
        reps = chunks * steps
        if name == "src":
            out = np.tile(g, reps)
        elif name == "dst":
            out = np.tile(successors(g), reps)
        elif name == "nbytes":
            out = np.full(reps * n, self.size)
        elif name == "chunk":
            out = np.repeat(np.arange(chunks, dtype=np.int32), steps * n)
        elif name == "dep_ptr":
            out = _ring_dep_ptr(n, steps, chunks)
        else:
            out = _ring_dep_idx(n, steps, chunks)
        out.setflags(write=False)
        return out


@njit(cache=True, work=lambda n, steps, chunks: n * steps * chunks)
def _ring_dep_ptr(n, steps, chunks):
    dep_ptr = np.zeros(chunks * steps * n + 1, np.int64)
    i = 0
    k = 0
    for c in range(chunks):
        for t in range(steps):
            for p in range(n):
                if t > 0:
                    k += 1
                i += 1
                dep_ptr[i] = k
    return dep_ptr


@njit(cache=True, work=lambda n, steps, chunks: n * steps * chunks)
def _ring_dep_idx(n, steps, chunks):
    dep_idx = np.empty(chunks * max(steps - 1, 0) * n, np.int32)
    k = 0
    for c in range(chunks):
        for t in range(1, steps):
            i = (c * steps + t) * n
            for p in range(n):
                dep_idx[k] = i - n + (p + n - 1) % n
                k += 1
    return dep_idx


def ring_shape(sched: Schedule) -> tuple[np.ndarray, int, int, float] | None:
    """(groups as an (m, n) matrix, steps, chunks, bytes per transfer) of a lazy ring or of a `concat` of
    lazy rings of one shape, when no field of it was assigned (the simulator's ring fast path); else None."""
    if isinstance(sched, RingSchedule):
        return None if sched.overridden else (sched.group[None, :], sched.steps, sched.chunks, sched.size)
    rings = getattr(sched, "_rings", None)
    return None if rings is None or sched.overridden else rings


def ring_groups_schedule(groups: np.ndarray, steps: int, chunks: int, size: float) -> Schedule:
    """`concat([ring(g, size, steps, chunks) for g in groups])` for a (m, n) matrix of equal-size groups,
    built with array broadcasting instead of part by part (same arrays, same dtypes, same values)."""
    return Schedule(*[_ring_groups_field(groups, steps, chunks, size, name) for name in _FIELDS])


def _ring_groups_field(groups: np.ndarray, steps: int, chunks: int, size: float, name: str) -> np.ndarray:
    """One array of `ring_groups_schedule`."""
    groups = np.ascontiguousarray(groups, dtype=np.int32)
    m, n = groups.shape
    reps = chunks * steps
    length = reps * n
    if name == "src":
        return np.broadcast_to(groups[:, None, :], (m, reps, n)).ravel()
    if name == "dst":
        return np.broadcast_to(successors(groups)[:, None, :], (m, reps, n)).ravel()
    if name == "nbytes":
        return np.full(m * length, float(size))
    if name == "chunk":
        return np.tile(np.repeat(np.arange(chunks, dtype=np.int32), steps * n), m)
    if name == "dep_ptr":
        one_ptr = _ring_dep_ptr(n, steps, chunks)
        k = chunks * max(steps - 1, 0) * n
        dep_ptr = np.empty(m * length + 1, np.int64)
        dep_ptr[0] = 0
        dep_ptr[1:] = (one_ptr[1:][None, :] + np.arange(m, dtype=np.int64)[:, None] * k).ravel()
        return dep_ptr
    one_idx = _ring_dep_idx(n, steps, chunks)
    return (one_idx[None, :] + np.arange(m, dtype=np.int32)[:, None] * np.int32(length)).ravel().astype(np.int32)


def ring(group: list[int], nbytes_per_transfer: float, steps: int, chunks: int) -> Schedule:
    """`steps` ring steps: at step t position p sends to p+1, after receiving step t-1 from p-1.

    Transfer id = (chunk * steps + step) * n + position. Returns a lazy `RingSchedule`.
    """
    return RingSchedule(np.asarray(group, dtype=np.int32), steps, chunks, nbytes_per_transfer)


def per_chunk(nbytes: float, n: int, chunks: int) -> float:
    """nbytes / (n * chunks), a ring's bytes per transfer. A traced byte count (network/plan.py) records the
    division as `(PER_CHUNK, n)`, so that a plan can size the ring for another chunk count."""
    size = nbytes / (n * chunks)
    recipe = getattr(size, "recipe", None)
    if recipe is not None:
        size.recipe = recipe[:-1] + ((PER_CHUNK, n),)
    return size


def _sized(sched: Schedule, size: float) -> Schedule:
    """`sched`, every transfer of which carries `size` bytes, remembering a traced size's recipe (its
    chunks in order, no dependencies: network/plan.py replays it as `plan.Direct`)."""
    sched.recipe = getattr(size, "recipe", None)
    return sched


def ring_collective(op: str, group: list[int], nbytes: float, chunks: int) -> Schedule:
    n = len(group)
    if n < 2:
        return empty()
    if op == "all_reduce":
        return ring(group, per_chunk(nbytes, n, chunks), 2 * (n - 1), chunks)
    if op in ("reduce_scatter", "all_gather"):
        return ring(group, per_chunk(nbytes, n, chunks), n - 1, chunks)
    if op == "broadcast":
        src, dst, nb, ch, deps = [], [], [], [], []
        for c in range(chunks):
            for i in range(n - 1):
                src.append(group[i]); dst.append(group[i + 1]); nb.append(nbytes / chunks); ch.append(c)
                deps.append([len(src) - 2] if i else [])
        return from_lists(src, dst, nb, ch, deps)
    raise ValueError(f"ring does not implement {op}")


def direct(op: str, group: list[int], nbytes: float, chunks: int) -> Schedule:
    """Every rank sends straight to every peer (offset k = 1..n-1 in order)."""
    n = len(group)
    if op == "send_recv":
        size = per_chunk(nbytes, 1, chunks)
        return _sized(from_lists([group[0]] * chunks, [group[1]] * chunks, [size] * chunks,
                                 list(range(chunks)), [[] for _ in range(chunks)]), size)
    if n < 2:
        return empty()
    g = np.asarray(group, dtype=np.int32)
    c, k, p = _chain_ids(n, n - 1, chunks)
    k = k + 1
    size = per_chunk(nbytes, n, chunks)
    one = _sized(Schedule(g[p], g[(p + k) % n], np.full(len(p), size), c.astype(np.int32),
                          np.zeros(len(p) + 1, dtype=np.int64), np.zeros(0, dtype=np.int32)), size)
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return one
    if op == "all_reduce":
        return sequence(one, one)
    raise ValueError(f"direct does not implement {op}")


def halving_doubling(op: str, group: list[int], nbytes: float, chunks: int) -> Schedule:
    """Recursive halving reduce-scatter and/or recursive doubling all-gather (power-of-two groups)."""
    n = len(group)
    if n & (n - 1):
        raise ValueError(f"halving_doubling needs a power-of-two group, got {n} ranks")
    steps = n.bit_length() - 1
    plan = []  # (distance, bytes per rank)
    if op in ("reduce_scatter", "all_reduce"):
        plan += [(n >> (k + 1), nbytes / (2 ** (k + 1))) for k in range(steps)]
    if op in ("all_gather", "all_reduce"):
        plan += [(1 << k, nbytes * (1 << k) / n) for k in range(steps)]
    if not plan:
        raise ValueError(f"halving_doubling does not implement {op}")
    src, dst, nb, ch, deps = [], [], [], [], []
    for c in range(chunks):
        prev: dict[int, int] = {}   # position -> id of the transfer it received last step
        for dist, size in plan:
            recv: dict[int, int] = {}
            for p in range(n):
                q = p ^ dist
                deps.append([prev[p]] if p in prev else [])
                src.append(group[p]); dst.append(group[q]); nb.append(size / chunks); ch.append(c)
                recv[q] = len(src) - 1
            prev = recv
    return from_lists(src, dst, nb, ch, deps)


def tree(op: str, group: list[int], nbytes: float, chunks: int) -> Schedule:
    """all_reduce: double binary tree, each tree reduces then broadcasts half the data; broadcast: one tree."""
    n = len(group)
    if n < 2:
        return empty()
    if op == "all_reduce":
        trees, share = [list(group), list(reversed(group))], nbytes / 2
    elif op == "broadcast":
        trees, share = [list(group)], nbytes
    else:
        raise ValueError(f"tree does not implement {op}")
    src, dst, nb, ch, deps = [], [], [], [], []

    def add(s: int, d: int, c: int, dep: list[int]) -> int:
        src.append(s); dst.append(d); nb.append(share / chunks); ch.append(c); deps.append(dep)
        return len(src) - 1

    for c in range(chunks):
        for order in trees:
            up: dict[int, list[int]] = {i: [] for i in range(n)}   # position -> reduce arrivals
            if op == "all_reduce":
                for i in range(n - 1, 0, -1):
                    up[(i - 1) // 2].append(add(order[i], order[(i - 1) // 2], c, up[i]))
            down: dict[int, list[int]] = {0: up[0]}
            for i in range(1, n):
                down[i] = [add(order[(i - 1) // 2], order[i], c, down[(i - 1) // 2])]
    return from_lists(src, dst, nb, ch, deps)


ALGORITHMS = {
    "ring": ring_collective,
    "direct": direct,
    "halving_doubling": halving_doubling,
    "tree": tree,
}
SUPPORTED = {
    "all_reduce": ("ring", "direct", "halving_doubling", "tree", "hierarchical", "in_switch"),
    "reduce_scatter": ("ring", "direct", "halving_doubling", "hierarchical"),
    "all_gather": ("ring", "direct", "halving_doubling", "hierarchical"),
    "all_to_all": ("direct",),
    "broadcast": ("ring", "tree"),
    "send_recv": ("direct",),
}

"""Replay one collective's simulation for another byte count without rebuilding or re-checking it.

A sweep simulates the same collective (network, utilization, operation, algorithm, chunk count, contending
groups) for many byte counts: every model and micro-batch moves different bytes over the same groups.
Building the schedule (network/hierarchical.py, collectives.sequence) and deciding how it decomposes
(network/decompose.py: which stages share no link, which parts are link-disjoint relabelled copies) costs
more than the event loop itself, and none of it depends on the bytes, so the first simulation of a shape
records what it did as a plan:

- `Staged`: simulate the first stage, take the barriers' maxima, simulate the second stage;
- `Replicated`: simulate the first of m identical parts and repeat its finish times m times;
- `Leaf`: one lazy ring or a concatenation of rings of one shape on `simulator.ring_kernel`, with its route
  table;
- `Direct`: dependency-free transfers chunk by chunk (send/recv, the direct collectives; one part or
  several side by side) on `simulator.simulate_kernel`, with its route table.

A ring's bytes per transfer is the collective's bytes divided by a chain of numbers (a hierarchical level
divides by the size of the level below, the ring by its ranks times chunks). The recording build passes
the bytes as a `Traced` float, which remembers that chain (its `recipe`) through divisions and nothing else;
`collectives.RingSchedule` keeps it (a direct schedule as `recipe`). A plan replays the same divisions in
the same order, so every ring gets the float the builder would compute, and the kernels then see the same
inputs as a fresh simulation: the same finish times and event counts bit for bit
(tests/test_network_plan.py). Anything whose sizes are not such a chain (trees and halving-doubling, any
other arithmetic on the bytes) makes no plan, and the caller simulates it the ordinary way.

The one decision that depends on the bytes, whether identical parts are released at equal times
(decompose.run_replicated), is checked again on every replay; when it would go the other way the replay
returns None and the caller simulates from scratch.

**Other chunk counts.** The chunk count follows from the bytes (api.default_chunks), so a sweep meets one
collective at several counts; `Plan.for_chunks` derives the plan for another count instead of building and
decomposing the schedule again. Nothing the recording decided depends on the count: every unit of a ring
(whose routes and link checks decide stages and replicas) is a ring position, the same for every chunk,
and a ring's division of the bytes by its ranks times chunks is recorded as the marker `(PER_CHUNK, n)`
(collectives.ring_collective), replayed as a division by n times the new count. What does depend on it is
recomputed: transfer counts, and the barriers of a stage join (`stage_joins.RingJoin`), from the
rings' shapes by the function `collectives.sequence` uses (`ring_joint`), which is why only joins built
from ring shapes carry over (`Staged.shapes`; equal joins between parts for one count are equal for every
count: they are the rank pattern of the rings repeated per chunk). tests/test_network_plan.py compares
derived plans with fresh simulations. Fabrics of other sizes: network/relocate.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Union

import numpy as np

from rapidllm.network.collectives import PER_CHUNK, RingSchedule, Schedule, ring_shape
from rapidllm.network.routing import Router, route_table
from rapidllm.network.stage_joins import Join, ring_joint, successors
from rapidllm.network.simulator import ring_kernel, simulate_kernel

UNEQUAL = object()      # decompose.run_replicated: the parts were identical but released at different times


class Traced(float):
    """A byte count that remembers the divisions applied to it (`recipe`): `Traced(s) / a / b` is the float
    `s / a / b` with recipe (a, b). Every other operation gives a plain float, which carries no recipe."""

    def __new__(cls, value: float, recipe: tuple = ()) -> Traced:
        obj = super().__new__(cls, value)
        obj.recipe = recipe
        return obj

    def __truediv__(self, other: object) -> float:
        value = float(self) / other
        if isinstance(other, Traced) or not isinstance(other, (int, float, np.integer, np.floating)):
            return value
        return Traced(value, self.recipe + (other,))


def replay(nbytes: float, recipe: tuple, chunks: int) -> float:
    """The builder's arithmetic on `nbytes`: the recipe's divisions in order, `(PER_CHUNK, n)` dividing by
    n times `chunks` (the product first, as the builder computes it)."""
    for d in recipe:
        nbytes = nbytes / (d[1] * chunks if type(d) is tuple else d)
    return nbytes


def _recipes(sched: Schedule) -> tuple:
    """Recipes of the schedule's rings in order (stages and parts included)."""
    if isinstance(sched, RingSchedule):
        return (sched.recipe,)
    staged = getattr(sched, "_sequence", None)
    pieces = staged[:2] if staged is not None else getattr(sched, "_parts", None)
    if pieces is None and type(sched) is Schedule:
        return (getattr(sched, "recipe", None),)
    return tuple(r for p in pieces or () for r in _recipes(p))


def same_recipes(parts: tuple[Schedule, ...]) -> bool:
    """Whether every part's rings divide the bytes as the first part's do (then parts of equal sizes for
    one byte count have equal sizes for every one)."""
    first = _recipes(parts[0])
    return None not in first and all(_recipes(p) == first for p in parts[1:])


@dataclass(frozen=True)
class Leaf:
    """Rings of one shape on `simulator.ring_kernel` (one ring, or several simulated together)."""
    pos_route: np.ndarray       # (m, n) route ids of every ring position
    steps: int
    chunks: int
    recipe: tuple
    route_ptr: np.ndarray
    route_links: np.ndarray
    unequal: int                # parts to check for equal release times (0: none)


@dataclass(frozen=True)
class Direct:
    """Parts side by side (one, or a `concat` of several), each a schedule of transfers without dependencies
    chunk by chunk, each chunk's transfers taking the part's routes `route_rows[k]` (collectives.direct:
    send/recv and the direct collectives), all of one traced size, on `simulator.simulate_kernel`."""
    route_rows: np.ndarray      # (parts, transfers per chunk)
    chunks: int
    recipe: tuple
    route_ptr: np.ndarray
    route_links: np.ndarray
    unequal: int                # parts to check for equal release times (0: none), as `Leaf.unequal`

    def route_of(self) -> np.ndarray:
        """Route id of every transfer: part by part, chunk by chunk."""
        m, per = self.route_rows.shape
        return np.broadcast_to(self.route_rows[:, None, :], (m, self.chunks, per)).ravel()


@dataclass(frozen=True)
class Replicated:
    """The first of m identical, link-disjoint parts of `size` transfers each, its times repeated."""
    m: int
    size: int
    first: Node


@dataclass(frozen=True)
class Staged:
    """Two stages sharing no link: `first` (n1 transfers), the barriers of `join` (stage_joins.Join), `second`
    (decompose.run_staged). `shapes`: (groups, steps) of both stages' rings when the join was computed from
    them (`ring_joint`), so it can be recomputed for another chunk count; None otherwise."""
    n1: int
    join: Join
    first: Node
    second: Node
    shapes: tuple | None = None


Node = Union[Leaf, Direct, Replicated, Staged]


def leaf(router: Router, sched: Schedule, unequal: int) -> Leaf | Direct | None:
    """The plan of `simulator.simulate_schedule(router, sched, ...)` when it runs rings of one traced shape
    or dependency-free chunks of one traced size."""
    rings = ring_shape(sched)
    if rings is None:
        return _direct(router, sched, unequal)
    parts = getattr(sched, "_parts", None) or (sched,)
    recipe = getattr(parts[0], "recipe", None)
    if recipe is None or any(getattr(p, "recipe", None) != recipe for p in parts):
        return None
    groups, steps, chunks, _ = rings
    pos_route, ptr, links = route_table(router, groups.ravel(), successors(groups).ravel())
    return Leaf(pos_route.reshape(groups.shape), steps, chunks, recipe, ptr, links, unequal)


def _direct(router: Router, sched: Schedule, unequal: int) -> Direct | None:
    """The `Direct` plan of a schedule (or a concatenation of equally long ones, `_parts`) of one traced size
    without dependencies whose chunks repeat one another, or None."""
    parts = (sched,) if type(sched) is Schedule else getattr(sched, "_parts", None)
    if (not parts or getattr(sched, "overridden", False) or getattr(sched, "_sequence", None) is not None
            or any(type(p) is not Schedule for p in parts)):
        return None
    recipe = getattr(parts[0], "recipe", None)
    n = len(parts[0])
    if recipe is None or not n or any(getattr(p, "recipe", None) != recipe for p in parts):
        return None
    chunks = int(parts[0].chunk[-1]) + 1
    if n % chunks or any(len(p.dep_idx) or np.any(p.dep_ptr) or not np.array_equal(
            p.chunk, np.repeat(np.arange(chunks), n // chunks)) for p in parts):
        return None
    route_of, ptr, links = route_table(router, sched.src, sched.dst)
    node = Direct(route_of.reshape(len(parts), chunks, -1)[:, 0, :], chunks, recipe, ptr, links, unequal)
    return node if np.array_equal(node.route_of(), route_of) else None


def transfers(node: Node) -> int:
    """Transfers of the schedule a node simulates (barriers included)."""
    if isinstance(node, Leaf):
        m, n = node.pos_route.shape
        return m * node.chunks * node.steps * n
    if isinstance(node, Direct):
        return node.route_rows.size * node.chunks
    if isinstance(node, Replicated):
        return node.m * node.size
    return node.n1 + node.join.nb + transfers(node.second)


def for_chunks(node: Node, chunks: int) -> Node | None:
    """The node of the same collective in `chunks` chunks (module docstring), or None when it has a part
    that cannot be carried over: a ring sized otherwise than per chunk, a join not made from ring shapes."""
    if isinstance(node, Leaf):
        last = node.recipe[-1] if node.recipe else None
        if type(last) is not tuple or last != (PER_CHUNK, node.pos_route.shape[1]):
            return None
        return Leaf(node.pos_route, node.steps, chunks, node.recipe, node.route_ptr, node.route_links,
                    node.unequal)
    if isinstance(node, Direct):
        last = node.recipe[-1] if node.recipe else None
        if type(last) is not tuple or last[0] != PER_CHUNK:
            return None
        return replace(node, chunks=chunks)
    if isinstance(node, Replicated):
        first = for_chunks(node.first, chunks)
        return None if first is None else Replicated(node.m, transfers(first), first)
    if node.shapes is None:
        return None
    first, second = for_chunks(node.first, chunks), for_chunks(node.second, chunks)
    if first is None or second is None:
        return None
    (g1, s1), (g2, s2) = node.shapes
    joint = ring_joint(g1, s1, chunks, g2, s2, chunks)
    if joint is None:
        return None
    return Staged(transfers(first), joint, first, second, node.shapes)


def relinked(node: Node, mapping: np.ndarray) -> Node | None:
    """The node with every route's links renamed by `mapping` (link id -> link id on another fabric,
    network/relocate.py), or None when a link has no image (-1)."""
    if isinstance(node, (Leaf, Direct)):
        links = mapping[node.route_links]
        if len(links) and links.min() < 0:
            return None
        return replace(node, route_links=links.astype(np.int32))
    if isinstance(node, Replicated):
        first = relinked(node.first, mapping)
        return None if first is None else replace(node, first=first)
    first, second = relinked(node.first, mapping), relinked(node.second, mapping)
    return None if first is None or second is None else replace(node, first=first, second=second)


def rows(release: np.ndarray, m: int) -> np.ndarray:
    """`release` as m rows, row k the release of part k of m equal parts: as it is when its first axis is
    already the parts (`stage_joins.RingJoin.second_release`, a broadcast over the steps), else reshaped."""
    return release if release.ndim > 1 and release.shape[0] == m else release.reshape(m, -1)


def flat(release: np.ndarray) -> np.ndarray:
    """One float64 per transfer, contiguous, as the kernels read it (a broadcast release is made whole here,
    once only the part a kernel runs is left of it)."""
    return np.ascontiguousarray(release, dtype=np.float64).reshape(-1)


def repeated(finish: np.ndarray | float, m: int, whole: bool, by_rows: bool) -> np.ndarray | float:
    """The finish times of m identical parts from the first's (`finish`, or its latest when not `whole`):
    repeated m times, or (`by_rows`) a read-only broadcast with the parts as first axis."""
    if not whole:
        return finish
    return np.broadcast_to(finish, (m, len(finish))) if by_rows else np.tile(finish, m)


def _equal_rows(release: np.ndarray, m: int) -> bool:
    rel = rows(release, m)
    return bool((rel == rel[0]).all())


def run(node: Node, nbytes: float, release: np.ndarray | float, link_bw: np.ndarray, link_lat: np.ndarray,
        whole: bool = True, by_rows: bool = False) -> tuple[np.ndarray | float, int] | None:
    """(finish per transfer, link events) of the recorded simulation for `nbytes`, or None when the
    release times would make decompose choose differently (the caller then simulates from scratch).

    `release`: per transfer (in C order, its first axis possibly the parts: `rows`), or one float for
    every transfer (a collective's set-up: then parts are released alike without checking, and arrays are
    made only where a kernel reads them). `whole` False: the latest finish time (-inf: no transfer) instead
    of every transfer's, so replicas are not repeated and stages not joined; `by_rows`: replicas' finish
    times may come as a broadcast over the parts (`repeated`), as decompose.simulate gives them."""
    uniform = not isinstance(release, np.ndarray)
    if isinstance(node, (Leaf, Direct)):
        if node.unequal and (uniform or _equal_rows(release, node.unequal)):
            return None
        rel = np.full(transfers(node), release) if uniform else flat(release)
        size = replay(nbytes, node.recipe, node.chunks)
        if isinstance(node, Leaf):
            finish, _, events = ring_kernel(node.pos_route, node.steps, node.chunks, size, rel, node.route_ptr,
                                            node.route_links, link_bw, link_lat)
        else:
            n = len(rel)
            finish, _, events = simulate_kernel(node.route_of(), np.full(n, size), rel, np.zeros(n + 1, np.int64),
                                                np.zeros(0, np.int32), node.route_ptr, node.route_links, link_bw,
                                                link_lat)
        return (finish if whole else latest(finish)), int(events)
    if isinstance(node, Replicated):
        if not uniform and not _equal_rows(release, node.m):
            return None
        out = run(node.first, nbytes, release if uniform else rows(release, node.m)[0], link_bw, link_lat, whole)
        if out is None:
            return None
        return repeated(out[0], node.m, whole, by_rows), out[1] * node.m
    n1, nb = node.n1, node.join.nb
    release = release if uniform else flat(release)
    first = run(node.first, nbytes, release if uniform else release[:n1], link_bw, link_lat, by_rows=True)
    if first is None:
        return None
    bars = node.join.barriers(first[0], np.full(nb, release) if uniform else release[n1:n1 + nb])
    rel2 = node.join.second_release(release if uniform else release[n1 + nb:], bars)
    second = run(node.second, nbytes, rel2, link_bw, link_lat, whole)
    if second is None:
        return None
    if whole:
        return np.concatenate([np.ravel(first[0]), bars, second[0]]), first[1] + second[1]
    return max(latest(first[0]), latest(bars), second[0]), first[1] + second[1]


def latest(finish: np.ndarray) -> float:
    """The latest finish time of a run's transfers (-inf: no transfer)."""
    return float(finish.max()) if len(finish) else -np.inf


@dataclass(frozen=True)
class Plan:
    """A recorded collective simulation (`root` None: none could be recorded; simulate from scratch)."""
    root: Node | None
    transfers: int
    link_bw: np.ndarray
    link_lat: np.ndarray
    # (chunks, bytes, set-up) -> (time, events) answered: shared with the plans derived from this one for
    # other chunk counts and moved to fabrics where the collective runs alike (network/relocate.py), which
    # answer alike, so a sweep's other world sizes look them up
    results: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, rec: list, transfers: int, link_bw: np.ndarray, link_lat: np.ndarray) -> Plan:
        """The plan `decompose.simulate` recorded into `rec` for a schedule of `transfers` transfers."""
        return cls(rec[0] if len(rec) == 1 else None, transfers, link_bw, link_lat)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays the plan holds (route tables included: it keeps them alive)."""
        return _nbytes(self.root)

    def for_chunks(self, chunks: int) -> Plan | None:
        """This collective's plan in `chunks` chunks per transfer, or None when it cannot be derived (then
        the caller simulates from scratch)."""
        root = None if self.root is None else for_chunks(self.root, chunks)
        return None if root is None else Plan(root, transfers(root), self.link_bw, self.link_lat, self.results)

    @property
    def chunks(self) -> int:
        """Chunks per transfer of the recorded collective (0: no plan)."""
        node = self.root
        while isinstance(node, (Replicated, Staged)):
            node = node.first
        return 0 if node is None else node.chunks

    def remember(self, nbytes: float, setup: float, answer: tuple[float, int]) -> None:
        """Keep the answer of the simulation this plan was recorded from."""
        self.results[(self.chunks, nbytes, setup)] = answer

    def time(self, nbytes: float, setup: float) -> tuple[float, int] | None:
        """(completion time, link events) of the collective of `nbytes` whose transfers are all released
        at `setup`, or None when it must be simulated from scratch."""
        if self.root is None:
            return None
        key = (self.chunks, nbytes, setup)
        known = self.results.get(key)
        if known is not None:
            return known
        out = run(self.root, nbytes, float(setup), self.link_bw, self.link_lat, whole=False)
        if out is None:
            return None
        return self.results.setdefault(key, (out[0] if out[0] != -np.inf else 0.0, out[1]))


def _nbytes(node: Node | None) -> int:
    if isinstance(node, Leaf):
        return node.pos_route.nbytes + node.route_ptr.nbytes + node.route_links.nbytes
    if isinstance(node, Direct):
        return node.route_rows.nbytes + node.route_ptr.nbytes + node.route_links.nbytes
    if isinstance(node, Replicated):
        return _nbytes(node.first)
    if isinstance(node, Staged):
        return node.join.nbytes + _nbytes(node.first) + _nbytes(node.second)
    return 0

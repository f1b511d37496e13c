"""Exact shortcuts through the event loop: simulate a schedule piece by piece where pieces cannot meet.

Two decompositions, applied recursively by `simulate` (same finish times, busy seconds and event count as
`simulator.simulate_schedule` on the whole schedule, bit for bit; tests/test_network_decompose.py):

**Stages.** A schedule built by `collectives.sequence(first, second)` (a hierarchical collective's stages)
remembers them. When no link is used by both, the stages interact only through the barriers, and a
barrier's time is a max (exact in floating point): simulate `first`, take each barrier's time as the max of
its release and its inputs' finish times, and simulate `second` with each transfer released at the max of
its own release and its barrier's time. Each stage's events at its links come in the same (time, transfer
id, hop) order as in the whole run, so every float is the same. Stages that share a link (an all-reduce's
reduce-scatter and all-gather inside a node) are simulated together.

**Replicas.** A schedule built by `collectives.concat` from m parts (the contending groups of one
collective, the outer rings of a hierarchical stage, or several concurrent requests) remembers them. When
every part is a relabelled copy of the first one, the event loop would compute the same numbers m times:

- the parts have the same transfers in the same order (sources and destinations aside): equal byte
  counts, chunks and dependency lists, and equal release times;
- transfer i of part k takes as many hops as transfer i of part 0, and the map "link at hop h of
  transfer i in part 0 -> link at hop h of transfer i in part k" is one-to-one both ways (two transfers
  share a link in part k exactly when they share one in part 0), with equal bandwidth and latency on
  every mapped pair;
- no link is used by two parts, and no part depends on another (`sequence` also concatenates, with
  dependencies from the second part into the first: such parts are refused).

Then the parts never meet in a link queue and do not depend on each other, so each part's events are a
subsequence of the whole run in the same (time, transfer id, hop) order, and part k performs the same
floating-point operations on the same numbers as part 0: finish times and busy seconds are equal bit for
bit. Only the first part is simulated.

Every condition is checked on the schedules' structure (ring shapes, stages, parts, barrier arrays) and
arrays (routes of ring positions, bandwidths, latencies, release times; no event is simulated for a
check); when one fails (a fault or degraded link in one group only, groups sharing fat-tree uplinks,
stages sharing NVLink) that piece is simulated whole. The link checks do not depend on the bytes moved, so
the router remembers them per rank arrays (`Router.remembered`): a sweep asks them again for every size.
"""
from __future__ import annotations

import numpy as np

from rapidllm.network import plan
from rapidllm.network.collectives import RingSchedule, Schedule
from rapidllm.network.routing import Router, route_table
from rapidllm.network.simulator import simulate_schedule
from rapidllm.network.stage_joins import successors

Result = tuple[np.ndarray | float, np.ndarray, int]   # finish per transfer (or the latest), busy per link, link events


def simulate(router: Router, sched: Schedule, release: np.ndarray | float, link_bw: np.ndarray,
             link_lat: np.ndarray, rec: list | None = None, whole: bool = True, by_rows: bool = False) -> Result:
    """`simulate_schedule(router, sched, release, link_bw, link_lat)`, by stages and replicas where exact.

    `rec`, a list, receives the plan of what was done (network/plan.py: `plan.Staged`, `plan.Replicated`,
    `plan.Leaf`, or None where the schedule cannot be replayed for other byte counts).

    `release`: per transfer, or one float for every transfer (a collective's set-up), as `plan.run` takes
    it: then identical parts are released alike without checking and a release array is made only where
    a kernel reads one. A release per transfer may come with the parts as its first axis (`plan.rows`: a
    ring join's broadcast over the steps); then only the simulated part's is made whole. `whole` False: the
    latest finish time (-inf: no transfer) instead of every transfer's, so replicas are not repeated and
    stages not joined. `by_rows` True: replicas' finish times may come as a read-only broadcast over the
    parts (first axis; C order is transfer order), what a stage join's barriers read. A collective of
    thousands of ranks has tens of millions of transfers; a caller that wants its completion time needs
    none of these arrays whole (the max of the same floats: the same number)."""
    uniform = not isinstance(release, np.ndarray)
    if not uniform and release.ndim == 1:
        release = np.ascontiguousarray(release, dtype=np.float64)
    if (uniform or release.size == len(sched)) and len(sched):
        out = run_staged(router, sched, release, link_bw, link_lat, rec, whole)
        if out is None:
            out = run_replicated(router, sched, release, link_bw, link_lat, rec, whole, by_rows)
        if out is not None:
            return out
    if rec is not None:
        unequal = 0             # parts that only their release times kept from being replicated
        if rec and rec[-1] is plan.UNEQUAL:
            rec.pop()
            unequal = len(sched._parts)
        rec.append(plan.leaf(router, sched, unequal))
    finish, busy, events = simulate_schedule(router, sched, np.full(len(sched), release) if uniform
                                             else plan.flat(release), link_bw, link_lat)
    return (finish if whole else plan.latest(finish)), busy, events


def _link_set(router: Router, sched: Schedule) -> np.ndarray:
    """Distinct links any transfer of `sched` crosses (routing its units, see units)."""
    src, dst = units(sched)
    key = ("link_set", src.astype(np.int64).tobytes(), dst.astype(np.int64).tobytes())
    return router.remembered(key, len(src), lambda: np.unique(route_table(router, src, dst)[2]))


def run_staged(router: Router, sched: Schedule, release: np.ndarray | float, link_bw: np.ndarray,
               link_lat: np.ndarray, rec: list | None = None, whole: bool = True) -> Result | None:
    """A `sequence(first, second)` simulated stage by stage (module docstring), or None if it is not one or
    its stages share a link. `release` and `whole` as in `simulate`."""
    staged = getattr(sched, "_sequence", None)
    if staged is None:
        return None
    first, second, join = staged
    n1, nb = len(first), join.nb
    if n1 + nb + len(second) != len(sched):
        return None
    if len(np.intersect1d(_link_set(router, first), _link_set(router, second), assume_unique=True)):
        return None
    uniform = not isinstance(release, np.ndarray)
    release = release if uniform else plan.flat(release)
    r1, r2 = ([], []) if rec is not None else (None, None)
    f1, busy1, ev1 = simulate(router, first, release if uniform else release[:n1], link_bw, link_lat, r1,
                              by_rows=True)
    bars = join.barriers(f1, np.full(nb, release) if uniform else release[n1:n1 + nb])
    rel2 = join.second_release(release if uniform else release[n1 + nb:], bars)
    f2, busy2, ev2 = simulate(router, second, rel2, link_bw, link_lat, r2, whole)
    if rec is not None:
        rec.append(plan.Staged(n1, join, r1[0], r2[0], getattr(sched, "_joint_shapes", None))
                   if r1[0] is not None and r2[0] is not None else None)
    finish = np.concatenate([np.ravel(f1), bars, f2]) if whole else max(plan.latest(f1), plan.latest(bars), f2)
    return finish, busy1 + busy2, int(ev1) + int(ev2)


def _lazy_ring(part: Schedule) -> bool:
    return type(part) is RingSchedule and not part.overridden


def _same(a: Schedule, b: Schedule) -> bool:
    """Equal transfers in the same order apart from their end points, and every transfer's end points
    taken from the same unit (see units): rings of equal shape, sequences of equal stages and joints,
    concatenations of equal parts, else equal arrays with dependencies inside the schedule."""
    if _lazy_ring(a) or _lazy_ring(b):
        return (_lazy_ring(a) and _lazy_ring(b) and len(a.group) == len(b.group)
                and (a.steps, a.chunks, a.size) == (b.steps, b.chunks, b.size))
    sa, sb = getattr(a, "_sequence", None), getattr(b, "_sequence", None)
    if sa is not None or sb is not None:
        return (sa is not None and sb is not None and _same(sa[0], sb[0]) and _same(sa[1], sb[1])
                and sa[2].same(sb[2]))
    pa, pb = getattr(a, "_parts", None), getattr(b, "_parts", None)
    if pa or pb:
        return bool(pa) and bool(pb) and len(pa) == len(pb) and all(_same(x, y) for x, y in zip(pa, pb))
    return (len(a) == len(b) and np.array_equal(a.nbytes, b.nbytes) and np.array_equal(a.chunk, b.chunk)
            and np.array_equal(a.dep_ptr, b.dep_ptr) and np.array_equal(a.dep_idx, b.dep_idx)
            and (len(a.dep_idx) == 0 or a.dep_idx.min() >= 0))


def units(sched: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Source and destination ranks of the schedule's units: the positions of its lazy rings (every
    transfer of position p takes position p's route), its stages' and parts' units in order, else every
    transfer. Barriers (zero hops) are no units."""
    if _lazy_ring(sched):
        return sched.group, successors(sched.group)
    staged = getattr(sched, "_sequence", None)
    pieces = staged[:2] if staged is not None else getattr(sched, "_parts", None)
    if not pieces:
        return np.asarray(sched.src), np.asarray(sched.dst)
    known = sched.__dict__.get("_unit_ranks")     # a function of the pieces: kept on the schedule, which
    if known is not None:                         # every level of `simulate` asks again
        return known
    if all(_lazy_ring(p) and len(p.group) == len(pieces[0].group) for p in pieces):
        g = np.stack([p.group for p in pieces])
        out = g.ravel(), successors(g).ravel()
    else:
        each = [units(p) for p in pieces]
        out = np.concatenate([u[0] for u in each]), np.concatenate([u[1] for u in each])
    sched.__dict__["_unit_ranks"] = out
    return out


def _expand(route_ids: np.ndarray, ptr: np.ndarray, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Links of the routes `route_ids`, hop by hop, concatenated; and the hop count of each."""
    lens = np.diff(ptr)[route_ids]
    starts = ptr[route_ids]
    total = int(lens.sum())
    offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    return links[np.repeat(starts, lens) + offs].astype(np.int64), lens


def _link_rows(router: Router, parts: tuple[Schedule, ...], link_bw: np.ndarray,
               link_lat: np.ndarray) -> np.ndarray | None:
    """(m, hops) links of every part hop by hop (one unit per distinct route of part 0, in the order of
    their first use), or None unless every part is a link-disjoint, one-to-one relabelling of part 0 with
    equal bandwidths and latencies."""
    each = [units(p) for p in parts]
    m = len(parts)
    if any(len(u[0]) != len(each[0][0]) for u in each):
        return None
    src, dst = np.concatenate([u[0] for u in each]), np.concatenate([u[1] for u in each])
    key = ("link_rows", m, src.astype(np.int64).tobytes(), dst.astype(np.int64).tobytes(),
           router.intern(link_bw), router.intern(link_lat))
    return router.remembered(key, len(src), lambda: _rows(router, m, src, dst, link_bw, link_lat))


def _rows(router: Router, m: int, src: np.ndarray, dst: np.ndarray, link_bw: np.ndarray,
          link_lat: np.ndarray) -> np.ndarray | None:
    """`_link_rows` of m parts whose units (in part order, equally many each) go from `src` to `dst`."""
    route_of, ptr, links = route_table(router, src, dst)
    route_of = route_of.reshape(m, -1)
    # units of part 0 with equal routes must have equal routes in every part, and distinct ones distinct:
    # then one unit per distinct route of part 0 (the first) stands for all
    _, first_unit, inv0 = np.unique(route_of[0], return_index=True, return_inverse=True)
    reps = route_of[:, first_unit]
    if not (reps[:, inv0.ravel()] == route_of).all():
        return None
    per_part = (np.arange(m, dtype=np.int64)[:, None] * (len(ptr) - 1) + reps).ravel()
    if len(np.unique(per_part)) != per_part.size:
        return None
    flat, lens = _expand(reps.ravel(), ptr, links)
    lens = lens.reshape(m, -1)
    if not (lens == lens[0]).all():
        return None
    hops = flat.reshape(m, int(lens[0].sum()))
    for prop in (link_bw, link_lat):
        v = prop[hops]
        if not (v == v[0]).all():
            return None
    # link-sharing pattern: each hop labelled by the first hop of its part on the same link
    keys = (np.arange(m, dtype=np.int64)[:, None] * len(link_bw) + hops).ravel()
    uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    label = (first % max(hops.shape[1], 1))[inv.ravel()].reshape(hops.shape)
    if not (label == label[0]).all() or len(np.unique(hops)) != len(uniq):
        return None                  # a different pattern in some part, or a link used by two parts
    return hops


def run_replicated(router: Router, sched: Schedule, release: np.ndarray | float, link_bw: np.ndarray,
                   link_lat: np.ndarray, rec: list | None = None, whole: bool = True,
                   by_rows: bool = False) -> Result | None:
    """`sched` by simulating only the first of its identical parts, or None when it has no recorded parts
    or they are not identical and link-disjoint (module docstring). When only the release times differ
    between parts, `plan.UNEQUAL` is appended to `rec` (a plan must check them again, network/plan.py).
    `release`, `whole` and `by_rows` as in `simulate`."""
    parts = getattr(sched, "_parts", None)
    if not parts or len(parts) < 2:
        return None
    first = parts[0]
    size = len(first)
    m = len(parts)
    if size == 0 or size * m != len(sched) or not all(_same(first, p) for p in parts[1:]):
        return None
    uniform = not isinstance(release, np.ndarray)
    rel = release if uniform else plan.rows(release, m)
    equal = uniform or bool((rel == rel[0]).all())
    if not equal and rec is None:
        return None
    hops = _link_rows(router, parts, link_bw, link_lat)
    if hops is None:
        return None
    if not equal:
        rec.append(plan.UNEQUAL)
        return None
    # parts of equal sizes for this byte count only (different recipes) make no plan for every count
    r0 = [] if rec is not None and plan.same_recipes(parts) else None
    finish0, busy0, events0 = simulate(router, first, rel if uniform else rel[0], link_bw, link_lat, r0, whole)
    if rec is not None:
        rec.append(plan.Replicated(m, size, r0[0]) if r0 and r0[0] is not None else None)
    busy = busy0.copy()
    busy[hops[1:].ravel()] = np.tile(busy0[hops[0]], m - 1)
    return plan.repeated(finish0, m, whole, by_rows), busy, int(events0) * m

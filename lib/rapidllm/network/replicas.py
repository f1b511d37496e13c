"""Simulate one of several identical, link-disjoint collectives and copy its result to the others (exact).

A schedule built by `collectives.concat` from m parts (the contending groups of one collective, or several
concurrent requests) remembers them. When every part is a relabelled copy of the first one, the event
loop would compute the same numbers m times:

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
bit. `run_replicated` checks the three conditions on arrays (no event is simulated for the check) and
returns None when any fails, e.g. when a fault or a degraded link touches one group only, or when groups
share fat-tree uplinks; the caller then runs the whole schedule. tests/test_network_replicas.py compares
against the full event simulation.
"""
from __future__ import annotations

import numpy as np

from rapidllm.network.collectives import RingSchedule, Schedule
from rapidllm.network.routing import Router, route_table
from rapidllm.network.simulator import simulate_schedule


def _lazy_ring(part: Schedule) -> bool:
    return type(part) is RingSchedule and not part.overridden


def _same_structure(first: Schedule, part: Schedule) -> bool:
    """Equal transfers apart from their end points (rings: equal shape)."""
    if _lazy_ring(first) or _lazy_ring(part):
        return (_lazy_ring(first) and _lazy_ring(part) and len(first.group) == len(part.group)
                and (first.steps, first.chunks, first.size) == (part.steps, part.chunks, part.size))
    return (len(first) == len(part) and np.array_equal(first.nbytes, part.nbytes)
            and np.array_equal(first.chunk, part.chunk) and np.array_equal(first.dep_ptr, part.dep_ptr)
            and np.array_equal(first.dep_idx, part.dep_idx))


def _hops(router: Router, part: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(route id per unit, route_ptr, route_links): units are ring positions for a lazy ring (every
    transfer of position p takes position p's route), else transfers."""
    if _lazy_ring(part):
        g = part.group
        return route_table(router, g, np.roll(g, -1))
    return route_table(router, part.src, part.dst)


def _expand(route_ids: np.ndarray, ptr: np.ndarray, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Links of the routes `route_ids`, hop by hop, concatenated; and the hop count of each."""
    lens = np.diff(ptr)[route_ids]
    starts = ptr[route_ids]
    total = int(lens.sum())
    offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    return links[np.repeat(starts, lens) + offs].astype(np.int64), lens


def _link_map(router: Router, parts: list[Schedule], link_bw: np.ndarray, link_lat: np.ndarray
              ) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per part k >= 1, (links of part 0, the matching links of part k) hop by hop, or None unless every
    part is a link-disjoint, one-to-one relabelling of part 0 with equal bandwidths and latencies."""
    r0, p0, l0 = _hops(router, parts[0])
    n_routes0 = len(p0) - 1
    used = [np.unique(l0)]
    out = []
    for part in parts[1:]:
        rk, pk, lk = _hops(router, part)
        if len(rk) != len(r0) or len(pk) != len(p0):
            return None
        pair = np.unique(r0.astype(np.int64) * n_routes0 + rk)       # route of part 0 -> route of part k
        if len(pair) != n_routes0:
            return None
        a, b = pair // n_routes0, pair % n_routes0
        if len(np.unique(b)) != len(b):
            return None
        la, lens_a = _expand(a, p0, l0)
        lb, lens_b = _expand(b, pk, lk)
        if not np.array_equal(lens_a, lens_b):
            return None
        if not (np.array_equal(link_bw[la], link_bw[lb]) and np.array_equal(link_lat[la], link_lat[lb])):
            return None
        n_links = len(link_bw)
        if len(np.unique(la * n_links + lb)) != len(np.unique(la)) or len(np.unique(la)) != len(np.unique(lb)):
            return None
        used.append(np.unique(lb))
        out.append((la, lb))
    every = np.concatenate(used)
    if len(np.unique(every)) != len(every):
        return None
    return out


def run_replicated(router: Router, sched: Schedule, release: np.ndarray, link_bw: np.ndarray,
                   link_lat: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """`simulate_schedule(router, sched, ...)` by simulating only the first of its identical parts, or None
    when `sched` has no recorded parts or they are not identical and link-disjoint (module docstring)."""
    parts = getattr(sched, "_parts", None)
    if not parts or len(parts) < 2:
        return None
    first = parts[0]
    size = len(first)
    m = len(parts)
    if size == 0 or size * m != len(sched) or not all(_same_structure(first, p) for p in parts[1:]):
        return None
    if not _lazy_ring(first) and len(first.dep_idx) and first.dep_idx.min() < 0:
        return None             # `sequence` concatenates a tail whose dependencies point into its head
    release = np.ascontiguousarray(release, dtype=np.float64)
    rel0 = release[:size]
    if not np.array_equal(release.reshape(m, size), np.broadcast_to(rel0, (m, size))):
        return None
    maps = _link_map(router, parts, link_bw, link_lat)
    if maps is None:
        return None
    finish0, busy0, events0 = simulate_schedule(router, first, rel0, link_bw, link_lat)
    busy = busy0.copy()
    for la, lb in maps:
        busy[lb] = busy0[la]
    return np.tile(finish0, m), busy, int(events0) * m

"""Link-queue event loop (numba): every directed link is a FCFS queue, store and forward.

A transfer becomes ready when all its dependencies have arrived (and not before its release time). At each
hop it reaches link L at time t, starts at max(t, free[L]), occupies L for S/B[L], and reaches the next
node at start + S/B[L] + latency[L]. Events are processed in (time, transfer id, hop) order from a heap,
so ties break deterministically; because arrivals at a link are served in processing order, each link is
first come first served. Zero-hop transfers (src == dst) complete when ready (used as local barriers).

Two kernels share the heap and the link rule:

- `simulate_kernel`: any schedule, as plain arrays (transfer -> route id, dependency CSR).
- `ring_kernel`: a ring schedule (`collectives.RingSchedule`) described by its shape alone — transfer id
  (chunk * steps + step) * n + position, one route per position, one dependency (the previous step from
  the previous position). It needs no per-transfer input arrays, only the finish-time output, and pops
  events in exactly the same (time, transfer id, hop) order, so its results are bit-identical to
  `simulate_kernel` on the materialized schedule (tests/test_network_simulator.py checks this).

`simulate_schedule` picks the kernel for a `Schedule` and routes it.

The heap is 4-ary, stored as two parallel arrays (time, key) with key = transfer id * hop_base + hop; the
entries of one heap are distinct in key (one event per transfer is in flight), so (time, key) is a strict
total order and the pop order does not depend on the heap's shape. Each popped event yields at most one
event of its own (next hop) plus released successors; the first new event replaces the root (one sift
instead of two).
"""
from __future__ import annotations

import numpy as np
from numba import njit

ARITY = 4


@njit(cache=True, inline="always")
def _less(ta, ka, tb, kb) -> bool:
    return ta < tb or (ta == tb and ka < kb)


@njit(cache=True, inline="always")
def _sift_down(ht, hk, size, t, k):
    """Place (t, k) at the root of a heap of `size` entries and sift it down."""
    pos = 0
    while True:
        c = ARITY * pos + 1
        if c >= size:
            break
        end = c + ARITY
        if end > size:
            end = size
        bt = ht[c]
        bk = hk[c]
        for j in range(c + 1, end):
            tj = ht[j]
            if tj < bt or (tj == bt and hk[j] < bk):
                bt = tj
                bk = hk[j]
                c = j
        if bt < t or (bt == t and bk < k):
            ht[pos] = bt
            hk[pos] = bk
            pos = c
        else:
            break
    ht[pos] = t
    hk[pos] = k


@njit(cache=True, inline="always")
def _sift_up(ht, hk, pos, t, k):
    while pos > 0:
        p = (pos - 1) // ARITY
        if _less(t, k, ht[p], hk[p]):
            ht[pos] = ht[p]
            hk[pos] = hk[p]
            pos = p
        else:
            break
    ht[pos] = t
    hk[pos] = k


@njit(cache=True)
def _hop_base(route_ptr):
    hop_base = 1
    for r in range(len(route_ptr) - 1):
        if route_ptr[r + 1] - route_ptr[r] + 1 > hop_base:
            hop_base = route_ptr[r + 1] - route_ptr[r] + 1
    return hop_base


@njit(cache=True)
def simulate_kernel(route_of, nbytes, release, dep_ptr, dep_idx, route_ptr, route_links, link_bw, link_lat):
    """Returns (finish time per transfer, busy seconds per link, number of link events)."""
    n = len(route_of)
    hop_base = _hop_base(route_ptr)
    # successors (CSR): count, inclusive prefix sum (end pointers), then fill backwards so each cursor
    # ends at its list's start; successors come out in ascending id order
    sptr = np.zeros(n + 1, np.int64)
    for k in range(len(dep_idx)):
        if dep_idx[k] < 0 or dep_idx[k] >= n:
            raise ValueError("schedule dependency out of range")
        sptr[dep_idx[k]] += 1
    for i in range(1, n):
        sptr[i] += sptr[i - 1]
    sptr[n] = len(dep_idx)
    succ = np.empty(len(dep_idx), np.int32)
    remaining = np.empty(n, np.int32)
    for i in range(n - 1, -1, -1):
        remaining[i] = dep_ptr[i + 1] - dep_ptr[i]
        for k in range(dep_ptr[i + 1] - 1, dep_ptr[i] - 1, -1):
            d = dep_idx[k]
            if d < 0 or d >= i:
                raise ValueError("schedule dependencies must point to earlier transfers")
            sptr[d] -= 1
            succ[sptr[d]] = i
    when = np.empty(n, np.float64)           # ready time until done, then finish time
    for i in range(n):
        when[i] = release[i]
    free = np.zeros(len(link_bw))
    busy = np.zeros(len(link_bw))
    ht = np.empty(max(n, 1), np.float64)     # at most one event per transfer is in flight
    hk = np.empty(max(n, 1), np.int64)
    size = 0
    for i in range(n):
        if remaining[i] == 0:
            _sift_up(ht, hk, size, when[i], i * hop_base)
            size += 1
    events = 0
    while size > 0:
        t = ht[0]
        key = hk[0]
        i = key // hop_base
        h = key - i * hop_base
        root_free = True                     # the root slot still holds the event just taken
        r = route_of[i]
        a = route_ptr[r]
        nh = route_ptr[r + 1] - a
        done = -1.0
        if nh == 0:
            done = t
        else:
            link = route_links[a + h]
            f = free[link]
            start = t if t > f else f
            dur = nbytes[i] / link_bw[link]
            free[link] = start + dur
            busy[link] += dur
            events += 1
            arrive = start + dur + link_lat[link]
            if h + 1 == nh:
                done = arrive
            else:
                _sift_down(ht, hk, size, arrive, key + 1)
                root_free = False
        if done >= 0.0:
            when[i] = done
            for k in range(sptr[i], sptr[i + 1]):
                s = succ[k]
                if done > when[s]:
                    when[s] = done
                remaining[s] -= 1
                if remaining[s] == 0:
                    if root_free:
                        _sift_down(ht, hk, size, when[s], s * hop_base)
                        root_free = False
                    else:
                        _sift_up(ht, hk, size, when[s], s * hop_base)
                        size += 1
        if root_free:
            size -= 1
            if size > 0:
                _sift_down(ht, hk, size, ht[size], hk[size])
    return when, busy, events


@njit(cache=True)
def ring_kernel(pos_route, steps, chunks, size_bytes, release, route_ptr, route_links, link_bw, link_lat):
    """`simulate_kernel` for a ring schedule given by its shape (see collectives.RingSchedule).

    pos_route[p]: route id of position p's transfer (g[p] -> g[p+1]); transfer (c, t, p) has id
    (c * steps + t) * n + p, carries size_bytes and depends on (c, t - 1, p - 1). `release` has one entry
    per transfer. Returns (finish per transfer, busy seconds per link, number of link events).
    """
    n = len(pos_route)
    total = chunks * steps * n
    hop_base = _hop_base(route_ptr)
    finish = np.empty(total, np.float64)
    free = np.zeros(len(link_bw))
    busy = np.zeros(len(link_bw))
    cap = max(chunks * n, 1)                 # one event in flight per (chunk, diagonal) chain
    ht = np.empty(cap, np.float64)
    hk = np.empty(cap, np.int64)
    size = 0
    for c in range(chunks):
        for p in range(n):
            i = c * steps * n + p
            _sift_up(ht, hk, size, release[i], i * hop_base)
            size += 1
    events = 0
    stride = steps * n
    while size > 0:
        t = ht[0]
        key = hk[0]
        i = key // hop_base
        h = key - i * hop_base
        p = i % n
        r = pos_route[p]
        a = route_ptr[r]
        nh = route_ptr[r + 1] - a
        if nh == 0:
            done = t
        else:
            link = route_links[a + h]
            f = free[link]
            start = t if t > f else f
            dur = size_bytes / link_bw[link]
            free[link] = start + dur
            busy[link] += dur
            events += 1
            arrive = start + dur + link_lat[link]
            if h + 1 < nh:
                _sift_down(ht, hk, size, arrive, key + 1)
                continue
            done = arrive
        finish[i] = done
        if (i % stride) < stride - n:        # not the last step: release (c, t + 1, p + 1)
            s = i + n - p + (p + 1) % n
            ready = release[s]
            if done > ready:
                ready = done
            _sift_down(ht, hk, size, ready, s * hop_base)
        else:
            size -= 1
            if size > 0:
                _sift_down(ht, hk, size, ht[size], hk[size])
    return finish, busy, events


def simulate_schedule(router, sched, release: np.ndarray, link_bw: np.ndarray,
                      link_lat: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Route `sched` with `router` and run the event loop: (finish per transfer, busy per link, link events).

    Ring schedules (collectives.RingSchedule) run on `ring_kernel` without materializing per-transfer
    arrays; everything else runs on `simulate_kernel`. `release` (one start time per transfer) is read,
    never copied or modified.
    """
    from rapidllm.network.collectives import RingSchedule
    from rapidllm.network.routing import route_table

    release = np.ascontiguousarray(release, dtype=np.float64)
    if isinstance(sched, RingSchedule) and not sched.overridden:
        g = sched.group
        pos_route, ptr, links = route_table(router, g, np.roll(g, -1))
        return ring_kernel(pos_route, sched.steps, sched.chunks, sched.size, release, ptr, links, link_bw,
                           link_lat)
    route_of, ptr, links = route_table(router, sched.src, sched.dst)
    return simulate_kernel(route_of, sched.nbytes, release, sched.dep_ptr, sched.dep_idx, ptr, links, link_bw,
                           link_lat)

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

# ---------------------------------------------------------------------------------------------------------
# Event queue: a binary heap of *runs*. A run is a time and an ascending list of keys stored contiguously in
# an arena; a push whose time equals the most recently opened run's time and whose key is larger than that
# run's last key is appended to it (O(1)), anything else opens a new run (heap push). The heap orders runs
# by (time, first unconsumed key), so the root's next key is always the global minimum (time, key) and pops
# come out in exactly the order of a plain (time, key) heap. Collectives release many transfers at exactly
# the same time (all ranks of a ring step finish together), so the heap holds a handful of runs instead of
# thousands of events. Consumed arena space is reclaimed by copying the live runs into the other half of a
# double buffer when the current half is full (the arena holds 2 * cap + 2 keys, cap = most events in flight).
# State: (arena[2, A], run time, run cursor, run end, run free-list next, heap time, heap key, heap run, qs)
# with qs = [heap size, arena top, open run (-1: none), free run head (-1), fresh run id, arena half].
# ---------------------------------------------------------------------------------------------------------


@njit(cache=True)
def _queue(cap):
    cap = max(cap, 1)
    arena = np.empty((2, 2 * cap + 2), np.int64)
    rt = np.empty(cap + 1, np.float64)
    rc = np.empty(cap + 1, np.int64)
    re = np.empty(cap + 1, np.int64)
    rn = np.empty(cap + 1, np.int64)
    ht = np.empty(cap + 1, np.float64)
    hk = np.empty(cap + 1, np.int64)
    hr = np.empty(cap + 1, np.int64)
    qs = np.zeros(6, np.int64)
    qs[2] = -1
    qs[3] = -1
    return arena, rt, rc, re, rn, ht, hk, hr, qs


@njit(cache=True, inline="always")
def _sift_down(ht, hk, hr, size, pos, t, k, r):
    """Place run (t, k, r) at heap slot `pos` of a heap of `size` entries and sift it down."""
    while True:
        c = 2 * pos + 1
        if c >= size:
            break
        if c + 1 < size:
            t1 = ht[c + 1]
            t0 = ht[c]
            if t1 < t0 or (t1 == t0 and hk[c + 1] < hk[c]):
                c += 1
        tc = ht[c]
        if tc < t or (tc == t and hk[c] < k):
            ht[pos] = tc
            hk[pos] = hk[c]
            hr[pos] = hr[c]
            pos = c
        else:
            break
    ht[pos] = t
    hk[pos] = k
    hr[pos] = r


@njit(cache=True, inline="always")
def _move_run(arena, rc, re, w, nw, r, top):
    a = rc[r]
    m = re[r] - a
    for x in range(m):
        arena[nw, top + x] = arena[w, a + x]
    rc[r] = top
    re[r] = top + m
    return top + m


@njit(cache=True)
def _compact(arena, rc, re, hr, qs):
    """Copy the live runs into the other arena half; the open run goes last (it must end at the top)."""
    w = qs[5]
    nw = 1 - w
    o = qs[2]
    top = 0
    for j in range(qs[0]):
        if hr[j] != o:
            top = _move_run(arena, rc, re, w, nw, hr[j], top)
    if o >= 0:
        top = _move_run(arena, rc, re, w, nw, o, top)
    qs[1] = top
    qs[5] = nw


@njit(cache=True, inline="always")
def _push(arena, rt, rc, re, rn, ht, hk, hr, qs, t, k):
    o = qs[2]
    if o >= 0 and rt[o] == t and arena[qs[5], re[o] - 1] < k:
        if qs[1] == arena.shape[1]:
            _compact(arena, rc, re, hr, qs)
        arena[qs[5], qs[1]] = k
        qs[1] += 1
        re[o] = qs[1]
        return
    if qs[1] == arena.shape[1]:
        _compact(arena, rc, re, hr, qs)
    r = qs[3]
    if r >= 0:
        qs[3] = rn[r]
    else:
        r = qs[4]
        qs[4] += 1
    rt[r] = t
    rc[r] = qs[1]
    arena[qs[5], qs[1]] = k
    qs[1] += 1
    re[r] = qs[1]
    qs[2] = r
    pos = qs[0]
    qs[0] += 1
    while pos > 0:                           # sift up
        p = (pos - 1) >> 1
        tp = ht[p]
        if t < tp or (t == tp and k < hk[p]):
            ht[pos] = tp
            hk[pos] = hk[p]
            hr[pos] = hr[p]
            pos = p
        else:
            break
    ht[pos] = t
    hk[pos] = k
    hr[pos] = r


@njit(cache=True, inline="always")
def _pop(arena, rt, rc, re, rn, ht, hk, hr, qs):
    """Remove and return the smallest (time, key); the queue must not be empty."""
    t = ht[0]
    k = hk[0]
    r = hr[0]
    c = rc[r] + 1
    rc[r] = c
    if c < re[r]:
        _sift_down(ht, hk, hr, qs[0], 0, t, arena[qs[5], c], r)
    else:
        rn[r] = qs[3]
        qs[3] = r
        if qs[2] == r:
            qs[2] = -1
        qs[0] -= 1
        size = qs[0]
        if size > 0:
            _sift_down(ht, hk, hr, size, 0, ht[size], hk[size], hr[size])
    return t, k


@njit(cache=True)
def _bits(x):
    """Smallest b with 2**b >= x."""
    b = 0
    while (1 << b) < x:
        b += 1
    return b


@njit(cache=True)
def _hop_base(route_ptr):
    hop_base = 1
    for r in range(len(route_ptr) - 1):
        if route_ptr[r + 1] - route_ptr[r] + 1 > hop_base:
            hop_base = route_ptr[r + 1] - route_ptr[r] + 1
    return hop_base


@njit(cache=True)
def simulate_kernel(route_of, nbytes, release, dep_ptr, dep_idx, route_ptr, route_links, link_bw, link_lat):
    """Returns (finish time per transfer, busy seconds per link, number of link events).

    Event key = transfer id << hop_bits | hop, so ordering by key is ordering by (transfer id, hop).
    """
    n = len(route_of)
    hbits = _bits(_hop_base(route_ptr))
    if n > 0 and _bits(n) + hbits > 62:
        raise ValueError("schedule too large for 64-bit event keys")
    hmask = (1 << hbits) - 1
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
    arena, rt, rc, re, rn, ht, hk, hr, qs = _queue(n)   # at most one event per transfer is in flight
    for i in range(n):
        if remaining[i] == 0:
            _push(arena, rt, rc, re, rn, ht, hk, hr, qs, when[i], i << hbits)
    events = 0
    while qs[0] > 0:
        t, key = _pop(arena, rt, rc, re, rn, ht, hk, hr, qs)
        i = key >> hbits
        h = key & hmask
        r = route_of[i]
        a = route_ptr[r]
        nh = route_ptr[r + 1] - a
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
            if h + 1 < nh:
                _push(arena, rt, rc, re, rn, ht, hk, hr, qs, arrive, key + 1)
                continue
            done = arrive
        when[i] = done
        for k in range(sptr[i], sptr[i + 1]):
            s = succ[k]
            if done > when[s]:
                when[s] = done
            remaining[s] -= 1
            if remaining[s] == 0:
                _push(arena, rt, rc, re, rn, ht, hk, hr, qs, when[s], s << hbits)
    return when, busy, events


@njit(cache=True)
def ring_kernel(pos_route, steps, chunks, size_bytes, release, route_ptr, route_links, link_bw, link_lat):
    """`simulate_kernel` for a ring schedule given by its shape (see collectives.RingSchedule).

    pos_route[p]: route id of position p's transfer (g[p] -> g[p+1]); transfer (c, t, p) has id
    (c * steps + t) * n + p, carries size_bytes and depends on (c, t - 1, p - 1). `release` has one entry
    per transfer. Returns (finish per transfer, busy seconds per link, number of link events).
    Event key = (row << p_bits | p) << hop_bits | hop with row = c * steps + t: the same order as
    (transfer id, hop), without divisions.
    """
    n = len(pos_route)
    rows = chunks * steps
    hbits = _bits(_hop_base(route_ptr))
    pbits = _bits(n)
    if _bits(rows + 1) + pbits + hbits > 62:
        raise ValueError("schedule too large for 64-bit event keys")
    sh = pbits + hbits
    hmask = (1 << hbits) - 1
    pmask = (1 << pbits) - 1
    last = np.zeros(max(rows, 1), np.bool_)
    for c in range(chunks):
        last[c * steps + steps - 1] = True
    finish = np.empty(rows * n, np.float64)
    free = np.zeros(len(link_bw))
    busy = np.zeros(len(link_bw))
    arena, rt, rc, re, rn, ht, hk, hr, qs = _queue(chunks * n)   # one event in flight per (chunk, diagonal) chain
    if steps > 0:
        for c in range(chunks):
            for p in range(n):
                row = c * steps
                _push(arena, rt, rc, re, rn, ht, hk, hr, qs, release[row * n + p], (row << sh) | (p << hbits))
    events = 0
    while qs[0] > 0:
        t, key = _pop(arena, rt, rc, re, rn, ht, hk, hr, qs)
        h = key & hmask
        p = (key >> hbits) & pmask
        row = key >> sh
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
                _push(arena, rt, rc, re, rn, ht, hk, hr, qs, arrive, key + 1)
                continue
            done = arrive
        finish[row * n + p] = done
        if not last[row]:                    # release (c, t + 1, p + 1)
            p1 = p + 1
            if p1 == n:
                p1 = 0
            ready = release[(row + 1) * n + p1]
            if done > ready:
                ready = done
            _push(arena, rt, rc, re, rn, ht, hk, hr, qs, ready, ((row + 1) << sh) | (p1 << hbits))
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

"""Link-queue event loop (numba): every directed link is a FCFS queue, store and forward.

A transfer becomes ready when all its dependencies have arrived (and not before its release time). At each
hop it reaches link L at time t, starts at max(t, free[L]), occupies L for S/B[L], and reaches the next
node at start + S/B[L] + latency[L]. Events are processed in (time, transfer id) order from a binary heap,
so ties break deterministically; because arrivals at a link are served in processing order, each link is
first come first served. Zero-hop transfers (src == dst) complete when ready (used as local barriers).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _less(ta, ka, tb, kb) -> bool:
    return ta < tb or (ta == tb and ka < kb)


@njit(cache=True)
def _sift_down(ht, hk, size, t, k):
    """Place (t, k) at the root of a heap of `size` entries and sift it down."""
    pos = 0
    while True:
        c = 2 * pos + 1
        if c >= size:
            break
        if c + 1 < size and _less(ht[c + 1], hk[c + 1], ht[c], hk[c]):
            c += 1
        if _less(ht[c], hk[c], t, k):
            ht[pos] = ht[c]
            hk[pos] = hk[c]
            pos = c
        else:
            break
    ht[pos] = t
    hk[pos] = k


@njit(cache=True)
def _sift_up(ht, hk, pos, t, k):
    while pos > 0:
        p = (pos - 1) >> 1
        if _less(t, k, ht[p], hk[p]):
            ht[pos] = ht[p]
            hk[pos] = hk[p]
            pos = p
        else:
            break
    ht[pos] = t
    hk[pos] = k


@njit(cache=True)
def simulate_kernel(route_of, nbytes, release, dep_ptr, dep_idx, route_ptr, route_links, link_bw, link_lat):
    """Returns (finish time per transfer, busy seconds per link, number of link events).

    Heap entries are (time, key) with key = transfer id * hop_base + hop, so ordering by key is ordering by
    transfer id (one event per transfer is in flight). Each popped event yields at most one event of its own
    (next hop) plus released successors; the first new event replaces the root (one sift instead of two).
    """
    n = len(route_of)
    hop_base = 1
    for r in range(len(route_ptr) - 1):
        if route_ptr[r + 1] - route_ptr[r] + 1 > hop_base:
            hop_base = route_ptr[r + 1] - route_ptr[r] + 1
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
    when = release.astype(np.float64)        # ready time until done, then finish time
    free = np.zeros(len(link_bw))
    busy = np.zeros(len(link_bw))
    cap = 1024
    ht = np.empty(cap, np.float64)
    hk = np.empty(cap, np.int64)
    size = 0
    for i in range(n):
        if remaining[i] == 0:
            if size == cap:
                ht, hk, cap = _grow(ht, hk, cap)
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
            start = t if t > free[link] else free[link]
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
                        if size == cap:
                            ht, hk, cap = _grow(ht, hk, cap)
                        _sift_up(ht, hk, size, when[s], s * hop_base)
                        size += 1
        if root_free:
            size -= 1
            if size > 0:
                _sift_down(ht, hk, size, ht[size], hk[size])
    return when, busy, events


@njit(cache=True)
def _grow(ht, hk, cap):
    nt = np.empty(2 * cap, np.float64)
    nk = np.empty(2 * cap, np.int64)
    nt[:cap] = ht
    nk[:cap] = hk
    return nt, nk, 2 * cap

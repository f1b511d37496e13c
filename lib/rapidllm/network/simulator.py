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


@njit(cache=True)
def _less(ta: float, ia: int, tb: float, ib: int) -> bool:
    return ta < tb or (ta == tb and ia < ib)


@njit(cache=True)
def _push(ht, hi, hh, size, t, i, h):
    if size == len(ht):
        nt = np.empty(2 * size, np.float64)
        ni = np.empty(2 * size, np.int32)
        nh = np.empty(2 * size, np.int32)
        nt[:size] = ht
        ni[:size] = hi
        nh[:size] = hh
        ht, hi, hh = nt, ni, nh
    k = size
    while k > 0:
        p = (k - 1) >> 1
        if _less(t, i, ht[p], hi[p]):
            ht[k] = ht[p]
            hi[k] = hi[p]
            hh[k] = hh[p]
            k = p
        else:
            break
    ht[k] = t
    hi[k] = i
    hh[k] = h
    return ht, hi, hh, size + 1


@njit(cache=True)
def _pop_fix(ht, hi, hh, size):
    """Remove the root (already read by the caller); returns the new size."""
    size -= 1
    t, i, h = ht[size], hi[size], hh[size]
    k = 0
    while True:
        c = 2 * k + 1
        if c >= size:
            break
        if c + 1 < size and _less(ht[c + 1], hi[c + 1], ht[c], hi[c]):
            c += 1
        if _less(ht[c], hi[c], t, i):
            ht[k] = ht[c]
            hi[k] = hi[c]
            hh[k] = hh[c]
            k = c
        else:
            break
    ht[k] = t
    hi[k] = i
    hh[k] = h
    return size


@njit(cache=True)
def simulate_kernel(route_of, nbytes, release, dep_ptr, dep_idx, route_ptr, route_links, link_bw, link_lat):
    """Returns (finish time per transfer, busy seconds per link, number of link events)."""
    n = len(route_of)
    n_links = len(link_bw)
    # successors (CSR) from dependency lists
    scount = np.zeros(n + 1, np.int64)
    for k in range(len(dep_idx)):
        scount[dep_idx[k] + 1] += 1
    sptr = np.cumsum(scount)
    fill = sptr[:-1].copy()
    succ = np.empty(len(dep_idx), np.int32)
    remaining = np.empty(n, np.int32)
    for i in range(n):
        remaining[i] = dep_ptr[i + 1] - dep_ptr[i]
        for k in range(dep_ptr[i], dep_ptr[i + 1]):
            d = dep_idx[k]
            succ[fill[d]] = i
            fill[d] += 1
    ready = release.copy()
    finish = np.full(n, np.inf)
    free = np.zeros(n_links)
    busy = np.zeros(n_links)
    cap = 1024
    ht = np.empty(cap, np.float64)
    hi = np.empty(cap, np.int32)
    hh = np.empty(cap, np.int32)
    size = 0
    for i in range(n):
        if remaining[i] == 0:
            ht, hi, hh, size = _push(ht, hi, hh, size, ready[i], i, 0)
    events = 0
    while size > 0:
        t = ht[0]
        i = hi[0]
        h = hh[0]
        size = _pop_fix(ht, hi, hh, size)
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
                ht, hi, hh, size = _push(ht, hi, hh, size, arrive, i, h + 1)
        if done >= 0.0:
            finish[i] = done
            for k in range(sptr[i], sptr[i + 1]):
                s = succ[k]
                if done > ready[s]:
                    ready[s] = done
                remaining[s] -= 1
                if remaining[s] == 0:
                    ht, hi, hh, size = _push(ht, hi, hh, size, ready[s], s, 0)
    return finish, busy, events


def simulate_py(route_of, nbytes, release, dep_ptr, dep_idx, route_ptr, route_links, link_bw, link_lat):
    """Same contract as simulate_kernel, pure Python with heapq (reference for tests)."""
    import heapq

    n = len(route_of)
    succ: list[list[int]] = [[] for _ in range(n)]
    remaining = [0] * n
    for i in range(n):
        for k in range(dep_ptr[i], dep_ptr[i + 1]):
            succ[int(dep_idx[k])].append(i)
            remaining[i] += 1
    ready = [float(x) for x in release]
    finish = [float("inf")] * n
    free = [0.0] * len(link_bw)
    busy = [0.0] * len(link_bw)
    heap = [(ready[i], i, 0) for i in range(n) if remaining[i] == 0]
    heapq.heapify(heap)
    events = 0
    while heap:
        t, i, h = heapq.heappop(heap)
        r = int(route_of[i])
        links = route_links[route_ptr[r]:route_ptr[r + 1]]
        if len(links) == 0:
            done = t
        else:
            link = int(links[h])
            start = max(t, free[link])
            dur = nbytes[i] / link_bw[link]
            free[link] = start + dur
            busy[link] += dur
            events += 1
            if h + 1 < len(links):
                heapq.heappush(heap, (start + dur + link_lat[link], i, h + 1))
                continue
            done = start + dur + link_lat[link]
        finish[i] = done
        for s in succ[i]:
            ready[s] = max(ready[s], done)
            remaining[s] -= 1
            if remaining[s] == 0:
                heapq.heappush(heap, (ready[s], s, 0))
    return np.array(finish), np.array(busy), events

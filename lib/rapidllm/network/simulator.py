"""Link-queue event loop (numba): every directed link is a FCFS queue, store and forward.

A transfer becomes ready when all its dependencies have arrived (and not before its release time). At each
hop it reaches link L at time t, starts at max(t, free[L]), occupies L for S/B[L], and reaches the next
node at start + S/B[L] + latency[L]. Events are processed in (time, transfer id, hop) order, so ties break
deterministically; because arrivals at a link are served in processing order, each link is first come
first served. Zero-hop transfers (src == dst) complete when ready (used as local barriers).

Entry points (all return (finish time per transfer, busy seconds per link, number of link events)):

- `simulate_kernel`: any schedule, as plain arrays (transfer -> route id, dependency CSR).
- `ring_kernel`: m ring schedules of one shape side by side (a `collectives.RingSchedule`, m = 1, or a
  `concat` of them: the contending groups of one collective) described by their shape alone — transfer id
  ((k * chunks + chunk) * steps + step) * n + position for ring k, one route per (ring, position), one
  dependency (the previous step from the previous position of the same ring). It needs no per-transfer
  input arrays besides `release`, only the finish-time output, and processes events in exactly the same
  (time, transfer id, hop) order, so its results are bit-identical to `simulate_kernel` on the
  materialized schedule (tests/test_network_kernels.py); its memory is 16 bytes per transfer instead of
  ~100 (4 x 256-rank rings in 32 chunks: 8.4 M transfers).
- `simulate_schedule`: routes a `Schedule` and picks the kernel.

Both kernels run `_event_loop`. Its event queue is a binary heap of *runs*: a run is one time and an
ascending list of event keys stored contiguously in an arena. A push whose time equals the most recently
opened run's time and whose key is larger than that run's last key is appended to it (O(1)); anything else
opens a new run (heap push). The heap orders runs by (time, first unconsumed key), so the root's next key
is always the global minimum (time, key) and events come out in exactly the order of a plain (time, key)
heap; keys are unique among queued events (one event per transfer is in flight), so that order is total.
Collectives release many transfers at exactly the same time (every rank of a ring step finishes at once),
so the heap holds a handful of runs instead of thousands of events. Consumed arena space is reclaimed by
copying the live runs into the other half of a double buffer when the current half is full.

Event key = id << hop_bits | hop. Generic: id = transfer id. Ring: id = row << pos_bits | position with
row = (ring * chunks + chunk) * steps + step, which orders like the transfer id and decodes with shifts
(and a per-row table of the ring's offset into the routes). The queue code is written out inside the loop
on purpose: passing arrays to helper functions makes numba emit atomic reference-count updates per call,
which cost more than the queue itself.
"""
from __future__ import annotations

import numpy as np

from rapidllm.jit import njit
from rapidllm.network.collectives import ring_shape
from rapidllm.network.routing import route_table
from rapidllm.network.stage_joins import successors


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
def _compact(arena, half, rc, re, hr, size, open_run):
    """Copy the live runs into the other arena half (the open run last: it must end at the top).

    Returns (new top, new half)."""
    nw = 1 - half
    top = 0
    for j in range(size + 1):
        if j < size:
            r = hr[j]
            if r == open_run:
                continue
        else:
            if open_run < 0:
                break
            r = open_run
        a = rc[r]
        m = re[r] - a
        for x in range(m):
            arena[nw, top + x] = arena[half, a + x]
        rc[r] = top
        top += m
        re[r] = top
    return top, nw


@njit(cache=True)
def _event_loop(ring, cap, init_k, init_t, hbits, pbits, n_pos,
                route_of, nbytes, size_bytes, pos_route, row_base, last_row,
                release, when, sptr, succ, remaining,
                route_ptr, route_links, link_bw, link_lat, busy):
    """Run the events; `when` holds ready times (generic) and receives finish times.

    init_k/init_t: initial events (keys in any order). ring=True: transfers are decoded from the ring key
    and release their single successor; otherwise route_of/nbytes/sptr/succ/remaining describe them.
    """
    free = np.zeros(len(link_bw))
    hmask = (1 << hbits) - 1
    pmask = (1 << pbits) - 1
    # queue: arena halves, runs (time, cursor, end, free-list next), heap of runs (time, key, run)
    cap = max(cap, 1)
    alen = 2 * cap + 2 + min(2 * cap + 2, 1 << 20)   # >= 2 * cap + 2: a compaction frees >= cap + 2
    arena = np.empty((2, alen), np.int64)
    rt = np.empty(cap + 1, np.float64)
    rc = np.empty(cap + 1, np.int64)
    re = np.empty(cap + 1, np.int64)
    rn = np.empty(cap + 1, np.int64)
    ht = np.empty(cap + 1, np.float64)
    hk = np.empty(cap + 1, np.int64)
    hr = np.empty(cap + 1, np.int64)
    size = 0          # heap entries (live runs)
    top = 0           # arena top
    half = 0          # arena half in use
    open_run = -1     # run that may be appended to (it ends at the arena top)
    free_run = -1     # free list of run ids
    fresh = 0         # next never-used run id
    # pending pushes of the current event (first the initial events)
    maxsucc = 1
    if not ring:
        for i in range(len(sptr) - 1):
            if sptr[i + 1] - sptr[i] > maxsucc:
                maxsucc = sptr[i + 1] - sptr[i]
    pcap = max(len(init_k), maxsucc + 1)
    pend_t = np.empty(pcap, np.float64)
    pend_k = np.empty(pcap, np.int64)
    npend = len(init_k)
    for j in range(npend):
        pend_t[j] = init_t[j]
        pend_k[j] = init_k[j]
    events = 0
    while True:
        # ---- push the pending events
        for j in range(npend):
            t = pend_t[j]
            k = pend_k[j]
            if open_run >= 0 and rt[open_run] == t and arena[half, top - 1] < k:
                if top == alen:
                    top, half = _compact(arena, half, rc, re, hr, size, open_run)
                arena[half, top] = k
                top += 1
                re[open_run] = top
                continue
            if top == alen:
                top, half = _compact(arena, half, rc, re, hr, size, open_run)
            r = free_run
            if r >= 0:
                free_run = rn[r]
            else:
                r = fresh
                fresh += 1
            rt[r] = t
            rc[r] = top
            arena[half, top] = k
            top += 1
            re[r] = top
            open_run = r
            pos = size
            size += 1
            while pos > 0:
                par = (pos - 1) >> 1
                tp = ht[par]
                if t < tp or (t == tp and k < hk[par]):
                    ht[pos] = tp
                    hk[pos] = hk[par]
                    hr[pos] = hr[par]
                    pos = par
                else:
                    break
            ht[pos] = t
            hk[pos] = k
            hr[pos] = r
        npend = 0
        if size == 0:
            break
        # ---- pop the smallest (time, key)
        t = ht[0]
        key = hk[0]
        r = hr[0]
        c = rc[r] + 1
        rc[r] = c
        if c < re[r]:                        # the run stays; its next key re-enters at the root
            mt = t
            mk = arena[half, c]
            mr = r
        else:                                # the run is used up
            rn[r] = free_run
            free_run = r
            if open_run == r:
                open_run = -1
            size -= 1
            mt = ht[size]
            mk = hk[size]
            mr = hr[size]
        if size > 0:
            pos = 0
            while True:
                ch = 2 * pos + 1
                if ch >= size:
                    break
                if ch + 1 < size:
                    t1 = ht[ch + 1]
                    t0 = ht[ch]
                    if t1 < t0 or (t1 == t0 and hk[ch + 1] < hk[ch]):
                        ch += 1
                tc = ht[ch]
                if tc < mt or (tc == mt and hk[ch] < mk):
                    ht[pos] = tc
                    hk[pos] = hk[ch]
                    hr[pos] = hr[ch]
                    pos = ch
                else:
                    break
            ht[pos] = mt
            hk[pos] = mk
            hr[pos] = mr
        # ---- the event: transfer i reaches hop h of its route at time t
        h = key & hmask
        u = key >> hbits
        if ring:
            p = u & pmask
            row = u >> pbits
            i = row * n_pos + p
            # one ring: row_base is a 1-entry dummy, and skipping its load keeps the loop ~10% faster
            rid = pos_route[row_base[row] + p] if len(row_base) > 1 else pos_route[p]
            nb = size_bytes
        else:
            i = u
            rid = route_of[i]
            nb = nbytes[i]
        a = route_ptr[rid]
        nh = route_ptr[rid + 1] - a
        if nh == 0:
            done = t
        else:
            link = route_links[a + h]
            f = free[link]
            start = t if t > f else f
            dur = nb / link_bw[link]
            free[link] = start + dur
            busy[link] += dur
            events += 1
            arrive = start + dur + link_lat[link]
            if h + 1 < nh:
                pend_t[0] = arrive
                pend_k[0] = key + 1
                npend = 1
                continue
            done = arrive
        when[i] = done
        if ring:
            if not last_row[row]:            # release (c, t + 1, p + 1)
                p1 = p + 1
                if p1 == n_pos:
                    p1 = 0
                ready = release[(row + 1) * n_pos + p1]
                if done > ready:
                    ready = done
                pend_t[0] = ready
                pend_k[0] = (((row + 1) << pbits) | p1) << hbits
                npend = 1
        else:
            for x in range(sptr[i], sptr[i + 1]):
                s = succ[x]
                if done > when[s]:
                    when[s] = done
                remaining[s] -= 1
                if remaining[s] == 0:
                    pend_t[npend] = when[s]
                    pend_k[npend] = s << hbits
                    npend += 1
    return events


@njit(cache=True)
def simulate_kernel(route_of, nbytes, release, dep_ptr, dep_idx, route_ptr, route_links, link_bw, link_lat):
    """Returns (finish time per transfer, busy seconds per link, number of link events)."""
    n = len(route_of)
    if len(nbytes) != n or len(release) != n or len(dep_ptr) != n + 1:
        raise ValueError("route_of, nbytes, release need one entry per transfer and dep_ptr one more")
    hbits = _bits(_hop_base(route_ptr))
    if n > 0 and _bits(n) + hbits > 62:
        raise ValueError("schedule too large for 64-bit event keys")
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
    n_init = 0
    for i in range(n - 1, -1, -1):
        remaining[i] = dep_ptr[i + 1] - dep_ptr[i]
        if remaining[i] == 0:
            n_init += 1
        for k in range(dep_ptr[i + 1] - 1, dep_ptr[i] - 1, -1):
            d = dep_idx[k]
            if d < 0 or d >= i:
                raise ValueError("schedule dependencies must point to earlier transfers")
            sptr[d] -= 1
            succ[sptr[d]] = i
    when = np.empty(n, np.float64)           # ready time until done, then finish time
    init_k = np.empty(n_init, np.int64)
    init_t = np.empty(n_init, np.float64)
    j = 0
    for i in range(n):
        when[i] = release[i]
        if remaining[i] == 0:
            init_k[j] = i << hbits
            init_t[j] = when[i]
            j += 1
    busy = np.zeros(len(link_bw))
    dummy_i = np.zeros(1, np.int32)
    events = _event_loop(False, n, init_k, init_t, hbits, 0, 0,
                         route_of, nbytes, 0.0, dummy_i, np.zeros(1, np.int64), np.zeros(1, np.bool_),
                         release, when, sptr, succ, remaining,
                         route_ptr, route_links, link_bw, link_lat, busy)
    return when, busy, events


@njit(cache=True, work=lambda pos_route, steps, chunks, *rest: 8 * pos_route.size * steps * chunks)
def ring_kernel(pos_route, steps, chunks, size_bytes, release, route_ptr, route_links, link_bw, link_lat):
    """`simulate_kernel` for m concatenated rings of one shape given by their shape (collectives.RingSchedule,
    and `concat` of such rings).

    pos_route[k, p]: route id of position p's transfer in ring k (g[p] -> g[p+1]); transfer (k, c, t, p) has
    id ((k * chunks + c) * steps + t) * n + p, carries size_bytes and depends on (k, c, t - 1, p - 1).
    `release` has one entry per transfer. Row r = (k * chunks + c) * steps + t numbers the ring steps of
    every ring in transfer-id order, so the key (r << pos_bits | p) orders like the transfer id.
    """
    m, n = pos_route.shape
    rows = chunks * steps
    if len(release) != m * rows * n:
        raise ValueError("release needs one entry per transfer")
    hbits = _bits(_hop_base(route_ptr))
    pbits = _bits(n)
    if _bits(m * rows + 1) + pbits + hbits > 62:
        raise ValueError("schedule too large for 64-bit event keys")
    last_row = np.zeros(max(m * rows, 1), np.bool_)
    row_base = np.zeros(m * rows if m > 1 else 1, np.int64)   # row r's ring's offset in the flat pos_route
    for k in range(m):
        for c in range(chunks):
            last_row[(k * chunks + c) * steps + steps - 1] = True
        for r in range(k * rows, (k + 1) * rows if m > 1 else 0):
            row_base[r] = k * n
    when = np.empty(m * rows * n, np.float64)
    n_init = m * chunks * n if steps > 0 else 0
    init_k = np.empty(n_init, np.int64)
    init_t = np.empty(n_init, np.float64)
    j = 0
    for kc in range(m * chunks if steps > 0 else 0):
        row = kc * steps
        for p in range(n):
            init_k[j] = ((row << pbits) | p) << hbits
            init_t[j] = release[row * n + p]
            j += 1
    busy = np.zeros(len(link_bw))
    dummy_i = np.zeros(1, np.int64)
    dummy_f = np.zeros(1, np.float64)
    flat_route = np.ascontiguousarray(pos_route).reshape(m * n)
    events = _event_loop(True, m * chunks * n, init_k, init_t, hbits, pbits, n,
                         np.zeros(1, np.int32), dummy_f, size_bytes, flat_route, row_base, last_row,
                         release, when, dummy_i, np.zeros(1, np.int32), np.zeros(1, np.int32),
                         route_ptr, route_links, link_bw, link_lat, busy)
    return when, busy, events


def simulate_schedule(router, sched, release: np.ndarray, link_bw: np.ndarray,
                      link_lat: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Route `sched` with `router` and run the event loop: (finish per transfer, busy per link, link events).

    Ring schedules (collectives.RingSchedule, and `concat`s of rings of one shape: collectives.ring_shape)
    run on `ring_kernel` without materializing per-transfer arrays; everything else runs on
    `simulate_kernel`. `release` (one start time per transfer) is read,
    never copied or modified.
    """
    release = np.ascontiguousarray(release, dtype=np.float64)
    if release.shape != (len(sched),):
        raise ValueError(f"release has shape {release.shape}, the schedule has {len(sched)} transfers")
    rings = ring_shape(sched)
    if rings is not None:
        groups, steps, chunks, size = rings
        pos_route, ptr, links = route_table(router, groups.ravel(), successors(groups).ravel())
        return ring_kernel(pos_route.reshape(groups.shape), steps, chunks, size, release, ptr, links, link_bw,
                           link_lat)
    route_of, ptr, links = route_table(router, sched.src, sched.dst)
    return simulate_kernel(route_of, sched.nbytes, release, sched.dep_ptr, sched.dep_idx, ptr, links, link_bw,
                           link_lat)

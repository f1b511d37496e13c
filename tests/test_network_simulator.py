"""Event loop: numba kernel vs a plain-Python reference, closed forms on idle networks, fault properties."""
import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rapidllm.network.api import CollectiveRequest, build_schedule, simulate_collective, simulate_concurrent
from rapidllm.network.collectives import from_lists
from rapidllm.network.routing import Router, route_table
from rapidllm.network.simulator import simulate_kernel
from rapidllm.network.topology import build_topology
from rapidllm.spec.errors import SpecError
from rapidllm.spec.network import DimensionSpec, FaultSpec, NetworkSpec

S, B, A = 2.0**26, 100e9, 1e-6


def net(topology, size, bw=B, lat=A, faults=(), shape=(), **kw):
    return NetworkSpec("t", (DimensionSpec("d0", topology, size, bw, lat, shape, **kw),), faults=tuple(faults))


def simulate_py(route_of, nbytes, release, dep_ptr, dep_idx, route_ptr, route_links, link_bw, link_lat):
    """Same contract as simulate_kernel, pure Python with heapq (reference for tests)."""


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


def run_both(network, op, nbytes, ranks, algorithm, chunks):
    topo = build_topology(network)
    sched, _, _ = build_schedule(topo, op, nbytes, ranks, algorithm, chunks)
    ro, ptr, links = route_table(Router(topo), sched.src, sched.dst)
    args = (ro, sched.nbytes, np.zeros(len(sched)), sched.dep_ptr, sched.dep_idx, ptr, links,
            topo.bandwidth.copy(), topo.latency.copy())
    return simulate_kernel(*args), simulate_py(*args)


@pytest.mark.parametrize("topology, size, shape, op, algorithm", [
    ("ring", 8, (), "all_reduce", "ring"), ("switch", 8, (), "all_reduce", "tree"),
    ("torus", 16, (4, 4), "all_to_all", "direct"), ("fully_connected", 8, (), "all_reduce", "direct"),
    ("mesh", 16, (4, 4), "all_reduce", "halving_doubling"), ("ring", 6, (), "broadcast", "ring"),
])
def test_numba_matches_python_reference(topology, size, shape, op, algorithm):
    (f1, b1, e1), (f2, b2, e2) = run_both(net(topology, size, shape=shape), op, S, list(range(size)), algorithm, 3)
    assert e1 == e2 and np.array_equal(f1, f2) and np.array_equal(b1, b2)


@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_ring_all_reduce_closed_form_idle_ring(n):
    r = simulate_collective(net("ring", n), "all_reduce", S, n, algorithm="ring", chunks=1)
    assert r.time_s == pytest.approx(2 * (n - 1) * (A + S / (n * B)), rel=1e-12)
    assert r.events == 2 * (n - 1) * n


@pytest.mark.parametrize("chunks", [2, 4, 8])
def test_chunked_ring_all_reduce_keeps_links_busy(chunks):
    n = 8                                      # A <= (C-1) S/(nCB): links never idle, one latency at the end
    r = simulate_collective(net("ring", n), "all_reduce", S, n, algorithm="ring", chunks=chunks)
    assert r.time_s == pytest.approx(2 * (n - 1) * S / (n * B) + A, rel=1e-12)
    assert r.link_busy.max() == pytest.approx(2 * (n - 1) * S / (n * B))


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
def test_ring_rs_ag_closed_form(op):
    n = 8
    r = simulate_collective(net("ring", n), op, S, n, algorithm="ring", chunks=1)
    assert r.time_s == pytest.approx((n - 1) * (A + S / (n * B)), rel=1e-12)


def test_switch_two_hops_per_transfer():
    n = 8
    r = simulate_collective(net("switch", n), "all_reduce", S, n, algorithm="ring", chunks=1)
    assert r.time_s == pytest.approx(2 * (n - 1) * 2 * (A + S / (n * B)), rel=1e-12)
    r = simulate_collective(net("switch", 2), "send_recv", S, [0, 1], chunks=1)
    assert r.time_s == pytest.approx(2 * (A + S / B))


def test_fully_connected_direct_all_to_all():
    n = 8
    r = simulate_collective(net("fully_connected", n), "all_to_all", S, n, algorithm="direct", chunks=1)
    assert r.time_s == pytest.approx(A + S / (n * B), rel=1e-12)


def test_send_recv_store_and_forward_pipeline():
    r = simulate_collective(net("ring", 8), "send_recv", S, [0, 3], chunks=4)
    x = S / (4 * B)
    assert r.time_s == pytest.approx(3 * x + 3 * (x + A), rel=1e-12)


def test_contention_two_flows_one_link_take_twice_as_long():
    network = net("ring", 4, lat=0.0)
    one = simulate_concurrent(network, [CollectiveRequest("send_recv", S, (0, 1), chunks=1)])[0][0]
    two = simulate_concurrent(network, [CollectiveRequest("send_recv", S, (0, 1), chunks=1),
                                        CollectiveRequest("send_recv", S, (3, 1), chunks=1)])[0]
    assert one == pytest.approx(S / B) and two[0] == pytest.approx(S / B)   # different links: no contention
    shared = simulate_concurrent(network, [CollectiveRequest("send_recv", S, (0, 1), chunks=1),
                                           CollectiveRequest("send_recv", S, (0, 1), chunks=1)])[0]
    assert sorted(shared) == pytest.approx([S / B, 2 * S / B])
    via = simulate_concurrent(network, [CollectiveRequest("send_recv", S, (0, 1), chunks=1),
                                        CollectiveRequest("send_recv", S, (0, 2), chunks=1)])[0]
    assert via[1] == pytest.approx(3 * S / B)     # queued behind the first on 0->1, then 1->2


def test_soft_fault_on_only_path_is_four_times_slower():
    healthy = simulate_collective(net("ring", 2, lat=0.0), "send_recv", S, [0, 1], chunks=1).time_s
    slow = simulate_collective(net("ring", 2, lat=0.0, faults=[FaultSpec((0, 1), bandwidth_factor=0.25)]),
                               "send_recv", S, [0, 1], chunks=1).time_s
    assert slow == pytest.approx(4 * healthy)


def test_hard_fault_reroutes_and_is_not_faster():
    healthy = simulate_collective(net("ring", 8), "all_reduce", S, 8, algorithm="ring")
    dead = simulate_collective(net("ring", 8, faults=[FaultSpec((2, 3), failed=True)]), "all_reduce", S, 8,
                               algorithm="ring")
    assert dead.time_s > healthy.time_s
    assert dead.link_busy[dead.topology.link_of[(2, 3)]] == 0


def test_cut_off_group_is_an_error_naming_the_link():
    with pytest.raises(SpecError, match=r"rank 0 -> rank 1"):
        simulate_collective(net("ring", 2, faults=[FaultSpec((0, 1), failed=True)]), "all_reduce", S, 2)


def test_deterministic_results():
    a = simulate_collective(net("torus", 16, shape=(4, 4)), "all_to_all", S, 16)
    b = simulate_collective(net("torus", 16, shape=(4, 4)), "all_to_all", S, 16)
    assert a.time_s == b.time_s and np.array_equal(a.link_busy, b.link_busy) and a.busiest_link == b.busiest_link


def test_hierarchical_two_dimensions_beats_flat_ring_and_pipelines():
    two = NetworkSpec("t", (DimensionSpec("a", "switch", 8, 300e9, 1e-6),
                            DimensionSpec("b", "fat_tree", 4, 25e9, 2e-6, leaf_size=4, rail_optimized=True)))
    h = simulate_collective(two, "all_reduce", 2.0**30, 32, algorithm="hierarchical")
    flat = simulate_collective(two, "all_reduce", 2.0**30, 32, algorithm="ring")
    inner, outer = 2 * 7 / 8 * 2**30 / 300e9, 2 * 3 / 4 * 2**27 / 25e9    # inner RS+AG, outer all-reduce of S/8
    assert h.time_s < flat.time_s
    # the stages overlap chunk by chunk: less than one after the other, more than the busier links' share
    assert max(inner, outer) < h.time_s < inner + outer


def test_concurrent_collectives_share_links():
    n = 8
    alone = simulate_collective(net("ring", n), "all_reduce", S, n, algorithm="ring").time_s
    both, _, _ = simulate_concurrent(net("ring", n), [CollectiveRequest("all_reduce", S, tuple(range(n)), "ring"),
                                                      CollectiveRequest("all_reduce", S, tuple(range(n)), "ring")])
    assert max(both) == pytest.approx(2 * alone, rel=0.01)


def test_bad_schedule_dependencies_rejected():
    s = from_lists([0], [1], [1.0], [0], [[0]])
    with pytest.raises(ValueError):
        simulate_kernel(np.zeros(1, np.int32), s.nbytes, np.zeros(1), s.dep_ptr, s.dep_idx,
                        np.array([0, 1]), np.array([0], np.int32), np.ones(1), np.zeros(1))


TOPOS = st.sampled_from([("ring", 6, ()), ("switch", 6, ()), ("fully_connected", 5, ()), ("torus", 9, (3, 3)),
                         ("mesh", 8, (4, 2)), ("kingmesh", 9, (3, 3)), ("fat_tree", 8, ())])
OPS = st.sampled_from([("all_reduce", "auto"), ("all_reduce", "tree"), ("all_to_all", "direct"),
                       ("reduce_scatter", "ring"), ("all_gather", "direct"), ("broadcast", "ring")])


@settings(max_examples=40, deadline=None)
@given(TOPOS, OPS, st.floats(1e3, 1e9), st.floats(1.0, 8.0), st.integers(1, 4), st.floats(0.0, 5e-6))
def test_more_bandwidth_never_slows_an_idle_network(topo, op, nbytes, factor, chunks, lat):
    kind, size, shape = topo
    kw = {"leaf_size": 2} if kind == "fat_tree" else {}
    slow = simulate_collective(net(kind, size, 50e9, lat, shape=shape, **kw), op[0], nbytes, size, op[1], chunks)
    fast = simulate_collective(net(kind, size, 50e9 * factor, lat, shape=shape, **kw), op[0], nbytes, size, op[1],
                               chunks)
    assert fast.time_s <= slow.time_s * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(3, 10), st.integers(0, 9), st.floats(0.05, 1.0), st.integers(1, 4))
def test_faults_never_speed_up_a_ring_all_reduce(n, a, factor, chunks):
    a %= n
    healthy = simulate_collective(net("ring", n), "all_reduce", S, n, "ring", chunks).time_s
    soft = simulate_collective(net("ring", n, faults=[FaultSpec((a, (a + 1) % n), bandwidth_factor=factor)]),
                               "all_reduce", S, n, "ring", chunks).time_s
    hard = simulate_collective(net("ring", n, faults=[FaultSpec((a, (a + 1) % n), failed=True)]),
                               "all_reduce", S, n, "ring", chunks).time_s
    assert soft >= healthy * (1 - 1e-12) and hard >= healthy * (1 - 1e-12)
    if factor < 0.9:
        assert soft > healthy


def test_chunk_count_follows_the_network_chunk_size():
    """ceil(bytes per transfer / chunk size), at least 1, at most MAX_CHUNKS; explicit counts still win."""
    from rapidllm.network.api import MAX_CHUNKS, chunk_count
    topo = build_topology(net("switch", 8))
    c = topo.chunk_bytes
    assert chunk_count(topo, "all_reduce", 8 * c, 8) == 1
    assert chunk_count(topo, "all_reduce", 8 * c + 1, 8) == 2
    assert chunk_count(topo, "send_recv", 3 * c, 2) == 3
    assert chunk_count(topo, "all_reduce", 1.0, 8) == 1
    assert chunk_count(topo, "all_reduce", 1e15, 8) == MAX_CHUNKS
    _, used, _ = build_schedule(topo, "all_reduce", 64 * c, list(range(8)), "ring", None)
    assert used == 8
    _, used, _ = build_schedule(topo, "all_reduce", 64 * c, list(range(8)), "ring", 3)
    assert used == 3

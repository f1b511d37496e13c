"""Fast paths of the event loop (issue 5 speed/memory targets) agree bit for bit with the reference.

- ring_kernel (lazy RingSchedule, no per-transfer inputs) == simulate_kernel on the materialized schedule
  == the plain-Python reference, on topologies with 1-, 2- and many-hop routes, with release times; also
  for several contending rings of one shape (a `concat` of rings).
- RingSchedule's lazily built arrays equal a straightforward construction.
- simulate_kernel on random DAG schedules (ties, zero-hop barriers, long routes that force the event
  queue to compact its arena) == the reference.
"""
import copy
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_network_simulator import simulate_py

from rapidllm.network.api import build_schedule, run_schedule, simulate_collective
from rapidllm.network.collectives import (RingSchedule, Schedule, concat, from_lists, ring, ring_collective,
                                          ring_shape)
from rapidllm.network.routing import Router, route_table
from rapidllm.network.simulator import ring_kernel, simulate_kernel, simulate_schedule
from rapidllm.network.topology import build_topology
from rapidllm.spec.network import DimensionSpec, FaultSpec, NetworkSpec

S = 2.0**26


def net(topology, size, bw=100e9, lat=1e-6, faults=(), **kw):
    return NetworkSpec("t", (DimensionSpec("d0", topology, size, bw, lat, **kw),), faults=tuple(faults))


def ring_reference_arrays(group, steps, chunks, size):
    """The ring schedule built transfer by transfer (id = (chunk * steps + step) * n + position)."""
    n = len(group)
    src, dst, nb, ch, deps = [], [], [], [], []
    for c in range(chunks):
        for t in range(steps):
            for p in range(n):
                src.append(group[p]); dst.append(group[(p + 1) % n]); nb.append(size); ch.append(c)
                deps.append([((c * steps + t - 1) * n + (p - 1) % n)] if t else [])
    return from_lists(src, dst, nb, ch, deps)


@pytest.mark.parametrize("n, steps, chunks", [(2, 2, 1), (5, 8, 3), (8, 7, 4), (3, 1, 2)])
def test_ring_schedule_arrays_match_reference(n, steps, chunks):
    group = list(range(10, 10 + n))[::-1]
    lazy = ring(group, 123.0, steps, chunks)
    assert isinstance(lazy, RingSchedule) and not lazy.materialized and len(lazy) == chunks * steps * n
    ref = ring_reference_arrays(group, steps, chunks, 123.0)
    for f in ("src", "dst", "nbytes", "chunk", "dep_ptr", "dep_idx"):
        assert np.array_equal(getattr(lazy, f), getattr(ref, f)), f
        assert getattr(lazy, f).dtype == getattr(ref, f).dtype, f
    lazy.check()
    assert np.array_equal(lazy.deps(len(lazy) - 1), ref.deps(len(ref) - 1))


def test_ring_schedule_behaves_like_a_schedule():
    s = ring([0, 1, 2, 3], 8.0, 6, 2)
    assert s.group.dtype == np.int32 and s.steps == 6 and s.chunks == 2 and s.size == 8.0
    with pytest.raises(ValueError):
        s.nbytes[0] = 1.0                                  # materialized arrays are read-only
    r = dataclasses.replace(s, nbytes=np.full(len(s), 2.0))
    assert type(r) is Schedule and r.nbytes[0] == 2.0 and np.array_equal(r.src, s.src)
    c = copy.deepcopy(s)
    assert np.array_equal(c.dep_idx, s.dep_idx) and len(c) == len(s)
    s.nbytes = np.full(len(s), 4.0)                        # an assigned field wins and disables the fast path
    assert s.overridden and s.nbytes[0] == 4.0


def run_three(network, group, steps, chunks, size, release=None):
    topo = build_topology(network)
    router = Router(topo)
    sched = ring(group, size, steps, chunks)
    rel = np.zeros(len(sched)) if release is None else release
    g = sched.group
    pr, pptr, plinks = route_table(router, g, np.roll(g, -1))
    fast = ring_kernel(pr[None, :], steps, chunks, size, rel, pptr, plinks, topo.bandwidth, topo.latency)
    assert not sched.materialized
    ro, ptr, links = route_table(router, sched.src, sched.dst)
    args = (ro, sched.nbytes, rel.copy(), sched.dep_ptr, sched.dep_idx, ptr, links, topo.bandwidth, topo.latency)
    return fast, simulate_kernel(*args), simulate_py(*args)


def assert_same(*results):
    (f0, b0, e0) = results[0]
    for f, b, e in results[1:]:
        assert e == e0 and np.array_equal(f, f0) and np.array_equal(b, b0)


@pytest.mark.parametrize("network, n", [
    (net("ring", 8), 8), (net("switch", 8), 8), (net("ring", 9, faults=[FaultSpec((3, 4), failed=True)]), 9),
    (net("fat_tree", 8, leaf_size=2), 8), (net("ring", 6, lat=0.0), 6), (net("torus", 12, shape=(4, 3)), 12),
])
@pytest.mark.parametrize("chunks", [1, 3])
def test_ring_kernel_matches_generic_and_reference(network, n, chunks):
    group = list(range(n))
    assert_same(*run_three(network, group, 2 * (n - 1), chunks, S / (n * chunks)))
    rng = np.random.default_rng(n * 10 + chunks)
    group = [int(x) for x in rng.permutation(n)]            # non-neighbour hops, shared links
    release = rng.choice([0.0, 1e-6, 3e-6], size=2 * (n - 1) * chunks * n)
    assert_same(*run_three(network, group, 2 * (n - 1), chunks, S / (n * chunks), release))


@pytest.mark.parametrize("network, m, n", [
    (net("fat_tree", 16, leaf_size=4), 4, 4), (net("ring", 12), 3, 4), (net("switch", 8), 2, 4),
    (net("ring", 9, faults=[FaultSpec((3, 4), failed=True)]), 3, 3),
])
@pytest.mark.parametrize("chunks", [1, 3])
def test_concat_of_rings_runs_on_ring_kernel_and_matches_generic(network, m, n, chunks):
    """Contending rings of one shape (sharing uplinks and ring links) run on ring_kernel unmaterialized,
    with the generic kernel's and the reference's numbers bit for bit."""
    topo = build_topology(network)
    rng = np.random.default_rng(m * 100 + n * 10 + chunks)
    groups = rng.permutation(m * n).reshape(m, n)
    sched = concat([ring([int(r) for r in g], S / (n * chunks), 2 * (n - 1), chunks) for g in groups])
    assert ring_shape(sched) is not None
    release = rng.choice([0.0, 1e-6, 3e-6], size=len(sched))
    fast = simulate_schedule(Router(topo), sched, release, topo.bandwidth, topo.latency)
    assert not sched.materialized                          # nothing per transfer was built
    ro, ptr, links = route_table(Router(topo), sched.src, sched.dst)
    args = (ro, sched.nbytes, release.copy(), sched.dep_ptr, sched.dep_idx, ptr, links, topo.bandwidth,
            topo.latency)
    assert_same(fast, simulate_kernel(*args), simulate_py(*args))
    sched.nbytes = np.full(len(sched), S)                   # an assigned field disables the fast path
    assert ring_shape(sched) is None


def test_ring_fast_path_used_by_simulate_collective_and_equals_generic():
    network = net("ring", 64, 50e9, 500e-9)
    topo = build_topology(network)
    sched, _, _ = build_schedule(topo, "all_reduce", float(64 << 20), list(range(64)), "ring", 4)
    fast = run_schedule(topo, sched, np.zeros(len(sched)), 1.0)
    assert isinstance(sched, RingSchedule) and not sched.materialized
    generic = run_schedule(topo, Schedule(sched.src, sched.dst, sched.nbytes, sched.chunk, sched.dep_ptr,
                                          sched.dep_idx), np.zeros(len(sched)), 1.0)
    assert_same(fast, generic)
    r = simulate_collective(network, "all_reduce", float(64 << 20), 64, algorithm="ring", chunks=4)
    assert r.time_s == pytest.approx(2 * 63 * (64 << 20) / (64 * 50e9) + 500e-9, rel=1e-12)
    assert r.events == 2 * 63 * 64 * 4


def test_simulate_schedule_does_not_touch_release():
    topo = build_topology(net("ring", 4))
    sched = ring_collective("all_reduce", [0, 1, 2, 3], S, 2)
    release = np.linspace(0, 1e-6, len(sched))
    keep = release.copy()
    bw = topo.bandwidth.copy()
    simulate_schedule(Router(topo), sched, release, bw, topo.latency)
    simulate_schedule(Router(topo), from_lists(list(sched.src), list(sched.dst), list(sched.nbytes),
                                               list(sched.chunk), [list(sched.deps(i)) for i in range(len(sched))]),
                      release, bw, topo.latency)
    assert np.array_equal(release, keep)


TOPOS = [net("ring", 12), net("switch", 6), net("torus", 9, shape=(3, 3)),
         net("ring", 10, faults=[FaultSpec((0, 1), failed=True), FaultSpec((5, 6), bandwidth_factor=0.3)])]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(range(len(TOPOS))), st.integers(1, 60), st.data())
def test_random_dag_schedules_match_reference(ti, n, data):
    topo = build_topology(TOPOS[ti])
    ranks = topo.n_ranks
    src = data.draw(st.lists(st.integers(0, ranks - 1), min_size=n, max_size=n))
    dst = data.draw(st.lists(st.integers(0, ranks - 1), min_size=n, max_size=n))   # src == dst: barrier
    nb = data.draw(st.lists(st.sampled_from([0.0, 1e3, 1e3, 4e6, 123456.0]), min_size=n, max_size=n))
    deps = [sorted(set(data.draw(st.lists(st.integers(0, i - 1), max_size=3)))) if i else [] for i in range(n)]
    rel = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.0, 1e-6, 2.5e-6]), min_size=n, max_size=n)))
    s = from_lists(src, dst, nb, [0] * n, deps)
    ro, ptr, links = route_table(Router(topo), s.src, s.dst)
    args = (ro, s.nbytes, rel, s.dep_ptr, s.dep_idx, ptr, links, topo.bandwidth, topo.latency)
    assert_same(simulate_kernel(*args), simulate_py(*args))


def test_many_hops_force_queue_compaction():
    """Every transfer crosses 8 links (more pushes than the generic kernel's arena holds before reuse)."""
    topo = build_topology(net("ring", 16))
    n = 200
    src = [i % 16 for i in range(n)]
    dst = [(i + 8) % 16 for i in range(n)]
    deps = [[i - 16] if i >= 16 else [] for i in range(n)]
    s = from_lists(src, dst, [1e5 * (1 + i % 3) for i in range(n)], [0] * n, deps)
    ro, ptr, links = route_table(Router(topo), s.src, s.dst)
    args = (ro, s.nbytes, np.zeros(n), s.dep_ptr, s.dep_idx, ptr, links, topo.bandwidth, topo.latency)
    a, b = simulate_kernel(*args), simulate_py(*args)
    assert a[2] == 8 * n
    assert_same(a, b)


def test_sequence_barriers_wait_for_every_arrival_of_their_rank_and_chunk():
    from rapidllm.network.collectives import concat, direct, sequence
    first = concat([ring_collective("reduce_scatter", [0, 1, 2, 3, 4], 1e6, 2), direct("all_gather", [1, 3], 1e6, 2)])
    second = direct("all_gather", [0, 1, 2, 3, 4], 1e6, 2)
    s = sequence(first, second)
    s.check()
    n1 = len(first)
    bars = [i for i in range(n1, len(s)) if s.src[i] == s.dst[i] and s.nbytes[i] == 0]
    assert len(bars) == 5 * 2
    for b in bars:
        r, c = s.src[b], s.chunk[b]
        want = [i for i in range(n1) if first.dst[i] == r and first.chunk[i] == c]
        assert list(s.deps(b)) == want
    for i in range(n1 + len(bars), len(s)):             # every second-stage transfer waits for its barrier
        j = i - n1 - len(bars)
        bar = [b for b in s.deps(i) if b in bars]
        assert len(bar) == 1 and s.src[bar[0]] == second.src[j] and s.chunk[bar[0]] == second.chunk[j]


@pytest.mark.parametrize("seed", range(8))
def test_sequence_of_rings_joins_them_without_their_arrays(seed):
    """Ring stages are joined from their shapes (collectives._ring_joint) with the same barriers as from
    their arrays (_joint), and every barrier waits for exactly the arrivals into its rank and chunk."""
    from rapidllm.network.collectives import _ring_joint, sequence
    from rapidllm.network.stage_joins import index_join
    rng = np.random.default_rng(seed)
    m1, n1 = int(rng.integers(1, 4)), int(rng.integers(2, 6))
    ranks = rng.permutation(40)
    g1 = ranks[:m1 * n1].reshape(m1, n1)
    m2 = int(rng.integers(1, 4))
    n2 = int(rng.integers(2, 6))
    g2 = rng.choice(ranks[:m1 * n1 + 4], size=m2 * n2, replace=False).reshape(m2, n2)  # some with no arrivals
    c1, c2 = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    s1, s2 = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    first = concat([ring([int(r) for r in g], 1.0, s1, c1) for g in g1])
    second = concat([ring([int(r) for r in g], 1.0, s2, c2) for g in g2])
    fast = _ring_joint(first, second)
    assert fast is not None and not first.materialized and not second.materialized
    slow = index_join(first, second)
    assert fast.k == slow.k and np.array_equal(fast.uniq, slow.uniq)
    for x, y in zip(fast.arrays(), slow.arrays()):
        assert np.array_equal(x, y) and x.dtype == y.dtype
    assert fast.same(slow) and slow.same(fast) and fast.same(fast)
    # the ring form's barrier times and second-stage releases (from shapes) equal the listed arrivals'
    f1 = rng.random(len(first))
    rel_bars, rel2 = rng.random(fast.nb), rng.random(len(second))
    bars = fast.barriers(f1, rel_bars)
    assert np.array_equal(bars, slow.barriers(f1, rel_bars))
    for release in (rel2, 0.25):             # one float: a broadcast over the steps, the same in C order
        assert np.array_equal(np.ravel(fast.second_release(release, bars)), slow.second_release(release, bars))
    s = sequence(first, second)
    s.check()
    n_bars = len(s) - len(first) - len(second)
    for b in range(len(first), len(first) + n_bars):
        want = [i for i in range(len(first)) if first.dst[i] == s.src[b] and first.chunk[i] == s.chunk[b]]
        assert list(s.deps(b)) == want
    shared = concat([ring([0, 1, 2], 1.0, 2, 1), ring([3, 1, 4], 1.0, 2, 1)])   # rank 1: two ring positions
    assert _ring_joint(shared, second) is None


def test_release_of_the_wrong_length_is_rejected():
    topo = build_topology(net("ring", 4))
    sched = ring_collective("all_reduce", [0, 1, 2, 3], S, 2)
    with pytest.raises(ValueError, match="release"):
        simulate_schedule(Router(topo), sched, np.zeros(len(sched) - 1), topo.bandwidth, topo.latency)
    g = sched.group
    pr, ptr, links = route_table(Router(topo), g, np.roll(g, -1))
    with pytest.raises(ValueError, match="release"):
        ring_kernel(pr[None, :], sched.steps, sched.chunks, sched.size, np.zeros(3), ptr, links, topo.bandwidth,
                    topo.latency)
    ro, ptr, links = route_table(Router(topo), sched.src, sched.dst)
    with pytest.raises(ValueError):
        simulate_kernel(ro, sched.nbytes, np.zeros(3), sched.dep_ptr, sched.dep_idx, ptr, links, topo.bandwidth,
                        topo.latency)

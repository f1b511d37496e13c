"""Stage-by-stage and one-copy simulation (network/decompose.py) against the full event simulation, bit for bit."""
import numpy as np
import pytest

from rapidllm.network.api import build_schedule, run_schedule, setup_latency
from rapidllm.network.collectives import concat
from rapidllm.network.decompose import run_replicated, run_staged
from rapidllm.network.routing import Router
from rapidllm.network.simulator import simulate_schedule
from rapidllm.network.topology import build_topology
from rapidllm.spec.network import DimensionSpec, FaultSpec, NetworkSpec

GB = 1e9


def fabric(kind: int, faults=()) -> NetworkSpec:
    """Fabrics shaped like the sweeps' (switch inside a node, rail-optimized or plain fat tree, torus)."""
    nv = DimensionSpec("nvlink", "switch", 8, 300 * GB, 1.3e-6, collective_latency_s=6.6e-6)
    if kind == 0:       # rail-optimized fat tree across 2 scalable units
        ib = DimensionSpec("ib", "fat_tree", 8, 25 * GB, 5e-6, leaf_size=4, spines=4, rail_optimized=True)
        dims = (nv, ib)
    elif kind == 1:     # plain fat tree: groups share leaf uplinks
        ib = DimensionSpec("ib", "fat_tree", 8, 25 * GB, 5e-6, leaf_size=4, spines=2)
        dims = (nv, ib)
    elif kind == 2:     # torus between nodes
        dims = (DimensionSpec("nvlink", "switch", 4, 300 * GB, 1.3e-6), DimensionSpec("t", "torus", 16, 50 * GB, 1e-6,
                                                                                     shape=(4, 4)))
    else:               # three levels: ring, switch, fat tree
        dims = (DimensionSpec("r", "ring", 2, 100 * GB, 0.5e-6), DimensionSpec("sw", "switch", 4, 200 * GB, 1e-6),
                DimensionSpec("ib", "fat_tree", 8, 25 * GB, 5e-6, leaf_size=4, spines=4, rail_optimized=True))
    return NetworkSpec(f"f{kind}", dims, faults=tuple(faults))


def strided_groups(world: int, inner: int, n: int, m: int) -> list[list[int]]:
    """m groups of n ranks, rank stride `inner` (a data-parallel axis after tp = inner)."""
    return [[b + inner * j for j in range(n)] for b in range(m) if b + inner * (n - 1) < world]


def both(topo, op, nbytes, groups, algorithm="auto", chunks=None):
    """(run_schedule's result, the full event simulation of the same concat, which shortcuts applied at the
    top: 'replicas' and/or 'stages' of the first group's schedule)."""
    router = Router(topo)
    built = [build_schedule(topo, op, nbytes, list(g), algorithm, chunks) for g in groups]
    sched = concat([b[0] for b in built])
    setup = setup_latency(topo, built[0][2], list(groups[0]))
    release = np.full(len(sched), setup)
    bw = np.where(topo.alive, topo.bandwidth * 0.8, 1.0)
    used = set()
    if run_replicated(router, sched, release, bw, topo.latency) is not None:
        used.add("replicas")
    one = built[0][0]
    if run_staged(router, one, release[:len(one)], bw, topo.latency) is not None:
        used.add("stages")
    fast = run_schedule(topo, sched, release, 0.8, router)
    full = simulate_schedule(Router(topo), sched, release, bw, topo.latency)
    uniform_release_matches(topo, sched, setup, full)
    return fast, full, used


def uniform_release_matches(topo, sched, setup, full):
    """The release as one float (every transfer at the set-up, as CommCost passes it) gives the full
    simulation's finish times, busy seconds and events, and with whole=False its latest finish exactly."""
    same(run_schedule(topo, sched, float(setup), 0.8, Router(topo)), full)
    latest, busy, events = run_schedule(topo, sched, float(setup), 0.8, Router(topo), whole=False)
    assert latest == full[0].max() and np.array_equal(busy, full[1]) and events == full[2]


def same(fast, full):
    assert np.array_equal(fast[0], full[0])            # finish time of every transfer, bit for bit
    assert np.array_equal(fast[1], full[1])            # busy seconds of every link
    assert fast[2] == full[2]


def test_randomized_against_full_simulation():
    rng = np.random.default_rng(16)
    used = {"replicas": 0, "stages": 0, "none": 0}
    for _ in range(70):
        kind = int(rng.integers(4))
        topo = build_topology(fabric(kind))
        world = topo.n_ranks
        inner = int(rng.choice([1, 2, 4, 8]))
        n = int(rng.choice([2, 4, 8, 16]))
        if inner * (n - 1) >= world:
            n = max(2, world // inner)
        groups = strided_groups(world, inner, n, int(rng.integers(1, 5)))
        if rng.random() < 0.2:                           # shuffled members: relabelled routes, still exact
            groups = [list(rng.permutation(g)) for g in groups]
        op = str(rng.choice(["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]))
        nbytes = float(rng.choice([2.0**12, 3e6, 2.0**27, 7.3e8]))
        chunks = None if rng.random() < 0.7 else int(rng.integers(1, 4))
        fast, full, hit = both(topo, op, nbytes, groups, chunks=chunks)
        same(fast, full)
        for k in hit or {"none"}:
            used[k] += 1
    assert min(used.values()) >= 5, used                 # every branch exercised


@pytest.mark.parametrize("fault", [dict(bandwidth_factor=0.5), dict(extra_latency_s=2e-6), dict(failed=True)])
def test_a_fault_in_one_group_refuses_the_shortcut(fault):
    groups = strided_groups(64, 8, 8, 4)                 # 4 rails, one rank per node each
    clean = build_topology(fabric(0))
    fast, full, hit = both(clean, "all_gather", 2.0**27, groups)
    assert hit == {"replicas"}
    same(fast, full)
    link = Router(clean).route(groups[1][2], groups[1][3])[0]     # rank -> leaf uplink of group 1 only
    bad = build_topology(fabric(0, [FaultSpec((int(clean.src[link]), int(clean.dst[link])), **fault)]))
    fast, full, hit = both(bad, "all_gather", 2.0**27, groups)
    assert "replicas" not in hit
    same(fast, full)
    assert not np.array_equal(full[0], both(clean, "all_gather", 2.0**27, groups)[1][0])   # the fault matters


def test_shared_uplinks_and_unequal_parts_run_in_full():
    topo = build_topology(fabric(1))                     # plain fat tree: rails share leaf-to-spine links
    fast, full, hit = both(topo, "all_gather", 2.0**27, strided_groups(64, 8, 8, 4))
    assert "replicas" not in hit
    same(fast, full)
    rail = build_topology(fabric(0))                     # different group shapes (one group spans two units)
    fast, full, hit = both(rail, "all_gather", 2.0**27, [[0, 8], [1, 41]])
    assert "replicas" not in hit
    same(fast, full)


@pytest.mark.parametrize("op, staged", [("all_gather", True), ("reduce_scatter", True), ("all_reduce", False)])
def test_hierarchical_stages(op, staged):
    """Two ranks per node over 8 nodes: NVLink and fat-tree stages share no link, except an all-reduce's
    reduce-scatter and all-gather, which both run on NVLink (its outer sequence is simulated whole)."""
    topo = build_topology(fabric(0))
    group = [r for r in range(64) if r % 8 in (0, 4)]
    fast, full, hit = both(topo, op, 3e8, [group])
    assert ("stages" in hit) == staged
    same(fast, full)


def test_unequal_rings_of_equal_length_and_concurrent_requests():
    """Parts of equal length but different ring shapes (4 ranks x 2 steps, 2 ranks x 4 steps) and a
    sequence of such stages: units still line up with transfers, and the answer is the full one."""
    from rapidllm.network.collectives import ring, sequence
    topo = build_topology(fabric(2))
    router = Router(topo)
    bw = np.where(topo.alive, topo.bandwidth, 1.0)
    for sched in (concat([ring([0, 1, 2, 3], 1e6, 2, 1), ring([4, 5], 1e6, 4, 1)]),
                  sequence(ring([0, 4, 8, 12], 1e6, 3, 2), concat([ring([0, 1], 1e6, 1, 2), ring([4, 5], 1e6, 1, 2)]))):
        release = np.zeros(len(sched))
        same(run_schedule(topo, sched, release, 1.0, router),
             simulate_schedule(Router(topo), sched, release, bw, topo.latency))

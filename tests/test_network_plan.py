"""Recorded collective simulations (network/plan.py) replayed for other byte counts equal fresh ones, bit for bit."""
import numpy as np
import pytest

from rapidllm.network.api import (build_schedule, chunk_count, default_chunks, link_bandwidths, run_schedule,
                                  setup_latency)
from rapidllm.network.collectives import PER_CHUNK, concat, per_chunk
from rapidllm.network.plan import Plan, Traced, replay
from rapidllm.network.routing import Router
from rapidllm.network.topology import build_topology
from rapidllm.spec.network import FaultSpec
from test_network_decompose import fabric, strided_groups



def test_traced_bytes_remember_divisions_only():
    s = Traced(1e9) / 3 / (4 * 7)
    assert s == 1e9 / 3 / 28 and s.recipe == (3, 28) and replay(1e9, s.recipe, 1) == s
    ring = per_chunk(Traced(1e9) / 3, 4, 7)             # a ring's size: marked as a division per chunk
    assert ring == 1e9 / 3 / 28 and ring.recipe == (3, (PER_CHUNK, 4))
    assert replay(1e9, ring.recipe, 7) == ring and replay(5e8, ring.recipe, 11) == 5e8 / 3 / 44
    assert not isinstance(Traced(1e9) * 2, Traced) and not isinstance(Traced(5.0) - 1, Traced)
    assert not isinstance(Traced(8.0) / Traced(2.0), Traced)       # a divisor that depends on the bytes
    assert float(Traced(2.5)) == 2.5 and type(float(Traced(2.5))) is float


def _fresh(topo, op, nbytes, groups, algorithm):
    """(time, events) of the collective simulated the ordinary way (plain floats, no plan)."""
    sched = concat([build_schedule(topo, op, nbytes, list(g), algorithm, None)[0] for g in groups])
    setup = setup_latency(topo, algorithm, list(groups[0]))
    finish, _, events = run_schedule(topo, sched, np.full(len(sched), setup), 0.8, Router(topo))
    return float(finish.max()), int(events)


def _record(topo, op, nbytes, groups, algorithm):
    sched = concat([build_schedule(topo, op, Traced(nbytes), list(g), algorithm, None)[0] for g in groups])
    rec: list = []
    setup = setup_latency(topo, algorithm, list(groups[0]))
    finish, _, events = run_schedule(topo, sched, np.full(len(sched), setup), 0.8, Router(topo), rec)
    plan = Plan.of(rec, len(sched), link_bandwidths(topo, 0.8), topo.latency)
    return plan, setup, (float(finish.max()), int(events))


@pytest.mark.parametrize("kind,faulty", [(0, False), (1, False), (3, False), (0, True)])
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_reduce"])
def test_replayed_plans_equal_fresh_simulations(kind, faulty, op):
    net = fabric(kind)
    if faulty:          # one degraded NVLink link: its group is no copy of the others
        clean = build_topology(net)
        net = fabric(kind, [FaultSpec((int(clean.src[0]), int(clean.dst[0])), bandwidth_factor=0.5)])
    topo = build_topology(net)
    world = topo.n_ranks
    cases = [(strided_groups(world, 4, 8, 4), "hierarchical"),     # across nodes: staged, replicated
             ([list(range(b, b + 4)) for b in range(0, 8, 4)], "ring")]    # inside a node
    replayed = 0
    for groups, algorithm in cases:
        for small, large in ((1000.0, 1777.0), (8e9, 9.5e9 + 5)):      # 1 chunk; 32 chunks (the cap)
            chunks = {default_chunks(topo, op, b, groups[0], algorithm) for b in (small, large)}
            assert len(chunks) == 1                     # a plan is for one chunk count
            plan, setup, recorded = _record(topo, op, small, groups, algorithm)
            assert recorded == _fresh(topo, op, small, groups, algorithm)      # recording changes nothing
            again = plan.time(large, setup)
            if again is not None:
                replayed += 1
                assert again == _fresh(topo, op, large, groups, algorithm)
    assert replayed >= 2


@pytest.mark.parametrize("kind,faulty", [(0, False), (1, False), (3, False), (0, True)])
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_reduce"])
def test_plans_for_other_chunk_counts_equal_fresh_simulations(kind, faulty, op):
    """A plan recorded in one chunk count and carried over to others (Plan.for_chunks: the sweep's
    chunk counts follow the bytes) gives the fresh simulation's time and events in each, bit for bit."""
    net = fabric(kind)
    if faulty:
        clean = build_topology(net)
        net = fabric(kind, [FaultSpec((int(clean.src[0]), int(clean.dst[0])), bandwidth_factor=0.5)])
    topo = build_topology(net)
    cases = [(strided_groups(topo.n_ranks, 4, 8, 4), "hierarchical"),
             (strided_groups(topo.n_ranks, 1, 16, 1), "hierarchical"),                  # one group, 2 nodes
             ([list(range(b, b + 4)) for b in range(0, 8, 4)], "ring")]
    derived, replayed = [], 0
    for groups, algorithm in cases:
        sizes = [1000.0, 3e7 + 11, 7e7, 2e8 + 3, 8e9]           # chunk counts from 1 to the cap
        chunks = [default_chunks(topo, op, b, groups[0], algorithm) for b in sizes]
        assert len(set(chunks)) >= 4
        plan, setup, _ = _record(topo, op, sizes[2], groups, algorithm)
        derived.append(0)
        for b, c in zip(sizes, chunks):
            other = plan.for_chunks(c)
            if other is None:
                continue
            derived[-1] += 1
            sched = concat([build_schedule(topo, op, b, list(g), algorithm, None)[0] for g in groups])
            assert other.transfers == len(sched)
            again = other.time(b, setup)
            assert again is None or again == _fresh(topo, op, b, groups, algorithm)
            replayed += again is not None
    assert replayed == sum(derived)                     # idle groups: equal release times throughout
    assert derived[2] == len(sizes)                     # rings carry over
    if op != "all_reduce" and not faulty:               # two-level joins of rings carry over (kind 3: three
        assert derived[1] == (0 if kind == 3 else len(sizes))     # levels, a join of joins, does not)
        assert derived[0] == (0 if kind == 1 else len(sizes))     # plain fat tree: contending, no plan


@pytest.mark.parametrize("kind,op,groups", [(0, "send_recv", [[0, 8], [1, 9], [2, 10], [3, 11]]),  # stage boundary
                                            (1, "send_recv", [[0, 32], [1, 33], [2, 34], [3, 35]]),   # contending
                                            (0, "send_recv", [[5, 40]]),
                                            (0, "all_to_all", [[0, 1, 2, 3], [4, 5, 6, 7]]),
                                            (0, "reduce_scatter", [[0, 8, 16, 24]])])
def test_direct_plans_equal_fresh_simulations_in_every_chunk_count(kind, op, groups):
    """Schedules of dependency-free chunks (collectives.direct), alone, replicated or contending, replay as
    `plan.Direct`, also in other chunk counts, with the fresh simulation's time and events."""
    topo = build_topology(fabric(kind))
    sizes = [1000.0, 3e6 + 7, 5e7, 9e8 + 1]
    chunks = [chunk_count(topo, op, b, len(groups[0]), "direct") for b in sizes]
    assert len(set(chunks)) >= 3
    plan, setup, recorded = _record(topo, op, sizes[1], groups, "direct")
    assert recorded == _fresh(topo, op, sizes[1], groups, "direct") and plan.root is not None
    for b, c in zip(sizes, chunks):
        other = plan.for_chunks(c)
        assert other is not None and other.time(b, setup) == _fresh(topo, op, b, groups, "direct")

"""A plan moved to a fabric of another size (network/relocate.py) gives that fabric's fresh simulation, bit for
bit, and is refused where the collective's footprint differs."""
import numpy as np
import pytest

from rapidllm.network.api import build_schedule, default_chunks, link_bandwidths, run_schedule, setup_latency
from rapidllm.network.collectives import concat
from rapidllm.network.decompose import units
from rapidllm.network.plan import Plan, Traced
from rapidllm.network.relocate import Origin, footprint, moved
from rapidllm.network.routing import Router
from rapidllm.network.topology import build_topology
from rapidllm.spec.network import DimensionSpec, FaultSpec, NetworkSpec
from test_network_decompose import strided_groups

GB = 1e9


def pod(nodes: int, faults=(), ib_bandwidth=25 * GB) -> NetworkSpec:
    """One design at several sizes: 8 GPUs per node on a switch, a rail-optimized fat tree of 4-node units."""
    nv = DimensionSpec("nvlink", "switch", 8, 300 * GB, 1.3e-6, collective_latency_s=6.6e-6)
    ib = DimensionSpec("ib", "fat_tree", nodes, ib_bandwidth, 5e-6, leaf_size=4, spines=4, rail_optimized=True)
    return NetworkSpec("pod", (nv, ib), faults=tuple(faults))


def _run(topo, router, op, nbytes, groups, algorithm, rec=None):
    sched = concat([build_schedule(topo, op, nbytes, list(g), algorithm, None)[0] for g in groups])
    setup = setup_latency(topo, algorithm, list(groups[0]))
    finish, _, events = run_schedule(topo, sched, np.full(len(sched), setup), 0.8, router, rec)
    return sched, setup, (float(finish.max()), int(events))


def _origin(topo, router, groups, sched):
    return Origin(topo, router, np.array([r for g in groups for r in g], dtype=np.int64), *units(sched))


CASES = [("all_gather", strided_groups(64, 4, 8, 4), "hierarchical"),      # 4 contending groups over 2 units
         ("reduce_scatter", strided_groups(64, 1, 16, 1), "hierarchical"),
         ("all_reduce", [list(range(b, b + 4)) for b in range(0, 8, 4)], "ring"),
         ("send_recv", [[r, r + 8] for r in range(8)], "direct")]


@pytest.mark.parametrize("op,groups,algorithm", CASES)
def test_moved_plans_equal_fresh_simulations_on_the_larger_fabric(op, groups, algorithm):
    small, large = build_topology(pod(8)), build_topology(pod(16))
    rs, rl = Router(small), Router(large)
    rec: list = []
    sched, _, _ = _run(small, rs, op, Traced(3e8), groups, algorithm, rec)
    plan = Plan.of(rec, len(sched), link_bandwidths(small, 0.8), small.latency)
    mine = footprint(_origin(small, rs, groups, sched), plan.link_bw, plan.link_lat)
    there = moved(plan, mine, _origin(large, rl, groups, sched), link_bandwidths(large, 0.8), large.latency)
    assert there is not None
    theirs = footprint(_origin(large, rl, groups, sched), link_bandwidths(large, 0.8), large.latency).used
    assert np.array_equal(mine.used, theirs) == (algorithm == "ring")    # across nodes: other link ids
    recorded = default_chunks(small, op, 3e8, groups[0], algorithm)
    for nbytes in (3e8, 1e8 + 7, 5e6):                   # the recorded size, others in other chunk counts
        chunks = default_chunks(large, op, nbytes, groups[0], algorithm)
        here = there if chunks == recorded else there.for_chunks(chunks)
        _, setup, fresh = _run(large, Router(large), op, nbytes, groups, algorithm)
        assert here.time(nbytes, setup) == fresh
    # the answers are shared (Plan.results) and are the small fabric's too
    assert there.results is plan.results and len(plan.results) == 3
    for (_, nbytes, setup), answer in plan.results.items():
        assert _run(small, Router(small), op, nbytes, groups, algorithm)[1:] == (setup, answer)


@pytest.mark.parametrize("other", ["degraded", "slower"])
def test_plans_are_not_moved_where_the_footprint_differs(other):
    op, groups, algorithm = CASES[0]
    small = build_topology(pod(8))
    if other == "degraded":         # one NVLink link of the first group at half bandwidth
        clean = build_topology(pod(16))
        big = pod(16, [FaultSpec((int(clean.src[0]), int(clean.dst[0])), bandwidth_factor=0.5)])
    else:
        big = pod(16, ib_bandwidth=20 * GB)
    large = build_topology(big)
    rs = Router(small)
    rec: list = []
    sched, _, _ = _run(small, rs, op, Traced(3e8), groups, algorithm, rec)
    plan = Plan.of(rec, len(sched), link_bandwidths(small, 0.8), small.latency)
    mine = footprint(_origin(small, rs, groups, sched), plan.link_bw, plan.link_lat)
    assert moved(plan, mine, _origin(large, Router(large), groups, sched), link_bandwidths(large, 0.8),
                 large.latency) is None

"""NCCL's flat-ring steps across nodes (network/ring_steps.py): a hierarchical all-gather / reduce-scatter under
`auto` waits for the ring steps NCCL takes over all N ranks and the hierarchical schedule does not."""
import math

import pytest

from rapidllm.caches import Caches
from rapidllm.network.api import CollectiveRequest, simulate_collective, simulate_concurrent
from rapidllm.network.ring_steps import extra_steps, ring_gap_latency
from rapidllm.network.routing import Router
from rapidllm.network.topology import build_topology
from rapidllm.spec.case import resolve_case
from rapidllm.spec.named import resolve_named
from rapidllm.spec.network import NetworkSpec

NVLINK_HOP = 2 * 1.3e-6          # superpod-hdr: rank -> NVSwitch -> rank, 1.3 us per link
IB_HOP = 2 * 5e-6                # two fat-tree links of 5 us inside one leaf (more through a spine)
BASE = 6.6e-6                    # NCCL's per-call base latency (collective_latency)


def superpod(world: int) -> NetworkSpec:
    mapping, where = resolve_named("network", "superpod-hdr", "test", "network")
    return NetworkSpec.from_mapping(mapping, where).sized_for(world, "test")


@pytest.mark.parametrize("sizes", [[8, 16], [4, 3, 5], [2, 2], [8, 1]])
def test_extra_steps_make_the_hierarchical_path_a_flat_ring(sizes):
    """(n_d - 1)(prod_{j>d} n_j - 1) per dimension: with the hierarchical schedule's sum_d (n_d - 1) steps, a
    chunk crosses N - 1 hops, as NCCL's ring (nsteps = nRanks - 1), of which n_last - 1 cross the outermost
    dimension (nInterSteps = nNodes - 1)."""
    extra = extra_steps(sizes)
    assert sum(extra) + sum(n - 1 for n in sizes) == math.prod(sizes) - 1
    assert extra[-1] == 0
    assert extra_steps([8, 16]) == [7 * 15, 0]


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_eight_by_sixteen_pays_the_closed_form(op):
    """128 A100s of superpod-hdr (8 x 16 nodes): 7 x 15 = 105 NVLink ring steps of 2 x 1.3 us more than the
    hierarchical schedule, i.e. 273 us, added to the `auto` collective and to nothing else."""
    net = superpod(128)
    topo = build_topology(net)
    gap = ring_gap_latency(topo, Router(topo), list(range(128)))
    assert gap == pytest.approx(105 * NVLINK_HOP, rel=1e-12)
    auto = simulate_collective(net, op, 1e6, 128, topology=topo)
    explicit = simulate_collective(net, op, 1e6, 128, algorithm="hierarchical", topology=topo)
    assert auto.algorithm == explicit.algorithm == "hierarchical"
    assert auto.time_s - explicit.time_s == pytest.approx(gap, rel=1e-9)


def test_single_dimension_groups_and_all_reduce_are_unchanged():
    net = superpod(128)
    topo = build_topology(net)
    router = Router(topo)
    node = list(range(8))                              # one node: a ring inside the NVSwitch
    rail = list(range(0, 128, 8))                      # one GPU per node: a ring along the rail
    for group in (node, rail):
        assert ring_gap_latency(topo, router, group) == 0.0
        for op in ("all_gather", "reduce_scatter"):
            auto = simulate_collective(net, op, 1e6, group, topology=topo)
            assert auto.time_s == simulate_collective(net, op, 1e6, group, algorithm="ring", topology=topo).time_s
    ranks = list(range(128))
    auto = simulate_collective(net, "all_reduce", 1e6, ranks, topology=topo)
    explicit = simulate_collective(net, "all_reduce", 1e6, ranks, algorithm="hierarchical", topology=topo)
    assert auto.algorithm == "hierarchical" and auto.time_s == explicit.time_s
    # not a full sub-grid of the dimensions it spans: the hierarchical schedule is a flat ring itself
    assert ring_gap_latency(topo, router, list(range(12))) == 0.0


def test_a_fixed_all_gather_is_never_faster_on_more_nodes_nor_below_nccls_ring_latency():
    """1 MB gathered over 2 to 32 nodes: the time never falls, and never undercuts the latency of NCCL's ring,
    base + (N - nodes) intra-node steps + (nodes - 1) inter-node steps (before: 190 us on 128 ranks, under
    the 6.6 + 112 x 2.6 + 15 x 10 = 448 us of the ring's steps)."""
    last = 0.0
    for world in (16, 32, 64, 128, 256):
        nodes = world // 8
        t = simulate_collective(superpod(world), "all_gather", 1e6, world).time_s
        assert t >= last
        assert t >= BASE + (world - nodes) * NVLINK_HOP + (nodes - 1) * IB_HOP
        last = t


def _case(gpt_case: dict, pp: int) -> object:
    """DP 16 over two nodes of a small superpod-like pod (4-node scalable units), in a world of 16 x pp."""
    net = dict(dimensions=[dict(name="nvlink", topology="switch", size=8, link_bandwidth="300 GB/s",
                                latency="1.3 us", collective_latency="6.6 us"),
                           dict(name="ib", topology="fat_tree", size="auto", link_bandwidth="25 GB/s",
                                latency="5 us", leaf_size=4, spines=4, rail_optimized=True)])
    par = {**gpt_case["parallelism"], "tp": 1, "pp": pp, "dp": 16, "sp": False}
    return resolve_case({**gpt_case, "network": net, "parallelism": par,
                         "workload": {**gpt_case["workload"], "global_batch": 16 * pp}}, "ring-steps")


def test_engine_replays_and_relocated_plans_equal_fresh_simulations(gpt_case, monkeypatch):
    """The engine's collective plans (network/plan.py, relocate.py) replay with the set-up that includes the
    ring steps: a plan recorded for one size and replayed for others, and moved to a fabric of twice the
    nodes, gives what a fresh `auto` simulation of every contending group gives, and differs from the
    explicit hierarchical schedule by exactly the ring steps' latency."""
    from rapidllm.engine import comm_cost

    moves = []
    real_moved = comm_cost.moved
    monkeypatch.setattr(comm_cost, "moved", lambda *a: moves.append(real_moved(*a)) or moves[-1])
    sizes = (3e8, 5e6 + 7, 1.2e9)
    with Caches().active():
        for pp in (1, 2):                               # 2 nodes, then 4: the same DP group of stage 0
            case = _case(gpt_case, pp)
            cost = comm_cost.CommCost(case)
            groups = cost._contending_groups("dp", -1)
            topo = build_topology(case.network)
            gap = ring_gap_latency(topo, Router(topo), list(groups[0]))
            assert gap == pytest.approx(7 * 1 * NVLINK_HOP, rel=1e-12)
            for op in ("all_gather", "reduce_scatter"):
                for nbytes in sizes:
                    fresh = simulate_concurrent(case.network, [CollectiveRequest(op, nbytes, g) for g in groups],
                                                case.hardware.utilization.network)[0]
                    t = cost.time("dp", op, nbytes)
                    assert t == max(fresh) + case.hardware.launch_overhead_s
                    hier = simulate_concurrent(case.network, [CollectiveRequest(op, nbytes, g, "hierarchical")
                                                              for g in groups], case.hardware.utilization.network)[0]
                    assert max(fresh) - max(hier) == pytest.approx(gap, rel=1e-9)
    assert any(m is not None for m in moves)            # the 4-node fabric replayed the 2-node plans

"""Chunking of hierarchical collectives (docs/network.md, "Chunking across nodes"): one chunk count for every
stage, from the largest transfer the schedule has (its innermost stage's ring step, nbytes / n_0), so no stage
moves a step of several buffers as one store-and-forward unit; bounded by the schedule's transfers."""
import math

import numpy as np
import pytest

from rapidllm.network.api import (MAX_CHUNKS, MAX_TRANSFERS, chunk_count, default_chunks, simulate_collective,
                                  step_limits)
from rapidllm.network.topology import build_topology
from rapidllm.spec.named import resolve_named
from rapidllm.spec.network import DimensionSpec, NetworkSpec

MIB = 2.0**20


def superpod_ndr(world: int, scale: float = 1.0) -> NetworkSpec:
    """superpod-ndr sized for `world` GPUs, every link's bandwidth times `scale`."""
    mapping, where = resolve_named("network", "superpod-ndr", "test", "network")
    net = NetworkSpec.from_mapping(mapping, where).sized_for(world, "test")
    dims = tuple(DimensionSpec(**{**vars(d), "link_bandwidth": d.link_bandwidth * scale}) for d in net.dimensions)
    return NetworkSpec(net.name, dims, net.axis_order, net.utilization, net.faults, net.chunk_bytes)


DP = list(range(0, 64, 2))        # the data-parallel group of tp 2 on 64 GPUs: 4 GPUs on each of 8 nodes


def test_step_limits_are_the_innermost_spanned_size_and_the_transfer_bound():
    topo = build_topology(superpod_ndr(64))
    assert step_limits(topo, "reduce_scatter", DP, "hierarchical") == (4, MAX_CHUNKS)   # 4 per node x 8 nodes
    assert step_limits(topo, "reduce_scatter", DP, "ring") == (32, MAX_CHUNKS)
    assert step_limits(topo, "all_gather", list(range(64)), "hierarchical")[0] == 8
    for flat in (list(range(8)), list(range(0, 64, 8)), [0, 1, 2, 8]):   # one node, one rail, no sub-grid
        assert step_limits(topo, "all_gather", flat, "hierarchical") == (len(flat), MAX_CHUNKS)
    big = build_topology(superpod_ndr(16384))
    ranks = list(range(16384))        # 8 x 2,048 nodes: N (7 + 2,047) transfers per chunk, over MAX_TRANSFERS
    assert step_limits(big, "all_gather", ranks, "hierarchical") == (8, 0)
    assert default_chunks(big, "all_gather", 1e9, ranks, "hierarchical") == chunk_count(big, "all_gather", 1e9,
                                                                                        16384) == 1
    mid = build_topology(superpod_ndr(4096))     # 8 x 512: 2.1 M transfers per chunk, 7 chunks fit
    assert step_limits(mid, "all_gather", list(range(4096)), "hierarchical") == (8, MAX_TRANSFERS // (4096 * 518))
    assert default_chunks(mid, "all_gather", 1e9, list(range(4096)), "hierarchical") == 7


def test_chunks_never_decrease_with_bytes():
    topo = build_topology(superpod_ndr(64))
    for op, group in (("reduce_scatter", DP), ("all_reduce", list(range(64)))):
        counts = [default_chunks(topo, op, b, group, "hierarchical") for b in np.geomspace(1e3, 1e11, 200)]
        assert all(b >= a for a, b in zip(counts, counts[1:])) and counts[0] == 1 and counts[-1] == MAX_CHUNKS


def test_dp_bucket_is_no_longer_one_unit_per_stage():
    """The 80 MB gradient bucket of the lead's observation: its NVLink stage carries 20 MB per step, 5 buffers
    of 4 MiB (it was sent as one unit, which also held the InfiniBand stage back until it had all arrived,
    1.63 ms for 0.54 ms of the busiest link's time); in 5 chunks both stages pipeline."""
    net = superpod_ndr(64)
    res = simulate_collective(net, "reduce_scatter", 80e6, DP, utilization=0.65)
    assert res.algorithm == "hierarchical" and res.chunks == math.ceil(80e6 / 4 / (4 * MIB)) == 5
    busy = float(res.link_busy.max())
    assert busy == pytest.approx(7 / 8 * 80e6 / 4 / (50e9 * 0.65), rel=1e-12)   # an IB rail's share
    one = simulate_collective(net, "reduce_scatter", 80e6, DP, chunks=1, utilization=0.65)
    assert one.time_s > 2.9 * busy                  # the former count: stages and hops one after the other
    assert busy < res.time_s < 1.5 * busy


def test_two_by_two_closed_form():
    """2 x 2 ranks, one cable per line of each dimension: the inner reduce-scatter moves S/2 from each rank in
    C chunks, each chunk's outer step (S/(4C)) leaves as soon as it has arrived and, on a link at least half
    as fast, never queues: base + NCCL's extra ring step along the inner dimension (a0) + S/(2 B0) + a0 +
    S/(4 C B1) + a1, with C = ceil(S/2 / chunk) (it was ceil(S/4 / chunk): 2 chunks here, not 4)."""
    b0, b1, a0, a1, base, chunk = 100e9, 60e9, 1e-6, 3e-6, 5e-6, 1e6
    net = NetworkSpec("t", (DimensionSpec("a", "ring", 2, b0, a0, collective_latency_s=base),
                            DimensionSpec("b", "ring", 2, b1, a1, collective_latency_s=base)), chunk_bytes=chunk)
    s = 8e6
    res = simulate_collective(net, "reduce_scatter", s, 4)
    c = math.ceil(s / 2 / chunk)
    assert res.algorithm == "hierarchical" and res.chunks == c == 4
    assert res.time_s == pytest.approx(base + a0 + s / (2 * b0) + a0 + s / (4 * c * b1) + a1, rel=1e-12)


@pytest.mark.parametrize("op,group", [("reduce_scatter", DP), ("all_gather", list(range(64))),
                                      ("all_reduce", list(range(16)))])
def test_time_is_monotone_in_bytes_within_a_chunk_count(op, group):
    """More bytes in the same chunk count never take less time. (Across a count boundary the time can drop,
    as on one node: equal chunks halve when the count goes from 1 to 2; docs/network.md.)"""
    net = superpod_ndr(64)
    topo = build_topology(net)
    n, _ = step_limits(topo, op, group, "hierarchical")
    for count in (1, 2, 5, 32):
        hi = count * n * topo.chunk_bytes
        sizes = np.linspace(hi * (count - 1) / count + 1, hi, 6) if count < 32 else np.geomspace(hi, 8 * hi, 6)
        times = []
        for b in sizes:
            res = simulate_collective(net, op, float(b), group, utilization=0.65, topology=topo)
            assert res.chunks == default_chunks(topo, op, float(b), group, "hierarchical") == count
            times.append(res.time_s)
        assert all(t1 >= t0 for t0, t1 in zip(times, times[1:]))


@pytest.mark.parametrize("op,group", [("reduce_scatter", DP), ("all_gather", list(range(64))),
                                      ("all_reduce", list(range(16)))])
@pytest.mark.parametrize("nbytes", [3e6, 80e6, 440e6])
def test_more_bandwidth_is_never_slower(op, group, nbytes):
    base = simulate_collective(superpod_ndr(64), op, nbytes, group, utilization=0.65)
    fast = simulate_collective(superpod_ndr(64, 2.0), op, nbytes, group, utilization=0.65)
    assert fast.chunks == base.chunks and fast.time_s <= base.time_s

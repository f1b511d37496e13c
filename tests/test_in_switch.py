"""In-switch all-reduce (NVLink SHARP / NCCL NVLS, network/in_switch.py): closed form, choice, faults, specs."""
import numpy as np
import pytest

from rapidllm.network.api import build_schedule, resolve_algorithm, simulate_collective
from rapidllm.network.in_switch import reducing_dimension
from rapidllm.network.topology import build_topology
from rapidllm.spec.errors import SpecError
from rapidllm.spec.network import DimensionSpec, FaultSpec, NetworkSpec

B, A, SETUP = 100e9, 1e-6, 20e-6


def switch(size=8, setup=SETUP, faults=()):
    dim = DimensionSpec("nvl", "switch", size, B, A, in_switch_reduction_s=setup)
    return NetworkSpec("t", (dim,), faults=tuple(faults))


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("nbytes", [8192.0, float(1 << 20)])
def test_one_chunk_closed_form(n, nbytes):
    """Set-up, push S up, reduced slice S/n down, slice up again, n slices multicast down (one downlink in
    turn): setup + 2 S/B + 2 S/(nB) + 4 a."""
    r = simulate_collective(switch(n), "all_reduce", nbytes, n, algorithm="in_switch", chunks=1, utilization=1.0)
    assert r.time_s == pytest.approx(SETUP + 2 * nbytes / B + 2 * nbytes / (n * B) + 4 * A, rel=1e-9)


def test_large_messages_move_s_times_one_plus_one_over_n_per_link():
    """Pipelined chunks: an uplink carries S (1 + 1/n), so time -> S (1 + 1/n) / B, below the ring's 2(n-1)/n."""
    n, s = 8, float(1 << 30)
    t = simulate_collective(switch(n), "all_reduce", s, n, algorithm="in_switch", utilization=1.0).time_s
    ring = simulate_collective(switch(n), "all_reduce", s, n, algorithm="ring", utilization=1.0).time_s
    assert s * (1 + 1 / n) / B < t < 1.1 * s * (1 + 1 / n) / B
    assert t < ring


@pytest.mark.parametrize("nbytes", [4096.0, float(1 << 20), float(1 << 28)])
def test_more_bandwidth_never_slower(nbytes):
    times = [simulate_collective(switch(), "all_reduce", nbytes, 8, algorithm="in_switch", utilization=u).time_s
             for u in (0.3, 0.6, 1.0)]
    assert times[0] >= times[1] >= times[2]


def test_auto_takes_the_faster_of_ring_and_switch():
    """Small messages on 2 ranks: the ring's 2 steps beat the set-up; on 8 ranks the switch wins (14 steps)."""
    topo = build_topology(switch())
    assert resolve_algorithm(topo, "all_reduce", 8192.0, [0, 1], "auto", None, 1.0) == "ring"
    assert resolve_algorithm(topo, "all_reduce", 8192.0, list(range(8)), "auto", None, 1.0) == "in_switch"
    assert resolve_algorithm(topo, "all_gather", 8192.0, list(range(8)), "auto", None, 1.0) == "ring"
    assert resolve_algorithm(topo, "all_reduce", 8192.0, list(range(8)), "tree", None, 1.0) == "tree"
    auto = simulate_collective(switch(), "all_reduce", 8192.0, 8)
    forced = [simulate_collective(switch(), "all_reduce", 8192.0, 8, algorithm=a).time_s for a in ("ring", "in_switch")]
    assert auto.algorithm == "in_switch" and auto.time_s == min(forced)


def test_a_switch_without_reduction_never_reduces_in_network():
    topo = build_topology(switch(setup=None))
    assert reducing_dimension(topo, "all_reduce", list(range(8))) is None
    with pytest.raises(SpecError, match="algorithm in_switch needs an all_reduce within one switch dimension"):
        build_schedule(topo, "all_reduce", 1e6, list(range(8)), "in_switch", None)


def test_a_dead_link_to_the_switch_falls_back_to_the_ring_and_never_speeds_up():
    healthy = simulate_collective(switch(), "all_reduce", float(1 << 24), 8)
    topo = build_topology(switch())
    dead = switch(faults=[FaultSpec((0, topo.switch_node(0)), failed=True)])
    assert reducing_dimension(build_topology(dead), "all_reduce", list(range(8))) is None
    with pytest.raises(SpecError):                      # the ring cannot route around the only link either
        simulate_collective(dead, "all_reduce", float(1 << 24), 8)
    slow = switch(faults=[FaultSpec((0, topo.switch_node(0)), bandwidth_factor=0.5)])
    degraded = simulate_collective(slow, "all_reduce", float(1 << 24), 8)
    assert degraded.algorithm == "in_switch" and degraded.time_s >= healthy.time_s


def test_transfers_route_through_the_one_link_to_the_switch():
    topo = build_topology(switch(4))
    sched, _, _ = build_schedule(topo, "all_reduce", 4096.0, [0, 1, 2, 3], "in_switch", 1)
    s = topo.switch_node(0)
    assert set(np.concatenate([sched.src, sched.dst]).tolist()) == {0, 1, 2, 3, s}
    assert len(sched) == 3 * 4 + 4 * 4                 # up, reduced slice down, slice up, multicast down


@pytest.mark.parametrize("algorithm,extra", [("ring", 0.0), ("in_switch", SETUP)])
def test_every_collective_waits_the_per_call_base_latency(algorithm, extra):
    """`collective_latency` (NCCL's per-call base) delays the first transfer of any algorithm; the in-switch
    set-up adds to it."""
    base = 6.6e-6
    plain = NetworkSpec("t", (DimensionSpec("nvl", "switch", 8, B, A, in_switch_reduction_s=0.0),))
    based = NetworkSpec("t", (DimensionSpec("nvl", "switch", 8, B, A, in_switch_reduction_s=SETUP,
                                            collective_latency_s=base),))
    t0 = simulate_collective(plain, "all_reduce", 8192.0, 8, algorithm=algorithm, chunks=1).time_s
    t1 = simulate_collective(based, "all_reduce", 8192.0, 8, algorithm=algorithm, chunks=1).time_s
    assert t1 - t0 == pytest.approx(base + extra, rel=1e-9)


def test_spec_rejects_in_switch_reduction_off_a_switch():
    m = {"name": "bad", "dimensions": [{"topology": "ring", "size": 4, "link_bandwidth": "100 GB/s",
                                        "latency": "1 us", "in_switch_reduction": "20 us"}]}
    with pytest.raises(SpecError, match=r"bad.yaml: dimensions.0.in_switch_reduction: only a switch"):
        NetworkSpec.from_mapping(m, "bad.yaml")

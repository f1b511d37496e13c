"""Dimension-order routing, fault-aware rerouting, cut-off errors, the router's memo of route tables."""
import numpy as np
import pytest

import rapidllm.network.routing as routing

from rapidllm.network.routing import Router
from rapidllm.network.topology import build_topology
from rapidllm.spec.errors import SpecError
from rapidllm.spec.network import DimensionSpec, FaultSpec, NetworkSpec


def net(*dims, faults=()):
    return NetworkSpec("t", tuple(DimensionSpec(f"d{i}", *d[:2], 1e9, 1e-6, *d[2:]) for i, d in enumerate(dims)),
                       faults=tuple(faults))


def nodes(topo, links):
    return [int(topo.src[links[0]])] + [int(topo.dst[i]) for i in links]


def test_ring_shortest_direction_and_tie():
    t = build_topology(net(("ring", 8)))
    r = Router(t)
    assert nodes(t, r.route(0, 2)) == [0, 1, 2]
    assert nodes(t, r.route(0, 6)) == [0, 7, 6]
    assert nodes(t, r.route(0, 4)) == [0, 1, 2, 3, 4]


def test_dimension_order_inner_first_and_switch_hops():
    t = build_topology(net(("switch", 4), ("ring", 4)))
    r = Router(t)
    path = nodes(t, r.route(0, 13))          # coords (0,0) -> (1,3)
    assert path == [0, t.switch_node(0, "switch", 0, 0), 1, 13]


def test_mesh_axis_order_torus_wrap_kingmesh_diagonal():
    t = build_topology(net(("mesh", 16, (4, 4))))
    assert nodes(t, Router(t).route(0, 5)) == [0, 1, 5]
    t = build_topology(net(("torus", 16, (4, 4))))
    assert nodes(t, Router(t).route(0, 3)) == [0, 3]
    t = build_topology(net(("kingmesh", 16, (4, 4))))
    assert nodes(t, Router(t).route(0, 10)) == [0, 5, 10]


def test_fat_tree_spreads_over_spines():
    t = build_topology(net(("fat_tree", 8, (), 2, 2)))
    r = Router(t)
    sp = t.fat_tree[0]["spines"]
    assert nodes(t, r.route(0, 2))[2] == sp[0] and nodes(t, r.route(0, 3))[2] == sp[1]
    assert len(r.route(0, 1)) == 2


def test_rail_fat_tree_routes_a_shift_permutation_without_blocking():
    """Pipeline sends from every node of one scalable unit to the same GPU of the node 4 further on (the next
    unit) take as long together as one alone: the spine is chosen by the destination's leaf port
    (destination-mod-k), so one leaf's flows climb distinct spines. Choosing it by (a + b) mod spines sent
    every flow of a rail through one spine here (rank ids 4n + k), 4x slower."""
    from rapidllm.network.api import CollectiveRequest, simulate_concurrent
    spec = net(("switch", 4), ("fat_tree", 8, (), 4, 4, True))
    sends = [CollectiveRequest("send_recv", 64e6, (4 * n + k, 4 * (n + 4) + k)) for n in range(4) for k in range(4)]
    alone, _, _ = simulate_concurrent(spec, sends[:1])
    together, _, _ = simulate_concurrent(spec, sends)
    assert max(together) == pytest.approx(alone[0], rel=1e-9)


def test_shared_leaf_fat_tree_numbers_every_port_once_and_routes_a_shift_without_blocking():
    """Leaves shared by the lines (not rail-optimized): a leaf's port of (line li, coordinate k) is
    (k mod per_leaf) x lines + li, every port of a leaf once, so with as many spines as ports the 16 flows of
    a shift by one leaf climb 16 distinct spines ((a + b) mod spines put two on each of 8)."""
    from rapidllm.network.api import CollectiveRequest, simulate_concurrent
    spec = net(("switch", 4), ("fat_tree", 8, (), 16, 16, False))
    ft = build_topology(spec).fat_tree[1]
    for leaf in set(ft["leaf_of"].values()):
        ports = [ft["port_of"][r] for r, lf in ft["leaf_of"].items() if lf == leaf]
        assert sorted(ports) == list(range(16))
    sends = [CollectiveRequest("send_recv", 64e6, (4 * n + k, 4 * (n + 4) + k)) for n in range(4) for k in range(4)]
    alone, _, _ = simulate_concurrent(spec, sends[:1])
    together, _, _ = simulate_concurrent(spec, sends)
    assert max(together) == pytest.approx(alone[0], rel=1e-9)


def test_reroute_around_dead_ring_link():
    t = build_topology(net(("ring", 6), faults=[FaultSpec((0, 1), failed=True)]))
    assert nodes(t, Router(t).route(0, 1)) == [0, 5, 4, 3, 2, 1]


def test_reroute_around_dead_spine_and_mesh_link():
    t = build_topology(net(("fat_tree", 8, (), 2, 2)))
    bad = t.fat_tree[0]["spines"][0]
    t = build_topology(net(("fat_tree", 8, (), 2, 2), faults=[FaultSpec((t.fat_tree[0]["leaf_of"][0], bad), failed=True)]))
    assert nodes(t, Router(t).route(0, 2))[2] != bad
    t = build_topology(net(("mesh", 4, (2, 2)), faults=[FaultSpec((0, 1), failed=True)]))
    assert nodes(t, Router(t).route(0, 1)) == [0, 2, 3, 1]


def test_cut_off_group_names_the_links():
    t = build_topology(net(("ring", 4), faults=[FaultSpec((0, 1), failed=True), FaultSpec((3, 0), failed=True)]))
    with pytest.raises(SpecError) as e:
        Router(t).route(0, 2)
    msg = str(e.value)
    assert "no route from rank 0 to rank 2" in msg
    assert "rank 0 -> rank 1" in msg and "rank 0 -> rank 3" in msg


def test_routes_are_deterministic():
    f = [FaultSpec((5, 6), failed=True)]
    a = build_topology(net(("torus", 16, (4, 4)), faults=f))
    b = build_topology(net(("torus", 16, (4, 4)), faults=f))
    ra, rb = Router(a), Router(b)
    assert all(ra.route(i, j) == rb.route(i, j) for i in range(16) for j in range(16))


def test_small_route_tables_are_remembered_and_equal_fresh_ones(monkeypatch):
    topo = build_topology(net(("ring", 16)))
    router = Router(topo)
    src, dst = np.arange(16, dtype=np.int32), np.roll(np.arange(16, dtype=np.int32), -3)
    first = routing.route_table(router, src, dst)
    again = routing.route_table(router, src.astype(np.int64), dst)       # same ranks, other dtype: a hit
    fresh = routing._route_table(Router(topo), src, dst)
    assert all(a is b for a, b in zip(first, again))
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(first, fresh))
    monkeypatch.setattr(routing, "MEMO_UNITS", 8)                        # too many transfers: not kept
    assert routing.route_table(router, src[::-1], dst) is not routing.route_table(router, src[::-1], dst)
    monkeypatch.setattr(routing, "MEMO_BUDGET", 12)                      # over budget: the memo starts over
    routing.route_table(router, src[:8], dst[:8])
    routing.route_table(router, src[8:], dst[8:])
    assert len(router._memo) == 1

"""Topology construction, node naming, faults and rank mapping."""
import numpy as np
import pytest

from rapidllm.network.mapping import RankMapping
from rapidllm.network.topology import build_topology
from rapidllm.spec.errors import SpecError
from rapidllm.spec.network import DimensionSpec, FaultSpec, NetworkSpec


def net(*dims, **kw):
    return NetworkSpec("t", tuple(DimensionSpec(f"d{i}", *d[:2], 100e9, 1e-6, *d[2:]) for i, d in enumerate(dims)), **kw)


@pytest.mark.parametrize("dim, links", [
    (("ring", 8), 16), (("ring", 2), 2), (("ring", 1), 0), (("fully_connected", 5), 20), (("switch", 8), 16),
    (("mesh", 12, (4, 3)), 2 * (3 * 3 + 4 * 2)), (("torus", 12, (4, 3)), 2 * (4 * 3 + 3 * 4)),
    (("torus", 8, (2, 4)), 2 * (4 * 1 + 2 * 4)), (("kingmesh", 9, (3, 3)), 2 * (12 + 8)),
    (("mesh", 27, (3, 3, 3)), 2 * 3 * 18),
])
def test_link_counts(dim, links):
    assert build_topology(net(dim)).n_links == links


def test_stacked_dimensions_and_switch_names():
    t = build_topology(net(("switch", 4), ("ring", 3)))
    assert t.n_ranks == 12 and t.n_nodes == 12 + 3
    assert t.coords(7) == (3, 1) and t.rank_of((3, 1)) == 7
    sw = t.switch_node(0, "switch", 0, line=2)
    assert sw == 14 and "switch line 2" in t.node_name(sw)
    assert (7, t.switch_node(0, "switch", 0, line=1)) in t.link_of
    assert (3, 7) in t.link_of and (7, 11) in t.link_of and (11, 3) in t.link_of   # ring along dim 1
    with pytest.raises(KeyError):
        t.switch_node(1, "switch")


def test_fat_tree_rail_optimized_leaves_and_nonblocking_uplinks():
    t = build_topology(net(("switch", 2), ("fat_tree", 8, (), 4, 2, True)))
    ft = t.fat_tree[1]
    assert len(ft["spines"]) == 2
    leaves = {ft["leaf_of"][r] for r in range(16)}
    assert len(leaves) == 4                             # 2 rails x 2 leaves
    assert ft["leaf_of"][0] != ft["leaf_of"][1]         # ranks 0 and 1 are on different rails
    up = t.link_of[(ft["leaf_of"][0], ft["spines"][0])]
    assert t.bandwidth[up] == pytest.approx(100e9 * 4 / 2)


def test_partly_populated_leaf_keeps_full_rate_uplinks():
    """A fat tree that is not a whole number of leaves (6 ranks on leaves of 4) keeps the designed uplinks on
    its last, half-filled leaf: cables do not slow down with the ranks attached."""
    t = build_topology(net(("fat_tree", 6, (), 4, 2)))
    ft = t.fat_tree[0]
    full, partial = ft["leaf_of"][0], ft["leaf_of"][5]
    assert full != partial
    for sp in ft["spines"]:
        assert t.bandwidth[t.link_of[(partial, sp)]] == t.bandwidth[t.link_of[(full, sp)]] == pytest.approx(100e9 * 4 / 2)


def test_all_gather_never_faster_on_more_nodes():
    """superpod-hdr (20-node scalable units): a fixed all-gather over more nodes is never faster, also where
    the last unit is partly filled (512 GPUs = 3 units + 4 nodes took 12.3 ms against 7.9 ms on 1,024;
    now 7.2 ms)."""
    from rapidllm.network.api import simulate_collective
    from rapidllm.spec.case import sized_network
    from rapidllm.spec.named import resolve_named
    mapping, src = resolve_named("network", "superpod-hdr", "test", "network")
    base = NetworkSpec.from_mapping(mapping, src)
    times = [simulate_collective(sized_network(base, n, "test"), "all_gather", 4e8, n).time_s
             for n in (128, 192, 256, 384, 512, 640, 1024)]
    assert times == sorted(times)


def test_faults_soft_hard_and_unknown_link():
    f = (FaultSpec((0, 1), bandwidth_factor=0.25, extra_latency_s=2e-6), FaultSpec((2, 3), failed=True))
    t = build_topology(net(("ring", 4), faults=f))
    for a, b in ((0, 1), (1, 0)):
        i = t.link_of[(a, b)]
        assert t.bandwidth[i] == 25e9 and t.latency[i] == pytest.approx(3e-6)
    assert not t.alive[t.link_of[(2, 3)]] and not t.alive[t.link_of[(3, 2)]]
    assert np.sum(~t.alive) == 2
    with pytest.raises(SpecError, match=r"link \[0, 2\] does not exist"):
        build_topology(net(("ring", 4), faults=(FaultSpec((0, 2), failed=True),)))


def test_unresolved_auto_size_is_an_error():
    with pytest.raises(SpecError, match="unresolved"):
        build_topology(net(("switch", 8), ("fat_tree", 0)))


def test_rank_mapping_groups_and_dimensions():
    n = net(("switch", 8), ("ring", 4))
    m = RankMapping(n, {"tp": 4, "dp": 2, "pp": 4})
    assert m.world == 32
    assert m.group_ranks("tp", 5) == [4, 5, 6, 7]
    assert m.group_ranks("dp", 1) == [1, 5]
    assert m.group_ranks("pp", 0) == [0, 8, 16, 24]
    assert m.group_dimensions("tp") == (0,) and m.group_dimensions("pp") == (1,)
    assert m.dim_coords(13) == (5, 1)
    assert m.rank(m.parallel_coords(27)) == 27
    with pytest.raises(SpecError):
        RankMapping(n, {"tp": 64})


def test_axis_order_changes_layout():
    n = NetworkSpec("t", (DimensionSpec("d0", "switch", 4, 1e9, 0.0),), axis_order=("dp", "tp", "cp", "ep", "pp"))
    m = RankMapping(n, {"tp": 2, "dp": 2})
    assert m.group_ranks("dp", 0) == [0, 1] and m.group_ranks("tp", 0) == [0, 2]


@pytest.mark.parametrize("dims", [
    (("switch", 8),),
    (("switch", 4), ("ring", 3), ("switch", 2)),
    (("switch", 8), ("fat_tree", 16, (), 4, 0, True)),             # rail-optimized leaves of 4, 4 spines
    (("switch", 4), ("fat_tree", 12, (), 8, 3, False)),            # shared leaves (8 // 4 lines = 2 each), 3 spines
    (("ring", 2), ("fat_tree", 5, (), 32, 0, False), ("switch", 3)),
])
def test_rank_uplinks_are_the_built_cables(dims):
    """`spec.network.rank_uplinks` numbers switches in the spec layer (what a fault_sweep over a switched
    dimension places faults on) without building the fabric: every [rank, switch] it gives is a cable of
    that dimension in the built topology, to that rank's own switch or leaf, one per rank of the line
    holding rank 0; and `switch_count` adds up to the built node count."""
    from rapidllm.spec.network import rank_uplinks, switch_count

    spec = net(*dims)
    t = build_topology(spec)
    assert t.n_ranks + sum(switch_count(d, t.n_ranks // d.size) for d in spec.dimensions) == t.n_nodes
    stride = 1
    for d, dim in enumerate(spec.dimensions):
        cables = rank_uplinks(spec, d)
        if dim.topology not in ("switch", "fat_tree"):
            assert cables == []
        else:
            assert [r for r, _ in cables] == [k * stride for k in range(dim.size)]
            for r, s in cables:
                assert int(t.dim[t.link_of[(r, s)]]) == d
                assert s == (t.fat_tree[d]["leaf_of"][r] if dim.topology == "fat_tree" else t.switch_node(d))
        stride *= dim.size

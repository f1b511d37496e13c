"""ns-3 comparison (issue 6): schedule export, the packet-level replay harness, and the smallest cases."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
from rapidllm.network.api import CollectiveRequest, simulate_concurrent
from rapidllm.network.export import FORMAT, export_collective, export_concurrent
from rapidllm.network.simulator import simulate_kernel
from rapidllm.spec.network import DimensionSpec, NetworkSpec
from rapidllm.validate import ns3

GB = 1e9
US = 1e-6


def _line(hops: int, bw: float = 50 * GB, lat: float = 1 * US) -> NetworkSpec:
    """hops + 1 ranks on a chain (mesh), so rank 0 -> rank `hops` crosses `hops` links."""
    return NetworkSpec("chain", (DimensionSpec("d", "mesh", hops + 1, bw, lat),))


@pytest.fixture(scope="session")
def replay():
    why = ns3.find_ns3()
    if why:
        if os.geteuid() == 0 and shutil.which("apt-get"):
            pytest.fail(f"ns-3 is missing although scripts/system/ns3.sh can install it here (root, apt-get): {why}")
        pytest.skip(why)
    return ns3.compile_replay()


def test_export_replays_the_simulators_schedule():
    """The exported flows, routes and links reproduce simulate_concurrent's times through the event loop."""
    case = next(c for c in ns3.build_cases(1 / 64) if c.name == "tp-switch-hard_fault")
    doc = export_concurrent(case.network, case.requests, utilization=1.0)
    assert doc["format"] == FORMAT and doc["groups"] == 1
    links, flows = doc["links"], doc["flows"]
    dead = {i for i, a in enumerate(links["alive"]) if not a}
    assert len(dead) == 2                                     # one failed cable = two directed links
    assert not dead & set(flows["route_links"])               # routed around it
    a = {k: np.asarray(v) for k, v in flows.items()}
    finish, _, _ = simulate_kernel(a["route_of"].astype(np.int32), a["bytes"].astype(float), a["release"].astype(float),
                                   a["dep_ptr"].astype(np.int64), a["dep_idx"].astype(np.int32),
                                   a["route_ptr"].astype(np.int64), a["route_links"].astype(np.int32),
                                   np.where(links["alive"], links["bandwidth"], 1.0), np.asarray(links["latency"]))
    times, _, _ = simulate_concurrent(case.network, case.requests, utilization=1.0)
    assert finish.max() == pytest.approx(times[0], rel=1e-12)


def test_concurrent_export_groups_and_release():
    net = _line(3)
    reqs = [CollectiveRequest("send_recv", 1e6, (0, 3), chunks=2),
            CollectiveRequest("all_reduce", 4e6, (0, 1, 2, 3), chunks=1, start_s=5e-6)]
    doc = export_concurrent(net, reqs)
    f = doc["flows"]
    assert doc["groups"] == 2 and f["group"][:2] == [0, 0] and set(f["group"][2:]) == {1}
    assert f["release"][:2] == [0.0, 0.0] and set(f["release"][2:]) == {5e-6}
    assert len(f["route_ptr"]) == max(f["route_of"]) + 2


def test_system_script_is_idempotent(replay):
    """With ns-3 present scripts/system/ns3.sh does nothing and succeeds (run_tests.sh calls it every time)."""
    script = ns3.ROOT / "scripts" / "system" / "ns3.sh"
    proc = subprocess.run(["bash", str(script)], check=False, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""


def test_missing_ns3_explains_how_to_install(monkeypatch):
    monkeypatch.setattr(ns3.shutil, "which", lambda name: None)
    why = ns3.find_ns3()
    assert "apt-get install ns3 libns3-dev" in why


@pytest.mark.parametrize("nbytes", [1 << 20, 3_000_001, 64 << 20])
def test_single_link_transfer_matches_bandwidth_plus_latency(replay, nbytes):
    """Issue 6: one flow over one 400 Gb/s link finishes within 1% of S/B + latency (raw packets, no TCP)."""
    bw, lat = 50 * GB, 1 * US
    doc = export_collective(_line(1, bw, lat), "send_recv", nbytes, [0, 1], chunks=1)
    out = ns3.run_ns3(doc, replay)
    ideal = nbytes / bw + lat
    assert out["group_finish_s"][0] == pytest.approx(ideal, rel=0.01)
    assert out["group_finish_s"][0] == pytest.approx(ideal, rel=1e-6)   # in fact exact up to byte rounding


def test_multi_hop_pipelines_packets(replay):
    """Over h hops ns-3 forwards per packet (S/B + (h-1) P/B + h a); the simulator forwards per chunk (h S/B + h a)."""
    bw, lat, nbytes, hops, pkt = 50 * GB, 1 * US, 1 << 20, 3, 4096
    doc = export_collective(_line(hops, bw, lat), "send_recv", nbytes, [0, hops], chunks=1, packet_bytes=pkt)
    t = ns3.run_ns3(doc, replay)["group_finish_s"][0]
    assert t == pytest.approx(nbytes / bw + (hops - 1) * pkt / bw + hops * lat, rel=1e-6)
    ours = simulate_concurrent(_line(hops, bw, lat), [CollectiveRequest("send_recv", nbytes, (0, hops), chunks=1)])[0]
    assert ours[0] == pytest.approx(hops * nbytes / bw + hops * lat, rel=1e-9)


def test_contention_shares_link(replay):
    """Two flows into one link take 2S/B in both models (lossless queues, nothing dropped)."""
    bw, lat, nbytes = 50 * GB, 1 * US, 1 << 20
    net = _line(2, bw, lat)
    reqs = [CollectiveRequest("send_recv", nbytes, (0, 2), chunks=1), CollectiveRequest("send_recv", nbytes, (1, 2), chunks=1)]
    out = ns3.run_ns3(export_concurrent(net, reqs), replay)
    assert max(out["group_finish_s"]) == pytest.approx(2 * nbytes / bw + lat, rel=0.01)


def test_smallest_cases_within_target(replay, tmp_path):
    """CI: the smoke subset of the Fig 11 cases, ns-3 vs link-queue vs alpha-beta, all within 8%."""
    rows = ns3.compare(ns3.build_cases(ns3.SMOKE_SCALE, ns3.SMOKE), tmp_path / "ns3.csv", replay, log=None)
    assert [r["case"] for r in rows] == list(ns3.SMOKE)
    for r in rows:
        assert r["within_target"], r
        assert r["ns3_wall_s"] < 10 and r["packet_hops"] > 0
    assert (tmp_path / "ns3.csv").read_text().startswith("case,axis,topology,variant")


def test_case_matrix_covers_axes_topologies_and_variants():
    cases = ns3.build_cases()
    assert {c.axis for c in cases} == {"tp", "pp", "dp", "ep", "cp"}
    assert {c.topology for c in cases} == {"switch", "ring", "torus", "fat_tree"}
    assert {c.variant for c in cases} == set(ns3.VARIANTS)
    assert len(cases) == len(ns3.BASES) * len(ns3.VARIANTS)
    assert all(len(c.requests) == 2 for c in cases if c.variant == "concurrent")
    assert all(c.network.faults[0].failed for c in cases if c.variant == "hard_fault")
    assert all(c.network.faults[0].bandwidth_factor == 0.25 for c in cases if c.variant == "soft_fault")


def test_fat_tree_concurrent_partner_shares_the_spine():
    """pp-fat_tree-concurrent's partner climbs the spine of the send it accompanies (leaf 0 -> spine -> leaf 1):
    with destination-mod-k routing 2 -> 5 took the other spine, shared no cable and the case equalled 'alone'."""
    from rapidllm.network.routing import Router
    from rapidllm.network.topology import build_topology
    base = next(b for b in ns3.BASES if (b.axis, b.topology) == ("pp", "fat_tree"))
    topo = build_topology(ns3.NETWORKS["fat_tree"])
    router = Router(topo)
    shared = set(router.route(*base.ranks)) & set(router.route(*base.partner[1]))
    spines = set(topo.fat_tree[0]["spines"])
    assert any(int(topo.dst[i]) in spines for i in shared)
    cases = {c.variant: c for c in ns3.build_cases() if c.name.startswith("pp-fat_tree")}
    alone = simulate_concurrent(cases["alone"].network, cases["alone"].requests)[0][0]
    together = simulate_concurrent(cases["concurrent"].network, cases["concurrent"].requests)[0][0]
    assert together > alone

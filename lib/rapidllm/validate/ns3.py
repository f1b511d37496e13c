"""Link-queue simulator vs packet-level ns-3 vs alpha-beta on Llama-3.1-70B's collectives (paper §5.4.2, Fig 11).

Every case is one or two collectives on a small A100 fabric (switch, ring, 2D torus, fat tree), taken axis by
axis from Llama-3.1-70B training (TP all-reduce, PP send/recv, DP all-reduce, EP all-to-all, CP ring
exchange), in four variants: alone, with a second collective sharing its links, with one cable at 0.25x
bandwidth (soft fault) and with one cable failed (hard fault). Each case's chunk schedule is exported
(rapidllm.network.export), replayed packet by packet by validation/ns3/replay.cc, simulated by
`simulate_concurrent`, and priced by the congestion-unaware alpha-beta formulas. Message sizes are the real
ones times `scale` (default 1/4) so that ns-3 runs in about a second per case; see docs/validation-network.md.

    python -m rapidllm.validate.ns3 --csv results/validation/network_ns3.csv --png results/figures/network_ns3.png
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rapidllm.network.alpha_beta import collective_time
from rapidllm.network.api import CollectiveRequest, simulate_concurrent
from rapidllm.network.export import (
    DEFAULT_PACKET_BYTES,
    export_concurrent,
    write_document,
)
from rapidllm.network.hierarchical import spanned
from rapidllm.network.topology import Topology, build_topology
from rapidllm.spec.network import DimensionSpec, FaultSpec, NetworkSpec

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "validation" / "ns3" / "replay.cc"
BINARY = ROOT / "build" / "ns3" / "replay"
NS3_PACKAGES = ("ns3-core", "ns3-network", "ns3-point-to-point")
INSTALL_HINT = ("ns-3 is missing: install Debian's ns-3 3.37 with `sudo apt-get install ns3 libns3-dev libgsl-dev` "
                "(or run `sudo bash scripts/system/ns3.sh`)")
TARGET = 0.08
SCALE = 1 / 4
SMOKE_SCALE = 1 / 16

# Llama-3.1-70B training on A100s (bf16, seq 8192, micro-batch 1, TP 8): bytes of each collective.
MIB = 1 << 20
LLAMA = {
    "tp": 128 * MIB,   # all-reduce of the layer output: 8192 tokens x 8192 hidden x 2 B
    "pp": 16 * MIB,    # activations to the next stage: 8192 x 8192 x 2 B split over TP 8 (sequence parallel)
    "dp": 128 * MIB,   # one gradient bucket (64M bf16 gradients) of the data-parallel all-reduce
    "ep": 128 * MIB,   # token dispatch of an MoE variant of the same shape: 8192 tokens x 8192 x 2 B per rank
    "cp": 32 * MIB,    # K and V of 8192 tokens (8 KV heads x 128 x 2 x 2 B) gathered around the CP ring
}

GBS = 1e9
US = 1e-6


def _dim(name: str, topology: str, size: int, bw: float, lat: float, **kw) -> DimensionSpec:
    return DimensionSpec(name=name, topology=topology, size=size, link_bandwidth=bw, latency_s=lat, **kw)


# A100 fabrics. switch: two DGX A100 nodes (NVSwitch 300 GB/s, 3 us as in config/networks/dgx-a100.yaml) joined
# by one HDR rail leaf per GPU (25 GB/s, 1 us per hop); ring: 8 GPUs, the 300 GB/s NVLink budget over 2 ports;
# torus: 4x4, the budget over 4 ports (config/networks/torus2d.yaml); fat tree: 8 nodes on one HDR rail,
# 4 per leaf, 2 spines (non-blocking).
NETWORKS: dict[str, NetworkSpec] = {
    "switch": NetworkSpec("dgx-a100-x2", (_dim("nvlink", "switch", 8, 300 * GBS, 3 * US),
                                          _dim("ib", "fat_tree", 2, 25 * GBS, 1 * US, rail_optimized=True))),
    "ring": NetworkSpec("ring8", (_dim("nvlink", "ring", 8, 150 * GBS, 1 * US),)),
    "torus": NetworkSpec("torus4x4", (_dim("torus", "torus", 16, 75 * GBS, 1 * US, shape=(4, 4)),)),
    "fat_tree": NetworkSpec("fat-tree8", (_dim("ib", "fat_tree", 8, 25 * GBS, 1 * US, leaf_size=4, spines=2),)),
}

Link = Callable[[Topology], tuple[int, int]]


@dataclass(frozen=True)
class Base:
    """One axis on one topology: the collective, a partner that shares its links, the cables to fault."""
    axis: str
    topology: str
    op: str
    ranks: tuple[int, ...]
    partner: tuple[str, tuple[int, ...], float]     # (op, ranks, bytes as a fraction of the axis' size)
    soft: Link
    hard: Link
    chunks: int = 16


def _sw(t: Topology) -> int:
    return t.switch_node(0, "switch", 0, 0)


def _spine_link(t: Topology) -> tuple[int, int]:
    return t.fat_tree[0]["leaf_of"][0], t.fat_tree[0]["spines"][0]


BASES = [
    Base("tp", "switch", "all_reduce", tuple(range(8)), ("all_reduce", tuple(range(7, -1, -1)), 1.0),
         lambda t: (0, _sw(t)), lambda t: (1, _sw(t))),
    Base("tp", "ring", "all_reduce", tuple(range(8)), ("all_reduce", (0, 2, 4, 6), 1.0),
         lambda t: (0, 1), lambda t: (3, 4)),
    # partner 2 -> 6: a destination on leaf port 2 climbs spine 0 like 3 -> 4 (port 0; destination-mod-k),
    # so the two share leaf 0 -> spine 0 -> leaf 1 (2 -> 5 would take spine 1 and share no cable)
    Base("pp", "fat_tree", "send_recv", (3, 4), ("send_recv", (2, 6), 1.0),
         lambda t: (3, t.fat_tree[0]["leaf_of"][3]), _spine_link, chunks=64),
    Base("pp", "ring", "send_recv", (0, 1), ("send_recv", (7, 1), 1.0), lambda t: (0, 1), lambda t: (0, 1),
         chunks=64),
    Base("dp", "fat_tree", "all_reduce", tuple(range(8)), ("send_recv", (3, 4), 0.125),
         lambda t: (3, t.fat_tree[0]["leaf_of"][3]), _spine_link),
    Base("ep", "switch", "all_to_all", tuple(range(8)), ("all_reduce", tuple(range(8)), 0.5),
         lambda t: (0, _sw(t)), lambda t: (1, _sw(t))),
    Base("ep", "torus", "all_to_all", tuple(range(16)), ("all_gather", (0, 1, 2, 3), 0.25),
         lambda t: (0, 1), lambda t: (0, 1)),
    Base("cp", "ring", "all_gather", tuple(range(8)), ("all_gather", (0, 2, 4, 6), 1.0),
         lambda t: (0, 1), lambda t: (3, 4)),
    Base("cp", "torus", "all_gather", (0, 1, 2, 3), ("all_reduce", (0, 1, 2, 3), 1.0),
         lambda t: (1, 2), lambda t: (1, 2)),
]
VARIANTS = ("alone", "concurrent", "soft_fault", "hard_fault")
SMOKE = ("tp-switch-hard_fault", "pp-fat_tree-concurrent", "ep-torus-alone", "cp-ring-hard_fault")


@dataclass(frozen=True)
class Case:
    name: str
    axis: str
    topology: str
    variant: str
    network: NetworkSpec
    requests: tuple[CollectiveRequest, ...]
    real_bytes: float


def build_cases(scale: float = SCALE, names: tuple[str, ...] | None = None, chunks: int | None = None) -> list[Case]:
    """Every base x variant (or only `names`); `chunks` overrides each base's chunk count."""
    out = []
    for b in BASES:
        base = NETWORKS[b.topology]
        topo = build_topology(base)
        size = LLAMA[b.axis] * scale
        nc = chunks or b.chunks
        main = CollectiveRequest(b.op, size, b.ranks, "auto", nc)
        for v in VARIANTS:
            name = f"{b.axis}-{b.topology}-{v}"
            if names is not None and name not in names:
                continue
            net, reqs = base, (main,)
            if v == "concurrent":
                op, ranks, frac = b.partner
                reqs = (main, CollectiveRequest(op, size * frac, ranks, "auto", nc))
            elif v == "soft_fault":
                net = replace(base, faults=(FaultSpec(link=b.soft(topo), bandwidth_factor=0.25),))
            elif v == "hard_fault":
                net = replace(base, faults=(FaultSpec(link=b.hard(topo), failed=True),))
            out.append(Case(name, b.axis, b.topology, v, net, reqs, LLAMA[b.axis]))
    return out


def alpha_beta_inputs(case: Case) -> list[tuple[str, float, int, float, float, float]]:
    """(op, bytes, ranks, bandwidth, latency, start) per collective: the nominal values of the group's dimension."""
    topo = build_topology(replace(case.network, faults=()))
    out = []
    for r in case.requests:
        dim = case.network.dimensions[(spanned(topo, list(r.ranks)) or [0])[0]]
        out.append((r.op, r.nbytes, len(r.ranks), dim.link_bandwidth, dim.latency_s, r.start_s))
    return out


def alpha_beta_time(inputs: list[tuple[str, float, int, float, float, float]]) -> float:
    """Congestion- and fault-unaware: every collective alone on healthy links; the slowest one."""
    return max(start + collective_time(op, nb, n, bw, lat) for op, nb, n, bw, lat, start in inputs)


def find_ns3() -> str | None:
    """None if ns-3 can be compiled against, else why not."""
    if not shutil.which("pkg-config") or not shutil.which("g++"):
        return f"{INSTALL_HINT}; pkg-config and g++ are needed too"
    if subprocess.run(["pkg-config", "--exists", *NS3_PACKAGES], check=False).returncode != 0:
        return INSTALL_HINT
    return None


def compile_replay(output: Path = BINARY, source: Path = SOURCE) -> Path:
    """Compile validation/ns3/replay.cc against the system ns-3 (skipped when the binary is up to date)."""
    deps = [source, source.with_name("json.h")]
    if output.exists() and all(output.stat().st_mtime >= d.stat().st_mtime for d in deps):
        return output
    why = find_ns3()
    if why:
        raise RuntimeError(why)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", *NS3_PACKAGES], capture_output=True, text=True,
                           check=True).stdout.split()
    flags = [f for f in flags if f not in ("-I/usr\\;", "-I/usr;")]   # Debian's .pc files carry a stray entry
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    subprocess.run(["g++", "-O2", "-std=c++17", "-o", str(tmp), str(source), *flags], check=True)
    tmp.replace(output)
    return output


def run_ns3(doc: dict, binary: Path = BINARY, packet_bytes: int | None = None) -> dict:
    """Replay a schedule document in ns-3; the program's JSON plus `wall_s` (whole process)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_document(doc, Path(tmp) / "schedule.json")
        cmd = [str(binary), str(path)] + (["--packet-bytes", str(packet_bytes)] if packet_bytes else [])
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"ns-3 replay failed ({proc.returncode}): {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    out["wall_s"] = wall
    return out


def run_case(case: Case, binary: Path = BINARY, packet_bytes: int = DEFAULT_PACKET_BYTES) -> dict:
    doc = export_concurrent(case.network, case.requests, utilization=1.0, packet_bytes=packet_bytes, name=case.name)
    ns3 = run_ns3(doc, binary)
    simulate_concurrent(case.network, case.requests, utilization=1.0)          # warm (numba, caches)
    t0 = time.perf_counter()
    ours_times, _, events = simulate_concurrent(case.network, case.requests, utilization=1.0)
    ours_wall = time.perf_counter() - t0
    inputs = alpha_beta_inputs(case)
    t0 = time.perf_counter()
    ab = alpha_beta_time(inputs)
    ab_wall = time.perf_counter() - t0
    ns, ours = max(ns3["group_finish_s"]), max(ours_times)
    return {
        "case": case.name, "axis": case.axis, "topology": case.topology, "variant": case.variant,
        "collectives": " + ".join(f"{r.op}[{len(r.ranks)}]" for r in case.requests),
        "real_bytes": case.real_bytes, "sim_bytes": case.requests[0].nbytes, "chunks": case.requests[0].chunks,
        "flows": len(doc["flows"]["src"]), "packet_bytes": packet_bytes, "packet_hops": ns3["packet_hops"],
        "link_events": events, "ns3_us": ns * 1e6, "ours_us": ours * 1e6, "alpha_beta_us": ab * 1e6,
        "ours_err_pct": 100 * (ours - ns) / ns, "alpha_beta_err_pct": 100 * (ab - ns) / ns,
        "ns3_wall_s": ns3["wall_s"], "ns3_run_wall_s": ns3["run_wall_s"], "ours_wall_s": ours_wall,
        "alpha_beta_wall_s": ab_wall, "within_target": abs(ours - ns) <= TARGET * ns,
    }


def compare(cases: list[Case], csv_path: Path | None = None, binary: Path = BINARY,
            packet_bytes: int = DEFAULT_PACKET_BYTES, log: Callable[[str], None] | None = print) -> list[dict]:
    rows = []
    for c in cases:
        r = run_case(c, binary, packet_bytes)
        rows.append(r)
        if log:
            log(f"{r['case']:<26} ns-3 {r['ns3_us']:9.2f} us  ours {r['ours_us']:9.2f} us ({r['ours_err_pct']:+6.2f}%)"
                f"  alpha-beta {r['alpha_beta_us']:9.2f} us ({r['alpha_beta_err_pct']:+7.2f}%)"
                f"  wall ns-3 {r['ns3_wall_s']:.2f} s, ours {r['ours_wall_s'] * 1e3:.1f} ms")
    if csv_path:
        csv_path = Path(csv_path)
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return rows


def figure(rows: list[dict], png: Path) -> None:
    """Fig 11 analog: time per case normalized to ns-3 (ours, alpha-beta), and the wall time of each backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [r["case"] for r in rows]
    x = np.arange(len(rows))
    fig, (ax, aw) = plt.subplots(2, 1, figsize=(max(10, 0.42 * len(rows)), 8), sharex=True,
                                 gridspec_kw={"height_ratios": [3, 2]})
    w = 0.28
    ax.bar(x - w, [1.0] * len(rows), w, label="ns-3 (packet level)", color="0.55")
    ax.bar(x, [r["ours_us"] / r["ns3_us"] for r in rows], w, label="rapidllm link-queue", color="tab:blue")
    ax.bar(x + w, [r["alpha_beta_us"] / r["ns3_us"] for r in rows], w, label="alpha-beta", color="tab:orange")
    ax.axhspan(1 - TARGET, 1 + TARGET, color="tab:green", alpha=0.15, label="±8% of ns-3")
    ax.set_ylabel("communication time / ns-3")
    ax.set_ylim(0, 1.6)
    ax.legend(ncol=4, fontsize=8, loc="upper left")
    ax.set_title("Llama-3.1-70B collectives on A100 fabrics: rapidllm vs ns-3 vs alpha-beta (cf. paper Fig 11)")
    for k in ("ns3_wall_s", "ours_wall_s", "alpha_beta_wall_s"):
        aw.plot(x, [max(r[k], 1e-7) for r in rows], "o", label=k.replace("_wall_s", "").replace("_", "-"))
    aw.set_yscale("log")
    aw.set_ylabel("wall time (s)")
    aw.legend(ncol=3, fontsize=8)
    aw.set_xticks(x, names, rotation=75, fontsize=7)
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--csv", type=Path, default=ROOT / "results" / "validation" / "network_ns3.csv")
    p.add_argument("--png", type=Path, default=None)
    p.add_argument("--binary", type=Path, default=Path(os.environ.get("RAPIDLLM_NS3_REPLAY", BINARY)))
    p.add_argument("--scale", type=float, default=SCALE, help="message size / real size (default 1/4)")
    p.add_argument("--smoke", action="store_true", help=f"only {', '.join(SMOKE)} at scale 1/16")
    p.add_argument("--packet-bytes", type=int, default=DEFAULT_PACKET_BYTES)
    p.add_argument("--chunks", type=int, default=None, help="override every case's chunk count")
    p.add_argument("--only", nargs="*", default=None, help="case names to run")
    a = p.parse_args(argv)
    try:
        binary = compile_replay(a.binary)
    except RuntimeError as e:
        print(f"error: {e}")
        return 2
    names = tuple(a.only) if a.only else (SMOKE if a.smoke else None)
    cases = build_cases(SMOKE_SCALE if a.smoke else a.scale, names, a.chunks)
    rows = compare(cases, a.csv, binary, a.packet_bytes)
    if a.png:
        figure(rows, a.png)
    bad = [r["case"] for r in rows if not r["within_target"]]
    worst = max(abs(r["ours_err_pct"]) for r in rows)
    print(f"{len(rows) - len(bad)}/{len(rows)} cases within 8% of ns-3 (worst {worst:.2f}%)"
          + (f"; missed: {', '.join(bad)}" if bad else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

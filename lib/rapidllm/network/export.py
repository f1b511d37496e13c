"""Export a collective's chunk schedule and the fabric it runs on as JSON, for the ns-3 replay.

The document (format ``rapidllm-ns3-schedule/1``, read by validation/ns3/replay.cc) holds

- ``links``: every directed link of the Topology, in link-id order, as columns ``src``, ``dst`` (global node
  ids: ranks, then switches), ``bandwidth`` (bytes/s, already multiplied by the utilization), ``latency``
  (seconds) and ``alive`` (0 for a hard-failed link; ns-3 does not build it);
- ``flows``: one per transfer of the schedule (one chunk of one step), as columns ``src``, ``dst``, ``bytes``,
  ``release`` (earliest start, seconds), ``group`` (index of the collective it belongs to), dependencies in
  CSR form (``dep_ptr``, ``dep_idx``: flow i starts once flows dep_idx[dep_ptr[i]:dep_ptr[i+1]] have arrived)
  and the route of each flow as link ids (``route_of`` -> ``route_ptr``/``route_links``) from the same
  fault-aware Router the simulator uses. Zero-byte flows with src == dst are local barriers.

The schedule is built exactly as `simulate_concurrent` builds it (one `build_schedule` per request, then
`concat`, release = the request's start time), so ns-3 and the link-queue simulator replay the same DAG.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rapidllm.network.api import CollectiveRequest, build_schedule
from rapidllm.network.collectives import Schedule, concat
from rapidllm.network.routing import Router, route_table
from rapidllm.network.topology import Topology, build_topology
from rapidllm.spec.errors import SpecError
from rapidllm.spec.network import NetworkSpec

FORMAT = "rapidllm-ns3-schedule/1"
DEFAULT_PACKET_BYTES = 4096      # InfiniBand's largest MTU; see validation/ns3/README.md


def group_ranks(network: NetworkSpec, ranks: int | Sequence[int] | None) -> list[int]:
    """Rank ids of a collective: None (all), a count n (0..n-1) or explicit ids (same rule as the simulator)."""
    if ranks is None:
        return list(range(network.total_size))
    out = list(range(int(ranks))) if isinstance(ranks, (int, np.integer)) else [int(r) for r in ranks]
    if len(set(out)) != len(out) or any(not 0 <= r < network.total_size for r in out):
        raise SpecError(f"network {network.name!r}: ranks {out} must be distinct ids in 0..{network.total_size - 1}")
    return out


def concurrent_schedule(network: NetworkSpec, requests: Sequence[CollectiveRequest],
                        topology: Topology | None = None) -> tuple[Topology, Schedule, np.ndarray, np.ndarray]:
    """(topology, merged schedule, release time per transfer, owning request per transfer)."""
    topo = topology or build_topology(network)
    parts, owner, release = [], [], []
    for k, req in enumerate(requests):
        s, _, _ = build_schedule(topo, req.op, float(req.nbytes), group_ranks(network, req.ranks), req.algorithm,
                                 req.chunks)
        parts.append(s)
        owner.append(np.full(len(s), k, dtype=np.int64))
        release.append(np.full(len(s), float(req.start_s)))
    sched = concat(parts)
    rel = np.concatenate(release) if release else np.zeros(0)
    who = np.concatenate(owner) if owner else np.zeros(0, np.int64)
    return topo, sched, rel, who


def schedule_document(topo: Topology, sched: Schedule, release: np.ndarray, group: np.ndarray, n_groups: int,
                      utilization: float = 1.0, packet_bytes: int = DEFAULT_PACKET_BYTES,
                      name: str = "") -> dict[str, Any]:
    """The JSON-ready document for one schedule on one topology."""
    if len(sched):
        route_of, ptr, links = route_table(Router(topo), sched.src, sched.dst)
    else:
        route_of, ptr, links = np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32)
    alive = topo.alive.astype(int)
    return {
        "format": FORMAT,
        "name": name or topo.name,
        "packet_bytes": int(packet_bytes),
        "nodes": int(topo.n_nodes),
        "ranks": int(topo.n_ranks),
        "groups": int(n_groups),
        "links": {
            "src": topo.src.tolist(), "dst": topo.dst.tolist(),
            "bandwidth": (topo.bandwidth * utilization).tolist(), "latency": topo.latency.tolist(),
            "alive": alive.tolist(),
        },
        "flows": {
            "src": sched.src.tolist(), "dst": sched.dst.tolist(), "bytes": sched.nbytes.tolist(),
            "release": np.asarray(release, dtype=float).tolist(), "group": np.asarray(group).tolist(),
            "dep_ptr": sched.dep_ptr.tolist(), "dep_idx": sched.dep_idx.tolist(),
            "route_of": route_of.tolist(), "route_ptr": ptr.tolist(), "route_links": links.tolist(),
        },
    }


def export_concurrent(network: NetworkSpec, requests: Sequence[CollectiveRequest], utilization: float | None = None,
                      packet_bytes: int = DEFAULT_PACKET_BYTES, name: str = "") -> dict[str, Any]:
    """Document for several collectives sharing the fabric (what `simulate_concurrent` simulates)."""
    topo, sched, rel, who = concurrent_schedule(network, requests)
    util = network.utilization if utilization is None else utilization
    return schedule_document(topo, sched, rel, who, len(requests), util, packet_bytes, name or network.name)


def export_collective(network: NetworkSpec, op: str, nbytes: float, ranks: int | Sequence[int] | None = None,
                      algorithm: str = "auto", chunks: int | None = None, utilization: float | None = None,
                      packet_bytes: int = DEFAULT_PACKET_BYTES) -> dict[str, Any]:
    """Document for one collective on an otherwise idle network (what `simulate_collective` simulates)."""
    group = tuple(group_ranks(network, ranks))
    req = CollectiveRequest(op, float(nbytes), group, algorithm, chunks)
    return export_concurrent(network, [req], utilization, packet_bytes)


def write_document(doc: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":")))
    return path

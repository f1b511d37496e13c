"""Which network dimensions a parallel group spans, for the congestion-unaware alpha-beta baseline.

Ranks are numbered by flattening parallel coordinates in the network's axis order (innermost first) and
the flat index is decoded into network dimensions innermost first (DESIGN §3). An axis with stride s and
size n covers flat offsets s, 2s, ..., (n-1)s, so it crosses every dimension whose span it reaches.
"""
from __future__ import annotations

from dataclasses import dataclass

from rapidllm.spec.case import Case


@dataclass(frozen=True)
class GroupLink:
    size: int
    bandwidth: float       # bytes/s per direction, slowest dimension crossed
    latency_s: float       # per hop, slowest dimension crossed


def axis_stride(case: Case, axis: str) -> int:
    stride = 1
    for a in case.network.axis_order:
        if a == axis:
            return stride
        stride *= case.parallelism.size(a) if a != "ep" else 1
    raise KeyError(axis)


def group_link(case: Case, axis: str, bandwidth_scale: float = 1.0) -> GroupLink:
    """The slowest link a ring over parallel axis `axis` crosses (EP lives inside dp x cp x tp)."""
    size = case.parallelism.size(axis)
    stride = 1 if axis == "ep" else axis_stride(case, axis)
    reach = stride * size                      # flat offsets the group spans
    bandwidth, latency, span = float("inf"), 0.0, 1
    for dim in case.network.dimensions:
        if size > 1 and span < reach and span * dim.size > stride:
            bandwidth = min(bandwidth, dim.link_bandwidth)
            latency = max(latency, dim.latency_s)
        span *= dim.size
    if bandwidth == float("inf"):
        bandwidth = case.network.dimensions[0].link_bandwidth
    return GroupLink(size=size, bandwidth=bandwidth * bandwidth_scale, latency_s=latency)

"""The slowest link a parallel group crosses, for the congestion-unaware alpha-beta baseline.

The group itself comes from the same rank mapping the event engine uses (`CommCost.groups`: parallel
coordinates flattened in the network's axis order, decoded into network dimensions); the baseline only
reduces it to the slowest bandwidth and latency among the dimensions it spans.
"""
from __future__ import annotations

from dataclasses import dataclass

from rapidllm.engine.comm_cost import CommCost
from rapidllm.network.mapping import dims_spanned
from rapidllm.spec.case import Case


@dataclass(frozen=True)
class GroupLink:
    size: int
    bandwidth: float       # bytes/s per direction, slowest dimension crossed
    latency_s: float       # per hop, slowest dimension crossed
    collective_latency_s: float = 0.0   # per call, largest of the dimensions crossed


def group_link(case: Case, axis: str, bandwidth_scale: float = 1.0) -> GroupLink:
    """Size, slowest bandwidth (scaled) and latency of the first `axis` group of pipeline stage 0."""
    cost = CommCost(case)
    size = cost.group_size(axis)
    dims = case.network.dimensions
    groups = cost.groups(axis, 0) if size > 1 else []
    spanned = dims_spanned(case.network, list(groups[0])) if groups else ()
    crossed = [dims[d] for d in spanned] or [dims[0]]
    return GroupLink(size=size, bandwidth=min(d.link_bandwidth for d in crossed) * bandwidth_scale,
                     latency_s=max(d.latency_s for d in crossed) if spanned else 0.0,
                     collective_latency_s=max(d.collective_latency_s for d in crossed) if spanned else 0.0)

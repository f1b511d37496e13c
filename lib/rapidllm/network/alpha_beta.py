"""Alpha-beta (latency-bandwidth) closed forms for ring-style collectives.

The congestion-unaware baseline: a collective over ``n`` ranks moving ``nbytes`` (the per-rank buffer, as
nccl-tests reports it) over links of ``bandwidth`` bytes/s and ``latency`` seconds per hop. Formulas are the
standard ring costs (Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 2005; Patarasuk & Yuan 2009):

- all_reduce:      2(n-1)/n * S/B + 2(n-1) * a
- reduce_scatter:  (n-1)/n * S/B + (n-1) * a      (S = full buffer, each rank ends with S/n)
- all_gather:      (n-1)/n * S/B + (n-1) * a      (S = full gathered buffer)
- all_to_all:      (n-1)/n * S/B + (n-1) * a      (S = bytes each rank sends in total)
- broadcast/reduce: S/B + (n-1) * a               (pipelined chain; large-message limit)
- send_recv:       S/B + a
"""
from __future__ import annotations

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "send_recv")

# bus-bandwidth factor, nccl-tests convention: busbw = algbw * factor
BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}


def collective_time(op: str, nbytes: float, n: int, bandwidth: float, latency: float) -> float:
    """Seconds for collective `op` of `nbytes` over `n` ranks on links of `bandwidth` B/s, `latency` s."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; allowed: {', '.join(OPS)}")
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth!r}")
    if nbytes < 0 or n < 1:
        raise ValueError(f"need nbytes >= 0 and n >= 1, got nbytes={nbytes!r}, n={n!r}")
    if op == "send_recv":
        return nbytes / bandwidth + latency
    if n == 1:
        return 0.0
    s_b = nbytes / bandwidth
    if op == "all_reduce":
        return 2.0 * (n - 1) / n * s_b + 2.0 * (n - 1) * latency
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n * s_b + (n - 1) * latency
    return s_b + (n - 1) * latency  # broadcast, reduce


def bus_bandwidth(op: str, nbytes: float, n: int, time_s: float) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s following the nccl-tests definitions."""
    if time_s <= 0:
        return float("inf"), float("inf")
    alg = nbytes / time_s
    return alg, alg * (BUS_FACTOR[op](n) if n > 1 else 1.0)

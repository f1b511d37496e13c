"""Simulate collectives on a network spec: schedule -> routes -> link-queue event loop -> result."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rapidllm.network.alpha_beta import BUS_FACTOR
from rapidllm.network.collectives import ALGORITHMS, SUPPORTED, Schedule, concat
from rapidllm.network.decompose import simulate
from rapidllm.network.hierarchical import hierarchical, rank_coords, spanned, spanned_grid
from rapidllm.network.in_switch import NAME as IN_SWITCH, in_switch, reducing_dimension
from rapidllm.network.ring_steps import OPS as RING_GAP_OPS, ring_gap_latency
from rapidllm.network.routing import Router
from rapidllm.network.topology import Topology, build_topology
from rapidllm.spec.errors import SpecError
from rapidllm.spec.network import NetworkSpec
from rapidllm.spec.schema import short

DEFAULT_CHUNKS = None          # chunk count from the network's chunk size (default_chunks)
MAX_CHUNKS = 32               # beyond this the store-and-forward fill is < 3% of a transfer; bounds events
# transfers one simulated collective may schedule (each ~100 bytes of arrays, ~1-10 us of event loop): a ring
# all-reduce over 2048 ranks is 8.4M; beyond this ask the alpha-beta model (docs/limits.md)
MAX_TRANSFERS = 2**24


@dataclass
class CollectiveResult:
    time_s: float
    algbw: float                 # bytes/s, nbytes / time (nccl-tests)
    busbw: float                 # bytes/s, algbw x bus factor
    busiest_link: str
    link_busy: np.ndarray        # seconds per link id (Topology order)
    algorithm: str
    chunks: int                  # chunks per transfer actually used
    events: int
    topology: Topology


@dataclass(frozen=True)
class CollectiveRequest:
    op: str
    nbytes: float
    ranks: tuple[int, ...]
    algorithm: str = "auto"
    chunks: int | None = DEFAULT_CHUNKS
    start_s: float = 0.0


def _ranks(network: NetworkSpec, ranks: int | Sequence[int] | None) -> list[int]:
    if ranks is None:
        return list(range(network.total_size))
    size = network.total_size
    if isinstance(ranks, (int, np.integer)):
        if not 1 <= ranks <= size:      # the id list of a count was the message: 5 kB for --ranks 1000
            raise SpecError(f"network {network.name!r}: ranks: a count of {int(ranks)}; allowed: 1 to {size}, "
                            f"the ranks it has")
        ranks = list(range(int(ranks)))
    out = [int(r) for r in ranks]
    bad = [r for r in out if not 0 <= r < size]
    if bad or len(set(out)) != len(out):
        raise SpecError(f"network {network.name!r}: ranks {short(out)} must be distinct ids in 0..{size - 1}")
    return out


def choose_algorithm(topo: Topology, op: str, ranks: list[int]) -> str:
    """'auto': hierarchical across dimensions, direct for all_to_all/send_recv and fully connected, else ring
    (resolve_algorithm also weighs the in-switch reduction where a switch offers one)."""
    if op in ("all_to_all", "send_recv"):
        return "direct"
    dims = spanned(topo, ranks)
    if len(dims) > 1 and op in ("all_reduce", "reduce_scatter", "all_gather"):
        return "hierarchical"
    if len(dims) == 1 and topo.dims[dims[0]].topology == "fully_connected" and op != "broadcast":
        return "direct"
    return "ring"


def setup_latency(topo: Topology, algorithm: str, ranks: list[int], nccl_op: str | None = None,
                  router: Router | None = None) -> float:
    """Seconds before the first transfer of a collective may start: the largest per-call
    `collective_latency` of the dimensions it spans (NCCL's base latency), plus the switch's set-up when
    it reduces in the switch. `nccl_op`: the collective, when it runs as NCCL runs it (`auto`); then a
    hierarchical all-gather or reduce-scatter also waits for the ring steps NCCL's flat ring takes and the
    hierarchical schedule does not (network/ring_steps.py). An explicit algorithm replays its own schedule."""
    dims = spanned(topo, ranks)
    base = max((topo.dims[d].collective_latency_s for d in dims), default=0.0)
    if algorithm == IN_SWITCH:             # the switch's own set-up, on its one (reducing) dimension
        base += topo.dims[dims[0]].in_switch_reduction_s or 0.0
    if algorithm == "hierarchical" and nccl_op in RING_GAP_OPS:
        base += ring_gap_latency(topo, router or Router(topo), ranks)
    return base


def resolve_algorithm(topo: Topology, op: str, nbytes: float, ranks: list[int], algorithm: str,
                      chunks: int | None, utilization: float, router: Router | None = None) -> str:
    """The algorithm an 'auto' collective runs: choose_algorithm's, except that an all-reduce inside a switch
    that reduces in the network takes whichever of the ring and the in-switch reduction finishes first on
    its own, as NCCL's tuner picks the algorithm its cost model predicts fastest (NVLS wins large messages
    and many ranks, the ring small messages on few ranks). An explicit algorithm is returned as is."""
    if algorithm != "auto":
        return algorithm
    if router is None:
        algo, reducing = _auto(topo, op, ranks)
    else:               # a sweep asks again for every size: remembered per ranks
        algo, reducing = router.remembered(("auto", op, tuple(ranks)), len(ranks), lambda: _auto(topo, op, ranks))
    if not reducing:
        return algo
    best, best_t = algo, float("inf")
    for candidate in ("ring", IN_SWITCH):
        sched, _, _ = build_schedule(topo, op, nbytes, ranks, candidate, chunks)
        release = np.full(len(sched), setup_latency(topo, candidate, ranks))
        t = float(run_schedule(topo, sched, release, utilization, router)[0].max())
        if t < best_t:
            best, best_t = candidate, t
    return best


def _auto(topo: Topology, op: str, ranks: list[int]) -> tuple[str, bool]:
    """choose_algorithm's answer, and whether it is a ring inside a switch that reduces in the network."""
    algo = choose_algorithm(topo, op, ranks)
    return algo, algo == "ring" and reducing_dimension(topo, op, ranks) is not None


def step_limits(topo: Topology, op: str, ranks: Sequence[int], algorithm: str) -> tuple[int, int]:
    """(n_0, most) for `default_chunks`: what the largest ring step of `algorithm` over `ranks` divides the
    bytes by, and the most chunks its schedule may take. The hierarchical schedule's innermost stage carries
    nbytes / n_0 per step (n_0: the group's ranks along the innermost dimension it spans) and every stage
    takes the same count (their joins pair chunks: docs/network.md, "Chunking across nodes"); at most as many
    chunks as keep its N sum_d (n_d - 1) transfers per chunk (twice that for an all-reduce) within
    MAX_TRANSFERS, the bound on flat schedules (check_work). Any other schedule: (its ranks, MAX_CHUNKS). No
    byte count enters (the engine remembers the limits per group)."""
    grid = spanned_grid(rank_coords(topo, ranks)) if algorithm == "hierarchical" else None
    if grid is None:
        return len(ranks), MAX_CHUNKS
    sizes = grid[1]
    per_chunk = len(ranks) * sum(n - 1 for n in sizes) * (2 if op == "all_reduce" else 1)
    return sizes[0], min(MAX_CHUNKS, MAX_TRANSFERS // per_chunk)


def default_chunks(topo: Topology, op: str, nbytes: float, ranks: Sequence[int], algorithm: str,
                   limits: tuple[int, int] | None = None) -> int:
    """Chunks per transfer of a collective whose count is not forced: `chunk_count` of its largest transfer
    (a ring step of nbytes / n_0, `step_limits`), at most the schedule's limit, and never fewer than a ring
    step of nbytes / len(ranks) gives (the count of a flat schedule, and of the hierarchical one before it
    was sized by its largest transfer). Non-decreasing in the bytes."""
    n0, most = limits or step_limits(topo, op, ranks, algorithm)
    least = chunk_count(topo, op, nbytes, len(ranks), algorithm)
    return max(least, min(chunk_count(topo, op, nbytes, n0, algorithm), most))


def chunk_count(topo: Topology, op: str, nbytes: float, n: int, algorithm: str = "ring") -> int:
    """Chunks per transfer when a collective moves through fixed-size buffers of `topo.chunk_bytes`.

    A ring step (and a direct or all-to-all peer transfer) carries nbytes / n (n: the group's size, or
    `step_limits`' n_0 in a hierarchical schedule: `default_chunks`); broadcast, send/recv and a rank's push
    into a reducing switch (in_switch) carry nbytes. Store and forward charges one chunk's serialization per
    extra hop, so a transfer that fits in one buffer sees the whole step twice through a switch while a large
    one pipelines: this is what makes bus bandwidth ramp up with message size (docs/network.md, "Chunking").
    """
    whole = op in ("broadcast", "send_recv") or algorithm == IN_SWITCH
    per_transfer = nbytes if whole else nbytes / max(n, 1)
    return int(min(MAX_CHUNKS, max(1, math.ceil(per_transfer / topo.chunk_bytes))))


def transfer_bound(op: str, n: int, chunks: int) -> int:
    """Transfers of the largest schedule of `op` over n ranks (a ring all-reduce: 2 (n-1) steps of n
    transfers per chunk; every other algorithm moves at most n (n-1) per chunk)."""
    return chunks * n * max(n - 1, 1) * (2 if op == "all_reduce" else 1)


def check_work(op: str, n: int, chunks: int) -> None:
    """Refuse, before allocating, a collective whose schedule could exceed MAX_TRANSFERS."""
    if transfer_bound(op, n, chunks) > MAX_TRANSFERS:
        raise SpecError(f"{op} over {n} ranks in {chunks} chunk(s) schedules up to {transfer_bound(op, n, chunks)} "
                        f"transfers; the simulator takes at most {MAX_TRANSFERS} (fewer ranks or chunks)")


def build_schedule(topo: Topology, op: str, nbytes: float, ranks: list[int], algorithm: str,
                   chunks: int | None) -> tuple[Schedule, int, str]:
    """The chunk schedule of one collective: (schedule, chunks per transfer, algorithm used).

    `chunks` None: from the network's chunk size (default_chunks); an int forces that many.
    """
    if op not in SUPPORTED:
        raise SpecError(f"unknown collective {op!r}; allowed: {', '.join(SUPPORTED)}")
    if op == "send_recv" and len(ranks) != 2:
        raise SpecError(f"send_recv needs exactly 2 ranks (source, destination), got {len(ranks)}")
    algo = choose_algorithm(topo, op, ranks) if algorithm == "auto" else algorithm
    if chunks is None:
        chunks = default_chunks(topo, op, nbytes, ranks, algo)
    if chunks < 1:
        raise SpecError(f"chunks must be >= 1, got {chunks}")
    if algo != "hierarchical":           # hierarchical runs per dimension: its groups are smaller
        check_work(op, len(ranks), chunks)
    if algo not in SUPPORTED[op]:
        raise SpecError(f"{op} has no algorithm {algo!r}; allowed: auto, {', '.join(SUPPORTED[op])}")
    try:
        if algo == "hierarchical":
            return hierarchical(op, topo, ranks, nbytes, chunks), chunks, algo
        if algo == IN_SWITCH:
            return in_switch(op, topo, ranks, nbytes, chunks), chunks, algo
        return ALGORITHMS[algo](op, ranks, nbytes, chunks), chunks, algo
    except ValueError as e:
        raise SpecError(str(e)) from None


def run_schedule(topo: Topology, sched: Schedule, release: np.ndarray | float, utilization: float,
                 router: Router | None = None, rec: list | None = None, whole: bool = True
                 ) -> tuple[np.ndarray | float, np.ndarray, int]:
    """Route every transfer and run the event loop: (finish per transfer, busy per link, link events).

    Stages and identical parts that share no link are simulated one by one and once, with the same
    result bit for bit (network/decompose.py). `rec`, a list, receives the run's plan (network/plan.py).
    `release`: per transfer, or one float for all; `whole` False: the latest finish time (-inf: no
    transfer) instead of every transfer's (decompose.simulate)."""
    router = router or Router(topo)
    if not len(sched):
        return (np.zeros(0) if whole else -np.inf), np.zeros(topo.n_links), 0
    return simulate(router, sched, release, link_bandwidths(topo, utilization), topo.latency, rec, whole)


def link_bandwidths(topo: Topology, utilization: float) -> np.ndarray:
    """Bytes/s of every link at `utilization` (a failed link: 1, never used by a route)."""
    return np.where(topo.alive, topo.bandwidth * utilization, 1.0)


def _result(topo: Topology, op: str, nbytes: float, n: int, time_s: float, busy: np.ndarray, algo: str,
            chunks: int, events: int) -> CollectiveResult:
    alg = nbytes / time_s if time_s > 0 else float("inf")
    bus = alg * (BUS_FACTOR[op](n) if n > 1 else 1.0)
    busiest = topo.link_name(int(np.argmax(busy))) if len(busy) and busy.max() > 0 else "none"
    return CollectiveResult(time_s, alg, bus, busiest, busy, algo, chunks, events, topo)


def simulate_collective(network: NetworkSpec, op: str, nbytes: float, ranks: int | Sequence[int] | None = None,
                        algorithm: str = "auto", chunks: int | None = DEFAULT_CHUNKS,
                        utilization: float | None = None, topology: Topology | None = None) -> CollectiveResult:
    """Time one collective of `nbytes` (nccl-tests size convention) over `ranks` on an otherwise idle network.

    `ranks`: a count n (ranks 0..n-1), explicit rank ids (ring order; send_recv: [src, dst]) or None (all).
    `utilization` scales every link's bandwidth (default: the network's own).
    """
    topo = topology or build_topology(network)
    group = _ranks(network, ranks)
    util = network.utilization if utilization is None else utilization
    nccl_op = op if algorithm == "auto" else None
    router = Router(topo)
    algorithm = resolve_algorithm(topo, op, float(nbytes), group, algorithm, chunks, util)
    sched, chunks, algo = build_schedule(topo, op, float(nbytes), group, algorithm, chunks)
    setup = setup_latency(topo, algo, group, nccl_op, router)
    finish, busy, events = run_schedule(topo, sched, np.full(len(sched), setup), util, router)
    t = float(finish.max()) if len(finish) else 0.0
    return _result(topo, op, float(nbytes), len(group), t, busy, algo, chunks, events)


def simulate_concurrent(network: NetworkSpec, requests: Sequence[CollectiveRequest],
                        utilization: float | None = None) -> tuple[list[float], np.ndarray, int]:
    """Several collectives sharing the links; returns (completion time of each, busy per link, link events)."""
    topo = build_topology(network)
    router = Router(topo)
    util = network.utilization if utilization is None else utilization
    parts, owner, release = [], [], []
    for k, req in enumerate(requests):
        group = _ranks(network, req.ranks)
        algorithm = resolve_algorithm(topo, req.op, float(req.nbytes), group, req.algorithm, req.chunks, util)
        s, _, algo = build_schedule(topo, req.op, float(req.nbytes), group, algorithm, req.chunks)
        parts.append(s)
        owner.append(np.full(len(s), k))
        nccl_op = req.op if req.algorithm == "auto" else None
        release.append(np.full(len(s), req.start_s + setup_latency(topo, algo, group, nccl_op, router)))
    sched = concat(parts)
    finish, busy, events = run_schedule(topo, sched, np.concatenate(release) if release else np.zeros(0), util,
                                        router)
    who = np.concatenate(owner) if owner else np.zeros(0, int)
    times = [float(finish[who == k].max()) if np.any(who == k) else req.start_s for k, req in enumerate(requests)]
    return times, busy, events

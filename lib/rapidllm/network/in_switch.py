"""In-switch all-reduce: NVLink SHARP, NCCL's NVLS algorithm, on a switch that reduces in the network.

A switch dimension that declares `in_switch_reduction` (config/networks, e.g. dgx-h100: NVSwitch 3 has
NVLink SHARP) runs its all-reduces in the switch instead of a ring. Per chunk, two phases as NVLS runs them
(multimem.ld_reduce, then multimem.st):
1. reduce in the switch: every rank's uplink carries its whole chunk to the switch; once all n have arrived,
   the switch sends slice k (1/n of the chunk), reduced, down to rank k;
2. all-gather by multicast: rank k sends its reduced slice up once and the switch copies it to every rank.
Per rank and chunk of S/C bytes the uplink carries S/C (1 + 1/n) and the downlink S/C (1/n + 1) instead of a
ring's 2(n-1)/n S/C each way, which is why NVLS bus bandwidth can exceed the link rate (nccl-tests on 8 H100:
479 GB/s against 450 GB/s NVLink, validation/references/collectives_nccl_h100_node.csv). Four link hops per
chunk (store and forward), at most WINDOW chunks in flight per rank. The dimension's value is the switch's
own set-up latency per collective (barriers, multicast set-up), added to the dimension's per-call
`collective_latency` before the first transfer (api.setup_latency).

Used only when every link between the group and its switch is alive; otherwise the ring reroutes.
"""
from __future__ import annotations

from rapidllm.network.collectives import Schedule, from_lists
from rapidllm.network.hierarchical import spanned
from rapidllm.network.topology import Topology

NAME = "in_switch"
# Chunks a rank may have in the switch at once: it pushes chunk c only after chunk c - WINDOW came back reduced
# (NCCL's buffers are finite). Two keep its uplink busy while a reduced slice travels back.
WINDOW = 2


def reducing_dimension(topo: Topology, op: str, ranks: list[int]) -> int | None:
    """The switch dimension that can run this collective in the switch, or None."""
    if op != "all_reduce" or len(ranks) < 2:
        return None
    dims = spanned(topo, ranks)
    if len(dims) != 1 or topo.dims[dims[0]].in_switch_reduction_s is None:
        return None
    switch = _switch(topo, ranks, dims[0])
    for r in ranks:
        for pair in ((r, switch), (switch, r)):
            link = topo.link_of.get(pair)
            if link is None or not topo.alive[link]:
                return None
    return dims[0]


def _switch(topo: Topology, ranks: list[int], d: int) -> int:
    return topo.switch_node(d, "switch", 0, topo.line_of(ranks[0], d))


def in_switch(op: str, topo: Topology, ranks: list[int], nbytes: float, chunks: int) -> Schedule:
    """Transfers of an in-switch all-reduce of `nbytes` per rank (see the module docstring)."""
    d = reducing_dimension(topo, op, ranks)
    if d is None:
        raise ValueError(f"network {topo.name!r}: algorithm in_switch needs an all_reduce within one switch "
                         "dimension that declares in_switch_reduction, every link to that switch alive; "
                         f"this {op} over {len(ranks)} ranks cannot run in a switch (use auto or ring)")
    n, switch = len(ranks), _switch(topo, ranks, d)
    whole, slice_ = nbytes / chunks, nbytes / (n * chunks)
    src: list[int] = []
    dst: list[int] = []
    nb: list[float] = []
    ch: list[int] = []
    deps: list[list[int]] = []

    def add(s: int, t: int, size: float, c: int, dep: list[int]) -> int:
        src.append(s); dst.append(t); nb.append(size); ch.append(c); deps.append(dep)
        return len(src) - 1

    reduced_at: list[list[int]] = []        # per chunk: the reduced-slice transfer to each rank
    for c in range(chunks):
        window = reduced_at[c - WINDOW] if c >= WINDOW else [None] * n
        arrived = [add(r, switch, whole, c, [] if w is None else [w]) for r, w in zip(ranks, window)]
        reduced = [add(switch, r, slice_, c, arrived) for r in ranks]
        reduced_at.append(reduced)
        for k, r in enumerate(ranks):
            up = add(r, switch, slice_, c, [reduced[k]])
            for t in ranks:
                add(switch, t, slice_, c, [up])
    return from_lists(src, dst, nb, ch, deps)

"""The latency of the ring steps NCCL takes across a multi-node group and the hierarchical schedule does not.

NCCL runs an all-gather or a reduce-scatter as rings over every rank of the communicator, whatever the
number of nodes (NVIDIA/nccl v2.30.7-1, commit 73cf1122):

- src/device/all_gather.h, `runRing`, lines 51-74 (reduce_scatter.h lines 39-54 alike): one ring over
  `nranks`: step 0, `nranks - 2` receive-copy-send steps, the final receive, so a chunk crosses
  `nranks - 1` hops;
- src/graph/connect.cc, `connectRings`, lines 95-113: each channel's ring runs through the GPUs of one
  node and on to the next node, so it crosses every node boundary once;
- src/graph/tuning.cc, `ncclTopoTuneModel`: `nsteps = nRanks - 1` for AllGather / ReduceScatter (lines
  289-290), `nInterSteps = nNodes - 1` (line 411) and latency = base + (nsteps - nInterSteps) x intraLat +
  nInterSteps x interLat (line 412): NCCL's own cost model charges every one of the N - 1 steps.
  Tree is an all-reduce algorithm only (lines 295-297 keep Ring, PAT, NVLS and CollNet for these two); PAT
  needs one rank per node (line 220, `nNodes != nRanks` disables it; since 2.23.4), and NVLS / CollNet
  across nodes need CollNet (SHARP) support (lines 503-505).

The hierarchical schedule (network/hierarchical.py) moves about the bytes per link of NCCL's parallel,
rail-aligned rings, but a chunk's path in it has only sum_d (n_d - 1) steps for a group spanning dimensions
of sizes n_0 (innermost) ... n_k: 7 + 127 = 134 on 1,024 GPUs of 8 per node, where NCCL takes 1,023. A
ring in innermost-first order over all N = prod n_d ranks moves along dimension d on (n_d - 1) x
prod_{j>d} n_j of its N - 1 steps (the sum telescopes to N - 1; the outermost dimension's count is n_k - 1,
NCCL's nInterSteps), so it takes (n_d - 1)(prod_{j>d} n_j - 1) steps of dimension d more than the
hierarchical schedule. Each is priced at the latency the simulator already charges for one ring hop along
d (`hop_latency`: the route between neighbours, e.g. two NVLink links through the switch), no new constant.

The extra is latency only, paid once per call (not per chunk: chunks pipeline behind the first one), so the
callers add it to the per-call latency before the first transfer (api.setup_latency), and only where NCCL
semantics apply: `auto` all-gather and reduce-scatter resolved to the hierarchical schedule. The all-reduce
is left as it is (NCCL's tuner picks Tree or Ring there, and Tree's depth grows with log2 of the nodes).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rapidllm.network.hierarchical import rank_coords, spanned_grid
from rapidllm.network.routing import Router
from rapidllm.network.topology import Topology

OPS = ("all_gather", "reduce_scatter")


def extra_steps(sizes: Sequence[int]) -> list[int]:
    """Steps per dimension (innermost first) a flat ring over a sizes[0] x sizes[1] x ... grid of ranks takes
    beyond the hierarchical schedule: (n_d - 1)(prod_{j>d} n_j - 1)."""
    return [(n - 1) * (math.prod(sizes[d + 1:]) - 1) for d, n in enumerate(sizes)]


def hop_latency(topo: Topology, router: Router, line: Sequence[int]) -> float:
    """Mean route latency of the ring over `line` (ranks in ring order, wrap-around included): what one
    step of a ring along that line costs the simulator on an idle network."""
    hops = [float(topo.latency[router.route(a, b)].sum()) for a, b in zip(line, [*line[1:], line[0]])]
    return sum(hops) / len(hops)


def ring_gap_latency(topo: Topology, router: Router, ranks: Sequence[int]) -> float:
    """Seconds of the ring steps NCCL's flat ring takes over `ranks` and the hierarchical schedule does not
    (module docstring); 0 for a group within one dimension, or not a full sub-grid of the dimensions it
    spans (the hierarchical schedule is then a flat ring itself)."""
    coords = rank_coords(topo, ranks)
    grid = spanned_grid(coords)
    if grid is None:
        return 0.0
    dims, sizes = grid
    total = 0.0
    for d, steps in zip(dims, extra_steps(sizes)):
        if steps:
            others = [e for e in dims if e != d]
            on_line = (coords[:, others] == coords[0, others]).all(axis=1)
            idx = np.flatnonzero(on_line)
            line = [int(ranks[i]) for i in idx[np.argsort(coords[idx, d], kind="stable")]]
            total += steps * hop_latency(topo, router, line)
    return total

"""Where routed tokens go: group-limited (node-limited) top-k routing and the destinations it implies.

DeepSeek-V2 (§2.1.2, device-limited routing) and DeepSeek-V3 (§2.1.2, node-limited routing) split the E
routed experts into G equal groups (config.json `n_group`), score each group, keep the best M
(`topk_group`) and take the token's top_k experts among those groups only. With one group per node (V3's
training layout: 256 experts, 8 groups, EP 64 over 8 nodes) a token then crosses the inter-node fabric
to at most M nodes. The auxiliary-loss-free balancing (V3 §2.1.2: a per-expert bias added to the scores
for selection only) changes which experts win, not how many tokens each receives on average, so the
operator model keeps its balanced-routing load and prices no extra work for it.

`eplb_rank_loads` places redundant expert replicas as DeepSeek's serving does (inference).
`expected_units` is the closed form the communication model uses (how many distinct nodes or ranks a
token is sent to, averaged over balanced routing); `route` is the routing rule itself, for checks.
"""
from __future__ import annotations

import heapq
from functools import lru_cache
from itertools import combinations
from math import comb

import numpy as np


@lru_cache(maxsize=256)
def expected_units(experts: int, top_k: int, units: int, groups: int = 1, group_limit: int = 0) -> float:
    """Expected number of the `units` equal blocks of E // units experts (nodes or ranks, expert i on
    unit i // (E // units)) a token's top_k experts fall in, under balanced group-limited routing.

    Balanced routing: the token's M = group_limit groups are a uniform M-subset of the G groups (group g
    holds experts [g·E/G, (g+1)·E/G)) and its top_k experts a uniform top_k-subset of the S = M·E/G
    experts in them. Unit n, holding s_n of those S, is missed with probability C(S - s_n, k) / C(S, k)
    (hypergeometric), so by linearity the expected count is the sum over units and over the C(G, M)
    equally likely group subsets of 1 - C(S - s_n, k)/C(S, k). Without a limit (M = G) this is
    units·(1 - C(E - E/units, k)/C(E, k)), the unrestricted count.
    """
    if experts % groups:
        raise ValueError(f"experts {experts} must be a multiple of groups {groups}")
    limit = group_limit or groups
    per_group, per_unit = experts // groups, experts // units
    # experts of group g on unit n: the overlap of [g·pg, (g+1)·pg) and [n·pu, (n+1)·pu)
    overlap = np.array([[max(0, min((g + 1) * per_group, (n + 1) * per_unit) - max(g * per_group, n * per_unit))
                         for n in range(units)] for g in range(groups)], dtype=np.int64)
    chosen_experts = limit * per_group
    total = comb(chosen_experts, top_k)
    hit = 0.0
    subsets = 0
    for chosen in combinations(range(groups), limit):
        on_unit = overlap[list(chosen)].sum(axis=0)
        hit += sum(1.0 - comb(chosen_experts - int(s), top_k) / total for s in on_unit)
        subsets += 1
    return hit / subsets


def route(scores: np.ndarray, top_k: int, groups: int = 1, group_limit: int = 0, group_top: int = 2
          ) -> np.ndarray:
    """Expert indices [tokens, top_k] chosen by group-limited top-k routing of `scores` [tokens, E].

    A group's score is the sum of its `group_top` best expert scores (DeepSeek-V3; V2 used the best
    one, group_top = 1); the `group_limit` best groups stay eligible and the token's top_k experts are
    the best eligible ones.
    """
    tokens, experts = scores.shape
    limit = group_limit or groups
    grouped = scores.reshape(tokens, groups, experts // groups)
    group_score = -np.sort(-grouped, axis=2)[:, :, :group_top].sum(axis=2)
    keep = np.argsort(-group_score, axis=1, kind="stable")[:, :limit]
    mask = np.zeros((tokens, groups), dtype=bool)
    np.put_along_axis(mask, keep, True, axis=1)
    eligible = np.where(np.repeat(mask, experts // groups, axis=1), scores, -np.inf)
    return np.argsort(-eligible, axis=1, kind="stable")[:, :top_k]


@lru_cache(maxsize=256)
def eplb_rank_loads(experts: int, redundant: int, ranks: int, hot_factor: float = 1.0) -> tuple[float, ...]:
    """Routed-token load of each of `ranks` EP ranks, in units of the mean expert load, when
    `experts` + `redundant` expert slots are placed as DeepSeek's expert-parallel load balancer (EPLB,
    github.com/deepseek-ai/EPLB; "DeepSeek-V3/R1 Inference System Overview", 2025) places them.

    Loads: one hot expert carries `hot_factor` x the mean, the others share the rest equally (the total,
    `experts` means, is what the tokens bring and is conserved). Replication: each redundant slot goes to
    the expert whose load per replica is highest, and its replicas split its tokens evenly. Placement:
    every rank holds (experts + redundant) / ranks slots; slots go, heaviest first, to the least-loaded
    rank with room (longest-processing-time packing). Without redundant slots and with balanced routing
    every rank carries experts / ranks means.
    """
    slots = experts + redundant
    if slots % ranks:
        raise ValueError(f"ranks {ranks} must divide experts + redundant = {slots}")
    hot = min(hot_factor, float(experts))
    load = np.full(experts, (experts - hot) / max(experts - 1, 1))
    load[0] = hot
    count = np.ones(experts, dtype=np.int64)
    for _ in range(redundant):
        count[int(np.argmax(load / count))] += 1
    weights = sorted(np.repeat(load / count, count).tolist(), reverse=True)
    per_rank = slots // ranks
    rank_load, room = [0.0] * ranks, [per_rank] * ranks
    heap = [(0.0, r) for r in range(ranks)]
    for w in weights:
        _, r = heapq.heappop(heap)
        rank_load[r] += w
        room[r] -= 1
        if room[r]:
            heapq.heappush(heap, (rank_load[r], r))
    return tuple(rank_load)

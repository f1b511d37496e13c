"""Fault-aware dimension-order routing.

A route from rank a to rank b corrects one dimension at a time, innermost first, with the dimension's own
rule (ring and torus: shorter direction, ties go +1; mesh: axis by axis; kingmesh: diagonal while several
axes differ; switch: up and down; fat tree: up, spine chosen by the destination's leaf port mod spines, down).
When a hop of that path is dead the dimension is re-routed by breadth-first search over surviving links of the same dimension,
then over any surviving link; BFS visits links in id order, so ties break deterministically. If the target
is unreachable a SpecError names the failed links that cut it off.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import numpy as np

from rapidllm.jit import njit
from rapidllm.network.topology import Topology, grid_shape
from rapidllm.spec.errors import SpecError

_MISSING = object()
MEMO_UNITS = 1 << 12           # results over at most this many transfers are remembered (`Router.remembered`)
MEMO_BUDGET = 1 << 18          # ... up to this many transfers in all per router, then the memo starts over


class Router:
    """Routes between ranks of one topology; results are cached per (src, dst), and small results that are
    functions of rank arrays (route tables, decompose's replica checks) per those arrays: a sweep routes
    the same groups for every byte size."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self.cache: dict[tuple[int, int], list[int]] = {}
        self._memo: dict[tuple, Any] = {}
        self._memo_units = 0
        self._interned: dict[tuple[str, bytes], int] = {}
        self._adj: list[list[int]] | None = None

    def remembered(self, key: tuple, units: int, compute: Callable[[], Any]) -> Any:
        """`compute()`, remembered under `key` when it covers at most MEMO_UNITS transfers. The key must
        hold everything the result depends on besides this router (the rank arrays as bytes); results are
        shared between callers and must not be written to."""
        if units > MEMO_UNITS:
            return compute()
        hit = self._memo.get(key, _MISSING)
        if hit is _MISSING:
            if self._memo_units + units > MEMO_BUDGET:
                self._memo.clear()
                self._memo_units = 0
            hit = self._memo[key] = compute()
            self._memo_units += units
        return hit

    def intern(self, values: np.ndarray) -> int:
        """A small number per distinct array content (link bandwidths and latencies in memo keys: a few
        per router, one per utilization)."""
        key = (values.dtype.str, values.tobytes())
        return self._interned.setdefault(key, len(self._interned))

    def adjacency(self) -> list[list[int]]:
        """Outgoing surviving links per node, in link-id order."""
        if self._adj is None:
            adj: list[list[int]] = [[] for _ in range(self.topo.n_nodes)]
            for i in np.flatnonzero(self.topo.alive):
                adj[int(self.topo.src[i])].append(int(i))
            self._adj = adj
        return self._adj

    def route(self, a: int, b: int) -> list[int]:
        """Link ids from rank a to rank b (empty when a == b); a switch node as either end: the one link
        between it and the rank (in-switch reductions)."""
        key = (a, b)
        if key not in self.cache and max(a, b) >= self.topo.n_ranks:
            self.cache[key] = self._switch_hop(a, b)
        if key not in self.cache:
            links: list[int] = []
            cur = a
            goal = self.topo.coords(b)
            for d, (ca, cb) in enumerate(zip(self.topo.coords(a), goal)):
                if ca == cb:            # dimensions before d are corrected: only d's coordinate changes
                    continue
                target = self.topo.with_coord(cur, d, cb)
                links += self._dim_route(cur, target, d)
                cur = target
            self.cache[key] = links
        return self.cache[key]

    def _switch_hop(self, a: int, b: int) -> list[int]:
        """The one link between a rank and its switch (transfers that end or start in a reducing switch)."""
        links = self._links([a, b])
        if links is None:
            raise SpecError(f"no surviving link from {self.topo.node_name(a)} to {self.topo.node_name(b)}")
        return links

    def _links(self, nodes: list[int]) -> list[int] | None:
        out = []
        for s, t in zip(nodes, nodes[1:]):
            i = self.topo.link_of.get((s, t))
            if i is None or not self.topo.alive[i]:
                return None
            out.append(i)
        return out

    def _dim_route(self, a: int, b: int, d: int) -> list[int]:
        for nodes in self._candidates(a, b, d):
            links = self._links(nodes)
            if links is not None:
                return links
        links = self._bfs(a, b, d)
        if links is None:
            links = self._bfs(a, b, None)
        if links is None:
            raise SpecError(self._cut_message(a, b))
        return links

    def _candidates(self, a: int, b: int, d: int) -> Iterable[list[int]]:
        """Dimension-order paths (as node lists), preferred first (built as they are asked for: the first
        is healthy unless a fault cuts it)."""
        t = self.topo
        dim = t.dims[d]
        n, ia, ib = dim.size, t.coords(a)[d], t.coords(b)[d]
        at = lambda k: t.with_coord(a, d, k)  # noqa: E731
        kind = dim.topology
        if kind == "ring":
            fwd = (ib - ia) % n
            step = 1 if fwd <= n - fwd else -1
            return [[at((ia + step * k) % n) for k in range(min(fwd, n - fwd) + 1)]]
        if kind == "fully_connected":
            return [[a, b]]
        if kind == "switch":
            return [[a, t.switch_node(d, "switch", 0, t.line_of(a, d)), b]]
        if kind == "fat_tree":
            ft = t.fat_tree[d]
            la, lb = ft["leaf_of"][a], ft["leaf_of"][b]
            if la == lb:
                return [[a, la, b]]
            sp = ft["spines"]
            # destination-mod-k (OpenSM's fat-tree routing): the destinations of one leaf go up through
            # distinct spines, so a shift permutation (pipeline sends, ring neighbours) is non-blocking
            first = ft["port_of"][b] % len(sp) if sp else 0
            return ([a, la, sp[(first + k) % len(sp)], lb, b] for k in range(len(sp)))
        shape = grid_shape(dim)
        cur = _unflat(ia, shape)
        goal = _unflat(ib, shape)
        nodes = [a]
        while cur != goal:
            if kind == "kingmesh":
                cur = [c + (g > c) - (g < c) for c, g in zip(cur, goal)]
            else:
                ax = next(i for i, (c, g) in enumerate(zip(cur, goal)) if c != g)
                step = 1 if goal[ax] > cur[ax] else -1
                if kind == "torus" and shape[ax] > 2:
                    fwd = (goal[ax] - cur[ax]) % shape[ax]
                    step = 1 if fwd <= shape[ax] - fwd else -1
                cur = list(cur)
                cur[ax] = (cur[ax] + step) % shape[ax]
            nodes.append(at(_flat(cur, shape)))
        return [nodes]

    def _bfs(self, a: int, b: int, d: int | None) -> list[int] | None:
        adj = self.adjacency()
        parent = {a: -1}
        q = deque([a])
        while q:
            u = q.popleft()
            if u == b:
                break
            for i in adj[u]:
                if d is not None and self.topo.dim[i] != d:
                    continue
                v = int(self.topo.dst[i])
                if v not in parent:
                    parent[v] = i
                    q.append(v)
        if b not in parent:
            return None
        links = []
        v = b
        while v != a:
            i = parent[v]
            links.append(i)
            v = int(self.topo.src[i])
        return links[::-1]

    def _cut_message(self, a: int, b: int) -> str:
        reach = {a}
        q = deque([a])
        adj = self.adjacency()
        while q:
            u = q.popleft()
            for i in adj[u]:
                v = int(self.topo.dst[i])
                if v not in reach:
                    reach.add(v)
                    q.append(v)
        dead = [i for i in np.flatnonzero(~self.topo.alive)
                if (int(self.topo.src[i]) in reach) != (int(self.topo.dst[i]) in reach)]
        names = "; ".join(self.topo.link_name(int(i)) for i in dead) or "none"
        return (f"network {self.topo.name!r}: no route from rank {a} to {self.topo.node_name(b)}; "
                f"failed links cut the group apart: {names}")


def _unflat(i: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for s in shape:
        out.append(i % s)
        i //= s
    return out


def _flat(c: list[int], shape: tuple[int, ...]) -> int:
    i, stride = 0, 1
    for ci, s in zip(c, shape):
        i += ci * stride
        stride *= s
    return i


@njit(cache=True)
def _dense_route_ids(src, dst, n):
    """Route id per transfer through a dense n*n table; ids follow ascending src * n + dst."""
    table = np.full(n * n, -1, np.int32)
    for i in range(len(src)):
        table[src[i] * n + dst[i]] = 0
    uniq = np.flatnonzero(table == 0)
    for r in range(len(uniq)):
        table[uniq[r]] = r
    route_of = np.empty(len(src), np.int32)
    for i in range(len(src)):
        route_of[i] = table[src[i] * n + dst[i]]
    return route_of, uniq.astype(np.int64)


def route_table(router: Router, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Map transfers to route ids: (route_of[T] int32, route_ptr[R+1] int64, route_links int32).

    Route ids number the distinct (src, dst) pairs in ascending src * n_nodes + dst order; each pair is
    routed once (Router caches too). Small tables are remembered by the router (`Router.remembered`) and
    shared between callers: the arrays returned must not be written to.
    """
    src, dst = np.asarray(src), np.asarray(dst)
    key = ("routes", src.astype(np.int64).tobytes(), dst.astype(np.int64).tobytes())
    return router.remembered(key, len(src), lambda: _route_table(router, src, dst))


def _route_table(router: Router, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`route_table` without the memo."""
    n = router.topo.n_nodes
    if n * n <= 1 << 24 and len(src) * 16 >= n * n:     # the table pays only for many transfers
        route_of, uniq = _dense_route_ids(np.asarray(src), np.asarray(dst), n)
    else:
        key = np.asarray(src).astype(np.int64) * n + np.asarray(dst)
        uniq, inv = np.unique(key, return_inverse=True)
        route_of = inv.astype(np.int32).ravel()
    known, route = router.cache, router.route
    routes = []
    for a, b in zip(*(x.tolist() for x in np.divmod(uniq, n))):     # cached routes without the call
        r = known.get((a, b))
        routes.append(route(a, b) if r is None else r)
    ptr = np.zeros(len(routes) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in routes])
    links = np.fromiter(chain.from_iterable(routes), dtype=np.int32, count=int(ptr[-1]))
    return route_of, ptr, links

"""Kahn order of a DAG in CSR form (dependency lists): the visiting order of every longest-path pass over a
pipeline graph (`graph.pipeline_dag`, `engine.replay`), which depends on the edges only, so graphs of one
shape share it."""
from __future__ import annotations

import numpy as np

from rapidllm.jit import njit


@njit(cache=True)
def kahn_order(dep_ptr: np.ndarray, dep_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Successor lists (CSR, in the order the dependency lists name them) and the Kahn order (first-in
    first-out from the sources in index order) of a DAG: what a longest-path pass visits, which depends
    on the edges only. The count is below the node count when there is a cycle.

    A dependency a node lists twice in a row (the pipeline builder names a channel's last node once per
    network dimension) is one successor entry: copies of a dependency always sit side by side in the
    successor list, where the order loses nothing without them (the node is queued at the same point) and
    `relax` finds its start already set by the first (copies elsewhere in a list are kept: same result)."""
    n = len(dep_ptr) - 1
    indeg = np.zeros(n, np.int64)
    succ_cnt = np.zeros(n + 1, np.int64)
    for i in range(n):
        for k in range(dep_ptr[i], dep_ptr[i + 1]):
            if k == dep_ptr[i] or dep_idx[k] != dep_idx[k - 1]:
                indeg[i] += 1
                succ_cnt[dep_idx[k] + 1] += 1
    succ_ptr = np.cumsum(succ_cnt)
    fill = succ_ptr[:-1].copy()
    succ = np.empty(succ_ptr[n], np.int64)
    for i in range(n):
        for k in range(dep_ptr[i], dep_ptr[i + 1]):
            if k == dep_ptr[i] or dep_idx[k] != dep_idx[k - 1]:
                d = dep_idx[k]
                succ[fill[d]] = i
                fill[d] += 1
    queue = np.empty(n, np.int64)
    head = tail = 0
    for i in range(n):
        if indeg[i] == 0:
            queue[tail] = i
            tail += 1
    while head < tail:
        i = queue[head]
        head += 1
        for k in range(succ_ptr[i], succ_ptr[i + 1]):
            j = succ[k]
            indeg[j] -= 1
            if indeg[j] == 0:
                queue[tail] = j
                tail += 1
    return succ_ptr, succ, queue, tail

"""The pipeline graph: stages x chunks x micro-batches under a schedule, as one DAG.

Homogeneity again: all data-parallel replicas and all ranks of a TP/CP group behave alike, so one node
per (stage, chunk, micro-batch, direction) stands for every rank of that stage; its duration is the
replayed layer templates of the chunk. Point-to-point sends between stages, the data-parallel gradient
buckets of the last micro-batch (overlapped with the rest of backward, Megatron's overlap_grad_reduce),
the optimizer step and the parameter all-gather of a sharded optimizer are nodes of their own.
Streams: one compute stream per stage; channels per (stage, network dimension[, direction]).
Sends are asynchronous (Megatron-Core's interleaved schedule with overlap_p2p_comm) or, with
`p2p_blocking`, a rendezvous that holds both the sender and the receiver (its batched send/recv);
`p2p_serial` adds DeepSpeed's order of the two transfers between a stage's actions (docs/deepspeed.md).
With moe_a2a_overlap, steady-state forward/backward pairs run merged (`merged_partners`) and each action
of a pair is shortened by the EP all-to-all time its partner's compute hides.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rapidllm.caches import current
from rapidllm.graph.kahn import kahn_order
from rapidllm.graph.schedules import (
    INTERLEAVED,
    ONE_STAGE,
    schedule_code,
    stage_actions,
    stage_actions_array,
)
from rapidllm.jit import njit

TASK, P2P, GRAD, OPT, PARAM = 0, 1, 2, 3, 4
KIND_NAMES = ("task", "p2p", "grad", "optimizer", "param_gather")


@dataclass
class PipelineInputs:
    schedule: str
    pp: int
    v: int
    m: int
    f_span: np.ndarray                 # [pp, v] seconds per forward of one chunk (one micro-batch)
    f_compute: np.ndarray              # [pp, v] pure compute part of it
    b_span: np.ndarray                 # [pp, v] backward (recompute included)
    b_compute: np.ndarray
    p2p_fwd: np.ndarray                # [pp] send from stage s to the next stage
    p2p_bwd: np.ndarray                # [pp] send from stage s to the previous stage
    buckets: int = 0                   # gradient buckets per chunk, reduced during the last micro-batch
    bucket_s: float | np.ndarray = 0.0  # seconds per bucket collective: one for every stage, or [pp]
    optimizer_s: np.ndarray = field(default_factory=lambda: np.zeros(1))   # [pp]
    param_gather_s: float | np.ndarray = 0.0   # all-gather of updated parameters (sharded optimizer), or [pp]
    pp_dims: tuple[int, ...] = ()
    dp_dims: tuple[int, ...] = ()
    # [pp, v] seconds of a forward / backward chunk that its EP all-to-alls add (moe_a2a_overlap): when the
    # action is merged with a neighbouring one of the other direction, up to the partner's compute of it hides
    f_hidden: np.ndarray | None = None
    b_hidden: np.ndarray | None = None
    # Megatron's overlap_grad_reduce: buckets launched during the last micro-batch's backward; False: all of
    # them after the stage's last action (Megatron-LM 2021-22's local DDP: allreduce_gradients() after
    # forward_backward_func returns)
    grad_overlap: bool = True
    # Blocking pipeline sends and receives (Megatron's batched send/recv without overlap_p2p_comm): the
    # sender's next action waits for its send; with one chunk per stage a transfer also starts only once
    # the receiver has posted its receive, i.e. finished the action before the one that consumes it (the
    # non-interleaved schedule batches that receive with the preceding action's send). The interleaved
    # schedule posts its receives ahead of time in its own batches: there only the sender is held.
    p2p_blocking: bool = False
    # DeepSpeed's PipelineEngine (one chunk, blocking): between two actions X and Y a stage sends X's output
    # and receives Y's input one after the other, each a blocking dist.send / dist.recv, in TrainSchedule's
    # order: the receive first when X is a backward and Y a forward, the send first otherwise. The later
    # transfer waits for the earlier one. Needs p2p_blocking and one chunk per stage (ignored otherwise).
    p2p_serial: bool = False


@dataclass
class PipelineGraph:
    dur: np.ndarray
    compute: np.ndarray                # pure compute seconds in a node (tasks, optimizer)
    kind: np.ndarray
    stage: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    # `kahn_order(dep_ptr, dep_idx)` when the builder has it already (shared by graphs of one shape)
    order: tuple[np.ndarray, np.ndarray, np.ndarray, int] | None = None

    def __len__(self) -> int:
        return len(self.dur)


@njit(cache=True)
def merged_partners(is_fwd: np.ndarray, chunk: np.ndarray, micro: np.ndarray) -> np.ndarray:
    """Per action of one stage, the index of the action it runs merged with under moe_a2a_overlap, or -1.

    Megatron-Core's EP overlap merges a forward with the next backward of another micro-batch in the steady
    1F1B phase (and, with one stage, each backward with the next forward): scanning the stage's program
    order, two neighbours of opposite direction that belong to different (chunk, micro-batch) units pair up,
    each action at most once. Warm-up forwards and cool-down backwards stay alone.
    """
    n = len(is_fwd)
    partner = np.full(n, -1, np.int64)
    k = 0
    while k + 1 < n:
        if is_fwd[k] != is_fwd[k + 1] and (chunk[k] != chunk[k + 1] or micro[k] != micro[k + 1]):
            partner[k] = k + 1
            partner[k + 1] = k
            k += 2
        else:
            k += 1
    return partner


def consumer_of(kind: str, s: int, c: int, i: int, pp: int, v: int) -> tuple[str, int, int, int] | None:
    """The (kind, stage, chunk, micro-batch) action that consumes this action's output, or None."""
    if kind == "F":
        if s + 1 < pp:
            return ("F", s + 1, c, i)
        return ("F", 0, c + 1, i) if c + 1 < v else None
    if s > 0:
        return ("B", s - 1, c, i)
    return ("B", pp - 1, c - 1, i) if c > 0 else None


def _partners(x: PipelineInputs, actions: list[tuple[str, int, int]]) -> np.ndarray:
    """merged_partners of a stage's actions when the inputs carry EP time to hide, else all -1."""
    if x.f_hidden is None or x.b_hidden is None:
        return np.full(len(actions), -1, np.int64)
    return merged_partners(np.array([a == "F" for a, _, _ in actions]), np.array([c for _, c, _ in actions]),
                           np.array([i for _, _, i in actions]))


def build_pipeline_reference(x: PipelineInputs) -> PipelineGraph:
    """Nodes in per-stage program order; cross-stage dependencies through the p2p nodes.

    The plain-Python builder (dicts and lists): the specification `build_pipeline` must match node for
    node and dependency for dependency (tests/test_engine_fast.py). Kept for those tests.
    """
    dur: list[float] = []
    comp: list[float] = []
    kind: list[int] = []
    stage: list[int] = []
    deps: list[list[int]] = []
    entry: dict[tuple[str, int, int, int], int] = {}
    incoming: dict[tuple[str, int, int, int], int] = {}
    posted: dict[tuple[str, int, int, int], int] = {}     # task after which the receive is posted
    before: dict[tuple[str, int, int, int], tuple[int, bool]] = {}   # the previous action's send, its direction

    def add(d: float, c: float, k: int, s: int, dp: list[int]) -> int:
        dur.append(d), comp.append(c), kind.append(k), stage.append(s), deps.append(dp)
        return len(dur) - 1

    grad_keys = [(d, "dp") for d in x.dp_dims]     # own queue: a small p2p send never waits behind a bucket
    bucket, gather = per_stage(x.bucket_s, x.pp), per_stage(x.param_gather_s, x.pp)
    bucketed, gathered = bool((bucket > 0).any()), bool((gather > 0).any())
    for s in range(x.pp):
        prev, chan = -1, {}

        def on_channels(node: int, keys: list) -> None:
            for key in keys:
                if key in chan:
                    deps[node].append(chan[key])
                chan[key] = node

        actions = list(stage_actions(x.schedule, x.pp, s, x.m, x.v))
        partner = _partners(x, actions)
        sent = -1                                   # a blocking send the next action waits for
        for k, (a, c, i) in enumerate(actions):
            fwd = a == "F"
            span = x.f_span[s, c] if fwd else x.b_span[s, c]
            cpu = x.f_compute[s, c] if fwd else x.b_compute[s, c]
            if partner[k] >= 0:
                pa, pc, _ = actions[partner[k]]
                hidden = (x.f_hidden if fwd else x.b_hidden)[s, c]
                span -= min(hidden, (x.f_compute if pa == "F" else x.b_compute)[s, pc])
            grads = x.grad_overlap and not fwd and i == x.m - 1 and x.buckets > 0 and bucketed
            pieces = x.buckets if grads else 1
            first = -1
            posted[(a, s, c, i)] = prev
            before[(a, s, c, i)] = (sent, k > 0 and actions[k - 1][0] == "B")
            for _ in range(pieces):
                prev = add(span / pieces, cpu / pieces, TASK, s, ([prev] if prev >= 0 else [])
                           + ([sent] if first < 0 and sent >= 0 else []))
                first = prev if first < 0 else first
                if grads:
                    on_channels(add(float(bucket[s]), 0.0, GRAD, s, [prev]), grad_keys)
            entry[(a, s, c, i)] = first
            nxt = consumer_of(a, s, c, i, x.pp, x.v)
            t = (x.p2p_fwd if fwd else x.p2p_bwd)[s]
            if nxt is not None:
                node = add(float(t), 0.0, P2P, s, [prev])
                on_channels(node, [(d, "f" if fwd else "b") for d in x.pp_dims])
                incoming[nxt] = node
            sent = node if x.p2p_blocking and nxt is not None else -1
        if not x.grad_overlap and x.buckets > 0 and bucketed:
            for _ in range(x.buckets * x.v):
                on_channels(add(float(bucket[s]), 0.0, GRAD, s, [prev]), grad_keys)
        opt_deps = [prev] + [chan[k] for k in grad_keys if k in chan] + ([sent] if sent >= 0 else [])
        opt = add(float(x.optimizer_s[s]), float(x.optimizer_s[s]), OPT, s, opt_deps)
        if gathered:
            on_channels(add(float(gather[s]), 0.0, PARAM, s, [opt]), grad_keys)
    for key, node in incoming.items():
        deps[entry[key]].append(node)
        if x.p2p_blocking and x.v == 1 and posted[key] >= 0:
            deps[node].append(posted[key])
    if x.p2p_serial and x.p2p_blocking and x.v == 1:
        for send_waits in (True, False):
            for key, node in incoming.items():
                out, after_b = before[key]
                if out >= 0 and send_waits == (after_b and key[0] == "F"):
                    (deps[out] if send_waits else deps[node]).append(node if send_waits else out)
    ptr = np.zeros(len(dur) + 1, np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    idx = np.fromiter((j for d in deps for j in d), np.int64, count=int(ptr[-1]))
    return PipelineGraph(np.asarray(dur, float), np.asarray(comp, float), np.asarray(kind, np.int8),
                         np.asarray(stage, np.int32), ptr, idx)


@njit(cache=True)
def _add_node(n, v, c, k, s, prev, channel_last, repeats, src, csrc, kind, stage, deps, ndep):
    """Write node n (duration from value slot v, compute from slot c, kind k, stage s) after `prev`, plus
    `repeats` dependencies on the last node of its channel (one per network dimension, as the dict-based
    builder lists them)."""
    src[n] = v
    csrc[n] = c
    kind[n] = k
    stage[n] = s
    deps[n, 0] = prev
    ndep[n] = 1
    if channel_last >= 0:
        for _d in range(repeats):
            deps[n, ndep[n]] = channel_last
            ndep[n] += 1


@njit(cache=True, work=lambda code, pp, v, m, *rest: 8 * pp * v * m)
def _build_structure(code, pp, v, m, buckets, has_buckets, n_pp_dims, n_dp_dims, merge, grad_overlap, blocking,
                     has_param, serial):
    """`build_pipeline_reference`'s nodes and dependencies, without their durations: same node numbering,
    same dependency lists and order. Each node names the slots of the flat value vector (`_values`)
    its duration and compute time come from, the pieces they are split into (gradient buckets) and, for a
    merged action (moe_a2a_overlap), the hidden EP time and the partner's compute it is shortened by.

    A stage's channels of one kind (forward sends, backward sends, gradient queue) are always claimed
    together for every network dimension, so one "last node" per kind stands for all of its keys; a node
    lists that predecessor once per dimension, exactly as the dict-based builder does.
    """
    pv = pp * v
    F_SPAN, F_COMP, B_SPAN, B_COMP = 0, pv, 2 * pv, 3 * pv
    P2P_F, P2P_B, OPT_S = 4 * pv, 4 * pv + pp, 4 * pv + 2 * pp
    BUCKET, PARAM_S, ZERO = 4 * pv + 3 * pp, 4 * pv + 4 * pp, 4 * pv + 5 * pp
    F_HID, B_HID = 4 * pv + 5 * pp + 1, 5 * pv + 5 * pp + 1
    split = buckets if (buckets and has_buckets) else 1
    cap = pp * (4 * v * m + 2 * v * split + 2)
    width = 4 + max(2, n_pp_dims, n_dp_dims)
    src = np.empty(cap, np.int64)
    csrc = np.empty(cap, np.int64)
    pieces_of = np.ones(cap, np.int64)
    hid = np.full(cap, -1, np.int64)
    oth = np.full(cap, -1, np.int64)
    kind = np.empty(cap, np.int8)
    stage = np.empty(cap, np.int32)
    deps = np.empty((cap, width), np.int64)
    ndep = np.zeros(cap, np.int64)
    entry = np.full((2, pp, v, m), -1, np.int64)
    incoming = np.full((2, pp, v, m), -1, np.int64)
    posted = np.full((2, pp, v, m), -1, np.int64)
    before = np.full((2, pp, v, m), -1, np.int64)      # p2p_serial: the previous action's send
    after_b = np.zeros((2, pp, v, m), np.bool_)        # ... and whether that action was a backward
    n = 0
    for s in range(pp):
        prev = -1
        last_f = -1
        last_b = -1
        last_dp = -1
        ad, ac, ai = stage_actions_array(code, pp, s, m, v)
        partner = merged_partners(ad == 0, ac, ai) if merge else np.full(len(ad), -1, np.int64)
        sent = -1
        for k in range(len(ad)):
            a, c, i = ad[k], ac[k], ai[k]
            fwd = a == 0
            q = partner[k]
            grads = grad_overlap and (not fwd) and i == m - 1 and buckets != 0 and has_buckets
            pieces = buckets if grads else 1
            first = -1
            posted[a, s, c, i] = prev
            before[a, s, c, i] = sent
            after_b[a, s, c, i] = k > 0 and ad[k - 1] == 1
            for _ in range(pieces):
                src[n] = (F_SPAN if fwd else B_SPAN) + s * v + c
                csrc[n] = (F_COMP if fwd else B_COMP) + s * v + c
                pieces_of[n] = pieces
                if q >= 0:
                    hid[n] = (F_HID if fwd else B_HID) + s * v + c
                    oth[n] = (F_COMP if ad[q] == 0 else B_COMP) + s * v + ac[q]
                kind[n] = TASK
                stage[n] = s
                if prev >= 0:
                    deps[n, 0] = prev
                    ndep[n] = 1
                if first < 0 and sent >= 0:
                    deps[n, ndep[n]] = sent
                    ndep[n] += 1
                prev = n
                n += 1
                if first < 0:
                    first = prev
                if grads:
                    _add_node(n, BUCKET + s, ZERO, GRAD, s, prev, last_dp, n_dp_dims, src, csrc, kind, stage, deps,
                              ndep)
                    if n_dp_dims > 0:
                        last_dp = n
                    n += 1
            entry[a, s, c, i] = first
            # the consumer of this action's output (see consumer_of)
            ns, nc = -1, -1
            if fwd:
                if s + 1 < pp:
                    ns, nc = s + 1, c
                elif c + 1 < v:
                    ns, nc = 0, c + 1
            else:
                if s > 0:
                    ns, nc = s - 1, c
                elif c > 0:
                    ns, nc = pp - 1, c - 1
            if ns >= 0:
                _add_node(n, (P2P_F if fwd else P2P_B) + s, ZERO, P2P, s, prev, last_f if fwd else last_b,
                          n_pp_dims, src, csrc, kind, stage, deps, ndep)
                if n_pp_dims > 0:
                    if fwd:
                        last_f = n
                    else:
                        last_b = n
                incoming[a, ns, nc, i] = n
                sent = n if blocking else -1
                n += 1
            else:
                sent = -1
        if (not grad_overlap) and buckets != 0 and has_buckets:
            for _ in range(buckets * v):
                _add_node(n, BUCKET + s, ZERO, GRAD, s, prev, last_dp, n_dp_dims, src, csrc, kind, stage, deps, ndep)
                if n_dp_dims > 0:
                    last_dp = n
                n += 1
        opt = n
        _add_node(n, OPT_S + s, OPT_S + s, OPT, s, prev, last_dp, n_dp_dims, src, csrc, kind, stage, deps, ndep)
        if sent >= 0:
            deps[n, ndep[n]] = sent
            ndep[n] += 1
        n += 1
        if has_param:
            _add_node(n, PARAM_S + s, ZERO, PARAM, s, opt, last_dp, n_dp_dims, src, csrc, kind, stage, deps, ndep)
            n += 1
    for a in range(2):
        for s in range(pp):
            for c in range(v):
                for i in range(m):
                    origin = incoming[a, s, c, i]
                    if origin >= 0:
                        e = entry[a, s, c, i]
                        deps[e, ndep[e]] = origin
                        ndep[e] += 1
                        if blocking and v == 1 and posted[a, s, c, i] >= 0:
                            deps[origin, ndep[origin]] = posted[a, s, c, i]
                            ndep[origin] += 1
    if serial and blocking and v == 1:      # build_pipeline_reference's two passes, the sends first
        for send_waits in (True, False):
            for a in range(2):
                for s in range(pp):
                    for c in range(v):
                        for i in range(m):
                            node, out = incoming[a, s, c, i], before[a, s, c, i]
                            if node >= 0 and out >= 0 and send_waits == (after_b[a, s, c, i] and a == 0):
                                if send_waits:
                                    deps[out, ndep[out]] = node
                                    ndep[out] += 1
                                else:
                                    deps[node, ndep[node]] = out
                                    ndep[node] += 1
    ptr = np.zeros(n + 1, np.int64)
    for j in range(n):
        ptr[j + 1] = ptr[j] + ndep[j]
    idx = np.empty(ptr[n], np.int64)
    for j in range(n):
        for q in range(ndep[j]):
            idx[ptr[j] + q] = deps[j, q]
    return src[:n], csrc[:n], pieces_of[:n], hid[:n], oth[:n], kind[:n], stage[:n], ptr, idx


@njit(cache=True, work=lambda values, src, *rest: len(src))
def _fill(values, src, csrc, pieces, hid, oth):
    """Durations and compute seconds of every node from the flat value vector, with the builder's own
    operations: a merged action's span less min(hidden EP time, partner's compute), then / pieces."""
    n = len(src)
    dur = np.empty(n)
    comp = np.empty(n)
    for j in range(n):
        span = values[src[j]]
        if hid[j] >= 0:
            span -= min(values[hid[j]], values[oth[j]])
        dur[j] = span / pieces[j]
        comp[j] = values[csrc[j]] / pieces[j]
    return dur, comp


@njit(cache=True, work=lambda order, count, succ_ptr, succ, *rest: len(order) + len(succ))
def _ranked(order, count, succ_ptr, succ, src, csrc, pieces, hid, oth, kind, stage):
    """The DAG renumbered by Kahn order (`kahn_order`'s queue, `count` long, all nodes): each node's
    successors by their position in the order, its value slots (`_build_structure`), kind and stage in
    that order, and per stage the positions of its tasks and optimizer step in node order (CSR). A
    longest-path pass over it reads every array front to back (`engine.replay.relax_split`) instead of
    hopping between stages as the order does."""
    n = count
    rank = np.empty(n, np.int64)
    for h in range(n):
        rank[order[h]] = h
    rptr = np.zeros(n + 1, np.int64)
    rsucc = np.empty(succ_ptr[n], np.int64)
    k = 0
    for h in range(n):
        i = order[h]
        for q in range(succ_ptr[i], succ_ptr[i + 1]):
            rsucc[k] = rank[succ[q]]
            k += 1
        rptr[h + 1] = k
    n_stages = 1
    for i in range(n):
        if stage[i] + 1 > n_stages:
            n_stages = stage[i] + 1
    mine_ptr = np.zeros(n_stages + 1, np.int64)
    for i in range(n):
        if kind[i] == TASK or kind[i] == OPT:
            mine_ptr[stage[i] + 1] += 1
    for s in range(n_stages):
        mine_ptr[s + 1] += mine_ptr[s]
    mine = np.empty(mine_ptr[n_stages], np.int64)
    fill = mine_ptr[:-1].copy()
    for i in range(n):
        if kind[i] == TASK or kind[i] == OPT:
            mine[fill[stage[i]]] = rank[i]
            fill[stage[i]] += 1
    perm = order[:n]
    return (rptr, rsucc, src[perm], csrc[perm], pieces[perm], hid[perm], oth[perm], kind[perm], stage[perm],
            mine_ptr, mine)


@njit(cache=True, work=lambda order, count, kind, dep_ptr, dep_idx: 2 * count)
def _bucket_links(order, count, kind, dep_ptr, dep_idx):
    """Per node in Kahn order: -2 for a task a gradient bucket follows, that task's position for the bucket
    (its first dependency, `_build_structure`), else -1; and the number of buckets."""
    rank = np.empty(count, np.int64)
    for h in range(count):
        rank[order[h]] = h
    link = np.full(count, -1, np.int64)
    blocks = 0
    for i in range(count):
        if kind[i] == GRAD:
            t = rank[dep_idx[dep_ptr[i]]]
            link[rank[i]] = t
            link[t] = -2
            blocks += 1
    return link, blocks


@dataclass(frozen=True)
class NodeRecipes:
    """Per node, in one order: where its duration comes from (`src`, `csrc`, `pieces`, `hid`, `oth`: the
    value slots `_fill` reads), its kind and its stage."""
    src: np.ndarray
    csrc: np.ndarray
    pieces: np.ndarray
    hid: np.ndarray
    oth: np.ndarray
    kind: np.ndarray
    stage: np.ndarray

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(vars(self).values())


@dataclass(frozen=True)
class RankedShape:
    """A `PipelineShape` in Kahn order (`_ranked`): node h is the h-th the order processes; `succ_ptr` /
    `succ` name its successors by position, `nodes` are their recipes, and `mine[mine_ptr[s]:mine_ptr[s +
    1]]` are the positions of stage s's tasks and optimizer step in node order (what the attribution walks
    on the critical stage)."""
    succ_ptr: np.ndarray
    succ: np.ndarray
    nodes: NodeRecipes
    mine_ptr: np.ndarray
    mine: np.ndarray
    # a shape built with one gradient bucket per chunk that stands for any count (`pipeline_shape`'s
    # share_buckets): `_bucket_links` of it (empty where nothing is bucketed), the bucket nodes' count, and
    # whether consecutive buckets queue behind each other (a data-parallel network dimension)
    link: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    blocks: int = 0
    chain: bool = False


@dataclass(frozen=True)
class PipelineShape:
    """What a pipeline DAG is without its durations: the node recipes of `_build_structure`, its edges and
    their Kahn order, and the same in Kahn order (`ranked`, for a replay that needs only the attribution;
    None for a cyclic graph, which the builder never makes). Cases that differ only in times (recompute,
    the model, collective sizes) share one (`Caches.pipeline_shapes`)."""
    nodes: NodeRecipes
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    order: tuple[np.ndarray, np.ndarray, np.ndarray, int]
    ranked: RankedShape | None


def _shape(key: tuple) -> PipelineShape:
    """The shape for `_build_structure`'s arguments `key`, built once per owner of the memo tables; its
    arrays are read-only, since every graph of the shape holds them."""
    table = current().pipeline_shapes
    hit = table.get(key)
    if hit is None:
        *recipe, ptr, idx = _build_structure(*key)
        nodes = NodeRecipes(*recipe)
        order = kahn_order(ptr, idx)
        succ_ptr, succ, queue, count = order
        ranked = None
        if count == len(nodes.kind):
            rptr, rsucc, *ranked_recipe, mine_ptr, mine = _ranked(queue, count, succ_ptr, succ, *recipe)
            link, blocks = np.empty(0, np.int64), 0
            if key[4] == 1 and key[5] and key[9]:      # one bucket per chunk, overlapped: any count's shape
                link, blocks = _bucket_links(queue, count, nodes.kind, ptr, idx)
            ranked = RankedShape(rptr, rsucc, NodeRecipes(*ranked_recipe), mine_ptr, mine, link, int(blocks),
                                 key[7] > 0)
        arrays = (*nodes.arrays(), ptr, idx, *order[:3])
        if ranked is not None:
            arrays += (ranked.succ_ptr, ranked.succ, *ranked.nodes.arrays(), ranked.mine_ptr, ranked.mine,
                       ranked.link)
        for a in arrays:
            a.flags.writeable = False           # shared by every graph of this shape
        hit = table.put(key, PipelineShape(nodes, ptr, idx, order, ranked), sum(a.nbytes for a in arrays))
    return hit


def per_stage(value: float | np.ndarray, pp: int) -> np.ndarray:
    """A stage's DP bucket or parameter-gather seconds as [pp] (one value stands for every stage alike)."""
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (pp,)).astype(np.float64)


def _values(x: PipelineInputs, merge: bool) -> np.ndarray:
    """Every duration a node can take, in the slots `_build_structure` names: f_span, f_compute, b_span,
    b_compute ([pp, v] each, row-major), p2p_fwd, p2p_bwd, optimizer_s, bucket_s, param_gather_s ([pp] each),
    0.0, then f_hidden and b_hidden ([pp, v]; zeros without merging)."""
    f = lambda a: np.asarray(a, dtype=np.float64).ravel()
    pp = x.pp
    hidden = (f(x.f_hidden), f(x.b_hidden)) if merge else (np.zeros(pp * x.v), np.zeros(pp * x.v))
    return np.concatenate([f(x.f_span), f(x.f_compute), f(x.b_span), f(x.b_compute), f(x.p2p_fwd)[:pp],
                           f(x.p2p_bwd)[:pp], f(x.optimizer_s)[:pp],
                           per_stage(x.bucket_s, pp), per_stage(x.param_gather_s, pp), np.zeros(1), *hidden])


def pipeline_shape(x: PipelineInputs, share_buckets: bool = False) -> tuple[PipelineShape, np.ndarray, int] | None:
    """The shape of the inputs' DAG (`_shape`), the value vector its nodes take their durations from
    (`_values`) and the bucket count the shape's bucketed actions stand for (1: the shape is the DAG
    itself); None for inputs outside the schedules' contract (interleaving with m not divisible by pp),
    where micro-batch indices would leave the arrays: `build_pipeline_reference` builds those.

    share_buckets: gradient buckets launched during the last micro-batch's backward (overlap_grad_reduce)
    are a replay parameter, not structure: the shape is built with one bucket per chunk, and
    `engine.replay.relax_split` replays each such action and its bucket node as the given count of pieces
    and buckets. The models of a sweep differ in bucket count, so their cases share shapes."""
    code = schedule_code(x.schedule, x.pp, x.v)
    f = lambda a: np.asarray(a, dtype=np.float64)
    shapes_ok = all(f(a).shape == (x.pp, x.v) for a in (x.f_span, x.f_compute, x.b_span, x.b_compute)) and \
        all(f(a).ndim == 1 and len(a) >= x.pp for a in (x.p2p_fwd, x.p2p_bwd, x.optimizer_s))
    if not shapes_ok or x.pp < 1 or x.v < 1 or x.m < 1 or (code == INTERLEAVED and x.m % x.pp) or \
            (code == ONE_STAGE and x.v != 1):
        return None
    merge = x.f_hidden is not None and x.b_hidden is not None
    buckets, bucketed = int(x.buckets), bool((per_stage(x.bucket_s, x.pp) > 0).any())
    reps = buckets if share_buckets and buckets > 1 and bucketed and x.grad_overlap else 1
    shape = _shape((code, int(x.pp), int(x.v), int(x.m), buckets if reps == 1 else 1, bucketed,
                    len(x.pp_dims), len(x.dp_dims), merge, bool(x.grad_overlap), bool(x.p2p_blocking),
                    bool((per_stage(x.param_gather_s, x.pp) > 0).any()), bool(x.p2p_serial)))
    return shape, _values(x, merge), reps


def build_pipeline(x: PipelineInputs) -> PipelineGraph:
    """The pipeline DAG, built in numba (node for node what `build_pipeline_reference` builds): its shape
    once per distinct structure (`pipeline_shape`), its durations per case (`_fill`). Falls back to the
    reference builder for inputs outside the schedules' contract."""
    found = pipeline_shape(x)
    if found is None:
        return build_pipeline_reference(x)
    shape, values, _ = found
    n = shape.nodes
    dur, comp = _fill(values, n.src, n.csrc, n.pieces, n.hid, n.oth)
    return PipelineGraph(dur, comp, n.kind, n.stage, shape.dep_ptr, shape.dep_idx, shape.order)

"""Collective times for the engine from the link-queue network simulator, simulated once per shape.

A collective of a parallel axis runs on every group of that axis at once (all TP groups reduce together),
so the simulator is given every group that can share a link with the first one, concurrently, and the
slowest completion is the collective's time: contention between equivalent groups is in the number.
Groups in different lines of the dimensions they span use disjoint links (switch, ring, mesh, torus and
rail-optimized fat-tree lines), so only one line-set is simulated. Without faults every pipeline stage is
equivalent and one simulation serves all, except PP sends: each boundary is priced on its own routes, alike
ones sharing a simulation (`_boundary`); with faults each stage (each stage boundary for PP) gets its own.
Results are memoized per (network, utilization, framework, op, bytes, groups) in the caller's `Caches`
(rapidllm/caches.py), so identical collectives of a sweep simulate once.

Algorithms are NCCL's (network.api.choose_algorithm: ring, hierarchical across dimensions, NVLS in a switch
that reduces in the network, network/in_switch.py) except for
`framework: tensorrt-llm`, whose all-reduces inside one NVLink switch use TensorRT-LLM's custom all-reduce
kernels (cpp/tensorrt_llm/kernels/customAllReduceKernels.cu: every rank reads and writes its peers'
buffers over NVLink directly) instead of NCCL rings: the `direct` schedule (reduce-scatter and all-gather
straight to every peer), two latency steps instead of 2(n-1), the same bytes per link, and no NCCL per-call
base latency (`collective_latency`: it is NCCL's).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rapidllm.caches import current
from rapidllm.network.api import (build_schedule, check_work, default_chunks, link_bandwidths, resolve_algorithm,
                                  run_schedule, setup_latency, step_limits)
from rapidllm.network.collectives import concat
from rapidllm.network.decompose import units
from rapidllm.network.mapping import RankMapping, dims_spanned
from rapidllm.network.plan import Plan, Traced
from rapidllm.network.relocate import Origin, footprint, moved
from rapidllm.network.routing import Router
from rapidllm.network.topology import Topology, build_topology
from rapidllm.spec.case import Case
from rapidllm.spec.network import NetworkSpec


def topology_of(network: NetworkSpec) -> tuple[Topology, Router]:
    """The fabric and its router, built once per network spec (`Caches.topologies`)."""
    table = current().topologies
    hit = table.get(network)
    if hit is None:
        topo = build_topology(network)
        hit = table.put(network, (topo, Router(topo)))
    return hit


def _in_chunks(plan: Plan, op: str, algorithm: str, n: int, chunks: int) -> Plan | None:
    """`plan` carried to `chunks` chunks (`Plan.for_chunks`), or None; a schedule of `n` ranks too large for
    the simulator is refused as build_schedule would refuse it (hierarchical ones are checked per stage)."""
    if algorithm != "hierarchical":
        check_work(op, n, chunks)
    return plan.for_chunks(chunks)


@dataclass
class CommCost:
    """Seconds per collective of a case, keyed by (axis, op, bytes, stage); stage -1 = every stage alike."""
    case: Case
    simulated_events: int = 0                   # link events this case actually simulated (cache misses)
    events: dict[tuple, tuple[int, int]] = field(default_factory=dict)   # key -> (events, groups simulated)
    uses: dict[tuple, float] = field(default_factory=dict)   # (axis, op, bytes) -> instances per group per step
    _times: dict[tuple, float] = field(default_factory=dict)
    # this case's lookups into Caches.groups by (kind, axis, stage): a Caches key holds the NetworkSpec,
    # whose hash walks the whole spec, so each is looked up there once per case
    _local: dict[tuple, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        p = self.case.parallelism
        key = ("mapping", self.case.network, p.tp, p.cp, p.dp, p.pp)     # shared by a layout's cases
        table = current().groups
        self.mapping = table.get(key) or table.put(
            key, RankMapping(self.case.network, {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp}))
        self.symmetric = not self.case.network.faults
        self.util = self.case.hardware.utilization.network

    def group_size(self, axis: str) -> int:
        """Ranks in a group of `axis`: dp x cp for "dp" (`Parallelism.dp_cp`), else the axis's size."""
        p = self.case.parallelism
        return p.dp_cp if axis == "dp" else p.size(axis)

    def groups(self, axis: str, stage: int = -1) -> list[tuple[int, ...]]:
        """Every group of `axis` (within pipeline stage `stage` if >= 0); pp: (src, dst) stage pairs; dp: the
        ranks that reduce gradients, dp x cp of them (Megatron-Core's data-parallel group with context
        parallelism), ascending.

        Pure function of (network, layout, axis, stage), memoized in `Caches.groups`: sweeps revisit one
        layout for many models and settings. `groups_reference` is the rank-by-rank definition.
        """
        key = (self._layout_key(), axis, stage)
        table = current().groups
        hit = table.get(key)
        if hit is None:
            hit = table.put(key, tuple(self._groups_vectorized(axis, stage)))
        return list(hit)

    def _layout_key(self) -> tuple:
        p = self.case.parallelism
        return (self.case.network, p.tp, p.cp, p.dp, p.pp, p.ep, p.expert_tp)     # etp places the EP groups

    def _groups_vectorized(self, axis: str, stage: int) -> list[tuple[int, ...]]:
        m, p = self.mapping, self.case.parallelism
        stages = range(p.pp) if stage < 0 else [stage]
        stride = m.stride("pp")
        out: list[tuple[int, ...]] = []
        for s in stages:
            if axis == "ep":
                out += m.expert_groups(s, p.ep, p.expert_tp)
                continue
            ranks = m.stage_ranks(s)
            if axis == "pp":
                if s + 1 < p.pp:
                    out += [(r, r + stride) for r in ranks.tolist()]
            else:
                offsets = np.zeros(1, dtype=np.int64)
                bases = ranks
                for a in sorted(("dp", "cp") if axis == "dp" else (axis,), key=m.stride):
                    a_stride, a_size = m.stride(a), m.size(a)
                    bases = bases - ((bases // a_stride) % a_size) * a_stride
                    offsets = (offsets[None, :] + a_stride * np.arange(a_size, dtype=np.int64)[:, None]).ravel()
                members = np.unique(bases)[:, None] + offsets[None, :]
                out.extend(map(tuple, members.tolist()))
        return out

    def _contending(self, groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The groups that can share links with the first one (all of them when faults break symmetry)."""
        if not self.symmetric or len(groups) < 2:
            return groups
        net = self.case.network
        spanned = set(dims_spanned(net, list(groups[0])))
        if any(net.dimensions[d].topology == "fat_tree" and not net.dimensions[d].rail_optimized
               for d in spanned):
            return groups
        # the groups whose first rank has the first group's coordinate in every dimension it does not span
        # (`RankMapping.dim_coords` of all first ranks at once)
        rest = np.array([g[0] for g in groups], dtype=np.int64)
        keep = np.ones(len(groups), dtype=bool)
        for d, dim in enumerate(net.dimensions):
            coord, rest = rest % dim.size, rest // dim.size
            if d not in spanned:
                keep &= coord == coord[0]
        return [g for g, k in zip(groups, keep.tolist()) if k]

    def time(self, axis: str, op: str, nbytes: float, stage: int = -1) -> float:
        """Completion time of `op` over every (contending) group of `axis`, on an otherwise idle network,
        plus one kernel launch: a collective (NCCL or TensorRT-LLM's all-reduce) is a kernel like any other,
        and every compute kernel already pays `kernel_launch_overhead`."""
        if axis == "pp":                    # each boundary as the fabric sees it (`_boundary`)
            stage = self._boundary(max(stage, 0)) if self.symmetric else stage
        key = (axis, op, nbytes, -1 if self.symmetric and axis != "pp" else stage)     # 2 and 2.0: one key
        hit = self._times.get(key)          # most calls: a replayed template asks again (one lookup)
        if hit is not None:
            return hit
        if self.group_size(axis) <= 1 or nbytes <= 0:
            return self._times.setdefault(key, 0.0)
        key = (axis, op, float(nbytes), key[3])
        groups = list(self._shared(("contending", axis, key[3]), self._contending_groups))
        t, ev = self._simulate(op if axis != "pp" else "send_recv", float(nbytes), groups)
        self._times[key] = t + self.case.hardware.launch_overhead_s
        self.events[key] = (ev, len(groups))
        return self._times[key]

    def _shared(self, key: tuple, compute: Callable[..., object]) -> object:
        """`compute(*key[1:])` from this case's lookups, else from `Caches.groups` under the layout's key."""
        if key not in self._local:
            ckey = (key[0], self._layout_key(), self.symmetric, *key[1:])
            table = current().groups
            hit = table.get(ckey)
            self._local[key] = hit if hit is not None else table.put(ckey, compute(*key[1:]))
        return self._local[key]

    def _contending_groups(self, axis: str, stage: int) -> tuple[tuple[int, ...], ...]:
        """The contending groups of `axis` in `stage`, stage 0 standing for every stage alike (-1); pp: the
        sends of boundary `stage` -> `stage` + 1, the last stage's to stage 0 (the interleaved schedule's
        wrap-around: its next model chunk lives on the first stage)."""
        s, pp = max(stage, 0), self.case.parallelism.pp
        if axis == "pp" and s == pp - 1:
            back = s * self.mapping.stride("pp")
            return tuple(self._contending([(r, r - back) for r in self.mapping.stage_ranks(s).tolist()]))
        return tuple(self._contending(self.groups(axis, s)))

    def send_dims(self, stage: int) -> tuple[int, ...]:
        """Network dimensions the sends of boundary `stage` -> `stage` + 1 (the last: -> 0) cross."""
        if self.case.parallelism.pp <= 1:
            return ()
        pairs = self._shared(("contending", "pp", stage), self._contending_groups)
        return dims_spanned(self.case.network, list(pairs[0])) if pairs else ()

    def _boundary(self, stage: int) -> int:
        """The first pipeline boundary whose sends meet the fabric as those of `stage` do: equal routes (links
        numbered by first use, relocate.footprint), bandwidths, latencies and dimensions crossed, so an equal
        simulation. Stages of a fault-free fabric are alike, but their boundaries need not be: with tp 4 on
        8-GPU nodes every other send crosses InfiniBand, and a boundary between leaves climbs to a spine."""
        return self._shared(("boundaries",), self._boundaries)[stage]

    def _boundaries(self) -> tuple[int, ...]:
        topo, router = topology_of(self.case.network)
        bw = router.remembered(("link_bw", self.util), 0, lambda: link_bandwidths(topo, self.util))
        first: dict[tuple, int] = {}
        out = []
        for s in range(self.case.parallelism.pp):
            pairs = self._contending_groups("pp", s)
            src, dst = (np.array([g[k] for g in pairs], dtype=np.int64) for k in (0, 1))
            fp = footprint(Origin(topo, router, src[:0], src, dst), bw, topo.latency)
            sig = (dims_spanned(self.case.network, list(pairs[0])),
                   *(a.tobytes() for a in (fp.route_of, fp.route_ptr, fp.canon, fp.bw, fp.lat)))
            out.append(first.setdefault(sig, s))
        return tuple(out)

    def _simulate(self, op: str, nbytes: float, groups: list[tuple[int, ...]]) -> tuple[float, int]:
        net = self.case.network
        rkey = (net, self.util, self.case.framework, op, nbytes, tuple(groups))
        results = current().collectives
        if rkey in results:
            t, ev, _ = results[rkey]
            return t, ev
        if groups:
            t, ev = self._simulate_planned(op, nbytes, groups)
        else:
            t, ev = 0.0, 0
        results.put(rkey, (t, ev, len(groups)))
        self.simulated_events += ev
        return t, ev

    def _simulate_planned(self, op: str, nbytes: float, groups: list[tuple[int, ...]]) -> tuple[float, int]:
        """Simulate `op` over the groups at once, replaying the plan (network/plan.py) recorded for this
        network, algorithm, chunk count and groups when there is one, else building the schedule and
        recording one: the same time and events either way, bit for bit."""
        net = self.case.network
        topo, router = topology_of(net)
        algorithm = self._algorithm(topo, op, groups[0])
        nccl = algorithm == "auto"          # TensorRT-LLM's own all-reduce kernel pays no NCCL per-call base
        algorithm = resolve_algorithm(topo, op, nbytes, list(groups[0]), algorithm, None, self.util, router)
        # equivalent groups span the same dimensions, so the first one's set-up is everyone's (with the ring
        # steps NCCL takes beyond a hierarchical all-gather / reduce-scatter: network/ring_steps.py)
        setup = router.remembered(("setup", op, algorithm, groups[0]), len(groups[0]),
                                  lambda: setup_latency(topo, algorithm, list(groups[0]), op, router)) if nccl else 0.0
        firsts: dict[int, tuple[int, ...]] = {}          # the first group of each size
        for g in groups:
            firsts.setdefault(len(g), g)
        chunks = tuple(default_chunks(topo, op, nbytes, firsts[n], algorithm,
                                      router.remembered(("step_limits", op, algorithm, firsts[n]), n,
                                                        lambda g=firsts[n]: step_limits(topo, op, g, algorithm)))
                       for n in sorted(firsts))
        pkey = (net, self.util, op, algorithm, chunks, tuple(groups))
        plans = current().collective_plans
        plan = plans.get(pkey)
        if plan is None and len(chunks) == 1:
            plan = self._other_chunks(plans, pkey, topo, op, algorithm, len(groups[0]))
        bw = router.remembered(("link_bw", self.util), 0, lambda: link_bandwidths(topo, self.util))
        xkey = ("fabric", net.name, self.util, op, algorithm, tuple(groups))     # any size of this design
        if plan is None:
            plan = self._other_fabric(plans, pkey, xkey, topo, router, bw, algorithm)
        replayed = plan.time(nbytes, setup) if plan is not None else None
        if replayed is not None:
            return replayed
        rec = [] if plan is None else None
        size = Traced(nbytes) if plan is None else nbytes     # traced: rings remember their byte divisions
        sched = concat([build_schedule(topo, op, size, list(g), algorithm, None)[0] for g in groups])
        # every transfer released at the set-up, and only the latest finish asked for: no per-transfer
        # release or finish array of the whole collective (tens of millions of transfers at 16,384 ranks)
        latest, _, events = run_schedule(topo, sched, setup, self.util, router, rec, whole=False)
        t = latest if latest != -np.inf else 0.0
        if rec is not None:
            made = Plan.of(rec, len(sched), bw, topo.latency)             # one bandwidth array per router
            made.remember(nbytes, setup, (t, int(events)))
            plans.put(pkey, made, made.nbytes)
            if made.root is not None:
                if len(chunks) == 1:
                    plans.put(pkey[:4] + (None,) + pkey[5:], made)       # for other chunk counts
                ranks = np.array([r for g in groups for r in g], dtype=np.int64)
                plans.put(xkey, [chunks, made, Origin(topo, router, ranks, *units(sched)), None])
        return t, int(events)

    def _other_fabric(self, plans: dict, pkey: tuple, xkey: tuple, topo: Topology, router: Router,
                      bw: np.ndarray, algorithm: str) -> Plan | None:
        """The plan of `pkey` moved from a fabric of another size on which the same groups ran the same
        collective (network/relocate.py: only when the collective's footprints are equal), in this chunk
        count, kept under `pkey`; None when there is none."""
        entry = plans.get(xkey)
        if entry is None or entry[2].topo is topo:
            return None
        chunks, plan, origin, mine = entry
        if chunks != pkey[4] and (len(chunks) != 1 or len(pkey[4]) != 1):
            return None
        if mine is None:
            mine = entry[3] = footprint(origin, plan.link_bw, plan.link_lat)
        plan = moved(plan, mine, Origin(topo, router, origin.ranks, origin.src, origin.dst), bw, topo.latency)
        if plan is not None and chunks != pkey[4]:
            plan = _in_chunks(plan, pkey[2], algorithm, len(pkey[5][0]), pkey[4][0])
        if plan is not None:
            plans.put(pkey, plan, plan.nbytes)
            if len(pkey[4]) == 1:
                plans.put(pkey[:4] + (None,) + pkey[5:], plan)
        return plan

    @staticmethod
    def _other_chunks(plans: dict, pkey: tuple, topo: Topology, op: str, algorithm: str, n: int) -> Plan | None:
        """The plan of `pkey` (one group size, so one chunk count) derived from the same collective's plan in
        another chunk count (network/plan.py, `Plan.for_chunks`), kept under `pkey`; None when there is
        none. A schedule too large for the simulator is refused as build_schedule would refuse it."""
        other = plans.get(pkey[:4] + (None,) + pkey[5:])
        if other is None:
            return None
        plan = _in_chunks(other, op, algorithm, n, pkey[4][0])
        if plan is not None:
            plans.put(pkey, plan, plan.nbytes)
        return plan

    def _algorithm(self, topo: Topology, op: str, group: tuple[int, ...]) -> str:
        """'direct' for TensorRT-LLM all-reduces within one switch dimension, else NCCL's choice ('auto')."""
        if self.case.framework != "tensorrt-llm" or op != "all_reduce":
            return "auto"
        dims = dims_spanned(self.case.network, list(group))
        return "direct" if len(dims) == 1 and topo.dims[dims[0]].topology == "switch" else "auto"

    def count(self, axis: str, op: str, nbytes: float, per_group: float) -> None:
        """Record how often a collective runs per group per step (for the flattened-trace comparison)."""
        if self.group_size(axis) > 1 and nbytes > 0:
            key = (axis, op, float(nbytes))
            self.uses[key] = self.uses.get(key, 0.0) + per_group

    def flattened_events(self) -> float:
        """Link events a flattened per-rank trace would simulate: every instance on every group, one by one."""
        p = self.case.parallelism
        total = 0.0
        for (axis, op, nb), n in self.uses.items():
            hits = [ev / max(g, 1) for (a, o, b, _), (ev, g) in self.events.items() if (a, o, b) == (axis, op, nb)]
            groups = (p.pp - 1) * p.world / p.pp if axis == "pp" else p.world / self.group_size(axis)
            total += n * groups * (sum(hits) / len(hits) if hits else 0.0)
        return total

    @property
    def simulated(self) -> int:
        """Link events the homogeneous method simulates for this case (one run per distinct collective)."""
        return sum(ev for ev, _ in self.events.values())

    def dims(self, axis: str) -> tuple[int, ...]:
        """Network dimensions the first group of `axis` spans: the channels its collectives occupy."""
        if self.group_size(axis) <= 1:
            return ()
        return self._shared(("dims", axis), self._dims_of)

    def _dims_of(self, axis: str) -> tuple[int, ...]:
        g = self.groups(axis, 0)
        return dims_spanned(self.case.network, list(g[0])) if g else ()

"""Branch and bound over a search's layouts: the best `top` feasible layouts of every (candidate, GPU count)
group, exactly those an exhaustive search finds, with far fewer full simulations.

1. Enumerate the layouts (search/space.py); invalid ones and those outside the user's axis filters are
   counted and dropped.
2. Bound each layout's objective from its priced operators (search/bounds.py; one pricing per distinct
   layer shard, shared by every dp / pp / ZeRO / schedule variant). A layout whose bound already breaks a
   latency limit is dropped.
3. Visit each (candidate, GPU count) group's layouts best bound first (a heap per group: a group's k-th best
   depends on its own layouts only). A layout whose bound is worse than its group's current k-th best
   objective cannot enter the group's top k (a bound is never better than the true value): it is counted
   as dominated and skipped, and so is every layout of the group still in the heap. Otherwise, unless its first or last stage alone already exceeds the
   HBM, its bound is refined with the data-parallel tail and the ZeRO-3 layer floor (search/tails.py: the
   engine's own collective times, memoized for the simulation) and it goes back into the heap; popped again
   and still not dominated, it goes through `rapidllm.prediction.predict` (the liveness memory model first:
   out of memory ends it there, then the congestion-aware simulation).
Exact ties rank by lower peak memory, then by enumeration order, so pruned and exhaustive searches return the
same rows in the same order (a layout whose bound equals the k-th best is simulated, never pruned).
"""
from __future__ import annotations

import bisect
import heapq
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.metrics import model_flops_per_step
from rapidllm.graph.schedules import interleaving
from rapidllm.memory.model import memory_for_case, training_liveness
from rapidllm.memory.state import FRAMEWORKS, StateBytes, conventions, state_bytes
from rapidllm.prediction import predict
from rapidllm.search.bounds import (
    Profile,
    ShardWork,
    optimistic_record,
    shard_work,
    stage_profile,
    step_bound,
    training_record,
)
from rapidllm.search.counts import OVERLAP_AT, PROJECT, REASONS, Counts
from rapidllm.search.space import LAYOUT_COLUMNS, OVERLAP_SWITCHES, PAR_FIELDS, Layout, layouts, rebuild
from rapidllm.search.tails import (
    layer_floor,
    optimizer_seconds,
    param_gather,
    refinable,
    step_tail,
    template_spans,
)
from rapidllm.search.spec import SearchSpec, load_search
from rapidllm.spec.case import Case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.layout import TrainingWorkload
from rapidllm.spec.schema import validate

class _Top:
    """The best `k` rows of one group, kept sorted by (objective key, peak memory, enumeration order): of two
    layouts equally good by the objective (ZeRO-1 and ZeRO-2 often step equally fast), the one that needs
    less memory ranks first."""

    def __init__(self, k: int) -> None:
        self.k, self.keys, self.rows = k, [], []

    def kth(self) -> float:
        return self.keys[-1][0] if len(self.keys) == self.k else math.inf

    def add(self, key: tuple[float, float, int], row: dict) -> None:
        i = bisect.bisect(self.keys, key)
        if i < self.k:
            self.keys.insert(i, key)
            self.rows.insert(i, row)
            del self.keys[self.k:], self.rows[self.k:]


# positions in a `Layout.key` (search/space.py: the PAR_FIELDS values, then micro-batch or batch, then kernel)
DP, TP, PP, CP = (PAR_FIELDS.index(f) for f in ("dp", "tp", "pp", "cp"))
SCHEDULE, VIRTUAL, SIZE = PAR_FIELDS.index("schedule"), PAR_FIELDS.index("virtual_stages"), len(PAR_FIELDS)
MISSING = object()             # a memo's miss where None is a value


class _Shared:
    """Work shared between layouts: per layer shard its priced compute; per (shard, pp, chunks used, layer
    floor, groups) a stage profile; the compute bound per (shard, dp, pp, schedule, virtual stages); template
    spans per (shard, dp, pp); the step's tail, the layer floor, the optimizer's time and the persistent-state
    verdict per parameter placement; the activation liveness per shard and the memory verdict per layout,
    both less the attention kernel (the memory model reads it only as naive or not); a case per (candidate,
    GPU count). A layout's own case is built only where a shared result is missing. Collective times are
    shared through the active `Caches`."""

    def __init__(self) -> None:
        self.works: dict[tuple, ShardWork] = {}
        self.profiles: dict[tuple, Profile] = {}
        self.livenesses: dict[tuple, Any] = {}
        self.fits: dict[tuple, bool] = {}
        self.bounds: dict[tuple, dict[str, Any] | None] = {}
        self.floors: dict[tuple, tuple[float, float]] = {}
        self.optimizers: dict[tuple, float] = {}
        self.tails: dict[tuple, Any] = {}
        self.spans: dict[tuple, ShardWork | None] = {}
        self.states: dict[tuple, tuple[bool, dict[int, StateBytes]]] = {}
        self.groups: dict[tuple, Case] = {}
        self.flops: dict[str, float] = {}

    @staticmethod
    def _chunks(lay: Layout) -> tuple[int, int]:
        """(micro-batches per step, model chunks per stage the engine runs): `chunks_used` from the key."""
        k, w = lay.key, lay.base.workload
        if not isinstance(w, TrainingWorkload):
            return 1, interleaving(k[SCHEDULE], k[PP], k[VIRTUAL], 1)
        m = max(w.global_batch // (k[DP] * k[SIZE]), 1)
        return m, interleaving(k[SCHEDULE], k[PP], k[VIRTUAL], m)

    def _work(self, lay: Layout) -> ShardWork:
        if lay.shard_key not in self.works:
            self.works[lay.shard_key] = shard_work(lay.case)
        return self.works[lay.shard_key]

    def _profile(self, lay: Layout, work: ShardWork, floor: tuple[float, float] = (0.0, 0.0),
                 tag: tuple = ()) -> Profile:
        """The stage profile of `work` (the shard's compute, or its spans under the groups `tag` names)."""
        key = (lay.shard_key, lay.key[PP], self._chunks(lay)[1], floor, tag)
        profile = self.profiles.get(key)
        if profile is None:
            profile = self.profiles[key] = stage_profile(lay.case, work, floor)
        return profile

    def group_case(self, lay: Layout) -> Case:
        """A case of the layout's (candidate, GPU count) group: what the rates of a training bound and a
        group-level objective read (world, model, hardware, global batch) is the same in all of them."""
        k = lay.key
        group = (lay.shard_key[0], k[DP] * k[TP] * k[PP] * k[CP])
        case = self.groups.get(group)
        if case is None:
            case = lay.case
            assert case is not None
            self.groups[group] = case
        return case

    def _record(self, lay: Layout, step: float) -> dict[str, Any] | None:
        """The training record at a step time bound, with the model FLOPs shared by the candidate's layouts
        and the rates computed on the group's case."""
        label = lay.shard_key[0]
        case = self.group_case(lay)
        if label not in self.flops:
            self.flops[label] = model_flops_per_step(case)
        return training_record(case, step, self.flops[label])

    def optimistic(self, lay: Layout) -> dict[str, Any] | None:
        """The layout's record at its compute-only bound, shared by the layouts that differ only in what it
        does not depend on (ZeRO / FSDP: the optimizer is not in it)."""
        k = lay.key
        key = (lay.shard_key, k[DP], k[PP], k[SCHEDULE], k[VIRTUAL])
        record = self.bounds.get(key, MISSING)
        if record is MISSING:
            work = self._work(lay)
            if lay.training:
                record = self._record(lay, step_bound(self._profile(lay, work), self._chunks(lay)[0]))
            else:
                record = optimistic_record(lay.case, work)
            self.bounds[key] = record
        return record

    def refined(self, lay: Layout, level: int) -> dict[str, Any] | None:
        """The record at the bound of `level` (search/tails.py), or None where no refinement applies: TAIL
        adds the ZeRO-3 layer floor and the data-parallel tail less the parameter all-gather to the compute
        bound, SPANS also replaces each layer's compute by its template's span, FULL also adds the parameter
        all-gather. Spans depend on the shard and the groups (dp, pp besides the shard); tail and floor on
        the parameters' placement, the collectives and the schedule, not on sp, recompute or the attention
        kernel: the layouts that share them share one computation."""
        case = lay.case
        assert case is not None
        if not refinable(case):
            return None
        p = case.parallelism
        cost = None
        label = lay.shard_key[0]
        floor_key = (label, case.workload, lay.placement)
        if floor_key not in self.floors:
            cost = CommCost(case)
            self.floors[floor_key] = layer_floor(case, cost)
        if (label, lay.placement) not in self.optimizers:
            self.optimizers[(label, lay.placement)] = optimizer_seconds(case)
        tail_key = (label, case.workload, level == FULL, lay.placement)
        if tail_key not in self.tails:
            cost = cost or CommCost(case)
            self.tails[tail_key] = step_tail(case, cost, level == FULL, self.optimizers[(label, lay.placement)])
        floor, tail = self.floors[floor_key], self.tails[tail_key]
        work, tag = self.works[lay.shard_key], ()
        groups = (p.dp, p.pp, p.moe_a2a_overlap)
        if level >= SPANS:
            if (lay.shard_key, groups) not in self.spans:
                self.spans[(lay.shard_key, groups)] = template_spans(case, cost or CommCost(case))
            spans = self.spans[(lay.shard_key, groups)]
            if spans is not None:
                work, tag = spans, groups
        return self._record(lay, step_bound(self._profile(lay, work, floor, tag), self._chunks(lay)[0], tail))

    def state_fits(self, lay: Layout) -> bool:
        """False when the weights, gradients and optimizer state of the first or the last pipeline stage,
        with the framework's reserve, already exceed the HBM: the peak adds activations (or the optimizer
        step's transients) on top, so `predict` would call the case infeasible. They depend on the
        parameters' placement and sharding, not on the micro-batch, recompute, sp or the kernel, so those
        variants share one answer."""
        if not lay.training:
            return True
        return self._states(lay)[0]

    def _states(self, lay: Layout) -> tuple[bool, dict[int, StateBytes]]:
        """The persistent-state verdict and the state bytes of the first and the last stage."""
        key = (lay.shard_key[0], lay.placement)
        hit = self.states.get(key)
        if hit is None:
            case = lay.case
            assert case is not None
            conv, hw = conventions(case), case.hardware
            states = {s: state_bytes(case, s, conv) for s in sorted({0, case.parallelism.pp - 1})}
            hit = self.states[key] = (all(st.weights + st.gradients + st.optimizer + hw.framework_memory
                                          <= hw.hbm_capacity for st in states.values()), states)
        return hit

    def may_fit(self, lay: Layout) -> bool:
        """False when the first or the last pipeline stage alone already exceeds the HBM under the liveness
        memory model (so the worst stage does too: `predict` would call the case infeasible), with the
        per-layer liveness shared by the layouts of one shard. True leaves the verdict to `predict`, which
        checks every stage. Embedding, LM head and the most in-flight micro-batches sit on those two. The
        memory model reads the attention kernel only as naive or not, so the layouts that differ in the
        (non-naive) kernel alone share one verdict."""
        if not lay.training:
            return True
        shard = (*lay.shard_key[:-1], lay.key[-1] == "naive")
        key = (shard, lay.placement)
        fits = self.fits.get(key)
        if fits is None:
            case = lay.case
            assert case is not None
            if shard not in self.livenesses:
                self.livenesses[shard] = training_liveness(case, FRAMEWORKS[case.framework])
            liveness = self.livenesses[shard]
            fits = self.fits[key] = all(memory_for_case(case, stage=s, liveness=liveness, state=st).feasible
                                        for s, st in self._states(lay)[1].items())
        return fits


def _passes(row: dict, limits: dict[str, tuple[float, float]]) -> bool:
    for col, (lo, hi) in limits.items():
        v = row.get(col)
        if v is None or not lo <= v <= hi:
            return False
    return True


# a pending layout of a group: (bound key, enumeration order, bound level, Layout.key, or the Layout itself once
# refined); tuples order by the first two (orders are unique), so a heap pops the best bound first, ties in
# enumeration order
Entry = tuple[float, int, int, Any]
# bound levels (`_Shared.refined`), cheapest first: compute only; + the ZeRO-3 layer floor and the step's
# tail less the parameter all-gather; + the layer templates' spans; + the parameter all-gather
COMPUTE, TAIL, SPANS, FULL = 0, 1, 2, 3


def _bounded(spec: SearchSpec, prune: bool, shard: tuple[int, int], counts: Counts, shared: _Shared,
             bar: Any) -> tuple[list[list[Entry]], list[tuple[int, int]]]:
    """Enumerate, drop invalid and filtered layouts (and, by their bound, those that cannot meet a latency
    limit), and attach each remaining layout's compute-only objective bound: the entries of each (candidate,
    GPU count) group, and the groups. An entry keeps the layout's key, not its case."""
    obj = spec.objective
    axis_filters = {c: v for c, v in spec.filters.items() if c in LAYOUT_COLUMNS or c == "gpus"}
    by_group: list[list[Entry]] = []
    groups: list[tuple[int, int]] = []
    order = -1
    bounded = prune and obj.monotone
    enumerated = counts.projected["layouts"]   # `Counts.file` inlined: once per enumerated layout
    for ci, cand in enumerate(spec.candidates):
        for gpus in spec.gpus:
            groups.append((ci, gpus))
            entries: list[Entry] = []
            by_group.append(entries)
            for lay in layouts(spec, cand, gpus):
                order += 1
                if order % shard[1] != shard[0]:
                    continue
                counts.layouts += 1
                counts.count_overlaps(lay)
                enumerated[PROJECT(lay.key)] += 1
                if counts.layouts % 1000 == 0:
                    bar.update(1000)
                if lay.reason:
                    counts.invalid(lay.reason.split(":")[0], lay.key)
                    continue
                if axis_filters and not _passes({**lay.columns, "gpus": gpus}, axis_filters):
                    counts.removed["filtered"] += 1
                    continue
                if not shared.state_fits(lay):
                    counts.out_of_memory("persistent_state", lay.key)
                    continue
                bound_key = -math.inf
                optimistic = shared.optimistic(lay) if bounded else None
                if optimistic is not None:
                    if spec.slo and _breaks_slo(optimistic, spec):
                        counts.removed["slo"] += 1
                        continue
                    bound_key = obj.key(obj.derive(optimistic, shared.group_case(lay) if obj.group_level else lay.case))
                entries.append((bound_key, order, COMPUTE, lay.key))
    return by_group, groups


def _breaks_slo(record: dict[str, Any], spec: SearchSpec) -> bool:
    return any(record.get(c, -math.inf) > hi for c, hi in spec.slo.items())


def _check_call(top: Any, shard: Any) -> None:
    """A library caller's `top` and `shard`, as the CLI's --top is checked: top '3' was a TypeError deep in
    the heap, top -1 and shard (5, 2) silently an empty table, shard (0, 0) a ZeroDivisionError."""
    if top is not None:
        validate({"top": top}, "search_flags", "search")
    ok = (isinstance(shard, (tuple, list)) and len(shard) == 2
          and all(isinstance(x, int) and not isinstance(x, bool) for x in shard) and 0 <= shard[0] < shard[1])
    if not ok:
        raise SpecError(f"search: shard: {shard!r} is not allowed; allowed: (i, n), integers with 0 <= i < n")


def search(spec: SearchSpec | str | Path | dict, *, prune: bool = True, progress: bool = False,
           top: int | None = None, shard: tuple[int, int] = (0, 1), engine: str = "event") -> pd.DataFrame:
    """The best layouts of a search spec (a path, a mapping or a loaded `SearchSpec`).

    Returns the top `top` (default: the spec's `top`) feasible layouts of every (candidate, GPU count)
    group, best first, with `rank` (overall), `group_rank`, `pareto` (best of its GPU count and better
    than every smaller GPU count of its candidate), the layout, the objective column and the full
    prediction record; `df.attrs["counts"]` says how many layouts were enumerated, evaluated and removed
    by which reason. `prune=False` simulates every valid layout (the exhaustive reference); `shard=(i, n)`
    searches every n-th layout from the i-th (merge shards with `merge`).

    Pruned, each group's layouts are visited from a heap, best bound first. A layout whose bound is worse
    than its group's current k-th best is dominated, and so is every layout of the group still pending; otherwise, if it may fit in memory, its bound is refined with
    the data-parallel tail (search/tails.py) and it goes back into the heap under the refined key; a
    refined layout that is popped and not dominated is simulated. Every key is a lower bound of the
    layout's objective, so what is skipped could not have entered its group's top k.
    """
    _check_call(top, shard)
    spec = spec if isinstance(spec, SearchSpec) else load_search(spec)
    k = top or spec.top
    obj = spec.objective
    counts = Counts(size_axis=_size_axis(spec))
    result_filters = {c: v for c, v in spec.filters.items() if c not in LAYOUT_COLUMNS and c != "gpus"}
    limits = {**result_filters, **{c: (-math.inf, hi) for c, hi in spec.slo.items()}}
    shared = _Shared()
    from tqdm import tqdm
    with tqdm(desc=f"{spec.name}: enumerate and bound", unit="layout", disable=not progress) as bar:
        by_group, groups = _bounded(spec, prune, shard, counts, shared, bar)
    tops = [_Top(k) for _ in groups]
    with tqdm(total=sum(map(len, by_group)), desc=f"{spec.name}: simulate or prune", unit="layout",
              disable=not progress, mininterval=0.5) as bar:
        for (ci, gpus), best, entries in zip(groups, tops, by_group):
            _visit(spec, prune, engine, ci, gpus, entries, best, counts, limits, shared, bar)
    return _table([t.rows for t in tops], spec, counts)


def _size_axis(spec: SearchSpec) -> str:
    """The column a layout key's size is: micro_batch (training) or batch (inference)."""
    return "micro_batch" if spec.candidates[0].base.training else "batch"


def _refusal_key(err: SpecError) -> str:
    """What a refusal met while predicting counts under: the key its message names ('workload.serving: ...'),
    else 'simulation limit' (a collective or pipeline too large to simulate names no key)."""
    head = str(err).split(":", 1)[0]
    return head if re.fullmatch(r"[\w.]+", head) else "simulation limit"


def _visit(spec: SearchSpec, prune: bool, engine: str, ci: int, gpus: int, entries: list[Entry], best: _Top,
           counts: Counts, limits: dict[str, tuple[float, float]], shared: _Shared, bar: Any) -> None:
    """Visit one group's entries (best bound first when pruning, else in enumeration order) into its top k.
    A group's k-th best changes only when one of its own layouts is simulated, so groups are visited one
    after another; once the best bound left is dominated, every entry left is (their keys are no better and
    the k-th best no longer changes), and they are counted at once."""
    obj = spec.objective
    if prune:
        heapq.heapify(entries)
    else:
        entries.reverse()                      # popped from the end: enumeration order
    while entries:
        bound_key, order, level, key = heapq.heappop(entries) if prune else entries.pop()
        if prune and bound_key > best.kth():
            counts.removed["dominated"] += 1 + len(entries)
            bar.update(1 + len(entries))
            entries.clear()
            return
        lay = key if level > COMPUTE else rebuild(spec.candidates[ci], key, spec.options)
        if level == COMPUTE and not shared.may_fit(lay):
            counts.out_of_memory("first_last_stage", lay.key)
            bar.update(1)
            continue
        if prune and level < FULL and obj.monotone:
            nxt = level + 1 if level + 1 < SPANS or param_gather(lay.case) else FULL
            refined = shared.refined(lay, nxt)
            if refined is not None:
                if _breaks_slo(refined, spec):
                    counts.removed["slo"] += 1
                    bar.update(1)
                    continue
                heapq.heappush(entries, (max(bound_key, obj.key(obj.derive(refined, lay.case))), order, nxt, lay))
                continue
        bar.update(1)
        try:
            rec = predict(lay.case, engine).to_dict()
        except SpecError as err:               # a limit met once memory has decided (a serving queue too long
            counts.invalid(_refusal_key(err), lay.key)   # to simulate): invalid, under its key, like a case rule
            continue
        if rec["status"] != "ok":              # predict checks every stage's memory first
            counts.out_of_memory("worst_stage", lay.key)
            continue
        counts.evaluated += 1
        for s, i in zip(OVERLAP_SWITCHES, OVERLAP_AT):
            counts.overlaps[s]["evaluated_on" if lay.key[i] else "evaluated_off"] += 1
        if not _passes(rec, limits):
            counts.removed["slo" if _breaks_slo(rec, spec) else "filtered"] += 1
            continue
        counts.ranked += 1
        value = obj.derive(rec, lay.case)
        row = {"candidate": spec.candidates[ci].label, "gpus": gpus, **lay.columns,
               obj.name: value, **{c: v for c, v in rec.items() if c != obj.name}, "layout_index": order}
        best.add((obj.key(value), rec["peak_memory_bytes"], order), row)


def _table(rows_by_group: list[list[dict]], spec: SearchSpec, counts: Counts) -> pd.DataFrame:
    rows = [dict(r, group_rank=i + 1) for g in rows_by_group for i, r in enumerate(g)]
    df = pd.DataFrame(rows)
    df.attrs["counts"] = counts.as_dict()
    df.attrs["objective"] = {"column": spec.objective.name, "direction": spec.objective.direction}
    if spec.costs:                      # a cost column: on which basis each device is priced, and its caveat
        df.attrs["objective"].update(cost_basis={hw: c.operating.basis for hw, c in spec.costs.items()},
                                     cost_note=spec.cost_note())
    return rank(df, spec.objective.name, spec.objective.direction)


# the order of ranked rows: objective (as a key, smaller is better), then peak memory, then enumeration order
TIE_ORDER = ["_key", "peak_memory_bytes", "layout_index"]


def rank(df: pd.DataFrame, column: str, direction: str) -> pd.DataFrame:
    """Order rows best first (ties by lower peak memory, then enumeration order), number them, and mark the
    Pareto front across GPU counts: a group's best row that beats every smaller GPU count's best of the same candidate."""
    attrs = dict(df.attrs)
    if df.empty:
        return df
    key = df[column] if direction == "min" else -df[column]
    df = df.assign(_key=key).sort_values(TIE_ORDER, kind="stable").reset_index(drop=True)
    df.insert(0, "rank", range(1, len(df) + 1))
    pareto = pd.Series(False, index=df.index)
    firsts = df[df.group_rank == 1].sort_values(["candidate", "gpus"], kind="stable")
    for _, grp in firsts.groupby("candidate", sort=False):
        best = math.inf
        for idx, k in zip(grp.index, grp["_key"]):
            if k < best:
                pareto[idx], best = True, k
    df["pareto"] = pareto
    df = df.drop(columns=["_key"])
    df.attrs.update(attrs)
    return df


def merge(frames: list[pd.DataFrame], spec: SearchSpec, top: int | None = None) -> pd.DataFrame:
    """Join the results of shards of one search: each shard holds the exact top k of its part of every
    group, so the top k of their union is the top k of the whole group. Counts add up."""
    k = top or spec.top
    counts = Counts(size_axis=_size_axis(spec))
    for f in frames:
        c = f.attrs["counts"]
        counts.layouts += c["layouts"]
        counts.evaluated += c["evaluated"]
        counts.ranked += c["ranked"]
        counts.removed.update({r: c[r] for r in REASONS})
        counts.invalid_by_rule.update(c["invalid_by_rule"])
        counts.out_of_memory_by_check.update(c["out_of_memory_by_check"])
        for category, axes in c["by_axis"].items():
            for axis, n in axes.items():
                counts.by_axis[category].setdefault(axis, Counter()).update(n)
        for s, n in c.get("overlaps", {}).items():
            counts.overlaps[s].update(n)
    df = pd.concat([f for f in frames if not f.empty], ignore_index=True) if any(not f.empty for f in frames) \
        else pd.DataFrame()
    if df.empty:
        return _table([], spec, counts)
    sign = 1 if spec.objective.direction == "min" else -1
    df = df.assign(_key=sign * df[spec.objective.name]).sort_values(TIE_ORDER, kind="stable")
    df = df.drop(columns=["rank", "group_rank", "pareto", "_key"]).groupby(["candidate", "gpus"], sort=False).head(k)
    rows = df.to_dict("records")
    by_group: dict[tuple, list[dict]] = {}
    for r in rows:
        by_group.setdefault((r["candidate"], r["gpus"]), []).append(r)
    return _table(list(by_group.values()), spec, counts)

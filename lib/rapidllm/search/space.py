"""The layouts of a search: every axis's values (the user's, else all that make sense), crossed for one
candidate and GPU count, each turned into a checked `Case` or an invalid row with the rule it breaks.

Defaults (docs/search.md, "What is searched"): tp divides the attention heads and stays inside a node; cp is
a power of two leaving each rank at least 1,024 tokens (and 2 x cp chunks for load balancing); pp divides
what tp x cp leave of the GPUs, at most one stage per layer; dp is what remains; ep divides the experts (MoE
only), etp is tp or 1 (MoE training); sp both ways when tp > 1; 1F1B, plus interleaved 1F1B with 2-8 virtual
stages (at least one layer per model chunk; uneven splits are modelled, as Megatron-Core's
--pipeline-model-parallel-layout allows) when pp > 1 and the micro-batches per step are a multiple of pp; for inference dp 1 (a GPU count is one model instance:
replicas do not change per-GPU throughput or latency) and no sp; micro-batch 1, 2, 4, 8; recompute none, selective, full
(selective of Megatron's default modules); ZeRO 0-3 when dp > 1; no FSDP (ZeRO-2/3 cover it); FlashAttention-2,
plus FlashAttention-3 on Hopper and newer. A combination the case rules reject (spec/case.py) is counted as
invalid under the rule's key; one that does not factor the GPU count is not a layout at all.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
from collections.abc import Iterator
from typing import Any

from rapidllm.graph.schedules import interleaving
from rapidllm.search.spec import LAYOUT_AXES, Candidate, SearchSpec
from rapidllm.spec.case import (
    OVERLAP_SWITCHES,
    Case,
    check_attention,
    check_layout,
    expert_tp_of,
    layout_case,
    overlap_applies,
    sized_network,
)
from rapidllm.spec.errors import SpecError
from rapidllm.spec.frameworks import framework_parallelism, runs_option
from rapidllm.spec.layout import InferenceWorkload, Parallelism, TrainingWorkload
from rapidllm.spec.model import ModelSpec
from rapidllm.spec.network import NetworkSpec

LAYOUT_COLUMNS = LAYOUT_AXES
MIN_CP_TOKENS = 1024
MAX_VIRTUAL_STAGES = 8
DEFAULT_MODULES = ("core_attn",)


# the Parallelism fields a layout sets, in the order `Layout.key` holds them
PAR_FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "sp", "zero", "fsdp", "recompute", "recompute_modules",
              "schedule", "virtual_stages", *OVERLAP_SWITCHES)


_PLACEMENT = operator.itemgetter(*(i for i, f in enumerate(PAR_FIELDS) if f not in ("sp", "recompute",
                                                                                   "recompute_modules")))


def placement(key: tuple) -> tuple:
    """The parallelism values of a `Layout.key` less sp, recompute and recompute_modules: what the placement
    and sharding of parameters, gradients and optimizer state depend on (a layout sets every Parallelism
    field it does not leave at its default)."""
    return _PLACEMENT(key)


class Layout:
    """One point of the space: its key, the keys its shared work is filed under, and its case (None when a
    case rule rejects it). The case is built on first use: a search checks every one of its hundreds of
    thousands of layouts, but a bound or memory verdict shared with other layouts settles most of them, and
    only the few it bounds first or simulates need a case of their own."""
    __slots__ = ("key", "training", "reason", "shard_key", "placement", "base", "_build", "_case", "applicable")

    def __init__(self, key: tuple, training: bool, shard_key: tuple, placement: tuple, reason: str, base: Case,
                 build: tuple | None, applicable: tuple[bool, ...] = ()) -> None:
        self.key = key                    # what `rebuild` needs: the PAR_FIELDS values, micro-batch or batch, kernel
        self.training = training
        self.shard_key = shard_key        # what the layer pricing and spans depend on (search/bounds.py, tails.py)
        self.placement = placement        # `placement(key)`
        self.reason = reason              # the rejected rule's key and message
        self.base = base                  # the candidate's base case
        self._build = build               # (Parallelism, workload, sized fabric) of a valid layout, else None
        self._case: Case | None = None
        self.applicable = applicable      # per OVERLAP_SWITCHES: whether it applies (on or not); () when rebuilt

    @property
    def case(self) -> Case | None:
        if self._case is None and self._build is not None:
            par, workload, sized = self._build
            self._case = layout_case(self.base, sized, par, workload, self.key[-1])
        return self._case

    @property
    def columns(self) -> dict[str, Any]:
        """The layout's columns in the ranked table (etp as the expert TP width it resolves to)."""
        *par, size, attn = self.key
        m = dict(zip(PAR_FIELDS, par))
        etp = expert_tp_of(Parallelism(tp=m["tp"], ep=m["ep"], etp=m["etp"]), self.training)
        return dict(m, etp=etp, recompute_modules="+".join(m["recompute_modules"]),
                    micro_batch=size if self.training else 0, batch=0 if self.training else size,
                    attention_impl=attn)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _user(spec: SearchSpec, axis: str, default: list) -> list:
    return list(spec.space[axis]) if axis in spec.space else default


def _flash3(case: Case) -> bool:
    cc = case.hardware.compute_capability
    return bool(cc) and float(cc) >= 9.0


def axis_defaults(spec: SearchSpec, cand: Candidate) -> dict[str, list]:
    """The values of every axis that does not depend on the rest of the layout."""
    base, model = cand.base, cand.base.model
    training = base.training
    node = cand.network.dimensions[0].size or 1
    tp = [d for d in divisors(model.heads) if spec.tp_across_nodes or d <= node]
    out: dict[str, list] = {"tp": _user(spec, "tp", tp)}
    if training:
        seq = base.workload.seq_len
        cp = [c for c in (2 ** i for i in range(12)) if seq % (2 * c) == 0 and seq // c >= MIN_CP_TOKENS] or [1]
        out["cp"] = _user(spec, "cp", cp)
        out["micro_batch"] = _user(spec, "micro_batch", [1, 2, 4, 8])
        out["recompute"] = _user(spec, "recompute", ["none", "selective", "full"])
        out["recompute_modules"] = [tuple(m) for m in _user(spec, "recompute_modules", [list(DEFAULT_MODULES)])]
    else:
        out["cp"] = _user(spec, "cp", [1])
        out["batch"] = _user(spec, "batch", [base.workload.batch])
        out["recompute"], out["recompute_modules"] = ["none"], [DEFAULT_MODULES]
    out["ep"] = _user(spec, "ep", divisors(model.moe.experts) if model.moe else [1])
    out["fsdp"] = _user(spec, "fsdp", ["none"])
    out["attention_impl"] = _user(spec, "attention_impl", ["flash", "flash3"] if _flash3(base) else ["flash"])
    return out


def _etp(spec: SearchSpec, base: Case, sp: bool, tp: int) -> list[int | None]:
    if "etp" in spec.space:
        return list(spec.space["etp"])
    return [None, 1] if base.model.moe and base.training and sp and tp > 1 else [None]


def _schedules(spec: SearchSpec, training: bool, pp: int, layers: int) -> list[tuple[str, int]]:
    scheds = _user(spec, "schedule", ["1f1b", "interleaved"] if training and pp > 1 else ["1f1b"])
    out = []
    for sched in scheds:
        if sched != "interleaved":
            out.append((sched, 1))
            continue
        vs = [v for v in range(2, MAX_VIRTUAL_STAGES + 1) if pp * v <= layers]
        out += [(sched, v) for v in _user(spec, "virtual_stages", vs)]
    return out


def layouts(spec: SearchSpec, cand: Candidate, gpus: int) -> Iterator[Layout]:
    """Every layout of `gpus` GPUs for one candidate, in a fixed order."""
    base, model = cand.base, cand.base.model
    training = base.training
    ax = axis_defaults(spec, cand)
    dp_allowed = set(spec.space.get("dp", [] if training else [1]))
    fabric = _fabric(cand, gpus)
    for tp in ax["tp"]:
        for cp in ax["cp"]:
            if gpus % (tp * cp):
                continue
            rest = gpus // (tp * cp)
            for pp in _user(spec, "pp", [d for d in divisors(rest) if d <= model.layers]):
                if rest % pp or (dp_allowed and rest // pp not in dp_allowed):
                    continue
                yield from _inner(spec, cand, ax, training, tp, cp, pp, rest // pp, fabric)


def _inner(spec: SearchSpec, cand: Candidate, ax: dict[str, list], training: bool, tp: int, cp: int, pp: int,
           dp: int, fabric: tuple[NetworkSpec | None, str]) -> Iterator[Layout]:
    base = cand.base
    sps = _user(spec, "sp", [True, False] if tp > 1 and training else [False])
    zeros = _user(spec, "zero", [0, 1, 2, 3] if training and dp > 1 else [0])
    sizes = ax["micro_batch"] if training else ax["batch"]
    workloads = {size: _workload(base.workload, size) for size in sizes}
    for ep in ax["ep"]:
        for sp in sps:
            for etp in _etp(spec, base, sp, tp):
                for sched, v in _schedules(spec, training, pp, base.model.layers):
                    for size in sizes:
                        if sched == "interleaved" and not _interleaves(base, dp, pp, v, size):
                            continue
                        workload = workloads[size]
                        for rc in ax["recompute"]:
                            for mods in (ax["recompute_modules"] if rc == "selective" else [DEFAULT_MODULES]):
                                for zero in zeros:
                                    for fsdp in ax["fsdp"]:
                                        par_m = dict(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, sp=sp, zero=zero,
                                                     fsdp=fsdp, recompute=rc, recompute_modules=mods,
                                                     schedule=sched, virtual_stages=v)
                                        applicable, choices = _overlaps(spec, base.framework, training, par_m)
                                        for on in choices:
                                            yield from _layouts(cand, workload, size, ax["attention_impl"],
                                                                spec.options, {**par_m, **on}, fabric, applicable)


def _overlaps(spec: SearchSpec, framework: str, training: bool, par_m: dict[str, Any]
              ) -> tuple[tuple[bool, ...], list[dict[str, bool]]]:
    """(whether each of OVERLAP_SWITCHES applies to the layout `par_m`, the switch settings to search it
    with). A switch takes the space's values (default [false], the frameworks' default), a true one turned
    off where it has nothing to overlap (`overlap_applies`, `runs_option`): [true] is "on wherever it
    applies" (as Megatron-Bridge's recipes set tp_comm_overlap = TP > 1 with sp), [false, true] searches
    both where it applies and leaves one layout, off, elsewhere (the pair would be the same case twice)."""
    par = Parallelism(**par_m)
    applicable = tuple(runs_option(framework, s) and overlap_applies(s, par, training) for s in OVERLAP_SWITCHES)
    values = [list(dict.fromkeys(bool(v) and ok for v in _user(spec, s, [False])))
              for s, ok in zip(OVERLAP_SWITCHES, applicable)]
    return applicable, [dict(zip(OVERLAP_SWITCHES, on)) for on in itertools.product(*values)]


def _interleaves(base: Case, dp: int, pp: int, v: int, micro_batch: int) -> bool:
    """False when an interleaved schedule cannot interleave (`graph.schedules.interleaving`: the engine then
    runs it as plain 1F1B, so it would only duplicate the 1F1B layout). A global batch that does not divide
    stays in the space (a case rule rejects it, counted as invalid), as does a layout the user pinned to pp 1
    or one virtual stage (nothing to interleave whatever the batch)."""
    w = base.workload
    if not isinstance(w, TrainingWorkload) or w.global_batch % (dp * micro_batch):
        return True
    return pp == 1 or v == 1 or interleaving("interleaved", pp, v, w.global_batch // (dp * micro_batch)) > 1


@functools.lru_cache(maxsize=1024)
def _workload(w: TrainingWorkload | InferenceWorkload, size: int) -> TrainingWorkload | InferenceWorkload:
    """The candidate's workload `w` at micro-batch (training) or batch (inference) `size`: one object per
    size, shared by the layouts of a search."""
    if isinstance(w, TrainingWorkload):
        return dataclasses.replace(w, micro_batch=size)
    concurrency = size if w.concurrency == w.batch else w.concurrency
    return dataclasses.replace(w, batch=size, concurrency=concurrency)


def rebuild(cand: Candidate, key: tuple, options: dict[str, Any]) -> Layout:
    """The valid layout `key` (a `Layout.key` of a layout the case rules passed) stands for: a search keeps
    the few bytes of the key for each of its hundreds of thousands of layouts and rebuilds the layouts it
    visits, without checking them again. `options` are the spec's fixed `parallelism` settings."""
    *values, attn = key
    par = Parallelism(**options, **dict(zip(PAR_FIELDS, values)))
    workload = _workload(cand.base.workload, values[-1])
    sized, reason = _fabric(cand, par.world)
    training, shard, place = _keys(cand, par, workload, tuple(values))
    return Layout(key, training, (*shard, attn), place, reason, cand.base, (par, workload, sized))


def _fabric(cand: Candidate, world: int) -> tuple[NetworkSpec | None, str]:
    """The candidate's fabric sized for `world` ranks, or None and why it cannot be (every layout of one GPU
    count shares it)."""
    try:
        return sized_network(cand.network, world, "layout"), ""
    except SpecError as err:
        return None, str(err).removeprefix("layout: ")


def _layouts(cand: Candidate, workload: TrainingWorkload | InferenceWorkload, size: int, attns: list[str],
             options: dict[str, Any], par_m: dict, fabric: tuple[NetworkSpec | None, str],
             applicable: tuple[bool, ...]) -> Iterator[Layout]:
    """The layouts of one parallelism and workload, one per attention kernel: the layout rules do not look at
    the kernel, so one check serves them all (the rules first, the base's framework's among them, then the
    fabric's sizing, then the kernel's own rule, `check_attention`, as `resolve_case` checks). The key is the
    searched axes; `options` (the spec's fixed `parallelism` settings) are the same in every row and shape
    the case only."""
    par = Parallelism(**options, **par_m)
    values = (*par_m.values(), size)
    sized, reason = fabric
    try:
        check_layout(cand.base.model, par, workload, "layout")
        framework_parallelism({"framework": cand.base.framework, "parallelism": options}, par, "layout")
    except SpecError as err:
        reason = str(err).removeprefix("layout: ")
    build = (par, workload, sized) if not reason else None
    training, shard, place = _keys(cand, par, workload, values)
    for attn in attns:
        why = reason or _kernel_refusal(cand.base.model, attn, cand.base.kv_cache_precision)
        yield Layout((*values, attn), training, (*shard, attn), place, why, cand.base, None if why else build,
                     applicable)


@functools.lru_cache(maxsize=256)
def _kernel_refusal(model: ModelSpec, attn: str, kv_cache: str) -> str:
    """Why `attn` cannot run `model` over its `kv_cache` (`check_attention`'s key and message), or ''."""
    try:
        check_attention(model, attn, "layout", kv_cache)
    except SpecError as err:
        return str(err).removeprefix("layout: ")
    return ""


def _keys(cand: Candidate, par: Parallelism, workload: TrainingWorkload | InferenceWorkload, values: tuple
          ) -> tuple[bool, tuple, tuple]:
    """(training, shard key less the kernel, placement) of a layout: `values` its key less the kernel."""
    training = isinstance(workload, TrainingWorkload)
    size = values[-1]
    shard = (cand.label, par.tp, par.cp, par.ep, expert_tp_of(par, training), par.sp, par.recompute,
             par.recompute_modules, par.tp_comm_overlap, par.moe_a2a_overlap, size if training else 0,
             0 if training else size)
    return training, shard, placement(values)

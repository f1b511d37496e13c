"""Layer graph templates: one forward and one backward graph per distinct layer shape.

Homogeneity (RAPID-LLM §4.1): every layer of a kind has the same operators and the same collectives on
every rank of a pipeline stage, so the graph of one layer is built once and reused for all layers,
micro-batches and equivalent groups. A template lists nodes in compute-stream order; a communication
node depends on the operator that produced its input and blocks only the operator that consumes its
output, so independent work (e.g. the weight-gradient GEMM beside the backward TP all-reduce, Megatron's
async TP) overlaps it. Compute nodes carry operator names; durations come from the priced table.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rapidllm.caches import current
from rapidllm.graph.comm_nodes import dispatch_bytes, mlp_module, moe_all_to_all, moe_tp_collectives, \
    routed_on_sequence, routed_tp_copies
from rapidllm.ops.price import OPERATOR_COLUMNS, OperatorTable, case_sections
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES
from rapidllm.spec.layout import InferenceWorkload, TrainingWorkload

if TYPE_CHECKING:
    import pandas as pd

COMPUTE, COMM = "compute", "comm"
PREV = ""          # launch right before the consumer (after the preceding operator)


@dataclass(frozen=True)
class Node:
    name: str                        # operator name (compute) or "axis.op" (comm)
    kind: str                        # compute | comm
    phase: str = ""                  # operator phase (fwd | recompute | bwd | optimizer)
    deps: tuple[int, ...] = ()       # indices of earlier nodes of the same template
    axis: str = ""                   # comm: parallel axis (tp, cp, ep, dp, pp)
    op: str = ""                     # comm: collective
    nbytes: float = 0.0              # comm: nccl-tests size convention


@dataclass
class Template:
    section: str                     # ops-table section of its compute nodes
    part: str                        # fwd | bwd | extra_fwd | extra_bwd | optimizer
    nodes: list[Node] = field(default_factory=list)

    @functools.cached_property
    def compute_phases(self) -> frozenset[str]:
        """Phases of its compute nodes (templates are read-only once built)."""
        return frozenset(n.phase for n in self.nodes if n.kind == COMPUTE)


@dataclass(frozen=True)
class Rule:
    launch: str | tuple[str, ...]    # operator after which the collective starts (PREV: just before consumer)
    consumer: str | tuple[str, ...]  # operator that needs its result; "+name" = the operator after `name`
    axis: str
    op: str
    nbytes: float
    # starts only once this rule's collective has finished (a dispatcher's steps on one tensor: the
    # expert-TP gather of what the EP all-to-all delivered), launched at the same operator; named, not
    # taken from the list's order, so a rule left out of a case (ep 1 has no all-to-all) or one added
    # before it cannot stand in. Where the rule is not in the list, nothing is waited for (`weave`)
    follows: Rule | None = None
    # the operator whose module runs the collective inside its own forward, where that is not the consumer:
    # a row-parallel GEMM's reduce-scatter (all-reduce) after the MLP, which a checkpoint of that module
    # (recompute_modules mlp, moe, shared_experts) runs again though its consumer, the residual add, is kept
    owner: str = ""


def layer_tokens(case: Case, prefix: str) -> int:
    """Tokens entering a layer on one rank for the section prefix ("" training, prefill_, decode_*)."""
    w, p = case.workload, case.parallelism
    if isinstance(w, TrainingWorkload):
        return w.micro_batch * w.seq_len // p.cp
    assert isinstance(w, InferenceWorkload)
    return w.batch * w.prompt_tokens if prefix.startswith("prefill") else w.batch * w.step_queries


def layer_rules(case: Case, tokens: int, moe: bool, backward: bool) -> list[Rule]:
    """Collectives of one layer traversal (Megatron-LM TP/SP, ring-free CP KV gather, EP all-to-all).

    An MoE layer whose routed experts are not TP-sharded (etp < tp) dispatches each rank's SP shard, so
    the MLP position has no TP gather / reduce-scatter (unless shared experts need them). Inference with
    EP inside the TP group dispatches nothing and keeps the all-reduce after the MLP position (it combines).
    """
    m, p = case.model, case.parallelism
    b = DTYPE_BYTES[case.activation_precision]
    act = float(tokens * m.hidden * b)
    mlp_in = ("router", "mlp_up") if moe else ("mlp_up",)
    rules: list[Rule] = []
    if p.tp > 1 and m.block == "parallel":      # dense only (spec/model.py refuses parallel MoE blocks)
        rules += parallel_block_rules(case, act, backward)
    elif p.tp > 1 and not p.sp:
        if backward:
            rules += [Rule("qkv_dgrad", "norm1_bwd", "tp", "all_reduce", act),
                      Rule(("mlp_up_dgrad", PREV), "norm2_bwd", "tp", "all_reduce", act)]
        else:
            rules += [Rule("o_proj", "residual1", "tp", "all_reduce", act),
                      Rule(PREV, "residual2", "tp", "all_reduce", act, owner=mlp_module(case, moe)[1])]
    elif p.tp > 1:
        full = act
        mlp_tp = not moe or moe_tp_collectives(case)
        owner = mlp_module(case, moe)[1]
        # an MoE layer whose router reads the rank's sequence shard gathers the sequence for its shared
        # experts alone (Megatron-Core's SharedExpertMLP: a TE column-parallel fc1, row-parallel fc2 under SP):
        # neither the router forward nor the combine's backward waits for that gather
        shared_only = moe and not routed_on_sequence(case)
        gather_in = first_reader("shared_up") if shared_only else mlp_in
        gather_grad = first_reader("shared_down_dgrad") if shared_only else "+residual2_bwd"
        if backward:
            # the column-parallel GEMMs keep their input sequence-sharded and gather it again for the
            # weight gradient, launched before the input-gradient GEMM and overlapped with it (Megatron's
            # LinearWithGradAccumulationAndAsyncCommunication, TE's Linear); their reduce-scatter queues behind
            # (routed experts take their tokens from the dispatcher and keep them: no re-gather). Shared
            # experts are such a column-parallel fc1 (Megatron-Core SharedExpertMLP, an MLP on the TP group)
            fc1 = "shared" if moe else "mlp"
            regather = not moe or bool(m.moe and m.moe.shared_experts)
            rules += [Rule("residual2_bwd", gather_grad, "tp", "all_gather", full)] * mlp_tp
            rules += [Rule(f"{fc1}_act_bwd", f"{fc1}_up_wgrad", "tp", "all_gather", full)] * regather
            rules += [Rule(("mlp_up_dgrad", PREV), "norm2_bwd", "tp", "reduce_scatter", full)] * mlp_tp
            rules += [Rule("residual1_bwd", "o_proj_dgrad", "tp", "all_gather", full),
                      Rule("attn_bwd", "qkv_wgrad", "tp", "all_gather", full),
                      Rule("qkv_dgrad", "norm1_bwd", "tp", "reduce_scatter", full)]
        else:
            rules += [Rule("norm1", "qkv", "tp", "all_gather", full),
                      Rule("o_proj", "residual1", "tp", "reduce_scatter", full)]
            rules += [Rule("norm2", gather_in, "tp", "all_gather", full),
                      Rule(PREV, "residual2", "tp", "reduce_scatter", full, owner=owner)] * mlp_tp
    if p.cp > 1:
        kv = float(m.cp_kv_dim) * b * tokens * p.cp / p.tp
        rules.append(Rule("attn_bwd", "qkv_dgrad", "cp", "reduce_scatter", kv) if backward
                     else Rule("qkv", "attn", "cp", "all_gather", kv))
    routed = act * routed_tp_copies(case) if moe else 0.0
    if moe and (moe_all_to_all(case) or routed):
        a2a = dispatch_bytes(case, tokens)
        if routed:
            # Megatron-Core's alltoall dispatcher with etp = tp: all-to-all, then the expert-TP all-gather of
            # the received tokens before the experts; their output reduce-scattered, then the combine (ep 1:
            # no all-to-all, the gather and reduce-scatter alone, `routed_tp_in_dispatcher`). In
            # backward the mirror image (the gather's gradient is a reduce-scatter and vice versa), run by
            # autograd between the grouped linears' backward nodes: the reduce-scatter after expert_up's
            # dgrad and wgrad both (no asynchronous TP communication inside the expert GEMMs). The gathered
            # tokens (gradient) are first read by the expert GEMM's FP8 cast where there is one: Megatron-Core
            # gathers them in BF16 and TE's GroupedLinear casts them after (`first_reader`)
            if backward:
                first = Rule("unpermute_bwd", "+unpermute_bwd", "ep", "all_to_all", a2a)
                steps = [first, Rule("unpermute_bwd", first_reader("expert_down_dgrad"), "tp", "all_gather", routed,
                                     follows=first)]
                last = Rule("expert_up_wgrad", "permute_bwd", "tp", "reduce_scatter", routed)
                steps += [last, Rule("expert_up_wgrad", "permute_bwd", "ep", "all_to_all", a2a, follows=last)]
            else:
                first = Rule("permute", "+permute", "ep", "all_to_all", a2a)
                steps = [first, Rule("permute", first_reader("expert_up"), "tp", "all_gather", routed, follows=first)]
                last = Rule("expert_down", "unpermute", "tp", "reduce_scatter", routed)
                steps += [last, Rule("expert_down", "unpermute", "ep", "all_to_all", a2a, follows=last)]
            send = moe_all_to_all(case)
            rules += [r for r in steps if send or r.axis != "ep"]
        elif backward:
            rules += [Rule("unpermute_bwd", "+unpermute_bwd", "ep", "all_to_all", a2a),
                      Rule(PREV, "permute_bwd", "ep", "all_to_all", a2a)]
        else:
            rules += [Rule("permute", "+permute", "ep", "all_to_all", a2a),
                      Rule(PREV, "unpermute", "ep", "all_to_all", a2a)]
    return rules


def first_reader(gemm: str) -> tuple[str, str]:
    """The consumer of a GEMM's input: the FP8 cast of that input where `precision: fp8` puts one before the
    GEMM (`ops.workload.with_fp8_casts`: `{gemm}_fp8_cast`, sized as the GEMM's whole input), else the GEMM."""
    return f"{gemm}_fp8_cast", gemm


def parallel_block_rules(case: Case, act: float, backward: bool) -> list[Rule]:
    """TP collectives of a parallel block (`ops.workload.parallel_block`), `act` bytes each.

    Forward: the attention output projection and the MLP down projection are both row-parallel; their
    partial sums are added (`residual1`) and reduced once, an all-reduce, or a reduce-scatter under SP
    (GPT-NeoX megatron/model/transformer.py ParallelTransformerLayer, gpt_j_residual: `residual +
    self.reduce(output)`; mesh-transformer-jax layers.py TransformerLayerShard: `g_psum(attn_out +
    dense_out)`; vLLM falcon.py: one tensor_model_parallel_all_reduce). Under SP each norm output is
    gathered once before the GEMMs that read it, so one all-gather with one norm, two with two (GPT-NeoX
    gathers each branch's input in its ColumnParallelLinear).
    Backward mirrors it: the output gradient is gathered once under SP and read by both branches'
    input-gradient GEMMs; each norm output's gradient is reduced once (all-reduce, reduce-scatter under
    SP), so one norm gives one (mesh-transformer-jax's f_psum on the shared input), two norms two; the
    column-parallel GEMMs re-gather their SP input for the weight gradient as in the sequential block.
    """
    if not backward:
        if not case.parallelism.sp:
            return [Rule("residual1", "residual2", "tp", "all_reduce", act)]
        # one norm: its gathered output is read by qkv and mlp_up, so a recompute of the MLP alone
        # (recompute_modules: mlp) gathers it again for mlp_up, as the sequential block's MLP does
        shared = case.model.parallel_norms == 1
        gathers = [Rule("norm1", ("qkv", "mlp_up") if shared else "qkv", "tp", "all_gather", act)]
        if not shared:
            gathers.append(Rule("norm2", "mlp_up", "tp", "all_gather", act))
        return gathers + [Rule("residual1", "residual2", "tp", "reduce_scatter", act)]
    if not case.parallelism.sp:
        rules = [Rule("qkv_dgrad", "norm1_bwd", "tp", "all_reduce", act)]
        if case.model.parallel_norms == 2:
            rules.insert(0, Rule("mlp_up_dgrad", "norm2_bwd", "tp", "all_reduce", act))
        return rules
    rules = [Rule("residual2_bwd", "+residual2_bwd", "tp", "all_gather", act),
             Rule("mlp_act_bwd", "mlp_up_wgrad", "tp", "all_gather", act)]
    if case.model.parallel_norms == 2:
        rules.append(Rule("mlp_up_dgrad", "norm2_bwd", "tp", "reduce_scatter", act))
    return rules + [Rule("attn_bwd", "qkv_wgrad", "tp", "all_gather", act),
                    Rule("qkv_dgrad", "norm1_bwd", "tp", "reduce_scatter", act)]


def _index(names: list[str], key: str | tuple[str, ...]) -> int | None:
    for k in (key,) if isinstance(key, str) else key:
        if k == PREV:
            return None
        if k.startswith("+") and k[1:] in names:
            i = names.index(k[1:]) + 1
            return i if i < len(names) else None
        if k in names:
            return names.index(k)
    return None


def weave(ops: list[tuple[str, str]], rules: list[Rule]) -> list[Node]:
    """Compute nodes in order with the rules' collectives woven in (launch after producer, block consumer).

    A rule whose consumer is not among `ops` is dropped, unless a woven rule `follows` it (the collective
    that one waits for then runs too: a recompute re-running a dispatcher's gather re-runs the all-to-all
    that delivered its tokens) or its `owner` is among `ops` (a recomputed module re-runs the reduction
    inside it; launched after the owner): no operator of `ops` waits for it then. A following rule is
    launched right after the rule it follows, in that rule's slot, which must come earlier in the list."""
    names = [n for n, _ in ops]
    position = {id(r): k for k, r in enumerate(rules)}
    before: dict[int, int] = {}                # following rule -> the rule it follows
    for k, r in enumerate(rules):
        if r.follows is not None and id(r.follows) in position:
            before[k] = position[id(r.follows)]
            if before[k] >= k:
                raise ValueError(f"rule {k} ({r.axis}.{r.op}) follows a rule listed after it")
    consumer = [_index(names, r.consumer) for r in rules]
    owned = {k: names.index(r.owner) for k, r in enumerate(rules)
             if consumer[k] is None and r.owner in names}
    woven = {k for k, ci in enumerate(consumer) if ci is not None} | set(owned)
    for k in sorted(before, reverse=True):     # a chain's followers come after its head: back to front
        if k in woven:
            woven.add(before[k])
    slot: dict[int, int] = {}
    after: dict[int, list[int]] = {}
    for k in sorted(woven):
        if k in before:
            slot[k] = slot[before[k]]
        elif k in owned:
            slot[k] = owned[k]
        else:
            # a chain launches before the first of its consumers (the head's own, when it has one; after
            # the last operator where none of them is among `ops`)
            chain = [k] + [j for j in sorted(woven) if j > k and _head(before, j) == k]
            ci = min((consumer[j] for j in chain if consumer[j] is not None), default=len(names))
            li = _index(names, rules[k].launch)
            slot[k] = ci - 1 if li is None or li >= ci else li
        after.setdefault(slot[k], []).append(k)
    nodes: list[Node] = []
    waits: dict[int, list[int]] = {}
    node_of: dict[int, int] = {}               # rule index -> its comm node

    def emit(k: int, launch: tuple[int, ...]) -> None:
        r = rules[k]
        deps = launch + ((node_of[before[k]],) if k in before else ())
        node_of[k] = len(nodes)
        if consumer[k] is not None:
            waits.setdefault(consumer[k], []).append(len(nodes))
        nodes.append(Node(f"{r.axis}.{r.op}", COMM, deps=deps, axis=r.axis, op=r.op, nbytes=r.nbytes))

    prev = -1
    for k in after.get(-1, []):
        emit(k, ())
    for i, (name, phase) in enumerate(ops):
        deps = tuple(([prev] if prev >= 0 else []) + waits.get(i, []))
        prev = len(nodes)
        nodes.append(Node(name, COMPUTE, phase, deps))
        for k in after.get(i, []):
            emit(k, (prev,))
    return nodes


def _head(before: dict[int, int], k: int) -> int:
    """The first rule of the chain rule `k` belongs to (`Rule.follows`)."""
    while k in before:
        k = before[k]
    return k


def operator_frame(case: Case) -> pd.DataFrame:
    """(section, name, phase) of every operator in execution order, without pricing (the trace stage)."""
    import pandas as pd

    return pd.DataFrame([(s, o.name, o.phase) for s, o in case_sections(case)], columns=["section", "name", "phase"])


class OpsView:
    """Row lookup of an operator table by section, built once per table (pandas masks cost ~1 ms each).

    `ops_of` and `durations` return exactly what the boolean-mask selections of the table return, in
    table order: names/phases, and time_s x count products (same elementwise numpy products). An
    `OperatorTable` (rows, no pandas) gives the same lists and arrays as its DataFrame: its numeric columns
    become arrays of the dtype pandas infers for them (int64 when all values are ints, else float64).
    """

    def __init__(self, ops: pd.DataFrame | OperatorTable) -> None:
        self._ops = ops
        # the table's shared leading rows (`OperatorTable.shared`) and the view of them alone, kept by
        # identity (`Caches.shared_views`): a sweep's cases share a few priced layer sets, and reading their
        # columns again was most of building a view
        self.shared = ops.shared if isinstance(ops, OperatorTable) else None
        self._head: OpsView | None = None
        self._columns: dict[str, np.ndarray] = {}
        self._sums: dict[tuple, float] = {}         # `flops_sum` of a shared head's rows
        if self.shared is not None:
            lead, shared = len(self.shared), self.shared
            head = self._head = current().shared_views.of((shared,), lambda: OpsView(OperatorTable(shared)))
            tail = ops.rows[lead:]
            self.names = head.names + [r[_NAME] for r in tail]
            self.phases = head.phases + [r[_PHASE] for r in tail]
            self.section_of = head.section_of + [r[_SECTION] for r in tail]
            self.sections = {sec: list(rows) for sec, rows in head.sections.items()}
            for i, r in enumerate(tail, lead):
                self.sections.setdefault(r[_SECTION], []).append(i)
        else:
            column = ops.column if isinstance(ops, OperatorTable) else (lambda name: ops[name].tolist())
            self.names = column("name")
            self.phases = column("phase")
            self.section_of = column("section")
            self.sections = {}
            for i, sec in enumerate(self.section_of):
                self.sections.setdefault(sec, []).append(i)
        lead = len(self.shared) if self.shared is not None else 0
        self.tail_sections = {sec for sec, rows in self.sections.items() if rows[-1] >= lead}

    def _numeric(self, name: str) -> np.ndarray:
        """A numeric column as `_numeric` makes it of the whole column: with a shared head, the head's
        array (made once) joined to the tail's when both have the dtype the whole would have (a join of two
        int64 or two float64 arrays holds the same numbers; mixed kinds are made whole, as pandas would)."""
        ops = self._ops
        if not isinstance(ops, OperatorTable):
            return ops[name].to_numpy()
        known = self._columns.get(name)
        if known is not None:
            return known
        j = OPERATOR_COLUMNS.index(name)
        out = None
        if self._head is not None:
            head = self._head._numeric(name)
            tail = _numeric([r[j] for r in ops.rows[len(self.shared):]])
            if head.dtype == tail.dtype:
                out = np.concatenate([head, tail])
        if out is None:
            out = _numeric(ops.column(name))
        self._columns[name] = out
        return out

    @functools.cached_property
    def timed(self) -> np.ndarray:
        """Seconds per row and micro-batch (time per launch x launches); priced tables only."""
        return self._numeric("time_s") * self._numeric("count")

    @functools.cached_property
    def work(self) -> np.ndarray:
        """FLOPs per row and micro-batch."""
        return self._numeric("flops") * self._numeric("count")

    def flops_sum(self, rows: tuple[int, ...], recompute_only: bool = False) -> float:
        """`float(work[rows].sum())`, with the rows of other phases than recompute as 0.0 when
        `recompute_only` (`np.where` over the whole column, as the engine's step FLOPs read it). Rows all in
        the shared head are summed from the head's own arrays and kept there: the same elements in the same
        order, so the same sum, once per head instead of once per case."""
        head = self._head
        if head is not None and (not rows or max(rows) < len(head.names)):
            key = (rows, recompute_only)
            hit = head._sums.get(key)
            if hit is None:
                hit = head._sums[key] = head._flops_sum(rows, recompute_only)
            return hit
        return self._flops_sum(rows, recompute_only)

    def _flops_sum(self, rows: tuple[int, ...], recompute_only: bool) -> float:
        work = self.work
        if recompute_only:
            work = np.where(np.array([phase == "recompute" for phase in self.phases], dtype=bool), work, 0.0)
        return float(work[list(rows)].sum())

    def rows(self, section: str, phases: tuple[str, ...] | set[str]) -> list[int]:
        return [i for i in self.sections.get(section, ()) if self.phases[i] in phases]

    def ops_of(self, section: str, phases: tuple[str, ...]) -> list[tuple[str, str]]:
        return [(self.names[i], self.phases[i]) for i in self.rows(section, phases)]

    def durations(self, section: str, phases: tuple[str, ...] | set[str]) -> list[float]:
        return list(self.timed[self.rows(section, phases)])


_SECTION, _NAME, _PHASE = (OPERATOR_COLUMNS.index(c) for c in ("section", "name", "phase"))


def _numeric(values: list) -> np.ndarray:
    """A column of Python numbers as pandas stores it: int64 if every value is an int, else float64."""
    arr = np.array(values)
    return arr if arr.dtype in (np.int64, np.float64) else arr.astype(np.float64)


def ops_view(ops: pd.DataFrame | OperatorTable | OpsView) -> OpsView:
    return ops if isinstance(ops, OpsView) else OpsView(ops)


def compute_durations(ops: pd.DataFrame | OperatorTable | OpsView, t: Template) -> list[float]:
    """Durations (time per launch x launches) of a template's compute nodes, in order.

    A section read from a table's shared leading rows alone (`OperatorTable.shared`: the priced layers a
    sweep's cases share) gives the same durations in every table that begins with those rows: they are kept
    by identity of the template and those rows (`Caches.shared_durations`)."""
    view = ops_view(ops)
    if view.shared is None or t.section in view.tail_sections:
        return view.durations(t.section, t.compute_phases)
    return list(current().shared_durations.of((t, view.shared),
                                              lambda: view.durations(t.section, t.compute_phases)))


def _ops_of(ops: pd.DataFrame | OperatorTable | OpsView, section: str, phases: tuple[str, ...]) -> list[tuple[str, str]]:
    return ops_view(ops).ops_of(section, phases)


def layer_templates(case: Case, ops: pd.DataFrame | OperatorTable | OpsView, prefix: str = "") -> list[Template]:
    """Forward (and for training, recompute + backward) templates of each layer kind of a case."""
    ops = ops_view(ops)
    out = []
    for kind in ("dense", "moe"):
        section = f"{prefix}layer_{kind}"
        if section not in ops.sections:
            continue
        tokens, moe = layer_tokens(case, prefix), kind == "moe"
        out.append(Template(section, "fwd", weave(_ops_of(ops, section, ("fwd",)), layer_rules(case, tokens, moe, False))))
        if case.training:
            rec = _ops_of(ops, section, ("recompute",))
            # recomputed operators gather, exchange or dispatch their inputs again: the forward rules whose
            # consumer is recomputed (weave drops the others)
            rec_rules = layer_rules(case, tokens, moe, False) if rec else []
            nodes = weave(rec, rec_rules)
            # backward starts from the recomputed module's output: it waits for the recompute's last node
            # and for any collective of the recompute no recomputed operator reads (a re-run reduction)
            read = {d for n in nodes for d in n.deps}
            ends = [i for i, n in enumerate(nodes) if n.kind == COMM and i not in read and i != len(nodes) - 1]
            bwd = weave(_ops_of(ops, section, ("bwd",)), layer_rules(case, tokens, moe, True))
            shift = len(nodes)
            for j, n in enumerate(bwd):
                deps = tuple(d + shift for d in n.deps) or ((shift - 1, *ends) if shift and j == 0 else ())
                nodes.append(Node(n.name, n.kind, n.phase, deps, n.axis, n.op, n.nbytes))
            out.append(Template(section, "bwd", nodes))
    return out


def extra_templates(case: Case, ops: pd.DataFrame | OperatorTable | OpsView) -> list[Template]:
    """Embedding / LM-head work of the first and last stage, the optimizer step, the inference heads."""
    ops = ops_view(ops)
    out = []
    for section in sorted(ops.sections):
        if "layer_" in section:
            continue
        phases = sorted({ops.phases[i] for i in ops.sections[section]})
        for ph in phases:
            part = {"fwd": "extra_fwd", "bwd": "extra_bwd", "optimizer": "optimizer"}.get(ph, ph)
            out.append(Template(section, part, weave(_ops_of(ops, section, (ph,)), [])))
    return out


def case_templates(case: Case, ops: pd.DataFrame | OperatorTable | OpsView) -> list[Template]:
    """All templates of a case: the compact graph the trace stage stores."""
    ops = ops_view(ops)
    if case.training:
        return layer_templates(case, ops) + extra_templates(case, ops)
    out = []
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    for prefix in ("prefill_", "decode_first_", "decode_last_")[:3 if w.output_tokens else 1]:
        out += layer_templates(case, ops, prefix)
    return out + extra_templates(case, ops)


def shared_case_templates(case: Case, ops: pd.DataFrame | OperatorTable | OpsView) -> list[Template]:
    """`case_templates`, built once per distinct input in `Caches.templates` (sweep-1000: 64 distinct of
    1,142 simulated cases). The key is everything the templates are made of: the table's (section, name,
    phase) rows and what `layer_rules` reads (model, tp, sp, cp, ep, etp, activation precision, the tokens
    of each layer section and, for MoE, the dispatch bytes, which can depend on the fabric, and what the
    dispatcher does with expert TP: two dispatchers can send equal bytes, e.g. DeepEP's distinct nodes
    = top_k, and differ there). Templates are read-only once built."""
    view = ops_view(ops)
    p = case.parallelism
    prefixes = ("",) if case.training else ("prefill_", "decode_first_", "decode_last_")
    tokens = tuple(layer_tokens(case, prefix) for prefix in prefixes)
    moe = (tuple(dispatch_bytes(case, n) for n in tokens), routed_tp_copies(case), moe_tp_collectives(case),
           routed_on_sequence(case)) if moe_all_to_all(case) or routed_tp_copies(case) else ()
    key = (tuple(zip(view.section_of, view.names, view.phases)), case.model, case.training, p.tp, p.sp, p.cp, p.ep,
           p.expert_tp, case.activation_precision, tokens, moe)
    table = current().templates
    hit = table.get(key)
    if hit is None:
        hit = table.put(key, case_templates(case, view))
    return list(hit)


def layer_counts(case: Case, prefix: str = "") -> dict[str, float]:
    """Layers of each kind per pipeline stage (fractional when kinds do not split evenly)."""
    m, pp = case.model, case.parallelism.pp
    moe = m.moe_layer_count()
    out = {f"{prefix}layer_dense": (m.layers - moe) / pp, f"{prefix}layer_moe": moe / pp}
    return {k: v for k, v in out.items() if v > 0}

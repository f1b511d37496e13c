"""Turn priced templates into per-stage chunk times and the pipeline inputs of a training step.

Layers of a kind are identical, so a chunk's forward is (layers of each kind) x (replayed template span);
ZeRO-3/FSDP gathers the next layer's weights while the current one computes (one-layer prefetch), so a
layer costs max(span, gather), plus the compute the gather's NCCL CTAs slow by holding SMs
(`sharding.overlapped_layer_seconds`), and only the first gather of a chunk is exposed. Chunks hold the layers the
case's pipeline split gives them (`Parallelism.stage_chunk_layers`, uneven when pp x v does not divide
the layers), each kind in its model-wide proportion; a stage's optimizer step scales with its parameters,
and the data-parallel gradient and parameter collectives are sized for the heaviest stage, routed-expert
gradients weighted for their expert-data-parallel group (`graph.comm_nodes.expert_grad_weight`). A sharded
optimizer's parameter all-gather follows the optimizer whole, or with `overlap_param_gather` (Megatron-Core
--overlap-param-gather) bucket by bucket behind the next step's first forward (`exposed_param_gather`).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rapidllm.caches import current
from rapidllm.engine import deepspeed
from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.replay import TemplateResult, replay_template
from rapidllm.engine.sharding import (layer_collectives, layer_comm_seconds, nccl_sm_share,
                                      overlapped_layer_seconds)
from rapidllm.engine.tp_overlap import overlap_durations
from rapidllm.graph.comm_nodes import dp_reduced_parameters
from rapidllm.graph.pipeline_dag import PipelineInputs
from rapidllm.graph.schedules import interleaving
from rapidllm.graph.templates import (
    COMM,
    OpsView,
    Template,
    compute_durations,
    layer_counts,
    ops_view,
    shared_case_templates,
)
from rapidllm.memory.closed_form import reduced_gradient_bytes, state_bytes_per_param
from rapidllm.memory.state import all_stage_params, conventions, stage_layer_counts
from rapidllm.ops.price import OperatorTable, local_parameters
from rapidllm.spec.case import Case
from rapidllm.spec.hardware import DTYPE_BYTES
from rapidllm.spec.layout import TrainingWorkload

if TYPE_CHECKING:
    import pandas as pd

BUCKET_PARAMS = 40e6          # Megatron-LM default DDP bucket: max(40M, 1M x dp) parameters


@dataclass
class Replayed:
    """Replayed templates of one stage, keyed by (section, part)."""
    results: dict[tuple[str, str], TemplateResult] = field(default_factory=dict)
    comm_instances: dict[tuple, float] = field(default_factory=dict)   # (axis, op, bytes) -> per instance

    def span(self, section: str, part: str) -> float:
        r = self.results.get((section, part))
        return r.span if r else 0.0

    def compute(self, section: str, part: str) -> float:
        r = self.results.get((section, part))
        return r.compute if r else 0.0


def replay_all(case: Case, ops: pd.DataFrame | OperatorTable | OpsView, templates: list[Template], cost: CommCost, stage: int,
               overlap: bool = True, silent: tuple[str, ...] = ()) -> Replayed:
    """Replay every template of a stage; collectives of the `silent` axes take no time (to measure how much
    of a span they make).

    A replay is a function of the template and the durations and channels it is given: it is kept in
    `Caches.replays` under those values and the template object's id (templates are shared per case shape,
    `shared_case_templates`; hashing one by value would cost what the replay does). The entry holds the
    template, so the id cannot be reused while it exists, and a hit must be that very object. Layouts that
    differ only in dp or pp replay their layers with the same durations. The collectives are priced in the replay's own order
    (a fused one by `overlap_durations` only), so `cost` records the same uses either way."""
    out = Replayed()
    ops = ops_view(ops)
    p = case.parallelism
    table = current().replays
    for t in templates:
        comm = lambda axis, op, nb: 0.0 if axis in silent else cost.time(axis, op, nb, stage)
        compute = compute_durations(ops, t)
        fused = overlap_durations(t, compute, comm, p.tp, case.hardware.sm_count) \
            if p.tp_comm_overlap else None
        comms = [(i, n) for i, n in enumerate(t.nodes) if n.kind == COMM]
        key = (id(t), tuple(compute), overlap, tuple(sorted(fused.items())) if fused else None,
               tuple((fused[i] if fused and i in fused else comm(n.axis, n.op, n.nbytes), cost.dims(n.axis))
                     for i, n in comms))
        hit = table.get(key)
        if hit is None or hit[0] is not t:
            instances: dict[tuple, float] = {}
            for _, n in comms:
                k = (t.section, t.part, n.axis, n.op, n.nbytes)
                instances[k] = instances.get(k, 0) + 1
            result = replay_template(t, compute, comm, cost.dims, overlap, fused)
            result.start.flags.writeable = result.finish.flags.writeable = False     # shared by every hit
            hit = table.put(key, (t, result, instances))
        out.results[(t.section, t.part)] = hit[1]
        for k, n_inst in hit[2].items():
            out.comm_instances[k] = out.comm_instances.get(k, 0) + n_inst
    return out


def chunk_scale(case: Case, v: int) -> np.ndarray:
    """[pp, v] layers of each chunk over the mean chunk's (exactly 1.0 everywhere for an even split).
    Read-only: one array per split (`_chunk_scale`), shared by the cases that have it."""
    p = case.parallelism
    return _chunk_scale(p.stage_chunk_layers(case.model.layers), case.model.layers, p.pp, v)


@functools.lru_cache(maxsize=1024)
def _chunk_scale(chunk_layers: tuple[tuple[int, ...], ...], layers: int, pp: int, v: int) -> np.ndarray:
    split = np.array(chunk_layers, dtype=float)
    if split.shape[1] != v:          # interleaving unused (m % pp != 0): a stage's chunks run as one
        split = split.sum(axis=1, keepdims=True)
    out = split / (layers / (pp * v))
    out.flags.writeable = False
    return out


def stage_parameters(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """[pp] parameters one rank of each stage holds before ZeRO/FSDP, all and routed experts only, placed
    as the memory model places them (`memory.state.stage_params`: embedding first, head last). Read-only
    arrays, memoized in `Caches.stage_states` under what `stage_params` reads (the model, the layer split,
    pp, tp, ep, etp and the expert replication): the cases of a layout that differ in recompute, workload,
    dp or ZeRO share them."""
    conv = conventions(case)
    p = case.parallelism
    counts = stage_layer_counts(case, conv)
    key = ("stage_parameters", case.model, counts, p.pp, p.tp, p.ep, p.expert_tp, case.expert_replication)
    table = current().stage_states
    hit = table.get(key)
    if hit is None:
        stages = all_stage_params(case, conv)
        hit = np.array([st.total for st in stages]), np.array([st.experts for st in stages])
        for a in hit:
            a.flags.writeable = False
        hit = table.put(key, hit)
    return hit


# SMs DeepEP's normal (training) kernels occupy while they run: Megatron-Core's --moe-deepep-num-sms
# default (DeepEP V1's own example sets 24). NCCL's all-to-all also runs on SMs, but on a number of channels
# NCCL picks per call, so the alltoall dispatcher is not charged.
DEEPEP_SMS = 20


def dispatcher_sms(case: Case) -> int:
    """SMs the EP dispatcher's kernels take from the compute they overlap with (DeepEP only)."""
    return DEEPEP_SMS if case.parallelism.moe_dispatcher == "deepep" else 0


@dataclass
class TrainingPlan:
    inputs: PipelineInputs
    replayed: list[Replayed]
    flops_hw: float                      # executed FLOPs per step over all ranks, recomputation included
    flops_recompute: float               # the part of flops_hw that re-runs forward operators (recompute)
    # what a timeline labels the pipeline's communication nodes with (engine/schedule.py)
    templates: list[Template] = field(default_factory=list)
    p2p_bytes: float = 0.0               # activation (or gradient) bytes of one stage-to-stage send
    bucket_op: str = ""                  # DP gradient collective of one bucket
    bucket_bytes: float = 0.0
    gather_bytes: float = 0.0            # parameter all-gather after a sharded optimizer


def sharded_layer_params(case: Case) -> float:
    """Parameters of one layer on one rank before ZeRO-3 / FSDP sharding (the layer's share of the stage)."""
    return local_parameters(case) / max(case.model.layers / case.parallelism.pp, 1)


def sharded_layer_bytes(case: Case) -> tuple[float, float]:
    """(all-gather, reduce-scatter) bytes per layer under ZeRO-3 / FSDP full_shard, else (0, 0)."""
    p = case.parallelism
    if p.dp_cp <= 1 or not (p.zero == 3 or p.fsdp == "full_shard"):
        return 0.0, 0.0
    per_layer = sharded_layer_params(case)
    w = state_bytes_per_param(case.weight_precision, p.fp32_grad_accum)[0]
    return per_layer * w, per_layer * reduced_gradient_bytes(case)


def p2p_bytes(case: Case) -> float:
    """Activation bytes one pipeline send carries per rank: a micro-batch's hidden states on one CP shard,
    divided by tp: under sequence parallelism each rank sends its SP shard; without it each TP rank sends
    1/tp of the (replicated) tensor and the receivers all-gather it over the TP group (Megatron-LM's
    scatter/gather optimization, Narayanan et al. 2021 §4.1, `scatter_gather_tensors_in_pipeline`, on by
    default; `p2p_gather_bytes`)."""
    w, p = case.workload, case.parallelism
    assert isinstance(w, TrainingWorkload)
    b = DTYPE_BYTES[case.activation_precision]
    return w.micro_batch * w.seq_len // p.cp * case.model.hidden * b / p.tp


def p2p_gather_bytes(case: Case) -> float:
    """Bytes of the TP all-gather that reassembles a scattered pipeline send (tp > 1 without SP), else 0."""
    p = case.parallelism
    return p2p_bytes(case) * p.tp if p.tp > 1 and not p.sp else 0.0


def _sharded_layer_comm(case: Case, cost: CommCost, stage: int) -> tuple[float, float]:
    """(gather, reduce-scatter) seconds per layer under ZeRO-3 / FSDP full_shard, else (0, 0)."""
    gather, scatter = sharded_layer_bytes(case)
    if not gather:
        return 0.0, 0.0
    return layer_comm_seconds(case, cost, stage, gather, scatter, sharded_layer_params(case))


@dataclass(frozen=True)
class GradientBuckets:
    """The heaviest stage's data-parallel gradient reduction as Megatron-LM buckets it: the step ends with
    it (and a sharded optimizer's parameter gather), so the engine times it and a search bounds it from
    this one sizing. `op` is "" where nothing is bucketed (dp 1, ZeRO-3 / full_shard reduce per layer)."""
    op: str = ""                 # reduce_scatter (sharded optimizer) or all_reduce
    count: int = 0               # buckets per model chunk
    nbytes: float = 0.0          # gradient bytes per bucket
    sharded: bool = False        # ZeRO-1/2 or shard_grad_op: the weights are gathered after the optimizer
    gather_bytes: float = 0.0    # the heaviest stage's weights, which that gather moves
    stage: int = 0               # the heaviest stage


def gradient_buckets(case: Case, v: int, stage_params: tuple[np.ndarray, np.ndarray] | None = None) -> GradientBuckets:
    """`GradientBuckets` of a training case run with `v` model chunks per stage: max(40M, 1M x dp)
    parameters per bucket (Megatron-LM's DDP default, `BUCKET_PARAMS`) over the heaviest stage's chunk.
    `stage_params`: `stage_parameters(case)` when the caller has it."""
    p = case.parallelism
    if p.dp_cp <= 1 or p.zero == 3 or p.fsdp == "full_shard":
        return GradientBuckets()
    params, expert_params = stage_params if stage_params is not None else stage_parameters(case)
    heavy = int(params.argmax())
    heaviest = dp_reduced_parameters(case, float(params[heavy]), float(expert_params[heavy]))
    wb, gb = state_bytes_per_param(case.weight_precision, p.fp32_grad_accum)[0], reduced_gradient_bytes(case)
    sharded = p.zero in (1, 2) or p.fsdp == "shard_grad_op"
    chunk_params = heaviest / v
    size = deepspeed.BUCKET_ELEMENTS if deepspeed.runs_pipeline_engine(case) else max(BUCKET_PARAMS, 1e6 * p.dp_cp)
    buckets = max(1, math.ceil(chunk_params / size))
    return GradientBuckets("reduce_scatter" if sharded else "all_reduce", buckets, chunk_params * gb / buckets,
                           sharded, heaviest * wb, heavy)


def exposed_param_gather(bucket_s: float, buckets: int, forward_s: float) -> float:
    """Exposed time of a sharded optimizer's parameter all-gather under Megatron-Core's
    --overlap-param-gather (megatron/core/distributed: the gathers of the updated parameters are issued
    bucket by bucket, the grads' buckets, from the next step's forward pre-hooks, one bucket ahead of its
    use). The first bucket is always waited for; the gathers run back to back on their own stream while
    the first micro-batch's forward (forward_s, the stage's chunks) computes, and whatever they take beyond
    it is exposed too: max(one bucket, all buckets - forward)."""
    return max(bucket_s, buckets * bucket_s - forward_s)


def _chunk_times(case: Case, replayed: list[Replayed], cost: CommCost, v: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """[pp, v] forward span, forward compute, backward span and backward compute of each chunk.

    Whole arrays per layer section, in the order a per-chunk loop adds them (each element sees the same
    products and sums; `max(a, b)` is spelled `where(b > a, b, a)` as Python's builtin decides), then the
    first and last chunk's extra sections."""
    p = case.parallelism
    f_span, f_comp, b_span, b_comp = (np.zeros((p.pp, v)) for _ in range(4))
    scale = chunk_scale(case, v)
    per_stage = [replayed[s if not cost.symmetric else 0] for s in range(p.pp)]
    # Columns alike on every stage (no sharded-layer traffic; every stage replaying the same templates) are
    # Python floats, which broadcast as the [pp, 1] columns of one value did: the same elementwise doubles
    # with a third of the numpy calls.
    sharded = bool(sharded_layer_bytes(case)[0])
    if sharded:
        comm = np.array([_sharded_layer_comm(case, cost, s) for s in range(p.pp)], dtype=float).reshape(p.pp, 2)
        gather, scatter = comm[:, :1], comm[:, 1:]
        share = nccl_sm_share(case, cost)
    if cost.symmetric:          # every stage replays the same templates: one value per column
        column = lambda get: float(get(per_stage[0]))     # noqa: E731
    else:
        column = lambda get: np.array([get(r) for r in per_stage], dtype=float)[:, None]     # noqa: E731
    counts = layer_counts(case)
    for section, n in counts.items():
        n_chunk = n / v * scale
        fs, bs = column(lambda r: r.span(section, "fwd")), column(lambda r: r.span(section, "bwd"))
        fc, bc = column(lambda r: r.compute(section, "fwd")), column(lambda r: r.compute(section, "bwd"))
        if sharded:
            f_span += n_chunk * overlapped_layer_seconds(fs, fc, gather, share)
            b_span += n_chunk * overlapped_layer_seconds(bs, bc, gather + scatter, share)
        else:
            f_span += n_chunk * fs
            b_span += n_chunk * bs
        f_comp += n_chunk * fc
        b_comp += n_chunk * bc
    if sharded:     # once per chunk, whatever its layer kinds: the first gather and the last reduce-scatter
        exposed = np.where((gather != 0) & (sum(counts.values()) / v * scale != 0), gather, 0.0)   # empty: none
        f_span += exposed
        b_span += np.where(exposed != 0, exposed + scatter, 0.0)
    for section, (s, c) in (("first_stage", (0, 0)), ("last_stage", (p.pp - 1, v - 1))):
        r = per_stage[s]
        f_span[s, c] += r.span(section, "extra_fwd")
        f_comp[s, c] += r.compute(section, "extra_fwd")
        b_span[s, c] += r.span(section, "extra_bwd")
        b_comp[s, c] += r.compute(section, "extra_bwd")
    return f_span, f_comp, b_span, b_comp


def training_plan(case: Case, ops: pd.DataFrame | OperatorTable | OpsView, cost: CommCost, overlap: bool = True,
                  templates: list[Template] | None = None) -> TrainingPlan:
    w, p = case.workload, case.parallelism
    assert isinstance(w, TrainingWorkload)
    m = max(w.microbatches(p.dp), 1)
    v = interleaving(p.schedule, p.pp, p.virtual_stages, m)
    view = ops_view(ops)
    templates = templates if templates is not None else shared_case_templates(case, view)
    stages = range(p.pp) if not cost.symmetric else [0]
    replayed = [replay_all(case, view, templates, cost, s if not cost.symmetric else -1, overlap) for s in stages]
    counts = layer_counts(case)
    for (section, _part, axis, op, nb), k in replayed[0].comm_instances.items():
        cost.count(axis, op, nb, k * counts.get(section, 0.0) * m)
    layer_gather, layer_scatter = sharded_layer_bytes(case)
    if layer_gather:
        (ng, gb), (ns, sb) = layer_collectives(case, layer_gather, layer_scatter, sharded_layer_params(case))
        cost.count("dp", "all_gather", gb, 2 * ng * m * case.model.layers / p.pp)
        cost.count("dp", "reduce_scatter", sb, ns * m * case.model.layers / p.pp)
    f_span, f_comp, b_span, b_comp = _chunk_times(case, replayed, cost, v)
    f_hidden = b_hidden = None
    if p.moe_a2a_overlap:                  # the spec admits it only for MoE training with ep > 1
        quiet = [replay_all(case, view, templates, cost, s if not cost.symmetric else -1, overlap, ("ep",))
                 for s in stages]
        f_quiet, _, b_quiet, _ = _chunk_times(case, quiet, cost, v)
        share = 1.0 - dispatcher_sms(case) / case.hardware.sm_count
        f_hidden = share * np.maximum(f_span - f_quiet, 0.0)
        b_hidden = share * np.maximum(b_span - b_quiet, 0.0)
    act, regather = p2p_bytes(case), p2p_gather_bytes(case)
    ds = deepspeed.runs_pipeline_engine(case)

    def send(s: int) -> float:
        gather = cost.time("tp", "all_gather", regather, s) if regather else 0.0
        if ds:                                  # its metadata send first (engine/deepspeed.py)
            return deepspeed.meta_send_seconds(case, cost, s) + cost.time("pp", "send_recv", act, s) + gather
        return cost.time("pp", "send_recv", act, s) + gather
    # a stage's backward send crosses the boundary before it (the first stage's, interleaved, the wrap-around
    # from the last): `send` of that boundary; boundaries alike on the fabric share one simulation (CommCost)
    senders = [s for s in range(p.pp) if s + 1 < p.pp or v > 1]
    sends = {s: send(s) for s in senders}
    p2p_f = np.array([sends[s] if s + 1 < p.pp or v > 1 else 0.0 for s in range(p.pp)])
    p2p_b = np.array([sends[(s - 1) % p.pp] if s > 0 or v > 1 else 0.0 for s in range(p.pp)])
    cost.count("pp", "send_recv", act, 2 * m * v)
    if regather and p.pp > 1:
        cost.count("tp", "all_gather", regather, 2 * m * v)
    if ds and p.pp > 1:         # the own output re-gathered before each backward, all stages but the last
        b_span = b_span + np.array([[deepspeed.backward_regather_seconds(case, cost, regather, s)]
                                    for s in range(p.pp)])
        if regather:
            cost.count("tp", "all_gather", regather, m)
        if p.tp > 1:
            cost.count("pp", "send_recv", deepspeed.meta_bytes(p.tp), 2 * m)
    stage_params = stage_parameters(case)
    params = stage_params[0]
    grads = gradient_buckets(case, v, stage_params)
    buckets = grads.count
    bucket_s: float | np.ndarray = 0.0
    gather_s: float | np.ndarray = 0.0
    op, bucket_bytes, gather_bytes = grads.op, grads.nbytes, 0.0
    # every stage's data-parallel groups alike, or (faults) each stage's own: a fault on one stage's DP links
    # slows that stage's reduction only (all stages took stage 0's)

    def each(seconds: Callable[[int], float]) -> float | np.ndarray:
        return seconds(0) if cost.symmetric else np.array([seconds(s) for s in range(p.pp)])
    if op:
        bucket_s = each(lambda s: cost.time("dp", op, bucket_bytes, s))
        cost.count("dp", op, bucket_bytes, buckets * v)
        if grads.sharded and p.overlap_param_gather:
            gather_bytes = grads.gather_bytes / (buckets * v)
            gather_s = each(lambda s: exposed_param_gather(cost.time("dp", "all_gather", gather_bytes, s),
                                                           buckets * v, float(f_span[grads.stage].sum())))
            cost.count("dp", "all_gather", gather_bytes, buckets * v)
        elif grads.sharded:
            gather_bytes = grads.gather_bytes
            gather_s = each(lambda s: cost.time("dp", "all_gather", gather_bytes, s))
            cost.count("dp", "all_gather", gather_bytes, 1)
    # the same row selections, products and sums as the pandas masks they replace (table order kept)
    timed = view.timed
    opt = float(timed[view.sections.get("optimizer", [])].sum()) * (params / params.mean())   # each stage by its share
    inputs = PipelineInputs(p.schedule, p.pp, v, m, f_span, f_comp, b_span, b_comp, p2p_f, p2p_b, buckets,
                            bucket_s, opt, gather_s, cost.dims("pp"), cost.dims("dp"), f_hidden, b_hidden,
                            grad_overlap=p.overlap_grad_reduce, p2p_blocking=not p.p2p_overlapped,
                            p2p_serial=ds and v == 1 and not p.p2p_overlapped)
    extras = tuple(sorted(view.sections.get("first_stage", []) + view.sections.get("last_stage", [])))

    def step_flops(recompute_only: bool) -> float:
        per_stage = sum(n * view.flops_sum(tuple(view.sections.get(section, ())), recompute_only)
                        for section, n in counts.items())
        return (per_stage * p.pp + view.flops_sum(extras, recompute_only)) * m * p.dp * p.tp * p.cp
    return TrainingPlan(inputs, replayed, step_flops(False), step_flops(True), templates,
                        act, op, bucket_bytes, gather_bytes)

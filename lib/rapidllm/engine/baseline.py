"""Baseline step-time composition: per-layer compute plus exposed alpha-beta communication.

Training (per step): every pipeline stage runs m micro-batches of fwd + recompute + bwd; TP, CP and EP
collectives add to each layer without overlap; the pipeline bubble adds (pp-1)/v stage times (Narayanan
et al. 2021); the data-parallel gradient reduction and the optimizer step follow the last backward.
Inference: prefill, then decode steps whose attention grows linearly with the context (priced at the
first and last step and averaged, exact for a linear cost). This is the "before" model of the paper's
ablations; the event-driven engine replaces it. It deliberately prices no overlap option
(`tp_comm_overlap`, `overlap_p2p_comm`, `microbatch_overlap`, ...): it is the ablation's no-overlap
reference, so such a case gets the same baseline time as without the option. For the same reason ZeRO-3 /
FSDP's per-layer gathers and reduce-scatters add to the step whole, and the SMs that NCCL's CTAs hold while
the event engine overlaps them with compute (`engine/sharding.py: nccl_sm_share`) are not charged: no
compute runs beside them here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rapidllm.engine.groups import group_link
from rapidllm.engine.metrics import hardware_flops_per_step, model_flops_per_step, utilization
from rapidllm.graph.comm_nodes import CommNode
from rapidllm.graph.templates import layer_counts
from rapidllm.memory.closed_form import MemoryResult
from rapidllm.network.alpha_beta import collective_time
from rapidllm.ops.workload import recomputed
from rapidllm.spec.case import Case
from rapidllm.spec.layout import InferenceWorkload, TrainingWorkload

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Prediction:
    step_time_s: float = 0.0
    compute_time_s: float = 0.0
    exposed_comm_s: float = 0.0
    bubble_s: float = 0.0
    mfu: float = 0.0
    hfu: float = 0.0
    tokens_per_s: float = 0.0
    ttft_s: float = 0.0
    itl_s: float = 0.0
    e2e_latency_s: float = 0.0


def _section_time(ops: pd.DataFrame, section: str, phases: tuple[str, ...] | None = None) -> float:
    sel = ops[ops.section == section]
    if phases:
        sel = sel[sel.phase.isin(phases)]
    return float((sel.time_s * sel["count"]).sum())


def _section_flops(ops: pd.DataFrame, section: str, phase: str | None = None) -> float:
    sel = ops[(ops.section == section) & ((ops.phase == phase) if phase else True)]
    return float((sel.flops * sel["count"]).sum())


def _comm(case: Case, axis: str, op: str, nbytes: float) -> float:
    """Alpha-beta time of one collective plus its per-call base latency and kernel launch (as the event
    engine charges them)."""
    link = group_link(case, axis, case.hardware.utilization.network)
    if link.size <= 1 or nbytes <= 0:
        return 0.0
    return (collective_time(op, nbytes, link.size, link.bandwidth, link.latency_s) + link.collective_latency_s
            + case.hardware.launch_overhead_s)


def _layer_mix(case: Case, prefix: str) -> list[tuple[str, float]]:
    """(section, layers of that kind on the heaviest pipeline stage): the slowest stage paces the pipeline."""
    m, p = case.model, case.parallelism
    heaviest = max(p.stage_layers(m.layers)) / (m.layers / p.pp)
    return [(s, n * heaviest) for s, n in layer_counts(case, prefix).items()]


def comm_time(case: Case, nodes: list[CommNode], scope: str, tokens_scale: float = 1.0,
              passes: bool = False) -> float:
    """Alpha-beta time of all nodes of one scope (bytes scaled for decode steps); `passes` counts each layer
    collective once per traversal that runs it (forward, backward, and recompute when it reruns it)."""
    return sum(n.count * _comm(case, n.axis, n.op, n.nbytes * tokens_scale)
               * (recompute_passes(case, n.axis, n.rerun) if passes else 1) for n in nodes if n.scope == scope)


def recompute_passes(case: Case, axis: str, rerun: str = "") -> int:
    """Traversals of a layer that run its `axis` collectives: 3 when recompute reruns them (full; selective:
    CP before a recomputed attention core, EP around a recomputed MoE block, or the operator a node names,
    `CommNode.rerun`: the expert-TP pair of etp = tp before recomputed experts, the MLP position's TP pair
    with a recomputed MLP, MoE block or shared experts, whose checkpoint re-runs the fc1 gather and the fc2
    reduce-scatter inside it), else 2."""
    p = case.parallelism
    if p.recompute == "full":
        return 3
    again = rerun or {"cp": "attn", "ep": "router"}.get(axis)
    return 3 if again and recomputed(again, p.recompute, p.recompute_modules) else 2


def compose_training(case: Case, ops: pd.DataFrame, nodes: list[CommNode]) -> Prediction:
    w, p = case.workload, case.parallelism
    assert isinstance(w, TrainingWorkload)
    micro = w.microbatches(p.dp)
    compute = comm = flops = again = 0.0
    for section, n in _layer_mix(case, ""):
        compute += n * _section_time(ops, section)
        comm += n * comm_time(case, nodes, section, passes=True)
        flops += n * _section_flops(ops, section)
        again += n * _section_flops(ops, section, "recompute")
    extras = max(_section_time(ops, "first_stage"), _section_time(ops, "last_stage"))
    if p.pp == 1:
        extras = _section_time(ops, "first_stage") + _section_time(ops, "last_stage")
    p2p = comm_time(case, nodes, "pp")
    stage = compute + extras + comm + p2p
    bubble = (p.pp - 1) / (p.virtual_stages if p.schedule == "interleaved" else 1) * stage
    dp = comm_time(case, nodes, "dp") + micro * comm_time(case, nodes, "fsdp", passes=True)
    optimizer = _section_time(ops, "optimizer")
    step = micro * stage + bubble + dp + optimizer
    hw_flops = (flops + _section_flops(ops, "first_stage") + _section_flops(ops, "last_stage")) * micro * p.pp * p.dp * p.tp * p.cp
    again += _section_flops(ops, "first_stage", "recompute") + _section_flops(ops, "last_stage", "recompute")
    hw_flops = hardware_flops_per_step(case, hw_flops, again * micro * p.pp * p.dp * p.tp * p.cp)
    return Prediction(
        step_time_s=step, compute_time_s=micro * (compute + extras) + optimizer,
        exposed_comm_s=micro * (comm + p2p) + dp, bubble_s=bubble,
        mfu=utilization(model_flops_per_step(case), step, case), hfu=utilization(hw_flops, step, case),
        tokens_per_s=w.global_batch * w.seq_len / step)


def compose_inference(case: Case, ops: pd.DataFrame, nodes: list[CommNode]) -> Prediction:
    w, p = case.workload, case.parallelism
    assert isinstance(w, InferenceWorkload)

    def pass_time(prefix: str, scale: float) -> float:
        t = sum(n * p.pp * (_section_time(ops, s) + comm_time(case, nodes, s.removeprefix(prefix), scale))
                for s, n in _layer_mix(case, prefix))
        hops = (p.pp - 1) / 2 * comm_time(case, nodes, "pp", scale)
        return t + _section_time(ops, f"{prefix}head") + hops

    ttft = pass_time("prefill_", 1.0)
    # decode moves each sequence's step queries (1 + draft tokens) instead of the prompt; a step emits
    # tokens_per_step tokens per sequence on average (speculative decoding, as engine/inference.py)
    decode_scale = w.step_queries / w.prompt_tokens
    itl = 0.0
    if w.output_tokens:                      # an encoder's forward pass (output_tokens 0) decodes nothing
        step = 0.5 * (pass_time("decode_first_", decode_scale) + pass_time("decode_last_", decode_scale))
        itl = step / w.tokens_per_step
    e2e = ttft + max(w.output_tokens - 1, 0) * itl
    return Prediction(step_time_s=e2e, compute_time_s=e2e, ttft_s=ttft, itl_s=itl, e2e_latency_s=e2e,
                      tokens_per_s=w.rate_tokens / e2e)


def compose(case: Case, ops: pd.DataFrame, memory: MemoryResult, nodes: list[CommNode]) -> dict:
    """Prediction plus memory as one flat record with the stable snake_case keys of the README."""
    pred = compose_training(case, ops, nodes) if case.training else compose_inference(case, ops, nodes)
    record = dict(pred.__dict__)
    record.update(memory.verdict())
    return record

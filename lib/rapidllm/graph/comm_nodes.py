"""The communication nodes of a case, per scope, as the trace stage records them.

Scopes: `layer_dense`/`layer_moe` (per layer per traversal: TP all-reduces, CP key/value gather, EP
dispatch+combine), `pp` (per micro-batch per stage boundary), `dp` (per step, gradient reduction) and
`fsdp` (per micro-batch per traversal, parameter gathers). Counts follow Megatron-LM: two TP all-reduces
per layer per traversal (after attention and after the MLP; with SP a reduce-scatter + all-gather pair of
the same volume), two all-to-alls per MoE layer per traversal.
"""
from __future__ import annotations

from dataclasses import dataclass

from rapidllm.memory.closed_form import state_bytes_per_param
from rapidllm.ops.price import local_parameters
from rapidllm.spec.case import Case, InferenceWorkload, TrainingWorkload
from rapidllm.spec.hardware import DTYPE_BYTES


@dataclass(frozen=True)
class CommNode:
    scope: str
    axis: str
    op: str
    nbytes: float
    count: float          # occurrences per scope unit


def layer_nodes(case: Case, tokens: int, scope: str) -> list[CommNode]:
    m, p = case.model, case.parallelism
    b = DTYPE_BYTES[case.precision]
    act = tokens * m.hidden * b
    nodes = []
    if p.tp > 1:
        nodes.append(CommNode(scope, "tp", "all_reduce", act, 2))
    if p.cp > 1:
        nodes.append(CommNode(scope, "cp", "all_gather", 2.0 * m.kv_dim * b * tokens * p.cp / p.tp, 1))
    if scope.endswith("moe") and m.moe and p.ep > 1:
        nodes.append(CommNode(scope, "ep", "all_to_all", act * m.moe.top_k, 2))
    return nodes


def communication_nodes(case: Case) -> list[CommNode]:
    m, p = case.model, case.parallelism
    w = case.workload
    b = DTYPE_BYTES[case.precision]
    if isinstance(w, TrainingWorkload):
        tokens = w.micro_batch * w.seq_len // p.cp
    else:
        assert isinstance(w, InferenceWorkload)
        tokens = w.batch * w.prompt_tokens
    nodes = layer_nodes(case, tokens, "layer_dense") + layer_nodes(case, tokens, "layer_moe")
    if p.pp > 1:
        nodes.append(CommNode("pp", "pp", "send_recv", tokens * m.hidden * b / (p.tp if p.sp else 1), 2))
    if isinstance(w, TrainingWorkload) and p.dp > 1:
        grads = local_parameters(case) * state_bytes_per_param(case.precision, p.fp32_grad_accum)[1]
        if p.zero >= 2 or p.fsdp != "none":
            nodes += [CommNode("dp", "dp", "reduce_scatter", grads, 1), CommNode("dp", "dp", "all_gather", grads, 1)]
        else:
            nodes.append(CommNode("dp", "dp", "all_reduce", grads, 1))
        if p.zero == 3 or p.fsdp == "full_shard":
            weights = local_parameters(case) * DTYPE_BYTES[case.precision]
            nodes.append(CommNode("fsdp", "dp", "all_gather", weights, 1))
    return nodes

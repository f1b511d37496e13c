"""Two-micro-batch overlap of an inference forward pass (`parallelism.microbatch_overlap: 2`).

DeepSeek's inference system splits every prefill and decode step into two micro-batches and alternates
them so that one's expert-parallel dispatch and combine run while the other computes ("Day 6: One More
Thing, DeepSeek-V3/R1 Inference System Overview", 2025-03-01); SGLang (`--enable-two-batch-overlap`) and
vLLM (`--enable-dbo`, docs/design/dbo.md) run the same, both off by default. Modelled from the pieces the
engine already prices, nothing fitted:

- the step's sequences split into two micro-batches of ceil(B/2) and floor(B/2) (`split_batch`; B = 1
  does not split and runs the plain pass); each micro-batch is priced as its own case, so GEMM shapes,
  expert loads and all-to-all sizes are those of half the tokens and every weight is read once per
  micro-batch (twice per step where the GEMMs are memory-bound);
- each micro-batch's chain of decoder layers (model order) is cut into blocks at every
  compute operator that waits for a collective of its own micro-batch (for an MoE layer: the experts wait
  for the dispatch, the unpermute for the combine); the compute stream runs the blocks alternately, block k
  of micro-batch 0, then block k of micro-batch 1 (DeepSeek's prefill figure: attention 0, attention 1,
  MoE 0, MoE 1, ...), while the collectives run on their network channels as soon as their producer has
  finished (`replay.replay_template`'s list-scheduling rule over the merged chain). Each stage of the
  pipeline thus lasts the longer of one micro-batch's compute block and the other's collective, and the
  pass adds the fill (the first block before any collective) and the drain;
- DeepEP's normal kernels (prefill) hold SMs while they run (`composer.DEEPEP_SMS`, the DeepEP default
  vLLM and Megatron-Core use), so compute beside them runs on the rest; the low-latency kernels (decode)
  hold none (DeepEP README: "hook-based communication-computation overlapping ... does not occupy any SM";
  DeepSeek's profile-data README: in decoding "all-to-all communication ... does not occupy GPU SMs");
- the head (final norm, LM head, MTP modules) runs once on the whole batch after the layers, as in SGLang,
  whose `model_forward_maybe_tbo` wraps the decoder layers only.

Not modelled: DeepSeek's decode splits attention into two steps so a 5-stage pipeline balances better
(the blocks here are cut only at collectives), and the CPU-side launch and synchronization of the two
micro-batches.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import dispatcher_sms
from rapidllm.engine.replay import TemplateResult, replay_template
from rapidllm.graph.templates import COMM, COMPUTE, Node, Template, compute_durations, extra_templates, \
    layer_counts, layer_templates, ops_view
from rapidllm.ops.price import OperatorTable, as_frame, price_table
from rapidllm.spec.case import Case
from rapidllm.spec.layout import InferenceWorkload

if TYPE_CHECKING:                  # pandas stays off the prediction path (docs/performance.md)
    import pandas as pd

    from rapidllm.graph.templates import OpsView

Adjust = Callable[["pd.DataFrame"], "pd.DataFrame"]
Ops = "pd.DataFrame | OperatorTable | OpsView"


def split_batch(batch: int, parts: int) -> tuple[int, ...]:
    """Sequences of each micro-batch: as even as possible, larger first, every one non-empty; (batch,)
    when there are too few sequences to split."""
    parts = min(parts, batch)
    base, extra = divmod(batch, parts)
    return tuple(base + (k < extra) for k in range(parts))


def overlap_active(case: Case) -> bool:
    """Whether a forward pass of the case runs split into overlapped micro-batches."""
    w = case.workload
    return isinstance(w, InferenceWorkload) and len(split_batch(w.batch, case.parallelism.microbatch_overlap)) > 1


def at_batch(case: Case, ops: Ops, batch: int, adjust: Adjust | None) -> tuple[Case, Ops]:
    """The case and its priced operators with `batch` sequences (the given ones when the batch matches)."""
    w = case.workload
    if batch == w.batch:
        return case, ops
    bcase = dataclasses.replace(case, workload=dataclasses.replace(w, batch=batch))
    bops = price_table(bcase)
    return bcase, adjust(as_frame(bops)) if adjust else bops


def micro_cases(case: Case, ops: Ops, adjust: Adjust | None = None) -> list[tuple[Case, Ops]]:
    """Each micro-batch as its own case with its priced operators (one pricing per distinct size)."""
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    priced: dict[int, tuple[Case, Ops]] = {}
    out = []
    for b in split_batch(w.batch, case.parallelism.microbatch_overlap):
        if b not in priced:
            priced[b] = at_batch(case, ops, b, adjust)
        out.append(priced[b])
    return out


def _chain(case: Case, ops: Ops, prefix: str) -> tuple[list[Node], list[float]]:
    """One micro-batch's decoder layers (model order, dense first) as a single node list with its compute
    durations. A collective launched before a layer's first operator depends on the previous compute node
    of the chain."""
    view = ops_view(ops)
    by_section = {t.section: t for t in layer_templates(case, view, prefix)}
    nodes: list[Node] = []
    durations: list[float] = []
    last_compute = -1
    for section, n in layer_counts(case, prefix).items():
        t = by_section[section]
        for _ in range(round(n)):
            base, before = len(nodes), last_compute
            for node in t.nodes:
                deps = tuple(base + d for d in node.deps)
                if node.kind == COMM and not deps and before >= 0:
                    deps = (before,)
                if node.kind == COMPUTE:
                    last_compute = len(nodes)
                nodes.append(dataclasses.replace(node, deps=deps))
            durations += compute_durations(view, t)
    return nodes, durations


def _blocks(nodes: list[Node]) -> list[tuple[int, int]]:
    """[start, end) slices of a chain, cut before every compute node that waits for a collective."""
    cuts = [0] + [i for i, n in enumerate(nodes) if i and n.kind == COMPUTE
                  and any(nodes[d].kind == COMM for d in n.deps)] + [len(nodes)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def merged_template(chains: list[tuple[list[Node], list[float]]], section: str) -> tuple[Template, list[float]]:
    """The micro-batches' chains as one template whose compute stream takes their blocks in turn."""
    blocks = [_blocks(nodes) for nodes, _ in chains]
    where: list[dict[int, int]] = [{} for _ in chains]
    compute_index = [{i: k for k, i in enumerate(j for j, n in enumerate(nodes) if n.kind == COMPUTE)}
                     for nodes, _ in chains]
    out: list[Node] = []
    durations: list[float] = []
    for k in range(max(len(b) for b in blocks)):
        for m, (nodes, dur) in enumerate(chains):
            if k >= len(blocks[m]):
                continue
            a, b = blocks[m][k]
            for i in range(a, b):
                node = nodes[i]
                where[m][i] = len(out)
                out.append(dataclasses.replace(node, deps=tuple(where[m][d] for d in node.deps)))
                if node.kind == COMPUTE:
                    durations.append(dur[compute_index[m][i]])
    return Template(section, "fwd", out), durations


def overlapped_replay(case: Case, ops: Ops, prefix: str, cost: CommCost, overlap: bool = True,
                      adjust: Adjust | None = None) -> TemplateResult:
    """The decoder layers of one forward pass (section prefix) as merged micro-batch chains, replayed on
    the single pipeline stage the spec admits: span, compute and communication summed over the
    micro-batches."""
    chains = [_chain(bcase, bops, prefix) for bcase, bops in micro_cases(case, ops, adjust)]
    template, durations = merged_template(chains, f"{prefix}microbatches")
    share = dispatcher_sms(case) / case.hardware.sm_count if prefix.startswith("prefill") else 0.0
    return replay_template(template, durations, cost.time, cost.dims, overlap,
                           sm_share=(lambda axis: share if axis == "ep" else 0.0) if share else None)


def overlapped_pass(case: Case, ops: Ops, prefix: str, cost: CommCost, overlap: bool = True,
                    adjust: Adjust | None = None) -> tuple[float, float]:
    """(time, compute time) of one forward pass: the layers as overlapped micro-batches, then the head
    (final norm, LM head, MTP modules) once on the whole batch."""
    layers = overlapped_replay(case, ops, prefix, cost, overlap, adjust)
    view = ops_view(ops)
    span, compute = layers.span, layers.compute
    for t in extra_templates(case, view):
        if t.section == f"{prefix}head":
            head = replay_template(t, compute_durations(view, t), cost.time, cost.dims, overlap)
            span, compute = span + head.span, compute + head.compute
    return span, compute

"""Inference on the engine: prefill, decode steps with a growing KV cache, static or in-flight batching.

A forward pass walks every pipeline stage in turn (no micro-batching across stages): layers x replayed
template span, the LM head, and pp-1 activation sends. Decode attention grows linearly with the
context, so the mean decode step is the mean of the first and last step (exact for a linear cost).

Static batching (concurrency <= batch): TTFT = prefill(batch), ITL = decode step(batch),
e2e = TTFT + (output_tokens - 1) x ITL, throughput = batch x output_tokens / e2e.
In-flight batching (concurrency C > batch, a serving engine such as vLLM/TensorRT-LLM): decode steps run
with C sequences; every step also absorbs the prefills of the requests that replace finished ones,
C / (batch x output_tokens) requests per step on average, so ITL = decode(C) + that share of prefill;
a new request waits on average half a step before its prefill, TTFT = prefill(batch) + ITL / 2;
throughput = C / ITL tokens per second. This is a steady-state mean, not a queueing model.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pandas as pd

from rapidllm.engine.collectives import CommCost
from rapidllm.engine.composer import layer_counts, replay_all
from rapidllm.graph.templates import extra_templates, layer_templates
from rapidllm.spec.case import Case, InferenceWorkload
from rapidllm.spec.hardware import DTYPE_BYTES

Adjust = Callable[[pd.DataFrame], pd.DataFrame]


def forward_pass(case: Case, ops: pd.DataFrame, prefix: str, cost: CommCost, overlap: bool) -> tuple[float, float]:
    """(time, compute time) of one forward pass through all stages for a section prefix."""
    w, p = case.workload, case.parallelism
    assert isinstance(w, InferenceWorkload)
    heads = [t for t in extra_templates(case, ops) if t.section == f"{prefix}head"]
    r = replay_all(case, ops, layer_templates(case, ops, prefix) + heads, cost, -1, overlap)
    span = compute = 0.0
    for section, n in layer_counts(case, prefix).items():
        span += n * p.pp * r.span(section, "fwd")
        compute += n * p.pp * r.compute(section, "fwd")
    span += r.span(f"{prefix}head", "extra_fwd")
    compute += r.compute(f"{prefix}head", "extra_fwd")
    tokens = w.batch * (w.prompt_tokens if prefix.startswith("prefill") else 1)
    span += (p.pp - 1) * cost.time("pp", "send_recv", tokens * case.model.hidden * DTYPE_BYTES[case.precision])
    return span, compute


def predict_inference(case: Case, ops: pd.DataFrame, overlap: bool = True, adjust: Adjust | None = None) -> dict:
    w = case.workload
    assert isinstance(w, InferenceWorkload)
    cost = CommCost(case)
    ttft, ttft_c = forward_pass(case, ops, "prefill_", cost, overlap)
    serving = w.concurrency > w.batch
    dcase, dops = case, ops
    if serving:
        from rapidllm.ops.price import price_case
        dcase = dataclasses.replace(case, workload=dataclasses.replace(w, batch=w.concurrency))
        dops = price_case(dcase)
        dops = adjust(dops) if adjust else dops
    dcost = CommCost(dcase) if serving else cost
    first, first_c = forward_pass(dcase, dops, "decode_first_", dcost, overlap)
    last, last_c = forward_pass(dcase, dops, "decode_last_", dcost, overlap)
    step, step_c = 0.5 * (first + last), 0.5 * (first_c + last_c)
    if serving:
        share = w.concurrency / (w.batch * max(w.output_tokens, 1))
        itl, itl_c = step + share * ttft, step_c + share * ttft_c
        ttft, ttft_c = ttft + 0.5 * itl, ttft_c + 0.5 * itl_c
    else:
        itl, itl_c = step, step_c
    e2e = ttft + (w.output_tokens - 1) * itl
    compute = ttft_c + (w.output_tokens - 1) * itl_c
    rate = w.concurrency / itl if serving else w.batch * w.output_tokens / e2e
    return dict(step_time_s=e2e, compute_time_s=compute, exposed_comm_s=e2e - compute, bubble_s=0.0, mfu=0.0,
                hfu=0.0, tokens_per_s=rate, ttft_s=ttft, itl_s=itl, e2e_latency_s=e2e,
                network_events_simulated=float(cost.simulated + (dcost.simulated if serving else 0)))

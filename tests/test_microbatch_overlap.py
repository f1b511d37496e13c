"""Two-micro-batch overlap of inference passes (parallelism.microbatch_overlap, engine/microbatch.py):
bounds of a list schedule, token conservation, the cost of the split without communication, the SM share
of DeepEP's normal kernels, and the spec rules."""
from __future__ import annotations

import dataclasses

import pytest

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.inference import forward_pass
from rapidllm.engine import microbatch
from rapidllm.engine.microbatch import micro_cases, overlapped_replay, split_batch
from rapidllm.engine.replay import replay_template
from rapidllm.graph.templates import COMM, COMPUTE, Node, Template, layer_templates, layer_tokens
from rapidllm.ops.price import price_case
from rapidllm.prediction import evaluate
from rapidllm.spec.case import Case, resolve_case
from rapidllm.spec.case_id import plain as _plain
from rapidllm.spec.errors import SpecError
from rapidllm.spec.named import resolve_named

PREFIXES = ("prefill_", "decode_first_")


def moe(overlap: int = 2, batch: int = 5, **par) -> Case:
    """DeepSeek-V2-Lite on 8 H100 in one node, DP attention with EP 8 over DeepEP (prefill holds SMs)."""
    m, _ = resolve_named("model", "deepseek-v2-lite", "test", "model")
    return resolve_case(dict(model=m, hardware="h100-sxm5-80gb", network="dgx-h100", precision="bf16",
                             attention_impl="flash3",
                             workload={"mode": "inference", "batch": batch, "prompt_tokens": 512, "output_tokens": 8},
                             parallelism=dict(dict(tp=1, dp=8, ep=8, moe_dispatcher="deepep",
                                                   microbatch_overlap=overlap), **par)), "test")


def dense(overlap: int, batch: int = 4) -> Case:
    return resolve_case(dict(model="llama3.1-8b", hardware="h100-sxm5-80gb", network="dgx-h100",
                             workload={"mode": "inference", "batch": batch, "prompt_tokens": 512, "output_tokens": 8},
                             parallelism=dict(microbatch_overlap=overlap)), "test")


@pytest.mark.parametrize("batch,parts", [(1, 2), (2, 2), (5, 2), (88, 2), (7, 3)])
def test_split_batch_is_even_and_conserves_sequences(batch: int, parts: int) -> None:
    sizes = split_batch(batch, parts)
    assert sum(sizes) == batch and min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    assert len(sizes) == min(batch, parts)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_micro_batches_conserve_tokens_and_all_to_all_bytes(prefix: str) -> None:
    case = moe()
    halves = micro_cases(case, price_case(case))
    assert [c.workload.batch for c, _ in halves] == [3, 2]
    assert sum(layer_tokens(c, prefix) for c, _ in halves) == layer_tokens(case, prefix)

    def a2a_bytes(c: Case, ops) -> float:
        return sum(n.nbytes for t in layer_templates(c, ops, prefix) if t.section.endswith("moe")
                   for n in t.nodes if n.kind == COMM)
    assert sum(a2a_bytes(c, o) for c, o in halves) == pytest.approx(a2a_bytes(case, price_case(case)), rel=1e-12)


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("batch", [2, 5])
def test_overlapped_pass_lies_between_the_list_schedule_bounds(prefix: str, batch: int) -> None:
    """Compute (one stream) and the all-to-alls (one set of channels) each run one at a time, so the pass
    is never shorter than the longer of the two sums, and with nothing idle never longer than both."""
    case = moe(batch=batch)
    r = overlapped_replay(case, price_case(case), prefix, CommCost(case))
    assert r.comm > 0 and r.compute > 0
    assert r.span >= max(r.compute, r.comm) * (1 - 1e-12)
    assert r.span <= (r.compute + r.comm) * (1 + 1e-12)
    assert r.span < r.compute + r.comm                   # something is hidden


@pytest.mark.parametrize("prefix", ("prefill_", "decode_last_"))
def test_without_communication_the_split_costs_two_half_passes(prefix: str) -> None:
    """No collectives (one GPU): the two micro-batches' layers run back to back, every weight read twice,
    then the head once on the whole batch, so the pass is two half-batch passes less one half-batch head
    plus the whole batch's head, and never faster than the plain pass."""
    split, plain, half = dense(2), dense(1), dense(1, batch=2)

    def run(case: Case) -> float:
        return forward_pass(case, price_case(case), prefix, CommCost(case), True)[0]

    def head(case: Case) -> float:
        ops = price_case(case)
        return float((ops.time_s * ops["count"])[ops.section == f"{prefix}head"].sum())
    assert run(split) == pytest.approx(2 * run(half) - 2 * head(half) + head(plain), rel=1e-9)
    assert run(split) >= run(plain)
    assert evaluate(split)["exposed_comm_s"] == pytest.approx(0.0, abs=1e-12)


def test_an_encoder_pass_runs_overlapped_too() -> None:
    """An encoder's inference is its prefill pass alone; that branch priced the plain pass and ignored the
    key (ViT-7B on 8 GPUs gave the same latency with and without it). Now the record is the overlapped
    pass, and with tensor parallelism the other micro-batch's compute hides most of the all-reduces."""
    def vit(overlap: int) -> Case:
        return resolve_case(dict(model="dinov3-vit7b16", hardware="h100-sxm5-80gb", network="dgx-h100",
                                 workload={"mode": "inference", "batch": 8, "prompt_tokens": 261, "output_tokens": 0},
                                 parallelism=dict(tp=8, microbatch_overlap=overlap)), "test")
    split, plain = vit(2), vit(1)
    rec, base = evaluate(split), evaluate(plain)
    assert rec["e2e_latency_s"] == forward_pass(split, price_case(split), "prefill_", CommCost(split), True)[0]
    assert rec["exposed_comm_s"] < 0.1 * base["exposed_comm_s"]
    assert rec["e2e_latency_s"] < base["e2e_latency_s"]


def test_one_sequence_does_not_split() -> None:
    one, plain = evaluate(moe(batch=1)), evaluate(moe(overlap=1, batch=1))
    assert (one["ttft_s"], one["itl_s"]) == (plain["ttft_s"], plain["itl_s"])


def test_sm_holding_collective_slows_the_compute_beside_it_by_its_share() -> None:
    """Closed form: compute A (1 s), then a collective (2 s) holding half the SMs beside compute B (1 s):
    B progresses at half rate while the collective runs, so it finishes at 1 + 2 = 3 s (2 s without)."""
    t = Template("x", "fwd", [Node("a", COMPUTE, "fwd"), Node("ep.all_to_all", COMM, deps=(0,), axis="ep", op="all_to_all"),
                              Node("b", COMPUTE, "fwd", deps=(0,))])
    args = ([1.0, 1.0], lambda axis, op, nb: 2.0, lambda axis: (0,))
    assert replay_template(t, *args).span == pytest.approx(3.0)          # the collective ends last
    assert replay_template(t, *args).finish[2] == pytest.approx(2.0)
    assert replay_template(t, *args, sm_share=lambda axis: 0.5).finish[2] == pytest.approx(3.0)
    # a 3/4 share: 0.5 s of B's work done by t = 3, the other 0.5 s at full rate after it
    assert replay_template(t, *args, sm_share=lambda axis: 0.75).finish[2] == pytest.approx(3.5)


def test_prefill_pays_deepep_sms_and_decode_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepEP's normal kernels (prefill) hold SMs, the low-latency ones (decode) do not: against the same
    pass with no SMs held, prefill is slower and decode unchanged."""
    case = moe()
    ops, cost = price_case(case), CommCost(case)
    held = {p: overlapped_replay(case, ops, p, cost) for p in PREFIXES}
    monkeypatch.setattr(microbatch, "dispatcher_sms", lambda case: 0)
    free = {p: overlapped_replay(case, ops, p, cost) for p in PREFIXES}
    assert held["prefill_"].span > free["prefill_"].span
    assert held["prefill_"].compute == free["prefill_"].compute
    assert held["decode_first_"].span == free["decode_first_"].span


def test_spec_rules_and_case_id() -> None:
    with pytest.raises(SpecError, match="microbatch_overlap"):
        resolve_case(dict(model="llama3.1-8b", hardware="h100-sxm5-80gb", network="dgx-h100",
                          workload=dict(mode="training", seq_len=2048, global_batch=8),
                          parallelism=dict(dp=8, microbatch_overlap=2)), "test")
    with pytest.raises(SpecError, match="microbatch_overlap"):
        resolve_case(dict(model="llama3.1-8b", hardware="h100-sxm5-80gb", network="dgx-h100",
                          workload={"mode": "inference", "batch": 4, "prompt_tokens": 512, "output_tokens": 8},
                          parallelism=dict(pp=2, microbatch_overlap=2)), "test")
    with pytest.raises(SpecError, match="microbatch_overlap"):
        moe(overlap=3)
    assert "microbatch_overlap" not in _plain(moe(overlap=1).parallelism)
    assert moe(overlap=2).case_id != moe(overlap=1).case_id
    assert dataclasses.replace(moe(overlap=2), name="x").case_id == moe(overlap=2).case_id

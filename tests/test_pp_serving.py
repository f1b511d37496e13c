"""Pipeline-parallel serving (engine/inference.py `serving_pass`, `pipelined`; docs/engine.md "Serving"): a
serving engine with pp > 1 keeps pp micro-batches in flight, so a step is one round of them. Closed forms
of the round, pp 1 unchanged to the bit, the bound against the stage-after-stage pass, and context
parallelism refused for inference."""
from __future__ import annotations

import numpy as np
import pytest

from rapidllm import predict
from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.inference import SECTIONS, PassParts, forward_pass, pass_parts, pipelined, serving_pass
from rapidllm.engine.microbatch import at_batch
from rapidllm.ops.price import price_table
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError

CASE = {"model": "llama3.1-8b", "hardware": "h100-sxm5-80gb", "network": "superpod-ndr", "precision": "bf16",
        "workload": {"mode": "inference", "concurrency": 64, "prompt_tokens": 2000, "output_tokens": 200}}


def _parts(pp: int, stage: float, head: float = 0.0, send: float = 0.0) -> PassParts:
    """A pass of pp stages of `stage` seconds (two layers, compute 0.8 of the span), a head, equal sends."""
    return PassParts(pp, (("decode_first_layer_dense", 2.0, stage / 2, 0.4 * stage),), head, head,
                     (send,) * (pp - 1), 0.0, None, ())    # type: ignore[arg-type]   # replay unused here


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
def test_round_closed_form(pp: int) -> None:
    """pp micro-batches through pp equal stages of time t, no head, no sends: the round is pp x t, which
    is also one micro-batch's pass; with a head h on the last stage and sends s between stages the round
    is max(pp (t + h), pp t + h + (pp - 1) s); the compute column is the same schedule without sends."""
    t, h, s = 3e-3, 1e-3, 4e-3
    assert pipelined([_parts(pp, t)] * pp)[0] == pytest.approx(pp * t, rel=1e-12)
    span, compute = pipelined([_parts(pp, t, h, s)] * pp)
    assert span == pytest.approx(max(pp * (t + h), pp * t + h + (pp - 1) * s), rel=1e-12)
    assert compute == pytest.approx(pp * (0.8 * t + h), rel=1e-12)
    # fewer micro-batches than stages: the trip through the pipeline bounds the round
    assert pipelined([_parts(pp, t, h, s)] * 1)[0] == pytest.approx(pp * t + h + (pp - 1) * s, rel=1e-12)
    assert pipelined([_parts(pp, t)] * 2)[0] == pytest.approx(max(2, pp) * t, rel=1e-12)


@pytest.mark.parametrize("pp", [2, 4])
def test_prompts_in_a_round_cost_the_busiest_stage_work(pp: int) -> None:
    """Prompts a step absorbs ride in micro-batches already in the pipeline: without the trip a round is the
    busiest stage's work, pp x (t + h) for pp micro-batches, (t + h) for one; so the iteration table's
    prefill anchors grow with the prompts (two cost twice one, where a trip of its own made them equal)."""
    t, h, s = 3e-3, 1e-3, 4e-3
    assert pipelined([_parts(pp, t, h, s)] * pp, trip=False)[0] == pytest.approx(pp * (t + h), rel=1e-12)
    assert pipelined([_parts(pp, t, h, s)], trip=False)[0] == pytest.approx(t + h, rel=1e-12)
    assert pipelined([_parts(pp, t, h, s)] * 2, trip=False)[0] == pytest.approx(
        2 * pipelined([_parts(pp, t, h, s)], trip=False)[0], rel=1e-12)


def test_steady_state_with_pp_grows_with_the_prompts_it_absorbs() -> None:
    """Llama-3.1-70B FP8 tp 4 x pp 2 (the second user trial's case): past the weight-bound regime the step
    grows with the sequences and prompts it carries, so throughput saturates instead of rising 66% from
    512 to 1,000 clients at a flat ITL (+10%: 5,960 -> 6,575 tokens/s, the prompts' rows compute-bound beside
    the decodes'), and steady_state and simulated rank tp 4 x pp 2 against tp 8 alike."""
    def run(clients: int, par: dict, serving: str = "steady_state"):
        case = {"model": "llama3.1-70b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "fp8",
                "kv_cache_precision": "fp8", "attention_impl": "flash3", "parallelism": par,
                "workload": {"mode": "inference", "concurrency": clients, "prompt_tokens": 2000,
                             "output_tokens": 500, "serving": serving}}
        return predict(case)
    half, full = run(512, {"tp": 4, "pp": 2}), run(1000, {"tp": 4, "pp": 2})
    assert full.itl_s > 1.5 * half.itl_s and full.tokens_per_s < 1.15 * half.tokens_per_s
    for serving in ("steady_state", "simulated"):
        assert run(512, {"tp": 4, "pp": 2}, serving).tokens_per_s > run(512, {"tp": 8}, serving).tokens_per_s


@pytest.mark.parametrize("pp", [2, 4])
def test_a_step_with_prompts_is_never_cheaper_than_its_decodes(pp: int) -> None:
    """Fewer prompts than stages ride in as many micro-batches: their anchor is the floor (pp one-token
    micro-batches) plus what they add to those carrying them, so a steady-state step that absorbs prompts is
    never cheaper than the decode-only step of disaggregated serving (it was, when one prompt's micro-batch
    was set against pp of them)."""
    work = {"mode": "inference", "concurrency": 48, "prompt_tokens": 512, "output_tokens": 64}
    case = {**CASE, "workload": work, "parallelism": {"pp": pp}}
    mixed = predict({**case, "workload": {**work, "serving": "steady_state"}})
    decode = predict({**case, "workload": {**work, "serving": "disaggregated"}})
    assert mixed.itl_s > decode.itl_s


def test_pp1_unchanged() -> None:
    """pp 1: a step is the forward pass at the batch, to the bit (a single micro-batch is the plain pass)."""
    case = resolve_case({**CASE, "parallelism": {"tp": 1}}, "test")
    ops = price_table(case)
    for n in (1, 5, 64):
        times, events = serving_pass(case, ops, SECTIONS, n, True, None)
        ncase, nops = at_batch(case, ops, n, None)
        cost = CommCost(ncase)
        plain = [np.array(forward_pass(ncase, nops, s, cost, True, None)) for s in SECTIONS]
        assert all((a == b).all() for a, b in zip(times, plain)) and events == cost.simulated
        part = pass_parts(ncase, nops, SECTIONS[1], cost, True)
        assert (pipelined([part]) == np.array(part.totals())).all()


@pytest.mark.parametrize("pp,tp,model", [(2, 1, "llama3.1-8b"), (4, 1, "llama3.1-8b"), (8, 1, "llama3.1-8b"),
                                         (4, 4, "llama3.1-70b")])
def test_round_against_sequential(pp: int, tp: int, model: str) -> None:
    """Every micro-batch's trip is at most the stage-after-stage pass of all N sequences, and each stage's
    layers over the micro-batches at most pp x one stage at N, so the round is never slower than that pass
    by more than the last stage's LM head read once per extra micro-batch, (pp - 1) x head(N). Where
    the work grows with the batch (compute-bound prefill, large decode batches) it is faster by about pp."""
    case = resolve_case({**CASE, "model": model, "precision": "fp8" if tp > 1 else "bf16",
                         "parallelism": {"tp": tp, "pp": pp}}, "test")
    ops = price_table(case)
    for n in (2, 3, 8, 64, 512):
        times, _ = serving_pass(case, ops, SECTIONS, n, True, None)
        ncase, nops = at_batch(case, ops, n, None)
        cost = CommCost(ncase)
        for s, t in zip(SECTIONS, times):
            seq = pass_parts(ncase, nops, s, cost, True)
            assert t[0] <= seq.totals()[0] + (pp - 1) * seq.head_span + 1e-12
            assert t[0] >= seq.totals()[0] / pp * (1 - 1e-9) or n < pp     # at most pp x faster
    times, _ = serving_pass(case, ops, SECTIONS[:1], 64, True, None)      # 64 whole prompts: compute-bound
    ncase, nops = at_batch(case, ops, 64, None)
    assert times[0][0] < 1.2 / pp * forward_pass(ncase, nops, SECTIONS[0], CommCost(ncase), True)[0]


def test_serving_gains_from_kv_admission() -> None:
    """KV-bound serving: each stage holds 1/pp of the layers' cache, so pp 4 admits about 4x the
    sequences of one GPU, and with micro-batches in flight that turns into throughput (compute-bound
    steps); the sequences' tokens per second exceed one GPU's by more than 2x on 4 GPUs."""
    one = predict({**CASE, "workload": {**CASE["workload"], "concurrency": 1024}, "parallelism": {"tp": 1}})
    four = predict({**CASE, "workload": {**CASE["workload"], "concurrency": 1024}, "parallelism": {"pp": 4}})
    assert one.in_flight_limit == four.in_flight_limit == "kv_cache"
    assert four.sequences_in_flight > 4 * one.sequences_in_flight
    assert four.tokens_per_s > 2 * one.tokens_per_s


def test_cp_refused_for_inference() -> None:
    """Context parallelism splits training sequences only: an inference case with cp > 1 is refused
    (one line naming the key and what is allowed) instead of priced as cp GPUs that do not split the prompt."""
    with pytest.raises(SpecError, match=r"parallelism\.cp: 4: context parallelism is modelled for training "
                                        r"only.*allowed: 1"):
        resolve_case({**CASE, "parallelism": {"cp": 4}}, "case.yaml")

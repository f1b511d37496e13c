"""Event engine against closed forms: one-stage sums, pipeline bubbles, overlap, homogeneity reuse."""

import numpy as np
import pytest

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import replay_all
from rapidllm.graph.templates import compute_durations
from rapidllm.engine.engine import attribute, training_record, simulate
from rapidllm.engine.measured import adjuster, apply_what_if, parse_what_if
from rapidllm.engine.replay import longest_path
from rapidllm.graph.pipeline_dag import PipelineInputs, build_pipeline
from rapidllm.graph.templates import COMM, case_templates
from rapidllm.memory.model import memory_for_case
from rapidllm.ops.price import price_case
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError


def _case(gpt_case, **par):
    return resolve_case({**gpt_case, "parallelism": {**gpt_case["parallelism"], **par}}, "x")


def test_one_stage_one_microbatch_is_operators_plus_exposed_comm(gpt_case) -> None:
    case = resolve_case({**gpt_case, "model": "gpt-22b", "parallelism": {"tp": 8, "pp": 1, "dp": 1},
                         "workload": {**gpt_case["workload"], "global_batch": 1}}, "x")
    ops = price_case(case)
    weight = np.where(ops.section.str.startswith("layer"), case.model.layers, 1)
    total_ops = float((ops.time_s * ops["count"] * weight).sum())
    serial = training_record(case, ops, overlap=False)
    cost = CommCost(case)
    comm = 0.0
    for t in case_templates(case, ops):
        n = case.model.layers if "layer" in t.section else 1
        comm += n * sum(cost.time(x.axis, x.op, x.nbytes) for x in t.nodes if x.kind == COMM)
    assert serial["step_time_s"] == pytest.approx(total_ops + comm, rel=1e-9)
    overlapped = training_record(case, ops)
    assert overlapped["step_time_s"] <= serial["step_time_s"] + 1e-12
    assert overlapped["step_time_s"] >= total_ops - 1e-12
    rec = overlapped
    assert rec["compute_time_s"] + rec["exposed_comm_s"] + rec["bubble_s"] == pytest.approx(rec["step_time_s"])


@pytest.mark.parametrize("schedule,p,v,m", [("gpipe", 4, 1, 8), ("1f1b", 4, 1, 8), ("1f1b", 8, 1, 3),
                                            ("gpipe", 2, 1, 16), ("interleaved", 4, 2, 8), ("interleaved", 4, 3, 12)])
def test_bubble_matches_closed_form_on_idle_network(schedule, p, v, m) -> None:
    tf, tb = 1.0, 2.0
    f, b = np.full((p, v), tf / v), np.full((p, v), tb / v)
    x = PipelineInputs(schedule, p, v, m, f, f, b, b, np.zeros(p), np.zeros(p), optimizer_s=np.zeros(p))
    g = build_pipeline(x)
    rec = attribute(g, *longest_path(g.dur, g.dep_ptr, g.dep_idx))
    ideal = m * (tf + tb)
    assert rec["bubble_s"] / ideal == pytest.approx((p - 1) / (v * m))
    assert rec["step_time_s"] == pytest.approx(ideal + rec["bubble_s"])


def test_overlap_never_slows_a_step(gpt_case) -> None:
    for par in ({"dp": 2}, {"dp": 1, "sp": False}, {"dp": 2, "zero": 1}):
        case = resolve_case({**gpt_case, "parallelism": {**gpt_case["parallelism"], **par},
                             "workload": {**gpt_case["workload"], "global_batch": 32}}, "x")
        ops = price_case(case)
        assert training_record(case, ops)["step_time_s"] <= training_record(case, ops, overlap=False)["step_time_s"] + 1e-12


def test_homogeneous_reuse_equals_flattened_per_stage(gpt_case) -> None:
    """Replaying every stage's templates separately (the per-rank path faults use) gives the same step."""
    case = resolve_case({**gpt_case, "parallelism": {"tp": 8, "pp": 4, "dp": 2, "sp": True},
                         "workload": {**gpt_case["workload"], "global_batch": 16}}, "x")
    ops = price_case(case)
    training_record(case, ops)
    cost = CommCost(case)
    cost.symmetric = False                   # per-stage templates and per-boundary collectives
    templates = case_templates(case, ops)
    per_stage = [replay_all(case, ops, templates, cost, s) for s in range(4)]
    base = replay_all(case, ops, templates, CommCost(case), -1)
    for r in per_stage:
        for key, res in base.results.items():
            assert r.results[key].span == pytest.approx(res.span)


def test_event_reduction_is_large(gpt_case) -> None:
    case = _case(gpt_case)
    rec = training_record(case, price_case(case))
    assert rec["network_events_flattened"] > 10 * rec["network_events_simulated"] > 0


def test_more_microbatches_amortize_the_bubble(gpt_case) -> None:
    small = resolve_case({**gpt_case, "workload": {**gpt_case["workload"], "global_batch": 8}}, "x")
    big = resolve_case({**gpt_case, "workload": {**gpt_case["workload"], "global_batch": 64}}, "x")
    fs = training_record(small, price_case(small))
    fb = training_record(big, price_case(big))
    assert fb["bubble_s"] / fb["step_time_s"] < fs["bubble_s"] / fs["step_time_s"]


def test_baseline_engine_still_selectable(gpt_case) -> None:
    case = _case(gpt_case)
    rec = simulate(case, price_case(case), memory_for_case(case), engine="baseline")
    assert rec["step_time_s"] > 0


def test_what_if_and_measured(gpt_case, tmp_path) -> None:
    case = _case(gpt_case)
    ops = price_case(case)
    mem = memory_for_case(case)
    base = simulate(case, ops, mem)["step_time_s"]
    faster = simulate(case, ops, mem, adjust=adjuster(None, ["mlp_up=/2"]))["step_time_s"]
    assert faster < base
    csv = tmp_path / "m.csv"
    t = float(ops[ops.name == "mlp_up"].time_s.iloc[0])
    csv.write_text(f"name,time_s\nmlp_up,{t / 2}\n")
    assert simulate(case, ops, mem, adjust=adjuster(csv))["step_time_s"] == pytest.approx(faster)
    assert parse_what_if("qkv=x2") == ("qkv", "scale", 2.0)
    assert parse_what_if("qkv=1 ms")[2] == pytest.approx(1e-3)


def test_what_if_names_an_operator_kind(gpt_case) -> None:
    """`gemm=/2` halves every GEMM of the table, forward and backward, and nothing else: the same table as
    naming each GEMM operator in turn (user trial 3 had to list 15 names); an unknown name lists the kinds."""
    ops = price_case(_case(gpt_case))
    gemms = sorted(set(ops[ops.kind == "gemm"].name))
    assert len(gemms) >= 10 and "gemm" not in set(ops.name)
    by_kind = apply_what_if(ops, ["gemm=/2"])
    assert by_kind.time_s.equals(apply_what_if(ops, [f"{n}=/2" for n in gemms]).time_s)
    gemm = ops.kind == "gemm"
    assert (by_kind.time_s[gemm] * 2 == ops.time_s[gemm]).all() and by_kind.time_s[~gemm].equals(ops.time_s[~gemm])
    with pytest.raises(SpecError, match="kinds: attention, gemm, pointwise"):
        apply_what_if(ops, ["gemms=/2"])
    # a time for a kind sets each of its operators to it, whatever its shape (docs/engine.md; review 17)
    timed = apply_what_if(ops, ["gemm=1.5 ms"])
    assert (timed.time_s[gemm] == 1.5e-3).all() and timed.time_s[~gemm].equals(ops.time_s[~gemm])


def test_compute_durations_follow_template_order(gpt_case) -> None:
    case = _case(gpt_case)
    ops = price_case(case)
    for t in case_templates(case, ops):
        assert len(compute_durations(ops, t)) == sum(1 for n in t.nodes if n.kind != COMM)


@pytest.mark.parametrize("serving", ["steady_state", "simulated"])
def test_inference_serving_concurrency(gpt_case, serving) -> None:
    inf = {**gpt_case, "model": "gpt-22b", "parallelism": {"tp": 8}, "network": gpt_case["network"],
           "workload": {"mode": "inference", "batch": 1, "prompt_tokens": 128, "output_tokens": 64}}
    one = resolve_case(inf, "x")
    many = resolve_case({**inf, "workload": {**inf["workload"], "concurrency": 16, "serving": serving}}, "x")
    r1 = simulate(one, price_case(one), memory_for_case(one))
    r16 = simulate(many, price_case(many), memory_for_case(many))
    assert r1["e2e_latency_s"] == pytest.approx(r1["ttft_s"] + 63 * r1["itl_s"])
    assert r16["itl_s"] > r1["itl_s"] and r16["tokens_per_s"] > r1["tokens_per_s"]
    if serving == "steady_state":
        # a mean step carries share = 16 / 64 of a prompt in its fused GEMMs, the step that carries a new
        # request's prompt the whole of it; a new request waits half a step, then that step ends:
        # TTFT = step / 2 + decode(16) + what the whole prompt adds (engine/inference.py). A quarter of a prompt
        # adds something and no more than the whole, and the whole about its own prefill pass: its 128 rows
        # beside 16 decodes make GEMMs of 144 rows, one M tile more than 128 and 16 apart (toy GPU: +0.06%)
        batch16 = resolve_case({**inf, "workload": {**inf["workload"], "batch": 16}}, "x")
        decode16 = simulate(batch16, price_case(batch16), memory_for_case(batch16))["itl_s"]
        step = r16["itl_s"]
        quarter, whole = step - decode16, r16["ttft_s"] - 0.5 * step - decode16
        assert 0 < quarter <= whole <= 1.001 * r1["ttft_s"]
        assert r16["tokens_per_s"] == pytest.approx(16 / r16["itl_s"], rel=1e-12)


def test_synchronized_cohorts_wait_for_the_batched_prefill(gpt_case) -> None:
    """genai-perf clients (fixed lengths, all started together) stay in lockstep when the C prompts fit one
    iteration: every request's TTFT is the prefill of all C prompts batched, i.e. static batching's TTFT at
    batch C, never below the TTFT of one client; the decode steps are static batching's at batch C
    (docs/engine.md, "Serving")."""
    inf = {**gpt_case, "model": "gpt-22b", "parallelism": {"tp": 8}, "network": gpt_case["network"],
           "workload": {"mode": "inference", "batch": 1, "prompt_tokens": 128, "output_tokens": 16}}
    one = resolve_case(inf, "x")
    r1 = simulate(one, price_case(one), memory_for_case(one))
    for clients in (4, 8):
        wl = {**inf["workload"], "concurrency": clients, "serving": "simulated", "max_num_tokens": clients * 128}
        cohort = resolve_case({**inf, "workload": wl}, "x")
        static = resolve_case({**inf, "workload": {**inf["workload"], "batch": clients,
                                                   "concurrency": clients}}, "x")
        rc = simulate(cohort, price_case(cohort), memory_for_case(cohort))
        rs = simulate(static, price_case(static), memory_for_case(static))
        assert rc["ttft_s"] >= r1["ttft_s"]
        assert rc["ttft_s"] == pytest.approx(rs["ttft_s"], rel=1e-9)
        assert rc["itl_s"] == pytest.approx(rs["itl_s"], rel=1e-3)   # mean contexts differ by half a token
    # one token short of the whole burst: the last prompt's tail waits an iteration and the cohort splits
    # into groups that drift apart (docs/engine.md, "Consequences"); a request still waits on others' prefill
    wl = {**inf["workload"], "concurrency": 8, "serving": "simulated", "max_num_tokens": 8 * 128 - 1}
    split = resolve_case({**inf, "workload": wl}, "x")
    ttft = simulate(split, price_case(split), memory_for_case(split))["ttft_s"]
    assert ttft > r1["ttft_s"]
    assert ttft != pytest.approx(rc["ttft_s"])

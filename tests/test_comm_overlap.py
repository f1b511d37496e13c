"""Communication overlap options: pipeline sends (Megatron's overlap_p2p_comm), the scatter/gather of
pipeline sends, and tensor-parallel userbuffers (Megatron-Core --tp-comm-overlap).

Blocking sends are a rendezvous: the numba and reference builders agree node for node, the graph stays
acyclic, an idle network gives the closed-form bubble either way, and blocking never makes a step shorter.
Userbuffers: closed forms, free collectives leave only the GEMM (ring exchange) or the SM margin
(pipelined reduce-scatter), and the exposed TP time never grows.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import p2p_bytes, p2p_gather_bytes
from rapidllm.engine.replay import longest_path
from rapidllm.engine.tp_overlap import (
    UB_SMS,
    UB_SPLITS,
    overlap_durations,
    pipelined_rs_time,
    ring_exchange_time,
)
from rapidllm.graph.pipeline_dag import PipelineInputs, build_pipeline, build_pipeline_reference
from rapidllm.graph.templates import OpsView, case_templates, compute_durations
from rapidllm.ops.price import price_case
from rapidllm.prediction import evaluate
from rapidllm.spec.case import load_case, resolve_case
from rapidllm.spec.errors import SpecError

SCHEDULES = [("gpipe", 4, 1, 6), ("1f1b", 4, 1, 8), ("1f1b", 8, 1, 3), ("1f1b", 1, 1, 5),
             ("interleaved", 4, 2, 8), ("interleaved", 3, 3, 6)]


def _inputs(schedule: str, p: int, v: int, m: int, send: float, blocking: bool) -> PipelineInputs:
    f, b = np.ones((p, v)), 2.0 * np.ones((p, v))
    return PipelineInputs(schedule, p, v, m, f, f, b, b, np.full(p, send), np.full(p, send), 2, 0.1,
                          np.zeros(p), 0.0, (1,), (1,), p2p_blocking=blocking)


def _step(x: PipelineInputs) -> float:
    g = build_pipeline(x)
    return float(longest_path(g.dur, g.dep_ptr, g.dep_idx)[1].max())


@pytest.mark.parametrize("schedule,p,v,m", SCHEDULES)
def test_blocking_sends_builders_agree_and_stay_acyclic(schedule, p, v, m) -> None:
    x = _inputs(schedule, p, v, m, 0.2, True)
    fast, ref = build_pipeline(x), build_pipeline_reference(x)
    assert np.array_equal(fast.dep_ptr, ref.dep_ptr) and np.array_equal(fast.dep_idx, ref.dep_idx)
    assert np.array_equal(fast.dur, ref.dur)
    assert np.isfinite(_step(x))


def test_blocking_sends_never_deadlock() -> None:
    """The rendezvous adds cross-stage edges: no schedule, stage count or micro-batch count (fewer than
    the stages included) closes a cycle (a cycle would leave NaN finish times)."""
    for schedule, vs in (("gpipe", (1,)), ("1f1b", (1,)), ("interleaved", (1, 2, 3))):
        for p in (2, 3, 4, 8):
            for v in vs:
                for m in (1, 2, 3, 5, 8, 12):
                    if schedule == "interleaved" and v > 1 and m % p:
                        continue                      # outside the interleaved schedule's contract
                    assert np.isfinite(_step(_inputs(schedule, p, v, m, 0.2, True))), (schedule, p, v, m)


@pytest.mark.parametrize("schedule,p,v,m", SCHEDULES)
def test_blocking_never_shortens_and_is_free_on_an_idle_network(schedule, p, v, m) -> None:
    for send in (0.1, 0.3):
        assert _step(_inputs(schedule, p, v, m, send, True)) >= _step(_inputs(schedule, p, v, m, send, False))
    # free transfers: both give the ideal time plus the closed-form bubble (p-1) x (f + b) / v per chunk
    ideal = m * v * 3.0 + (p - 1) * 3.0 + 0.1    # last gradient bucket after the final backward
    free = [_step(_inputs(schedule, p, v, m, 0.0, blocking)) for blocking in (False, True)]
    assert free[0] == free[1]
    assert free[0] == pytest.approx(ideal, abs=0.1 + 1e-9)


def test_blocking_costs_time_when_transfers_do() -> None:
    """1F1B, two stages: stage 0's F1 send waits for stage 1 to finish B0 (its receive is posted with
    that action), so the rendezvous lengthens the step once transfers take time."""
    send = 0.25
    assert _step(_inputs("1f1b", 2, 1, 4, send, True)) > _step(_inputs("1f1b", 2, 1, 4, send, False))


def test_megatron_default_overlaps_only_the_interleaved_schedule() -> None:
    c = load_case("examples/gpt175b-tp8-pp8.yaml")
    par = c.parallelism
    assert not par.p2p_overlapped                                   # 1f1b: batched blocking send/recv
    assert dataclasses.replace(par, schedule="interleaved", virtual_stages=2).p2p_overlapped
    assert dataclasses.replace(par, overlap_p2p_comm=True).p2p_overlapped


def test_pipeline_sends_are_scattered_over_the_tensor_parallel_ranks() -> None:
    """Each TP rank sends 1/tp of a micro-batch's hidden states; without SP the receivers all-gather it
    (Narayanan et al. 2021 §4.1), with SP the shard is what the next stage consumes."""
    c = load_case("examples/gpt175b-tp8-pp8.yaml")                 # seq 2048, hidden 12288, bf16, tp 8
    full = 2048 * 12288 * 2
    assert p2p_bytes(c) == full / 8 and p2p_gather_bytes(c) == 0.0
    no_sp = dataclasses.replace(c, parallelism=dataclasses.replace(c.parallelism, sp=False))
    assert p2p_bytes(no_sp) == full / 8 and p2p_gather_bytes(no_sp) == full


# --- tensor-parallel overlap (Transformer Engine userbuffers, Megatron-Core --tp-comm-overlap) ---

def test_ring_exchange_and_pipelined_reduce_scatter_closed_forms() -> None:
    g, tp = 8.0, 8
    assert ring_exchange_time(g, 0.0, tp) == g                        # free transfers: the GEMM alone
    assert ring_exchange_time(g, 0.5, tp) == g                        # each step hides behind a chunk
    assert ring_exchange_time(g, 3.0, tp) == 1.0 + 7 * 3.0            # first chunk local, 7 transfers
    share = 116 / 132                                                 # H100: 16 of 132 SMs reduce
    assert pipelined_rs_time(g, 0.0, share) == pytest.approx(g / share)   # only the SM margin remains
    a = g / share / UB_SPLITS
    assert pipelined_rs_time(g, 0.1, share) == pytest.approx(4 * a + 0.1)  # the last chunk is exposed
    assert pipelined_rs_time(g, 5.0, share) == pytest.approx(a + 4 * 5.0)  # reduce-scatter bound


def _overlap_case(on: bool):
    c = load_case("examples/gpt175b-tp8-pp8.yaml")
    return dataclasses.replace(c, parallelism=dataclasses.replace(c.parallelism, tp_comm_overlap=on))


def test_userbuffers_durations_on_free_and_priced_collectives() -> None:
    case = _overlap_case(True)
    ops = OpsView(price_case(case))
    cost = CommCost(case)
    comm = lambda axis, op, nb: cost.time(axis, op, nb, -1)
    share = (case.hardware.sm_count - UB_SMS) / case.hardware.sm_count
    seen = set()
    for t in case_templates(case, ops):
        compute = compute_durations(ops, t)
        dur = dict(zip([i for i, n in enumerate(t.nodes) if n.kind == "compute"], compute))
        free = overlap_durations(t, compute, lambda *_: 0.0, case.parallelism.tp, case.hardware.sm_count)
        priced = overlap_durations(t, compute, comm, case.parallelism.tp, case.hardware.sm_count)
        for i, extra in free.items():
            n = t.nodes[i]
            seen.add((t.part, n.op))
            if n.op == "all_gather":                                  # ring exchange: nothing left to wait
                assert extra == 0.0
            else:                                                     # pipeline: the SM margin only
                assert extra == pytest.approx(dur[n.deps[0]] * (1 / share - 1))
            # never longer than waiting for the whole collective after (or before) the plain GEMM
            assert priced[i] <= comm(n.axis, n.op, n.nbytes) + extra
    assert seen == {("fwd", "all_gather"), ("fwd", "reduce_scatter"), ("bwd", "all_gather")}


def test_userbuffers_never_expose_more_tensor_parallel_time() -> None:
    off, on = evaluate(_overlap_case(False)), evaluate(_overlap_case(True))
    assert on["compute_time_s"] == off["compute_time_s"]
    assert on["exposed_comm_s"] < off["exposed_comm_s"]
    assert on["step_time_s"] < off["step_time_s"]


def test_userbuffers_need_sequence_parallelism() -> None:
    mapping = yaml.safe_load(open("examples/gpt175b-tp8-pp8.yaml"))
    mapping["parallelism"].update(sp=False, tp_comm_overlap=True)
    with pytest.raises(SpecError, match="tp_comm_overlap"):
        resolve_case(mapping, "x.yaml")

"""`framework: deepspeed`: Megatron-DeepSpeed on DeepSpeed's PipelineEngine (engine/deepspeed.py).

The pipeline DAG with `p2p_serial` is checked against an independent instruction-level replay of
DeepSpeed's TrainSchedule (its step -> micro-batch rule and the order of its send/recv instructions, from
deepspeed/runtime/pipe/schedule.py L189-289 of v0.5.8, rewritten here), in which every send and receive is
a rendezvous between the two stages; then a closed form where nothing overlaps, the spec rules, and that a
DeepSpeed step is never shorter than Megatron's on the same layout.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import yaml

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import p2p_bytes, training_plan
from rapidllm.engine.deepspeed import meta_bytes
from rapidllm.engine.engine import pipeline_split
from rapidllm.engine.replay import longest_path
from rapidllm.graph.pipeline_dag import PipelineInputs, build_pipeline, build_pipeline_reference
from rapidllm.ops.price import price_case
from rapidllm.prediction import evaluate
from rapidllm.spec.case import load_case, resolve_case
from rapidllm.spec.errors import SpecError


def deepspeed_streams(m: int, p: int) -> list[list[tuple]]:
    """Each stage's instructions under TrainSchedule: 2(m + p - 1) steps; at step t stage s runs a forward
    when t and s have equal parity, on micro-batch t//2 - s//2, else a backward, on t//2 - p + 1 + s//2
    (nothing when that is not in [0, m)). A forward step first receives its activation, then sends the
    gradient of the stage's previous micro-batch; a backward step first sends the previous micro-batch's
    activation, then receives its gradient; the computation comes last."""
    streams = []
    for s in range(p):
        ops: list[tuple] = []
        prev = -1
        for t in range(2 * (m + p - 1)):
            fwd = (t - s) % 2 == 0
            i = t // 2 - s // 2 if fwd else t // 2 - p + 1 + s // 2
            valid, prev_valid = 0 <= i < m, 0 <= prev < m
            if fwd and s > 0:
                ops += [("recv", ("act", s - 1, i))] if valid else []
                ops += [("send", ("grad", s, prev))] if prev_valid else []
            elif not fwd and s < p - 1:
                ops += [("send", ("act", s, prev))] if prev_valid else []
                ops += [("recv", ("grad", s + 1, i))] if valid else []
            ops += [("F" if fwd else "B", i)] if valid else []
            prev = i
        streams.append(ops)
    return streams


def rendezvous_step(m: int, p: int, f: float, b: float, c_act: float, c_grad: float) -> float:
    """Run every stage's stream in order; a transfer starts when both its sender and its receiver have
    reached it and holds both for its duration."""
    streams, pos, clock = deepspeed_streams(m, p), [0] * p, [0.0] * p
    waiting: dict[tuple, tuple[int, float]] = {}
    moved = True
    while moved:
        moved = False
        for s in range(p):
            while pos[s] < len(streams[s]):
                op, arg = streams[s][pos[s]]
                if op in ("F", "B"):
                    clock[s] += f if op == "F" else b
                elif arg in waiting and waiting[arg][0] != s:
                    peer, ready = waiting.pop(arg)
                    clock[s] = clock[peer] = max(clock[s], ready) + (c_act if arg[0] == "act" else c_grad)
                    pos[peer] += 1
                else:
                    waiting[arg] = (s, clock[s])
                    break
                pos[s] += 1
                moved = True
    assert all(pos[s] == len(streams[s]) for s in range(p)), "TrainSchedule deadlocked"
    return max(clock)


def _inputs(m: int, p: int, f: float, b: float, c_act: float, c_grad: float, serial: bool = True) -> PipelineInputs:
    fs, bs = np.full((p, 1), f), np.full((p, 1), b)
    return PipelineInputs("1f1b", p, 1, m, fs, fs, bs, bs, np.array([c_act] * (p - 1) + [0.0]),
                          np.array([0.0] + [c_grad] * (p - 1)), optimizer_s=np.zeros(p), pp_dims=(1,),
                          p2p_blocking=True, p2p_serial=serial)


@pytest.mark.parametrize("m,p", list(itertools.product([1, 2, 3, 5, 8], [2, 3, 4, 6])))
def test_dag_replays_deepspeed_train_schedule(m: int, p: int) -> None:
    """Node for node the numba and reference builders agree, and the DAG's step equals the rendezvous
    replay of TrainSchedule's instructions (compute-bound, transfer-bound, unequal directions)."""
    for f, b, c_act, c_grad in ((1.0, 3.0, 0.1, 0.1), (0.3, 1.0, 2.0, 0.5), (1.0, 2.0, 0.0, 0.0)):
        x = _inputs(m, p, f, b, c_act, c_grad)
        g, ref = build_pipeline(x), build_pipeline_reference(x)
        assert np.array_equal(g.dep_ptr, ref.dep_ptr) and np.array_equal(g.dep_idx, ref.dep_idx)
        step = float(longest_path(g.dur, g.dep_ptr, g.dep_idx)[1].max())
        assert step == pytest.approx(rendezvous_step(m, p, f, b, c_act, c_grad), abs=1e-12)
        assert pipeline_split(x)[0]["step_time_s"] == pytest.approx(step, abs=1e-12)


def test_transfers_in_a_row_when_nothing_overlaps() -> None:
    """Zero compute: a 4-stage step is a chain of transfers, 2(p-1) for the first micro-batch's round trip
    and 4 for each later one (a middle stage's receive, send, send, receive, one after the other); the
    batched exchange Megatron runs needs fewer. Two stages: 2 per micro-batch."""
    c = 0.25
    for m in range(1, 7):
        assert pipeline_split(_inputs(m, 4, 0.0, 0.0, c, c))[0]["step_time_s"] == pytest.approx((4 * (m - 1) + 6) * c)
        assert pipeline_split(_inputs(m, 2, 0.0, 0.0, c, c))[0]["step_time_s"] == pytest.approx(2 * m * c)
        if m > 1:
            assert pipeline_split(_inputs(m, 4, 0.0, 0.0, c, c, serial=False))[0]["step_time_s"] < (4 * (m - 1) + 6) * c


def test_serial_order_never_shortens_and_is_free_on_an_idle_network() -> None:
    for m, p in ((8, 4), (3, 6), (12, 3)):
        serial, batched = (pipeline_split(_inputs(m, p, 1.0, 2.5, 0.2, 0.3, s))[0]["step_time_s"]
                           for s in (True, False))
        assert serial >= batched
        idle = pipeline_split(_inputs(m, p, 1.0, 2.5, 0.0, 0.0))[0]["step_time_s"]
        assert idle == pytest.approx((m + p - 1) * 3.5)           # the closed-form 1F1B step


def _case(**extra) -> dict:
    base = yaml.safe_load(open("examples/gpt175b-tp8-pp8.yaml"))
    base["parallelism"] = {**base["parallelism"], "sp": False, "dp": 2, "zero": 1}
    base["workload"] = {**base["workload"], "global_batch": 16}
    for key, value in extra.items():
        if key == "parallelism":
            base["parallelism"] = {**base["parallelism"], **value}
        else:
            base[key] = value
    return base


def test_deepspeed_step_is_never_shorter_than_megatron_on_the_same_layout() -> None:
    """Without data parallelism the pipeline engine's mechanisms only add time. With it, DeepSpeed also
    reduces in 5e8-element buckets (6 here, where Megatron-LM's 40M-parameter buckets make 71, each
    paying its latency): with Megatron's buckets put back, it is again never shorter."""
    one = [evaluate(resolve_case(_case(framework=fw, parallelism={"dp": 1}), "t"))["step_time_s"]
           for fw in ("megatron", "deepspeed")]
    assert one[0] < one[1]
    ds = resolve_case(_case(framework="deepspeed"), "t")
    assert not ds.parallelism.overlap_grad_reduce                # reduced after the flush
    mg = resolve_case(_case(parallelism={"overlap_grad_reduce": False}), "t")
    plans = [training_plan(c, price_case(c), CommCost(c)).inputs for c in (mg, ds)]
    assert plans[1].p2p_serial and not plans[0].p2p_serial
    assert plans[1].buckets == 6 < plans[0].buckets     # the first stage: 2.8e9 parameters a rank / 5e8
    same_buckets = dataclasses.replace(plans[1], buckets=plans[0].buckets, bucket_s=plans[0].bucket_s)
    assert pipeline_split(same_buckets)[0]["step_time_s"] > pipeline_split(plans[0])[0]["step_time_s"]
    assert meta_bytes(8) == 8 * 15 and p2p_bytes(ds) == 2048 * 12288 * 2 / 8


def test_the_framework_enters_the_case_id() -> None:
    """A deepspeed case is not cached or reported as the megatron one (that existing cases keep their ids is
    tests/test_schedule_build_equivalence.py's snapshot)."""
    c = load_case("examples/gpt175b-tp8-pp8.yaml")
    assert c.framework == "megatron" and c.parallelism.overlap_grad_reduce
    assert dataclasses.replace(c, framework="deepspeed").case_id != c.case_id


@pytest.mark.parametrize("par,key", [({"schedule": "interleaved", "virtual_stages": 2}, "parallelism.schedule"),
                                     ({"schedule": "gpipe"}, "parallelism.schedule"),
                                     ({"zero": 3}, "parallelism.zero"),
                                     ({"overlap_grad_reduce": True}, "parallelism.overlap_grad_reduce"),
                                     ({"overlap_p2p_comm": True}, "parallelism.overlap_p2p_comm"),
                                     ({"sp": True}, "parallelism.sp")])
def test_deepspeed_refuses_what_its_pipeline_engine_does_not_run(par: dict, key: str) -> None:
    with pytest.raises(SpecError, match=key.replace(".", r"\.")):
        resolve_case(_case(framework="deepspeed", parallelism=par), "t")


def test_search_from_a_deepspeed_base_keeps_the_framework_rules() -> None:
    """A search's layouts are checked and built with the base's framework (spec/frameworks.py): no ranked
    row runs an interleaved schedule or ZeRO-2/3, those layouts are invalid by the framework's rule, and a
    ranked row is the case file of its layout (gradients reduced after the flush, not overlapped)."""
    from rapidllm.prediction import predict
    from rapidllm.search import search
    spec = {"name": "ds", "model": "llama2-7b", "hardware": "a100-sxm4-80gb", "network": "superpod-hdr",
            "framework": "deepspeed", "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16},
            "gpus": 8, "top": 4, "space": {"tp": [2], "micro_batch": [1], "recompute": ["full"], "sp": [False],
                                           "zero": [1, 3], "pp": [2, 4]}}
    df = search(spec)
    rules = df.attrs["counts"]["invalid_by_rule"]
    assert rules.get("parallelism.schedule") and rules.get("parallelism.zero")
    assert len(df) and set(df.schedule) == {"1f1b"} and set(df.zero) == {1}
    row = df.iloc[0]
    case = {k: spec[k] for k in ("model", "hardware", "network", "framework", "workload")}
    case["workload"] = {**case["workload"], "micro_batch": 1}
    case["parallelism"] = {"dp": int(row.dp), "tp": 2, "pp": int(row.pp), "zero": 1, "recompute": "full"}
    resolved = resolve_case(case, "t")
    assert not resolved.parallelism.overlap_grad_reduce
    assert predict(resolved).step_time_s == row.step_time_s

"""`parallelism.optimizer_state`: master weights and Adam moments at 4 B (default) or 2 B (Apex
DistributedFusedAdam dtype bf16; Megatron-Core's precision-aware optimizer), in memory and in the step."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from rapidllm import predict_many
from rapidllm.memory.state import stage_params, state_bytes
from rapidllm.ops.price import step_sections
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError

BASE = {"model": "llama2-7b", "hardware": "h100-sxm5-80gb", "network": "superpod-ndr",
        "workload": {"mode": "training", "seq_len": 2048, "global_batch": 64, "micro_batch": 1}}


def _case(**par):
    return resolve_case({**BASE, "parallelism": {"dp": 8, **par}}, "test")


@pytest.mark.parametrize("zero", [0, 1])
def test_bf16_state_halves_the_optimizer_bytes(zero):
    """Master copy + two moments: 12 B per parameter at fp32, 6 B at bf16 (closed form), sharded alike;
    weights and gradients untouched."""
    fp32, bf16 = (_case(zero=zero, optimizer_state=s) for s in ("fp32", "bf16"))
    a, b = state_bytes(fp32), state_bytes(bf16)
    params = stage_params(fp32, 0).total
    assert a.optimizer == pytest.approx(12.0 * params / (8 if zero else 1))
    assert b.optimizer == pytest.approx(a.optimizer / 2)
    assert (b.weights, b.gradients) == (a.weights, a.gradients)


def test_bf16_state_moves_fewer_bytes_in_the_optimizer_step():
    """Adam reads and writes half weights and grads (4 B) plus the master copy and both moments: 16 B per
    parameter at fp32 state, 10 B at bf16."""
    (_, fp32), = step_sections(_case(zero=1))
    (_, bf16), = step_sections(_case(zero=1, optimizer_state="bf16"))
    assert bf16.bytes / fp32.bytes == pytest.approx(10 / 16)
    assert bf16.flops == fp32.flops


def test_memory_does_not_depend_on_what_was_predicted_before():
    """Cases that differ only in `optimizer_state` share no memoized state bytes (`shared_state_bytes`):
    one process, both orders, the same optimizer memory per case."""
    cases = [{**BASE, "parallelism": {"dp": 8, "zero": 1, "optimizer_state": s}} for s in ("fp32", "bf16")]
    forward = predict_many(cases).set_index("case_id").optimizer_bytes
    backward = predict_many(cases[::-1]).set_index("case_id").optimizer_bytes
    assert forward.to_dict() == backward.to_dict()
    assert forward.iloc[1] == pytest.approx(forward.iloc[0] / 2)


def test_the_default_leaves_case_ids_as_they_were():
    assert _case(zero=1, optimizer_state="fp32").case_id == _case(zero=1).case_id
    assert _case(zero=1, optimizer_state="bf16").case_id != _case(zero=1).case_id


def test_inference_refuses_an_optimizer_state():
    with pytest.raises(SpecError, match="parallelism.optimizer_state"):
        resolve_case({**BASE, "workload": {"mode": "inference", "prompt_tokens": 128, "output_tokens": 16},
                      "parallelism": {"optimizer_state": "bf16"}}, "test")


def test_fp32_weights_refuse_a_16_bit_state():
    """FP32 training keeps no master copy; a 2-byte state beside FP32 weights is not a thing frameworks run."""
    with pytest.raises(SpecError, match="parallelism.optimizer_state"):
        resolve_case({**BASE, "precision": "fp32", "parallelism": {"dp": 8, "optimizer_state": "bf16"}}, "test")


def test_bad_value_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump({**BASE, "parallelism": {"optimizer_state": "fp8"}}))
    run = subprocess.run([sys.executable, "-m", "rapidllm.cli", "predict", str(path)], capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "parallelism.optimizer_state" in run.stderr and "fp32, bf16" in run.stderr

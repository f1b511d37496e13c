"""The special-function units' exponential rate is a device property (`exponentials_per_sm_clock`, docs/
operator-model.md): default 16 per clock per SM, 32 on Blackwell Ultra (gb300). Closed form of the softmax
term, the invariant that a faster exponential never slows attention, and bad values refused."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from rapidllm.cli import main
from rapidllm.ops.attention import (VEC_OPS_FWD, _softmax_s, attention_backward, attention_forward,
                                    flash_mma_flops)
from rapidllm.spec.hardware import DEFAULT_EXP_PER_SM_CLOCK, HardwareSpec
from rapidllm.spec.named import resolve_named


def _device(name: str) -> HardwareSpec:
    return HardwareSpec.from_mapping(*resolve_named("hardware", name, "test", "hardware"))


def test_rates_from_the_files() -> None:
    assert DEFAULT_EXP_PER_SM_CLOCK == 16.0
    assert _device("b200").exp_per_sm_clock == 16.0
    assert _device("h100-sxm5-80gb").exp_per_sm_clock == 16.0
    assert _device("gb300").exp_per_sm_clock == 32.0


def test_softmax_exp_term_closed_form() -> None:
    """With no vector work the term is elements / (rate x SMs x clock); doubling the rate halves it."""
    hw = _device("gb300")
    elements = 1.0e12
    assert _softmax_s(hw, elements, 0.0) == pytest.approx(elements / (32.0 * 160 * 1.965e9), rel=1e-12)
    half = dataclasses.replace(hw, exp_per_sm_clock=16.0)
    assert _softmax_s(half, elements, 0.0) == pytest.approx(2 * _softmax_s(hw, elements, 0.0), rel=1e-12)


@pytest.mark.parametrize("impl", ["flash", "flash3"])
@pytest.mark.parametrize("seq", [2048, 8192, 32768])
def test_faster_exponentials_never_slow_attention(impl: str, seq: int) -> None:
    fast = _device("gb300")
    slow = dataclasses.replace(fast, exp_per_sm_clock=16.0)
    args = dict(batch=1, q_heads=32, kv_heads=8, q_len=seq, kv_len=seq, head_dim_qk=128, head_dim_v=128,
                impl=impl)
    assert attention_forward(fast, **args).time_s <= attention_forward(slow, **args).time_s
    assert attention_backward(fast, **args).time_s <= attention_backward(slow, **args).time_s


@pytest.mark.parametrize("impl", ["flash", "flash3"])
def test_faster_exponentials_speed_up_softmax_bound_attention(impl: str) -> None:
    """`<=` above would pass if the rate were ignored (review 17). At head dim 64 on GB300 the softmax term
    (one exp and VEC_OPS_FWD vector FLOPs per score) outlasts the score's 4 x 64 MMA FLOPs at 16 and at 32
    exponentials per clock, so the forward kernel is softmax-bound at both rates: doubling the rate must make
    it strictly faster."""
    fast = _device("gb300")
    slow = dataclasses.replace(fast, exp_per_sm_clock=16.0)
    d = 64
    for hw in (fast, slow):           # the premise: softmax, not the MMAs, bounds the math at both rates
        assert _softmax_s(hw, 1.0, VEC_OPS_FWD) > 2 * (d + d) / flash_mma_flops(hw, "bf16", impl)
    args = dict(batch=1, q_heads=32, kv_heads=8, q_len=8192, kv_len=8192, head_dim_qk=d, head_dim_v=d, impl=impl)
    assert attention_forward(fast, **args).time_s < attention_forward(slow, **args).time_s


@pytest.mark.parametrize("value", [0, -16, 1.0e9, "fast"])
def test_bad_rate_is_refused(tmp_path: Path, gpt_case: dict, capsys, value) -> None:
    case = {**gpt_case, "hardware": {**gpt_case["hardware"], "exponentials_per_sm_clock": value}}
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(case))
    code = main(["predict", str(path), "--json"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "exponentials_per_sm_clock" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


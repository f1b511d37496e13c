"""Baseline models against closed forms: roofline, pipeline bubble, parameter-driven memory, invariants."""
import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rapidllm.engine.baseline import compose_training
from rapidllm.graph.comm_nodes import communication_nodes
from rapidllm.memory.closed_form import closed_form_memory, korthikanti_layer_activations
from rapidllm.ops.operators import Operator
from rapidllm.ops.price import local_parameters, price_case
from rapidllm.ops.roofline import roofline_times
from rapidllm.spec.case import resolve_case


def test_roofline_gemm_is_compute_bound_at_4096(gpt_case) -> None:
    hw = resolve_case(gpt_case, "x").hardware
    n = 4096
    op = Operator(name="g", kind="gemm", phase="fwd", flops=2.0 * n**3, bytes=3.0 * n * n * 2)
    (t,) = roofline_times(hw, [op], "bf16")
    assert t == pytest.approx(2.0 * n**3 / 100e12)


def test_roofline_pointwise_is_bandwidth_bound(gpt_case) -> None:
    hw = resolve_case(gpt_case, "x").hardware
    op = Operator(name="p", kind="pointwise", phase="fwd", flops=1e6, bytes=2e9)
    (t,) = roofline_times(hw, [op], "bf16")
    assert t == pytest.approx(2e9 / 2e12)


def test_pipeline_bubble_is_pp_minus_one_stage_times(gpt_case) -> None:
    case = resolve_case(gpt_case, "x")
    pred = compose_training(case, price_case(case), communication_nodes(case))
    micro = case.workload.microbatches(case.parallelism.dp)
    optimizer = price_case(case).query("section == 'optimizer'").time_s.sum()
    stage = (pred.step_time_s - pred.bubble_s - optimizer) / micro
    assert pred.bubble_s == pytest.approx((case.parallelism.pp - 1) * stage)


def test_layer_flops_match_6_params_per_token(gpt_case) -> None:
    """Forward+backward GEMM FLOPs of a GPT layer = 6 x layer params x tokens (+ attention)."""
    case = resolve_case({**gpt_case, "parallelism": {"tp": 1, "pp": 1, "dp": 1}, "network": "dgx-a100"}, "x")
    ops = price_case(case)
    layer = ops[(ops.section == "layer_dense") & (ops.kind == "gemm")]
    h, s = 12288, 2048
    layer_params = 12 * h * h   # QKV 3h², O h², MLP 8h² (biases ignored)
    assert (layer.flops * layer["count"]).sum() == pytest.approx(6 * layer_params * s, rel=1e-3)


def test_korthikanti_formulas() -> None:
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    assert korthikanti_layer_activations(s, b, h, a, 1, False, "none", False) == pytest.approx(s * b * h * (34 + 5 * a * s / h))
    assert korthikanti_layer_activations(s, b, h, a, t, True, "selective", False) == pytest.approx(34 * s * b * h / t)
    assert korthikanti_layer_activations(s, b, h, a, 1, False, "full", False) == pytest.approx(2 * s * b * h)


def test_mixed_precision_adam_is_16_bytes_per_param(gpt_case) -> None:
    case = resolve_case({**gpt_case, "parallelism": {"tp": 8, "pp": 8, "dp": 1}}, "x")
    mem = closed_form_memory(case)
    assert (mem.weights + mem.gradients + mem.optimizer) == pytest.approx(16 * local_parameters(case))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.floats(min_value=1.0, max_value=8.0))
def test_more_bandwidth_never_slows_a_step(gpt_case, factor: float) -> None:
    def step(bw_scale: float) -> float:
        net = dict(gpt_case["network"])
        net["dimensions"] = [{**d, "link_bandwidth": f"{25 * bw_scale} GB/s"} for d in net["dimensions"]]
        case = resolve_case({**gpt_case, "network": net, "parallelism": {**gpt_case["parallelism"], "dp": 2},
                             "workload": {**gpt_case["workload"], "global_batch": 128}}, "x")
        return compose_training(case, price_case(case), communication_nodes(case)).step_time_s
    assert step(factor) <= step(1.0) + 1e-12


def test_hardware_utilization_scales_compute(gpt_case) -> None:
    case = resolve_case(gpt_case, "x")
    slow = dataclasses.replace(case, hardware=dataclasses.replace(
        case.hardware, utilization=dataclasses.replace(case.hardware.utilization, compute=0.5)))
    fast_t = compose_training(case, price_case(case), communication_nodes(case)).compute_time_s
    slow_t = compose_training(slow, price_case(slow), communication_nodes(slow)).compute_time_s
    assert slow_t > 1.5 * fast_t

"""The per-row implied compute constant (validate/implied.py, docs/transfer.md)."""
import dataclasses

import numpy as np
import pytest

from rapidllm.prediction import evaluate
from rapidllm.spec.experiment import expand_with_cases
from rapidllm.spec.hardware import Utilization
from rapidllm.spec.paths import project_root
from rapidllm.validate.implied import as_time, case_implied, implied_constant
from rapidllm.validate.suites import load_suite


def _row(suite: str, index: int):
    s = load_suite(project_root() / "validation" / "suites" / f"{suite}.yaml")
    row, case = list(expand_with_cases(s.experiment))[index]
    return s, row, case


def test_closed_form_recovers_the_constant_of_an_exact_a_over_c_plus_b():
    a, b, truth, u = 3.0, 0.5, 0.62, 0.8
    p = lambda c: a / c + b                                     # noqa: E731
    share, c = implied_constant(u, p(u), p(u / 2), p(truth))
    assert c == pytest.approx(truth) and share == pytest.approx(a / u / p(u))
    assert np.isnan(implied_constant(u, p(u), p(u / 2), b * 0.9)[1])         # faster than B: no constant
    assert np.isnan(implied_constant(u, 1.0, 1.0 + 1e-3, 1.2)[1])            # compute share ~0: unconstrained
    assert as_time("tokens_per_s", 4.0) == 0.25 and as_time("ttft_s", 4.0) == 4.0


def test_a_compute_bound_training_row_is_matched_at_its_implied_constant():
    suite, row, case = _row("megatron_gpt_a100", 0)              # GPT 22B, full recompute
    measured = row["meta_measured_step_time_s"]
    pred, share, c = case_implied(case, {"step_time_s": measured})["step_time_s"]
    assert share > 0.5 and 0.3 < c < 1.0
    hw = dataclasses.replace(case.hardware, utilization=dataclasses.replace(case.hardware.utilization, compute=c))
    at_c = evaluate(dataclasses.replace(case, hardware=hw))["step_time_s"]
    assert at_c == pytest.approx(measured, rel=0.03)             # first-order model, checked on the engine


def test_a_decode_dominated_latency_barely_depends_on_the_compute_constant():
    suite, row, case = _row("llama2_latency_a100", 0)
    _, share, _ = case_implied(case, {"e2e_latency_s": row["meta_measured_e2e_latency_s"]})["e2e_latency_s"]
    assert share < 0.05
    assert isinstance(case.hardware.utilization, Utilization)

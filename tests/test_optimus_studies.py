"""The Optimus-extension studies (docs/optimus-studies.md): their inputs stay what the docs say, the GShard
capacity volume, the Pareto front and the sensitivity perturbation."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from rapidllm.cost.config import cost_from_mapping
from rapidllm.cost.package import package_cost
from rapidllm.cost.sensitivity import parameters, perturbed
from rapidllm.graph.comm_nodes import dispatch_bytes
from rapidllm.pipeline.optimus import flash_kernels, pareto
from rapidllm.spec.case import resolve_case
from rapidllm.spec.experiment import expand, load_experiment, raw_cases
from rapidllm.spec.paths import project_root

ROOT = project_root()
STUDIES = sorted(p.stem for p in (ROOT / "config" / "experiments").glob("optimus-*.yaml"))


def test_every_study_runs_in_the_pipeline_and_expands_without_invalid_rows():
    listed = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["experiments"]
    assert len(STUDIES) == 7 and set(STUDIES) <= set(listed)
    for name in STUDIES:
        rows = expand(load_experiment(ROOT / "config" / "experiments" / f"{name}.yaml"))
        assert all(r["status"] == "ok" for r in rows), name


@pytest.mark.parametrize("name", ["optimus-cost-training", "optimus-cost-inference"])
def test_cost_study_base_is_the_a100_file(name):
    """The study inlines config/hardware/a100-sxm4-80gb.yaml to override HBM keys; it must not drift."""
    a100 = yaml.safe_load((ROOT / "config" / "hardware" / "a100-sxm4-80gb.yaml").read_text())
    base = yaml.safe_load((ROOT / "config" / "experiments" / f"{name}.yaml").read_text())["base"]["hardware"]
    for m in (a100, base):
        m.pop("name"), m.pop("description", None)
    assert base == a100


def test_capacity_dispatch_sends_the_padded_gshard_buffer():
    exp = load_experiment(ROOT / "config" / "experiments" / "optimus-moe.yaml")
    raw = next(r for label, r in raw_cases(exp) if "capacity" in label)["case"]
    capacity = resolve_case(raw, "test")
    token = resolve_case({**raw, "parallelism": {**raw["parallelism"], "moe_dispatcher": "alltoall"}}, "test")
    cf = capacity.model.moe.capacity_factor
    assert cf == 1.25
    assert dispatch_bytes(capacity, 8192) == pytest.approx(cf * dispatch_bytes(token, 8192))


def test_pareto_front():
    cost = np.array([1.0, 2.0, 3.0, 2.5, np.nan, 1.0])
    time = np.array([5.0, 3.0, 1.0, 4.0, 0.1, 6.0])
    assert pareto(cost, time).tolist() == [True, True, True, False, False, False]
    # the same time up to rounding (one memory system written in two units): the dearer design is dominated
    assert pareto(np.array([1389.0, 1331.0]), np.array([15.367297, 15.367297 * (1 + 1e-15)])).tolist() == [False, True]


def test_sensitivity_moves_one_input_and_keeps_fractions_below_one():
    a100 = yaml.safe_load((ROOT / "config" / "hardware" / "a100-sxm4-80gb.yaml").read_text())
    names = parameters(a100)
    assert "package.dies.0.area_mm2" in names and "process:n7.defect_density_per_cm2" in names
    assert not any(n.endswith("wafer_diameter_mm") for n in names)
    base = package_cost(cost_from_mapping(a100, "a100").package)
    up = perturbed(a100, "process:n7.defect_density_per_cm2", 1.25)
    assert package_cost(up.package).unit_usd > base.unit_usd
    worse = perturbed(a100, "package.assembly.attach_yield", 1.25).package
    assert worse.attach_yield == pytest.approx(1 - 0.01 * 1.25)


def test_kernel_table_turns_published_rates_into_times():
    t = flash_kernels(ROOT / "validation" / "references" / "flash_attention_kernels_h100.csv")
    measured = t[t.measured_tflops.notna()]
    assert np.allclose(measured.measured_s, measured.flops / (measured.measured_tflops * 1e12))
    assert t[t.seq_len == 32768].measured_s.isna().all() and len(t[t.seq_len == 32768]) == 4
    # the causal forward's FLOPs are half the non-causal one's (the published convention)
    fwd = t[(t["pass"] == "forward") & (t.kernel == "flash") & (t.seq_len == 16384)].set_index("causal").flops
    assert fwd[True] / fwd[False] == pytest.approx(0.5, rel=1e-3)
    assert not math.isnan(float(pd.to_numeric(measured.error_pct).abs().max()))

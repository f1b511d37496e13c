"""GEMM tile model: physical properties, CLI, and accuracy against measured kernels (paper Fig 10)."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rapidllm.cli import gemm as cli_gemm
from rapidllm.ops.gemm import gemm_time, price_gemms, roofline_gemm_time
from rapidllm.ops.tiles import build_catalog
from rapidllm.spec.hardware import HardwareSpec
from rapidllm.validate.kernels import errors, load_cases, load_hardware, validate_set
from test_gemm_kernel import make_hw

dims = st.integers(min_value=1, max_value=50000)


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 16), m=dims, n=dims, k=dims)
def test_never_faster_than_roofline(b, m, n, k):
    hw = make_hw()
    t = gemm_time(hw, m, n, k, "bf16", batch=b)
    assert t >= roofline_gemm_time(hw, m, n, k, "bf16", b) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(m=dims, n=dims, k=dims, scale=st.floats(1.0, 8.0))
def test_more_hbm_bandwidth_never_slower(m, n, k, scale):
    hw = make_hw()
    fast = replace(hw, hbm_bandwidth=hw.hbm_bandwidth * scale)
    assert gemm_time(fast, m, n, k, "bf16") <= gemm_time(hw, m, n, k, "bf16")


def test_candidates_respect_sm_limits():
    hw = make_hw()
    cat = build_catalog(hw, "bf16")
    lim = hw.limits
    assert len(cat) > 20
    assert np.all(cat.threads <= lim.max_threads_per_block) and np.all(cat.regs <= lim.max_registers_per_thread)
    assert np.all(cat.smem <= lim.max_shared_memory_per_block)
    occ = cat.occupancy
    assert np.all(occ * cat.threads <= lim.max_threads) and np.all(occ * cat.smem <= lim.max_shared_memory)
    assert np.all(occ * cat.threads * cat.regs <= lim.max_registers)
    tiny = replace(hw, limits=replace(lim, max_shared_memory=48 * 1024, max_shared_memory_per_block=48 * 1024))
    assert np.all(build_catalog(tiny, "bf16").smem <= 48 * 1024) and len(build_catalog(tiny, "bf16")) < len(cat)


def test_schema_minimum_sm_limits_fit_a_tile():
    """The smallest SM limits hardware.schema.yaml accepts still hold a GEMM tile for every dtype and every MMA
    style: below them `build_catalog` found no candidate, a traceback out of `rapidllm predict`."""
    from rapidllm.spec.schema import schema_of
    from rapidllm.units import parse_quantity
    props = schema_of("hardware")["properties"]["sm_limits"]["properties"]
    smem = parse_quantity(props["max_shared_memory"]["at_least"], "bytes")
    assert smem == parse_quantity(props["max_shared_memory_per_block"]["at_least"], "bytes")
    lim = replace(make_hw().limits, **{k: props[k]["minimum"] for k in ("max_threads", "max_threads_per_block",
                  "max_registers", "max_registers_per_thread", "max_blocks")},
                  max_shared_memory=smem, max_shared_memory_per_block=smem)
    for cc in ("8.0", "9.0", "10.0"):
        hw = make_hw(limits=lim, compute_capability=cc)
        for dtype in ("fp8", "bf16", "tf32"):
            assert len(build_catalog(hw, dtype)) > 0, (cc, dtype)


def test_shape_effects():
    hw = make_hw()
    pr = price_gemms(hw, 1, [8192, 1, 8192], [8192, 8192, 8193], [8192, 8192, 8192], "bf16")
    big, gemv, ragged = pr.time_s
    assert pr.bound_name(0) == "compute" and pr.bound_name(1) == "hbm"
    # a ragged N costs a whole extra tile column: efficiency drops noticeably, not by 1/8192
    assert ragged / big > 1.004
    # a skinny GEMM with few output tiles splits K to fill the SMs
    skinny = price_gemms(hw, 1, [128], [128], [65536], "bf16")
    assert skinny.split_k[0] > 1
    # at a lower locked clock compute-bound GEMMs slow down, HBM-bound ones barely
    slow = hw.at_clock(1.0e9)
    assert gemm_time(slow, 8192, 8192, 8192, "bf16") > 1.3 * big
    assert gemm_time(slow, 1, 8192, 8192, "bf16") < 1.1 * gemv
    # batching is cheaper than separate launches
    assert gemm_time(hw, 512, 512, 512, "bf16", batch=8) < 8 * gemm_time(hw, 512, 512, 512, "bf16")


def test_flops_and_dtypes():
    hw = make_hw()
    pr = price_gemms(hw, [2], [3], [5], [7], "bf16")
    assert pr.flops[0] == 2 * 2 * 3 * 5 * 7
    assert gemm_time(hw, 8192, 8192, 8192, "tf32") > 1.8 * gemm_time(hw, 8192, 8192, 8192, "bf16")
    with pytest.raises(ValueError):
        price_gemms(hw, 1, 1, 1, 1, "int3")


def test_cli_json(capsys):
    p = argparse.ArgumentParser()
    cli_gemm.add_parser(p.add_subparsers())
    args = p.parse_args(["gemm", "--hardware", "h100-sxm5-80gb", "--m", "4096", "--n", "4096", "--k", "4096",
                         "--dtype", "bf16", "--json"])
    assert args.func(args) == 0
    r = json.loads(capsys.readouterr().out)
    assert {"time_s", "flops", "achieved_flops_per_s", "tile", "split_k", "hbm_bytes", "bound"} <= set(r)
    assert r["flops"] == 2 * 4096**3 and 0 < r["achieved_flops_per_s"] <= 989e12
    assert r["bound"] in ("compute", "shared_memory", "latency", "l2", "hbm")
    args = p.parse_args(["gemm", "--hardware", "a100-sxm4-80gb", "--m", "1", "--n", "4096", "--k", "4096"])
    assert args.func(args) == 0 and "bound" in capsys.readouterr().out


def test_reference_sets_load():
    a, h = load_cases("a100_ncu"), load_cases("h100_xla")
    assert len(a) == 48 and a.clock_hz.between(1.0e9, 1.07e9).all()
    assert len(h) == 1875 and set(h.dtype) == {"bf16", "tf32", "fp8"}
    assert errors([1.1, 0.9], [1.0, 1.0]).mape == pytest.approx(0.1)
    assert errors([2.0, 1.0], [1.0, 3.0]).mape_time_weighted == pytest.approx(3.0 / 4.0)


def test_a100_ncu_accuracy():
    """Paper: tile model 1.9 % vs roofline 6.1 % time-weighted. Target <= 5 %; from the datasheet alone
    (utilization 1.0) we reach 2.0 % (roofline 3.9 %)."""
    _, rep = validate_set("a100_ncu", "datasheet")
    tile, roof = rep["bf16"]["tile"], rep["bf16"]["roofline"]
    assert tile.mape_time_weighted <= 0.025
    assert tile.mape_time_weighted < roof.mape_time_weighted and tile.mape < roof.mape
    _, paper = validate_set("a100_ncu", "paper")     # the A100 result does not hinge on the constants
    assert paper["bf16"]["tile"].mape_time_weighted <= 0.025


def test_h100_xla_bf16_accuracy():
    """Target <= 10 %. Datasheet alone: 9.6 % plain (10.5 % time-weighted, the large GEMMs reach ~80 % of
    the 989 TFLOP/s peak); with the paper's constants (compute 85 %, HBM 80 %): 6.8 % plain, 4.4 % weighted."""
    _, rep = validate_set("h100_xla", "datasheet")
    tile, roof = rep["bf16"]["tile"], rep["bf16"]["roofline"]
    assert tile.mape <= 0.10
    assert tile.mape < roof.mape and tile.mape_time_weighted < roof.mape_time_weighted
    _, paper = validate_set("h100_xla", "paper")
    assert paper["bf16"]["tile"].mape <= 0.075 and paper["bf16"]["tile"].mape_time_weighted <= 0.05


def test_named_hardware_loads():
    hw = load_hardware("h100-sxm5-80gb")
    assert isinstance(hw, HardwareSpec) and len(build_catalog(hw, "fp8")) > 20

"""docs/new-device.md (user trial #1 and #4): every hardware key is on the page, and the what-if bound it
describes holds: a shared-memory-bound GEMM does not move with tensor_flops, it moves with
shared_memory_bandwidth_per_sm, and `rapidllm gemm` says so when it prints that bound."""
from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from conftest import ROOT
from rapidllm.cli import main
from rapidllm.cli.gemm import SMEM_NOTE, price_one
from rapidllm.spec.hardware import HardwareSpec
from rapidllm.spec.named import resolve_named

PAGE = ROOT / "docs" / "new-device.md"
SHAPE = (16384, 16384, 16384)


def _device(name: str) -> HardwareSpec:
    return HardwareSpec.from_mapping(*resolve_named("hardware", name, "test", "hardware"))


def test_every_hardware_key_is_on_the_page() -> None:
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "hardware.schema.yaml").read_text())["properties"]
    keys = set(schema) | set(schema["sm_limits"]["properties"]) | set(schema["tensor_flops"]["properties"])
    text = PAGE.read_text()
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert not missing, missing


def test_the_documented_defaults_are_the_loaders() -> None:
    """128 B/clk x clock and 2.5 x HBM, as the page and the schema say."""
    m, where = resolve_named("hardware", "b200", "test", "hardware")
    assert "l2_bandwidth" not in m and "shared_memory_bandwidth_per_sm" not in m
    hw = HardwareSpec.from_mapping(m, where)
    assert hw.smem_bandwidth_per_sm == pytest.approx(128 * hw.clock_hz)
    assert hw.l2_bandwidth == pytest.approx(2.5 * hw.hbm_bandwidth)
    assert f"{128 * hw.clock_hz / 1e9:.1f} GB/s on B200" in PAGE.read_text()


def test_a_shared_memory_bound_gemm_moves_with_shared_memory_not_flops() -> None:
    hw = _device("b200")
    base = price_one(hw, *SHAPE, "bf16")
    assert base["bound"] == "shared_memory" and base["smem_s"] > base["compute_s"]
    flops = dataclasses.replace(hw, tensor_flops={k: 2 * v for k, v in hw.tensor_flops.items()})
    assert price_one(flops, *SHAPE, "bf16")["time_s"] == pytest.approx(base["time_s"], rel=1e-9)
    smem = dataclasses.replace(hw, smem_bandwidth_per_sm=2 * hw.smem_bandwidth_per_sm)
    faster = price_one(smem, *SHAPE, "bf16")
    assert faster["time_s"] < base["time_s"] and faster["bound"] != "shared_memory"
    # never above the calibrated compute ceiling
    assert faster["achieved_flops_per_s"] <= hw.tensor_flops["bf16"] * hw.utilization.compute


def test_gemm_names_the_key_only_when_shared_memory_bounds_it(capsys) -> None:
    args = ["gemm", "--m", *map(str, SHAPE[:1]), "--n", str(SHAPE[1]), "--k", str(SHAPE[2]), "--dtype", "bf16"]
    notes = {}
    for hw in ("b200", "h100-sxm5-80gb"):
        assert main([*args, "--hardware", hw]) == 0
        out = capsys.readouterr().out
        notes[hw] = (re.search(r"bound\s+(\S+)", out)[1], SMEM_NOTE in out)
    assert notes["b200"] == ("shared_memory", True)
    assert notes["h100-sxm5-80gb"][0] != "shared_memory" and not notes["h100-sxm5-80gb"][1]
    assert "shared_memory_bandwidth_per_sm" in SMEM_NOTE

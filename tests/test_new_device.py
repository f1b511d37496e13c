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


def test_a_flops_what_if_runs_into_the_shared_memory_bound() -> None:
    """The 16k bf16 GEMM on B200 is compute-bound as shipped (tcgen05 pricing); with tensor_flops x2 it turns
    shared-memory-bound, more FLOP/s do not move it further, shared_memory_bandwidth_per_sm x2 does."""
    hw = _device("b200")
    shipped = price_one(hw, *SHAPE, "bf16")
    assert shipped["bound"] == "compute"

    def flops(h: HardwareSpec, f: float) -> HardwareSpec:
        return dataclasses.replace(h, tensor_flops={k: f * v for k, v in h.tensor_flops.items()})

    base = price_one(flops(hw, 2), *SHAPE, "bf16")
    assert base["bound"] == "shared_memory" and base["smem_s"] > base["compute_s"]
    assert base["time_s"] < shipped["time_s"]
    assert price_one(flops(hw, 4), *SHAPE, "bf16")["time_s"] == pytest.approx(base["time_s"], rel=1e-9)
    smem = dataclasses.replace(flops(hw, 2), smem_bandwidth_per_sm=2 * hw.smem_bandwidth_per_sm)
    faster = price_one(smem, *SHAPE, "bf16")
    assert faster["time_s"] < base["time_s"] and faster["bound"] != "shared_memory"
    # never above the calibrated compute ceiling
    assert faster["achieved_flops_per_s"] <= 2 * hw.tensor_flops["bf16"] * hw.utilization.compute


def test_gemm_names_the_key_only_when_shared_memory_bounds_it(capsys) -> None:
    """16384 x 640 x 16384 bf16 runs 128-column tiles on B200 (640 = 5 x 128): shared-memory-bound there, and
    `rapidllm gemm` names the key; the 16k square GEMM on B200 and both on H100 are not."""
    notes = {}
    for hw, n in (("b200", 640), ("b200", SHAPE[1]), ("h100-sxm5-80gb", 640), ("h100-sxm5-80gb", SHAPE[1])):
        args = ["gemm", "--m", str(SHAPE[0]), "--n", str(n), "--k", str(SHAPE[2]), "--dtype", "bf16"]
        assert main([*args, "--hardware", hw]) == 0
        out = capsys.readouterr().out
        notes[hw, n] = (re.search(r"bound\s+(\S+)", out)[1], SMEM_NOTE in out)
    assert notes["b200", 640] == ("shared_memory", True)
    assert all(bound != "shared_memory" and not note for key, (bound, note) in notes.items() if key != ("b200", 640))
    assert "shared_memory_bandwidth_per_sm" in SMEM_NOTE

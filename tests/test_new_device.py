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
    assert faster["time_s"] < base["time_s"] and faster["smem_s"] < base["smem_s"]
    # never above the calibrated compute ceiling
    assert faster["achieved_flops_per_s"] <= 2 * hw.tensor_flops["bf16"] * hw.utilization.compute


def test_gemm_names_the_key_only_when_shared_memory_bounds_it(capsys, tmp_path) -> None:
    """A what-if device file (B200 with twice its tensor FLOP/s, given to `rapidllm gemm` by path) runs the 16k
    bf16 GEMM shared-memory-bound, and `rapidllm gemm` names the key; B200 as shipped and H100 are not."""
    text = (ROOT / "config" / "hardware" / "b200.yaml").read_text()
    doubled = yaml.safe_load(text)
    doubled["name"] = "b200-2x"
    doubled["tensor_flops"] = {k: f"{2 * float(v.split()[0]):g} {v.split()[1]}" for k, v in doubled["tensor_flops"].items()}
    (tmp_path / "b200-2x.yaml").write_text(yaml.safe_dump(doubled))
    notes = {}
    for hw in (str(tmp_path / "b200-2x.yaml"), "b200", "h100-sxm5-80gb"):
        args = ["gemm", "--m", str(SHAPE[0]), "--n", str(SHAPE[1]), "--k", str(SHAPE[2]), "--dtype", "bf16"]
        assert main([*args, "--hardware", hw]) == 0
        out = capsys.readouterr().out
        notes[hw] = (re.search(r"bound\s+(\S+)", out)[1], SMEM_NOTE in out)
    assert notes.pop(str(tmp_path / "b200-2x.yaml")) == ("shared_memory", True)
    assert all(bound != "shared_memory" and not note for bound, note in notes.values())
    assert "shared_memory_bandwidth_per_sm" in SMEM_NOTE


B200_FILE = ROOT / "config" / "hardware" / "b200.yaml"
CASE = {"model": "llama2-7b", "network": "dgx-b200", "precision": "bf16",
        "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8, "micro_batch": 1},
        "parallelism": {"tp": 8}}


def _nextgen(folder, name: str = "nextgen.yaml", hbm: str = "12 TB/s"):
    """docs/new-device.md's recipe (user trial 3): b200.yaml copied, renamed, its HBM bandwidth changed."""
    device = {**yaml.safe_load(B200_FILE.read_text()), "name": "nextgen", "hbm_bandwidth": hbm}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(yaml.safe_dump(device))
    return device


def test_a_device_file_given_by_path_is_its_content(tmp_path, monkeypatch) -> None:
    """User trial 3 (P8): `hardware: nextgen.yaml` in a case reads the file beside the case (not the working
    directory), and the case is the one with the device pasted inline: the same id and numbers; a copy of
    the file elsewhere keeps the id, an edit of its content changes it."""
    from rapidllm import load_case, predict

    device = _nextgen(tmp_path / "devices")
    inline = predict({**CASE, "hardware": device})
    (tmp_path / "cases").mkdir()
    case = tmp_path / "cases" / "c.yaml"
    case.write_text(yaml.safe_dump({**CASE, "hardware": "../devices/nextgen.yaml"}))
    monkeypatch.chdir(ROOT)                 # not the case's folder
    by_path = predict(case)
    assert by_path.case_id == inline.case_id and by_path.step_time_s == inline.step_time_s
    assert load_case(case).hardware.name == "nextgen"
    _nextgen(tmp_path / "elsewhere")
    case.write_text(yaml.safe_dump({**CASE, "hardware": "../elsewhere/nextgen.yaml"}))
    assert predict(case).case_id == inline.case_id
    _nextgen(tmp_path / "elsewhere", hbm="16 TB/s")
    assert predict(case).case_id != inline.case_id
    with pytest.raises(Exception, match=r"'nextgen.yaml' is a path; .* give the hardware inline there"):
        predict({**CASE, "hardware": "nextgen.yaml"})          # a mapping has no folder (the explorer's paste)


def test_gemm_and_experiments_take_a_device_file(tmp_path, monkeypatch, capsys) -> None:
    """`rapidllm gemm --hardware FILE` (relative to the working directory) prices the file's device as the
    named one it copies; an experiment's cross reads the file beside it and its rows carry the content."""
    import json

    from rapidllm.prediction import sweep

    copied = (tmp_path / "b200-copy.yaml")
    copied.write_text(B200_FILE.read_text())
    monkeypatch.chdir(tmp_path)
    args = ["--m", "4096", "--n", "4096", "--k", "4096", "--json"]
    assert main(["gemm", "--hardware", "b200", *args]) == 0
    named = json.loads(capsys.readouterr().out)
    assert main(["gemm", "--hardware", "b200-copy.yaml", *args]) == 0
    assert json.loads(capsys.readouterr().out) == named
    _nextgen(tmp_path)
    exp = tmp_path / "exp" / "x.yaml"
    exp.parent.mkdir()
    exp.write_text(yaml.safe_dump({"name": "x", "base": {**CASE, "hardware": "b200"},
                                   "cross": {"hardware": ["b200", "../nextgen.yaml"]}}))
    rows = sweep(exp)
    assert list(rows.hardware) == ["b200", "nextgen"] and list(rows.status) == ["ok", "ok"]
    assert rows.step_time_s[1] < rows.step_time_s[0]            # 12 TB/s of HBM against 8

"""A second newcomer's pass (README, api.md, search.md, cost.md, limits.md, network.md): a Llama-3.1-70B step
on 64 H100s, a made-up future GPU with its own hardware and network specs, bad input. What tripped the
newcomer, each kept fixed here.

Its refusals are in tests/bad_input_corpus.py (NEWCOMER), run by the bad-input harness of
tests/test_bad_inputs.py (exit 2, nothing on stdout, no traceback, no file written, the expected fragment).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from bad_input_corpus import CASE, SEARCH_SPEC
from conftest import ROOT
from rapidllm.cli import main


def test_a_wrong_key_in_a_file_of_the_right_kind_still_names_the_key(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """The wrong-kind line replaces the per-key lines only when the file is wholly another kind."""
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump({**CASE, "modle": "llama2-7b"}))
    assert main(["predict", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key(s) 'modle'" in err and "this is" not in err
    search = tmp_path / "s.yaml"            # a search spec without gpus is valid as a case: still "missing gpus"
    search.write_text(yaml.safe_dump({k: v for k, v in SEARCH_SPEC.items() if k != "gpus"}))
    assert main(["search", str(search), "--quiet", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().endswith("(top level): missing key 'gpus'")


INLINE_DEVICE = {**CASE["hardware"], "name": "x300-test", "utilization": {"compute": 0.7, "hbm": 0.7, "network": 0.7}}
INFERENCE = {"model": "llama2-7b", "network": "dgx-h100", "precision": "bf16", "parallelism": {"tp": 1},
             "workload": {"mode": "inference", "batch": 1, "concurrency": 1, "prompt_tokens": 64, "output_tokens": 4}}


def test_a_made_up_device_with_its_own_utilization_is_not_validated(capsys: pytest.CaptureFixture) -> None:
    """An inline device that is no file of config/hardware, given utilization constants of its own, carried
    `device_validated: true` and no warning, as if fitted on validation rows (docs/transfer.md)."""
    from rapidllm import predict, prediction
    prediction._WARNED.discard(("x300-test", ""))
    made_up = predict({**INFERENCE, "hardware": INLINE_DEVICE})
    assert made_up.device_validated is False
    assert "device x300-test has no validation rows of its own; a device of its own, not in config/hardware" \
        in capsys.readouterr().err
    h100 = predict({**INFERENCE, "hardware": "h100-sxm5-80gb"})
    assert h100.device_validated is True and "warning" not in capsys.readouterr().err
    # a what-if of a fitted device (an experiment's dotted override, the explorer's edit) keeps its flag, so
    # the pipeline's summaries and calibration's trial constants do not read as another device
    shipped = yaml.safe_load((ROOT / "config" / "hardware" / "h100-sxm5-80gb.yaml").read_text())
    for name in ("h100-sxm5-80gb+hbm_bandwidth=10 TB/s", "h100-sxm5-80gb-edited"):
        assert predict({**INFERENCE, "hardware": {**shipped, "name": name}}).device_validated is True, name
    assert "warning" not in capsys.readouterr().err


def test_a_float_residue_in_the_breakdown_prints_as_zero() -> None:
    """A failed NVLink cable's step printed 'pipeline bubble 2.292e-07 us' (2.3e-13 s of a 205 s step, the
    split's float residue); the JSON keeps the engine's number, the table shows 0."""
    from rapidllm import load_case, predict
    from rapidllm.cli.predict import table
    case = load_case(ROOT / "examples" / "gpt175b-tp8-pp8.yaml")
    pred = predict(case)
    for residue in (2.292e-13, -2.292e-13):
        lines = table(case, dataclasses.replace(pred, bubble_s=residue))
        bubble = next(line for line in lines if "pipeline bubble" in line)
        assert bubble.split()[2:] == ["0", "s", "0.0%"], bubble
    # the layout, which the case id names only as a hash, under the header
    assert lines[1] == "  layout: dp 1 x tp 8 x pp 8, sp, selective recompute, 1f1b, attention flash"


def test_the_explorer_page_says_when_a_device_is_not_validated(tmp_path: Path, monkeypatch) -> None:
    """A made-up or transferred device printed its warning on the server's stderr only; the page showed its
    numbers like a validated device's."""
    import sys

    from streamlit.testing.v1 import AppTest

    case = tmp_path / "x300.yaml"
    case.write_text(yaml.safe_dump({**INFERENCE, "hardware": INLINE_DEVICE}))
    monkeypatch.setattr(sys, "argv", ["app", "--case", str(case)])
    at = AppTest.from_file(str(ROOT / "lib" / "rapidllm" / "explore" / "app.py"), default_timeout=120).run()
    assert not at.exception
    assert any("no validation rows of its own" in w.value for w in at.warning)



def test_inference_replicas_count_in_cost_and_per_gpu_rates(tmp_path: Path) -> None:
    """An inference record's tokens/s is one dp replica's (its batch is per replica), but the cost model and
    the search's per-GPU throughput divided it by every replica's GPUs: Llama-3.1-70B, batch 64 on tp 8, cost
    1.53 $/M tokens on 8 H100s and 3.05 with dp 2 on 16, for the same replicas. Here Llama-2-7B on tp 2."""
    from rapidllm import predict, sweep
    from rapidllm.cost import add_cost_columns, price_prediction
    from rapidllm.search.objectives import per_gpu
    from rapidllm.spec.case import resolve_case

    layouts = [{"tp": 2, "dp": dp} for dp in (1, 2)]
    base = {**INFERENCE, "hardware": "h100-sxm5-80gb"}
    one, two = (resolve_case({**base, "parallelism": par}, "test") for par in layouts)
    p1, p2 = predict(one), predict(two)
    assert p1.tokens_per_s == p2.tokens_per_s                     # one replica's rate either way
    c1, c2 = price_prediction(one, p1), price_prediction(two, p2)
    assert c2["gpus"] == 2 * c1["gpus"] and c2["usd_per_hour"] == pytest.approx(2 * c1["usd_per_hour"])
    for key in ("usd_per_million_tokens", "tokens_per_s_per_watt", "tokens_per_s_per_capital_usd"):
        assert c2[key] == pytest.approx(c1[key]), key
    rate = per_gpu("tokens_per_s")
    assert rate(p2.to_dict(), two) == pytest.approx(rate(p1.to_dict(), one)) == pytest.approx(p1.tokens_per_s / 2)
    # the same on a sweep's table, from its dp column
    path = tmp_path / "replicas.yaml"
    path.write_text(yaml.safe_dump({"name": "replicas", "base": base, "cases": [{"parallelism": p} for p in layouts]}))
    frame = add_cost_columns(sweep(path))
    assert list(frame.usd_per_million_tokens) == pytest.approx([c1["usd_per_million_tokens"]] * 2)
    from rapidllm.cli.predict import table       # the table's header counts both replicas' GPUs: say whose rate
    assert any(line.split()[:5] == ["throughput,", "each", "of", "2", "replicas"] for line in table(two, p2))


def test_collective_on_a_case_file_sizes_the_fabric_its_faults_name(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """A case's faults name node ids of its fabric sized for its world (switch ids follow the ranks): `[0, 16]`
    is rank 0's NVSwitch on 16 GPUs. `collective --network case.yaml --ranks 8` sized the fabric for 8 ranks,
    where node 16 is an InfiniBand switch and the fault no cable: refused, so a case's degraded link could not
    be looked at one collective at a time."""
    import json

    case = {"model": "llama2-7b", "hardware": "h100-sxm5-80gb", "network": "superpod-ndr", "precision": "bf16",
            "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16, "micro_batch": 1},
            "parallelism": {"tp": 8, "dp": 2}}
    times = []
    for faults in ([], [{"link": [0, 16], "bandwidth_factor": 0.25}]):
        path = tmp_path / f"case{len(faults)}.yaml"
        path.write_text(yaml.safe_dump({**case, "faults": faults}))
        assert main(["collective", "--network", str(path), "--bytes", "256 MiB", "--ranks", "8", "--json"]) == 0
        times.append(json.loads(capsys.readouterr().out)["time_s"])
    assert times[1] > 2 * times[0]          # rank 0's cable at a quarter of its bandwidth

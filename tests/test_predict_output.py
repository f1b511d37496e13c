"""`rapidllm predict` output: the breakdown table, null (not 0.0) for keys that do not apply, and MFU / HFU
counted the same way (HFU = MFU without recomputation, HFU >= MFU with it, ~4/3 under full recompute)."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from conftest import ROOT
from rapidllm.cli import JSON_KEYS, main
from rapidllm.prediction import predict

EXAMPLE = ROOT / "examples" / "gpt175b-tp8-pp8.yaml"


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_training_json_nulls_and_table(capsys) -> None:
    out = _json(capsys, ["predict", str(EXAMPLE), "--json"])
    assert list(out) == list(JSON_KEYS)
    assert out["ttft_s"] is None and out["itl_s"] is None and out["e2e_latency_s"] is None
    assert out["step_time_s"] == pytest.approx(out["compute_time_s"] + out["exposed_comm_s"] + out["bubble_s"])
    parts = sum(out[f"{k}_bytes"] for k in ("weights", "gradients", "optimizer", "activations", "kv_cache", "framework"))
    assert parts <= out["peak_memory_bytes"] * (1 + 1e-9) and out["peak_memory_bytes"] <= out["capacity_bytes"]
    assert main(["predict", str(EXAMPLE)]) == 0
    text = capsys.readouterr().out
    shares = [float(s) for s in re.findall(r"^    (?:compute|exposed communication|pipeline bubble)\s+\S+ \S+\s+"
                                           r"([\d.]+)%$", text, re.M)]
    assert len(shares) == 3 and sum(shares) == pytest.approx(100.0, abs=0.15)
    gib = {m[0]: float(m[1]) for m in re.findall(r"^    (optimizer state|peak|capacity)\s+([\d.]+)", text, re.M)}
    assert gib["capacity"] == pytest.approx(out["capacity_bytes"] / 2**30, abs=0.01)
    assert gib["peak"] == pytest.approx(out["peak_memory_bytes"] / 2**30, abs=0.01)
    assert "MFU / HFU" in text and "time to first token" not in text


def test_inference_json_nulls(tmp_path, capsys) -> None:
    case = {"model": "llama2-7b", "hardware": "a100-sxm4-80gb", "network": "dgx-a100",
            "workload": {"mode": "inference", "prompt_tokens": 200, "output_tokens": 20}}
    path = tmp_path / "inf.yaml"
    path.write_text(yaml.safe_dump(case))
    out = _json(capsys, ["predict", str(path), "--json"])
    assert out["mfu"] is None and out["hfu"] is None and out["ttft_s"] > 0 and out["kv_cache_bytes"] > 0
    assert main(["predict", str(path)]) == 0
    text = capsys.readouterr().out
    assert "time to first token" in text and "KV cache" in text and "MFU" not in text


def test_infeasible_case_has_null_timings(tmp_path, capsys) -> None:
    case = yaml.safe_load(EXAMPLE.read_text())
    case["parallelism"] = {"tp": 1, "pp": 1, "dp": 1}                # 175B on one GPU does not fit
    case["network"] = "dgx-a100"
    case["workload"]["global_batch"] = 8
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(case))
    out = _json(capsys, ["predict", str(path), "--json"])
    assert out["status"] == "infeasible" and out["feasible"] is False
    assert all(out[k] is None for k in ("step_time_s", "mfu", "hfu", "tokens_per_s", "ttft_s"))
    assert out["peak_memory_bytes"] > out["capacity_bytes"]


@pytest.mark.parametrize("engine", ["event", "baseline"])
def test_hfu_counts_model_flops_plus_recompute(engine: str) -> None:
    case = yaml.safe_load(EXAMPLE.read_text())
    ratios = {}
    for recompute in ("none", "selective", "full"):
        case["parallelism"]["recompute"] = recompute
        p = predict(case, engine)
        ratios[recompute] = p.hfu / p.mfu
    assert ratios["none"] == pytest.approx(1.0, rel=1e-12)
    assert 1.0 < ratios["selective"] < 1.05              # core attention only: a small share of the FLOPs
    # full recompute re-runs the forward (1/3 of forward + backward, Korthikanti et al. 2022): 4/3, a little
    # less because the optimizer, loss and FlashAttention's 2.5x backward are not recomputed
    assert 1.25 < ratios["full"] <= 4 / 3


@pytest.mark.parametrize("serving", ["steady_state", "simulated", "disaggregated"])
def test_the_serving_model_is_named(tmp_path, capsys, serving: str) -> None:
    """The serving models' TTFTs differ up to 10x at high concurrency (user trial #3): the layout line, a note
    under the latencies and the JSON name the model that priced the case."""
    case = {"model": "llama3.1-8b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
            "workload": {"mode": "inference", "concurrency": 16, "prompt_tokens": 500, "output_tokens": 50,
                         "serving": serving}}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(case))
    assert _json(capsys, ["predict", str(path), "--json"])["serving"] == serving
    assert main(["predict", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"serving {serving}, concurrency 16, batch 1" in lines[1]
    note = next(line for line in lines if line.startswith("  note: "))
    assert note.startswith(f"  note: serving {serving}:") and 'docs/engine.md "Serving"' in note


def test_the_baseline_engine_names_the_static_batch_it_priced(tmp_path, capsys) -> None:
    """The alpha-beta baseline prices a static batch whatever the case asks: it is labelled so, no note."""
    case = {"model": "llama3.1-8b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
            "workload": {"mode": "inference", "concurrency": 16, "prompt_tokens": 500, "output_tokens": 50}}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(case))
    assert _json(capsys, ["predict", str(path), "--json", "--engine", "baseline"])["serving"] == "static"
    assert main(["predict", str(path), "--engine", "baseline"]) == 0
    text = capsys.readouterr().out
    assert "static batch 1" in text.splitlines()[1] and "note:" not in text


def test_static_batching_and_training_name_no_serving_model(tmp_path, capsys) -> None:
    case = {"model": "llama2-7b", "hardware": "a100-sxm4-80gb", "network": "dgx-a100",
            "workload": {"mode": "inference", "batch": 4, "concurrency": 4, "prompt_tokens": 200,
                         "output_tokens": 20}}
    path = tmp_path / "static.yaml"
    path.write_text(yaml.safe_dump(case))
    assert _json(capsys, ["predict", str(path), "--json"])["serving"] == "static"
    assert main(["predict", str(path)]) == 0
    text = capsys.readouterr().out
    assert "static batch 4" in text.splitlines()[1] and "note:" not in text
    assert _json(capsys, ["predict", str(EXAMPLE), "--json"])["serving"] is None


def test_every_serving_model_of_the_schema_has_a_note() -> None:
    from rapidllm.cli.predict import SERVING_NOTES
    schema = (ROOT / "workflow" / "schemas" / "case.schema.yaml").read_text()
    (enum,) = re.findall(r"serving: \{enum: \[([^\]]+)\]", schema)
    assert set(SERVING_NOTES) == {e.strip() for e in enum.split(",")}


SMALL = {"model": "llama2-7b", "hardware": "a100-sxm4-80gb", "network": "dgx-a100", "precision": "bf16",
         "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16, "micro_batch": 1},
         "parallelism": {"tp": 2, "pp": 4, "dp": 1}}


def test_a_faulted_prediction_says_so(tmp_path, capsys) -> None:
    """User trial 3 (P4): a faulted prediction printed the header and layout of a healthy one, and --json had
    no faults. Rank 0's NVSwitch cable at 1/50 makes stage 0 (tp ranks 0-1) so slow that it is the critical
    stage and waits for no other: its bubble falls to 0 and the wait is its own exposed communication
    (docs/engine.md, "Breakdown"); the table says so."""
    healthy, faulted = tmp_path / "healthy.yaml", tmp_path / "faulted.yaml"
    healthy.write_text(yaml.safe_dump(SMALL))
    faulted.write_text(yaml.safe_dump({**SMALL, "faults": [{"link": [0, 8], "bandwidth_factor": 0.02},
                                                          {"link": [2, 8], "extra_latency": "2 us"}]}))
    assert _json(capsys, ["predict", str(healthy), "--json"])["faults"] == []
    out = _json(capsys, ["predict", str(faulted), "--json"])
    assert [f["link"] for f in out["faults"]] == [[0, 8], [2, 8]]
    assert out["faults"][0]["bandwidth_factor"] == 0.02 and out["faults"][1]["extra_latency_s"] == 2e-6
    base = predict(healthy)
    assert base.bubble_s > 0.1 * base.step_time_s          # 4 stages, 16 micro-batches: (p-1)/m of the ideal
    assert out["bubble_s"] < 1e-9 * out["step_time_s"] and out["exposed_comm_s"] > out["step_time_s"] - base.step_time_s
    assert main(["predict", str(faulted)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "  faults: [0, 8] bandwidth x0.02; [2, 8] +2 us latency"
    assert any(line.startswith("  note: the split is the critical stage's") for line in lines)
    assert main(["predict", str(healthy)]) == 0
    assert "faults" not in capsys.readouterr().out

"""`rapidllm predict` prints the documented JSON for a Megatron GPT-175B case."""
import json
import subprocess
import sys

import yaml

from rapidllm.cli import JSON_KEYS


def test_predict_gpt175b_json(tmp_path) -> None:
    case = {"model": "gpt-175b", "hardware": "a100-sxm4-80gb", "network": "superpod-hdr", "precision": "bf16",
            "workload": {"mode": "training", "seq_len": 2048, "global_batch": 64, "micro_batch": 1},
            "parallelism": {"tp": 8, "pp": 8, "dp": 1, "sp": True, "recompute": "selective"}}
    path = tmp_path / "gpt175b.yaml"
    path.write_text(yaml.safe_dump(case))
    run = subprocess.run([sys.executable, "-m", "rapidllm.cli", "predict", str(path), "--json"],
                         capture_output=True, text=True, check=True)
    out = json.loads(run.stdout)
    assert list(out) == [k for k in JSON_KEYS if k in out]
    for key in ("step_time_s", "peak_memory_bytes", "feasible", "mfu", "compute_time_s", "bubble_s"):
        assert key in out
    assert out["feasible"] is True and out["status"] == "ok"
    # 175B x 6 x 131072 tokens at <= 312 TFLOP/s on 64 GPUs is at least 6.9 s: the model cannot beat peak.
    assert out["step_time_s"] >= 6 * 174.6e9 * 64 * 2048 / (64 * 312e12)
    assert 0 < out["mfu"] <= 1


def test_predict_inference_keys(tmp_path) -> None:
    case = {"model": "llama2-7b", "hardware": "a100-sxm4-80gb", "network": "dgx-a100",
            "workload": {"mode": "inference", "prompt_tokens": 200, "output_tokens": 200}}
    path = tmp_path / "llama.yaml"
    path.write_text(yaml.safe_dump(case))
    run = subprocess.run([sys.executable, "-m", "rapidllm.cli", "predict", str(path), "--json"],
                         capture_output=True, text=True, check=True)
    out = json.loads(run.stdout)
    assert out["e2e_latency_s"] == out["ttft_s"] + 199 * out["itl_s"] or abs(
        out["e2e_latency_s"] - (out["ttft_s"] + 199 * out["itl_s"])) < 1e-9
    # decode of a 7B model must at least stream its 13.5 GB of bf16 weights per token at 2.04 TB/s
    assert out["itl_s"] >= 2 * 6.7e9 / 2.039e12

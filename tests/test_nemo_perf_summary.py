"""The NeMo / Megatron-Bridge performance-summary suite (issue 22): held out of calibration but for two B200
rows (B200's own rows, docs/transfer.md), every row predicted or skipped with a reason, GB200 / GB300 rows
flagged as devices without rows of their own.

One sweep of its 63 expressible rows (~25 s CPU)."""
import math

import pandas as pd
import pytest

from rapidllm.spec.paths import project_root
from rapidllm.validate.calibrate import calibration_entries

SUITE = project_root() / "validation" / "suites" / "nemo_perf_summary.yaml"


def test_held_out_of_calibration_but_two_b200_rows_and_of_the_overall_mape(suite):
    """Only B200, the device without other calibration data, is fitted here: the latest release's primary rows
    of the smallest and the largest dense model (the description's rule); no H100 or Grace-Blackwell row."""
    assert not suite.in_overall
    entries = calibration_entries([suite])
    assert set(entries) == {"b200"}
    labels = {next(c["label"] for c in suite.experiment.cases if c["meta"]["row"] == r) for r in suite.calibration_rows}
    assert labels == {"25.11 DGX-B200 LLAMA3_8B primary 8", "25.11 DGX-B200 LLAMA3.1_405B primary 128"}


def test_measured_throughput_is_the_published_rate_times_gpus(suite):
    table = pd.read_csv(suite.reference)
    case = next(c for c in suite.experiment.cases if c["label"] == "25.11 DGX-H100 LLAMA3_70B primary 64")
    row = table.iloc[case["meta"]["row"]]
    assert (row.tokens_per_s_per_gpu, row.num_gpus) == (1602, 64)
    assert case["meta"]["measured_tokens_per_s"] == 1602 * 64
    # the layout as published and the recipe defaults the table omits
    assert case["parallelism"] == {"tp": 4, "pp": 8, "cp": 1, "ep": 1, "virtual_stages": 5, "dp": 2, "sp": True,
                                   "tp_comm_overlap": True, "schedule": "interleaved"}
    assert case["hardware"] == "h100-sxm5-80gb" and case["precision"] == "fp8"


def test_every_row_predicted_or_listed_with_a_reason(suite, rows):
    assert set(rows.row) == set(range(suite.rows))
    skipped = rows[rows.status == "skipped"]
    assert (skipped.reason.str.len() > 0).all()
    scored = rows[rows.status != "skipped"]
    assert len(scored) == 63
    for r in scored.itertuples():
        assert (r.status == "ok" and math.isfinite(r.predicted) and r.predicted > 0) or r.reason, r
    # Grace-Blackwell rows: scored, except the Megatron-FSDP layouts that offload layers to the Grace CPU's
    # memory (not modelled) and GPT-OSS (no model config); none dropped silently
    table = pd.read_csv(suite.reference)
    gb = table[table.system.isin(["DGX-GB200", "DGX-GB300"])]
    why = dict(zip(skipped.row, skipped.reason))
    offload = set(gb.index[gb.fsdp == 64])
    assert len(offload) == 4 and all("CPU offloading" in why[r] for r in offload)
    assert all("GPT-OSS" in why[r] for r in gb.index[gb.model == "GPT OSS 120B"])
    assert set(gb.index) - set(why) == set(scored.row[scored.row.isin(gb.index)])
    assert (scored.row.isin(gb.index)).sum() == 24 and (rows.status[rows.row.isin(gb.index)] == "ok").sum() == 23


def test_nemo_2407_gpt3_and_nemotron_rows_run_their_launcher_configs(summary):
    """24.07's GPT-3 5B / 20B and Nemotron 8B / 22B / 340B rows run the NeMo-Framework-Launcher 24.07 model
    configs (config/models/gpt3-*.yaml, nemotron*.yaml) and are scored; Nemotron-4 340B with its config's
    BF16 Adam state (Apex DistributedFusedAdam dtype bf16), selective recompute and no userbuffers."""
    expected = {"GPT3-5B 64": "gpt3-5b", "GPT3-20B 64": "gpt3-20b", "Nemotron-8B 64": "nemotron3-8b",
                "Nemotron-22B 64": "nemotron3-22b", "Nemotron-340B 128": "nemotron4-340b"}
    for name, model in expected.items():
        row = summary[summary.label == f"24.07 DGX-H100 {name.replace(' ', ' primary ')}"].iloc[0]
        assert row.model == model and row.status == "ok", (name, row.model, row.status)
    big = summary[summary.model == "nemotron4-340b"].iloc[0]
    assert (big.optimizer_state, big.recompute, big.tp_comm_overlap) == ("bf16", "selective", False)


def test_gb200_70b_mxfp8_row_runs_its_scripts_micro_batch(summary):
    """25.09 GB200 Llama 3 70B at the table's MXFP8 layout (tp 2, pp 4, vp 5) runs micro-batch 1 as its
    release's script sets it (the table's MBS column, 2, is the primary FP8-CS config's), and fits."""
    row = summary[summary.label == "25.09 DGX-GB200 LLAMA3_70B alt 64"].iloc[0]
    assert row.micro_batch == 1 and row.status == "ok"


@pytest.mark.parametrize("device, cases", [("gb200", 16), ("gb300", 7)])
def test_transferred_device_rows_carry_device_validated_false(summary, device, cases):
    """GB200 and GB300 have no rows of their own: their constants are transferred from B200 (docs/transfer.md)
    and every one of their rows says so; the H100 and B200 rows run on fitted constants."""
    rows = summary[summary.hardware == device]
    assert len(rows) == cases and not rows.device_validated.astype(bool).any()
    for fitted, n in (("h100-sxm5-80gb", None), ("b200", 16)):
        own = summary[summary.hardware == fitted]
        assert own.device_validated.astype(bool).all() and (n is None or len(own) == n)


def test_grace_blackwell_rows_run_on_nvl72_racks_with_their_release_settings(suite):
    """GB200 / GB300 rows run on the NVL72 networks (64 GPUs per NVLink domain: Megatron-Bridge's SLURM
    segments, config/networks/nvl72-gb200.yaml) with each release's MoE settings: 25.09 (v0.1.0rc4) token drop
    over the alltoall dispatcher, 25.11 (v0.2.0) the HybridEP flex dispatcher (priced as deepep), no EP
    overlap; DeepSeek-V3 recomputes mla_up_proj on GB200, moe_act on GB300."""
    def case(label):
        return next(c for c in suite.experiment.cases if c["label"] == label)
    gb = [c for c in suite.experiment.cases if c["hardware"] in ("gb200", "gb300")]
    assert len(gb) == 24 and all(c["network"] == "nvl72-" + c["hardware"] for c in gb)
    assert case("25.11 DGX-GB200 LLAMA3.1_405B primary 256")["parallelism"] == {
        "tp": 4, "pp": 16, "cp": 1, "ep": 1, "virtual_stages": 4, "dp": 4, "sp": True, "tp_comm_overlap": True,
        "embedding_in_split": True, "loss_in_split": True, "schedule": "interleaved"}
    for label in ("25.11 DGX-GB200 DeepSeekV3 primary 256", "25.11 DGX-GB300 Qwen3_235B_a22B primary 256",
                  "25.11 DGX-GB200 Qwen3_30B_a3B primary 8"):
        p = case(label)["parallelism"]
        assert p["moe_dispatcher"] == "deepep" and not p.get("moe_a2a_overlap"), label
    for label in ("25.09 DGX-GB200 DeepSeekV3 primary 256", "25.09 DGX-GB200 Qwen3_235B_a22B primary 64"):
        p = case(label)["parallelism"]
        assert "moe_dispatcher" not in p and not p.get("moe_a2a_overlap"), label
    assert case("25.11 DGX-GB200 DeepSeekV3 primary 256")["parallelism"]["recompute_modules"] == ["mla_up_proj"]
    assert case("25.11 DGX-GB300 DeepSeekV3 primary 256")["parallelism"]["recompute_modules"] == ["moe_act"]
    assert case("25.11 DGX-GB300 Qwen3_30B_a3B primary 8")["parallelism"].get("recompute", "none") == "none"


def test_moe_rows_take_their_own_release_settings(suite):
    """Each release's MoE rows run that release's performance scripts: 25.09 (Megatron-Bridge v0.1.0rc4)
    overlaps the EP all-to-all only for DeepSeek-V3 H100, 25.11 (v0.2.0) also for Qwen3-235B H100/B200 and
    Qwen3-30B H100; neither recomputes Qwen3-30B-A3B (the performance configs reset the recipe's full
    recompute to none)."""
    def par(label):
        return next(c for c in suite.experiment.cases if c["label"] == label)["parallelism"]
    assert not par("25.09 DGX-H100 Qwen3_235B_a22B primary 256").get("moe_a2a_overlap")
    assert not par("25.09 DGX-B200 Qwen3_235B_a22B primary 64").get("moe_a2a_overlap")
    assert not par("25.09 DGX-H100 Qwen3_30B_a3B primary 16").get("moe_a2a_overlap")
    assert par("25.11 DGX-H100 Qwen3_235B_a22B primary 256")["moe_a2a_overlap"]
    assert par("25.11 DGX-B200 Qwen3_235B_a22B primary 64")["moe_a2a_overlap"]
    assert par("25.11 DGX-H100 Qwen3_30B_a3B primary 16")["moe_a2a_overlap"]
    assert par("25.09 DGX-H100 DeepSeekV3 primary 1024")["moe_a2a_overlap"]
    for label in ("25.09 DGX-H100 Qwen3_30B_a3B primary 16", "25.11 DGX-B200 Qwen3_30B_a3B primary 8"):
        assert par(label).get("recompute", "none") == "none"

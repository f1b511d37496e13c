"""The MLPerf Inference Offline suite (issue 22): held out of calibration, every row scored or listed with its
reason, measured rates as the logs print them, and each case's settings read from the submission's recorded
config fields. One sweep of its 7 expressible rows (~3 s CPU)."""
import math

import pandas as pd
import pytest

from rapidllm.spec.paths import project_root
from rapidllm.spec.schema import load_yaml
from rapidllm.validate.calibrate import calibration_entries
from rapidllm.validate.suites import measurement, metric_specs, row_to_case

SUITE = project_root() / "validation" / "suites" / "mlperf_inference.yaml"


@pytest.fixture(scope="module")
def table(suite):
    return pd.read_csv(suite.reference)


def row_of(table, system, benchmark):
    return table[(table.system == system) & (table.benchmark == benchmark)].iloc[0].to_dict()


def test_held_out_of_calibration_and_of_the_overall_mape(suite):
    assert suite.calibration_rows == () and not suite.in_overall
    assert calibration_entries([suite]) == {}


def test_every_row_predicted_or_listed_with_a_reason(table, rows):
    assert sorted(rows.row) == list(range(len(table)))
    why = dict(zip(rows.row, rows.reason))
    status = dict(zip(rows.row, rows.status))
    for i, r in table.iterrows():
        if r["round"] == "v4.0":
            assert "not in the public code index" in why[i]
        elif r.system == "B200-SXM-180GBx1_TRT":
            assert "preview system" in why[i]
        elif r.benchmark == "gptj-99":
            assert "inferred" in why[i]
        elif r.benchmark == "mixtral-8x7b":
            assert "mixed dataset" in why[i]
        elif r.benchmark.startswith("llama3.1"):
            assert math.isnan(r.dataset_input_tokens_sum) and "prompt-token total" in why[i]
        else:
            assert status[i] == "ok" and math.isfinite(rows.predicted[rows.row == i].iloc[0])
    assert (rows.status == "ok").sum() == 7
    # the v5.0 H100 TP 1 x PP 2 row is scored since serving keeps pp micro-batches in flight
    pp2 = table[(table.pp == 2) & (table["round"] == "v5.0")].index
    assert [status[i] for i in pp2] == ["ok"]


def test_batch_2048_rows_run_what_the_kv_pool_admits(summary):
    """v5.0 / v5.1 llama2-70b run gpu_batch_size 2048: 2048 sequences' FP8 KV at full length exceed 141-186 GB,
    so the engine keeps what its KV pool holds in flight and queues the rest (docs/serving-capacity.md)."""
    big = summary[(summary.status == "ok") & (summary.concurrency == 2048)]
    assert len(big) == 4
    assert (big.in_flight_limit == "kv_cache").all() and (big.sequences_in_flight < 2048).all()


def test_measured_rates_are_the_logs_and_scored_per_replica(table):
    h100 = row_of(table, "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99")
    assert (h100["tokens_per_s"], h100["samples_per_s"], h100["num_gpus"]) == (24524.9, 84.4792, 8)
    b200 = row_of(table, "B200-SXM-180GBx8_TRT", "llama2-70b-99")
    assert (b200["tokens_per_s"], b200["samples_per_s"]) == (101527, 371.423)
    (metric,) = metric_specs(load_yaml(SUITE))
    # four TP-2 replicas on 8 GPUs: one replica's share; eight TP-1 replicas: an eighth
    assert measurement(metric, h100, "t") == pytest.approx(24524.9 / 4)
    assert measurement(metric, b200, "t") == pytest.approx(101527 / 8)


@pytest.mark.parametrize("system, benchmark, expect", [
    ("DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99",
     {"hardware": "h100-sxm5-80gb", "precision": "fp8", "tp": 2, "concurrency": 896, "max_num_tokens": 4096,
      "output_tokens": 290}),
    ("H200-SXM-141GBx8_TRT", "llama2-70b-99",
     {"hardware": "h200", "precision": "fp8", "tp": 1, "concurrency": 806, "max_num_tokens": 4096,
      "output_tokens": 291}),
    ("B200-SXM-180GBx8_TRT", "llama2-70b-99",
     {"hardware": "b200", "precision": "fp4", "tp": 1, "concurrency": 2048, "max_num_tokens": 3584,
      "output_tokens": 273}),
])
def test_settings_come_from_the_recorded_config(table, system, benchmark, expect):
    """A row's case carries the config's batch, layout, precisions and max_num_tokens, the run's own mean output
    length (tokens/s over samples/s, floored) and the dataset's mean prompt (token total over samples)."""
    spec = load_yaml(SUITE)
    row = row_of(table, system, benchmark)
    case = row_to_case(spec, row, "t")
    w, p = case["workload"], case["parallelism"]
    got = {"hardware": case["hardware"], "precision": case["precision"], "tp": p["tp"],
           "concurrency": w["concurrency"], "max_num_tokens": w["max_num_tokens"], "output_tokens": w["output_tokens"]}
    assert got == expect
    assert case["kv_cache_precision"] == "fp8"
    assert w["output_tokens"] == math.floor(row["tokens_per_s"] / row["samples_per_s"])
    assert w["prompt_tokens"] == 5463976 // 24576 == 222
    assert case.get("network", spec["base"]["network"]) == ("dgx-b200" if expect["hardware"] == "b200" else "dgx-h100")


def test_h200_and_h100_rows_scored_on_transferred_and_own_constants(summary):
    """H200 has no rows of its own (constants transferred from H100, docs/transfer.md): its rows say so."""
    ok = summary[summary.status == "ok"].set_index("hardware")
    assert not ok.loc[["h200"], "device_validated"].any() and ok.loc[["h100-sxm5-80gb"], "device_validated"].all()

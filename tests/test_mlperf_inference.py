"""The MLPerf Inference Offline suite (issue 22): held out of calibration, every row listed with its reason
(none is scored while the datasets' mean prompt lengths are unpublished), measured rates as the logs print
them, and each case's settings read from the submission's recorded config fields."""
import math

import pandas as pd
import pytest

from rapidllm.prediction import sweep
from rapidllm.spec.paths import project_root
from rapidllm.spec.schema import load_yaml
from rapidllm.validate.calibrate import calibration_entries
from rapidllm.validate.suites import compare, load_suite, measurement, metric_specs, row_to_case

SUITE = project_root() / "validation" / "suites" / "mlperf_inference.yaml"


@pytest.fixture(scope="module")
def suite():
    return load_suite(SUITE)


@pytest.fixture(scope="module")
def table(suite):
    return pd.read_csv(suite.reference)


def row_of(table, system, benchmark):
    return table[(table.system == system) & (table.benchmark == benchmark)].iloc[0].to_dict()


def test_held_out_of_calibration_and_of_the_overall_mape(suite):
    assert suite.calibration_rows == () and not suite.in_overall
    assert calibration_entries([suite]) == {}


def test_every_row_listed_with_its_reason(suite, table):
    rows = compare(suite, sweep(suite.experiment, progress=False))
    assert sorted(rows.row) == list(range(len(table))) and (rows.status == "skipped").all()
    why = dict(zip(rows.row, rows.reason))
    for i, r in table.iterrows():
        if r.system == "B200-SXM-180GBx1_TRT":
            assert "preview system" in why[i]
        elif r.benchmark == "gptj-99":
            assert "inferred" in why[i]
        elif r.benchmark == "mixtral-8x7b":
            assert "mixed dataset" in why[i]
        else:
            assert r.mean_input_tokens == "not published" and "mean prompt length" in why[i]


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
    ("B200-SXM-180GBx8_TRT", "llama3.1-405b",
     {"hardware": "b200", "precision": "fp4", "tp": 2, "concurrency": 128, "max_num_tokens": 1536,
      "output_tokens": 651}),
])
def test_settings_come_from_the_recorded_config(table, system, benchmark, expect):
    """With a prompt length filled in, a row's case carries the config's batch, layout, precisions and
    max_num_tokens, and the run's own mean output length (tokens/s over samples/s, floored)."""
    spec = load_yaml(SUITE)
    row = {**row_of(table, system, benchmark), "mean_input_tokens": 100}
    case = row_to_case(spec, row, "t")
    w, p = case["workload"], case["parallelism"]
    got = {"hardware": case["hardware"], "precision": case["precision"], "tp": p["tp"],
           "concurrency": w["concurrency"], "max_num_tokens": w["max_num_tokens"], "output_tokens": w["output_tokens"]}
    assert got == expect
    assert case["kv_cache_precision"] == "fp8" and w["prompt_tokens"] == 100
    assert w["output_tokens"] == math.floor(row["tokens_per_s"] / row["samples_per_s"])
    assert case.get("network", spec["base"]["network"]) == ("dgx-b200" if expect["hardware"] == "b200" else "dgx-h100")

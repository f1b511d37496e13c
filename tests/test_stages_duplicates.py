"""Two reference rows that are one case (as the MoE suite's rows 0 and 1 were before row 1 gained the A2A
overlap) go through the staged pipeline exactly like a single in-process evaluation: stage tables keyed by
case_id hold each case once."""
import dataclasses

import pandas as pd
import pytest

from rapidllm.pipeline.io import shard_cases
from rapidllm.pipeline.stages import run_collect, run_expand, run_memory, run_price, run_simulate, run_trace
from rapidllm.prediction import evaluate
from rapidllm.spec.paths import project_root
from rapidllm.validate.suites import load_suite


def test_duplicate_case_rows_price_once_and_match_the_in_process_result(tmp_path):
    suite = load_suite(project_root() / "validation" / "suites" / "moe_qwen3_h100.yaml")
    first = suite.experiment.cases[0]
    exp = dataclasses.replace(suite.experiment, cases=[first, {**first, "meta": {**first["meta"], "row": 1}}])
    cases = tmp_path / "cases.parquet"
    run_expand(exp, cases)
    ids = pd.read_parquet(cases).case_id
    assert len(ids) == 2 and ids.nunique() == 1                      # two rows, one case
    paths = {k: tmp_path / f"{k}.parquet" for k in ("ops", "memory", "sim")}
    run_price(cases, 0, paths["ops"])
    run_memory(cases, 0, paths["memory"])
    run_trace(cases, paths["memory"], 0, tmp_path / "graphs.npz")
    run_simulate(cases, paths["ops"], paths["memory"], tmp_path / "graphs.npz", 0, paths["sim"])
    ops = pd.read_parquet(paths["ops"])
    assert len(ops) == len(ops.drop_duplicates(["case_id", "section", "name", "phase"]))
    summary = run_collect(cases, [str(paths["sim"])], tmp_path / "summary.parquet", tmp_path / "summary.csv")
    (_, case), = shard_cases(cases, 0)[:1]
    expected = evaluate(case)["step_time_s"]
    assert summary.step_time_s.tolist() == pytest.approx([expected, expected], rel=1e-12)

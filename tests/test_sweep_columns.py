"""A sweep's columns do not depend on which of its rows are valid: a sweep whose every row is invalid (a
layout larger than the cluster) or infeasible (out of memory) has the columns, in the same order, of a
sweep of the same mode where rows are predicted, with NaN where there is no value; so tables concatenate
and a column can be read whatever the rows. Before, such a sweep had only its 7 bookkeeping columns (or
no timings), and a sweep whose first row did not fit put the memory columns before the timings."""
from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rapidllm.cli import main
from rapidllm.engine.engine import record_keys
from rapidllm.prediction import MANY_CASE_COLUMNS, RECORD_COLUMNS, evaluate, predict_many, sweep
from rapidllm.spec.case import load_case
from rapidllm.spec.experiment import flat_columns

TRAINING = {"mode": "training", "seq_len": 1024, "global_batch": 8, "micro_batch": 1}
INFERENCE = {"mode": "inference", "prompt_tokens": 128, "output_tokens": 16, "batch": 1}


def experiment(name: str, workload: dict, models: list[str], dps: list[int]) -> dict:
    """dgx-a100 has 8 GPUs: dp 16 is an invalid row; Llama-3.1-70B on one A100 an infeasible one."""
    return {"name": name, "base": {"hardware": "a100-sxm4-80gb", "network": "dgx-a100", "precision": "bf16",
                                   "workload": workload, "parallelism": {"tp": 1, "pp": 1}},
            "cross": {"model": models, "parallelism.dp": dps}}


EXPERIMENTS = {
    "training-valid": experiment("training-valid", TRAINING, ["gpt2-small"], [1]),
    "training-invalid": experiment("training-invalid", TRAINING, ["gpt2-small"], [16, 32]),
    "training-infeasible": experiment("training-infeasible", TRAINING, ["llama3.1-70b"], [1]),
    # infeasible first, invalid rows, one ok row
    "training-mixed": experiment("training-mixed", TRAINING, ["llama3.1-70b", "gpt2-small"], [1, 16]),
    "inference-valid": experiment("inference-valid", INFERENCE, ["gpt2-small"], [1]),
    "inference-invalid": experiment("inference-invalid", INFERENCE, ["gpt2-small"], [16]),
    "inference-infeasible": experiment("inference-infeasible", INFERENCE, ["llama3.1-70b"], [1]),
}


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("columns")
    out = {}
    for name, spec in EXPERIMENTS.items():
        out[name] = folder / f"{name}.yaml"
        out[name].write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


@pytest.fixture(scope="module")
def tables(paths: dict[str, Path]) -> dict[str, pd.DataFrame]:
    return {name: sweep(path) for name, path in paths.items()}


def test_the_experiments_give_the_rows_they_are_named_for(tables: dict[str, pd.DataFrame]) -> None:
    for name, table in tables.items():
        kinds = set(table.status)
        expect = {"valid": {"ok"}, "invalid": {"invalid"}, "infeasible": {"infeasible"},
                  "mixed": {"ok", "invalid", "infeasible"}}[name.split("-")[1]]
        assert kinds == expect, name
    assert list(tables["training-mixed"].status) == ["infeasible", "invalid", "ok", "invalid"]


@pytest.mark.parametrize("name", [n for n in EXPERIMENTS if not n.endswith("-valid")])
def test_columns_are_those_of_a_valid_sweep_of_the_mode(tables: dict[str, pd.DataFrame], name: str) -> None:
    valid, table = tables[f"{name.split('-')[0]}-valid"], tables[name]
    assert list(table.columns) == list(valid.columns)
    assert table.to_csv(index=False).splitlines()[0] == valid.to_csv(index=False).splitlines()[0]
    no_time = table[table.status != "ok"]
    assert no_time.step_time_s.isna().all() and no_time.tokens_per_s.isna().all()
    assert table.step_time_s.dtype == "float64"


def test_the_valid_columns_are_the_case_then_its_record(paths: dict[str, Path],
                                                        tables: dict[str, pd.DataFrame]) -> None:
    """What the padding reproduces is what a predicted row is made of, read off a real case and record:
    bookkeeping, the case's own columns, then `evaluate`'s keys."""
    for mode in ("training", "inference"):
        valid = tables[f"{mode}-valid"]
        spec = EXPERIMENTS[f"{mode}-valid"]
        case = load_case_from(spec, paths[f"{mode}-valid"].parent)
        record = evaluate(case)
        bookkeeping = ["experiment", "index", "label", "shard", "case_id", "status", "reason"]
        assert list(valid.columns) == [*bookkeeping, *flat_columns(case),
                                       *(k for k in record if k not in bookkeeping)]
        assert set(record) - set(bookkeeping) - {"device_validated"} == \
            set(record_keys(mode == "training")) - {"infeasible_reason"}


def load_case_from(spec: dict, folder: Path):
    """The experiment's single case, written as a case file."""
    case = {**spec["base"], "model": spec["cross"]["model"][0],
            "parallelism": {**spec["base"]["parallelism"], "dp": spec["cross"]["parallelism.dp"][0]}}
    path = folder / f"{spec['name']}-case.yaml"
    path.write_text(yaml.safe_dump(case))
    return load_case(path)


def test_a_mixed_sweep_keeps_its_rows_values(tables: dict[str, pd.DataFrame]) -> None:
    """The ok row of the mixed sweep has the numbers it has in a sweep of that case alone (as floats: a
    column some rows lack is a float column in pandas, as before)."""
    mixed, valid = tables["training-mixed"], tables["training-valid"]
    ok, alone = (pd.read_csv(io.StringIO(t.drop(columns=["experiment", "index", "label"]).to_csv(index=False)))
                 for t in (mixed[mixed.status == "ok"], valid))
    pd.testing.assert_frame_equal(ok, alone, check_dtype=False)


def test_parallel_sweep_gives_the_same_columns(paths: dict[str, Path], tables: dict[str, pd.DataFrame]) -> None:
    for name in ("training-mixed", "training-invalid"):
        assert sweep(paths[name], jobs=2).to_csv(index=False) == tables[name].to_csv(index=False)


def test_cli_table_of_an_infeasible_sweep_has_the_valid_header(paths: dict[str, Path], tmp_path: Path) -> None:
    """`rapidllm sweep` writes a sweep whose every row is out of memory (one whose every row is invalid
    is refused, docs/limits.md) with the columns of a valid one."""
    for name in ("training-valid", "training-infeasible"):
        assert main(["sweep", str(paths[name]), "--quiet", "--out", str(tmp_path / f"{name}.csv")]) == 0
    headers = [(tmp_path / f"{n}.csv").read_text().splitlines()[0] for n in ("training-valid", "training-infeasible")]
    assert headers[0] == headers[1]
    assert pd.read_csv(io.StringIO((tmp_path / "training-infeasible.csv").read_text())).step_time_s.isna().all()


def test_predict_many_has_its_columns_whatever_the_cases(paths: dict[str, Path]) -> None:
    spec = EXPERIMENTS["training-infeasible"]
    infeasible = {**spec["base"], "model": "llama3.1-70b", "parallelism": {"tp": 1, "pp": 1, "dp": 1}}
    table = predict_many([infeasible])
    assert list(table.columns) == [*MANY_CASE_COLUMNS, *RECORD_COLUMNS] and table.step_time_s.isna().all()


def test_every_case_field_is_a_column_and_tells_rows_apart(tmp_path: Path):
    """Rows that differ only in a case option (here the decode kernel) tell apart in the table, and no Case
    field is left out of the columns (a new field must be added to CASE_OPTIONS)."""
    import dataclasses

    from rapidllm.spec.case import Case
    from rapidllm.spec.experiment import CASE_OPTIONS, case_columns
    specs = {"model", "hardware", "network", "workload", "parallelism", "name"}
    assert {f.name for f in dataclasses.fields(Case)} - specs <= set(case_columns("inference"))
    assert set(CASE_OPTIONS) <= set(case_columns("training"))
    exp = experiment("decode-kernels", {**INFERENCE, "batch": 64, "prompt_tokens": 2048}, ["llama3.1-8b"], [1])
    exp["cross"]["decode_attention"] = ["grouped", "per_head"]
    path = tmp_path / "decode-kernels.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False))
    table = sweep(path)
    assert list(table.decode_attention) == ["grouped", "per_head"]
    assert table.itl_s.iloc[1] > table.itl_s.iloc[0]

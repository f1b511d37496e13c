"""The pipeline's collect step (`run_collect`, the summary.parquet / summary.csv of a study) has the columns
the public sweep gives the same experiment, whatever its rows' validity and whichever shard comes first:
before, it had the columns its shards' rows happened to have, so a study whose every row was invalid had no
case or timing columns, an all-infeasible one no timings, and one whose first shard began with an
out-of-memory row put the memory verdict before the timings (config/experiments/llama70b-layouts.yaml).
The studies are those of tests/test_sweep_columns.py (dgx-a100: dp 16 is an invalid row, Llama-3.1-70B on
one A100 an infeasible one), in shards of two, plus one of both modes."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from rapidllm.pipeline.stages import run_collect, run_expand, run_memory, run_price, run_simulate, run_trace
from rapidllm.prediction import sweep, sweep_columns
from rapidllm.spec.experiment import load_experiment
from test_sweep_columns import EXPERIMENTS, INFERENCE, TRAINING, experiment

BOTH = experiment("both-modes", TRAINING, ["llama3.1-70b", "gpt2-small"], [1, 16])
del BOTH["base"]["workload"]
# a training, an inference, and a workload without a mode (an invalid row whose columns no mode gives)
BOTH["cases"] = [{"workload": TRAINING}, {"workload": INFERENCE}, {"workload": {"seq_len": 1024}}]
STUDIES = {**EXPERIMENTS, "both-modes": BOTH}
BOOKKEEPING = ["experiment", "index", "label", "shard", "case_id", "status", "reason"]


def shard_outputs(exp_path: Path, folder: Path) -> tuple[Path, list[str]]:
    """Expand the study in shards of two and run price, memory, trace and simulate on every shard, as the
    Snakemake rules do (workflow/rules/stages.smk): the cases table and the shards' simulate tables."""
    folder.mkdir()
    exp = load_experiment(exp_path, default_shard_size=2)
    cases = folder / "cases.parquet"
    shards = sorted(set(run_expand(exp, cases).shard))
    sims = []
    for s in shards:
        ops, mem, graphs, sim = (folder / f"{k}-{s}.{x}" for k, x in
                                 (("ops", "parquet"), ("memory", "parquet"), ("graphs", "npz"), ("sim", "parquet")))
        run_price(cases, s, ops)
        run_memory(cases, s, mem)
        run_trace(cases, mem, s, graphs)
        run_simulate(cases, ops, mem, graphs, s, sim)
        sims.append(str(sim))
    return cases, sims


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, list[str]]]:
    folder = tmp_path_factory.mktemp("collect")
    out = {}
    for name, spec in STUDIES.items():
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        out[name] = (path, *shard_outputs(path, folder / name))
    return out


@pytest.fixture(scope="module")
def collected(studies: dict[str, tuple[Path, Path, list[str]]]) -> dict[str, pd.DataFrame]:
    return {name: run_collect(cases, sims, cases.parent / "summary.parquet", cases.parent / "summary.csv")
            for name, (_, cases, sims) in studies.items()}


def test_the_studies_give_the_rows_they_are_named_for(collected: dict[str, pd.DataFrame]) -> None:
    kinds = {"valid": {"ok"}, "invalid": {"invalid"}, "infeasible": {"infeasible"},
             "mixed": {"ok", "invalid", "infeasible"}, "modes": {"ok", "invalid", "infeasible"}}
    for name, table in collected.items():
        assert set(table.status) == kinds[name.split("-")[1]], name
    assert list(collected["training-mixed"].status) == ["infeasible", "invalid", "ok", "invalid"]
    assert list(collected["training-mixed"].shard) == [0, 0, 1, 1]


@pytest.mark.parametrize("name", [n for n in EXPERIMENTS if not n.endswith("-valid")])
def test_columns_are_those_of_a_valid_collect_of_the_mode(collected: dict[str, pd.DataFrame], name: str) -> None:
    mode = name.split("-")[0]
    table, valid = collected[name], collected[f"{mode}-valid"]
    assert list(table.columns) == list(valid.columns) == [*BOOKKEEPING, *sweep_columns(mode)]
    assert table[table.status != "ok"].step_time_s.isna().all() and table.step_time_s.dtype == "float64"


def test_a_study_of_both_modes_has_both_modes_columns(collected: dict[str, pd.DataFrame]) -> None:
    """Each mode's columns in its own order, the training ones first (the first row is a training one)."""
    columns = list(collected["both-modes"].columns)
    training = [*BOOKKEEPING, *sweep_columns("training")]
    assert columns[:len(training)] == training
    assert columns[len(training):] == [c for c in sweep_columns("inference") if c not in training]


@pytest.mark.parametrize("name", list(STUDIES))
def test_the_collect_is_the_public_sweep(studies: dict[str, tuple[Path, Path, list[str]]],
                                         collected: dict[str, pd.DataFrame], name: str) -> None:
    """Column for column and value for value, and the CSV byte for byte, valid or not."""
    exp_path, cases, _ = studies[name]
    public = sweep(load_experiment(exp_path, default_shard_size=2))
    pd.testing.assert_frame_equal(collected[name], public, check_exact=True)
    assert (cases.parent / "summary.csv").read_text() == public.to_csv(index=False, float_format="%.10g")


def test_same_shards_in_any_order_give_the_same_bytes(studies: dict[str, tuple[Path, Path, list[str]]],
                                                      collected: dict[str, pd.DataFrame], tmp_path: Path) -> None:
    """The mixed study's shards begin with an infeasible row and with an ok one: which is read first no
    longer moves the memory verdict before the timings."""
    _, cases, sims = studies["training-mixed"]
    run_collect(cases, sims[::-1], tmp_path / "summary.parquet", tmp_path / "summary.csv")
    for suffix in ("parquet", "csv"):
        assert (tmp_path / f"summary.{suffix}").read_bytes() == (cases.parent / f"summary.{suffix}").read_bytes()


def test_a_limit_met_while_simulating_is_an_invalid_row_as_in_sweep(tmp_path: Path) -> None:
    """A simulated serving queue too long to simulate (one request's KV in the pool, 16384 clients: 2^21
    iterations per window, over MAX_SERVING_ITERATIONS) is refused only once memory has decided admission:
    the pipeline's simulate stage writes the row invalid with the refusal, as `prediction.sweep` does,
    instead of failing its shard."""
    spec = {"name": "queue", "base": {"model": "llama2-7b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
                                      "workload": {"mode": "inference", "batch": 1, "concurrency": 16384,
                                                   "prompt_tokens": 128, "output_tokens": 128,
                                                   "serving": "simulated", "kv_cache_fraction": 0.003}},
            "cross": {"attention_impl": ["flash"]}}
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    cases, sims = shard_outputs(path, tmp_path / "queue")
    row = run_collect(cases, sims, tmp_path / "summary.parquet", tmp_path / "summary.csv").iloc[0]
    swept = sweep(load_experiment(path)).iloc[0]
    assert row.status == swept.status == "invalid"
    assert row.reason == swept.reason and row.reason.startswith("workload.serving: simulated serving")

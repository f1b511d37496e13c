"""The public API (`import rapidllm`) is the one prediction home: the typed result, the flat record the CLI
and the pipeline write, and a sweep row all carry the same numbers for the same case."""
import math

import pandas as pd
import pytest

import rapidllm
from rapidllm.prediction import evaluate
from rapidllm.spec.paths import project_root

EXAMPLE = project_root() / "examples" / "gpt175b-tp8-pp8.yaml"


def test_predict_matches_the_flat_record_and_splits_the_step():
    case = rapidllm.load_case(EXAMPLE)
    p = rapidllm.predict(case)
    rec = evaluate(case)
    assert p.case_id == rec["case_id"] and p.status == "ok" and p.mode == "training"
    for key in ("step_time_s", "compute_time_s", "exposed_comm_s", "bubble_s", "mfu", "tokens_per_s"):
        assert getattr(p, key) == rec[key]
    assert math.isclose(p.compute_time_s + p.exposed_comm_s + p.bubble_s, p.step_time_s, rel_tol=1e-9)
    assert p.ttft_s is None and p.itl_s is None and p.e2e_latency_s is None
    m = p.memory
    assert m.peak == rec["peak_memory_bytes"]
    assert m.weights + m.gradients + m.optimizer + m.kv_cache + m.activations + m.framework >= m.peak * 0.999
    assert m.feasible and m.peak <= m.capacity


def test_predict_accepts_a_mapping_and_predict_many_keeps_order():
    mapping = {"model": "llama2-7b", "hardware": "a100-sxm4-80gb", "network": "dgx-a100", "precision": "bf16",
               "workload": {"mode": "inference", "batch": 1, "prompt_tokens": 128, "output_tokens": 16},
               "parallelism": {"tp": 1}}
    p = rapidllm.predict(mapping)
    assert p.mode == "inference" and p.mfu is None and p.step_time_s is not None
    assert p.ttft_s > 0 and p.itl_s > 0
    df = rapidllm.predict_many([EXAMPLE, mapping])
    assert isinstance(df, pd.DataFrame) and list(df["mode"]) == ["training", "inference"]
    assert df["step_time_s"].iloc[1] == p.step_time_s
    # each row names its case (user trial 3: a plot needed the input list kept beside the frame)
    assert list(df.model) == ["gpt-175b", "llama2-7b"] and list(df.world) == [64, 1]
    assert list(df.tp) == [8, 1] and list(df.pp) == [8, 1] and list(df.faults) == ["", ""]
    faulted = rapidllm.predict_many([{**mapping, "faults": [{"link": [0, 8], "bandwidth_factor": 0.5}]}])
    assert list(faulted.faults) == ["[0, 8] bandwidth x0.5"]


def test_infeasible_case_reports_memory_and_no_timing():
    case = rapidllm.load_case(EXAMPLE)
    mapping = {"model": "gpt-175b", "hardware": "a100-sxm4-80gb", "network": "superpod-hdr", "precision": "bf16",
               "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8, "micro_batch": 1},
               "parallelism": {"tp": 8, "pp": 1, "dp": 1}}
    p = rapidllm.predict(mapping)
    assert p.status == "infeasible" and p.step_time_s is None and not p.memory.feasible
    assert "GiB" in p.reason
    assert case.case_id != p.case_id


def test_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="allowed"):
        rapidllm.predict(EXAMPLE, engine="magic")


def test_unknown_public_name_raises_attribute_error():
    with pytest.raises(AttributeError):
        rapidllm.no_such_name  # noqa: B018


@pytest.mark.parametrize("call, name", [
    (lambda: rapidllm.predict(None), "case"),
    (lambda: rapidllm.predict(42), "case"),
    (lambda: rapidllm.predict(EXAMPLE.read_text()), "case"),        # YAML text is not a path
    (lambda: rapidllm.export_chakra(None, "unused"), "case"),
    (lambda: rapidllm.load_case(None), "load_case"),
    (lambda: rapidllm.predict_many(str(EXAMPLE)), "predict_many"),  # iterated, it read 'e: file not found'
    (lambda: rapidllm.predict_many({"model": "gpt-175b"}), "predict_many"),
    (lambda: rapidllm.predict_many(None), "predict_many"),
    (lambda: rapidllm.sweep({"name": "x"}), "sweep"),               # documented: not a mapping
    (lambda: rapidllm.sweep(None), "sweep"),
    (lambda: rapidllm.search(None), "search spec"),
    (lambda: evaluate(None), "case"),
])
def test_a_wrong_type_is_one_spec_error_naming_what_is_allowed(call, name):
    """A library caller's None, number, mapping or YAML text used to end in pathlib's 'expected str, bytes or
    os.PathLike object' (or a file named by each character of a path)."""
    with pytest.raises(rapidllm.SpecError) as err:
        call()
    text = str(err.value)
    assert text.startswith(f"{name}: got ") and "allowed:" in text and "\n" not in text


def test_evaluate_takes_a_path_like_predict():
    assert evaluate(EXAMPLE)["step_time_s"] == rapidllm.predict(EXAMPLE).step_time_s


def test_predict_many_columns_and_dtypes_do_not_depend_on_the_cases():
    """Training rows only gave ttft_s as an object column of Nones, and no cases a table without columns."""
    df = rapidllm.predict_many([EXAMPLE])
    empty = rapidllm.predict_many([])
    from rapidllm.prediction import MANY_CASE_COLUMNS
    assert list(empty.columns) == list(df.columns) == [*MANY_CASE_COLUMNS, *rapidllm.predict(EXAMPLE).to_dict()]
    assert df["ttft_s"].dtype == df["mfu"].dtype == "float64" and df["ttft_s"].isna().all()

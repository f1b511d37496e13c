"""Every suite parses and maps every reference row to a valid case or a listed reason."""
import pandas as pd
import pytest

from rapidllm.spec.experiment import expand
from rapidllm.spec.paths import project_root
from rapidllm.spec.schema import load_yaml
from rapidllm.validate.suites import compare, evaluate, load_suite

SUITES = sorted((project_root() / "validation" / "suites").glob("*.yaml"))
EXPECTED_ROWS = {"llama2_latency_a100": 11, "llama2_latency_h100": 11, "nim_llama33_70b_a100": 15,
                 "nim_llama33_70b_h100": 17, "megatron_gpt_a100": 11, "mpt_fsdp_h100": 52, "moe_qwen3_h100": 10,
                 "megatron_gpt_a100_korthikanti_table": 8, "nanotron_h100": 820,
                 "nemo_perf_summary": 71, "mlperf_inference": 22}


def test_all_suites_present_and_in_config():
    names = {p.stem for p in SUITES}
    assert set(EXPECTED_ROWS) <= names
    assert set(load_yaml(project_root() / "config" / "config.yaml")["suites"]) == names


@pytest.mark.parametrize("path", SUITES, ids=lambda p: p.stem)
def test_every_row_is_a_case_or_a_listed_reason(path):
    suite = load_suite(path)
    table = pd.read_csv(suite.reference, encoding="utf-8-sig")
    assert suite.rows == len(table) == EXPECTED_ROWS.get(suite.name, len(table))
    rows = expand(suite.experiment)
    mapped = [r["meta_row"] for r in rows]
    skipped = [r for r, _ in suite.skipped]
    assert sorted(mapped + skipped) == list(range(len(table)))      # every row exactly once
    assert all(why for _, why in suite.skipped)
    for r in rows:
        assert r["status"] == "ok" or r["reason"], r                # invalid rows carry their reason
    # the comparison lists every row: scored, invalid/infeasible with reason, or skipped with reason
    summary = pd.DataFrame(rows).assign(**{m.metric: float("nan") for m in suite.metrics})
    out = compare(suite, summary)
    assert set(out.row) == set(range(len(table)))


def test_measured_expressions_and_scales():
    assert evaluate('col("TTFT (ms)") * 2', {"TTFT (ms)": 3.0}, "t") == 6
    nim = load_suite(project_root() / "validation" / "suites" / "nim_llama33_70b_a100.yaml")
    first = nim.experiment.cases[0]
    assert first["meta"]["measured_ttft_s"] == pytest.approx(0.04773)
    assert first["meta"]["measured_itl_s"] == pytest.approx(0.01811)
    assert first["meta"]["measured_tokens_per_s"] == pytest.approx(54.77)
    # paper basis: total request latency = TTFT + (200 - 1) x ITL, derived from the two published averages
    assert first["meta"]["measured_e2e_latency_s"] == pytest.approx(0.04773 + 199 * 0.01811)
    assert {m.metric: m.basis for m in nim.metrics} == {"ttft_s": "full", "itl_s": "full", "tokens_per_s": "full",
                                                         "e2e_latency_s": "paper"}
    assert first["workload"] == {"prompt_tokens": 200, "output_tokens": 200, "concurrency": 1}
    mpt = load_suite(project_root() / "validation" / "suites" / "mpt_fsdp_h100.yaml")
    assert mpt.experiment.cases[0]["meta"]["measured_step_time_s"] == pytest.approx(4194304 / 66523)


def test_layouts_match_the_reference():
    mega = expand(load_suite(project_root() / "validation" / "suites" / "megatron_gpt_a100.yaml").experiment)
    assert all(r["status"] == "ok" for r in mega)
    assert [r["world"] for r in mega] == [8, 64, 280, 512, 8, 64, 280, 512, 1920, 2520, 3072]
    mpt = expand(load_suite(project_root() / "validation" / "suites" / "mpt_fsdp_h100.yaml").experiment)
    assert all(r["fsdp"] == "full_shard" and r["world"] == r["dp"] for r in mpt)
    assert {r["network"] for r in mpt if r["world"] > 8} == {"superpod-ndr"}


def test_mfu_uses_the_sources_flop_count_on_both_sides():
    # Qwen3 row 0: 245 TFLOP/s per GPU in 19.7 s. A predicted step of 2 x 19.7 s halves the MFU, whatever
    # rapidllm's own FLOP count is: the MFU error is the step-time error alone.
    suite = load_suite(project_root() / "validation" / "suites" / "moe_qwen3_h100.yaml")
    rows = pd.DataFrame(expand(suite.experiment))
    rows = rows.assign(step_time_s=2 * rows.meta_measured_step_time_s, mfu=0.9)   # mfu=0.9: must be ignored
    out = compare(suite, rows).query("status == 'ok'")
    first = out[out.row == 0].iloc[0]
    assert first.measured == pytest.approx(245 / 989)
    assert first.predicted == pytest.approx(245 / 989 / 2)
    assert out.error_pct.to_numpy() == pytest.approx(-50.0)

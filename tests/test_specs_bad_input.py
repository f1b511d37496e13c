"""Bad input: one clear message naming file, key and what is allowed; exit 2; no traceback, no output."""
from pathlib import Path

import pytest
import yaml

from rapidllm.cli import main
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.paths import known_names


def _run(tmp_path: Path, case: dict, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(case))
    code = main(["predict", str(path), "--json"])
    captured = capsys.readouterr()
    return code, captured.err.strip()


def test_unknown_model_lists_known(tmp_path, gpt_case, capsys) -> None:
    code, err = _run(tmp_path, {**gpt_case, "model": "gpt-9000"}, capsys)
    assert code == 2
    assert "case.yaml: model: unknown model 'gpt-9000'; known: " in err
    # a library of over 40 models is pointed at, not spelt out: the line stays short enough to read whole
    assert f"{len(known_names('model'))} names, the files of " in err and "config/models/" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1 and len(err) < 300


def test_missing_key(tmp_path, gpt_case, capsys) -> None:
    case = dict(gpt_case)
    del case["workload"]
    code, err = _run(tmp_path, case, capsys)
    assert code == 2 and err.endswith("(top level): missing key 'workload'")


def test_wrong_unit_in_inline_hardware(tmp_path, gpt_case, capsys) -> None:
    case = dict(gpt_case)
    case["hardware"] = {**case["hardware"], "hbm_bandwidth": "3.35 TB"}
    code, err = _run(tmp_path, case, capsys)
    assert code == 2
    assert "hbm_bandwidth: '3.35 TB' is not a bandwidth; use a unit like" in err
    assert len(err.splitlines()) == 1


def test_wrong_unit_in_named_file_names_that_file(tmp_path, monkeypatch, gpt_case, capsys) -> None:
    from conftest import ROOT
    import shutil

    root = tmp_path / "root"
    shutil.copytree(ROOT / "config", root / "config")
    shutil.copytree(ROOT / "workflow" / "schemas", root / "workflow" / "schemas")
    hw = root / "config" / "hardware" / "h100-sxm5-80gb.yaml"
    hw.write_text(hw.read_text().replace("hbm_bandwidth: 3.35 TB/s", "hbm_bandwidth: 3.35 TB"))
    monkeypatch.setenv("RAPIDLLM_ROOT", str(root))
    from rapidllm.spec import schema
    schema._validator.cache_clear()
    code, err = _run(tmp_path, {**gpt_case, "hardware": "h100-sxm5-80gb"}, capsys)
    schema._validator.cache_clear()
    assert code == 2
    assert err.endswith("h100-sxm5-80gb.yaml: hbm_bandwidth: '3.35 TB' is not a bandwidth; use a unit like '2.0 TB/s', '450 GB/s', '200 Gb/s'")


def test_tp_not_dividing_heads(tmp_path, gpt_case, capsys) -> None:
    case = {**gpt_case, "parallelism": {**gpt_case["parallelism"], "tp": 7, "pp": 1}}
    code, err = _run(tmp_path, case, capsys)
    assert code == 2 and err.endswith("case.yaml: parallelism.tp: tp 7 does not divide heads 96 of gpt-175b; "
                                      "allowed: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96")


def test_world_size_mismatch(tmp_path, gpt_case, capsys) -> None:
    case = {**gpt_case, "network": "dgx-a100", "parallelism": {"tp": 8, "dp": 2}}
    code, err = _run(tmp_path, case, capsys)
    assert code == 2
    assert err.endswith("case.yaml: network: network 'dgx-a100' holds 8 ranks but the parallel layout needs 16")


def test_enum_lists_allowed(gpt_case) -> None:
    case = {**gpt_case, "parallelism": {**gpt_case["parallelism"], "recompute": "sometimes"}}
    with pytest.raises(SpecError) as err:
        resolve_case(case, "x.yaml")
    assert str(err.value) == "x.yaml: parallelism.recompute: 'sometimes' is not allowed; allowed: none, selective, full"


def test_every_problem_reported(gpt_case) -> None:
    case = {**gpt_case, "precision": "int3", "parallelism": {"tp": "8", "bogus": 1}}
    with pytest.raises(SpecError) as err:
        resolve_case(case, "x.yaml")
    assert len(err.value.lines) == 3


def test_sweep_with_bad_experiment_writes_nothing(tmp_path, capsys) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "bad", "base": {}, "cross": {"parallelism.tp": []}}))
    out = tmp_path / "out.csv"
    assert main(["sweep", str(exp), "--out", str(out)]) == 2
    assert "cross.parallelism.tp" in capsys.readouterr().err
    assert not out.exists()


def test_inference_workload_judged_against_its_own_branch(tmp_path, gpt_case, capsys) -> None:
    """The workload schema is a oneOf on `mode`: a bad inference key is reported as such, not as 'unknown
    keys' of the training branch."""
    case = {**gpt_case, "parallelism": {"tp": 8},
            "workload": {"mode": "inference", "prompt_tokens": 200, "output_tokens": 20, "concurrency": 4,
                         "serving": "queue"}}
    code, err = _run(tmp_path, case, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert err.endswith("workload.serving: 'queue' is not allowed; allowed: steady_state, disaggregated, simulated")


def test_expert_tp_between_one_and_tp_rejected(tmp_path, gpt_case, capsys) -> None:
    case = {**gpt_case, "model": "qwen3-235b-a22b",
            "parallelism": {"tp": 4, "ep": 8, "pp": 8, "dp": 8, "etp": 2, "sp": True}}
    case.pop("network", None)
    code, err = _run(tmp_path, {**case, "network": "superpod-ndr",
                                "workload": {"mode": "training", "seq_len": 4096, "global_batch": 2048}}, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "parallelism.etp: etp 2 must be 1 or tp 4" in err


@pytest.mark.parametrize("old,new,message", [
    ("basis: paper}", "basis: papr}", "metrics.3.basis: 'papr' is not allowed; allowed: both, full, paper"),
    ("scale: 1.0e-3, basis: full}", "scale: 1.0e-3, basis: full, inverse_of: {metric: step_time, measured: x}}",
     "metrics.0.inverse_of.metric: 'step_time' is not allowed; allowed: step_time_s,"),
])
def test_bad_suite_metric_keys(tmp_path, capsys, old, new, message) -> None:
    from rapidllm.spec.paths import project_root
    text = (project_root() / "validation" / "suites" / "nim_llama33_70b_a100.yaml").read_text()
    assert old in text
    path = tmp_path / "suite.yaml"
    path.write_text(text.replace(old, new, 1))
    code = main(["validate", "--out", str(tmp_path / "out"), str(path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key,value,message", [
    ("collective_latency", "5 GB", "collective_latency: '5 GB' is not a time; use a unit like"),
    ("in_switch_reduction", "20 GB/s", "in_switch_reduction: '20 GB/s' is not a time; use a unit like"),
])
def test_bad_collective_latencies_name_the_key(tmp_path, gpt_case, capsys, key, value, message) -> None:
    case = dict(gpt_case)
    dims = [dict(d) for d in case["network"]["dimensions"]]
    dims[0][key] = value
    case["network"] = {**case["network"], "dimensions": dims}
    code, err = _run(tmp_path, case, capsys)
    assert code == 2 and message in err and len(err.splitlines()) == 1


def test_virtual_stages_alone_select_the_interleaved_schedule(gpt_case) -> None:
    """A virtual pipeline size implies the interleaved schedule (Megatron-LM infers it from
    --num-layers-per-virtual-pipeline-stage); before, the key was kept and silently priced as 1F1B."""
    par = {**gpt_case["parallelism"], "pp": 4, "dp": 1, "tp": 8, "virtual_stages": 2}
    case = resolve_case({**gpt_case, "parallelism": par}, "case.yaml")
    assert case.parallelism.schedule == "interleaved" and case.parallelism.chunks_per_stage == 2
    with pytest.raises(SpecError, match="with schedule '1f1b' and pp 4; allowed: >= 2 with schedule 'interleaved'"):
        resolve_case({**gpt_case, "parallelism": {**par, "schedule": "1f1b"}}, "case.yaml")


def test_inference_virtual_stages_name_the_key_written(gpt_case) -> None:
    """Inference runs no interleaved schedule, so virtual_stages alone are not read as asking for one: the
    refusal names virtual_stages, the key the user wrote, not a schedule they did not."""
    case = {**gpt_case, "workload": dict(mode="inference", prompt_tokens=128, output_tokens=16, batch=1),
            "parallelism": {"tp": 8, "pp": 8, "dp": 1, "virtual_stages": 2}}
    with pytest.raises(SpecError, match=r"parallelism\.virtual_stages: 2 model chunks per stage with schedule '1f1b'"):
        resolve_case(case, "case.yaml")

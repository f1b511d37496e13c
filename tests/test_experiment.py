"""Sweep expansion: factorizations, crossing, invalid rows kept with reasons, stable case ids."""
import dataclasses
import math

import yaml

from rapidllm.spec.case import resolve_case
from rapidllm.spec.experiment import expand, factorizations, load_experiment
from conftest import ROOT


def _ordered_factorizations(n_twos: int, parts: int) -> int:
    """Ways to write 2**n_twos as an ordered product of `parts` factors: C(n + parts - 1, parts - 1)."""
    return math.comb(n_twos + parts - 1, parts - 1)


def test_factorization_count_closed_form() -> None:
    assert len(list(factorizations(64, ("dp", "tp", "pp"), {}))) == _ordered_factorizations(6, 3)
    assert len(list(factorizations(1024, ("dp", "tp", "pp", "cp"), {}))) == _ordered_factorizations(10, 4)
    bounded = list(factorizations(64, ("dp", "tp", "pp"), {"tp": [1, 8]}))
    assert len(bounded) == sum(7 - a for a in range(4))
    assert all(math.prod(f.values()) == 64 for f in bounded)


def test_llama_layouts_keep_invalid_rows_with_reasons() -> None:
    exp = load_experiment(ROOT / "config" / "experiments" / "llama70b-layouts.yaml")
    rows = expand(exp)
    assert len(rows) == 2 * 22
    # pp 32 and 64 split 80 layers unevenly (3/2 and 2/1 layers per stage): valid layouts now
    assert all(r["status"] == "ok" for r in rows)
    ok_ids = [r["case_id"] for r in rows if r["status"] == "ok"]
    assert len(set(ok_ids)) == len(ok_ids)
    # interleaving with 2 chunks per stage: pp 64 x 2 = 128 chunks > 80 layers -> 1 layout x 2 recompute;
    # and a pipeline of one stage has no chunks to interleave (Megatron-LM refuses it) -> 4 layouts x 2
    interleaved = dataclasses.replace(exp, cross={**exp.cross, "parallelism.schedule": ["interleaved"],
                                                  "parallelism.virtual_stages": [2]})
    invalid = [r for r in expand(interleaved) if r["status"] == "invalid"]
    too_many = [r for r in invalid if "pp x virtual_stages = 128 exceeds the 80 layer slots" in r["reason"]]
    one_stage = [r for r in invalid if "parallelism.virtual_stages: 2 model chunks per stage with schedule "
                 "'interleaved' and pp 1" in r["reason"]]
    assert len(too_many) == 2 and len(one_stage) == 8 and len(invalid) == 10


def test_case_id_is_stable_and_ignores_the_label(gpt_case) -> None:
    a = resolve_case(gpt_case, "a.yaml")
    b = resolve_case({**gpt_case, "name": "another label"}, "b.yaml")
    c = resolve_case({**gpt_case, "parallelism": {**gpt_case["parallelism"], "recompute": "full"}}, "c.yaml")
    assert a.case_id == b.case_id != c.case_id


def test_named_and_inline_specs_give_the_same_case(gpt_case) -> None:
    inline_model = yaml.safe_load((ROOT / "config" / "models" / "gpt-175b.yaml").read_text())
    inline_model["name"] = "gpt-175b"
    assert resolve_case({**gpt_case, "model": inline_model}, "x").case_id == resolve_case(gpt_case, "x").case_id


def test_files_named_by_path_are_pipeline_inputs(tmp_path) -> None:
    """Review 17, finding 3: `load_experiment` inlines a model, device or fabric named by path, so only the
    paths it records (`Experiment.spec_files`) tell the pipeline (workflow/rules/common.smk `study_inputs`)
    to rerun when such a file changes: outside the project root absolute, inside it relative to the root."""
    from rapidllm.spec.experiment import referenced_spec_files

    (tmp_path / "devs").mkdir()
    (tmp_path / "devs" / "x.yaml").write_text((ROOT / "config" / "hardware" / "h100-sxm5-80gb.yaml").read_text())
    (tmp_path / "net.yaml").write_text((ROOT / "config" / "networks" / "dgx-h100.yaml").read_text())
    exp = {"name": "bypath", "base": {"model": "llama3.1-8b", "hardware": "devs/x.yaml", "network": "dgx-h100",
                                      "workload": {"mode": "inference", "batch": 1, "prompt_tokens": 8,
                                                   "output_tokens": 2}},
           "cross": {"network": ["dgx-h100", "net.yaml"]}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    loaded = load_experiment(tmp_path / "exp.yaml")
    assert loaded.base["hardware"]["name"] == "h100-sxm5-80gb"           # inlined: the mapping no longer says
    assert referenced_spec_files(loaded) == sorted([str(tmp_path / "devs" / "x.yaml"), str(tmp_path / "net.yaml"),
                                                    "config/models/llama3.1-8b.yaml",
                                                    "config/networks/dgx-h100.yaml"])
    inside = dataclasses.replace(loaded, spec_files=(ROOT / "examples" / "devs" / "x.yaml",))
    assert "examples/devs/x.yaml" in referenced_spec_files(inside)


def test_a_spec_file_rewritten_with_its_old_mtime_is_read_again(tmp_path) -> None:
    """Review 17, finding 8: the parsed-file cache was keyed on the modification time alone, so a file
    replaced by `cp -p`/rsync (or rewritten within the timestamp granularity) kept its old spec in a
    long-lived process. Same size, same mtime, new content: the new value is read."""
    import os

    from rapidllm.spec.named import read_spec_file

    text = (ROOT / "config" / "hardware" / "h100-sxm5-80gb.yaml").read_text()
    path = tmp_path / "x.yaml"
    path.write_text(text)
    assert read_spec_file("hardware", "x.yaml", tmp_path, "t", "hardware")["hbm_bandwidth"] == "3.35 TB/s"
    old = os.stat(path)
    path.write_text(text.replace("hbm_bandwidth: 3.35 TB/s", "hbm_bandwidth: 4.80 TB/s"))
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))           # as `cp -p` leaves it
    assert os.stat(path).st_mtime_ns == old.st_mtime_ns and os.stat(path).st_size == old.st_size
    assert read_spec_file("hardware", "x.yaml", tmp_path, "t", "hardware")["hbm_bandwidth"] == "4.80 TB/s"

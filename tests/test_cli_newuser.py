"""What a new user trips over on the command line (a newcomer's pass over README, docs/api.md, search.md and
cost.md): mistakes that must be one clear line and exit 2, and outputs that must not hide a result.

The refusals run through the bad-input harness of tests/test_bad_inputs.py (exit 2, nothing on stdout, no
traceback, no file written, the expected fragment in the message).
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bad_input_corpus import CASE, EXPERIMENT, SEARCH_SPEC, Bad, with_key
from conftest import ROOT
from rapidllm.cli import main
from test_bad_inputs import _check, _materialize

SWEEP_ARGS = ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.csv", "--quiet")
# Llama-3.1-70B trained on 8 A100-40GB with tp 1: 70B parameters cannot fit, so the memory model settles it
# before any simulation (a quick infeasible case on a device with a cost section).
INFEASIBLE = {"model": "llama3.1-70b", "hardware": "a100-sxm4-40gb", "network": "dgx-a100",
              "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8, "micro_batch": 1},
              "parallelism": {"dp": 8}}

REFUSED = [
    # jsonschema takes 8.0 as an integer; the case then carried a float (a "64.0 x GPU" world, its own case id)
    Bad("tp-written-as-float", ("predict", "{tmp}/case.yaml"), "parallelism.tp: 8.0 is not of type integer (write 8",
        "quantity", {"case.yaml": with_key(CASE, "parallelism.tp", 8.0)}),
    # a mode that matches no workload branch read as "unknown key(s) 'global_batch', ..." of the inference one
    Bad("mode-misspelt", ("predict", "{tmp}/case.yaml"),
        "workload.mode: 'train' is not allowed; allowed: training, inference", "message",
        {"case.yaml": with_key(CASE, "workload.mode", "train")}),
    # unknown names in an experiment made every row using them 'invalid', exit 0
    Bad("sweep-cross-hardware-typo", SWEEP_ARGS, "exp.yaml: cross.hardware.1: unknown hardware 'a100'", "message",
        {"exp.yaml": {**EXPERIMENT, "cross": {"hardware": ["a100-sxm4-80gb", "a100"]}}}),
    Bad("sweep-base-model-typo", SWEEP_ARGS, "exp.yaml: base.model: unknown model 'llama-2-7b'", "message",
        {"exp.yaml": with_key(EXPERIMENT, "base.model", "llama-2-7b")}),
    Bad("sweep-every-case-invalid", SWEEP_ARGS, "all 2 cases of the sweep are invalid: no table written", "message",
        {"exp.yaml": with_key(EXPERIMENT, "base.workload.global_batch", 0)}),
    # output paths are checked before the prediction (an unwritable --timeline was a traceback after it)
    Bad("timeline-under-a-file", ("predict", "{tmp}/case.yaml", "--timeline", "{tmp}/case.yaml/t.json"),
        "is not a directory", "file", {"case.yaml": CASE}),
    Bad("chakra-into-a-file", ("predict", "{tmp}/case.yaml", "--chakra", "{tmp}/case.yaml"), "is a file; give a folder",
        "file", {"case.yaml": CASE}),
    # a misspelt name: the list of known names, and the one that was meant
    Bad("hardware-short-name", ("predict", "{tmp}/case.yaml"), "(did you mean h100-sxm5-80gb?)", "message",
        {"case.yaml": with_key(CASE, "hardware", "h100")}),
    Bad("model-near-name", ("predict", "{tmp}/case.yaml"), "(did you mean gpt-175b", "message",
        {"case.yaml": with_key(CASE, "model", "gpt3-175b")}),
    Bad("model-longer-name", ("predict", "{tmp}/case.yaml"), "(did you mean mixtral-8x7b?)", "message",
        {"case.yaml": with_key(CASE, "model", "Mixtral-8x7B-Instruct")}),
    Bad("search-objective-of-other-mode", ("search", "{tmp}/s.yaml", "--quiet", "--out", "{tmp}/out"),
        "'ttft_s' does not apply to a training workload; allowed: mfu, step_time_s, time_to_train_s", "message",
        {"s.yaml": with_key(SEARCH_SPEC, "objective", "ttft_s")}),
    Bad("search-one-candidate-typo", ("search", "{tmp}/s.yaml", "--quiet", "--out", "{tmp}/out"),
        "/s.yaml: model: unknown model 'llama-2-7b'", "message",       # no "(model 0, hardware 0, network 0)"
        {"s.yaml": with_key(SEARCH_SPEC, "model", "llama-2-7b")}),
    Bad("key-misspelt", ("predict", "{tmp}/case.yaml"),
        "workload: unknown key(s) 'global_bacth' (did you mean global_batch?); allowed: global_batch,", "message",
        {"case.yaml": {**CASE, "workload": {"mode": "training", "seq_len": 2048, "global_bacth": 8}}}),
    Bad("inline-model-key", ("predict", "{tmp}/case.yaml"),   # was "model: (top level): unknown key(s) ..."
        "/case.yaml: model: unknown key(s) 'seq_max'; allowed: ", "message",
        {"case.yaml": with_key(CASE, "model", {"name": "m", "layers": 2, "hidden": 64, "heads": 4, "ffn": 256,
                                              "vocab": 1000, "seq_max": 4096})}),
    Bad("inline-hardware-nested-key", ("predict", "{tmp}/case.yaml"),
        "/case.yaml: hardware.utilization.compute: 0 is out of range", "quantity",
        {"case.yaml": with_key(CASE, "hardware.utilization", {"compute": 0, "hbm": 1, "network": 1})}),
    Bad("sweep-out-suffix", ("sweep", "{tmp}/exp.yaml", "--out", "{tmp}/o.txt", "--quiet"),
        "is not allowed; allowed: a path ending in .csv or .parquet", "file",
        {"exp.yaml": EXPERIMENT}),                         # a .txt table was written as parquet
    Bad("cost-of-inline-device-without-cost", ("predict", "{tmp}/case.yaml", "--cost"),
        "/case.yaml: hardware: cost: missing; hardware 'toy-gpu' has no cost section", "message", {"case.yaml": CASE}),
    Bad("rental-rate-zero", ("predict", "{tmp}/case.yaml", "--cost", "--usd-per-gpu-hour", "0"),
        "rapidllm predict: --usd-per-gpu-hour: 0; allowed: a finite rate > 0, in USD per GPU-hour", "message",
        {"case.yaml": CASE}),
    Bad("rental-rate-nan", ("predict", "{tmp}/case.yaml", "--cost", "--usd-per-gpu-hour", "nan"),
        "--usd-per-gpu-hour: nan; allowed: a finite rate > 0", "message", {"case.yaml": CASE}),
    Bad("rental-rate-without-cost", ("predict", "{tmp}/case.yaml", "--usd-per-gpu-hour", "2.5"),
        "--usd-per-gpu-hour: 2.5 without --cost; allowed: with --cost", "message", {"case.yaml": CASE}),
    # PyYAML reads 1.5e13 and 1e4 as strings (YAML 1.1 wants a dot and a signed exponent); a filter bound's
    # '7.0e10' is now read as a quantity (bytes), so the number keys show it
    Bad("yaml-exponent-as-text", ("search", "{tmp}/s.yaml", "--quiet", "--out", "{tmp}/out"),
        "train_tokens: '1.5e13' is not of type number (finite); YAML reads it as text: write 1.5e+13", "message",
        {"s.yaml": yaml.safe_dump(SEARCH_SPEC) + "objective: time_to_train_s\ntrain_tokens: 1.5e13\n"}),
    Bad("yaml-integer-exponent-as-text", ("predict", "{tmp}/case.yaml"),
        "workload.seq_len: '1e4' is not of type integer (finite); YAML reads it as text: write 10000", "message",
        {"case.yaml": yaml.safe_dump(CASE).replace("seq_len: 2048", "seq_len: 1e4")}),
    Bad("collective-network-typo", ("collective", "--network", "dgx", "--bytes", "1 GiB"),
        "rapidllm collective: --network: unknown network 'dgx'; known: dgx-a100", "message"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", REFUSED, ids=[b.id for b in REFUSED])
def test_refused(bad: Bad, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = _materialize(bad, tmp_path)
    before = set(tmp_path.rglob("*"))
    code = main(argv)
    captured = capsys.readouterr()
    _check(bad, code, captured.out, captured.err, tmp_path, before)


def test_cost_of_an_infeasible_case(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`--cost` on a case that does not fit kept no cost key at all; now the same keys as a feasible case,
    the hourly rates priced and everything that needs a time null (JSON) or n/a (table), never 'nan'."""
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(INFEASIBLE))
    assert main(["predict", str(path), "--cost", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "infeasible" and out["step_time_s"] is None
    assert out["gpus"] == 8
    assert math.isclose(out["usd_per_hour"], 8 * out["usd_per_gpu_hour"], rel_tol=1e-12)
    assert out["usd_per_step"] is None and out["usd_per_million_tokens"] is None
    assert main(["predict", str(path), "--cost"]) == 0
    text = capsys.readouterr().out
    assert "infeasible" in text and "nan" not in text
    assert any(line.split() == ["usd_per_step", "n/a"] for line in text.splitlines())


def test_search_table_shows_every_group(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The terminal table cut the ranked rows to the first k overall, so the best of a larger GPU count (or of
    a second candidate) never showed; and two layouts differing only in sp or the attention kernel printed as
    identical rows. Every kept row now shows, with those axes."""
    spec = {**SEARCH_SPEC, "gpus": [2, 4], "space": {"recompute": ["full"], "micro_batch": [1], "zero": [1]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["search", str(path), "--quiet", "--top", "1", "--out", str(tmp_path / "o")]) == 0
    lines = capsys.readouterr().out.splitlines()
    for col in ("sp", "attention_impl", "step_time_s", "peak_GiB"):
        assert col in lines[0].split()
    gpus = [re.search(r"/ dgx-a100\s+(\d+)", line).group(1) for line in lines[1:3]]
    assert sorted(gpus) == ["2", "4"]                  # --top 1: the best of each GPU count
    assert lines[3].startswith("layouts ")


def test_broken_pipe_is_quiet(tmp_path: Path) -> None:
    """`rapidllm collective ... | head -1` printed a BrokenPipeError traceback once the reader had left."""
    proc = subprocess.Popen([sys.executable, "-m", "rapidllm.cli", "collective", "--network", "dgx-a100", "--bytes",
                             "64 MiB", "--ranks", "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                  # the reader leaves before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141)
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_cost_columns_of_a_predict_many_frame() -> None:
    """docs/cost.md's `add_cost_columns(predict_many(cases), cases=cases)` with the YAML paths predict_many
    took, or without them (the frame has hardware, world and mode columns); a frame without those and
    without `cases` is a clear ValueError, not a KeyError."""
    from rapidllm import cost, predict_many

    cases = [str(ROOT / "examples/gpt175b-tp8-pp8.yaml"), INFEASIBLE]
    df = predict_many(cases)
    priced = cost.add_cost_columns(df, cases=cases)
    assert priced.gpus[0] == 64 and priced.gpus[1] != priced.gpus[1]    # the infeasible row: NaN
    assert math.isclose(priced.usd_per_step[0], df.step_time_s[0] * 64 * priced.usd_per_gpu_hour[0] / 3600,
                        rel_tol=1e-12)
    # a predict_many frame names its device, world and mode: priced alike without cases=
    pd.testing.assert_frame_equal(cost.add_cost_columns(df), priced)
    with pytest.raises(ValueError, match="needs cases="):
        cost.add_cost_columns(df.drop(columns=["hardware", "world"]))


def test_header_names_the_variant(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The case id names the case, not the flags: a baseline or what-if run says so in its header line."""
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(INFEASIBLE))
    assert main(["predict", str(path), "--engine", "baseline"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("training [engine baseline]")
    assert main(["predict", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("training")


def test_throughput_reads_as_a_number(capsys: pytest.CaptureFixture) -> None:
    """GPT-3 175B on 64 A100s trains some ten thousand tokens/s: printed with thousands separators, not as
    1.016e+04, and equal to the JSON value rounded."""
    example = str(ROOT / "examples/gpt175b-tp8-pp8.yaml")
    assert main(["predict", example, "--json"]) == 0
    rate = json.loads(capsys.readouterr().out)["tokens_per_s"]
    assert main(["predict", example]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("throughput"))
    assert "e+" not in line and line.split()[-2] == f"{rate:,.0f}"


def test_search_by_cost_as_docs_cost_md_shows(tmp_path: Path) -> None:
    """docs/cost.md's objective of one's own: on one device, $ per million tokens x tokens/s per GPU is the
    device's $/GPU-hour / 3600 x 1e6 on every ranked row, and the order is that of tokens/s per GPU."""
    import dataclasses
    import functools

    import pandas as pd

    from rapidllm import search
    from rapidllm.cost import hardware_cost, price_prediction
    from rapidllm.search import load_search
    from rapidllm.search.objectives import Objective

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SEARCH_SPEC, "gpus": [2, 4], "top": 3,
                                    "space": {"recompute": ["full"], "micro_batch": [1], "zero": [1]}}))
    device_cost = functools.cache(hardware_cost)
    usd = Objective("usd_per_million_tokens", "min", group_level=True,
                    derive=lambda rec, case: price_prediction(case, rec, device_cost(case.hardware.name))
                    ["usd_per_million_tokens"])
    df = search(dataclasses.replace(load_search(path), objective=usd))
    rate = hardware_cost(SEARCH_SPEC["hardware"]).operating.usd_per_gpu_hour
    per_gpu = df.tokens_per_s / df.gpus
    for got in df.usd_per_million_tokens * per_gpu:
        assert math.isclose(got, rate / 3600 * 1e6, rel_tol=1e-9)
    for _, group in df.groupby("gpus"):
        assert list(group.usd_per_million_tokens) == sorted(group.usd_per_million_tokens)
    # the spec's own `objective: {column: usd_per_million_tokens}` (refused before, user trial 3 P7) ranks the same
    spec = yaml.safe_load(path.read_text())
    column = {"column": "usd_per_million_tokens", "direction": "min"}
    pd.testing.assert_frame_equal(search({**spec, "objective": column}), df, check_like=True)
    rented = search({**spec, "objective": column, "usd_per_gpu_hour": 2.49})      # a rental rate of one's own
    for got in rented.usd_per_million_tokens * rented.tokens_per_s / rented.gpus:
        assert math.isclose(got, 2.49 / 3600 * 1e6, rel_tol=1e-9)


def test_version(capsys: pytest.CaptureFixture) -> None:
    """`rapidllm --version` prints pyproject.toml's version (a user's first question in a bug report)."""
    import tomllib

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out == f"rapidllm {version}\n"


def test_cost_of_an_inline_device(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`--cost` on a case whose hardware is an inline mapping read config/hardware/NAME.yaml and failed
    ("pass hardware_cost(mapping)", which the command line cannot); it now prices the mapping's own
    `cost:` section: the H100's section gives the H100's package cost."""
    from rapidllm import cost

    h100 = yaml.safe_load((ROOT / "config/hardware/h100-sxm5-80gb.yaml").read_text())
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(with_key(CASE, "hardware.cost", h100["cost"])))
    assert main(["predict", str(path), "--cost", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["package_usd"] == cost.package_cost(cost.hardware_cost("h100-sxm5-80gb").package).package_usd


def test_cost_of_a_tweaked_copy_of_a_config_device(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An inline copy of a config device without its `cost:` (say, more HBM) that keeps the device's name is
    priced as that device; with a name of its own and no `cost:` it is refused (the corpus case above)."""
    from rapidllm import cost

    a100 = yaml.safe_load((ROOT / "config/hardware/a100-sxm4-80gb.yaml").read_text())
    a100.pop("cost")
    a100["hbm_capacity"] = "160 GiB"
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(dict(CASE, hardware=a100)))
    assert main(["predict", str(path), "--cost", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["package_usd"] == cost.package_cost(cost.hardware_cost("a100-sxm4-80gb").package).package_usd


def test_infeasible_case_says_what_to_change(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An infeasible case printed only the bytes: the table now names the largest component and its lever
    (here the optimizer state of 70B parameters without ZeRO over dp 8), and points at `rapidllm search`."""
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(INFEASIBLE))
    assert main(["predict", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    parts = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer state",
             "activations": "activations", "kv_cache": "KV cache"}
    largest = parts[max(parts, key=lambda k: out[f"{k}_bytes"])]
    assert main(["predict", str(path)]) == 0
    hint = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("hint:"))
    assert f"the largest part is the {largest}: " in hint and "rapidllm search" in hint
    assert largest != "optimizer state" or "ZeRO 1-3 (parallelism.zero) shards it over dp" in hint


def test_one_rank_collective_has_no_bandwidth(capsys: pytest.CaptureFixture) -> None:
    """A one-rank all-reduce takes no time: the text said 'algbw inf GB/s' where --json says null."""
    args = ["collective", "--network", "dgx-a100", "--op", "all_reduce", "--bytes", "1GiB", "--ranks", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "inf" not in out and "algbw              n/a" in out
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["algbw_bytes_per_s"] is None


def test_a_rental_rate_prices_a_device_without_cost_inputs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """User trial #7: a cloud $/GPU-hour without inlining the device. The toy GPU has no cost section:
    refused with `--cost` alone, priced at the rate with `--usd-per-gpu-hour`, and what a rent does not
    say (energy, capital, package, per watt) is null."""
    case = {**CASE, "parallelism": {"tp": 2}}           # fits on two toy GPUs
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(case))
    assert main(["predict", str(path), "--cost"]) == 2
    assert "--usd-per-gpu-hour RATE" in capsys.readouterr().err
    assert main(["predict", str(path), "--cost", "--usd-per-gpu-hour", "2.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok", out["reason"]
    assert out["cost_basis"] == "rental" and out["usd_per_gpu_hour"] == 2.5 and out["usd_per_hour"] == 5.0
    tokens = CASE["workload"]["global_batch"] * CASE["workload"]["seq_len"]
    assert out["usd_per_step"] == pytest.approx(5.0 * out["step_time_s"] / 3600)
    assert out["usd_per_million_tokens"] == pytest.approx(out["usd_per_step"] / tokens * 1e6)
    assert all(out[k] is None for k in ("energy_usd_per_gpu_hour", "capital_usd_per_gpu_hour",
                                        "tokens_per_s_per_watt", "package_usd"))


def test_cost_table_prints_plain_numbers_and_the_basis(capsys: pytest.CaptureFixture) -> None:
    """`tokens_per_usd 5.38911e+06` read badly; the basis of $/GPU-hour (GPU alone or a server share) is
    printed because the shipped devices differ in it (docs/cost.md)."""
    from rapidllm.cli.predict import _number
    assert _number(5389110.4) == "5,389,110" and _number(0.909338) == "0.9093" and _number(math.nan) == "n/a"
    assert main(["predict", str(ROOT / "examples" / "gpt175b-tp8-pp8.yaml"), "--cost"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not [line for line in lines if re.search(r"\de[+-]\d", line)]
    basis = next(line for line in lines if line.split()[0] == "cost_basis")
    assert basis.split()[1] == "system_share"          # A100: DGX A100 list price / 8


def test_readme_case_example_loads_with_its_commented_faults() -> None:
    """User trial #8: the README's case lists `faults`; uncommented, its example fault names a real cable of
    the example's fabric, and every top-level case key is named in the example."""
    from rapidllm.spec.case import resolve_case
    block = (ROOT / "README.md").read_text().split("A case (names resolve", 1)[1].split("```yaml\n", 1)[1]
    block = block.split("```", 1)[0]
    faults = next(line for line in block.splitlines() if line.startswith("# faults:"))
    case = yaml.safe_load(block) | yaml.safe_load(faults[2:].split("  #")[0])
    loaded = resolve_case(case, "README.md")
    assert len(loaded.network.faults) == 1
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "case.schema.yaml").read_text())
    assert not [k for k in schema["properties"] if k != "name" and not re.search(rf"\b{k}\b", block)]


def test_sweep_prints_a_summary_of_its_rows(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """User trial #10: `rapidllm sweep` printed only the output path. It now prints each row's headline numbers
    (those of the row's mode only: a sweep table holds 0 for TTFT of training) before the path, equal to
    the file's."""
    import pandas as pd
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(EXPERIMENT))
    assert main(["sweep", str(path), "--out", str(tmp_path / "o.csv"), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = pd.read_csv(tmp_path / "o.csv")
    assert lines[0].split()[:4] == ["label", "status", "step/e2e", "s"] and "TTFT" not in lines[0]
    assert len(lines) == len(table) + 2 and lines[-1].startswith(f"{len(table)} cases -> ")
    at = lines[0].index("status")
    assert set(table.status) == {"ok", "infeasible"}         # the corpus experiment: tp 1 does not fit
    for line, (_, row) in zip(lines[1:], table.iterrows()):
        assert line[at:].split()[0] == row.status
        cells = line[at:].split()[1:]
        assert float(cells[-1]) == pytest.approx(row.peak_memory_bytes / 2**30, rel=5e-4)
        if row.status == "ok":
            step, rate, mfu = (float(c.replace(",", "")) for c in cells[:3])
            assert step == pytest.approx(row.step_time_s, rel=5e-4) and mfu == pytest.approx(100 * row.mfu, rel=5e-4)
            assert rate == pytest.approx(row.tokens_per_s, abs=0.5 if rate >= 1000 else rate * 5e-4)
        else:
            assert len(cells) == 1


def test_sweep_summary_keeps_to_its_rows_and_modes() -> None:
    import pandas as pd

    from rapidllm.cli.sweep import LABEL_WIDTH, summary
    rows = [{"label": f"case {i}" + "x" * 100 * (i == 0), "status": "ok", "mode": "inference", "step_time_s": 2.0,
             "ttft_s": 0.0123, "itl_s": 0.004, "tokens_per_s": 12345.6, "mfu": 0.0, "peak_memory_bytes": 2**33}
            for i in range(25)]
    lines = summary(pd.DataFrame(rows), rows=20)
    assert len(lines) == 22 and lines[-1] == "... 5 more rows in the table"
    assert "MFU" not in lines[0] and "TTFT ms" in lines[0]
    assert lines[2].split()[-5:] == ["2", "12.3", "4", "12,346", "8"]
    assert len(lines[1].split("  ")[0]) == LABEL_WIDTH and "..." in lines[1]


def test_a_directory_is_named_as_given(tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture) -> None:
    """User trial 3 (P9): `rapidllm predict /tmp/trial3/bad` run inside that folder said '.: is a directory'."""
    monkeypatch.chdir(tmp_path)
    assert main(["predict", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path}: is a directory; a spec file must be a file"
    assert main(["predict", "."]) == 2
    assert capsys.readouterr().err.startswith(".: is a directory")

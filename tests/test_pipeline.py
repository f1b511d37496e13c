"""The Snakemake pipeline end to end in a scratch copy: outputs, reruns only what changed, determinism."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT

TINY = {
    "name": "tiny",
    "base": {"model": "llama2-7b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "bf16",
             "workload": {"mode": "inference", "prompt_tokens": 128, "output_tokens": 16, "batch": 1}},
    "cross": {"parallelism.tp": [1, 2, 3, 4]},
    "shard_size": 2,
}
# a best-layout search small enough for the test: Llama-2-7B inference on 1 or 2 H100s
TINY_SEARCH = {"name": "tiny-search", "model": "llama2-7b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
               "workload": {"mode": "inference", "prompt_tokens": 128, "output_tokens": 16}, "gpus": [1, 2],
               "space": {"attention_impl": ["flash"]}, "objective": "e2e_latency_s", "top": 2}


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAPIDLLM_ROOT": str(workdir)}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "small.yaml", *args]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("pipeline")
    for item in ("Snakefile", "environment.yml", "workflow", "config", "validation", "lib", "profiles", "scripts",
                 "examples"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / item)
    (work / "config" / "experiments" / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    (work / "config" / "searches" / "tiny-search.yaml").write_text(yaml.safe_dump(TINY_SEARCH))
    (work / "small.yaml").write_text(yaml.safe_dump({"experiments": ["tiny"], "suites": ["megatron_gpt_a100"],
                                                     "searches": ["tiny-search"], "search_shards": 2}))
    run = _snakemake(work)
    assert run.returncode == 0, run.stderr[-3000:]
    return work


def test_outputs_written(workdir: Path) -> None:
    summary = pd.read_csv(workdir / "results" / "tiny" / "summary.csv")
    assert list(summary.status) == ["ok", "ok", "invalid", "ok"]   # tp 3 does not divide 32 heads
    assert "does not divide heads 32" in summary.reason[2]
    assert (summary.dropna(subset=["ttft_s"]).ttft_s > 0).all()
    errors = pd.read_csv(workdir / "results" / "validation" / "errors.csv")
    assert set(errors.query("scope == 'suite'").name) == {"megatron_gpt_a100"}
    assert set(errors.query("scope == 'overall'").split) == {"calibration", "held_out", "all"}
    assert (workdir / "results" / "figures" / "megatron_gpt_a100.png").stat().st_size > 10_000
    assert len(list((workdir / "results" / "tiny" / "sim").glob("*.parquet"))) == 2
    ranked = pd.read_csv(workdir / "results" / "search" / "tiny-search" / "ranked.csv")
    assert list(ranked["rank"]) == list(range(1, len(ranked) + 1)) and ranked.e2e_latency_s.is_monotonic_increasing
    assert (workdir / "results" / "search" / "tiny-search" / "pareto.png").stat().st_size > 10_000


def test_nothing_to_do_after_a_run(workdir: Path) -> None:
    run = _snakemake(workdir, "-n")
    assert "Nothing to be done" in run.stdout + run.stderr


def test_hardware_change_reruns_only_its_studies(workdir: Path) -> None:
    hw = workdir / "config" / "hardware" / "h100-sxm5-80gb.yaml"
    original = hw.read_text()
    hw.write_text(original.replace("hbm_bandwidth: 3.35 TB/s", "hbm_bandwidth: 3.0 TB/s"))
    try:
        out = _snakemake(workdir, "-n").stdout
    finally:
        hw.write_text(original)
    studies = set(re.findall(r"wildcards: exp=([\w\-]+)", out))
    assert studies == {"tiny"}, out[-2000:]               # megatron_gpt_a100 runs on A100s: untouched
    assert "config/hardware/h100-sxm5-80gb.yaml" in out   # the reason names the changed file
    jobs = set(re.findall(r"^rule (\w+):", out, flags=re.M))
    # they price H100 rows (validate_collectives: the H100 nccl-tests table at the H100's network constant)
    h100_components = {"validate_gemm", "validate_memory", "validate_collectives", "figure_component"}
    searches = {"search_shard", "search_merge"}                       # the H100 search reruns too
    assert jobs == {"expand", "price", "memory", "trace", "simulate", "collect", "all"} | h100_components | searches


# Measured wall times are the only outputs that legitimately differ between runs (ns-3 vs our simulator).
WALL_TIME_OUTPUTS = {"network_ns3.csv", "network_ns3.png"}


def test_rerun_is_byte_identical(workdir: Path) -> None:
    before = {p: p.read_bytes() for p in (workdir / "results").rglob("*")
              if p.suffix in (".csv", ".parquet", ".npz", ".png", ".pdf") and p.name not in WALL_TIME_OUTPUTS}
    run = _snakemake(workdir, "--forceall")
    assert run.returncode == 0, run.stderr[-3000:]
    after = {p: p.read_bytes() for p in before}
    changed = [str(p.relative_to(workdir)) for p in before if before[p] != after[p]]
    assert changed == []


def test_lint_is_clean(workdir: Path) -> None:
    run = _snakemake(workdir, "--lint")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def test_slurm_dry_run_needs_no_slurm(workdir: Path) -> None:
    run = _snakemake(workdir, "--executor", "slurm", "--jobs", "100", "-n", "--forceall")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "rule simulate:" in run.stdout


def test_report_builds(workdir: Path) -> None:
    run = _snakemake(workdir, "--report", "results/report.html", "--report-metadata", "workflow/report/metadata.yaml")
    assert run.returncode == 0, run.stderr[-2000:]
    html = (workdir / "results" / "report.html").read_text()
    assert len(html) > 100_000
    # it opens on the description and the headline accuracy (metadata), not on the workflow graph
    assert '"overall MAPE (%), all rows": ' in html and "Start with" in html


def test_atomic_write_mode_as_a_plain_file(tmp_path) -> None:
    """A table written through the temporary file gets the permissions a plain file gets (the umask's), not
    mkstemp's owner-only 0600: a sweep's CSV on a shared cluster folder was unreadable to the group."""
    import stat
    from rapidllm.pipeline.io import write_table
    plain = tmp_path / "plain.csv"
    plain.write_text("a\n1\n")
    write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.csv")
    assert stat.S_IMODE((tmp_path / "t.csv").stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


def test_atomic_write_leaves_the_umask_alone(tmp_path, monkeypatch) -> None:
    """The mode comes from creating the temporary file 0666 under the umask, not from reading the umask: that
    means setting it process-wide, and a file another thread created in between was world-writable."""
    import os
    from rapidllm.pipeline.io import write_table

    def refuse(mask: int) -> int:
        raise AssertionError("atomic_write set the umask")
    monkeypatch.setattr(os, "umask", refuse)
    write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.csv")
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"] and (tmp_path / "t.csv").read_text() == "a\n1\n"


@pytest.mark.parametrize("config, said", [
    ("searches=[nope]", "config/config.yaml: searches: unknown name 'nope'; known: "),
    ("searches=[bad]", "config/searches/bad.yaml: objective: 'bogus' is not allowed"),
])
def test_a_bad_search_in_the_config_is_one_line_before_any_job(tmp_path: Path, config: str, said: str) -> None:
    """An unknown search name or a bad search spec was found only while building the DAG, as an
    InputFunctionException with a traceback (or, for a bad spec, by the shard jobs themselves)."""
    for item in ("Snakefile", "environment.yml", "workflow", "config", "validation", "profiles", "examples"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    (tmp_path / "config" / "searches" / "bad.yaml").write_text(yaml.safe_dump({**TINY_SEARCH, "objective": "bogus"}))
    env = {**os.environ, "RAPIDLLM_ROOT": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--config", config], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and said in run.stdout + run.stderr, run.stderr[-2000:]
    assert "InputFunctionException" not in run.stderr and not (tmp_path / "results").exists()


def test_a_search_is_named_not_a_path() -> None:
    from rapidllm.spec.errors import SpecError
    from rapidllm.spec.schema import validate

    with pytest.raises(SpecError, match="searches.0: '../examples/search-llama70b' is not allowed"):
        validate({"experiments": [], "suites": [], "searches": ["../examples/search-llama70b"]}, "config", "c")

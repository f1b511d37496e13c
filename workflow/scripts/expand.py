"""Snakemake adapter: study YAML -> results/{exp}/cases.parquet."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.stages import run_expand
from rapidllm.spec.experiment import load_experiment
from rapidllm.validate.suites import load_suite

p = snakemake.params  # noqa: F821
exp = load_suite(p.study).experiment if p.kind == "suite" else load_experiment(p.study, p.shard_size)
run_expand(exp, snakemake.output[0])  # noqa: F821

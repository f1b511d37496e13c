"""Snakemake adapter: all shards of a study -> summary.parquet and summary.csv."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.stages import run_collect

run_collect(snakemake.input.cases, list(snakemake.input.sims), snakemake.output.parquet, snakemake.output.csv)  # noqa: F821

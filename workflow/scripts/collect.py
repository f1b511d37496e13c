"""Snakemake adapter: all shards of a study -> summary.parquet and summary.csv."""
from rapidllm.pipeline.stages import run_collect

run_collect(snakemake.input.cases, list(snakemake.input.sims), snakemake.output.parquet, snakemake.output.csv)  # noqa: F821

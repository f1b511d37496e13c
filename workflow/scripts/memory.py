"""Snakemake adapter: one shard of cases -> memory per rank and feasibility."""
from rapidllm.pipeline.stages import run_memory

run_memory(snakemake.input.cases, int(snakemake.wildcards.shard), snakemake.output[0])  # noqa: F821

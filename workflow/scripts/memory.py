"""Snakemake adapter: one shard of cases -> memory per rank and feasibility."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.stages import run_memory

run_memory(snakemake.input.cases, int(snakemake.wildcards.shard), snakemake.output[0])  # noqa: F821

"""Snakemake adapter: feasible cases of a shard -> communication graph nodes."""
from rapidllm.pipeline.stages import run_trace

run_trace(snakemake.input.cases, snakemake.input.memory, int(snakemake.wildcards.shard), snakemake.output[0])  # noqa: F821

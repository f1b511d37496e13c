"""Snakemake adapter: feasible cases of a shard -> communication graph nodes."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.stages import run_trace

run_trace(snakemake.input.cases, snakemake.input.memory, int(snakemake.wildcards.shard), snakemake.output[0])  # noqa: F821

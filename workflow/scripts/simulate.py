"""Snakemake adapter: prices + memory + graph of a shard -> step time, latency and breakdown."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.stages import run_simulate

i = snakemake.input  # noqa: F821
run_simulate(i.cases, i.ops, i.memory, i.graphs, int(snakemake.wildcards.shard), snakemake.output[0])  # noqa: F821

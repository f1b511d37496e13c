"""Snakemake adapter: one shard of cases -> operator prices."""
from rapidllm.pipeline.stages import run_price

run_price(snakemake.input.cases, int(snakemake.wildcards.shard), snakemake.output[0])  # noqa: F821

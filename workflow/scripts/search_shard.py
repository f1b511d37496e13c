"""Snakemake adapter: one shard of a best-layout search -> its ranked rows (parquet) and counts (JSON)."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.search import run_search_shard

run_search_shard(snakemake.params.spec, int(snakemake.wildcards.shard), int(snakemake.params.shards),  # noqa: F821
                 snakemake.output.table, snakemake.output.counts)  # noqa: F821

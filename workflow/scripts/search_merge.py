"""Snakemake adapter: a search's shards -> ranked.csv / .parquet, counts.json and the Pareto figure."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.search import run_search_merge

run_search_merge(snakemake.params.spec, list(snakemake.input.tables), list(snakemake.input.counts),  # noqa: F821
                 snakemake.params.out)  # noqa: F821

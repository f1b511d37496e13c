"""Snakemake adapter: memory model vs nanotron and llm-foundry runs."""
from pathlib import Path

from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.components import run_memory_validation  # noqa: E402

run_memory_validation(Path(snakemake.input.refs[0]).parent, snakemake.output.rows, snakemake.output.summary)  # noqa: F821

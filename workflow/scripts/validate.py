"""Snakemake adapter: suite summary -> predicted vs measured per reference row."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.suite_stages import run_validate_suite

run_validate_suite(snakemake.input.suite, snakemake.input.summary, snakemake.output[0])  # noqa: F821

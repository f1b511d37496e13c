"""Snakemake adapter: suite summary -> predicted vs measured per reference row."""
from rapidllm.pipeline.validation import run_validate_suite

run_validate_suite(snakemake.input.suite, snakemake.input.summary, snakemake.output[0])  # noqa: F821

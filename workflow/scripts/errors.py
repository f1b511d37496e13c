"""Snakemake adapter: every suite's rows -> errors.csv (MAPE per suite and split, and overall)."""
from rapidllm.pipeline.validation import run_errors

run_errors(list(snakemake.input.suites), snakemake.output[0])  # noqa: F821

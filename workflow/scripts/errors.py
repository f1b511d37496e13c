"""Snakemake adapter: every suite's rows -> errors.csv (MAPE per suite and split, and overall)."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.suite_stages import run_errors

run_errors(list(snakemake.input.suites), snakemake.output[0])  # noqa: F821

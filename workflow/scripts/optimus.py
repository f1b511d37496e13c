"""Snakemake adapter: one Optimus-extension study (summaries -> comparison table(s) and figure(s))."""
from rapidllm.pipeline.io import log_to

log_to(snakemake.log[0])  # noqa: F821
from rapidllm.pipeline.optimus import run  # noqa: E402

run(snakemake.params.study, dict(snakemake.input), dict(snakemake.output))  # noqa: F821
